"""Decoding with a static KV cache: the model's forward written out for a few new positions.

Why: TransformerLens' own cache grows by concatenation — every step allocates new K/V tensors
one column longer, rebuilds the attention mask and runs the whole hooked forward in Python.
Here the cache is allocated once for the whole sample and every decode step has the same
tensor shapes, so the step can be captured in a CUDA graph and replayed (one launch per token
instead of a hundred), and on any device it skips the hooks, mask bookkeeping and copies.

The cache: two buffers, filled left to right, one column per token,

    K, V   [n_layers, batch, n_heads, total, d_head]     total = prompt_len + gen_len
    column c holds the key / value of the token at column c of  prompt_ids ++ completion_ids

and which columns a query at column c may read:

    visible[b, j] = key_valid[b, j]  and  j <= c
    key_valid     = prompt_mask ++ [True] * gen_len    (pad columns of a left-padded prompt: False)

Columns after c are not written yet (zeros, or an earlier sample's leftovers): `j <= c` hides
them, so a step never depends on what they hold. A completion that has ended (EOS) keeps being
fed the pad token — its later tokens are masked out of the completion, not of the cache — so
the batch stays rectangular and no step branches on a tensor's value.

One forward, for q new tokens written at columns `columns` (the prompt: q = prompt_len, columns
0..prompt_len-1; a decode step: q = 1, the column of the token just sampled):

    x   = W_E[token] (+ W_pos[position])            position = cumsum(mask) - 1 (TransformerLens'
                                                    numbering: a padded prompt gets the positions
                                                    it would get alone; pad columns get 0)
    per block:
      h        = ln1(x)
      q, k, v  = h W_Q + b_Q,  h W_K + b_K,  h W_V + b_V           q [batch, n_heads, q, d_head],
                                                                    k, v [batch, n_kv, q, d_head]
      q, k     = rope(q, position), rope(k, position)               rotary models only (`rotary.rotate`)
      K[:, :, columns], V[:, :, columns] = k, v                     write this step's columns
      scores   = q K^T / attn_scale,  -inf (finfo.min) where not visible    query head i reads K/V
                                                                    head i // (n_heads / n_kv)
      z        = softmax(scores) V
      x        = x + z W_O + b_O,  then  x = x + mlp(ln2(x))        (parallel blocks: x + attn + mlp(ln2(x_in)))
    logits = ln_final(x[last new position]) W_U + b_U

It uses the HookedTransformer's own modules for the token embedding, the norms (LayerNorm or
RMSNorm) and the MLPs (plain or gated), and its own W_pos, W_Q/W_K/W_V/W_O/b_*, rotary tables and
W_U/b_U: W_O and W_U as views for plain matrix products, the Q/K/V weights stacked into one matrix
once per decoder and rewritten in place when the weights move (`DecodeWeights`). Hooks do not run: a model with hooks attached decodes through
TransformerLens (see `generation.generate`). It equals TransformerLens' full forward to < 1e-5
(4e-6 measured) on the tiny LM (tests/integration/test_generation.py), and each family's
(GPT-2, Pythia, Llama, Qwen2, Gemma; tests/unit/test_fast_families.py).

Supported: pre-norm blocks with LayerNorm or RMSNorm (folded or not), learned absolute or rotary
positions, causal attention with one K/V per head or grouped K/V heads, sequential or parallel
attention and MLP, a dense MLP, plain or gated. Anything else (`unsupported_reason`) decodes
through TransformerLens' own cache: its attention differs from the few lines above (ALiBi or
shortformer positions, dynamic NTK rotary, local windows, soft-capping, QK norms, sinks, post-norm
blocks, attention-only blocks, mixture-of-experts routing with data-dependent control flow, 4-bit
weights, several devices). On CUDA the families beyond GPT-2's set also decode through
TransformerLens until their written-out forward has been run on a GPU (`GPU_CHECKED`).

On CUDA the decode step is captured once per `generate` call in a CUDA graph (`CUDAGraphStep`)
with static inputs (the token, its column, its position) and a static output (the logits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn
from torch.nn.utils import parametrize
from transformer_lens import HookedTransformer
from transformer_lens.components import GroupedQueryAttention
from transformer_lens.utilities.architectures import POST_NORM_ARCHITECTURES

from rlhf_scratch.models.rotary import rotary_tables, rotate

GPU_CHECKED = False
"""Whether the written-out forwards of the families beyond GPT-2 (rotary positions, grouped K/V,
RMSNorm, parallel blocks, gated MLPs) have been run on a GPU. They are tested against
TransformerLens on CPU only (tests/unit/test_fast_families.py); a path never run on a GPU is not a
default, so until a GPU check passes (the `cuda` test in tests/integration/test_fast_forward.py,
which sets this) such a model runs TransformerLens' forward and cache on CUDA."""


def beyond_gpt2(model: HookedTransformer) -> list[str]:
    """The features of `model` that GPT-2 does not have and the written-out forwards do."""
    cfg = model.cfg
    features = [
        (cfg.positional_embedding_type == "rotary", "rotary positions"),
        (cfg.n_key_value_heads is not None, "grouped K/V"),
        (cfg.normalization_type in ("RMS", "RMSPre") or cfg.final_rms, "RMSNorm"),
        (cfg.parallel_attn_mlp, "parallel attention and MLP"),
        (cfg.gated_mlp, "gated MLP"),
    ]
    return [name for present, name in features if present]


def unsupported_reason(model: HookedTransformer) -> str | None:
    """Why the written-out forwards (this static-cache decoder, `fast_forward`) cannot run `model`
    exactly, or None when they can."""
    cfg = model.cfg
    checks = [
        (cfg.positional_embedding_type not in ("standard", "rotary"),
         f"positional_embedding_type={cfg.positional_embedding_type!r} (learned absolute or rotary positions only)"),
        (cfg.use_dynamic_ntk_rope, "dynamic NTK rotary scaling (its tables change with the length in eval mode)"),
        (cfg.attn_only, "attention-only blocks"),
        (cfg.normalization_type not in ("LN", "LNPre", "RMS", "RMSPre"), f"normalization_type={cfg.normalization_type!r}"),
        (cfg.original_architecture in POST_NORM_ARCHITECTURES, "post-norm blocks"),
        (cfg.use_normalization_before_and_after, "normalization before and after each sublayer"),
        (cfg.attn_scores_soft_cap > 0 or cfg.output_logits_soft_cap > 0, "soft-capped scores or logits"),
        (cfg.use_local_attn, "local attention windows"),
        (cfg.attention_dir != "causal", f"attention_dir={cfg.attention_dir!r}"),
        (cfg.use_qk_norm or cfg.clip_qkv is not None or getattr(model.blocks[0].attn, "q_norm", None) is not None,
         "QK normalisation or clipping"),
        (cfg.use_logn_attn or cfg.use_attention_sinks, "log-n scaling or attention sinks"),
        (cfg.use_attn_in or cfg.use_split_qkv_input, "per-head attention inputs (use_attn_in / use_split_qkv_input)"),
        (bool(cfg.num_experts), "mixture-of-experts MLP"),
        (cfg.load_in_4bit, "4-bit weights"),
        (cfg.n_devices != 1, "a model split over several devices"),
    ]
    reason = next((reason for failed, reason in checks if failed), None)
    if reason is None and not GPU_CHECKED and device_type(model) == "cuda" and (features := beyond_gpt2(model)):
        reason = f"{', '.join(features)} on CUDA: written out and tested on CPU only, not yet run on a GPU"
    return reason


def device_type(model: HookedTransformer) -> str:
    """Where the model's weights are: "cpu", "cuda", …"""
    return model.embed.W_E.device.type


def kv_weights(attn: nn.Module) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(W_K, b_K, W_V, b_V) with one K/V per K/V head: under grouped-query attention TransformerLens
    stores `_W_K` [n_kv, d_model, d_head] (`W_K` repeats it per query head, a copy); else W_K itself."""
    if isinstance(attn, GroupedQueryAttention):  # (LoRA's parametrized class derives from it)
        return attn._W_K, attn._b_K, attn._W_V, attn._b_V
    return attn.W_K, attn.b_K, attn.W_V, attn.b_V


def has_hooks(model: HookedTransformer) -> bool:
    """Is any forward hook attached (e.g. inside `model.hooks(...)`)? The static forward skips
    the hook points, so a hooked model must decode through TransformerLens."""
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


@dataclass
class DecodeWeights:
    """The model's attention and unembedding weights in the layout `F.linear` takes, with as little
    copied as the layout allows (TransformerLens rearranges W_O and transposes W_U on every forward):

        W_O [(h d), d_model] and W_U [d_model, d_vocab]   views of the parameters: F.linear(x, W.T) is
                                                          one matrix product over W as it lies, so
                                                          nothing is copied and the view always holds
                                                          the parameter's current value
        [W_Q; W_K; W_V] as (h + 2 kv) d rows × d_model     the one copy (three tensors become one
                                                          matrix product): made once per decoder,
                                                          rewritten in place at each `refresh`

    A weight that is computed on each read (a LoRA parametrization's W + ΔW) is a new tensor each
    time: the decoder keeps its own copy (`as_read`) and `refresh` copies the current value into it."""

    W_QKV: list[Float[Tensor, "qkv_heads_d_head d_model"]]  # per layer: [W_Q; W_K; W_V] as (h d) × d_model rows
    b_QKV: list[Float[Tensor, " qkv_heads_d_head"]]  # (n_heads + 2 n_kv) · d_head
    W_O: list[Float[Tensor, "d_model heads_d_head"]]
    b_O: list[Float[Tensor, " d_model"]]
    W_U_T: Float[Tensor, "d_vocab d_model"]
    b_U: Float[Tensor, " d_vocab"]

    @classmethod
    def of(cls, model: HookedTransformer) -> DecodeWeights:
        attns = [block.attn for block in model.blocks]
        return cls(
            W_QKV=[stack_qkv(a) for a in attns],
            b_QKV=[stack_qkv_bias(a) for a in attns],
            W_O=[as_read(a, "W_O").reshape(-1, a.W_O.shape[-1]).T for a in attns],  # "h d m -> m (h d)", a view
            b_O=[as_read(a, "b_O") for a in attns],
            W_U_T=as_read(model.unembed, "W_U").T,  # a view
            b_U=as_read(model.unembed, "b_U"),
        )

    def refresh(self, model: HookedTransformer) -> None:
        """Bring these same tensors to the model's current weights (a captured CUDA graph reads their
        memory, so a reused decoder must see the policy's latest step here): the stacked QKV
        rewritten in place, each view left as it is unless its weight is computed on read."""
        attns = [block.attn for block in model.blocks]
        with torch.no_grad():
            for attn, W, b in zip(attns, self.W_QKV, self.b_QKV):
                stack_qkv(attn, out=W)
                stack_qkv_bias(attn, out=b)
            current = [(self.W_O, [a.W_O.reshape(-1, a.W_O.shape[-1]).T for a in attns]), (self.b_O, [a.b_O for a in attns]),
                       ([self.W_U_T, self.b_U], [model.unembed.W_U.T, model.unembed.b_U])]
            for mine, now in current:
                for kept, fresh in zip(mine, now):
                    if kept.data_ptr() != fresh.data_ptr():  # computed on read (LoRA): copy its value over
                        kept.copy_(fresh)


def as_read(module: nn.Module, name: str) -> Tensor:
    """`module.name` itself when it is a parameter (the layout can be a view of it); a copy of it when
    it is computed on each read (a LoRA parametrization: W + ΔW, or under `adapters_off` the frozen
    base weight itself), so that `refresh` writes into the decoder's own copy, never into a parameter."""
    weight = getattr(module, name)
    return weight.detach().clone() if parametrize.is_parametrized(module, name) else weight


def stack_qkv(attn: nn.Module, out: Tensor | None = None) -> Float[Tensor, "qkv_heads_d_head d_model"]:
    """[W_Q; W_K; W_V] with one row per (head, d_head) pair: "h m d -> (h d) m" for each, stacked,
    written in one pass into `out` when given (its rows viewed as [h + 2 kv, d_head, d_model])."""
    W_K, _, W_V, _ = kv_weights(attn)
    parts = [W.permute(0, 2, 1) for W in (attn.W_Q, W_K, W_V)]  # [h, d_head, d_model] views
    n_heads, d_head, d_model = sum(p.shape[0] for p in parts), parts[0].shape[1], parts[0].shape[2]
    if out is None:
        out = torch.empty(n_heads * d_head, d_model, dtype=attn.W_Q.dtype, device=attn.W_Q.device)
    with torch.no_grad():  # a layout for decoding: no gradient flows through it
        torch.cat(parts, dim=0, out=out.view(n_heads, d_head, d_model))
    return out


def stack_qkv_bias(attn: nn.Module, out: Tensor | None = None) -> Float[Tensor, " qkv_heads_d_head"]:
    """[b_Q; b_K; b_V] flattened in `stack_qkv`'s row order, into `out` when given."""
    _, b_K, _, b_V = kv_weights(attn)
    with torch.no_grad():
        return torch.cat([attn.b_Q.flatten(), b_K.flatten(), b_V.flatten()], out=out)


@dataclass
class StaticKVCache:
    """K/V of every layer for the whole sample, preallocated; `key_valid` marks the columns that
    hold a real token (False on the prompt's left padding)."""

    keys: Float[Tensor, "n_layers batch n_kv total d_head"]  # n_kv = n_key_value_heads, else n_heads
    values: Float[Tensor, "n_layers batch n_kv total d_head"]
    key_valid: Bool[Tensor, "batch total"]
    slots: Int[Tensor, " total"]  # 0..total-1, made once: a CUDA graph may not allocate it per step

    @classmethod
    def empty(cls, model: HookedTransformer, prompt_mask: Bool[Tensor, "batch prompt_len"], gen_len: int) -> StaticKVCache:
        cfg, (batch, prompt_len) = model.cfg, prompt_mask.shape
        total, device = prompt_len + gen_len, prompt_mask.device
        shape = (cfg.n_layers, batch, cfg.n_key_value_heads or cfg.n_heads, total, cfg.d_head)
        generated = torch.ones((batch, gen_len), dtype=torch.bool, device=device)
        return cls(
            keys=torch.zeros(shape, dtype=cfg.dtype, device=device),
            values=torch.zeros(shape, dtype=cfg.dtype, device=device),
            key_valid=torch.cat([prompt_mask, generated], dim=1),
            slots=torch.arange(total, device=device),
        )


def embed_tokens(
    model: HookedTransformer,
    tokens: Int[Tensor, "batch q"],
    positions: Int[Tensor, "batch q"],
    real: Bool[Tensor, "batch q"],
) -> Float[Tensor, "batch q d_model"]:
    """x = W_E[token] + W_pos[position], with no position embedding on pad columns (as TransformerLens);
    W_E[token] alone for rotary models (their positions act in attention)."""
    if model.cfg.positional_embedding_type == "rotary":
        return model.embed(tokens)
    return model.embed(tokens) + model.pos_embed.W_pos[positions] * real[..., None]


def attend_with_cache(
    model: HookedTransformer,
    weights: DecodeWeights,
    cache: StaticKVCache,
    layer: int,
    h: Float[Tensor, "batch q d_model"],
    columns: Int[Tensor, " q"],
    visible: Bool[Tensor, "batch 1 q total"],
    rope: tuple[Float[Tensor, "batch 1 q rotary_dim"], Float[Tensor, "batch 1 q rotary_dim"]] | None = None,
) -> Float[Tensor, "batch q d_model"]:
    """One attention layer for q new positions: write their K/V at `columns`, attend over the cache.
    With grouped K/V each K/V head serves n_heads / n_kv query heads, side by side (TransformerLens'
    `repeat_interleave`: query head i reads K/V head i // group), without repeating the cache."""
    cfg = model.cfg
    batch, q, _ = h.shape
    K, V = cache.keys[layer], cache.values[layer]  # [batch, n_kv, total, d_head]
    n_kv = K.shape[1]
    group = cfg.n_heads // n_kv
    qkv = F.linear(h, weights.W_QKV[layer], weights.b_QKV[layer])  # [batch, q, (n_heads + 2 n_kv) · d_head]
    heads = qkv.view(batch, q, cfg.n_heads + 2 * n_kv, cfg.d_head).transpose(1, 2)  # [batch, heads, q, d_head]
    if rope is not None:
        query_key = rotate(heads[:, : cfg.n_heads + n_kv], *rope, cfg.rotary_adjacent_pairs)
        query, key = query_key.split([cfg.n_heads, n_kv], dim=1)
        value = heads[:, cfg.n_heads + n_kv :]
    else:
        query, key, value = heads.split([cfg.n_heads, n_kv, n_kv], dim=1)
    K.index_copy_(2, columns, key)
    V.index_copy_(2, columns, value)
    query = query.reshape(batch, n_kv, group, q, cfg.d_head)
    scores = query @ K[:, :, None].transpose(-1, -2) / model.blocks[layer].attn.attn_scale  # [batch, n_kv, group, q, total]
    scores = scores.masked_fill(~visible[:, :, None], torch.finfo(scores.dtype).min)
    z = scores.softmax(dim=-1) @ V[:, :, None]  # [batch, n_kv, group, q, d_head]
    z = z.view(batch, cfg.n_heads, q, cfg.d_head).transpose(1, 2).reshape(batch, q, cfg.n_heads * cfg.d_head)
    return F.linear(z, weights.W_O[layer], weights.b_O[layer])


def forward_with_cache(
    model: HookedTransformer,
    weights: DecodeWeights,
    cache: StaticKVCache,
    tokens: Int[Tensor, "batch q"],
    positions: Int[Tensor, "batch q"],
    columns: Int[Tensor, " q"],
) -> Float[Tensor, "batch d_vocab"]:
    """The model's forward for q new tokens at cache columns `columns`, reading every earlier
    column from the cache and writing these; returns the next-token logits after the last of
    them (sampling needs no others, and unembedding all q would cost q times more). Nothing in it
    depends on a tensor's value, so it runs the same kernels with the same shapes each time (what
    a CUDA graph needs)."""
    real = cache.key_valid[:, columns]  # [batch, q]
    visible = cache.key_valid[:, None, :] & (cache.slots[None, None, :] <= columns[None, :, None])  # [batch, q, total]
    visible = visible[:, None]  # [batch, 1, q, total]: the same for every head
    x = embed_tokens(model, tokens, positions, real)
    rope = None
    if model.cfg.positional_embedding_type == "rotary":
        cos, sin = rotary_tables(model, cache.slots.shape[0])
        rope = cos[positions][:, None], sin[positions][:, None]  # [batch, 1, q, rotary_dim]
    for layer, block in enumerate(model.blocks):
        attn_out = attend_with_cache(model, weights, cache, layer, block.ln1(x), columns, visible, rope)
        if model.cfg.parallel_attn_mlp:  # GPT-NeoX: both read the block's input
            x = x + attn_out + block.mlp(block.ln2(x))
        else:
            x = x + attn_out
            x = x + block.mlp(block.ln2(x))
    return F.linear(model.ln_final(x[:, -1]), weights.W_U_T, weights.b_U)


class CUDAGraphStep:
    """`step()` captured in a CUDA graph: calling it replays the recorded kernels and returns the
    same output tensor, refilled. `step` must read its inputs from, and write its outputs to,
    tensors that outlive the graph (the static buffers) and must not synchronise with the host.

    The recipe of PyTorch's CUDA-graph notes: warm up on a side stream (so lazy initialisations
    and allocator caches are not recorded), then capture. Running the decode step during warm-up is
    harmless: it rewrites the same cache column with the same values. A step that moves its own
    state (the sampling loop's step counter, its completion, the random numbers it draws) names the
    buffers it writes in `restore`: they and the CUDA generator's state are put back after the
    warm-up, so the first replay is the step that was due and draws the random numbers it would
    have drawn uncaptured. (Capturing records kernels and runs none.)

    UNEXECUTED: written without a GPU to run it on; the CPU tests cover the same step uncaptured.
    """

    WARMUP_STEPS = 2

    def __init__(self, step: Callable[[], Tensor], restore: tuple[Tensor, ...] = ()):
        saved = [t.clone() for t in restore]
        rng = torch.cuda.get_rng_state() if restore else None
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.WARMUP_STEPS):
                step()
        torch.cuda.current_stream().wait_stream(side)
        for buffer, value in zip(restore, saved):
            buffer.copy_(value)
        if rng is not None:
            torch.cuda.set_rng_state(rng)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.output = step()

    def __call__(self) -> Tensor:
        self.graph.replay()
        return self.output


class StaticCacheDecoder:
    """The `generation.Decoder` over a static cache: `prefill` runs the prompt, each `step` one
    new token, with fixed shapes. On CUDA (and `cuda_graph`), the step is captured on its first
    call and replayed after; its inputs live in static buffers that each call updates in place:

        token     [batch]   the token just sampled, written at column `column`
        column    [1]       prompt_len + t at step t
        position  [batch]   its position: the row's number of prompt tokens + t
    """

    def __init__(
        self,
        model: HookedTransformer,
        prompt_ids: Int[Tensor, "batch prompt_len"],
        prompt_mask: Bool[Tensor, "batch prompt_len"],
        gen_len: int,
        cuda_graph: bool = True,
    ):
        self.model, self.prompt_ids, self.prompt_mask = model, prompt_ids, prompt_mask
        self.weights = DecodeWeights.of(model)
        self.cache = StaticKVCache.empty(model, prompt_mask, gen_len)
        device = prompt_ids.device
        self.token = torch.zeros(prompt_ids.shape[0], dtype=torch.long, device=device)
        self.column = torch.tensor([prompt_ids.shape[1]], dtype=torch.long, device=device)
        self.position = prompt_mask.sum(dim=1)
        self.use_graph = cuda_graph and device.type == "cuda"
        self.graph: CUDAGraphStep | None = None
        self.sampling = None  # the rollout's sampling loop over this decoder (`rollout.sampling.SampledDecode`), kept with it

    def reset(self, prompt_ids: Int[Tensor, "batch prompt_len"], prompt_mask: Bool[Tensor, "batch prompt_len"]) -> None:
        """Ready for a new batch of the same shape, every buffer rewritten in place (the captured
        graph keeps reading the same memory): the weights laid out again, the prompt's key columns,
        the step's column and positions. The cache's K/V need no clearing: a column is read only
        after this sample wrote it."""
        self.weights.refresh(self.model)
        self.prompt_ids, self.prompt_mask = prompt_ids, prompt_mask
        self.cache.key_valid[:, : prompt_ids.shape[1]].copy_(prompt_mask)
        self.column.fill_(prompt_ids.shape[1])
        self.position.copy_(prompt_mask.sum(dim=1))

    def prefill(self) -> Float[Tensor, "batch d_vocab"]:
        positions = (self.prompt_mask.long().cumsum(dim=1) - 1).clamp(min=0)
        columns = self.cache.slots[: self.prompt_ids.shape[1]]
        return forward_with_cache(self.model, self.weights, self.cache, self.prompt_ids, positions, columns)

    def _decode_one(self) -> Float[Tensor, "batch d_vocab"]:
        return forward_with_cache(
            self.model, self.weights, self.cache, self.token[:, None], self.position[:, None], self.column
        )

    def advance(self, token: Int[Tensor, " batch"], graphed: bool = False) -> Float[Tensor, "batch d_vocab"]:
        """Feed `token` at the current column and move the column and positions on. `graphed`: the
        forward replays this decoder's CUDA graph (captured on first use); else it runs uncaptured, as
        inside a graph the caller captures (`sampling.SampledDecode`: every write is in place)."""
        self.token.copy_(token)
        if graphed and self.graph is None:
            self.graph = CUDAGraphStep(self._decode_one)
        logits = self.graph() if graphed else self._decode_one()
        self.column += 1
        self.position += 1
        return logits

    def step(self, token: Int[Tensor, " batch"]) -> Float[Tensor, "batch d_vocab"]:
        return self.advance(token, graphed=self.use_graph)


class DecoderCache:
    """One `StaticCacheDecoder` kept between `generate` calls of the same shape (a trainer holds one):
    its buffers and, on CUDA, its captured graph are reused, so a rollout pays for rewriting the
    stacked Q/K/V weights in place (W_O and W_U are views: nothing to copy) but not for allocating
    the cache or capturing the graph again. A different
    model, shape, dtype or device, or parameters that moved (`.to(...)`), builds a new one."""

    def __init__(self):
        self.key: tuple | None = None
        self.decoder: StaticCacheDecoder | None = None

    def get(self, model: HookedTransformer, prompt_ids: Int[Tensor, "batch prompt_len"],
            prompt_mask: Bool[Tensor, "batch prompt_len"], gen_len: int, cuda_graph: bool) -> StaticCacheDecoder:
        key = (id(model), tuple(prompt_ids.shape), gen_len, cuda_graph, prompt_ids.device,
               tuple(p.data_ptr() for p in model.parameters()))
        if self.decoder is not None and key == self.key:
            self.decoder.reset(prompt_ids, prompt_mask)
            return self.decoder
        self.key, self.decoder = key, StaticCacheDecoder(model, prompt_ids, prompt_mask, gen_len, cuda_graph)
        return self.decoder
