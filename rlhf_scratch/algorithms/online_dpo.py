"""`OnlineDPOTrainer`: Online DPO (Guo et al. 2024, "Direct Language Model Alignment from Online
AI Feedback"), TRL's names.

    for phase in range(total_phases):
        rollout = rollout_phase()       # two completions of each prompt from the CURRENT policy
        learning_phase(rollout)         # a reward model or a judge picks the winner; DPO loss

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

from typing import NamedTuple

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from rlhf_scratch.config import OnlineDPOArgs
from rlhf_scratch.core.memory import minibatch_rows
from rlhf_scratch.core.objectives import sequence_log_probs
from rlhf_scratch.engine import distributed as dist
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
    "beta",
    "judge/skipped",  # pairs the judge could not decide (-1) this phase, every rank's total (weight 0 in the loss)
    "charts/skipped_steps",  # optimizer steps skipped this phase for a non-finite loss or gradient
)


class DPOLoss(NamedTuple):
    """What `calc_dpo_loss` returns: the mean loss (with gradient) and the implicit rewards (without)."""

    loss: Float[Tensor, ""]
    chosen_rewards: Float[Tensor, " pairs"]
    rejected_rewards: Float[Tensor, " pairs"]


def calc_dpo_loss(
    policy_chosen_logps: Float[Tensor, " pairs"],
    policy_rejected_logps: Float[Tensor, " pairs"],
    ref_chosen_logps: Float[Tensor, " pairs"],
    ref_rejected_logps: Float[Tensor, " pairs"],
    beta: float,
    loss_type: str = "sigmoid",
    weights: Float[Tensor, " pairs"] | None = None,
) -> DPOLoss:
    """The DPO loss on summed, masked completion log-probs (MINIMISED), and the implicit rewards.

        h = (π_c − π_r) − (ref_c − ref_r)
        sigmoid:  ℓ = −log σ(β h)                  (F.logsigmoid: finite for |β h| in the thousands)
        ipo:      ℓ = (h − 1/(2β))²                (IPO's target margin instead of "as large as possible")
        loss = mean ℓ,  or with 0/1 `weights`:  Σ w ℓ / max(Σ w, 1)   (a pair of weight 0 adds nothing)
        implicit rewards: β (π_c − ref_c), β (π_r − ref_r)

    No length normalisation, as TRL's online trainer: the two completions of a pair share a
    prompt and a maximum length, and summed log-probs keep DPO's derivation exact (a shorter
    completion's higher log-prob is part of what the preference is about).
    """
    h = (policy_chosen_logps - policy_rejected_logps) - (ref_chosen_logps - ref_rejected_logps)
    if loss_type == "sigmoid":
        losses = -F.logsigmoid(beta * h)
    elif loss_type == "ipo":
        losses = (h - 1 / (2 * beta)) ** 2
    else:
        raise ValueError(f"loss_type: must be sigmoid or ipo; got {loss_type!r}")
    chosen_rewards = beta * (policy_chosen_logps - ref_chosen_logps).detach()
    rejected_rewards = beta * (policy_rejected_logps - ref_rejected_logps).detach()
    loss = losses.mean() if weights is None else (weights * losses).sum() / weights.sum().clamp(min=1)
    return DPOLoss(loss, chosen_rewards, rejected_rewards)


@torch.no_grad()
def implicit_reward_stats(chosen_rewards: Float[Tensor, " pairs"], rejected_rewards: Float[Tensor, " pairs"]) -> dict[str, float]:
    """TRL's diagnostics of the implicit rewards r = β (log π − log π_ref):

        rewards/chosen, rewards/rejected   mean r_c, mean r_r
        rewards/margins                    mean (r_c − r_r)    = β h on average
        rewards/accuracies                 mean [r_c > r_r]    (a tie counts as wrong, as TRL)
    """
    return {
        "rewards/chosen": chosen_rewards.mean().item(),
        "rewards/rejected": rejected_rewards.mean().item(),
        "rewards/margins": (chosen_rewards - rejected_rewards).mean().item(),
        "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean().item(),
    }


def select_chosen(rewards: Float[Tensor, " batch"]) -> tuple[Int[Tensor, " pairs"], Int[Tensor, " pairs"]]:
    """Rows of the chosen and rejected completion of each pair (rows 2i, 2i+1) by reward:

        chosen = first if r_first >= r_second else second       (a tie goes to the first, as TRL)

    Pass `rollout.rewards`, i.e. after the missing-EOS penalty, so a completion that never ends
    can lose to a slightly worse one that does."""
    first = torch.arange(0, rewards.shape[0], 2, device=rewards.device)
    second_wins = rewards[first + 1] > rewards[first]
    return torch.where(second_wins, first + 1, first), torch.where(second_wins, first, first + 1)


def select_chosen_by_judge(
    judge: Judge, rollout: Rollout
) -> tuple[Int[Tensor, " pairs"], Int[Tensor, " pairs"], Float[Tensor, " pairs"]]:
    """Rows of chosen and rejected by a judge's verdicts (0 first, 1 second), and each pair's weight
    in the loss: 1, or 0 for a pair the judge could not decide (−1; its rows are then first, second).

    An undecided pair is weighted out, not dropped: every process keeps as many pairs, so each
    runs as many minibatches and backward passes (dropping them deadlocks DDP when one rank's
    judge abstains more than another's). Returns (chosen, rejected, weights)."""
    first = list(range(0, len(rollout), 2))
    verdicts = list(judge([rollout.prompts[i] for i in first],
                          [(rollout.completions[i], rollout.completions[i + 1]) for i in first]))
    if len(verdicts) != len(first) or any(v not in (-1, 0, 1) for v in verdicts):
        raise ValueError(f"judge: must return one of 0, 1, -1 per pair; got {verdicts[:8]} for {len(first)} pairs")
    second = [int(v) == 1 for v in verdicts]
    chosen = [i + s for i, s in zip(first, second)]
    rejected = [i + 1 - s for i, s in zip(first, second)]
    weights = [float(v != -1) for v in verdicts]
    device = rollout.completion_ids.device
    return (torch.tensor(chosen, dtype=torch.long, device=device), torch.tensor(rejected, dtype=torch.long, device=device),
            torch.tensor(weights, device=device))


@torch.no_grad()
def rollout_objective_stats(
    rollout: Rollout, chosen: Int[Tensor, " pairs"], rejected: Int[Tensor, " pairs"], weights: Float[Tensor, " pairs"],
    beta: float,
) -> dict[str, float]:
    """TRL's per-batch objective/* numbers of Online DPO, over every rank's completions:

        kl_i = Σ_t m_t (log π_old(o_t) − log π_ref(o_t))       (the sampled log-ratio, a sequence sum)
        objective/kl                = mean_i kl_i
        objective/entropy           = mean_i −Σ_t m_t log π_old(o_t)
        objective/non_score_reward  = mean_i −β kl_i
        objective/scores            = mean_i R_i                 (R after the missing-EOS penalty)
        objective/rlhf_reward       = mean_i (R_i − β kl_i)
        objective/scores_margin     = mean over decided pairs of R_chosen − R_rejected
        val/contain_eos_token       = mean_i [o_i has an EOS]
        judge/skipped               = number of pairs of weight 0 (the judge said −1), every rank's total

    m masks the padding after EOS (TRL's sums include it). Every log-prob is at the sampling temperature.
    """
    mask = rollout.completion_mask
    kl = dist.all_gather(sequence_log_probs(rollout.logprobs - rollout.ref_logprobs, mask))  # [batch]
    neg_logp = dist.all_gather(-sequence_log_probs(rollout.logprobs, mask))
    rewards = dist.all_gather(rollout.rewards)
    margin = (rollout.rewards[chosen] - rollout.rewards[rejected]) * weights
    margin_sum, decided = dist.all_gather(torch.stack([margin.sum(), weights.sum()])[None]).sum(dim=0)
    stats = {
        "objective/kl": kl.mean().item(),
        "objective/entropy": neg_logp.mean().item(),
        "objective/non_score_reward": (-beta * kl).mean().item(),
        "objective/rlhf_reward": (rewards - beta * kl).mean().item(),
        "objective/scores": rewards.mean().item(),
        "val/contain_eos_token": dist.all_gather(rollout.is_terminated).float().mean().item(),
        "judge/skipped": int(round((dist.all_gather(torch.tensor([float(len(weights))], device=weights.device)).sum()
                                    - decided).item())),
    }
    if decided > 0:
        stats["objective/scores_margin"] = (margin_sum / decided).item()
    return stats


class OnlineDPOTrainer(Trainer):
    """Online DPO of `args.model`: the reward of `args.task` (or `reward_fn`), or a judge, picks winners."""

    METRICS = DPO_METRICS
    args: OnlineDPOArgs

    def __init__(self, args: OnlineDPOArgs, reward_fn: RewardFn | None = None, judge: Judge | None = None,
                 quiet: bool = False):
        super().__init__(args, reward_fn, quiet)
        self.judge = judge or make_judge(args.judge, args.direction, self.device)

    def rollout_phase(self) -> Rollout:
        """Two completions of each of batch_size / 2 prompts, scored by the policy, the reference and the reward."""
        return self.sample(num_generations=2)

    def learning_phase(self, rollout: Rollout) -> dict[str, float]:
        """Pick winners (reward or judge), then num_iterations passes over the pairs in minibatches,
        each one ascent step on −loss; one scheduler step.

        Every rank runs the same minibatches (a judge's undecided pairs weigh 0, they are not
        dropped), and the loss of a step is normalised by the decided pairs of every rank, so
        that DDP's mean of the ranks' gradients is the gradient of Σ_decided ℓ / #decided over
        the global minibatch: what one process computes on all the pairs. A step with no decided
        pair on any rank is skipped on every rank."""
        args = self.args
        if self.judge is None:
            chosen, rejected = select_chosen(rollout.rewards)
            weights = torch.ones(len(chosen), device=chosen.device)
        else:
            chosen, rejected, weights = select_chosen_by_judge(self.judge, rollout)
        ref_logps = sequence_log_probs(rollout.ref_logprobs, rollout.completion_mask)

        def objective(idx: Tensor) -> tuple[Tensor, dict[str, float]] | None:
            c, r, w = chosen[idx], rejected[idx], weights[idx]
            decided = w.sum()
            decided_everywhere = dist.all_gather(decided.view(1)).sum()  # this step's decided pairs, all ranks
            if decided_everywhere == 0:
                return None  # the same on every rank: nobody steps
            logps = self.sequence_log_probs(rollout, torch.cat([c, r]))
            out = calc_dpo_loss(logps[: len(c)], logps[len(c):], ref_logps[c], ref_logps[r], args.beta, args.loss_type,
                                weights=w)
            # DDP averages the ranks' gradients: scale each rank's weighted mean by its share of the
            # decided pairs (× 1.0 exactly in one process)
            share = decided * dist.world_size() / decided_everywhere
            if decided == 0:  # this rank steps with the others; its diagnostics are over decided pairs only
                return -out.loss * share, {}
            keep = w > 0
            return -out.loss * share, {  # the optimizer ascends (maximize=True)
                "loss/dpo": out.loss.item(),
                **implicit_reward_stats(out.chosen_rewards[keep], out.rejected_rewards[keep]),
                "logps/chosen": logps[: len(c)][keep].mean().item(),
                "logps/rejected": logps[len(c):][keep].mean().item(),
            }

        pairs_per_minibatch = max(1, args.minibatch_size() // 2 // dist.world_size())  # this rank's share
        num_minibatches = len(chosen) // pairs_per_minibatch
        learned = self.ascend(minibatch_rows(len(chosen), num_minibatches, args.num_iterations), objective,
                              total=num_minibatches * args.num_iterations)
        return {**learned, **rollout_objective_stats(rollout, chosen, rejected, weights, args.beta), "beta": args.beta}
