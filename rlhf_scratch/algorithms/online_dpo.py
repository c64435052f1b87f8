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

objective/kl and objective/entropy are logged by the loop over kept completion tokens only
(masked; TRL's online trainer averages them over the padding after EOS too).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm

from rlhf_scratch import distributed as dist
from rlhf_scratch.accel import compiled, learning_autocast
from rlhf_scratch.config import OnlineDPOArgs
from rlhf_scratch.judges import Judge, make_judge
from rlhf_scratch.loop import load_policy_and_reference, make_prompt_iterator, run_training, setup_torch
from rlhf_scratch.objectives import sequence_log_probs
from rlhf_scratch.optim import clip_and_step, get_optimizer_and_scheduler
from rlhf_scratch.rollout import Rollout, make_rollout, policy_sequence_log_probs
from rlhf_scratch.tasks import RewardFn, make_reward_fn
from rlhf_scratch.timing import timed

# Logged by Online DPO's learning phase each phase, besides loop.SHARED_METRICS (TRL's names).
DPO_METRICS = (
    "loss/dpo",  # mean DPO loss over minibatches
    "rewards/chosen",  # implicit reward β (log π(y_c) − log π_ref(y_c)), mean
    "rewards/rejected",
    "rewards/margins",  # chosen − rejected implicit reward
    "rewards/accuracies",  # fraction of pairs whose chosen implicit reward is the larger
    "logps/chosen",  # summed log π of the chosen completions
    "logps/rejected",
    "objective/scores",  # mean score of the reward function, before any missing-EOS penalty
    "objective/scores_margin",  # mean (chosen − rejected) reward, after the penalty (what picked them)
    "val/contain_eos_token",  # fraction of completions that produced EOS
    "beta",
    "judge/skipped",  # pairs the judge could not decide (-1), left out of the loss (0 without a judge)
    "charts/skipped_steps",  # optimizer steps skipped this phase for a non-finite loss or gradient
)


class DPOLoss(NamedTuple):
    """What `calc_dpo_loss` returns: the mean loss (with gradient) and the implicit rewards (without)."""

    loss: Float[Tensor, ""]
    chosen_rewards: Float[Tensor, "pairs"]
    rejected_rewards: Float[Tensor, "pairs"]


def calc_dpo_loss(
    policy_chosen_logps: Float[Tensor, "pairs"],
    policy_rejected_logps: Float[Tensor, "pairs"],
    ref_chosen_logps: Float[Tensor, "pairs"],
    ref_rejected_logps: Float[Tensor, "pairs"],
    beta: float,
    loss_type: str = "sigmoid",
) -> DPOLoss:
    """The DPO loss on summed, masked completion log-probs (MINIMISED), and the implicit rewards.

        h = (π_c − π_r) − (ref_c − ref_r)
        sigmoid:  loss = mean −log σ(β h)          (F.logsigmoid: finite for |β h| in the thousands)
        ipo:      loss = mean (h − 1/(2β))²        (IPO's target margin instead of "as large as possible")
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
    return DPOLoss(losses.mean(), chosen_rewards, rejected_rewards)


@torch.no_grad()
def implicit_reward_stats(chosen_rewards: Float[Tensor, "pairs"], rejected_rewards: Float[Tensor, "pairs"]) -> dict[str, float]:
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


def select_chosen(rewards: Float[Tensor, "batch"]) -> tuple[Int[Tensor, "pairs"], Int[Tensor, "pairs"]]:
    """Rows of the chosen and rejected completion of each pair (rows 2i, 2i+1) by reward:

        chosen = first if r_first >= r_second else second       (a tie goes to the first, as TRL)

    Pass `rollout.rewards`, i.e. after the missing-EOS penalty, so a completion that never ends
    can lose to a slightly worse one that does."""
    first = torch.arange(0, rewards.shape[0], 2, device=rewards.device)
    second_wins = rewards[first + 1] > rewards[first]
    return torch.where(second_wins, first + 1, first), torch.where(second_wins, first, first + 1)


def select_chosen_by_judge(judge: Judge, rollout: Rollout) -> tuple[Int[Tensor, "kept"], Int[Tensor, "kept"], int]:
    """Rows of chosen and rejected by a judge's verdicts (0 first, 1 second); pairs it could not
    judge (-1) are dropped. Returns (chosen, rejected, number skipped)."""
    first = list(range(0, len(rollout), 2))
    verdicts = list(judge([rollout.prompts[i] for i in first],
                          [(rollout.completions[i], rollout.completions[i + 1]) for i in first]))
    if len(verdicts) != len(first) or any(v not in (-1, 0, 1) for v in verdicts):
        raise ValueError(f"judge: must return one of 0, 1, -1 per pair; got {verdicts[:8]} for {len(first)} pairs")
    chosen = [i + int(v) for i, v in zip(first, verdicts) if v != -1]
    rejected = [i + 1 - int(v) for i, v in zip(first, verdicts) if v != -1]
    return torch.tensor(chosen, dtype=torch.long), torch.tensor(rejected, dtype=torch.long), verdicts.count(-1)


class OnlineDPOTrainer:
    """Online DPO of `args.model`: the reward of `args.task` (or `reward_fn`), or a judge, picks winners."""

    def __init__(self, args: OnlineDPOArgs, reward_fn: RewardFn | None = None, judge: Judge | None = None,
                 quiet: bool = False):
        self.device = setup_torch(args)
        self.args, self.quiet = args, quiet or not dist.is_main()  # one progress bar: rank 0's
        self.policy, self.ref_model = load_policy_and_reference(args.model, self.device)
        self.prompts = make_prompt_iterator(args, self.policy)
        self.reward_fn = reward_fn or make_reward_fn(args, device=self.device)
        self.judge = judge or make_judge(args.judge, args.direction, self.device)
        self.optimizer, self.scheduler = get_optimizer_and_scheduler(args, self.policy)
        self.learner = compiled(dist.wrap_for_training(self.policy), args)  # the learning forward (DDP, compile)
        self.skipped_in_a_row = 0

    @torch.no_grad()
    def rollout_phase(self) -> Rollout:
        """Two completions of each of batch_size / 2 prompts, scored by the policy, the reference and the reward."""
        args = self.args
        return make_rollout(
            self.policy, self.ref_model, dist.shard(self.prompts.next_batch(args.batch_size // 2)), self.reward_fn,
            num_generations=2, gen_len=args.gen_len, temperature=args.temperature, top_k=args.top_k,
            prepend_bos=args.prepend_bos, stop_at_eos=args.eos_stops(),
            missing_eos_penalty=args.missing_eos_penalty, chunk_size=args.minibatch_size(),
        )

    def learning_phase(self, rollout: Rollout) -> dict[str, float]:
        """Pick winners (reward or judge), then num_iterations passes over the pairs in minibatches,
        each one ascent step on −loss; one scheduler step. A phase whose pairs the judge all
        skipped takes no step and logs no loss/rewards/logps/scores_margin (nothing to average)."""
        args = self.args
        skipped_pairs = 0
        if self.judge is None:
            chosen, rejected = select_chosen(rollout.rewards)
        else:
            chosen, rejected, skipped_pairs = select_chosen_by_judge(self.judge, rollout)
        ref_logps = sequence_log_probs(rollout.ref_logprobs, rollout.completion_mask)

        stats: list[dict[str, float]] = []
        skipped = 0
        pairs_per_minibatch = max(1, args.minibatch_size() // 2 // dist.world_size())  # this rank's share
        for _ in range(args.num_iterations if len(chosen) else 0):  # (no pair kept: no step)
            for idx in tqdm(torch.randperm(len(chosen)).split(pairs_per_minibatch), desc="minibatches",
                            leave=False, disable=self.quiet):
                c, r = chosen[idx], rejected[idx]
                self.optimizer.zero_grad()
                with timed("learning_forward"), learning_autocast(args, self.device):
                    logps = policy_sequence_log_probs(self.learner, rollout, torch.cat([c, r]))
                    out = calc_dpo_loss(logps[: len(c)], logps[len(c):], ref_logps[c], ref_logps[r],
                                        args.beta, args.loss_type)
                    objective = -out.loss  # the optimizer ascends (maximize=True)
                with timed("backward"):
                    objective.backward()
                with timed("optimizer_step"):
                    stepped = clip_and_step(self.optimizer, self.policy, objective, args.max_grad_norm)
                self.skipped_in_a_row = 0 if stepped else self.skipped_in_a_row + 1
                skipped += not stepped
                stats.append({
                    "loss/dpo": out.loss.item(),
                    **implicit_reward_stats(out.chosen_rewards, out.rejected_rewards),
                    "logps/chosen": logps[: len(c)].mean().item(),
                    "logps/rejected": logps[len(c):].mean().item(),
                })
        self.scheduler.step()

        learned = {k: float(np.mean([s[k] for s in stats])) for k in stats[0]} if stats else {}
        if len(chosen):
            learned["objective/scores_margin"] = (rollout.rewards[chosen] - rollout.rewards[rejected]).mean().item()
        return {
            **learned,
            "objective/scores": rollout.scores.mean().item(),
            "val/contain_eos_token": rollout.is_terminated.float().mean().item(),
            "beta": args.beta,
            "judge/skipped": sum(dist.gather_objects(skipped_pairs)) / dist.world_size(),  # the loop averages ranks
            "charts/skipped_steps": skipped,
        }


    def train(self, run_dir=None, resume: bool = False):
        """Run every phase (see `loop.run_training`); return the run folder."""
        return run_training(self, run_dir, self.quiet, resume)
