"""What each algorithm changed inside, side by side: several tuned models against one reference.

For every tuned model, on the same prompts and against the same reference:
- the per-layer residual drift: 1 − cos(resid_ref, resid_tuned) at each site;
- the per-head DLA change, tuned − reference, in nats (`interp.attention.head_dla_diff`).

How alike two algorithms' changes are is the cosine of their flattened per-head DLA-change
vectors: 1 means the same heads moved the same way in proportion, 0 means unrelated heads, −1
means opposite. A run compared with itself gives 1.

Do the algorithms move the same SAE features? With ONE sparse autoencoder (trained on the shared
reference, `interp.sae`) and one set of sequences that every model reads (completions sampled
from the reference and from each tuned model), each run i has a feature-change vector

    Δa_i(f) = mean_p a_f(x_i[p]) − mean_p a_f(x_ref[p])          (one entry per SAE feature f)

and two runs are compared by
- the cosine of their change vectors, cos(Δa_i, Δa_j) (sign matters: a feature one run turned up
  and the other down counts against);
- the Jaccard overlap of their top-k sets T_i (the k features of largest |Δa_i|):
  J_ij = |T_i ∩ T_j| / |T_i ∪ T_j|, against the overlap of two random k-sets of the live features.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor
from transformer_lens import HookedTransformer

from interp import attention, logits, residual
from interp.feature_diff import feature_diff
from rlhf_scratch.pages.html import new_figure, save_figure


@dataclass
class InsideChange:
    """What one tuned model changed relative to the reference."""

    label: str
    drift_sites: list[str]
    drift: Float[Tensor, " site"]
    """1 − mean cosine of the residuals at each site."""
    head_dla_change: Float[Tensor, "n_layers n_heads"]
    """head DLA tuned − reference (nats)."""
    logit_diff_change: float
    """logit difference tuned − reference, mean over the prompts (nats)."""


@torch.no_grad()
def inside_changes(
    reference: HookedTransformer, tuned: dict[str, HookedTransformer], prompts: list[str]
) -> list[InsideChange]:
    """`InsideChange` of each labelled tuned model, on `prompts`, against `reference`."""
    st = logits.sentiment_tokens(reference)
    tokens, last = logits.prompt_tokens(reference, prompts)
    ref_logits, ref_cache = reference.run_with_cache(tokens)
    ref_ld = logits.logit_diff(ref_logits, st, last).mean().item()
    out = []
    for label, model in tuned.items():
        model_logits, cache = model.run_with_cache(tokens)
        drift = residual.residual_drift(ref_cache, cache, tokens, last)
        out.append(InsideChange(
            label, drift.labels, 1 - drift.cosine, attention.head_dla_diff(ref_cache, cache, st, last),
            logits.logit_diff(model_logits, st, last).mean().item() - ref_ld,
        ))
    return out


def cosine_matrix(vectors: Float[Tensor, "runs n"]) -> Float[Tensor, "runs runs"]:
    """cos(v_i, v_j) = v_i · v_j / (|v_i| |v_j|) for every pair of rows; NaN where a row is all zero
    (a model that changed nothing has no direction)."""
    vectors = vectors.double()  # sums over thousands of small entries: keep the diagonal at 1
    norms = vectors.norm(dim=1)
    sim = (vectors @ vectors.T) / (norms[:, None] * norms[None, :])
    return torch.where((norms[:, None] > 0) & (norms[None, :] > 0), sim, torch.full_like(sim, float("nan"))).float()


def change_similarity(changes: list[InsideChange]) -> Float[Tensor, "runs runs"]:
    """cos(ΔDLA_i, ΔDLA_j) of the flattened per-head DLA changes; NaN where a change is all zero."""
    return cosine_matrix(torch.stack([c.head_dla_change.flatten() for c in changes]))


def plot_inside_changes(changes: list[InsideChange], path: str | Path) -> Path:
    """Residual drift per site (lines) and each run's per-head DLA change (heatmaps, one colour scale)."""
    n = len(changes)
    fig, axes = new_figure(1, n + 1, figsize=(4.2 * (n + 1), 3.4))
    for c in changes:
        axes[0].plot(range(len(c.drift)), c.drift.tolist(), marker="o", label=c.label)
    axes[0].set_xticks(range(len(changes[0].drift_sites)), changes[0].drift_sites, rotation=45, fontsize=7)
    axes[0].set(title="residual drift, 1 − cos", ylabel="1 − cos(ref, tuned)")
    axes[0].legend(fontsize=8)
    vmax = max(c.head_dla_change.abs().max().item() for c in changes) or 1.0
    for i, (ax, c) in enumerate(zip(axes[1:], changes)):
        layers, heads = c.head_dla_change.shape
        im = ax.imshow(c.head_dla_change.numpy(), cmap="RdBu", vmin=-vmax, vmax=vmax)
        ax.set_xticks(range(heads)), ax.set_yticks(range(layers))
        ax.set(title=c.label, xlabel="head", ylabel="layer" if i == 0 else None)
    fig.colorbar(im, ax=axes[1:], shrink=0.8, label="head DLA change, tuned − ref (nats)")
    return save_figure(fig, Path(path), tight_layout=False)  # one colour bar spans several axes: bbox "tight"


# --- SAE features: do the algorithms move the same ones? --------------------------------------------


def top_k_features(changes: Float[Tensor, "runs d_sae"], k: int) -> Int[Tensor, "runs k"]:
    """Each row's k features of largest |Δa_i|, largest first (ties: the lower index first)."""
    return changes.abs().argsort(dim=1, descending=True, stable=True)[:, :k]


def jaccard_matrix(changes: Float[Tensor, "runs d_sae"], k: int) -> Float[Tensor, "runs runs"]:
    """J_ij = |T_i ∩ T_j| / |T_i ∪ T_j| of the top-k sets T_i (`top_k_features`): 1 = the same k
    features moved most in both runs, 0 = none in common."""
    sets = [set(row.tolist()) for row in top_k_features(changes, k)]
    return torch.tensor([[len(a & b) / len(a | b) for b in sets] for a in sets])


def shared_top_features(changes: Float[Tensor, "runs d_sae"], k: int) -> list[tuple[int, int]]:
    """(feature, in how many runs' top-k sets) for the features in more than one: most sets first,
    then the larger mean |Δa| over the runs."""
    sets = [set(row.tolist()) for row in top_k_features(changes, k)]
    counts = {f: sum(f in t for t in sets) for t in sets for f in t}
    shared = [f for f, c in counts.items() if c > 1]
    mean_size = changes.abs().mean(0)
    return [(f, counts[f]) for f in sorted(shared, key=lambda f: (-counts[f], -mean_size[f].item(), f))]


def chance_jaccard(k: int, n: int) -> float:
    """E[J] of two independent uniformly random k-subsets of n features: the overlap I = |A ∩ B| is
    hypergeometric, P(I = i) = C(k, i) C(n − k, k − i) / C(n, k), and J = I / (2k − I), so

        E[J] = Σ_i P(I = i) · i / (2k − i).

    The level a top-k overlap must beat to say anything (n = the live features, not d_sae)."""
    from math import comb

    if not 0 < k <= n:
        raise ValueError(f"chance_jaccard: need 0 < k <= n; got k={k}, n={n}")
    return sum(comb(k, i) * comb(n - k, k - i) * i / (2 * k - i) for i in range(k + 1)) / comb(n, k)


@dataclass
class FeatureOverlap:
    """How alike the runs' feature changes are (see the module docstring)."""

    labels: list[str]
    changes: Float[Tensor, "runs d_sae"]
    """Δa_i(f): mean activation, run i − reference, on the shared sequences (SAE units)."""
    cosine: Float[Tensor, "runs runs"]
    jaccard: dict[int, Float[Tensor, "runs runs"]]
    """k -> J_ij of the top-k sets."""
    chance: dict[int, float]
    """k -> E[J] of two random k-sets of the live features."""
    n_alive: int
    """Features that fire on the shared sequences in the reference or in any run."""


def feature_overlap(labels: list[str], changes: Float[Tensor, "runs d_sae"], alive: Bool[Tensor, " d_sae"],
                    ks: tuple[int, ...] = (10, 50)) -> FeatureOverlap:
    """The cosine matrix and the top-k Jaccard matrices of the change vectors, each k with its chance
    level among the `alive` features (a k above that count is dropped)."""
    n = int(alive.sum())
    ks = tuple(k for k in ks if 0 < k <= n)
    return FeatureOverlap(labels, changes, cosine_matrix(changes), {k: jaccard_matrix(changes, k) for k in ks},
                          {k: chance_jaccard(k, n) for k in ks}, n)


@torch.no_grad()
def feature_changes(reference: HookedTransformer, tuned: dict[str, HookedTransformer], sae, hook_name: str,
                    tokens: Int[Tensor, "seqs pos"], attention_mask: Bool[Tensor, "seqs pos"] | None = None
                    ) -> tuple[Float[Tensor, "runs d_sae"], Bool[Tensor, " d_sae"]]:
    """Δa_i for every labelled tuned model (rows in `tuned`'s order), all read through one SAE on the
    same `tokens` (`interp.feature_diff.feature_diff`); and which features fire anywhere (reference or any run)."""
    rows, alive = [], None
    for model in tuned.values():
        diff = feature_diff(reference, model, sae, hook_name, tokens, attention_mask)
        rows.append(diff.change)
        fires = (diff.freq_ref > 0) | (diff.freq_tuned > 0)
        alive = fires if alive is None else alive | fires
    return torch.stack(rows), alive


def plot_feature_overlap(overlap: FeatureOverlap, path: str | Path) -> Path:
    """Run x run heatmaps, each cell annotated: the cosine of the change vectors (−1..1), then the
    top-k Jaccard overlap for each k (0..1, its chance level in the title)."""
    panels = [("cosine of the feature-change vectors", overlap.cosine, dict(cmap="RdBu", vmin=-1, vmax=1))]
    panels += [(f"top-{k} Jaccard overlap (chance {overlap.chance[k]:.2f})", overlap.jaccard[k],
                dict(cmap="viridis", vmin=0, vmax=1)) for k in overlap.jaccard]
    n = len(overlap.labels)
    side = 1.0 + 0.55 * n
    fig, axes = new_figure(1, len(panels), figsize=(side * len(panels) + 1.2, side), squeeze=False)
    for ax, (title, m, kw) in zip(axes[0], panels):
        im = ax.imshow(m.nan_to_num().numpy(), **kw)
        for i in range(n):
            for j in range(n):
                v = m[i, j].item()
                ax.text(j, i, "–" if v != v else f"{v:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if (v < 0.5 if kw["cmap"] == "viridis" else abs(v) > 0.6) else "black")
        ax.set_xticks(range(n), overlap.labels, rotation=45, ha="right", fontsize=7)
        ax.set_yticks(range(n), overlap.labels, fontsize=7)
        ax.set_title(title, fontsize=8)
        fig.colorbar(im, ax=ax, shrink=0.7)
    return save_figure(fig, Path(path))
