"""RLOO's formulas: the KL-shaped reward, the leave-one-out advantage and the clipped sequence-ratio
objective (the table in `rloo/trainer.py`'s docstring; tests/integration/test_rloo.py checks each by hand).
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from rlhf_scratch.core.advantages import (
    check_groups,
)
from rlhf_scratch.core.objectives import sequence_log_probs


def compute_rloo_advantages(rewards: Float[Tensor, " batch"], num_generations: int) -> Float[Tensor, " batch"]:
    """The leave-one-out advantage: each completion's reward minus the mean of the OTHER G − 1
    completions of the same prompt (the G of a prompt are consecutive in the batch).

        A_i = r_i − 1/(G−1) Σ_{j≠i} r_j  =  r_i − (Σ_j r_j − r_i) / (G−1)  =  G/(G−1) · (r_i − mean_j r_j)

    The baseline does not depend on r_i (nor on o_i), so E[baseline · ∇ log π(o_i)] = 0 and the
    gradient estimate stays unbiased; each group's advantages sum to zero. (GRPO's r_i − mean
    includes r_i in its own baseline: the same direction, shrunk by (G−1)/G.)
    """
    G = num_generations
    check_groups(rewards, G, "compute_rloo_advantages")
    grouped = rewards.view(-1, G)  # [prompts, G]
    baseline = (grouped.sum(dim=1, keepdim=True) - grouped) / (G - 1)  # [prompts, G]
    return (grouped - baseline).flatten()  # [batch]


@torch.no_grad()
def compute_kl_shaped_rewards(
    scores: Float[Tensor, " batch"],
    logprobs: Float[Tensor, "batch gen_len"],
    ref_logprobs: Float[Tensor, "batch gen_len"],
    completion_mask: Bool[Tensor, "batch gen_len"],
    beta: float,
) -> Float[Tensor, " batch"]:
    """Fold the KL to the reference into the reward, at the sequence level (no gradient):

        r_i = R_i − β · Σ_t mask_t · (log π_old(o_t) − log π_ref(o_t))

    The sum is the k1 estimator of KL(π_old ‖ π_ref) on the sampled tokens. A single token's term,
    even a whole sequence's sum, can be negative (the reference liked those tokens more than the
    policy did). That is fine: its expectation is E_{o~π}[log π(o) − log π_ref(o)] = KL(π ‖ π_ref)
    ≥ 0, so each sample's value is unbiased noise around the true KL, and averaged over
    completions it penalises drifting from the reference. It is a reward, so no gradient flows
    through it: the penalty reaches the policy through the advantages, like the score does.
    """
    kl = sequence_log_probs(logprobs, completion_mask) - sequence_log_probs(ref_logprobs, completion_mask)
    return scores - beta * kl


def normalize_advantages(advantages: Float[Tensor, " batch"], eps: float = 1e-4) -> Float[Tensor, " batch"]:
    """Whiten over the WHOLE batch: (A − mean) / (std + eps). Off by default, as in TRL.

    Not per group: a leave-one-out advantage divided by its own group's std explodes when the
    G rewards of a prompt are nearly equal (std → 0 turns reward noise into ±1-sized
    advantages); the batch std is dominated by groups that do differ.
    """
    return (advantages - advantages.mean()) / (advantages.std() + eps)


def calc_rloo_objective(
    seq_logprobs: Float[Tensor, " batch"],
    old_seq_logprobs: Float[Tensor, " batch"],
    advantages: Float[Tensor, " batch"],
    epsilon_low: float,
    epsilon_high: float,
) -> Float[Tensor, ""]:
    """The clipped surrogate on the sequence ratio (MAXIMISED):

        ρ_i = exp(log π(o_i|q) − log π_old(o_i|q))
        J   = mean_i min(ρ_i A_i, clip(ρ_i, 1 − ε_low, 1 + ε_high) A_i)

    Once ρ has moved past the clip in the direction A pushes (ρ > 1+ε_high with A > 0, ρ < 1−ε_low
    with A < 0) the term is constant (no gradient); moving back is never clipped. At ρ = 1 (the
    first minibatch of the first pass) ∇J = mean_i A_i ∇ log π(o_i|q): REINFORCE with the leave-one-out
    baseline; later minibatches are scored by a policy that has already stepped, so ρ ≠ 1 there.
    """
    ratio = (seq_logprobs - old_seq_logprobs).exp()
    clipped = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    return torch.minimum(ratio * advantages, clipped * advantages).mean()


@torch.no_grad()
def calc_clip_ratios(
    seq_logprobs: Float[Tensor, " batch"],
    old_seq_logprobs: Float[Tensor, " batch"],
    advantages: Float[Tensor, " batch"],
    epsilon_low: float,
    epsilon_high: float,
) -> dict[str, Tensor]:
    """TRL's clip_ratio/{low,high,region}_mean: the fractions of sequences whose term is clipped.

        low  = mean_i [ρ_i < 1 − ε_low  and A_i < 0]      high = mean_i [ρ_i > 1 + ε_high and A_i > 0]
        region = low + high   (the two never overlap)

    0-dim tensors left on the device, read with the phase's statistics (`core.host.read_once`: a read
    per minibatch would stall a GPU each step); region is summed in float64, as two `.item()`s add."""
    ratio = (seq_logprobs - old_seq_logprobs).exp()
    low = ((ratio < 1 - epsilon_low) & (advantages < 0)).float().mean()
    high = ((ratio > 1 + epsilon_high) & (advantages > 0)).float().mean()
    return {"clip_ratio/low_mean": low, "clip_ratio/high_mean": high, "clip_ratio/region_mean": low.double() + high.double()}
