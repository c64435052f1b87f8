"""Per-token terms over the vocabulary — log π(token), entropy H[π], KL(π ‖ π_ref) — a chunk of
positions at a time, so memory grows with the chunk, not with minibatch × vocabulary.

A language model's last step is the unembedding, logits = ĥ W_U + b_U: one row of d_vocab
numbers per position. At the tiny preset's minibatch (16 × 30 positions, V = 8,192) that is
3.9 M floats per tensor, and PPO's objective writes several of them (the logits, their
log-softmax, its exp, the entropy's and the KL's products, the reference's log-softmax), all of
which autograd keeps for backward. At GPT-2's V = 50,257 they are six times larger.

So the trainers stop the forward pass at ĥ, the residual stream after the final LayerNorm
(`final_hidden`: d_model numbers per position), and `token_terms` does the vocabulary-wide part
a chunk of positions at a time: a chunk's logits are made, reduced to a few numbers per position
(and logsumexp(z)) and dropped. Backward (`VocabTerms.backward`) makes each chunk's logits again
and applies the gradients of the three terms written out by hand — with z = logits / T,
p = softmax(z), log p = z − logsumexp(z):

    ∂ log p_target / ∂z_v = 1[v = target] − p_v
    ∂ H / ∂z_v            = −p_v (log p_v + H)                 H  = −Σ_v p_v log p_v
    ∂ KL / ∂z_v           =  p_v (log p_v − log q_v − KL)       KL = Σ_v p_v (log p_v − log q_v), q = π_ref fixed

    ∂J/∂logits = (1/T) Σ_terms (∂J/∂term) (∂term/∂z),   ∂J/∂ĥ = ∂J/∂logits · W_Uᵀ,   ∂J/∂W_U = ĥᵀ · ∂J/∂logits

What lives through backward is ĥ, W_U and a few numbers per position. The price is a second
unembedding per chunk in backward (and the reference's, for the KL); autograd through the whole
log-softmax graph would instead keep every [positions, d_vocab] intermediate. A test checks the
values and the gradients against autograd on the formulas of `objectives.py` (`get_log_probs`'
z_t − logsumexp(z), `entropy_per_token`, `kl_per_token`). The same function scores the rollout
(without gradients: the chunks only bound the temporaries) and the learning phase, so
log π_old and log π are one computation.

The reference model's ĥ_ref (d_model numbers per position) is what PPO keeps from the rollout
for its full-vocabulary KL — 1/64 of the memory of its whole log-prob vectors at the tiny
preset — and `token_terms` unembeds it chunk by chunk with the reference's own W_U.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import HookedTransformer

from rlhf_scratch.core.host import read_per_version
from rlhf_scratch.core.objectives import temperature_scaled

LOGITS_PER_CHUNK = 2**21
"""Default most logits (positions × d_vocab) made at once: 8 MiB of float32; 256 positions at the
tiny preset's V = 8,192, 41 at GPT-2's 50,257 (`--chunk-logits`)."""


@dataclass
class TokenTerms:
    """One number per position (each [rows], or reshaped, e.g. [batch, gen_len]); None where it was not asked for."""

    logprobs: Float[Tensor, "*positions"]
    """log π_T(target) = z_target − logsumexp(z), z = logits / T."""
    entropy: Float[Tensor, "*positions"] | None = None
    """H[π_T] = −Σ_v π_T(v) log π_T(v)."""
    kl: Float[Tensor, "*positions"] | None = None
    """KL(π_T ‖ π_ref,T) = Σ_v π_T(v) (log π_T(v) − log π_ref,T(v)), over the whole vocabulary."""
    ref_logprobs: Float[Tensor, "*positions"] | None = None
    """log π_ref,T(target)."""
    ref_lse: Float[Tensor, "*positions"] | None = None
    """logsumexp(z_ref) of the reference's logits z_ref = unembed_ref(ĥ_ref) / T: with ĥ_ref, all the
    learning phase needs of the reference for its KL (`token_terms(ref_lse=...)`)."""

    def reshape(self, *shape: int) -> TokenTerms:
        return TokenTerms(*(None if t is None else t.reshape(*shape) for t in vars(self).values()))


@dataclass
class Unembedding:
    """logits = ĥ W_U + b_U (TransformerLens' `Unembed`, which GPT-2-style models use)."""

    W_U: Float[Tensor, "d_model d_vocab"]
    b_U: Float[Tensor, " d_vocab"]

    def __call__(self, hidden: Float[Tensor, "rows d_model"]) -> Float[Tensor, "rows d_vocab"]:
        return torch.addmm(self.b_U, hidden, self.W_U)  # ĥ W_U + b_U, the bias added inside the product


def unembedding(model: HookedTransformer) -> Unembedding:
    """The model's unembedding (its own W_U and b_U: a tuned model with its own, not the reference's)."""
    if (getattr(model.cfg, "output_logits_soft_cap", 0.0) or 0.0) > 0:
        raise ValueError("token_terms: models with a logit soft-cap are not supported (GPT-2-style models have none)")
    return Unembedding(model.unembed.W_U, model.unembed.b_U)


def _rowdot(a: Float[Tensor, "rows V"], b: Float[Tensor, "rows V"]) -> Float[Tensor, " rows"]:
    """Σ_v a_v b_v for every row (`torch.linalg.vecdot`: on the CPU about half a batched matmul's time here)."""
    return torch.linalg.vecdot(a, b)


def _softmax_and_lse(z: Float[Tensor, "rows V"]) -> tuple[Float[Tensor, "rows V"], Float[Tensor, " rows"]]:
    """p = softmax(z) and logsumexp(z) from one fused softmax. With m = max_v z_v the largest p_v is
    e^0 / Σ_v e^(z_v − m), so logsumexp(z) = m + log Σ_v e^(z_v − m) = m − log max_v p_v (and max_v p_v ≥ 1/V:
    its log loses nothing to underflow). On the CPU softmax + two maxima take about 40 % of
    `logsumexp` + `exp`, which write and read the same [rows, V] more often."""
    p = z.softmax(-1)
    return p, z.amax(-1) - p.amax(-1).log()


def _chunk_forward(hidden, target, ref_hidden, unembed, ref_unembed, temperature, with_entropy, ref_lse=None,
                   ref_bias=True):
    """One chunk's logsumexp(z), logsumexp(z_ref) and terms (each [c]); z = unembed(ĥ) / T in float32.

    With q = π_ref,T and log q = z_ref − logsumexp(z_ref): H = −Σ p log p and KL = Σ p (log p − log q),
    each a batched dot product over the vocabulary (`_rowdot`). With `ref_lse` given (the rollout
    kept it), the reference's logits are not made at all (`_ref_expectation`)."""
    z = temperature_scaled(unembed(hidden).float(), temperature)
    p, lse = _softmax_and_lse(z)
    logprobs = z.gather(-1, target[:, None]).squeeze(-1) - lse
    if not with_entropy and ref_hidden is None:  # get_log_probs' form: no [c, V] log-softmax written out
        return lse, logprobs, None, None, None, None
    logp = z.sub_(lse[:, None])  # z is this chunk's own tensor: log p in place
    plogp = _rowdot(p, logp)  # Σ p log p = −H
    entropy = -plogp if with_entropy else None
    kl = ref_logprobs = None
    if ref_hidden is not None and ref_lse is not None:
        # Σ_v p_v log q_v = E_p[z_ref] − logsumexp(z_ref), E_p[z_ref] = ((p W_refᵀ) · ĥ_ref + p · b_ref) / T
        kl = plogp - (_ref_expectation(p, ref_hidden, ref_unembed, temperature, ref_bias) - ref_lse)
        ref_logprobs = _ref_target_logits(ref_hidden, target, ref_unembed, temperature) - ref_lse
    elif ref_hidden is not None:
        z_ref = _ref_logits(ref_hidden, ref_unembed, temperature)
        ref_lse = _softmax_and_lse(z_ref)[1]
        logq = z_ref.sub_(ref_lse[:, None])
        ref_logprobs = logq.gather(-1, target[:, None]).squeeze(-1)
        kl = _rowdot(p, torch.sub(logp, logq, out=logq))  # log p − log q, written over log q
    return lse, logprobs, entropy, kl, ref_logprobs, ref_lse


def _ref_logits(ref_hidden, ref_unembed, temperature):
    """z_ref = unembed_ref(ĥ_ref) / T: float32, no gradient, outside any autocast (the reference's rule)."""
    with torch.no_grad(), torch.autocast(ref_hidden.device.type, enabled=False):
        return temperature_scaled(ref_unembed(ref_hidden.float()).float(), temperature)


def _ref_expectation(p, ref_hidden, ref_unembed, temperature, ref_bias):
    """E_p[z_ref] = Σ_v p_v z_ref,v per row without making z_ref: ((p W_refᵀ) · ĥ_ref + p · b_ref) / T,
    one [c, V] × [V, d] product (the reference's rule: float32, no gradient, no autocast)."""
    with torch.no_grad(), torch.autocast(ref_hidden.device.type, enabled=False):
        p = p.float()
        out = ((p @ ref_unembed.W_U.float().T) * ref_hidden.float()).sum(-1)
        if ref_bias:  # whether b_ref has a nonzero entry: decided once per call, not per chunk
            out += p @ ref_unembed.b_U.float()
        return temperature_scaled(out, temperature)


def _ref_target_logits(ref_hidden, target, ref_unembed, temperature):
    """z_ref at each row's target only: (ĥ_ref · W_ref[:, target] + b_ref[target]) / T."""
    with torch.no_grad(), torch.autocast(ref_hidden.device.type, enabled=False):
        W = ref_unembed.W_U.float()
        out = (ref_hidden.float() * W[:, target].T).sum(-1) + ref_unembed.b_U.float()[target]
        return temperature_scaled(out, temperature)


def _add_ref_logits_(coef, ref_hidden, row_scale, ref_unembed, temperature, ref_bias):
    """coef += row_scale ⊙ z_ref (each row scaled) without writing z_ref: one addmm of
    (row_scale / T · ĥ_ref) W_ref into `coef`, and the bias as a rank-one update where there is one."""
    with torch.no_grad(), torch.autocast(ref_hidden.device.type, enabled=False):
        scale = (row_scale / temperature)[:, None]
        coef.addmm_(ref_hidden.float() * scale, ref_unembed.W_U.float())
        if ref_bias:  # whether b_ref has a nonzero entry: decided once per call, not per chunk
            coef.addmm_(scale, ref_unembed.b_U.float()[None])
    return coef


class VocabTerms(torch.autograd.Function):
    """`token_terms` with the hand-written backward of the module docstring; see `token_terms`."""

    @staticmethod
    def forward(ctx, hidden, W_U, b_U, targets, ref_hidden, ref_W_U, ref_b_U, ref_lse, temperature, with_entropy, step,
                ref_bias):
        unembed = Unembedding(W_U, b_U)
        ref_unembed = None if ref_hidden is None else Unembedding(ref_W_U, ref_b_U)
        columns = [[] for _ in range(6)]
        for start in range(0, hidden.shape[0], step):
            piece = slice(start, start + step)
            out = _chunk_forward(hidden[piece], targets[piece], None if ref_hidden is None else ref_hidden[piece],
                                 unembed, ref_unembed, temperature, with_entropy,
                                 None if ref_lse is None else ref_lse[piece], ref_bias)
            for column, value in zip(columns, out):
                column.append(value)
        lse, logprobs, entropy, kl, ref_logprobs, ref_lse = [torch.cat(c) if c[0] is not None else None for c in columns]
        ctx.save_for_backward(hidden, W_U, b_U, targets, ref_hidden, ref_W_U, ref_b_U, lse, entropy, kl, ref_lse)
        ctx.temperature, ctx.step, ctx.ref_bias = temperature, step, ref_bias
        ctx.autocast = torch.get_autocast_dtype(hidden.device.type) if torch.is_autocast_enabled(hidden.device.type) else None
        empty = logprobs.new_zeros(0)
        ctx.mark_non_differentiable(*(t for t in (ref_logprobs, ref_lse) if t is not None))
        return (logprobs, empty if entropy is None else entropy, empty if kl is None else kl,
                empty if ref_logprobs is None else ref_logprobs, empty if ref_lse is None else ref_lse)

    @staticmethod
    def backward(ctx, g_logprobs, g_entropy, g_kl, _g_ref, _g_ref_lse):
        """Per chunk, with gL, gH, gK the incoming gradients of log p_target, H and KL (per row):

            ∂J/∂z = p ⊙ [−gL − gH (log p + H) + gK (log p − log q − KL)] + gL · onehot(target)
                  = p ⊙ [(gK − gH) log p − gK log q + c] + gL · onehot(target),   c = −gL − gH H − gK KL

        one fused multiply-add over the chunk, the reference's term −gK log q = −gK z_ref + gK logsumexp(z_ref)
        added by one product into it (`_add_ref_logits_`: z_ref is never written; the constant goes
        into c), then one product with p; the 1/T of ∂z/∂logits is folded into gL, gH and gK."""
        hidden, W_U, b_U, targets, ref_hidden, ref_W_U, ref_b_U, lse, entropy, kl, ref_lse = ctx.saved_tensors
        T, step = ctx.temperature, ctx.step
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_W = torch.zeros_like(W_U, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        grad_b = torch.zeros_like(b_U, dtype=torch.float32) if ctx.needs_input_grad[2] else None
        unembed = Unembedding(W_U, b_U)
        ref_unembed = None if ref_hidden is None else Unembedding(ref_W_U, ref_b_U)
        ref_bias = ctx.ref_bias
        gL = g_logprobs.float() / T
        gH = g_entropy.float() / T if entropy is not None and g_entropy.numel() else None
        gK = g_kl.float() / T if kl is not None and g_kl.numel() else None
        c = -gL
        if gH is not None:
            c = c - gH * entropy
        if gK is not None:
            c = c - gK * kl + gK * ref_lse  # −gK log q = −gK z_ref + gK logsumexp(z_ref)
        a = (0 if gK is None else gK) - (0 if gH is None else gH)  # coefficient of log p
        device = hidden.device.type
        with torch.autocast(device, dtype=ctx.autocast or torch.bfloat16, enabled=ctx.autocast is not None):
            for start in range(0, hidden.shape[0], step):
                piece = slice(start, start + step)
                h = hidden[piece]
                z = temperature_scaled(unembed(h).float(), T)
                p = z.softmax(-1)  # = exp(z − logsumexp(z)), the forward's p
                if gH is None and gK is None:
                    grad_z = p.mul_(c[piece, None])
                else:
                    logp = z.sub_(lse[piece, None])  # a fresh tensor: in place
                    coef = torch.addcmul(c[piece, None], logp, a[piece, None])
                    if gK is not None:
                        _add_ref_logits_(coef, ref_hidden[piece], -gK[piece], ref_unembed, T, ref_bias)
                    grad_z = p.mul_(coef)
                grad_z.scatter_add_(-1, targets[piece, None], gL[piece, None])
                if grad_hidden is not None:
                    grad_hidden[piece] = (grad_z.to(h.dtype) @ W_U.to(h.dtype).T).to(hidden.dtype)
                if grad_W is not None:
                    grad_W += (h.T.to(grad_z.dtype) @ grad_z).float()
                if grad_b is not None:
                    grad_b += grad_z.sum(0)
        return (grad_hidden, None if grad_W is None else grad_W.to(W_U.dtype),
                None if grad_b is None else grad_b.to(b_U.dtype), None, None, None, None, None, None, None, None, None)


def token_terms(
    hidden: Float[Tensor, "rows d_model"],
    unembed: Unembedding,
    targets: Int[Tensor, " rows"],
    temperature: float = 1.0,
    *,
    ref_hidden: Float[Tensor, "rows d_ref"] | None = None,
    ref_unembed: Unembedding | None = None,
    ref_lse: Float[Tensor, " rows"] | None = None,
    with_entropy: bool = False,
    chunk_logits: int = LOGITS_PER_CHUNK,
) -> TokenTerms:
    """log π_T(target) (and H[π_T], KL(π_T ‖ π_ref,T), log π_ref,T(target) when asked) at every row,

        z = unembed(ĥ) / T:   logprobs = z_target − logsumexp(z)
                              entropy  = −Σ_v softmax(z)_v log softmax(z)_v
                              kl       = Σ_v softmax(z)_v (log softmax(z)_v − log softmax(z_ref)_v)

    made `max(1, chunk_logits // d_vocab)` rows at a time (`chunk_logits=0`: all rows in one
    chunk), forward and backward (`VocabTerms`). Gradients flow to ĥ, W_U and b_U of `unembed`;
    the reference side never takes one and runs float32 outside autocast.

    `ref_lse`, the reference's logsumexp(z_ref) at every row (returned as `TokenTerms.ref_lse` by a
    call without it: the rollout keeps it beside ĥ_ref), spares the reference's logits entirely: with
    E_p[z_ref] = Σ_v p_v z_ref,v = ((p W_refᵀ) · ĥ_ref + p · b_ref) / T,

        kl           = Σ_v p_v log p_v − E_p[z_ref] + logsumexp(z_ref)
        ref_logprobs = z_ref,target − logsumexp(z_ref)

    one [rows, V] × [V, d] product instead of the reference's [rows, V] logits and their logsumexp
    (the same numbers up to float rounding). Backward makes no z_ref either way (`_add_ref_logits_`).
    """
    step = max(1, hidden.shape[0]) if chunk_logits <= 0 else max(1, chunk_logits // unembed.W_U.shape[-1])
    if ref_lse is not None and ref_hidden is None:
        raise ValueError("token_terms: ref_lse is the reference's logsumexp at ref_hidden's rows; ref_hidden is missing")
    ref = (None, None, None, None) if ref_hidden is None else (ref_hidden, ref_unembed.W_U, ref_unembed.b_U, ref_lse)
    ref_bias = ref_hidden is not None and read_per_version(ref_unembed.b_U, "nonzero", lambda b: bool(b.any()))  # frozen: once a run
    logprobs, entropy, kl, ref_logprobs, lse_ref = VocabTerms.apply(hidden, unembed.W_U, unembed.b_U, targets, *ref,
                                                                    temperature, with_entropy, step, ref_bias)
    with_ref = ref_hidden is not None
    return TokenTerms(logprobs, entropy if with_entropy else None, kl if with_ref else None,
                      ref_logprobs if with_ref else None, lse_ref if with_ref else None)
