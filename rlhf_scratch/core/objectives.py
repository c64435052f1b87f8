"""The PPO objective, one function per term, plus the diagnostics CleanRL logs.

The learning phase MAXIMISES

    objective = clipped_surrogate - value_fn_loss + entropy_bonus - kl_penalty

so every term here is returned with its coefficient already applied and with the sign a
reader expects (the two penalties are positive numbers the trainer subtracts).

All terms work from log-probabilities computed with `log_softmax`, never `log(softmax)`:
the latter underflows to log(0) = -inf for confident logits (try logits x 100), the former
stays finite.

Sequence layout: `[prefix (prefix_len tokens, incl. BOS and any left padding) | generated
(gen_len tokens)]`. Logits at position t predict token t+1, so the generated tokens are
predicted by `logits[:, prefix_len-1 : -1]` ("the generated span", `generated_span`).

Masks: a completion that ends at EOS is followed by padding, which is not an action the policy
took. Every term takes an optional `mask: Bool[batch, gen_len]` (True = kept: up to and
including the first EOS) and averages over kept positions only; `mask=None` gives exactly the
unmasked mean (the same code path as before masks existed, bit for bit).
"""

import math
import warnings

import torch
from eindex import eindex
from jaxtyping import Bool, Float, Int
from torch import Tensor


def generated_span(prefix_len: int) -> slice:
    """The positions whose logits predict the generated tokens: `logits[:, prefix_len-1 : -1]`.

    The one definition of the span, used wherever a per-position quantity (logits, values) is
    lined up with the completion tokens `tokens[:, prefix_len:]`.
    """
    return slice(prefix_len - 1, -1)


SYNC_FREE: bool | None = None
"""Which form the masked statistics take. The boolean index, x[mask] (how the blog writes it), makes a
tensor whose length is the number of kept positions: on a GPU torch reads that count back to the
host (a sync), and a CUDA graph cannot hold it. The mask-weighted sums, Σ_kept x / Σ mask (TRL's and
verl's `masked_mean`), have fixed shapes and read nothing. The same number up to float rounding (the
sums add the same values in another order). None (the default): the index on a CPU, where a read
costs nothing and every number stays as it was bit for bit; the sums on an accelerator. True or False
forces one form (tests; `benchmarks/device_syncs.py` counts what a GPU would run)."""


def sync_free(x: Tensor) -> bool:
    """Whether the masked statistics of `x` take the mask-weighted sums (`SYNC_FREE`)."""
    return SYNC_FREE if SYNC_FREE is not None else x.device.type != "cpu"


def masked_mean(x: Float[Tensor, "*shape"], mask: Bool[Tensor, "*shape"] | None = None) -> Float[Tensor, ""]:
    """Mean of x over the kept positions: sum(x[mask]) / count(mask); plain `x.mean()` without a mask.

        sync-free form (`SYNC_FREE`):  Σ where(mask, x, 0) / Σ mask

    Masked positions get exactly zero gradient (and a NaN or inf there reaches nothing: `where`, not
    x · mask). Needs at least one kept position (the mean of nothing is NaN); a completion mask always
    keeps each sample's first token.
    """
    if mask is None:
        return x.mean()
    if sync_free(x):
        return torch.where(mask, x, 0).sum() / mask.sum()
    return x[mask].mean()


def masked_sum(x: Float[Tensor, "*shape"], mask: Bool[Tensor, "*shape"]) -> Float[Tensor, ""]:
    """Σ x over the kept positions: x[mask].sum(); sync-free form (`SYNC_FREE`) Σ where(mask, x, 0)."""
    return torch.where(mask, x, 0).sum() if sync_free(x) else x[mask].sum()


def masked_var(x: Float[Tensor, "*shape"], mask: Bool[Tensor, "*shape"], unbiased: bool,
               mean: Float[Tensor, ""] | None = None) -> Float[Tensor, ""]:
    """The variance of x over the kept positions, sync-free: Σ_kept (x − x̄)² / (n − 1 if unbiased else n),
    x̄ = `masked_mean` (or `mean`, when the caller has it), n = Σ mask. With one kept position the unbiased
    variance is 0 (not NaN)."""
    n = mask.sum()
    squares = torch.where(mask, x - (masked_mean(x, mask) if mean is None else mean), 0).square().sum()
    return squares / ((n - 1).clamp(min=1) if unbiased else n)


def masked_whiten(x: Float[Tensor, "*shape"], mask: Bool[Tensor, "*shape"] | None, eps: float) -> Float[Tensor, "*shape"]:
    """(x - mean) / (std + eps), mean and std (Bessel's n-1) over the kept positions only.

    Masked positions come out as 0, whatever they held. (Their gradient is 0 for finite values; an inf
    there gives NaN through the std's gradient, 0 · inf, in either form: the advantages whitened here
    carry no gradient.) A single kept position has no spread: it comes out as 0 rather than NaN (std of
    one number).
    Sync-free form (`SYNC_FREE`): the mean and variance as mask-weighted sums (`masked_var`).
    """
    if mask is None:
        return (x - x.mean()) / (x.std() + eps)
    if sync_free(x):
        mean = masked_mean(x, mask)
        std = masked_var(x, mask, unbiased=True, mean=mean).sqrt()
        return torch.where(mask, (x - mean) / (std + eps), 0)
    kept = x[mask]
    std = kept.std() if kept.numel() > 1 else kept.new_zeros(())
    return torch.where(mask, (x - kept.mean()) / (std + eps), torch.zeros_like(x))


def gather_log_probs(
    logprobs: Float[Tensor, "batch seq d_vocab"], tokens: Int[Tensor, "batch seq"]
) -> Float[Tensor, "batch seq"]:
    """The entry of each position's vector for the token chosen there: out[b, t] = logprobs[b, t, tokens[b, t]]."""
    # eindex 0.1.2 indexes with a list of tensors, which torch >= 2.9 warns about (harmlessly).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using a non-tuple sequence", category=UserWarning)
        return eindex(logprobs, tokens, "b s [b s]")


def temperature_scaled(logits: Float[Tensor, "*shape d_vocab"], temperature: float) -> Float[Tensor, "*shape d_vocab"]:
    """The logits of the distribution that was sampled: z / T (softmax(z / T) is what `generate` draws from).

    The one place every log-prob, KL and entropy of a completion goes through — the rollout's
    log π_old and log π_ref, and each algorithm's learning-phase log π — so the ratio, the k1 KL
    and the policy gradient are all of the distribution the tokens came from (TRL divides the
    logits by T for old, reference and new log-probs alike). At T = 1 the division is skipped,
    not done: the result is the very tensor passed in, so a T = 1 run is bit-identical to one
    from before temperatures were applied.
    """
    return logits if temperature == 1.0 else logits / temperature


def get_log_probs(
    logits: Float[Tensor, "batch seq_len d_vocab"],
    tokens: Int[Tensor, "batch seq_len"],
    prefix_len: int | None = None,
    temperature: float = 1.0,
) -> Float[Tensor, "batch gen_len"]:
    """Log-probability the model gave to each token that actually came next, at sampling temperature T.

        out[b, t] = log pi_T(tokens[b, t+1] | tokens[b, :t+1]) = log_softmax(logits[b, t] / T)[tokens[b, t+1]]
                  = z[b, t, tokens[b, t+1]] - logsumexp_v z[b, t, v],      z = logits / T

    computed the second way: it needs one number per position, so no [batch, seq, d_vocab]
    log-softmax is written out (the logsumexp is as stable: it subtracts the max first).
    With `prefix_len`, only the generated tokens: t = prefix_len-1 ... seq_len-2, so
    gen_len = seq_len - prefix_len. Without it, every next token: gen_len = seq_len - 1.
    `temperature` is the one the tokens were sampled at (`temperature_scaled`; T = 1 divides nothing).
    """
    seq_len = tokens.shape[1]
    if prefix_len is None:
        prefix_len = 1
    elif not 1 <= prefix_len < seq_len:
        raise ValueError(f"prefix_len must be in [1, seq_len) = [1, {seq_len}); got {prefix_len}")
    # the positions that predict tokens[:, prefix_len:]; float32 even from bf16 autocast (precision)
    logits = temperature_scaled(logits[:, generated_span(prefix_len)].float(), temperature)
    return gather_log_probs(logits, tokens[:, prefix_len:]) - logits.logsumexp(dim=-1)


def kl_per_token(
    logits: Float[Tensor, "batch gen_len d_vocab"],
    ref_logits: Float[Tensor, "batch gen_len d_vocab"],
    from_logprobs: bool = False,
) -> Float[Tensor, "batch gen_len"]:
    """KL(pi || pi_ref) over the full vocabulary at each position: sum_v pi(v) (log pi(v) - log pi_ref(v)).

    `from_logprobs=True`: the inputs are already log_softmax(logits). Since log_softmax is
    idempotent it is the same function; the flag only skips recomputing the log-softmax, so a
    trainer can take one per minibatch and share it between log-probs, entropy and KL.
    """
    logprobs = logits if from_logprobs else logits.log_softmax(dim=-1)
    ref_logprobs = ref_logits if from_logprobs else ref_logits.log_softmax(dim=-1)
    return (logprobs.exp() * (logprobs - ref_logprobs)).sum(dim=-1)


def entropy_per_token(
    logits: Float[Tensor, "batch gen_len d_vocab"], from_logprobs: bool = False
) -> Float[Tensor, "batch gen_len"]:
    """Entropy of pi at each position: - sum_v pi(v) log pi(v), nats (`from_logprobs` as in `kl_per_token`)."""
    logprobs = logits if from_logprobs else logits.log_softmax(dim=-1)
    return -(logprobs.exp() * logprobs).sum(dim=-1)


def sequence_log_probs(
    logprobs: Float[Tensor, "batch gen_len"], mask: Bool[Tensor, "batch gen_len"]
) -> Float[Tensor, " batch"]:
    """log pi(o | q) of each whole completion: sum_t mask_t * log pi(o_t | q, o_<t).

    Written with `where`, not a product, so a -inf log-prob at a padded position cannot turn
    the sum into NaN (-inf * 0 = NaN). RLOO's ratio and DPO's loss are built on this.
    """
    return torch.where(mask, logprobs, torch.zeros_like(logprobs)).sum(dim=-1)


def calc_kl_penalty(
    logits: Float[Tensor, "batch gen_len d_vocab"],
    ref_logits: Float[Tensor, "batch gen_len d_vocab"],
    beta: float,
    mask: Bool[Tensor, "batch gen_len"] | None = None,
    from_logprobs: bool = False,
) -> Float[Tensor, ""]:
    """KL penalty keeping the policy pi near the frozen reference pi_ref (the trainer subtracts it).

        penalty = beta * mean_{kept b,t} sum_v pi(v) * (log pi(v) - log pi_ref(v))

(β is the blog's and ARENA's `kl_coef`; one name, `beta`, across every algorithm here.)

    i.e. KL(pi || pi_ref) over the full vocabulary at each generated position (`kl_per_token`),
    averaged over the kept tokens only: after EOS the policy chose nothing, so a drift of its
    distribution over padding is not a drift of its behaviour. The direction
    matters: KL(pi || pi_ref) punishes pi for putting mass where pi_ref has little (writing
    text the reference model finds unlikely), which is what stops reward hacking.
    `ref_logits` should come from the frozen model (no gradient needed through it).
    `from_logprobs=True`: both are log_softmax outputs already (see `kl_per_token`).
    """
    return beta * masked_mean(kl_per_token(logits, ref_logits, from_logprobs), mask)


def calc_k2_kl(
    logprobs: Float[Tensor, "*shape"], ref_logprobs: Float[Tensor, "*shape"]
) -> Float[Tensor, "*shape"]:
    """Schulman's k2 estimator of KL(π ‖ π_ref) at each sampled token o_t (PPO's `--kl-estimator k2`):

        k2 = ½ (log π(o_t) − log π_ref(o_t))²,     ∇k2 = (log π(o_t) − log π_ref(o_t)) ∇log π(o_t)

    Its value is biased (E[k2] ≠ KL; it is ≥ 0 and close for nearby policies), but as a loss term
    sampled from π its expected gradient equals that of the full-vocabulary KL at each position
    (`kl_per_token`): E_{o~π}[(log π − log π_ref) ∇log π] = ∇_θ Σ_v π(v)(log π(v) − log π_ref(v)),
    since Σ_v π ∇log π = 0. docs/exact.md measures both exactly (cos 1.0000, norm ratio 1.0000 on one
    token); the full-vocabulary term has 4.4× less variance, k2 needs no reference logits.
    """
    return 0.5 * (logprobs - ref_logprobs) ** 2


def calc_entropy_bonus(
    logits: Float[Tensor, "batch gen_len d_vocab"],
    ent_coef: float,
    mask: Bool[Tensor, "batch gen_len"] | None = None,
    from_logprobs: bool = False,
) -> Float[Tensor, ""]:
    """Entropy bonus encouraging exploration (the trainer adds it).

        bonus = ent_coef * mean_{kept b,t} ( - sum_v pi(v) * log pi(v) )      (`entropy_per_token`)

    Uniform logits over V tokens give the maximum, ent_coef * ln(V). Kept tokens only: a bonus
    on the padding after EOS would reward spreading mass over choices never made.
    `from_logprobs=True`: `logits` is a log_softmax output already (see `kl_per_token`).
    """
    return ent_coef * masked_mean(entropy_per_token(logits, from_logprobs), mask)


def calc_value_fn_loss(
    values: Float[Tensor, "minibatch gen_len"],
    mb_returns: Float[Tensor, "minibatch gen_len"],
    vf_coef: float,
    mask: Bool[Tensor, "minibatch gen_len"] | None = None,
) -> Float[Tensor, ""]:
    """Value-function loss: regress V(s_t) onto the returns (the trainer subtracts it).

        loss = 1/2 * vf_coef * mean_{kept b,t} (V(s_t) - R_t)^2

    The 1/2 is CleanRL's and ARENA's convention (gradient vf_coef * (V - R) / N, N = kept count).
    Kept tokens only: a state after EOS is past the end of the episode and has no return.
    """
    return 0.5 * vf_coef * masked_mean((values - mb_returns).pow(2), mask)


def calc_clipped_sur_obj(
    logprobs: Float[Tensor, "minibatch gen_len"],
    mb_logprobs: Float[Tensor, "minibatch gen_len"],
    mb_advantages: Float[Tensor, "minibatch gen_len"],
    clip_coef: float,
    eps: float = 1e-8,
    mask: Bool[Tensor, "minibatch gen_len"] | None = None,
) -> Float[Tensor, ""]:
    """PPO's clipped surrogate objective (MAXIMISED).

        A_hat = (A - mean(A)) / (std(A) + eps)          advantages normalised per minibatch, mean
                                                        and std over the kept tokens only (std with
                                                        Bessel's n-1, like torch/CleanRL)
        r     = exp(log pi(a|s) - log pi_old(a|s))      probability ratio to the rollout policy
        obj   = mean_{kept b,t} min( r * A_hat, clip(r, 1-clip_coef, 1+clip_coef) * A_hat )

    The min makes the objective pessimistic: once the ratio has moved past 1+eps in the
    direction the advantage pushes (r > 1+eps for A > 0, r < 1-eps for A < 0) the term is
    constant and has no gradient; moving back is never clipped.

    Masking matters twice: padding is not an action, so it must not be pushed up or down, and
    its advantages (0 by construction) must not shift the mean and std the kept ones are
    normalised with. At masked positions r is set to 1 and A_hat to 0, so even an overflowing
    log-ratio on padding (exp(> 88) = inf in float32) cannot make the gradient NaN.
    """
    log_ratio = logprobs - mb_logprobs
    if mask is not None:
        log_ratio = torch.where(mask, log_ratio, torch.zeros_like(log_ratio))  # r = 1 on padding
    ratio = log_ratio.exp()
    adv = masked_whiten(mb_advantages, mask, eps)
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv
    return masked_mean(torch.minimum(unclipped, clipped), mask)


# --- diagnostics (log these, don't optimise them) ---------------------------------------------


@torch.no_grad()
def calc_clip_fraction(
    logprobs: Float[Tensor, "minibatch gen_len"],
    mb_logprobs: Float[Tensor, "minibatch gen_len"],
    clip_coef: float,
    mask: Bool[Tensor, "minibatch gen_len"] | None = None,
) -> Float[Tensor, ""]:
    """Fraction of tokens whose ratio lies outside the clip range (CleanRL's losses/clipfrac).

        clipfrac = mean_{kept b,t} [ |r - 1| > clip_coef ],   r = exp(logprobs - mb_logprobs)

    Kept tokens only: a ratio on padding after EOS says nothing about the policy's update. A 0-dim
    tensor, left on the device: the trainer reads a phase's statistics at once (`core.host.read_once`).
    """
    ratio = (logprobs - mb_logprobs).exp()
    return masked_mean(((ratio - 1).abs() > clip_coef).float(), mask)


@torch.no_grad()
def calc_approx_kl(
    logprobs: Float[Tensor, "minibatch gen_len"],
    mb_logprobs: Float[Tensor, "minibatch gen_len"],
    mask: Bool[Tensor, "minibatch gen_len"] | None = None,
) -> Float[Tensor, ""]:
    """Approximate KL(pi_old || pi) on the sampled tokens (CleanRL's losses/approx_kl), a 0-dim tensor
    left on the device (as `calc_clip_fraction`).

        approx_kl = mean_{kept b,t} ( (r - 1) - log r ),   log r = logprobs - mb_logprobs

    Schulman's "k3" estimator: unbiased, and never negative since log r <= r - 1. Kept tokens
    only: padding after EOS was not sampled from pi_old, so it is no sample of this expectation.
    """
    log_ratio = logprobs - mb_logprobs
    return masked_mean((log_ratio.exp() - 1) - log_ratio, mask)


@torch.no_grad()
def explained_variance(
    values: Float[Tensor, "*shape"],
    returns: Float[Tensor, "*shape"],
    mask: Bool[Tensor, "*shape"] | None = None,
) -> Float[Tensor, ""]:
    """How much of the returns' variance the value function explains (CleanRL's losses/explained_variance).

        EV = 1 - Var[R - V] / Var[R]          (population variances over the kept positions)

    1 = perfect, 0 = no better than predicting the mean, < 0 = worse. Like CleanRL, returns
    NaN when Var[R] = 0 (nothing to explain; the ratio is undefined). With a mask, over kept
    positions only: returns after EOS are filler (advantage 0, so R = V there) that would make
    the value head look better than it is.

    A 0-dim float64 tensor left on the device (read once a phase: `core.host.read_once`); the ratio is
    taken in float64 from the float32 variances, the number a division of their `.item()`s gives.
    """
    if mask is not None and sync_free(values):
        var_returns = masked_var(returns.float(), mask, unbiased=False).double()
        ev = 1.0 - masked_var((returns - values).float(), mask, unbiased=False).double() / var_returns
        return torch.where(var_returns == 0, math.nan, ev)
    if mask is not None:
        values, returns = values[mask], returns[mask]
    var_returns = returns.float().var(unbiased=False).double()
    ev = 1.0 - (returns - values).float().var(unbiased=False).double() / var_returns
    return torch.where(var_returns == 0, math.nan, ev)
