"""What exercises 07 (the parts: the value head, the generation loop, the replay memory) give the learner
besides the checks: a TransformerLens forward at positions the caller chooses, with or without a KV cache.

    forward_at(model, ids, positions, attention_mask, cache=None)   logits [batch, n, d_vocab]
    new_cache(model, batch)                                         an empty TransformerLens KV cache
    ReplayMinibatch                                                 the package's minibatch (core.memory)

What notebook 06 trains with (the learner's parts where their checks pass) is `course/learner_parts.py`.

`forward_at` is TransformerLens' own forward with the positional embedding read at `positions` instead of
computed from the mask: the residual is W_E[ids] + W_pos[positions] (through `hook_embed` and
`hook_pos_embed`), then every block from layer 0 (`start_at_layer=0`), the attention masked by
`attention_mask`. With a `cache`, `attention_mask` covers the new columns only: it is appended to the
mask the cache holds (as TransformerLens' `input_to_embed` does), and the new columns attend to every
cached one. So the two things a padded, cached sampler must get right are the caller's: which positions,
and which columns are real. Absolute positional embeddings only (GPT-2's, the tiny preset's).
"""

from __future__ import annotations

from jaxtyping import Bool, Float, Int
from torch import Tensor
from transformer_lens import HookedTransformer
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

from rlhf_scratch.core.memory import ReplayMinibatch

__all__ = ["ReplayMinibatch", "forward_at", "new_cache"]


def new_cache(model: HookedTransformer, batch: int) -> TransformerLensKeyValueCache:
    """An empty KV cache for `batch` rows: each forward_at with it appends its columns' keys and values."""
    return TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, batch)


def forward_at(
    model: HookedTransformer,
    ids: Int[Tensor, "batch n"],
    positions: Int[Tensor, "batch n"],
    attention_mask: Bool[Tensor, "batch n"],
    cache: TransformerLensKeyValueCache | None = None,
) -> Float[Tensor, "batch n d_vocab"]:
    """The logits after each of `ids`, token ids[b, i] embedded at position positions[b, i]:

        x = W_E[ids] + W_pos[positions];   logits = the blocks, ln_final and W_U on x, causal, masked

    `attention_mask` False hides a column from every query. With `cache`, `ids` are the columns after the
    cached ones: they attend to the cache (its columns masked as they were given) and to themselves, and
    are appended to it."""
    if positions.shape != ids.shape or attention_mask.shape != ids.shape:
        raise ValueError(f"forward_at: ids {tuple(ids.shape)}, positions {tuple(positions.shape)} and "
                         f"attention_mask {tuple(attention_mask.shape)} must have one shape")
    if int(positions.min()) < 0 or int(positions.max()) >= model.cfg.n_ctx:
        raise ValueError(f"forward_at: positions must lie in 0 .. n_ctx - 1 = {model.cfg.n_ctx - 1}, "
                         f"got {int(positions.min())} .. {int(positions.max())}")
    mask = attention_mask.long()
    if cache is not None:
        mask = cache.append_attention_mask(mask)
    residual = model.hook_embed(model.embed(ids)) + model.hook_pos_embed(model.W_pos[positions])
    return model(residual, start_at_layer=0, attention_mask=mask, past_kv_cache=cache)
