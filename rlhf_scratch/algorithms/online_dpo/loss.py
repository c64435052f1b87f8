"""Online DPO's formulas: the DPO (and IPO) loss on a pair's log-ratios, its implicit rewards, and how
a pair's winner is chosen (by the reward or by a judge); tests/integration/test_online_dpo.py checks each.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from rlhf_scratch.core.objectives import masked_mean, sequence_log_probs
from rlhf_scratch.engine.batch import Gathered
from rlhf_scratch.reward.judges import Judge
from rlhf_scratch.rollout.phase import Rollout


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
def implicit_reward_stats(chosen_rewards: Float[Tensor, " pairs"], rejected_rewards: Float[Tensor, " pairs"],
                          mask: Bool[Tensor, " pairs"] | None = None) -> dict[str, Tensor]:
    """TRL's diagnostics of the implicit rewards r = β (log π − log π_ref), over the pairs `mask` keeps
    (the decided ones; all without a mask):

        rewards/chosen, rewards/rejected   mean r_c, mean r_r
        rewards/margins                    mean (r_c − r_r)    = β h on average
        rewards/accuracies                 mean [r_c > r_r]    (a tie counts as wrong, as TRL)

    0-dim tensors left on the device, read with the phase's statistics (`core.host.read_once`)."""
    return {
        "rewards/chosen": masked_mean(chosen_rewards, mask),
        "rewards/rejected": masked_mean(rejected_rewards, mask),
        "rewards/margins": masked_mean(chosen_rewards - rejected_rewards, mask),
        "rewards/accuracies": masked_mean((chosen_rewards > rejected_rewards).float(), mask),
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
    rollout: Rollout | Gathered, chosen: Int[Tensor, " pairs"], rejected: Int[Tensor, " pairs"],
    weights: Float[Tensor, " pairs"], beta: float,
) -> dict[str, float]:
    """TRL's per-batch objective/* numbers of Online DPO, over `rollout`'s completions (the loop
    passes every process's: `batch.everyone`, with the pairs' rows in it):
        kl_i = Σ_t m_t (log π_old(o_t) − log π_ref(o_t))       (the sampled log-ratio, a sequence sum)
        objective/kl                = mean_i kl_i
        objective/entropy           = mean_i −Σ_t m_t log π_old(o_t)
        objective/non_score_reward  = mean_i −β kl_i
        objective/scores            = mean_i R_i                 (R after the missing-EOS penalty)
        objective/rlhf_reward       = mean_i (R_i − β kl_i)
        objective/scores_margin     = mean over decided pairs of R_chosen − R_rejected
        val/contain_eos_token       = mean_i [o_i has an EOS]
        judge/skipped               = number of pairs of weight 0 (the judge said −1)
    m masks the padding after EOS (TRL's sums include it). Every log-prob is at the sampling temperature.
    """
    mask = rollout.completion_mask
    kl = sequence_log_probs(rollout.logprobs - rollout.ref_logprobs, mask)  # [batch]
    neg_logp = -sequence_log_probs(rollout.logprobs, mask)
    rewards = rollout.rewards
    margin_sum = ((rewards[chosen] - rewards[rejected]) * weights).sum()
    decided = weights.sum()
    stats = {
        "objective/kl": kl.mean().item(),
        "objective/entropy": neg_logp.mean().item(),
        "objective/non_score_reward": (-beta * kl).mean().item(),
        "objective/rlhf_reward": (rewards - beta * kl).mean().item(),
        "objective/scores": rewards.mean().item(),
        "val/contain_eos_token": rollout.is_terminated.float().mean().item(),
        "judge/skipped": int(round(len(weights) - decided.item())),
    }
    if decided > 0:
        stats["objective/scores_margin"] = (margin_sum / decided).item()
    return stats
