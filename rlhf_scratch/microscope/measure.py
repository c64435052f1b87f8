"""An estimator's expected gradient, its variance and its effect on length: exactly where one draw is
one completion, by Monte-Carlo where one draw is a batch.

    one completion:  E[g] = Σ_y q(y) g(y)                   Var = Σ_y q(y) ‖g(y)‖² − ‖E[g]‖²
    one batch:       E[g] ≈ ḡ = 1/n Σ_b g_b, b ~ q^B        Var ≈ 1/(n−1) Σ_b ‖g_b − ḡ‖²,  s.e.(ḡ) = √(Var/n)

q is the distribution the completions are drawn from (π, or top-k's π_k, or temperature's π_T).
g(y) or g_b is the gradient of the estimator's objective with respect to θ. It is read off one
backward pass: the logits of every row are a leaf of their own (θ gathered, then detached), so the
gradient at row i, position t is that row's own; summed into θ's rows by prefix (`per_unit`) it is
the gradient of the unit (completion or batch) the row belongs to.

Then, against a true gradient ∇F (`summary`):

    cos_to_true = cos(E[g], ∇F)          norm_ratio = ‖E[g]‖ / ‖∇F‖
    d_length    = ∇E[|y|] · E[g]         the change of the expected length per unit step along E[g]
    bias_se     = s.e.(ḡ) / ‖∇F‖         0 where exact: how well E[g] is known, relative to ‖∇F‖
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm

from rlhf_scratch.algorithms.online_dpo import calc_dpo_loss, select_chosen
from rlhf_scratch.microscope.env import Completions, Environment, gathered_logits, probabilities
from rlhf_scratch.microscope.estimators import Estimator, Knobs, Rows, make_rows


def per_unit(
    env: Environment, comps: Completions, row_grads: Float[Tensor, "n seq vocab"], unit_of_row: Int[Tensor, " n"],
    num_units: int,
) -> tuple[Float[Tensor, "units params"], float]:
    """θ-space gradient of each unit: row i's logit gradients added into θ's rows by prefix (`comps.idx`),
    into unit `unit_of_row[i]`. Also the largest |gradient| that reached the pad row (should be 0:
    positions after a completion's end are not actions)."""
    R, V = env.num_prefixes + 1, env.vocab
    flat = (unit_of_row[:, None, None] * R + comps.idx[:, :, None]) * V + torch.arange(V)
    G = torch.zeros(num_units * R * V, dtype=torch.float64).index_add_(0, flat.flatten(), row_grads.double().flatten())
    G = G.view(num_units, R, V)
    return G[:, :-1].reshape(num_units, -1), G[:, -1].abs().max().item()


@dataclass
class Moments:
    """What is kept of an estimator's draws: the mean gradient, its variance, how many draws, and
    each draw's projection on a few directions (for their standard errors)."""

    mean: Float[Tensor, " params"]
    variance: float
    n: int
    exact: bool
    projections: Float[Tensor, "draws directions"] | None
    """g_b · w for each draw and each direction w (None where exact)."""
    pad_leak: float
    completions_per_draw: int
    batched: bool | None = None
    """Monte-Carlo only: whether one call served a whole chunk of batches (`separable`)."""


def exact_moments(
    env: Environment, estimator: Estimator, theta: Tensor, theta_ref: Tensor, rewards: Tensor, values: Tensor,
    knobs: Knobs, weights: Float[Tensor, " n"], sampler_logprobs: Float[Tensor, "n gen"] | None = None,
) -> Moments:
    """E[g] and Var[g] of a one-completion estimator by enumeration: every completion is a row, weighted
    by its probability q(y) under the sampling distribution (rows with q = 0 are left out);
    `sampler_logprobs` (log q per token of every completion) where q is not the policy θ scores with."""
    keep = weights > 0
    comps = env.completions[keep]
    rows = rows_for(comps, theta, theta_ref, rewards[keep], values, knobs,
                    None if sampler_logprobs is None else sampler_logprobs[keep])
    (grads,) = torch.autograd.grad(estimator.fn(rows), rows.logits)
    mean, second, leak = weighted_moments(env, comps, grads, weights[keep].double())
    variance = (second - mean.pow(2).sum()).item()
    return Moments(mean, max(variance, 0.0), len(comps), True, None, leak, 1)


def weighted_moments(
    env: Environment, comps: Completions, row_grads: Float[Tensor, "n seq vocab"], w: Float[Tensor, " n"]
) -> tuple[Float[Tensor, " params"], float, float]:
    """Σ_y w(y) g(y), Σ_y w(y) ‖g(y)‖² and the largest |gradient| on the pad row, where g(y) is completion
    y's θ-gradient (`per_unit` with one unit per completion) — without making g(y) dense: the positions
    of one completion read distinct prefixes (each one token longer), so g(y) is its position-rows
    placed in distinct rows of θ and ‖g(y)‖² = Σ_t ‖∂/∂logits_t‖² over the positions before the pad row."""
    R, V = env.num_prefixes + 1, env.vocab
    grads = row_grads.double()
    flat = (comps.idx[:, :, None] * V + torch.arange(V)).flatten()
    total = torch.zeros(R * V, dtype=torch.float64).index_add_(0, flat, (w[:, None, None] * grads).flatten()).view(R, V)
    real = comps.idx < env.pad_row
    second = (w[:, None] * torch.where(real, grads.pow(2).sum(-1), 0.0)).sum().item()
    leak = grads[~real].abs().max().item() if (~real).any() else 0.0
    return total[:-1].flatten(), second, leak


def rows_for(comps: Completions, theta: Tensor, theta_ref: Tensor, rewards: Tensor, values: Tensor, knobs: Knobs,
             sampler_logprobs: Tensor | None = None) -> Rows:
    """`Rows` of these completions: the policy's gathered logits as a fresh leaf, the reference's, log-probs
    (and the sampler's, where given: off-policy)."""
    logits = gathered_logits(theta.detach(), comps).requires_grad_()
    with torch.no_grad():
        ref_logits = gathered_logits(theta_ref, comps, reference=True)
    return make_rows(comps, logits, ref_logits, rewards, values[comps.idx], knobs, sampler_logprobs)


def draw_batches(
    env: Environment, theta: Tensor, num_generations: int, n: int, generator: torch.Generator,
    q: Float[Tensor, " n"] | None = None,
) -> Int[Tensor, "batches batch"]:
    """n batches as GRPO's rollout makes them: G completions of each prompt, consecutive, prompt after
    prompt (batch = X · G rows), each drawn from π(· | x) (or from the given q(x, y), off-policy).
    Entries index the list of completions."""
    q = probabilities(env, theta) if q is None else q
    groups = []
    for x in range(env.num_prompts):
        rows = (env.completions.prompt == x).nonzero().squeeze(-1)
        picked = torch.multinomial(q[rows], n * num_generations, replacement=True, generator=generator)
        groups.append(rows[picked].view(n, num_generations))
    return torch.cat(groups, dim=1)


def batch_gradients(
    env: Environment, est: Estimator, rows: Rows, batch: int, batched: bool, retain_graph: bool = False
) -> tuple[Float[Tensor, "units params"], float]:
    """Each batch's gradient, for the m = len(rows) / batch batches of `rows` (consecutive):

        per batch:  ∇ Σ_b J(rows of b)          the estimator called once per batch (always right)
        batched:    ∇ m · J(all rows at once)   one call; right only where J is a mean over the rows
                                                of per-group terms (RLOO, grpo, dr_grpo, …): `separable`"""
    m = len(rows) // batch
    if batched:
        objective = m * est.fn(rows)
    else:
        objective = torch.stack([est.fn(rows[b * batch : (b + 1) * batch]) for b in range(m)]).sum()
    (grads,) = torch.autograd.grad(objective, rows.logits, retain_graph=retain_graph)
    return per_unit(env, rows.comps, grads, torch.arange(m).repeat_interleave(batch), m)


def separable(env: Environment, est: Estimator, rows: Rows, batch: int) -> bool:
    """Whether calling the estimator once on several batches gives each batch's own gradient: checked
    on `rows` (fresh from `rows_for`) both ways (`batch_gradients`), equal to float precision or not.
    Where it is not (the normaliser or the scaling spans the whole input: bnpo, dapo, batch std, PPO's
    whitening), the estimator is called once per batch."""
    loop, _ = batch_gradients(env, est, rows, batch, batched=False, retain_graph=True)
    once, _ = batch_gradients(env, est, rows, batch, batched=True)
    return bool(((loop - once).abs().max() <= 1e-5 * loop.abs().max() + 1e-9).item())


def monte_carlo_moments(
    env: Environment, estimator: Estimator, theta: Tensor, theta_ref: Tensor, rewards: Tensor, values: Tensor,
    knobs: Knobs, draws: Int[Tensor, "batches batch"], directions: Float[Tensor, "params k"], chunk: int = 1000,
    progress: tqdm | None = None, sampler_logprobs: Float[Tensor, "n gen"] | None = None,
) -> Moments:
    """E[g] and Var[g] of a one-batch estimator from the given draws (each row of `draws` is one
    batch: indices into the list of completions). A chunk of batches shares one backward pass, and
    one call of the estimator where that gives each batch's own gradient (`separable`).
    `sampler_logprobs`: log q per token of every completion, where the draws came from q ≠ π."""
    sampler = (lambda rows: None) if sampler_logprobs is None else (lambda rows: sampler_logprobs[rows])
    n, B = draws.shape
    total = torch.zeros(env.num_params, dtype=torch.float64)
    square = 0.0
    projections, leak, batched = [], 0.0, None
    for start in range(0, n, chunk):
        picked = draws[start : start + chunk].flatten()
        if batched is None:  # probe on the first 8 batches
            probe = picked[: min(8, n) * B]
            batched = separable(env, estimator, rows_for(env.completions[probe], theta, theta_ref, rewards[probe], values,
                                                         knobs, sampler(probe)), B)
        rows = rows_for(env.completions[picked], theta, theta_ref, rewards[picked], values, knobs, sampler(picked))
        G, chunk_leak = batch_gradients(env, estimator, rows, B, batched)
        total += G.sum(0)
        square += G.pow(2).sum().item()
        projections.append(G @ directions.double())
        leak = max(leak, chunk_leak)
        if progress is not None:
            progress.update(len(G))
    mean = total / n
    variance = (square - n * mean.pow(2).sum().item()) / max(n - 1, 1)
    return Moments(mean, max(variance, 0.0), n, False, torch.cat(projections), leak, B, batched)


ZERO = 1e-5
"""‖E[g]‖ / ‖∇F‖ below this is zero to float32 precision (k1 as a loss: ~1e-7)."""


def cos_and_ratio(g: Tensor, true: Tensor) -> tuple[float, float]:
    """(cos(g, true), ‖g‖ / ‖true‖); cos is 0 where g = 0."""
    g, true = g.double(), true.double()
    ng, nt = g.norm().item(), true.norm().item()
    return (g @ true).item() / (ng * nt) if ng > 0 else 0.0, ng / nt


def directions(true_grad: Tensor, length: Tensor, parts: dict[str, Tensor]) -> Float[Tensor, "params k"]:
    """The directions each Monte-Carlo draw is projected on (for standard errors): ∇F, ∇E[len], then
    ∇E[len] on each of `parts` (masks of θ's parameters)."""
    cols = [true_grad, length] + [length * keep.to(length.dtype) for keep in parts.values()]
    return torch.stack(cols, 1)


def _se(p: Tensor) -> float:
    """The standard error of the mean of the draws `p`: std / √n."""
    return p.std().item() / math.sqrt(len(p)) if len(p) > 1 else 0.0


def _ratio_se(num: Tensor, den: Tensor) -> float:
    """The delta-method s.e. of R = mean(num) / mean(den): √(Var[num − R·den] / n) / |mean(den)|;
    NaN where mean(den) = 0 (R is then NaN too: one-token completions gain no length)."""
    if den.mean() == 0:
        return math.nan
    R = (num.mean() / den.mean()).item()
    return _se(num - R * den) / abs(den.mean().item())


def summary(
    moments: Moments, truths: dict, true: str, compare: tuple[str, ...], length: Tensor, parts: dict[str, Tensor],
) -> dict:
    """One estimator's numbers against the true gradient ∇F = truths[true].grad:

        cos_to_true, norm_ratio              cos(E[g], ∇F), ‖E[g]‖ / ‖∇F‖
        norm_ratio_along_true                E[g]·∇F / ‖∇F‖²  (1 for an unbiased estimator, with its s.e.)
        rel_error                            ‖E[g] − ∇F‖ / ‖∇F‖  (0 for an unbiased one; MC noise adds ≈ bias_se)
        bias_se                              √(Var/n) / ‖∇F‖, 0 where exact
        variance, rel_variance               E‖g − E[g]‖² per draw, and ÷ ‖E[g]‖²
        d_length, d_length_<part>            ∇E[len]·E[g], and restricted to the parameters of each part
        length_per_gain, …_<part>            d_length ÷ (∇F·E[g]): tokens of expected length per unit of F gained
        cos_<other>, norm_ratio_<other>      against the other gradients in `compare`
        zero_mean                            ‖E[g]‖ < 1e-5 ‖∇F‖: E[g] = 0 to float precision, and cos is None

    With their standard errors (`_se`) where the draws are Monte-Carlo (from each draw's projections)."""
    g, grad = moments.mean, truths[true].grad.double()
    cos, ratio = cos_and_ratio(g, grad)
    zero = ratio < ZERO  # E[g] = 0 to float precision: its "direction" is rounding noise
    length = length.double()
    dirs = directions(grad, length, parts)
    proj = g @ dirs  # [∇F·E[g], d_length, d_length_<part> …]
    out = {
        "true": true,
        "cos_to_true": None if zero else cos,
        "zero_mean": zero,
        "norm_ratio": ratio,
        "norm_ratio_along_true": proj[0].item() / grad.pow(2).sum().item(),
        "rel_error": (g - grad).norm().item() / grad.norm().item(),
        "bias_se": 0.0 if moments.exact else math.sqrt(moments.variance / moments.n) / grad.norm().item(),
        "variance": moments.variance,
        "rel_variance": moments.variance / max(g.pow(2).sum().item(), 1e-300),
        "d_length": proj[1].item(),
        "d_length_true": (length @ grad).item(),
        "n": moments.n,
        "exact": moments.exact,
        "completions_per_draw": moments.completions_per_draw,
        "pad_leak": moments.pad_leak,
    }
    if moments.batched is not None:
        out["mc_calls"] = "one per chunk of batches (separable)" if moments.batched else "one per batch"
    names = ["length", *parts]
    for i, name in enumerate(names):
        key = "d_length" if name == "length" else f"d_length_{name}"
        out[key] = proj[1 + i].item()
        out[key.replace("d_length", "length_per_gain")] = proj[1 + i].item() / proj[0].item() if proj[0] != 0 else math.nan
    if not moments.exact:
        p = moments.projections.double()
        out["norm_ratio_along_true_se"] = _se(p[:, 0]) / grad.pow(2).sum().item()
        for i, name in enumerate(names):
            key = "d_length" if name == "length" else f"d_length_{name}"
            out[f"{key}_se"] = _se(p[:, 1 + i])
            out[key.replace("d_length", "length_per_gain") + "_se"] = _ratio_se(p[:, 1 + i], p[:, 0])
    for other in compare:
        c, r = cos_and_ratio(g, truths[other].grad)
        out[f"cos_{other}"], out[f"norm_ratio_{other}"] = None if zero else c, r
    return out


def dpo_moments(
    env: Environment, theta: Tensor, rewards: Tensor, knobs: Knobs, beta: float, loss_type: str,
) -> Moments:
    """Online DPO's expected update at the start of training (π = π_ref = θ's policy, so h = 0),
    exactly: every ordered pair (y₁, y₂) of completions of the same prompt, weighted π(y₁|x) π(y₂|x) / X.

    The pair's rows are chosen and rejected by `select_chosen` (the higher reward; a tie goes to the
    first) and its loss is `calc_dpo_loss`; with a = ∂ℓ/∂log π(y_c), b = ∂ℓ/∂log π(y_r) (autograd) and
    s(y) = ∇log π(y) (one backward over every completion), the update (−∇ℓ) of a pair is
    g = −(a s(y_c) + b s(y_r)), so E[g] = Σ_pairs w g and E‖g‖² = Σ_pairs w (a²‖s_c‖² + b²‖s_r‖² + 2ab s_c·s_r)."""
    comps = env.completions
    rows = rows_for(comps, theta, theta, rewards, torch.zeros(env.num_prefixes + 1), knobs)
    seq = rows.seq_logprobs()
    (grads,) = torch.autograd.grad(seq.sum(), rows.logits)
    S, leak = per_unit(env, comps, grads, torch.arange(len(comps)), len(comps))  # s(y), [n, params]
    seq = seq.detach()
    q = probabilities(env, theta).double()
    coef = torch.zeros(len(comps), dtype=torch.float64)
    second, pairs = 0.0, 0
    for x in range(env.num_prompts):
        ids = (comps.prompt == x).nonzero().squeeze(-1)
        first, other = ids.repeat_interleave(len(ids)), ids.repeat(len(ids))
        row_comp = torch.stack([first, other], 1).flatten()  # pair i is rows 2i, 2i+1 (`select_chosen`'s layout)
        chosen, rejected = select_chosen(rewards[row_comp])
        c, r = row_comp[chosen], row_comp[rejected]
        lc, lr = seq[c].clone().requires_grad_(), seq[r].clone().requires_grad_()
        out = calc_dpo_loss(lc, lr, seq[c], seq[r], beta, loss_type)  # the reference is the policy: h = 0
        a, b = (g.double() * len(c) for g in torch.autograd.grad(out.loss, [lc, lr]))  # ∂ℓ_p/∂log π (loss is a mean)
        w = q[first] * q[other] * env.num_prompts  # π(y₁|x) π(y₂|x) / X
        coef.index_add_(0, c, -w * a).index_add_(0, r, -w * b)
        K = S[ids] @ S[ids].T  # s·s' within the prompt (its rows are contiguous: ids[0] + 0, 1, …)
        ci, ri = c - ids[0], r - ids[0]
        second += (w * (a * a * K[ci, ci] + b * b * K[ri, ri] + 2 * a * b * K[ci, ri])).sum().item()
        pairs += len(c)
    mean = coef @ S
    return Moments(mean, max(second - mean.pow(2).sum().item(), 0.0), pairs, True, None, leak, 2)
