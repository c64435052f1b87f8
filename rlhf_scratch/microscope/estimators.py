"""Every gradient estimator, written as the package computes it: each is a scalar whose gradient
(at ratio 1: log π_old = log π, detached) is the update the package would take.

An estimator sees `Rows`: some completions, their gathered logits (a leaf, so each row's gradient
is its own), log π and log π_ref of each token, the rewards and the exact values. It returns

    unit "completion":  Σ over rows of f(row)      ∇ of row y's term is the estimate g(y) from one completion
    unit "batch":       J(batch)                   ∇ is the estimate from one batch (G completions of each prompt)

Sign: a reward estimator returns what the trainer ASCENDS (its ∇ estimates ∇J); a KL estimator
returns the PENALTY (its ∇ estimates ∇KL, which the trainer subtracts β times).

Nothing here re-implements a loss: the advantages, surrogates and KL terms are the package's
(`compute_rloo_advantages`, `calc_rloo_objective`, `compute_grpo_advantages`, `calc_grpo_objective`,
`calc_k3_kl`, `compute_kl_shaped_rewards`, `compute_advantages`, `compute_gae_advantages`,
`calc_clipped_sur_obj`, `token_terms`). Two formulas are written here: k2 = ½ (log π − log π_ref)²,
which the package does not have, and Σ_t A_t log π(y_t), the policy gradient itself, to show PPO's
advantages without the surrogate's whitening.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from jaxtyping import Float
from torch import Tensor

from rlhf_scratch import config
from rlhf_scratch.algorithms.grpo import calc_grpo_objective, calc_k3_kl, compute_grpo_advantages
from rlhf_scratch.algorithms.rloo import calc_rloo_objective, compute_kl_shaped_rewards, compute_rloo_advantages
from rlhf_scratch.core.advantages import compute_advantages, compute_gae_advantages
from rlhf_scratch.core.objectives import calc_clipped_sur_obj, calc_k2_kl, sequence_log_probs
from rlhf_scratch.core.vocab_terms import Unembedding, token_terms
from rlhf_scratch.microscope.env import Completions, token_log_probs


@dataclass(frozen=True)
class Knobs:
    """The settings an estimator reads."""

    num_generations: int = 8
    """G: completions per group (a batch is one group of each prompt)."""
    clip: float = 0.2
    """ε of every clipped surrogate (never binds: the ratio is 1)."""
    gae_lambda: float = 0.95
    """λ of PPO's GAE entries (γ = 1)."""
    temperature: float = 0.7
    """T of the temperature entries."""
    top_k: int = 3
    """k of the top-k entries."""
    max_len: int = 5
    """L, the longest completion (dr_grpo's max_completion_length)."""


@dataclass(frozen=True)
class Rows:
    """Completions as an estimator sees them (slice with `rows[a:b]`)."""

    comps: Completions
    logits: Float[Tensor, "n seq vocab"]
    """The policy's logits at every position: a leaf of its own, so ∇ per row is that row's."""
    ref_logits: Float[Tensor, "n seq vocab"]
    logprobs: Float[Tensor, "n gen"]
    """log π(y_t | y_<t) at T = 1 (`get_log_probs`), with gradient."""
    ref_logprobs: Float[Tensor, "n gen"]
    rewards: Float[Tensor, " n"]
    values: Float[Tensor, "n seq"]
    """The exact V(s_t) of the state at each position (0 after the end)."""
    knobs: Knobs
    sampler_logprobs: Float[Tensor, "n gen"] | None = None
    """log q(y_t | y_<t) of the distribution the completions were drawn from, no gradient: π_old of
    every ratio. On-policy (q = π) it is log π detached (`make_rows`); off-policy (`offpolicy`) the
    stale or mismatched sampler's."""

    def __len__(self) -> int:
        return len(self.comps)

    def __getitem__(self, rows: slice) -> Rows:
        return replace(self, comps=self.comps[rows], logits=self.logits[rows], ref_logits=self.ref_logits[rows],
                       logprobs=self.logprobs[rows], ref_logprobs=self.ref_logprobs[rows], rewards=self.rewards[rows],
                       values=self.values[rows], sampler_logprobs=self.sampler_logprobs[rows])

    def seq_logprobs(self) -> Float[Tensor, " n"]:
        """log π(y) = `sequence_log_probs` of the kept tokens."""
        return sequence_log_probs(self.logprobs, self.comps.mask)

    def sampler_seq_logprobs(self) -> Float[Tensor, " n"]:
        """log q(y), the sampler's (π_old of the sequence ratio): log π(y) detached on-policy."""
        return sequence_log_probs(self.sampler_logprobs, self.comps.mask)


def make_rows(comps: Completions, logits: Tensor, ref_logits: Tensor, rewards: Tensor, values: Tensor, knobs: Knobs,
              sampler_logprobs: Tensor | None = None) -> Rows:
    """Rows with log π and log π_ref of every token computed once (`get_log_probs`, T = 1); the
    sampler's log-probs default to log π detached (on-policy)."""
    with torch.no_grad():
        ref_logprobs = token_log_probs(ref_logits, comps)
    logprobs = token_log_probs(logits, comps)
    sampler = logprobs.detach() if sampler_logprobs is None else sampler_logprobs
    return Rows(comps, logits, ref_logits, logprobs, ref_logprobs, rewards, values, knobs, sampler)


@dataclass(frozen=True)
class Estimator:
    """One estimator: its objective, what one draw of it uses, and what it is compared with."""

    name: str
    fn: Callable[[Rows], Tensor]
    unit: str
    """"completion" (exact, by enumeration) or "batch" (Monte-Carlo over sampled batches)."""
    true: str
    """The `truth.truths` key of the gradient it is compared with."""
    about: str
    sampling: str = "policy"
    """Where its completions come from: "policy" (π), "top_k" (π_k) or "temperature" (π_T)."""


# --- one completion at a time (exact) -------------------------------------------------------------


def surrogate_sum(rows: Rows, advantages: Float[Tensor, " n"], seq_logprobs: Tensor | None = None) -> Float[Tensor, ""]:
    """Σ_i A_i ρ_i at ρ = 1: RLOO's sequence surrogate (`calc_rloo_objective`, a mean) times the rows,
    so its gradient at row i is A_i ∇log π(y_i), one completion's REINFORCE term."""
    seq = rows.seq_logprobs() if seq_logprobs is None else seq_logprobs
    eps = rows.knobs.clip
    return len(rows) * calc_rloo_objective(seq, seq.detach(), advantages, eps, eps)


def reinforce(rows: Rows) -> Float[Tensor, ""]:
    """g(y) = r(y) ∇log π(y): the score-function estimator, no baseline."""
    return surrogate_sum(rows, rows.rewards)


def topk_full_softmax(rows: Rows) -> Float[Tensor, ""]:
    """y ~ π_k (top-k sampling), scored with the full softmax: g(y) = r(y) ∇log π(y)."""
    return reinforce(rows)


def topk_sampled(rows: Rows) -> Float[Tensor, ""]:
    """y ~ π_k, scored with the distribution sampled: g(y) = r(y) ∇log π_k(y)."""
    seq = sequence_log_probs(token_log_probs(rows.logits, rows.comps, top_k=rows.knobs.top_k), rows.comps.mask)
    return surrogate_sum(rows, rows.rewards, seq)


def temperature_unscaled(rows: Rows) -> Float[Tensor, ""]:
    """y ~ π_T, scored at T = 1 (the logits not divided by T): g(y) = r(y) ∇log π(y)."""
    return reinforce(rows)


def temperature_sampled(rows: Rows) -> Float[Tensor, ""]:
    """y ~ π_T, scored at T (`temperature_scaled`, as the package does): g(y) = r(y) ∇log π_T(y)."""
    seq = sequence_log_probs(token_log_probs(rows.logits, rows.comps, temperature=rows.knobs.temperature), rows.comps.mask)
    return surrogate_sum(rows, rows.rewards, seq)


def k1_loss(rows: Rows) -> Float[Tensor, ""]:
    """k1 = Σ_t (log π − log π_ref) as a loss term: ∇ = Σ_t ∇log π(y_t), the score."""
    return sequence_log_probs(rows.logprobs - rows.ref_logprobs, rows.comps.mask).sum()


def k2_loss(rows: Rows) -> Float[Tensor, ""]:
    """k2 = Σ_t ½ (log π − log π_ref)² as a loss term: ∇ = Σ_t (log π − log π_ref) ∇log π(y_t)."""
    return sequence_log_probs(calc_k2_kl(rows.logprobs, rows.ref_logprobs), rows.comps.mask).sum()


def k3_loss(rows: Rows) -> Float[Tensor, ""]:
    """k3 = Σ_t (π_ref/π − log(π_ref/π) − 1) as a loss term (`calc_k3_kl`): ∇ = Σ_t (1 − π_ref/π) ∇log π(y_t)."""
    return sequence_log_probs(calc_k3_kl(rows.logprobs, rows.ref_logprobs), rows.comps.mask).sum()


def k3_loss_rho(rows: Rows) -> Float[Tensor, ""]:
    """GRPO's KL term as TRL weighs it (`use_bias_correction_kl`): β ρ k3 in `calc_grpo_objective`, at
    A = 0 and β = 1 under dr_grpo (Σ ℓ / (B·L), so × −B·L gives Σ_t ρ k3), ρ = π / π_old with π_old the
    sampler (`rows.sampler_logprobs`). ∇(ρ k3) = ρ (log π − log π_ref) ∇log π: at ρ = 1 k2's gradient."""
    n, L = rows.logprobs.shape
    J = calc_grpo_objective(rows.logprobs, rows.sampler_logprobs, rows.rewards.new_zeros(n), rows.comps.mask,
                            epsilon_low=rows.knobs.clip, epsilon_high=rows.knobs.clip, loss_type="dr_grpo",
                            max_completion_length=L, ref_logprobs=rows.ref_logprobs, beta=1.0, use_bias_correction_kl=True)
    return -J * n * L


def k1_reward(rows: Rows) -> Float[Tensor, ""]:
    """k1 folded into the reward (`compute_kl_shaped_rewards`, RLOO's): r' = −Σ_t (log π − log π_ref), no
    gradient through it, then REINFORCE on r'; minus that is the penalty's estimate k1(y) ∇log π(y)."""
    shaped = compute_kl_shaped_rewards(torch.zeros_like(rows.rewards), rows.logprobs.detach(), rows.ref_logprobs,
                                       rows.comps.mask, beta=1.0)
    return -surrogate_sum(rows, shaped)


def kl_full_vocab_loss(rows: Rows) -> Float[Tensor, ""]:
    """PPO's KL term: the full-vocabulary KL(π(·|y_<t) ‖ π_ref(·|y_<t)) at each kept position (`token_terms`,
    with the table's logits as the hidden state and the identity as W_U), summed over the completion."""
    n, L = rows.logprobs.shape
    V = rows.logits.shape[-1]
    eye = Unembedding(torch.eye(V), torch.zeros(V))
    gen = slice(0, L)  # the positions that predict y_1 … y_L (`generated_span(1)`)
    terms = token_terms(rows.logits[:, gen].reshape(n * L, V), eye, rows.comps.tokens[:, 1:].reshape(n * L),
                        ref_hidden=rows.ref_logits[:, gen].reshape(n * L, V), ref_unembed=eye, chunk_logits=0)
    return sequence_log_probs(terms.kl.view(n, L), rows.comps.mask).sum()


def advantage_pg(advantage: str) -> Callable[[Rows], Tensor]:
    """PPO's per-token advantage from the exact value, as a plain policy gradient: Σ_t A_t log π(y_t) with
    A from `compute_advantages` (one step) or `compute_gae_advantages` (γ = 1, λ), no whitening, no mean
    over the batch's tokens. With the exact V, E[A_t | s_t, a_t] = Q(s_t, a_t) − V(s_t), so its expected
    gradient is ∇J exactly, for any λ."""
    def fn(rows: Rows) -> Float[Tensor, ""]:
        A = token_advantages(rows, advantage, "exact")
        return sequence_log_probs(rows.logprobs * A, rows.comps.mask).sum()
    return fn


def token_advantages(rows: Rows, advantage: str, value: str) -> Float[Tensor, "n gen"]:
    """The package's per-token advantages of `rows` from the exact V (or V ≡ 0): one step or GAE (γ = 1)."""
    values = rows.values if value == "exact" else torch.zeros_like(rows.values)
    mask = rows.comps.mask
    if advantage == "one_step":
        return compute_advantages(values, rows.rewards, 1, mask)
    return compute_gae_advantages(values, rows.rewards, 1, gamma=1.0, gae_lambda=rows.knobs.gae_lambda, mask=mask)


# --- a batch at a time (Monte-Carlo) ---------------------------------------------------------------


def rloo(rows: Rows) -> Float[Tensor, ""]:
    """RLOO: A_i = r_i − mean of the other G − 1 (`compute_rloo_advantages`), sequence surrogate (mean over rows),
    its ratio against the sampler (1 on-policy)."""
    seq = rows.seq_logprobs()
    A = compute_rloo_advantages(rows.rewards, rows.knobs.num_generations)
    return calc_rloo_objective(seq, rows.sampler_seq_logprobs(), A, rows.knobs.clip, rows.knobs.clip)


def grpo_advantage(scale_rewards: str) -> Callable[[Rows], Tensor]:
    """GRPO's advantage (`compute_grpo_advantages`, scale_rewards) on the SEQUENCE surrogate: the
    baseline and the scaling alone, without the per-token aggregation."""
    def fn(rows: Rows) -> Float[Tensor, ""]:
        seq = rows.seq_logprobs()
        A = compute_grpo_advantages(rows.rewards, rows.knobs.num_generations, scale_rewards)
        return calc_rloo_objective(seq, seq.detach(), A, rows.knobs.clip, rows.knobs.clip)
    return fn


def grpo_loss(loss_type: str, level: str = "token", scale_rewards: str = "group") -> Callable[[Rows], Tensor]:
    """GRPO as the trainer computes it: `compute_grpo_advantages` then `calc_grpo_objective`, its ratio
    against the sampler (1 on-policy), β = 0, one minibatch (dapo's N = the batch's kept tokens)."""
    def fn(rows: Rows) -> Float[Tensor, ""]:
        A = compute_grpo_advantages(rows.rewards, rows.knobs.num_generations, scale_rewards)
        mask = rows.comps.mask
        return calc_grpo_objective(rows.logprobs, rows.sampler_logprobs, A, mask, epsilon_low=rows.knobs.clip,
                                   epsilon_high=rows.knobs.clip, loss_type=loss_type,
                                   max_completion_length=rows.knobs.max_len, importance_sampling_level=level,
                                   num_items_in_batch=mask.sum())
    return fn


def ppo(advantage: str, value: str) -> Callable[[Rows], Tensor]:
    """PPO's clipped surrogate (`calc_clipped_sur_obj`: advantages whitened over the batch's kept tokens,
    mean over them; its ratio against the sampler, 1 on-policy) with the one-step advantage
    (`compute_advantages`) or GAE (`compute_gae_advantages`, γ = 1), from the exact value V or from V ≡ 0."""
    def fn(rows: Rows) -> Float[Tensor, ""]:
        A = token_advantages(rows, advantage, value)
        return calc_clipped_sur_obj(rows.logprobs, rows.sampler_logprobs, A, rows.knobs.clip, mask=rows.comps.mask)
    return fn


def all_estimators() -> list[Estimator]:
    """Every estimator measured, in the table's order (the GRPO loss types read from
    `config.GRPO_LOSS_TYPES` now, so a loss type added there is measured too)."""
    C, B = "completion", "batch"
    out = [
        Estimator("reinforce", reinforce, C, "J", "r(y) ∇log π(y), no baseline"),
        Estimator("rloo", rloo, B, "J", "leave-one-out baseline, sequence surrogate"),
        Estimator("grpo_adv_none", grpo_advantage("none"), B, "J", "group-mean baseline (r_i included), sequence surrogate"),
        Estimator("grpo_adv_group", grpo_advantage("group"), B, "J", "… ÷ (group std + 1e-4)"),
        Estimator("grpo_adv_batch", grpo_advantage("batch"), B, "J", "… ÷ (batch std + 1e-4)"),
    ]
    out += [Estimator(f"grpo_{lt}", grpo_loss(lt), B, "J", f"GRPO, loss_type={lt}, scale_rewards=group, per-token ratio")
            for lt in config.GRPO_LOSS_TYPES]
    out += [
        Estimator("dr_grpo_paper", grpo_loss("dr_grpo", scale_rewards="none"), B, "J",
                  "Dr. GRPO as published: loss_type=dr_grpo, scale_rewards=none"),
        Estimator("gspo", grpo_loss("grpo", level="sequence"), B, "J", "GSPO: sequence ratio (geometric mean), loss_type=grpo"),
        Estimator("ppo_advantage_pg", advantage_pg("one_step"), C, "J",
                  "PPO's one-step A (exact V) as a plain policy gradient: Σ_t A_t ∇log π, no whitening"),
        Estimator("ppo_gae_advantage_pg", advantage_pg("gae"), C, "J", "… with GAE(γ=1, λ) (exact V)"),
        Estimator("ppo_clip_ratio1", ppo("one_step", "exact"), B, "J", "PPO surrogate, one-step A = V(s') − V(s), exact V"),
        Estimator("ppo_clip_ratio1_gae", ppo("gae", "exact"), B, "J", "PPO surrogate, GAE(γ=1, λ), exact V"),
        Estimator("ppo_clip_ratio1_zero_value", ppo("one_step", "zero"), B, "J", "PPO surrogate, one-step A, V ≡ 0"),
        Estimator("ppo_clip_ratio1_gae_zero_value", ppo("gae", "zero"), B, "J", "PPO surrogate, GAE(γ=1, λ), V ≡ 0"),
        Estimator("k1_loss", k1_loss, C, "kl_reverse", "Σ_t k1 as a loss term"),
        Estimator("k2_loss", k2_loss, C, "kl_reverse", "Σ_t k2 as a loss term"),
        Estimator("k3_loss", k3_loss, C, "kl_forward", "Σ_t k3 as a loss term (GRPO without the ρ weight)"),
        Estimator("k3_loss_rho", k3_loss_rho, C, "kl_reverse", "Σ_t ρ k3, TRL's use_bias_correction_kl"),
        Estimator("k1_reward", k1_reward, C, "kl_reverse", "k1 folded into the reward (score function), RLOO's"),
        Estimator("kl_full_vocab_loss", kl_full_vocab_loss, C, "kl_reverse", "PPO's per-position full-vocabulary KL, summed"),
        Estimator("topk_full_softmax", topk_full_softmax, C, "J", "top-k sampling, scored with the full softmax",
                  sampling="top_k"),
        Estimator("topk_sampled", topk_sampled, C, "J_topk", "top-k sampling, scored with the top-k distribution",
                  sampling="top_k"),
        Estimator("temperature_unscaled", temperature_unscaled, C, "J_T", "sampled at T, scored at T = 1",
                  sampling="temperature"),
        Estimator("temperature_sampled", temperature_sampled, C, "J_T", "sampled at T, scored at T (the package's)",
                  sampling="temperature"),
    ]
    return out
