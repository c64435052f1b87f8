"""The microscope off-policy: the exact gradient when the sampler is not the learner.

Every estimator of the main table is measured at ratio 1: the completions come from the policy that
scores them. In practice they do not, for two reasons, each a `Sampler` here:

    staleness k   the completions were drawn by the policy k updates ago (asynchronous training: TRL's
                  AsyncGRPOTrainer `max_staleness`, verl's fully-async mode). The history is K steps of
                  fixed length η along the true gradient, θ_{j+1} = θ_j + η ∇J(θ_j)/‖∇J(θ_j)‖ (`history`);
                  the learner is θ_K and staleness k samples from q = π_{θ_{K−k}}: a policy the learner was.
    mismatch      the learner's own weights, but the sampler computes other numbers: its logits rounded
                  to bf16 before the softmax (`bf16_logits`: an inference engine in bf16, the trainer in
                  fp32), or a top-k / top-p the learner does not score with (`sampler_token_log_probs`).

q(y) is known for every completion, so an estimator whose draw is one completion has an exact
expectation under q, E_q[g] = Σ_y q(y) g(y) (`measure.exact_moments` with q as the weights), compared
with ∇J and ∇KL(π ‖ π_ref) of the LEARNER. A group (RLOO's, GRPO's) is Monte-Carlo over batches drawn
from q. The estimators, each with A = r − V_q(x) (the sampler's exact value at the prompt, what a
group's mean estimates; PPO: A_t from the exact V_q per prefix), all as gradients of objectives:

    no correction       Σ_t A ∇log π(y_t)                          (the sampler's tokens, the learner's score)
    TRL's IS modes      Σ_t w_t A ∇log π(y_t),  w = vllm_importance_sampling_ratio(mode, C)   TIS / MIS, token / sequence
    PPO                 Σ_t ∇ min(ρ_t A_t, clip(ρ_t) A_t),  ρ_t = π(y_t)/q(y_t)
    GRPO token, GSPO    Σ_t ∇ min(ρ A, clip(ρ) A), ρ per token / the geometric mean over the sequence
    RLOO                ∇ min(ρ A, clip(ρ) A), ρ = π(y)/q(y) (the sequence ratio)

Theory fixes some rows: the full sequence weight π(y)/q(y) gives ∇J exactly at any staleness
(E_q[(π/q) A ∇log π] = Σ_y π A ∇log π = ∇J, a constant baseline having mean 0 under π) — but only
where q covers π: a top-k sampler never draws what it cuts, and full IS then follows the gradient of
J restricted to q's support. A sampler equal to the learner gives every row its on-policy value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from rlhf_scratch.algorithms.grpo import calc_clipped_surrogate, calc_grpo_objective, calc_importance_ratio
from rlhf_scratch.algorithms.rloo import calc_rloo_objective, compute_kl_shaped_rewards
from rlhf_scratch.core.objectives import get_log_probs, sequence_log_probs
from rlhf_scratch.microscope.env import Completions, Environment, gathered_logits, top_k_logits
from rlhf_scratch.microscope.estimators import Estimator, Rows, token_advantages
from rlhf_scratch.microscope.truth import expected_reward, gradient
from rlhf_scratch.rollout.generation import nucleus

VLLM_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
"""TRL 1.16's `vllm_importance_sampling_mode` values (GRPOConfig); its default is sequence_mask, C_max 3."""


# --- the samplers ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sampler:
    """Where the completions come from: a table of logits, and the top-k / top-p it samples with."""

    name: str
    about: str
    theta: Float[Tensor, "prefixes vocab"]
    top_k: int = 0
    top_p: float = 1.0
    staleness: int = 0


def history(
    env: Environment, theta: Float[Tensor, "prefixes vocab"], rewards: Float[Tensor, " n"], step: float, steps: int
) -> list[Float[Tensor, "prefixes vocab"]]:
    """θ_0 … θ_K: K = `steps` steps of length η = `step` along the normalised true gradient, each taken
    where it stands,

        θ_{j+1} = θ_j + η ∇J(θ_j) / ‖∇J(θ_j)‖          (∇J by autograd, exact)

    so the policy "k updates ago" of the learner θ_K is θ_{K−k}, a point of the learner's own path."""
    out = [theta.detach().clone()]
    for _ in range(steps):
        _, g = gradient(lambda t: expected_reward(env, t, rewards), out[-1])
        out.append(out[-1] + step * (g / g.norm()).view_as(theta))
    return out


def bf16_logits(theta: Float[Tensor, "prefixes vocab"]) -> Float[Tensor, "prefixes vocab"]:
    """The logits an engine computing in bf16 hands its softmax: each rounded to the nearest bfloat16
    (8 significant bits: a relative error up to 2⁻⁹), then back to float32."""
    return theta.to(torch.bfloat16).to(theta.dtype)


def sampler_token_log_probs(sampler: Sampler, comps: Completions) -> Float[Tensor, "n gen"]:
    """log q(y_t | y_<t) of every token under the sampler: its logits, restricted to its top-k
    (`top_k_logits`) and then its top-p nucleus (`generation.nucleus`, transformers' order), through
    `get_log_probs`; −inf for a token the sampler cannot draw, and 0 after a completion's end (nothing
    was sampled there)."""
    logits = gathered_logits(sampler.theta, comps)
    n, seq, V = logits.shape
    logits = nucleus(top_k_logits(logits, sampler.top_k).reshape(n * seq, V), sampler.top_p).view(n, seq, V)
    lp = get_log_probs(logits, comps.tokens, prefix_len=1)
    return torch.where(comps.mask, lp, torch.zeros_like(lp))


def sampler_probabilities(env: Environment, sampler_logprobs: Float[Tensor, "n gen"]) -> Float[Tensor, " n"]:
    """q(x, y) = q(y | x) / X of every completion: the distribution one draw comes from."""
    return sequence_log_probs(sampler_logprobs, env.completions.mask).exp() / env.num_prompts


# --- the corrections -----------------------------------------------------------------------------------


def vllm_importance_sampling_ratio(
    logprobs: Float[Tensor, "n gen"],
    sampling_logprobs: Float[Tensor, "n gen"],
    mask: Bool[Tensor, "n gen"],
    mode: str,
    clip_min: float | None = None,
    clip_max: float | None = 3.0,
) -> Float[Tensor, "n gen"] | Float[Tensor, "n 1"]:
    """TRL 1.16's `vllm_importance_sampling_correction` weight (`GRPOTrainer._generate_and_score_completions`),
    for each `vllm_importance_sampling_mode`:

        d_t = mask_t · (log π(y_t) − log q(y_t))       π the trainer's log-probs, q the sampler's (NaN → d_t = 0)
        token_*:      w_t = exp(d_t)                   [n, gen]  one weight per token
        sequence_*:   w   = exp(Σ_t d_t) = π(y)/q(y)   [n, 1]    one per completion
        *_truncate:   w ← clamp(w, C_min, C_max)                  truncated IS (TIS)
        *_mask:       w ← w · 1[C_min ≤ w ≤ C_max]                masked IS (MIS; a missing bound is ∓∞)

    TRL multiplies each token's loss by w, computed without gradient. `clip_max` = ∞ with
    sequence_truncate is full importance sampling."""
    if mode not in VLLM_IS_MODES:
        raise ValueError(f"mode: must be one of {', '.join(VLLM_IS_MODES)}; got {mode!r}")
    diff = torch.nan_to_num(torch.where(mask, logprobs - sampling_logprobs, torch.zeros_like(logprobs)), nan=0.0)
    log_w = diff.sum(-1, keepdim=True) if mode.startswith("sequence") else diff
    w = log_w.exp()
    if mode.endswith("truncate"):
        if clip_min is None and clip_max is None:
            raise ValueError(f"{mode}: needs clip_min or clip_max")
        return w.clamp(min=clip_min, max=clip_max)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    return w.masked_fill((w < low) | (w > high), 0.0)


def sampler_baseline_advantages(rows: Rows) -> Float[Tensor, " n"]:
    """A_i = r_i − V_q(x_i): the reward less the sampler's exact value at the prompt (`rows.values` holds
    V_q by prefix; position 0 is the prompt), the baseline a group of G → ∞ of the sampler's own
    completions estimates (RLOO's leave-one-out mean is an unbiased estimate of it)."""
    return rows.rewards - rows.values[:, 0]


def is_corrected_objective(rows: Rows, mode: str | None, clip_max: float | None = 3.0,
                           clip_min: float | None = None) -> Float[Tensor, ""]:
    """The policy gradient with TRL's correction: Σ_{i,t} mask · sg(w_{i,t}) · A_i · log π(y_{i,t}), w from
    `vllm_importance_sampling_ratio` (w = 1 for mode None: no correction), A from
    `sampler_baseline_advantages`. Its gradient, Σ_t w_t A ∇log π(y_t), is TRL's GRPO loss at ratio 1
    (its π_old recomputed by the trainer) times the weight, summed over tokens (dr_grpo's aggregation
    up to the constant B·L, so that only the weight differs between modes)."""
    A = sampler_baseline_advantages(rows)
    mask = rows.comps.mask
    w = torch.ones_like(rows.logprobs) if mode is None else vllm_importance_sampling_ratio(
        rows.logprobs.detach(), rows.sampler_logprobs, mask, mode, clip_min, clip_max)
    return torch.where(mask, w * A[:, None] * rows.logprobs, torch.zeros_like(rows.logprobs)).sum()


def ppo_clipped_objective(rows: Rows) -> Float[Tensor, ""]:
    """PPO against the sampler, per token and summed: Σ_{i,t} mask · min(ρ_t A_t, clip(ρ_t, 1 − ε, 1 + ε) A_t),
    ρ_t = π(y_t)/q(y_t), A_t = V_q(s_{t+1}) − V_q(s_t) (the reward at the end) from the sampler's exact
    value (`compute_advantages`), no whitening; the clip by `calc_clipped_surrogate` on the flattened tokens."""
    mask = rows.comps.mask
    n, L = mask.shape
    A = token_advantages(rows, "one_step", "exact")
    ratio = calc_importance_ratio(rows.logprobs, rows.sampler_logprobs, mask, "token")
    per_token = calc_clipped_surrogate(ratio.reshape(n * L, 1), A.reshape(n * L), rows.knobs.clip, rows.knobs.clip)
    return torch.where(mask, per_token.view(n, L), torch.zeros_like(rows.logprobs)).sum()


def grpo_clipped_objective(level: str) -> Callable[[Rows], Tensor]:
    """GRPO's clipped surrogate against the sampler with A = r − V_q(x) (`calc_grpo_objective`, β = 0):
    level "token", ρ_t = π(y_t)/q(y_t) (dr_grpo's Σ / (B·L), × B·L: the sum over tokens); level
    "sequence" (GSPO), ρ = exp(mean_t log π/q), one term per completion (grpo's per-sequence mean, × B)."""
    def fn(rows: Rows) -> Float[Tensor, ""]:
        n, L = rows.logprobs.shape
        A = sampler_baseline_advantages(rows)
        loss_type, scale = ("dr_grpo", n * L) if level == "token" else ("grpo", n)
        return scale * calc_grpo_objective(rows.logprobs, rows.sampler_logprobs, A, rows.comps.mask,
                                           epsilon_low=rows.knobs.clip, epsilon_high=rows.knobs.clip,
                                           loss_type=loss_type, max_completion_length=L, importance_sampling_level=level)
    return fn


def rloo_clipped_objective(rows: Rows) -> Float[Tensor, ""]:
    """RLOO's clipped sequence ratio against the sampler, A = r − V_q(x): n · `calc_rloo_objective`
    = Σ_i min(ρ_i A_i, clip(ρ_i) A_i), ρ_i = π(y_i)/q(y_i)."""
    seq = rows.seq_logprobs()
    eps = rows.knobs.clip
    return len(rows) * calc_rloo_objective(seq, rows.sampler_seq_logprobs(), sampler_baseline_advantages(rows), eps, eps)


def k1_reward_sampler(rows: Rows) -> Float[Tensor, ""]:
    """k1 folded into the reward as the rollout recorded it, from the SAMPLER's log-probs:
    r' = −Σ_t (log q − log π_ref) (`compute_kl_shaped_rewards`), then REINFORCE on r' (no weight);
    minus that is the penalty's estimate k1_q(y) ∇log π(y)."""
    shaped = compute_kl_shaped_rewards(torch.zeros_like(rows.rewards), rows.sampler_logprobs, rows.ref_logprobs,
                                       rows.comps.mask, beta=1.0)
    return -(shaped * rows.seq_logprobs()).sum()


def k1_reward_is(rows: Rows) -> Float[Tensor, ""]:
    """k1 of the LEARNER folded into the reward, weighted by the full sequence ratio w = π(y)/q(y)
    (`vllm_importance_sampling_ratio`, sequence_truncate, C = ∞): the penalty's estimate
    w(y) k1_π(y) ∇log π(y), whose mean under q is Σ_y π k1 ∇log π = ∇KL(π ‖ π_ref) exactly."""
    shaped = compute_kl_shaped_rewards(torch.zeros_like(rows.rewards), rows.logprobs.detach(), rows.ref_logprobs,
                                       rows.comps.mask, beta=1.0)
    w = vllm_importance_sampling_ratio(rows.logprobs.detach(), rows.sampler_logprobs, rows.comps.mask,
                                       "sequence_truncate", clip_max=math.inf).squeeze(-1)
    return -(w * shaped * rows.seq_logprobs()).sum()


def clip_label(c: float | None) -> str:
    """'3', '1.5' or 'inf': a clip value as a name part."""
    return "inf" if c is None or math.isinf(c) else f"{c:g}"


def correction(mode: str | None, clip_max: float | None) -> Estimator:
    """The `is_corrected_objective` of one mode and C_max as an Estimator (exact: one completion a draw)."""
    if mode is None:
        return Estimator("no_correction", lambda rows: is_corrected_objective(rows, None), "completion", "J",
                         "Σ_t A ∇log π: the sampler's tokens scored by the learner, no weight")
    label = clip_label(clip_max)
    about = {"token_truncate": f"TIS per token, w_t = min(π/q, {label})",
             "token_mask": f"MIS per token, w_t = π/q, 0 above {label}",
             "sequence_truncate": f"TIS per sequence, w = min(π(y)/q(y), {label})",
             "sequence_mask": f"MIS per sequence, w = π(y)/q(y), 0 above {label}"}[mode]
    return Estimator(f"{mode}_C{label}", lambda rows: is_corrected_objective(rows, mode, clip_max), "completion", "J",
                     about)


def clipped_estimators() -> list[Estimator]:
    """The clipped ratios of PPO, GRPO (token), GSPO and RLOO against the sampler, exactly (A from V_q)."""
    C = "completion"
    return [
        Estimator("ppo_clip", ppo_clipped_objective, C, "J", "PPO: per-token ratio π/q clipped at 1 ± ε, A_t from the exact V_q"),
        Estimator("grpo_token_clip", grpo_clipped_objective("token"), C, "J", "GRPO: per-token ratio clipped, A = r − V_q(x)"),
        Estimator("gspo_clip", grpo_clipped_objective("sequence"), C, "J",
                  "GSPO: sequence ratio (geometric mean) clipped, A = r − V_q(x)"),
        Estimator("rloo_clip", rloo_clipped_objective, C, "J", "RLOO: sequence ratio π(y)/q(y) clipped, A = r − V_q(x)"),
    ]
