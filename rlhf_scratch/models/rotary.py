"""Rotary positions as TransformerLens computes them, for the forwards written out over a
HookedTransformer's own weights (the fast forward and the static-cache decoder).

RoPE (Su et al. 2021) turns each pair of a query's or key's first `rotary_dim` features by an angle
proportional to the token's position, so q·k depends on the positions only through their difference:

    x_rot   = x[..., :rotary_dim]                              the rest, x[..., rotary_dim:], passes through
    flip    = [−x₂, x₁]                                        x₁, x₂ the two halves of x_rot (GPT-NeoX, Llama,
                                                               Qwen2, Gemma); GPT-J pairs neighbours instead
                                                               (`rotary_adjacent_pairs`: [−x₁, x₀, −x₃, x₂, …])
    rope(x) = x_rot · cos[position] + flip · sin[position]

The cos and sin tables are TransformerLens' own buffers (`attn.rotary_cos`, `attn.rotary_sin`,
[rows, rotary_dim]), so whatever frequency schedule TL built them with (Llama 3's NTK-by-parts,
YaRN, a rotary base) is used as is. The positions are TL's for left padding: cumsum(mask) − 1 (a
padded prompt gets the positions it would get alone; pad columns get 0), 0..pos−1 with no mask.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import HookedTransformer


def rotary_positions(
    attention_mask: Int[Tensor, "batch pos"] | None, pos: int, device: torch.device
) -> Int[Tensor, "batch pos"] | Int[Tensor, "1 pos"]:
    """Each column's position: cumsum(mask) − 1, clamped at 0 for left-pad columns (TransformerLens'
    `get_offset_position_ids`); with no mask 0..pos−1."""
    if attention_mask is None:
        return torch.arange(pos, device=device)[None]
    return (attention_mask.cumsum(dim=1) - 1).clamp(min=0)


def rotary_tables(model: HookedTransformer, n_positions: int) -> tuple[Float[Tensor, "rows rotary_dim"], Float[Tensor, "rows rotary_dim"]]:
    """TransformerLens' (cos, sin) tables of the model's attention layers, with at least `n_positions`
    rows: grown as TL grows them in `apply_rotary` (to min(n_ctx, max(needed, 2 × rows)), in every
    block, so a later hooked forward sees the same buffers). Every layer's tables are made from the
    same config, so block 0's serve all (local attention, whose tables may differ, is not written out)."""
    attn = model.blocks[0].attn
    rows = attn.rotary_cos.shape[0]
    if n_positions > rows:
        new_size = min(model.cfg.n_ctx, max(n_positions, 2 * rows))
        for block in model.blocks:
            block.attn._extend_rotary_embeddings(new_size)
    return attn.rotary_cos, attn.rotary_sin


def rotate(
    x: Float[Tensor, "... d_head"], cos: Float[Tensor, "... rotary_dim"], sin: Float[Tensor, "... rotary_dim"],
    adjacent_pairs: bool,
) -> Float[Tensor, "... d_head"]:
    """rope(x) = x_rot · cos + flip(x_rot) · sin on the first rotary_dim features, the rest unchanged
    (TransformerLens' `apply_rotary` and `rotate_every_two`, in the same order of operations)."""
    rotary_dim = cos.shape[-1]
    x_rot = x if rotary_dim == x.shape[-1] else x[..., :rotary_dim]
    if adjacent_pairs:
        flip = torch.stack([-x_rot[..., 1::2], x_rot[..., ::2]], dim=-1).flatten(-2)
    else:
        half = rotary_dim // 2
        flip = torch.cat([-x_rot[..., half:], x_rot[..., :half]], dim=-1)
    rotated = x_rot * cos + flip * sin
    return rotated if rotary_dim == x.shape[-1] else torch.cat([rotated, x[..., rotary_dim:]], dim=-1)
