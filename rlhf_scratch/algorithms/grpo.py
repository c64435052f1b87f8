"""`GRPOTrainer`: Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath) and its
length-bias fixes, Dr. GRPO (Liu et al. 2025), DAPO (Yu et al. 2025) and GSPO (Zheng et al. 2025),
as TRL 1.16 computes them (`GRPOTrainer._compute_loss` and `_generate_and_score_completions`).

    for phase in range(total_phases):
        rollout = rollout_phase()       # G completions of each prompt, scored (no reference at β = 0)
        learning_phase(rollout)         # group-relative advantages → per-token clipped surrogate → ascent

RLOO's sibling (algorithms/rloo.py): G completions per prompt, no critic. Where they differ:

                  RLOO                                   GRPO
    baseline      mean of the OTHER G − 1 rewards        mean of all G, r_i included
    scale         none                                   ÷ (std + 1e-4): the group's, the batch's or none
    KL            k1, summed, folded into the reward     k3 per token in the loss (β = 0 by default)
    ratio         one per sequence                       one per token (GSPO: one per sequence)
    aggregation   mean over sequences                    `loss_type`: grpo, bnpo, dr_grpo, dapo

    A_i     = (r_i − mean_j r_j) / (std_j r_j + 1e-4)                       compute_grpo_advantages
    ρ_{i,t} = exp(log π(o_{i,t}) − log π_old(o_{i,t}))                      calc_importance_ratio
    ℓ_{i,t} = min(ρ A_i, clip(ρ, 1−ε_low, 1+ε_high) A_i) − β ρ k3_{i,t}     calc_grpo_objective (ρ k3: TRL's default)
    J       = Σ_{i,t} mask · ℓ / (the loss_type's normaliser)                (maximised: J = −TRL's loss)

How J is averaged over tokens decides what it teaches about length: see `calc_grpo_objective`
and docs/grpo.md, where the length bias of `grpo` is measured against `dr_grpo`, `dapo` and RLOO.
"""

from __future__ import annotations

import sys
from typing import NamedTuple

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor
from tqdm.auto import tqdm

from rlhf_scratch import distributed as dist
from rlhf_scratch.advantages import check_groups, group_reward_stats
from rlhf_scratch.config import GRPOArgs
from rlhf_scratch.memory import minibatch_rows
from rlhf_scratch.rollout import Rollout
from rlhf_scratch.trainer import Trainer

# Logged by GRPO's learning phase each phase, besides loop.SHARED_METRICS (TRL's names, then ours).
GRPO_METRICS = (
    "reward",  # mean score of the reward function (before any missing-EOS penalty)
    "reward_std",  # std of the scores over the batch
    "frac_reward_zero_std",  # fraction of prompts whose G rewards are all equal: advantage 0, no signal
    "entropy",  # mean per-token entropy of π_old over kept tokens (TRL: of π in the loss forward; equal at ρ = 1)
    "clip_ratio/low_mean",  # fraction of kept tokens (sequences, for GSPO) with ρ < 1−ε_low and A < 0
    "clip_ratio/high_mean",  # fraction with ρ > 1+ε_high and A > 0
    "clip_ratio/region_mean",  # fraction clipped on either side
    "objective/grpo",  # J, mean over minibatches
    "objective/beta",
    "completions/mean_length_neg_adv",  # ours: mean length of the completions with A < 0 (NaN if none)
    "completions/mean_length_pos_adv",  # ours: mean length of the completions with A > 0 (NaN if none)
    "charts/skipped_steps",
    "kl",  # logged only when β > 0, as TRL: mean per-token k3 of π to π_ref in the loss forward (KL_METRIC)
)
KL_METRIC = "kl"
LENGTH_NOTE = ("note: --loss-type {loss_type} changes nothing here: without a stop at EOS every completion has "
               "gen_len={gen_len} tokens, and with equal lengths grpo, bnpo, dr_grpo and dapo give the same update; "
               "the length lesson needs --stop-at-eos or --prompts rt (docs/grpo.md)")


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


class GRPOTerms(NamedTuple):
    """What `calc_grpo_terms` returns: J with its gradient, and TRL's diagnostics without one."""

    objective: Float[Tensor, ""]
    clip_counts: Float[Tensor, " 3"]
    """[low, high, n]: kept tokens (sequences, for GSPO) clipped on each side, of n (`clip_counts`)."""
    kl_sum: Float[Tensor, ""]
    """Σ over kept tokens of the KL term as optimised (ρ·k3 with the bias correction, else k3); 0 at β = 0."""


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
) -> GRPOTerms:
    """GRPO's clipped surrogate on a minibatch, MAXIMISED (= −TRL 1.16's loss), and the numbers TRL
    logs about it, from one importance ratio (`GRPOTerms`):

        ℓ_{i,t} = min(ρ A_i, clip(ρ, 1 − ε_low, 1 + ε_high) A_i) − β ρ k3_{i,t}     (ρ: calc_importance_ratio)

    (− β k3_{i,t}, without the ρ, when use_bias_correction_kl=False; TRL's default is True), then
    summed over kept tokens and divided as `loss_type` says (B rows, L = max_completion_length,
    |o_i| = Σ_t mask_{i,t}, N = num_items_in_batch):

        "grpo"     J = 1/B Σ_i 1/|o_i| Σ_t ℓ_{i,t}        each sequence's mean, then the mean
        "bnpo"     J = Σ_{i,t} ℓ / Σ_{i,t} mask           the minibatch's token mean
        "dr_grpo"  J = Σ_{i,t} ℓ / (B · L)                a constant denominator
        "dapo"     J = Σ_{i,t} ℓ / (N / num_splits)       N: kept tokens of the WHOLE generation batch

    Why it matters (the Dr. GRPO paper's length bias): under "grpo" a token of completion i weighs
    1/|o_i|. For A > 0 a short completion's tokens are pushed up harder than a long one's: short
    right answers are favoured. For A < 0 a long completion's tokens are pushed down more gently
    than a short one's: long wrong answers are penalised less, so wrong answers drift longer.
    "dr_grpo" and "dapo" give every token the same weight whatever its completion's length.

    "dapo" as TRL: N counts the kept tokens of the generation batch over every minibatch and every
    process, and each optimizer step divides its sum by N / num_splits (num_splits = minibatches ×
    processes; TRL's num_processes · steps_per_generation / gradient_accumulation_steps). Each
    step's denominator is then the same constant whatever tokens its rows hold, so a batch split
    into minibatches or over processes (DDP averages the gradients) gives the gradient of one
    process on the whole batch. Without N, the minibatch's own count is used (= "bnpo").

    The ρ on k3 (TRL's `use_bias_correction_kl`, from DeepSeek-V3.2) is the surrogate's own ρ: raw
    (not clipped), with its gradient (not detached), the sequence's ρ_i under GSPO broadcast over its
    tokens. The tokens were sampled from π_old, so the KL of π needs the weight ρ, and then

        ∇(ρ k3) = ρ (k3 + 1 − π_ref/π) ∇log π = ρ (log π − log π_ref) ∇log π

    whose mean over o ~ π_old is ∇KL(π ‖ π_ref), the reverse KL that k3 estimates. Without ρ,
    ∇k3 = (1 − π_ref/π) ∇log π, whose mean under π is −Σ_o π_ref ∇log π = ∇KL(π_ref ‖ π): the
    forward KL. At ρ = 1 (the first minibatch of one pass) the value is the same, the gradient not.
    """
    m = mask.float()
    ratio = calc_importance_ratio(logprobs, old_logprobs, mask, importance_sampling_level)
    A = advantages.unsqueeze(-1)  # [batch, 1]
    per_token = torch.minimum(ratio * A, ratio.clamp(1 - epsilon_low, 1 + epsilon_high) * A)
    kl_sum = logprobs.new_zeros(())
    if beta != 0.0:
        if ref_logprobs is None:
            raise ValueError("calc_grpo_objective: beta != 0 needs ref_logprobs")
        kl = calc_k3_kl(logprobs, ref_logprobs)
        kl = ratio * kl if use_bias_correction_kl else kl  # [batch, gen_len]
        per_token = per_token - beta * kl
        kl_sum = kl.expand_as(m)[mask].sum().detach()  # TRL logs the KL term it optimises
    kept = per_token * m  # [batch, gen_len] (a [batch, 1] sequence term broadcasts over its tokens)
    if loss_type == "grpo":
        J = (kept.sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        J = kept.sum() / m.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        J = kept.sum() / (per_token.shape[0] * max_completion_length)
    elif loss_type == "dapo":
        n = m.sum() if num_items_in_batch is None else torch.as_tensor(num_items_in_batch, dtype=m.dtype)
        J = kept.sum() / (n.clamp(min=1.0) / num_splits)
    else:
        raise ValueError(f"calc_grpo_objective: loss_type must be grpo, bnpo, dr_grpo or dapo; got {loss_type!r}")
    return GRPOTerms(J, clip_counts(ratio.detach(), advantages, mask, epsilon_low, epsilon_high), kl_sum)


def calc_grpo_objective(*args, **kwargs) -> Float[Tensor, ""]:
    """J alone (`calc_grpo_terms(...).objective`, same arguments): what TRL's `_compute_loss` returns, negated."""
    return calc_grpo_terms(*args, **kwargs).objective


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
    return clip_counts(ratio, advantages, mask, epsilon_low, epsilon_high)


def clip_counts(
    ratio: Float[Tensor, "batch ratio_len"],
    advantages: Float[Tensor, " batch"],
    mask: Bool[Tensor, "batch gen_len"],
    epsilon_low: float,
    epsilon_high: float,
) -> Float[Tensor, " 3"]:
    """`calc_clip_counts` from the importance ratio itself: per token (ratio_len = gen_len), or
    one per sequence (ratio_len = 1, GSPO)."""
    A = advantages.unsqueeze(-1)
    weight = mask.float() if ratio.shape[1] > 1 else torch.ones_like(ratio)  # tokens, or one per sequence
    low = ((ratio < 1 - epsilon_low) & (A < 0)).float() * weight
    high = ((ratio > 1 + epsilon_high) & (A > 0)).float() * weight
    return torch.stack([low.sum(), high.sum(), weight.sum()])


def mean_length_by_advantage_sign(
    lengths: Int[Tensor, " batch"], advantages: Float[Tensor, " batch"]
) -> dict[str, float]:
    """The mean length of the completions the update pushes down (A < 0) and up (A > 0); NaN
    where there are none. The lesson's probe: under loss_type "grpo" the first should grow."""
    lengths = lengths.float()
    neg, pos = advantages < 0, advantages > 0
    return {
        "completions/mean_length_neg_adv": lengths[neg].mean().item() if neg.any() else float("nan"),
        "completions/mean_length_pos_adv": lengths[pos].mean().item() if pos.any() else float("nan"),
    }


class GRPOTrainer(Trainer):
    """GRPO of `args.model` toward the reward of `args.task` (or `reward_fn`): no value head, and no
    reference model at all when β = 0 (unless `measure_kl`)."""

    METRICS = GRPO_METRICS
    args: GRPOArgs

    def __init__(self, args: GRPOArgs, reward_fn=None, quiet: bool = False):
        super().__init__(args, reward_fn, quiet)
        if not args.eos_stops() and args.loss_type != GRPOArgs.loss_type and not self.quiet:
            tqdm.write(LENGTH_NOTE.format(loss_type=args.loss_type, gen_len=args.gen_len), file=sys.stderr)

    def uses_reference(self) -> bool:
        """As TRL: at β = 0 the reference is never loaded nor run (unless asked to measure the KL)."""
        return self.args.beta > 0 or self.args.measure_kl

    def rollout_phase(self) -> Rollout:
        """G completions of each of batch_size / G prompts, scored by the policy (and the reference if any) and the reward."""
        return self.sample(num_generations=self.args.num_generations)

    def learning_phase(self, rollout: Rollout) -> dict[str, float]:
        """Group-relative advantages → num_iterations passes of minibatch ascent on J.

        The advantages are computed from the GLOBAL batch's rewards (every rank's; a group never
        splits over ranks, the batch std spans all of them) and so is dapo's token count N. Then a
        row stands alone: minibatches are drawn from all rows shuffled, as in RLOO."""
        args = self.args
        mask = rollout.completion_mask
        all_rewards = dist.all_gather(rollout.rewards)
        all_advantages = compute_grpo_advantages(all_rewards, args.num_generations, args.scale_rewards)
        advantages = dist.local_rows(all_advantages)
        num_items_in_batch = dist.all_gather(mask.sum().view(1)).sum()  # kept tokens, whole generation batch
        use_ref = args.beta != 0.0
        counts: list[Tensor] = []  # per step: [clip low, clip high, clip n, KL-term sum, kept tokens] on this rank

        def objective(rows: Tensor) -> tuple[Tensor, dict[str, float]]:
            terms = calc_grpo_terms(
                self.token_log_probs(rollout, rows), rollout.logprobs[rows], advantages[rows], mask[rows],
                epsilon_low=args.epsilon_low, epsilon_high=args.epsilon_high, loss_type=args.loss_type,
                max_completion_length=args.gen_len, importance_sampling_level=args.importance_sampling_level,
                ref_logprobs=rollout.ref_logprobs[rows] if use_ref else None, beta=args.beta,
                num_items_in_batch=num_items_in_batch, num_splits=args.num_minibatches * dist.world_size(),
                use_bias_correction_kl=args.use_bias_correction_kl,
            )
            counts.append(torch.cat([terms.clip_counts, torch.stack([terms.kl_sum, mask[rows].sum().float()])]))
            return terms.objective, {"objective/grpo": terms.objective.item()}

        learned = self.ascend(minibatch_rows(len(rollout), args.num_minibatches, args.num_iterations), objective,
                              total=args.num_minibatches * args.num_iterations)
        # TRL's per-step means over every process's tokens, then the mean over steps
        steps = dist.all_gather(torch.stack(counts)).view(dist.world_size(), len(counts), 5).sum(0)  # [steps, 5]
        low, high = (steps[:, 0] / steps[:, 2]).mean().item(), (steps[:, 1] / steps[:, 2]).mean().item()
        return {
            **group_reward_stats(dist.all_gather(rollout.scores), all_rewards, args.num_generations),
            **({KL_METRIC: (steps[:, 3] / steps[:, 4]).mean().item()} if use_ref else {}),
            "entropy": dist.all_gather(rollout.entropy)[dist.all_gather(mask)].mean().item(),
            "clip_ratio/low_mean": low,
            "clip_ratio/high_mean": high,
            "clip_ratio/region_mean": low + high,
            **learned,
            "objective/beta": args.beta,
            **mean_length_by_advantage_sign(dist.all_gather(rollout.lengths), all_advantages),
        }
