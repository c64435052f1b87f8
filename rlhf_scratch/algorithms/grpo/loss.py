"""GRPO's loss and its terms, as TRL 1.16 computes them (the table in `grpo/trainer.py`'s docstring):
the group-relative advantage, the importance ratio, k3, the clipped / CISPO / SAPO / VESPO surrogates,
the loss_type's aggregation, and the clip counts TRL logs. Pure functions of tensors; the trainer
(`grpo/trainer.py`) gathers its inputs and logs its outputs.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from rlhf_scratch.algorithms.grpo.args import GRPO_LOSS_TYPES, GRPOArgs
from rlhf_scratch.core.advantages import check_groups
from rlhf_scratch.core.objectives import masked_sum

CLIPPED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
"""The loss types built on the clipped surrogate min(ρA, clip(ρ)A) (`delta` applies to these), which log TRL's clip_ratio/*."""
AGGREGATION_ONLY_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
"""The loss types that differ only in how they average over tokens: the same update when every length is equal."""


def compute_grpo_advantages(
    rewards: Float[Tensor, " batch"], num_generations: int, scale_rewards: str = "group"
) -> Float[Tensor, " batch"]:
    """The group-relative advantage (the G completions of a prompt are consecutive in the batch):

        A_i = (r_i − mean_{j∈g} r_j) / (σ + 1e-4)      σ = std_{j∈g} r_j   ("group", TRL's default)
                                                        σ = std of the whole batch   ("batch")
        A_i =  r_i − mean_{j∈g} r_j                                         ("none", Dr. GRPO)

    std is the unbiased (n − 1) one, as TRL's `nanstd`. A group whose G rewards are equal gets
    A = 0 exactly (it is counted in frac_reward_zero_std): it teaches nothing.

    Beside RLOO's leave-one-out A_i = r_i − mean_{j≠i} r_j = G/(G−1)·(r_i − mean_j r_j): the same
    direction — GRPO's baseline includes r_i itself, which only shrinks A by (G−1)/G. The std
    division is the real difference, and what Dr. GRPO criticises: a prompt whose G rewards barely
    differ (too easy or too hard) has a small σ, so its advantages are blown up to ±1 size and it
    weighs as much as a prompt with a real spread — a per-question weighting by difficulty that
    the policy-gradient theorem does not ask for. "none" removes it.
    """
    G = num_generations
    check_groups(rewards, G, "compute_grpo_advantages")
    grouped = rewards.view(-1, G)  # [prompts, G]
    centred = (grouped - grouped.mean(dim=1, keepdim=True)).flatten()  # [batch]
    if scale_rewards == "none":
        return centred
    if scale_rewards == "group":
        std = grouped.std(dim=1).repeat_interleave(G)  # [batch]
    elif scale_rewards == "batch":
        std = rewards.std().expand_as(rewards)  # [batch]
    else:
        raise ValueError(f"compute_grpo_advantages: scale_rewards must be group, batch or none; got {scale_rewards!r}")
    return centred / (std + 1e-4)


def calc_importance_ratio(
    logprobs: Float[Tensor, "batch gen_len"],
    old_logprobs: Float[Tensor, "batch gen_len"],
    mask: Bool[Tensor, "batch gen_len"],
    importance_sampling_level: str = "token",
) -> Float[Tensor, "batch gen_len"] | Float[Tensor, "batch 1"]:
    """The importance weight of the clipped surrogate:

        "token":     ρ_{i,t} = exp(log π(o_{i,t}) − log π_old(o_{i,t}))                    [batch, gen_len]
        "sequence":  ρ_i     = exp(Σ_t mask·(log π − log π_old) / max(Σ_t mask, 1))         [batch, 1]  (GSPO)

    GSPO's is the geometric mean of the token ratios: one weight per sequence, as the reward is
    one per sequence, whose log does not grow with the length (RLOO's exp of the SUM does).
    """
    log_ratio = logprobs - old_logprobs
    if importance_sampling_level == "token":
        return log_ratio.exp()
    if importance_sampling_level == "sequence":
        m = mask.float()
        return ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1).exp()
    raise ValueError(f"importance_sampling_level must be token or sequence; got {importance_sampling_level!r}")


def calc_k3_kl(
    logprobs: Float[Tensor, "batch gen_len"], ref_logprobs: Float[Tensor, "batch gen_len"]
) -> Float[Tensor, "batch gen_len"]:
    """Schulman's k3 estimator of KL(π ‖ π_ref) at each sampled token, as GRPO puts it in the loss:

        k3 = exp(log π_ref − log π) − (log π_ref − log π) − 1   ≥ 0   (e^x − x − 1 with x = log π_ref/π)

    Unbiased (E_π[π_ref/π] = 1) and never negative, unlike k1 = log π − log π_ref, with gradient
    ∇k3 = (1 − π_ref/π) ∇log π: zero where π = π_ref.
    """
    x = ref_logprobs - logprobs
    return x.exp() - x - 1


def calc_clipped_surrogate(
    ratio: Float[Tensor, "batch ratio_len"],
    advantages: Float[Tensor, " batch"],
    epsilon_low: float,
    epsilon_high: float,
    delta: float | None = None,
) -> Float[Tensor, "batch ratio_len"]:
    """PPO's clipped surrogate, per token (per sequence under GSPO), MAXIMISED:

        ℓ = min(ρ A, clip(ρ, 1 − ε_low, 1 + ε_high) A)                          (Schulman et al. 2017)
        ℓ = min(min(ρ, δ) A, clip(ρ, 1 − ε_low, 1 + ε_high) A)   with `delta`  (two-sided: INTELLECT-2, arXiv 2505.07291)

    For A > 0 the clip already bounds ℓ ≤ (1 + ε_high) A. For A < 0 the min takes the larger ratio,
    so a token whose ratio ran away (ρ ≫ 1 + ε_high) is pushed down with weight ρ, unbounded: δ caps
    it at δ (TRL: `coef_1.clamp(max=delta)` after the clipped copy is made, so the clip reads the raw ρ).
    Zero gradient where the clipped side is taken, and where ρ > δ.
    """
    A = advantages.unsqueeze(-1)  # [batch, 1]
    clipped = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    capped = ratio if delta is None else ratio.clamp(max=delta)
    return torch.minimum(capped * A, clipped * A)


def calc_cispo_surrogate(
    ratio: Float[Tensor, "batch ratio_len"],
    advantages: Float[Tensor, " batch"],
    logprobs: Float[Tensor, "batch gen_len"],
    epsilon_max: float,
) -> Float[Tensor, "batch gen_len"]:
    """CISPO (the MiniMax-M1 report, arXiv 2506.13585), MAXIMISED: REINFORCE with a capped, detached importance weight,

        ℓ_{i,t} = sg(min(ρ_{i,t}, ε_max)) · A_i · log π(o_{i,t})       ∇ℓ = min(ρ, ε_max) A ∇log π

    Where the clipped surrogate gives a clipped token no gradient at all, CISPO keeps every token's
    gradient and clips only its weight. ε_max is TRL's `epsilon_high` taken as the cap itself (not
    1 + it): ScaleRL recommends 5.0; at TRL's default 0.2 every weight is capped at 0.2. The value
    of ℓ is not a surrogate of the return (it moves with log π); only its gradient means something.
    """
    weight = ratio.clamp(max=epsilon_max).detach()
    return weight * advantages.unsqueeze(-1) * logprobs


def calc_sapo_surrogate(
    ratio: Float[Tensor, "batch ratio_len"],
    advantages: Float[Tensor, " batch"],
    temperature_pos: float,
    temperature_neg: float,
) -> Float[Tensor, "batch ratio_len"]:
    """SAPO (Soft Adaptive Policy Optimization, arXiv 2511.20347), MAXIMISED: a smooth gate instead of the clip,

        ℓ = (4/τ) · σ(τ (ρ − 1)) · A          τ = τ_pos if A > 0, else τ_neg

        ∂ℓ/∂ρ = 4 σ(1 − σ) A:  exactly A at ρ = 1 (on-policy: the policy gradient), falling off
        smoothly as ρ leaves 1 (like e^{−τ|ρ−1|}) instead of dropping to 0 at the clip edge.

    A larger τ narrows the gate; TRL's defaults 1.0 and 1.05 make the A ≤ 0 side slightly sharper.
    """
    A = advantages.unsqueeze(-1)
    tau = torch.where(A > 0, temperature_pos, temperature_neg)
    return torch.sigmoid(tau * (ratio - 1)) * 4 / tau * A


@torch.no_grad()
def calc_vespo_weights(
    log_ratio: Float[Tensor, "batch gen_len"],
    advantages: Float[Tensor, " batch"],
    mask: Bool[Tensor, "batch gen_len"],
    k_pos: float,
    lambda_pos: float,
    k_neg: float,
    lambda_neg: float,
) -> Float[Tensor, "batch 1"]:
    """VESPO's sequence weight (Variational sequence-level soft policy optimization, arXiv 2602.10693), detached:

        log w_i = clamp(Σ_t mask · clamp(log π − log π_old, −20, 20), log 1e-8, 20)   the sequence ratio (a SUM)
        φ(w)    = e^λ · w^k · e^{−λ w} = exp(λ + k log w − λ w)      (k, λ) = (k_pos, λ_pos) if A ≥ 0, else (k_neg, λ_neg)

    A Gamma-shaped weight normalised to φ(1) = 1, peaked at w = k/λ: w^k shrinks sequences the policy
    has moved away from (w → 0), e^{−λw} those it has moved toward (w → ∞). λ is floored at 1e-4 and
    a non-finite φ is 0, as TRL (`GRPOTrainer.get_gamma_weights`).
    """
    seq_log_ratio = (log_ratio.clamp(-20.0, 20.0) * mask.float()).sum(-1, keepdim=True)  # [batch, 1]
    log_w = seq_log_ratio.clamp(math.log(1e-8), 20.0)
    nonneg = advantages.unsqueeze(-1) >= 0
    k = torch.where(nonneg, k_pos, k_neg)
    lam = torch.where(nonneg, lambda_pos, lambda_neg).clamp(min=1e-4)
    return (lam + k * log_w - lam * log_w.exp()).exp().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def aggregate_grpo_terms(
    per_token: Float[Tensor, "batch term_len"],
    mask: Bool[Tensor, "batch gen_len"],
    loss_type: str,
    max_completion_length: int,
    num_items_in_batch: int | float | Tensor | None = None,
    num_splits: int = 1,
) -> Float[Tensor, ""]:
    """The per-token terms ℓ (term_len = gen_len; or 1, one term per sequence, broadcast over its
    tokens) summed over kept tokens and divided as `loss_type` says (B rows,
    L = max_completion_length, |o_i| = Σ_t mask_{i,t}, N = num_items_in_batch):

        "grpo", "sapo"           J = 1/B Σ_i 1/|o_i| Σ_t ℓ_{i,t}     each sequence's mean, then the mean
        "bnpo"                   J = Σ_{i,t} ℓ / Σ_{i,t} mask        the minibatch's token mean
        "dr_grpo"                J = Σ_{i,t} ℓ / (B · L)             a constant denominator
        "dapo", "cispo", "vespo" J = Σ_{i,t} ℓ / (N / num_splits)    N: kept tokens of the WHOLE generation batch
        "luspo"                  J = 1/B Σ_i Σ_t ℓ_{i,t}             each sequence's SUM, then the mean

    Why it matters (the Dr. GRPO paper's length bias): under "grpo" a token of completion i weighs
    1/|o_i|. For A > 0 a short completion's tokens are pushed up harder than a long one's: short
    right answers are favoured. For A < 0 a long completion's tokens are pushed down more gently
    than a short one's: long wrong answers are penalised less, so wrong answers drift longer.
    "dr_grpo" and "dapo" give every token the same weight whatever its completion's length. "luspo"
    (Length-Unbiased Sequence Policy Optimization) fixes GSPO's version of the bias: GSPO's one term
    per sequence, averaged per sequence, makes a sequence weigh the same whatever its length, so each
    of its tokens 1/|o_i|; summing instead gives the sequence's term the weight |o_i| (arXiv 2602.05261).

    "dapo" as TRL: N counts the kept tokens of the generation batch over every minibatch and every
    process, and each optimizer step divides its sum by N / num_splits (num_splits = minibatches ×
    processes; TRL's num_processes · steps_per_generation / gradient_accumulation_steps). Each
    step's denominator is then the same constant whatever tokens its rows hold, so a batch split
    into minibatches or over processes (DDP averages the gradients) gives the gradient of one
    process on the whole batch. Without N, the minibatch's own count is used (= "bnpo").
    """
    m = mask.float()
    kept = per_token * m  # [batch, gen_len] (a [batch, 1] sequence term broadcasts over its tokens)
    if loss_type in ("grpo", "sapo"):
        return (kept.sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return kept.sum() / m.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        return kept.sum() / (per_token.shape[0] * max_completion_length)
    if loss_type in ("dapo", "cispo", "vespo"):
        n = m.sum() if num_items_in_batch is None else torch.as_tensor(num_items_in_batch, dtype=m.dtype)
        return kept.sum() / (n.clamp(min=1.0) / num_splits)
    if loss_type == "luspo":
        return kept.sum(-1).mean()
    raise ValueError(f"calc_grpo_objective: loss_type must be one of {', '.join(GRPO_LOSS_TYPES)}; got {loss_type!r}")


class GRPOTerms(NamedTuple):
    """What `calc_grpo_terms` returns: J with its gradient, and TRL's diagnostics without one."""

    objective: Float[Tensor, ""]
    clip_counts: Float[Tensor, " 3"]
    """[low, high, n]: kept tokens (sequences, for GSPO) clipped on each side, of n (`clip_bounds`, `clip_counts`)."""
    clip_extremes: Float[Tensor, " 2"]
    """[low_min, high_max]: the extreme per-sequence clipped fractions (`clip_fraction_extremes`); NaN
    for the loss types without TRL's clip ratios."""
    kl_sum: Float[Tensor, ""]
    """Σ over kept tokens of the KL term as optimised (ρ·k3 with the bias correction, else k3); 0 at β = 0."""
    phi_sum: Float[Tensor, ""]
    """Σ over sequences of VESPO's weight φ (0 for the other loss types)."""


def calc_grpo_terms(
    logprobs: Float[Tensor, "batch gen_len"],
    old_logprobs: Float[Tensor, "batch gen_len"],
    advantages: Float[Tensor, " batch"],
    mask: Bool[Tensor, "batch gen_len"],
    *,
    epsilon_low: float,
    epsilon_high: float,
    loss_type: str,
    max_completion_length: int,
    importance_sampling_level: str = "token",
    ref_logprobs: Float[Tensor, "batch gen_len"] | None = None,
    beta: float = 0.0,
    num_items_in_batch: int | float | Tensor | None = None,
    num_splits: int = 1,
    use_bias_correction_kl: bool = True,
    delta: float | None = None,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    vespo_k_pos: float = 2.0,
    vespo_lambda_pos: float = 3.0,
    vespo_k_neg: float = 3.0,
    vespo_lambda_neg: float = 2.0,
    entropies: Float[Tensor, "batch gen_len"] | None = None,
    entropy_coef: float = 0.0,
) -> GRPOTerms:
    """GRPO's objective on a minibatch, MAXIMISED (= −TRL 1.16's loss), and the numbers TRL logs
    about it, from one importance ratio ρ (`calc_importance_ratio`, per token or GSPO's per sequence):

        ℓ_{i,t} = surrogate_{i,t} − β ρ k3_{i,t}                   (− β k3 with use_bias_correction_kl=False)
        J       = aggregate_grpo_terms(ℓ)  +  entropy_coef · Σ_{i,t} mask·H_{i,t} / Σ_{i,t} mask

    with the surrogate and the aggregation of `loss_type` (TRL's `_compute_loss`; papers in docs/grpo.md):

        grpo, bnpo, dr_grpo, dapo, luspo   min(ρ A, clip(ρ, 1−ε_low, 1+ε_high) A)   calc_clipped_surrogate (δ: `delta`)
        cispo                              sg(min(ρ, ε_max)) A log π                calc_cispo_surrogate (ε_max = epsilon_high)
        sapo                               (4/τ) σ(τ (ρ − 1)) A                     calc_sapo_surrogate
        vespo                              sg(φ(w_i)) A log π                       calc_vespo_weights (w_i: its own SUMMED ratio)

    The ρ on k3 (TRL's `use_bias_correction_kl`, from DeepSeek-V3.2) is the level's own ρ: raw
    (neither clipped nor capped by δ), with its gradient (not detached), the sequence's ρ_i under
    GSPO broadcast over its tokens. The tokens were sampled from π_old, so the KL of π needs the weight ρ:

        ∇(ρ k3) = ρ (k3 + 1 − π_ref/π) ∇log π = ρ (log π − log π_ref) ∇log π

    whose mean over o ~ π_old is ∇KL(π ‖ π_ref), the reverse KL that k3 estimates. Without ρ,
    ∇k3 = (1 − π_ref/π) ∇log π, whose mean under π is −Σ_o π_ref ∇log π = ∇KL(π_ref ‖ π): the
    forward KL. At ρ = 1 (the first minibatch of one pass) the value is the same, the gradient not.

    The entropy bonus (TRL's `entropy_coef`) is the mean over kept tokens of `entropies`, H[π] at each
    position in the same forward (with its gradient), whatever the loss type's normaliser, so
    entropy_coef means the same for all eight. The mask is the loss's: with mask_truncated_completions
    the truncated completions' rows are already all False (`loss_mask`).
    """
    ratio = calc_importance_ratio(logprobs, old_logprobs, mask, importance_sampling_level)
    metric_ratio = ratio  # the ratio TRL's clip metrics read (after δ's cap, as TRL's coef_1)
    phi_sum = logprobs.new_zeros(())
    if loss_type in CLIPPED_LOSS_TYPES:
        per_token = calc_clipped_surrogate(ratio, advantages, epsilon_low, epsilon_high, delta)
        metric_ratio = ratio if delta is None else ratio.clamp(max=delta)
    elif loss_type == "cispo":
        per_token = calc_cispo_surrogate(ratio, advantages, logprobs, epsilon_high)
    elif loss_type == "sapo":
        per_token = calc_sapo_surrogate(ratio, advantages, sapo_temperature_pos, sapo_temperature_neg)
    elif loss_type == "vespo":
        phi = calc_vespo_weights(logprobs - old_logprobs, advantages, mask, vespo_k_pos, vespo_lambda_pos,
                                 vespo_k_neg, vespo_lambda_neg)  # [batch, 1]
        per_token = phi * advantages.unsqueeze(-1) * logprobs
        phi_sum = phi.sum()
    else:
        raise ValueError(f"calc_grpo_objective: loss_type must be one of {', '.join(GRPO_LOSS_TYPES)}; got {loss_type!r}")
    kl_sum = logprobs.new_zeros(())
    if beta != 0.0:
        if ref_logprobs is None:
            raise ValueError("calc_grpo_objective: beta != 0 needs ref_logprobs")
        kl = calc_k3_kl(logprobs, ref_logprobs)
        kl = ratio * kl if use_bias_correction_kl else kl  # [batch, gen_len]
        per_token = per_token - beta * kl
        kl_sum = masked_sum(kl.expand_as(mask), mask).detach()  # TRL logs the KL term it optimises
    J = aggregate_grpo_terms(per_token, mask, loss_type, max_completion_length, num_items_in_batch, num_splits)
    if entropy_coef != 0.0:
        if entropies is None:
            raise ValueError("calc_grpo_objective: entropy_coef != 0 needs entropies")
        m = mask.float()
        J = J + entropy_coef * (entropies * m).sum() / m.sum().clamp(min=1.0)
    low, high = clip_bounds(loss_type, epsilon_low, epsilon_high)
    metric_ratio = metric_ratio.detach()
    extremes = (clip_fraction_extremes(metric_ratio, advantages, mask, low, high) if loss_type in CLIPPED_LOSS_TYPES
                else logprobs.new_full((2,), float("nan")))
    return GRPOTerms(J, clip_counts(metric_ratio, advantages, mask, low, high), extremes, kl_sum, phi_sum)


def calc_grpo_objective(*args, **kwargs) -> Float[Tensor, ""]:
    """J alone (`calc_grpo_terms(...).objective`, same arguments): what TRL's `_compute_loss` returns, negated."""
    return calc_grpo_terms(*args, **kwargs).objective


def grpo_loss_settings(args: GRPOArgs) -> dict:
    """The keyword arguments of `calc_grpo_terms` that `args` sets (TRL's names on both sides)."""
    names = ("epsilon_low", "epsilon_high", "loss_type", "importance_sampling_level", "beta", "use_bias_correction_kl",
             "delta", "sapo_temperature_pos", "sapo_temperature_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg",
             "vespo_lambda_neg", "entropy_coef")
    return {name: getattr(args, name) for name in names}


def loss_mask(
    completion_mask: Bool[Tensor, "batch gen_len"], is_terminated: Bool[Tensor, " batch"], mask_truncated_completions: bool
) -> Bool[Tensor, "batch gen_len"]:
    """The tokens the loss sees: the completion mask, with TRL's `mask_truncated_completions` every
    token of a completion that never produced EOS (cut at gen_len) removed as well:

        mask_{i,t} = completion_mask_{i,t} · [o_i ended with EOS]

    Such a completion still has its reward and its place in its group's advantages; it only adds
    nothing to J, to dapo's N or to the metrics over kept tokens (DAPO's overlong filtering: a
    completion cut short is not judged by a reward that could not see its end)."""
    if not mask_truncated_completions:
        return completion_mask
    return completion_mask & is_terminated.unsqueeze(-1)


def clip_bounds(loss_type: str, epsilon_low: float, epsilon_high: float) -> tuple[float, float]:
    """(low, high): a token (sequence) counts as clipped low where ρ < low and A < 0, high where ρ > high
    and A > 0 — TRL's clip_ratio/* for the clipped loss types (1 − ε_low, 1 + ε_high); CISPO's capped
    weights for cispo (ρ > ε_max: TRL's cispo_clip_ratio, in the high slot); nothing for sapo and vespo."""
    if loss_type in CLIPPED_LOSS_TYPES:
        return 1 - epsilon_low, 1 + epsilon_high
    if loss_type == "cispo":
        return -math.inf, epsilon_high
    return -math.inf, math.inf


@torch.no_grad()
def calc_clip_counts(
    logprobs: Float[Tensor, "batch gen_len"],
    old_logprobs: Float[Tensor, "batch gen_len"],
    advantages: Float[Tensor, " batch"],
    mask: Bool[Tensor, "batch gen_len"],
    epsilon_low: float,
    epsilon_high: float,
    importance_sampling_level: str = "token",
) -> Float[Tensor, " 3"]:
    """[low, high, n]: how many kept tokens (sequences, for "sequence") are clipped on each side, of n.

        low  = #[ρ < 1 − ε_low  and A < 0]      high = #[ρ > 1 + ε_high and A > 0]

    TRL's clip_ratio/low_mean is low / n with the counts summed over every process, per optimizer
    step (region = low + high: the sides never overlap); counts, not fractions, so the trainer can
    sum them over processes first. (`calc_grpo_terms` returns the same from the ratio it already has.)
    """
    ratio = calc_importance_ratio(logprobs, old_logprobs, mask, importance_sampling_level)
    return clip_counts(ratio, advantages, mask, 1 - epsilon_low, 1 + epsilon_high)


def clipped_sides(
    ratio: Float[Tensor, "batch ratio_len"], advantages: Float[Tensor, " batch"], low: float, high: float
) -> tuple[Bool[Tensor, "batch ratio_len"], Bool[Tensor, "batch ratio_len"]]:
    """Where the ratio is clipped low (ρ < low and A < 0) and high (ρ > high and A > 0)."""
    A = advantages.unsqueeze(-1)
    return (ratio < low) & (A < 0), (ratio > high) & (A > 0)


def clip_counts(
    ratio: Float[Tensor, "batch ratio_len"],
    advantages: Float[Tensor, " batch"],
    mask: Bool[Tensor, "batch gen_len"],
    low: float,
    high: float,
) -> Float[Tensor, " 3"]:
    """`calc_clip_counts` from the importance ratio itself and the bounds (`clip_bounds`): per token
    (ratio_len = gen_len), or one per sequence (ratio_len = 1, GSPO: every sequence counts, as TRL)."""
    weight = mask.float() if ratio.shape[1] > 1 else torch.ones_like(ratio)  # tokens, or one per sequence
    is_low, is_high = clipped_sides(ratio, advantages, low, high)
    return torch.stack([(is_low.float() * weight).sum(), (is_high.float() * weight).sum(), weight.sum()])


def clip_fraction_extremes(
    ratio: Float[Tensor, "batch ratio_len"],
    advantages: Float[Tensor, " batch"],
    mask: Bool[Tensor, "batch gen_len"],
    low: float,
    high: float,
) -> Float[Tensor, " 2"]:
    """[low_min, high_max], TRL's clip_ratio/low_min and clip_ratio/high_max on one process:

        f_i^low  = Σ_t mask·[clipped low]_{i,t} / Σ_t mask      (GSPO: [ρ_i clipped low], 0 or 1)
        low_min  = min_i f_i^low        high_max = max_i f_i^high

    A sequence with no kept token has f = 0/0 = NaN and is skipped (TRL's nanmin / nanmax); NaN if
    every one is. Over processes TRL takes the min (max) of every process's sequences: the min (max)
    of these. (With A of one sign per sequence, low_min is 0 as soon as one sequence has A ≥ 0.)"""
    is_low, is_high = clipped_sides(ratio, advantages, low, high)
    if ratio.shape[1] > 1:
        m = mask.float()
        f_low, f_high = (is_low.float() * m).sum(-1) / m.sum(-1), (is_high.float() * m).sum(-1) / m.sum(-1)
    else:
        f_low, f_high = is_low.float().squeeze(-1), is_high.float().squeeze(-1)
    return torch.stack([nan_extreme(f_low, largest=False), nan_extreme(f_high, largest=True)])


def nan_extreme(x: Tensor, largest: bool, dim: int | None = None) -> Tensor:
    """min (or max) of `x` ignoring NaN, over `dim` (all of it when None); NaN where every value is NaN."""
    fill = -math.inf if largest else math.inf
    filled = torch.where(x.isnan(), fill, x)
    out = (filled.amax(dim) if largest else filled.amin(dim)) if dim is not None else (filled.max() if largest else filled.min())
    return torch.where(out == fill, float("nan"), out)
