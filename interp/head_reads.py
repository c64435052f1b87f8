"""Which directions PPO's value head and the reward model read: through the unembedding and the dictionary.

Both heads read ĥ = ln_final.hook_normalized, the vector the unembedding reads (before the final
norm's weight, which TransformerLens folds into W_U):

    value head (PPO, `rlhf_scratch.models.policy`)   V(ĥ) = w₂ · ReLU(W₁ ĥ + b₁) + b₂        not linear
    Bradley–Terry reward model                r(ĥ) = w · ĥ_last + b                    linear

A linear head reads one direction, its weight w, exactly. The MLP head reads a different direction at
every ĥ; we take the simplest exact summary, its mean gradient over the tuned model's real positions
on the diff's sequences,

    g = mean_n ∇_ĥ V(ĥ_n) = mean_n W₁ᵀ (w₂ ⊙ 1[W₁ ĥ_n + b₁ > 0])                  (`read_direction`)

with its spread, the mean cosine of the per-position gradients with g (1: one direction everywhere,
the head is linear on these positions; near 0: g summarises little).

(a) The logit lens: moving ĥ along g changes the tuned model's logits by c(g) · w_ln · W_U
    (`interp.feature_diff.direction_logits` at scale 1: ĥ is already divided by the norm's scale;
    c centres under LayerNorm, where ĥ has mean 0, so only g's centred part is read).
(b) The dictionary: the features whose decoder direction is closest to the read direction by
    cosine (`interp.model_diff.dictionary_matches`), where the dictionary reads the same vector:
    at ln_final.hook_normalized the direction is g; at the last block's resid_post x, with
    ĥ = c(x) / s(x), it is c(g) (up to the positive scale 1/s, as the logit lens reads a direction).
    A dictionary at any other site reads another vector: the page says so, and reads the head
    through the logit lens only.

A reward that is a separate classifier (its own embedding: the sentiment classifier, a Hugging Face
model) or a rule on the text reads text, not this model's residual: the page says so in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float
from torch import Tensor, nn
from transformer_lens import HookedTransformer

from interp.families import centre_like_final_norm
from interp.model_diff import dictionary_matches, logit_lens_tokens

HEAD_SITE = "ln_final.hook_normalized"
"""The vector both heads read."""


@dataclass
class HeadReader:
    """One head that reads ĥ (module docstring)."""

    name: str
    head: nn.Module
    """ĥ [n, d_model] → [n] or [n, 1]; an `nn.Linear` is read by its weight."""
    reads: str
    """What it reads, in words, for the page."""


@dataclass
class HeadReads:
    """What `DiffLevels` hands the features page about the heads."""

    readers: Sequence[HeadReader] = ()
    notes: Sequence[str] = field(default_factory=list)
    """One line each for what reads no residual of this model (a classifier, a rule, no value head)."""


def read_direction(head: nn.Module, hidden: Float[Tensor, "n d_model"]) -> tuple[Float[Tensor, " d_model"], str, float]:
    """The direction `head` reads in ĥ, how it was taken, and its spread (module docstring): an
    `nn.Linear`'s weight, exactly (spread 1); otherwise the mean of ∇_ĥ head(ĥ_n) over the rows of
    `hidden`, with the mean cosine of the per-row gradients with it."""
    if isinstance(head, nn.Linear):
        if head.out_features != 1:
            raise ValueError(f"read_direction: a head has one output; this Linear has {head.out_features}")
        return head.weight[0].detach().clone(), "weight", 1.0
    if hidden.shape[0] == 0:
        raise ValueError("read_direction: no positions to take the mean gradient over")
    h = hidden.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(head(h).sum(), h)  # row n's gradient is ∇V(ĥ_n): V of row n reads row n only
    g = grad.mean(0)
    spread = F.cosine_similarity(grad, g[None].expand_as(grad), dim=-1).mean().item()
    return g.detach(), f"mean gradient over {hidden.shape[0]} positions", spread


def site_direction(model: HookedTransformer, direction: Float[Tensor, " d_model"], site: str) -> Tensor | None:
    """The direction in a dictionary's site that a head reading ĥ along `direction` reads: itself at
    ln_final.hook_normalized, c(direction) at the last block's resid_post, None at any other site."""
    if site == HEAD_SITE:
        return direction
    if site == f"blocks.{model.cfg.n_layers - 1}.hook_resid_post":
        return centre_like_final_norm(model, direction)
    return None


@torch.no_grad()
def head_reads(model: HookedTransformer, reads: HeadReads, hidden: Float[Tensor, "n d_model"],
               dictionaries: dict[str, tuple[Tensor, Bool[Tensor, " n_features"] | None, str]], k: int = 10) -> dict:
    """Each head's direction (`read_direction` on `hidden`, the tuned model's ĥ at real positions)
    through `model`'s unembedding and through each dictionary (name → (W_dec, alive mask or None,
    its site)) that reads ĥ or the last residual; the others are named as at another site."""
    out: dict = {"site": HEAD_SITE, "notes": list(reads.notes), "heads": []}
    for reader in reads.readers:
        g, method, spread = read_direction(reader.head, hidden)
        entry = {"name": reader.name, "reads": reader.reads, "method": method, "spread": spread,
                 "norm": g.norm().item(), "logit_lens": logit_lens_tokens(model, g, 1.0, k),
                 "dictionaries": {}, "other_sites": {}}
        for name, (W_dec, alive, site) in dictionaries.items():
            d = site_direction(model, g, site)
            if d is None:
                entry["other_sites"][name] = site
            else:
                entry["dictionaries"][name] = dictionary_matches(d, W_dec.detach().float(), k, alive)
        out["heads"].append(entry)
    return out
