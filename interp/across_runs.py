"""What each algorithm changed inside, side by side: several tuned models against one reference.

For every tuned model, on the same prompts and against the same reference:
- the per-layer residual drift: 1 − cos(resid_ref, resid_tuned) at each site;
- the per-head DLA change, tuned − reference, in nats (`interp.attention.head_dla_diff`).

How alike two algorithms' changes are is the cosine of their flattened per-head DLA-change
vectors: 1 means the same heads moved the same way in proportion, 0 means unrelated heads, −1
means opposite. A run compared with itself gives 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens import HookedTransformer

from interp import attention, logits, residual


@dataclass
class InsideChange:
    """What one tuned model changed relative to the reference."""

    label: str
    drift_sites: list[str]
    drift: Float[Tensor, "site"]
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


def change_similarity(changes: list[InsideChange]) -> Float[Tensor, "runs runs"]:
    """cos(ΔDLA_i, ΔDLA_j) of the flattened per-head DLA changes; NaN where a change is all zero."""
    vectors = torch.stack([c.head_dla_change.flatten() for c in changes])
    norms = vectors.norm(dim=1)
    sim = (vectors @ vectors.T) / (norms[:, None] * norms[None, :])
    return torch.where((norms[:, None] > 0) & (norms[None, :] > 0), sim, torch.full_like(sim, float("nan")))


def plot_inside_changes(changes: list[InsideChange], path: str | Path) -> Path:
    """Residual drift per site (lines) and each run's per-head DLA change (heatmaps, one colour scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(changes)
    fig, axes = plt.subplots(1, n + 1, figsize=(4.2 * (n + 1), 3.4))
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
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
