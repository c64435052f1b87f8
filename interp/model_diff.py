"""Model diffing on the weights and on the mean activations: what fine-tuning did to each matrix,
and what the tuned model adds to every input.

Weights (`weight_diffs`), per parameter W_ref → W_tuned with ΔW = W_tuned − W_ref:

    relative update      ‖ΔW‖_F / ‖W_ref‖_F
    effective rank       exp(H(p)),  p_i = σ_i / Σ_j σ_j,  H(p) = −Σ_i p_i log p_i
                         (Roy & Vetterli 2007: σ the singular values of ΔW; 1 for rank 1, r for r
                         equal singular values, in between otherwise)
    energy ranks         r_q = min{ r : Σ_{i≤r} σ_i² ≥ q Σ_i σ_i² }  for q = 0.9, 0.99
                         (how many directions hold 90 % / 99 % of ‖ΔW‖_F²)
    numerical rank       #{σ_i > σ_1 · max(m, n) · ε_float32}

A per-head attention weight of TransformerLens ([head, d_model, d_head] for W_Q/W_K/W_V, [head,
d_head, d_model] for W_O) is read as the whole layer's matrix ([d_model, head·d_head], resp.
[head·d_head, d_model]), the linear map the layer applies; vectors (biases, norm weights) get the
relative update only. RL updates have been reported to be sparse in parameters yet nearly full-rank
(Mukherjee et al. 2025): r_q against min(m, n) says which it is here.

Activations — the Activation Difference Lens (Minder et al. 2025, "Narrow finetuning leaves clearly
readable traces in activation differences", arXiv 2510.13900): on unrelated text, the mean
difference of the site's activations over the first k real tokens (after BOS),

    δ_j = mean_texts (h_tuned[j] − h_ref[j]),  j = 1..k        δ̄ = mean_j δ_j

read through the logit lens of the TUNED model, (c(δ̄) / s_tuned) · w_ln · W_U
(`interp.feature_diff.direction_logits`: its mean final-norm scale s, c centres under LayerNorm),
for the tokens it promotes and suppresses, and through a dictionary: the features whose decoder
direction d_f is closest to δ̄ by cosine, with the projection δ̄ · d_f / |d_f|.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float
from torch import Tensor
from transformer_lens import HookedTransformer

from interp.feature_diff import direction_logits, final_ln_scale, real_positions, right_padded, site_activations

ENERGY_LEVELS = (0.9, 0.99)


def relative_update(w_ref: Tensor, w_tuned: Tensor) -> float:
    """‖W_tuned − W_ref‖_F / ‖W_ref‖_F (inf when W_ref is 0 and W moved, nan when neither is nonzero)."""
    delta, ref = (w_tuned - w_ref).double().norm().item(), w_ref.double().norm().item()
    if ref == 0:
        return float("nan") if delta == 0 else float("inf")
    return delta / ref


def effective_rank(singular_values: Float[Tensor, " k"]) -> float:
    """Roy & Vetterli's exp(−Σ p_i log p_i), p_i = σ_i / Σ σ (0 log 0 = 0); nan for a zero matrix."""
    s = singular_values.double().clamp_min(0)
    total = s.sum()
    if total == 0:
        return float("nan")
    p = s / total
    return math.exp(-(p * p.clamp_min(1e-300).log()).sum().item())


def energy_rank(singular_values: Float[Tensor, " k"], q: float) -> int:
    """The fewest singular values whose squares hold a share q of Σ σ² = ‖ΔW‖_F² (0 for a zero matrix)."""
    e = singular_values.double().pow(2)
    total = e.sum()
    if total == 0:
        return 0
    share = e.sort(descending=True).values.cumsum(0) / total
    return int((share < q - 1e-12).sum().item()) + 1


def numerical_rank(singular_values: Float[Tensor, " k"], shape: tuple[int, int]) -> int:
    """#{σ_i > σ_max · max(m, n) · ε} with ε the float32 machine epsilon (the weights' precision)."""
    if singular_values.numel() == 0 or singular_values.max() == 0:
        return 0
    tol = singular_values.max().item() * max(shape) * torch.finfo(torch.float32).eps
    return int((singular_values > tol).sum().item())


def as_matrix(name: str, w: Tensor) -> Tensor | None:
    """The parameter as the linear map it applies: TransformerLens' per-head W_Q/W_K/W_V
    [head, d_model, d_head] → [d_model, head·d_head], W_O [head, d_head, d_model] → [head·d_head, d_model],
    a 2-D weight as itself, anything else (biases, per-head ones [head, d_head] too; norm weights) None."""
    leaf = name.rsplit(".", 1)[-1].lstrip("_")  # grouped K/V heads: TransformerLens' _W_K, _b_K …
    if leaf.startswith("b") or leaf == "w":
        return None
    if w.ndim == 2:
        return w
    if w.ndim == 3 and leaf in ("W_Q", "W_K", "W_V", "_W_K", "_W_V"):
        return w.permute(1, 0, 2).reshape(w.shape[1], -1)
    if w.ndim == 3 and leaf == "W_O":
        return w.reshape(-1, w.shape[-1])
    return None


@dataclass
class WeightDiff:
    """One parameter's update (module docstring); the rank fields are None for a vector."""

    name: str
    shape: tuple[int, ...]
    relative_update: float
    delta_norm: float
    effective_rank: float | None = None
    rank_90: int | None = None
    rank_99: int | None = None
    numerical_rank: int | None = None
    full_rank: int | None = None
    """min(m, n) of the matrix: the most any rank can be."""


@torch.no_grad()
def weight_diff(name: str, w_ref: Tensor, w_tuned: Tensor) -> WeightDiff:
    """Relative update and, for a matrix, the ranks of ΔW (module docstring)."""
    out = WeightDiff(name, tuple(w_ref.shape), relative_update(w_ref, w_tuned), (w_tuned - w_ref).double().norm().item())
    delta = as_matrix(name, (w_tuned - w_ref).double())
    if delta is None:
        return out
    s = torch.linalg.svdvals(delta)
    out.effective_rank = effective_rank(s)
    out.rank_90, out.rank_99 = (energy_rank(s, q) for q in ENERGY_LEVELS)
    out.numerical_rank = numerical_rank(s, tuple(delta.shape))
    out.full_rank = min(delta.shape)
    return out


@torch.no_grad()
def weight_diffs(reference: torch.nn.Module, tuned: torch.nn.Module) -> list[WeightDiff]:
    """`weight_diff` for every parameter of the reference, against the tuned model's weight of the
    same name and shape, read as an attribute so that a LoRA-parametrized weight is its merged value
    (W + B A · α / r); names the tuned model lacks are skipped."""
    out = []
    for name, w in reference.named_parameters():
        try:
            w_tuned = functools.reduce(getattr, name.split("."), tuned)
        except AttributeError:
            continue
        if isinstance(w_tuned, Tensor) and w_tuned.shape == w.shape and w.is_floating_point():
            out.append(weight_diff(name, w, w_tuned))
    return out


def weight_summary(diffs: list[WeightDiff], top: int = 10) -> dict:
    """The matrices that moved most (by relative update), and over all matrices that moved: the
    median of r_99 / min(m, n) (near 1: the update is full-rank; near 0: low-rank). Vectors (biases,
    norm weights) are listed apart: a bias initialised at 0 has an infinite relative update."""
    mats = [d for d in diffs if d.full_rank]
    moved = [d for d in mats if d.delta_norm > 0]
    fill = sorted(d.rank_99 / d.full_rank for d in moved)
    return {
        "n_parameters": len(diffs), "n_matrices": len(mats), "n_matrices_moved": len(moved),
        "n_unchanged": sum(d.delta_norm == 0 for d in diffs),
        "median_rank_99_fraction": fill[len(fill) // 2] if fill else float("nan"),
        "top": [vars(d) for d in sorted(moved, key=lambda d: -d.relative_update)[:top]],
        "matrices": [vars(d) for d in mats],
        "vectors": [{"name": d.name, "relative_update": d.relative_update, "delta_norm": d.delta_norm}
                    for d in diffs if not d.full_rank],
    }


# --- the Activation Difference Lens -------------------------------------------------------------


@torch.no_grad()
def first_token_differences(reference: HookedTransformer, tuned: HookedTransformer, hook_name: str,
                            texts: list[str], k: int = 5, batch: int = 32) -> Float[Tensor, "k d_model"]:
    """δ_j = mean over `texts` of h_tuned[j] − h_ref[j] at `hook_name`, for the first k real tokens
    (BOS, EOS and pad skipped) of each text; a text shorter than j tokens does not count at j."""
    total = torch.zeros(k, reference.cfg.d_model, dtype=torch.float64)
    count = torch.zeros(k, dtype=torch.float64)
    for start in range(0, len(texts), batch):
        tokens, attend = right_padded(reference, texts[start : start + batch])
        diff = site_activations(tuned, hook_name, tokens) - site_activations(reference, hook_name, tokens)
        real = real_positions(reference, tokens, attend)
        rank = real.long().cumsum(1) - 1  # 0 at each text's first real token
        for j in range(k):
            at = real & (rank == j)
            total[j] += diff[at].double().sum(0).cpu()
            count[j] += at.sum().item()
    if count.sum() == 0:
        raise ValueError("activation difference lens: no real tokens in the texts")
    return (total / count.clamp_min(1)[:, None]).float()


@torch.no_grad()
def logit_lens_tokens(model: HookedTransformer, direction: Float[Tensor, " d_model"], scale: float,
                      k: int = 10) -> dict[str, list[tuple[str, float]]]:
    """The k tokens `direction` promotes most and the k it suppresses most through `model`'s
    unembedding at final-norm scale `scale` (`direction_logits`), as (token, logit change)."""
    logits = direction_logits(model, direction, scale)

    def named(values: Tensor, ids: Tensor) -> list[tuple[str, float]]:
        return [(model.to_string(torch.tensor([int(i)])), float(v)) for v, i in zip(values, ids)]

    up, down = logits.topk(k), (-logits).topk(k)
    return {"promoted": named(up.values, up.indices), "suppressed": named(-down.values, down.indices)}


def dictionary_matches(direction: Float[Tensor, " d_model"], W_dec: Float[Tensor, "n_features d_model"],
                       k: int = 10, alive: Bool[Tensor, " n_features"] | None = None) -> list[dict]:
    """The k features whose decoder direction is closest to `direction` by |cosine|, with the
    cosine and the projection direction · d_f / |d_f| (features with a zero decoder, or not `alive`, skipped)."""
    norms = W_dec.norm(dim=-1)
    proj = (W_dec @ direction) / norms.clamp_min(1e-12)
    cosine = proj / direction.norm().clamp_min(1e-12)
    keep = norms > 0 if alive is None else (norms > 0) & alive.to(norms.device)
    cosine = torch.where(keep, cosine, torch.zeros_like(cosine))
    top = cosine.abs().topk(min(k, len(cosine))).indices
    return [{"feature": int(f), "cosine": float(cosine[f]), "projection": float(proj[f])} for f in top]


@torch.no_grad()
def activation_difference_lens(reference: HookedTransformer, tuned: HookedTransformer, hook_name: str,
                               texts: list[str], k: int = 5, n_tokens: int = 10,
                               dictionaries: dict[str, Tensor | tuple[Tensor, Tensor]] | None = None) -> dict:
    """The ADL at one site (module docstring): δ_j for the first k tokens of `texts`, their mean δ̄,
    δ̄ (and each δ_j) through the tuned model's logit lens, and δ̄ against each dictionary's decoder
    rows (`dictionaries`: name → W_dec [n_features, d_model], or (W_dec, alive mask) to skip dead features)."""
    deltas = first_token_differences(reference, tuned, hook_name, texts, k)
    mean = deltas.mean(0)
    tokens, attend = right_padded(tuned, texts[:64])
    scale = final_ln_scale(tuned, tokens, attend)
    out = {"site": hook_name, "k": k, "n_texts": len(texts), "tuned_final_ln_scale": scale,
           "mean_delta_norm": mean.norm().item(), "delta_norms": deltas.norm(dim=-1).tolist(),
           "logit_lens": logit_lens_tokens(tuned, mean, scale, n_tokens),
           "per_position": [logit_lens_tokens(tuned, d, scale, 5)["promoted"] for d in deltas]}
    out["dictionaries"] = {}
    for name, W in (dictionaries or {}).items():
        W, alive = W if isinstance(W, tuple) else (W, None)
        out["dictionaries"][name] = dictionary_matches(mean, W.detach().float(), n_tokens, alive)
    return out
