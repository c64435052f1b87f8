"""`OnlineDPOTrainer`: Online DPO (Guo et al. 2024, "Direct Language Model Alignment from Online
AI Feedback"), TRL's names.

    for phase in range(total_phases):           # the engine's phase (loop.py), verl's names
        batch = generate_sequences → compute_log_prob → compute_scores   # a pair per prompt from the CURRENT
                                                # policy; a judge's verdicts, if any, with the scores
        compute_advantages(batch)               # the winner of each pair: +1 chosen, −1 rejected, 0 undecided
        update_actor(batch)                     # DPO loss, minibatch ascent

No critic and no reward inside the loss: the preference is all the loss sees. With h the
policy's log-ratio margin over the reference's,

    h    = (log π(y_c) − log π(y_r)) − (log π_ref(y_c) − log π_ref(y_r))     (summed, masked log-probs)
    sigmoid (DPO):  loss = −log σ(β h)
    ipo:            loss = (h − 1/(2β))²

Layout: pairs are consecutive rows — the two completions of prompt i are rows 2i and 2i+1 of the
rollout (`make_rollout(num_generations=2)` is prompt-major). The reference's sequence log-probs
come from the rollout (`rollout.ref_logprobs`), so learning needs no second reference forward.

Pairs a judge cannot decide (−1) stay in the batch with weight 0 (`pair_weights`): every process
then runs the same minibatches and the same backward passes, which DDP's all-reduces need.

Logged with TRL's names and TRL's meanings (docs/fidelity.md): objective/kl is the mean over
completions of the SEQUENCE sum of log π_old − log π_ref, objective/entropy the mean of −Σ_t log π_old,
objective/scores the reward after the missing-EOS penalty. Masked: TRL's sums run over the padding
after EOS too. (The loop's rollout/kl_full_vocab is our own per-token, full-vocabulary number.)
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlhf_scratch.algorithms.online_dpo.args import OnlineDPOArgs
from rlhf_scratch.algorithms.online_dpo.loss import (
    calc_dpo_loss,
    implicit_reward_stats,
    rollout_objective_stats,
    select_chosen,
    select_chosen_by_judge,
)
from rlhf_scratch.core.memory import minibatch_rows
from rlhf_scratch.core.objectives import masked_mean, sequence_log_probs
from rlhf_scratch.core.timing import timed
from rlhf_scratch.engine import distributed as dist
from rlhf_scratch.engine.batch import Batch
from rlhf_scratch.engine.trainer import Trainer
from rlhf_scratch.reward.judges import Judge, make_judge
from rlhf_scratch.reward.tasks import RewardFn
from rlhf_scratch.rollout.phase import Rollout

# Logged by Online DPO's learning phase each phase, besides loop.SHARED_METRICS (TRL's names).
DPO_METRICS = (
    "loss/dpo",  # mean DPO loss over minibatches
    "rewards/chosen",  # implicit reward β (log π(y_c) − log π_ref(y_c)), mean
    "rewards/rejected",
    "rewards/margins",  # chosen − rejected implicit reward
    "rewards/accuracies",  # fraction of pairs whose chosen implicit reward is the larger
    "logps/chosen",  # summed log π of the chosen completions
    "logps/rejected",
    "objective/kl",  # mean over completions of Σ_t (log π_old − log π_ref) on kept tokens (TRL's)
    "objective/entropy",  # mean over completions of −Σ_t log π_old on kept tokens (TRL's)
    "objective/non_score_reward",  # −β · objective/kl (TRL's)
    "objective/rlhf_reward",  # mean of reward − β Σ_t (log π_old − log π_ref) (TRL's)
    "objective/scores",  # mean reward, after the missing-EOS penalty (TRL's)
    "objective/scores_margin",  # mean (chosen − rejected) reward over the decided pairs (what picked them)
    "val/contain_eos_token",  # fraction of completions that produced EOS
    "objective/beta",  # β of the DPO loss (the same name as every algorithm's)
    "judge/skipped",  # pairs the judge could not decide (-1) this phase, every rank's total (weight 0 in the loss)
    "charts/skipped_steps",  # optimizer steps skipped this phase for a non-finite loss or gradient
)


class OnlineDPOTrainer(Trainer):
    """Online DPO of `args.model`: the reward of `args.task` (or `reward_fn`), or a judge, picks winners."""

    METRICS = DPO_METRICS
    args: OnlineDPOArgs

    def __init__(self, args: OnlineDPOArgs, reward_fn: RewardFn | None = None, judge: Judge | None = None,
                 quiet: bool = False):
        super().__init__(args, reward_fn, quiet)
        self.judge = judge or make_judge(args.judge, args.direction, self.device)

    @staticmethod
    def generations(args) -> int:
        """G: a pair of completions of each prompt."""
        return 2

    def judge_pairs(self, rollout: Rollout) -> Rollout:
        """With a judge, its verdict on each of this process's pairs (`Rollout.verdicts`), asked once
        the completions are scored; without one, the reward picks (in `compute_advantages`)."""
        if self.judge is not None and rollout.verdicts is None:
            with timed("reward"):
                chosen, _, weights = select_chosen_by_judge(self.judge, rollout)
                first = torch.arange(0, len(rollout), 2, device=chosen.device)
                rollout.verdicts = torch.where(weights > 0, chosen - first, -1).repeat_interleave(2)
        return rollout

    def compute_advantages(self, batch: Batch) -> None:
        """The winner of every pair of the whole batch, as a per-row sign (`pair_advantages`): by
        reward (after the missing-EOS penalty), or by the judge's verdicts."""
        everyone = batch.everyone
        if everyone.verdicts is None:
            chosen, rejected = select_chosen(everyone.rewards)
            weights = torch.ones(len(chosen), device=chosen.device)
        else:
            first = torch.arange(0, len(everyone), 2, device=everyone.verdicts.device)
            verdicts = everyone.verdicts[first]
            second = verdicts == 1
            chosen, rejected = torch.where(second, first + 1, first), torch.where(second, first, first + 1)
            weights = (verdicts != -1).float()
        batch.advantages = pair_advantages(chosen, rejected, weights, len(everyone))

    def update_actor(self, batch: Batch) -> dict[str, float]:
        """num_iterations passes over this process's pairs in minibatches, each one ascent step on
        −loss; one scheduler step.

        Every rank runs the same minibatches (a judge's undecided pairs weigh 0, they are not
        dropped), and the loss of a step is normalised by the decided pairs of every rank, so
        that DDP's mean of the ranks' gradients is the gradient of Σ_decided ℓ / #decided over
        the global minibatch: what one process computes on all the pairs. A step with no decided
        pair on any rank is skipped on every rank. (That count is the one cross-process call left
        here: each rank draws its minibatches from its own RNG, so no gathered batch knows which
        pairs the other ranks hold in a given step.)"""
        args, rollout = self.args, batch.rollout
        chosen, rejected, weights = pairs_of(batch.local_advantages)
        ref_logps = sequence_log_probs(rollout.ref_logprobs, rollout.completion_mask)
        judged = batch.everyone.verdicts is not None  # else every pair is decided (by reward): nothing to read per step

        def objective(idx: Tensor) -> tuple[Tensor, dict[str, float | Tensor]] | None:
            c, r, w = chosen[idx], rejected[idx], weights[idx]
            decided = w.sum()
            decided_everywhere = dist.all_gather(decided.view(1)).sum()  # this step's decided pairs, all ranks
            if judged and decided_everywhere == 0:  # a read of the device: only a judge leaves pairs undecided
                return None  # the same on every rank: nobody steps
            logps = self.sequence_log_probs(rollout, torch.cat([c, r]))
            out = calc_dpo_loss(logps[: len(c)], logps[len(c):], ref_logps[c], ref_logps[r], args.beta, args.loss_type,
                                weights=w)
            # DDP averages the ranks' gradients: scale each rank's weighted mean by its share of the
            # decided pairs (× 1.0 exactly in one process)
            share = decided * batch.world_size / decided_everywhere
            if judged and decided == 0:  # this rank steps with the others; its diagnostics are over decided pairs only
                return -out.loss * share, {}
            keep = w > 0
            return -out.loss * share, {  # the optimizer ascends (maximize=True); read once a phase
                "loss/dpo": out.loss.detach(),
                **implicit_reward_stats(out.chosen_rewards, out.rejected_rewards, keep),
                "logps/chosen": masked_mean(logps[: len(c)].detach(), keep),
                "logps/rejected": masked_mean(logps[len(c):].detach(), keep),
            }

        pairs_per_minibatch = max(1, args.minibatch_size() // 2 // batch.world_size)  # this rank's share
        num_minibatches = len(chosen) // pairs_per_minibatch
        learned = self.ascend(minibatch_rows(len(chosen), num_minibatches, args.num_iterations), objective,
                              total=num_minibatches * args.num_iterations)
        every_chosen, every_rejected, every_weight = pairs_of(batch.advantages)
        stats = rollout_objective_stats(batch.everyone, every_chosen, every_rejected, every_weight, args.beta)
        return {**learned, **stats, "objective/beta": args.beta}


def pair_advantages(chosen: Tensor, rejected: Tensor, weights: Tensor, rows: int) -> Tensor:
    """A per-row sign of the pairs' outcome: +w on the chosen row, −w on the rejected (w = 0 for a
    pair the judge could not decide): Online DPO's advantage, what the batch carries to update_actor."""
    signs = torch.zeros(rows, device=weights.device)
    signs[chosen], signs[rejected] = weights, -weights
    return signs


def pairs_of(signs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """`pair_advantages` read back: the rows of the chosen and rejected completion of each pair (rows
    2i, 2i+1) and its weight (an undecided pair: first, second, weight 0, as `select_chosen_by_judge`)."""
    first = torch.arange(0, signs.shape[0], 2, device=signs.device)
    second = signs[first + 1] > 0
    return torch.where(second, first + 1, first), torch.where(second, first, first + 1), signs[first].abs()
