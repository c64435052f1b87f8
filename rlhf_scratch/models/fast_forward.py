"""The training forward with few kernels: a HookedTransformer's forward written out over its own
parameters, for the passes that need numbers and no hooks (the rollout's scoring, the learning phase).

Why: TransformerLens' forward runs every hook point, rebuilds the causal mask per layer, lays out
W_O and W_U per call, computes attention as einsum → mask → softmax → NaN guard → einsum (repeating
each K/V head per query head under grouped-query attention) and its norms and GELU from elementwise
pieces. At the tiny preset's shape that is about 2.8× the aten ops of Hugging Face's GPT-2 per
forward, and on a GPU each op is a kernel launch the chip waits on. The same function, with the same
parameters (no copy: a LoRA run's `attn.W_Q` is W + ΔW here too, and gradients reach the very
tensors the optimizer holds):

    x        = W_E[token] (+ W_pos[position] · real)       position = cumsum(mask) − 1 (TransformerLens'
                                                          numbering; pad columns get no position)
    visible  = causal & key_valid                          one additive mask, made once per forward
    cos, sin = TL's rotary tables at the positions         rotary models: once per forward (`rotary.py`)
    per block:
      h        = Norm(x)                                   `F.layer_norm` or `F.rms_norm`, one kernel
                                                          (LN, RMS, or folded LNPre / RMSPre)
      q, k, v  = h [W_Q | W_K | W_V] + [b_Q | b_K | b_V]   one matmul for the three; k, v one per K/V head
      q, k     = rope(q), rope(k)                          rotary models, q and k in one go
      z        = softmax(q kᵀ / attn_scale + mask) v        `F.scaled_dot_product_attention`
                                                          (`enable_gqa`: no K/V repeated)
      z        = z · any(visible)                          a query that sees no key gets z = 0 (TL's NaN → 0)
      a        = z W_O + b_O                               W_O [(h d), d_model] is a view, not a copy
      m        = act(Norm₂(·) W_in + b_in) W_out + b_out    gated: (act(h W_gate) ⊙ h W_in + b_in) W_out + b_out
      x        = x + a, then x + m(Norm₂(x))                parallel blocks (GPT-NeoX): x + a + m(Norm₂(x))
    ĥ = Norm_final(x)

It equals TransformerLens' forward to float rounding at every position (< 1e-5 in float32, the
tests check each family: tests/unit/test_fast_families.py, tests/integration/test_fast_forward.py).
The hooked forward stays for interpretability: a model with a hook attached (inside
`model.hooks(...)`, `run_with_cache`) always runs through TransformerLens.

What takes this path (`fast_path_reason`): GPT-2, Pythia (GPT-NeoX), Llama (and Mistral without a
sliding window), Qwen2 and Gemma — the static KV cache's set (`static_cache.unsupported_reason`:
pre-norm LayerNorm or RMSNorm blocks, learned absolute or rotary positions, causal attention with
one or grouped K/V heads, sequential or parallel blocks, plain or gated MLPs). On CUDA only GPT-2's
set does until the others have been run on a GPU (`static_cache.GPU_CHECKED`). Every other model
runs the hooked forward, and `fast_path_note` says why in one line.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn
from transformer_lens import HookedTransformer
from transformer_lens.components import RMSNorm, RMSNormPre
from transformer_lens.components.mlps.gated_mlp import GatedMLP
from transformer_lens.components.mlps.mlp import MLP

from rlhf_scratch.models.rotary import rotary_positions, rotary_tables, rotate
from rlhf_scratch.models.static_cache import has_hooks, kv_weights, unsupported_reason

ACTIVATIONS = {
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),  # 0.5 x (1 + tanh(√(2/π)(x + 0.044715 x³)))
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),  # the same curve, its constant rounded to 0.7978845608
    "gelu": F.gelu,
    "relu": F.relu,
    "silu": F.silu,
}
"""TransformerLens' activations the fast MLP computes in one kernel; another runs TL's own `block.mlp`."""


def fast_path_reason(model: HookedTransformer) -> str | None:
    """Why `model` cannot take the fast forward now (a hook attached, or an architecture it does
    not write out), or None when it can."""
    if has_hooks(model):
        return "a hook is attached (the interp tools' forward runs through TransformerLens)"
    reason = unsupported_reason(model)
    if reason is not None:
        return reason
    if model.cfg.use_attn_result or model.cfg.use_hook_mlp_in:
        return "per-head results or a hooked MLP input are switched on (use_attn_result / use_hook_mlp_in)"
    return None


def fast_path_note(model: HookedTransformer, device: str = "cpu") -> str | None:
    """One line for the run's log when the model cannot take the fast paths (None when it can): the
    training forward and sampling then run TransformerLens' own, and on CUDA no decode step is graphed."""
    reason = unsupported_reason(model)
    if reason is None:
        return None
    graph = ", so no CUDA graph" if torch.device(device).type == "cuda" else ""
    return (f"TransformerLens' hooked forward and growing KV cache{graph} ({reason}); "
            "the fast forward and the static cache write out GPT-2, Pythia, Llama, Qwen2 and Gemma-style models")


def layer_norm(x: Float[Tensor, "batch pos d_model"], module: nn.Module) -> Float[Tensor, "batch pos d_model"]:
    """TransformerLens' `LayerNorm` / `LayerNormPre` as one kernel: (x − mean) / √(var + ε) · w + b
    (biased variance, as TL; `LayerNormPre` — weights folded into the next matrix — has no w, b)."""
    weight, bias = getattr(module, "w", None), getattr(module, "b", None)
    return F.layer_norm(x, (x.shape[-1],), weight, bias, module.eps)


def rms_norm(x: Float[Tensor, "batch pos d_model"], module: nn.Module) -> Float[Tensor, "batch pos d_model"]:
    """TransformerLens' `RMSNorm` / `RMSNormPre`, x / √(mean(x²) + ε) · w (`RMSNormPre` has no w),
    in TL's own operations: bit for bit its values. `F.rms_norm` computes x · rsqrt(…) instead, up to
    1.3e-5 away from TL at |ĥ| ≈ 5 on a random Qwen2-style model, and on a CPU it is the same six
    aten ops (on CUDA it is one fused kernel: the change to make once these families run on a GPU).
    TL normalises a half-precision model in float32 and multiplies by w in the model's dtype; so does
    this. Gemma's (1 + w) is folded into w when TL loads it."""
    dtype = module.cfg.dtype
    x32 = x if dtype in (torch.float32, torch.float64) else x.float()
    normalized = (x32 / (x32.pow(2).mean(-1, keepdim=True) + module.eps).sqrt()).to(dtype)
    weight = getattr(module, "w", None)
    return normalized if weight is None else normalized * weight


def norm(x: Float[Tensor, "batch pos d_model"], module: nn.Module) -> Float[Tensor, "batch pos d_model"]:
    """The block's or the final normalisation, as its TransformerLens module computes it."""
    return rms_norm(x, module) if isinstance(module, (RMSNorm, RMSNormPre)) else layer_norm(x, module)


def attention_bias(
    attention_mask: Int[Tensor, "batch pos"] | None, pos: int, dtype: torch.dtype, device: torch.device
) -> tuple[Float[Tensor, "batch 1 pos pos"] | None, Float[Tensor, "batch 1 pos 1"] | None]:
    """The additive attention mask (0 where query i may read key j: j ≤ i and j is a real token;
    the dtype's most negative number elsewhere) and, per query, 1.0 if it sees any key, else 0.0.
    With no padding mask: (None, None), and attention runs causal (`is_causal=True`)."""
    if attention_mask is None:
        return None, None
    causal = torch.ones(pos, pos, dtype=torch.bool, device=device).tril()
    visible: Bool[Tensor, "batch 1 pos pos"] = causal & attention_mask.bool()[:, None, None, :]
    bias = torch.zeros(visible.shape, dtype=dtype, device=device).masked_fill_(~visible, torch.finfo(dtype).min)
    return bias, visible.any(dim=-1, keepdim=True).to(dtype)


def attention(
    attn: nn.Module, h: Float[Tensor, "batch pos d_model"], bias: Tensor | None, sees_a_key: Tensor | None,
    rope: tuple[Float[Tensor, "#batch 1 pos rotary_dim"], Float[Tensor, "#batch 1 pos rotary_dim"]] | None = None,
) -> Float[Tensor, "batch pos d_model"]:
    """One attention layer: fused QKV projection, rotary positions (if `rope`), `scaled_dot_product_attention`
    (grouped K/V heads read in place: `enable_gqa`), output projection.

    TL's W_Q [n_heads, d_model, d_head] and W_K, W_V [n_kv, d_model, d_head] become the
    [d_model, (n_heads + 2 n_kv)·d_head] blocks of one matrix (one small copy per call: the
    parameters stay TL's)."""
    batch, pos, d_model = h.shape
    W_Q = attn.W_Q  # read once: under LoRA each read computes W + ΔW
    n_heads, d_head = W_Q.shape[0], W_Q.shape[2]
    W_K, b_K, W_V, b_V = kv_weights(attn)
    n_kv = W_K.shape[0]
    W_QKV = torch.cat([W_Q, W_K, W_V]).transpose(0, 1).reshape(d_model, -1)  # m ((h + 2 kv) d)
    b_QKV = torch.cat([attn.b_Q, b_K, b_V]).flatten()
    qkv = torch.addmm(b_QKV, h.reshape(-1, d_model), W_QKV)
    heads = qkv.view(batch, pos, n_heads + 2 * n_kv, d_head).transpose(1, 2)  # [batch, heads, pos, d_head]
    if rope is not None:
        q, k = rotate(heads[:, : n_heads + n_kv], *rope, attn.cfg.rotary_adjacent_pairs).split([n_heads, n_kv], dim=1)
        v = heads[:, n_heads + n_kv :]
    else:
        q, k, v = heads.split([n_heads, n_kv, n_kv], dim=1)
    z = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=bias is None,
                                       scale=1.0 / float(attn.attn_scale),  # TL's is a NumPy float: compile wants a Python one
                                       enable_gqa=n_kv != n_heads)
    if sees_a_key is not None:
        z = z * sees_a_key  # a left-pad query sees no key: TL's pattern is NaN there, set to 0
    z = z.transpose(1, 2).reshape(batch * pos, n_heads * d_head)
    return torch.addmm(attn.b_O, z, attn.W_O.reshape(n_heads * d_head, d_model)).view(batch, pos, d_model)


def mlp(block_mlp: nn.Module, h: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
    """act(h W_in + b_in) W_out + b_out, or gated (Llama, Qwen2, Gemma; TL's `GatedMLP`, b_in added
    after the product as TL adds it): (act(h W_gate) ⊙ h W_in + b_in) W_out + b_out; the activation
    in one kernel (TL's own module for another activation or MLP)."""
    act = ACTIVATIONS.get(block_mlp.cfg.act_fn)
    gated = isinstance(block_mlp, GatedMLP)  # isinstance: LoRA's parametrized classes derive from TL's
    if act is None or not (gated or isinstance(block_mlp, MLP)):
        return block_mlp(h)
    batch, pos, d_model = h.shape
    x = h.reshape(-1, d_model)
    if gated:
        post = torch.addcmul(block_mlp.b_in, act(x @ block_mlp.W_gate), x @ block_mlp.W_in)
    else:
        post = act(torch.addmm(block_mlp.b_in, x, block_mlp.W_in))
    return torch.addmm(block_mlp.b_out, post, block_mlp.W_out).view(batch, pos, d_model)


def fast_final_hidden(
    model: HookedTransformer, tokens: Int[Tensor, "batch pos"], attention_mask: Int[Tensor, "batch pos"] | None = None
) -> Float[Tensor, "batch pos d_model"]:
    """ĥ = ln_final(resid_post of the last block), as `model(tokens, attention_mask=…,
    stop_at_layer=n_layers)` then `model.ln_final` compute it, in few kernels (the module docstring).
    Call it only where `fast_path_reason(model)` is None."""
    pos = tokens.shape[1]
    x = model.embed(tokens)
    rope = None
    if model.cfg.positional_embedding_type == "rotary":
        cos, sin = rotary_tables(model, pos)
        positions = rotary_positions(attention_mask, pos, tokens.device)
        rope = cos[positions][:, None], sin[positions][:, None]  # [batch or 1, 1, pos, rotary_dim]
    elif attention_mask is None:
        x = x + model.pos_embed.W_pos[:pos]
    else:
        real = attention_mask.bool()
        positions = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        x = x + model.pos_embed.W_pos[positions] * real[..., None]
    bias, sees_a_key = attention_bias(attention_mask, pos, x.dtype, x.device)
    for block in model.blocks:
        attn_out = attention(block.attn, norm(x, block.ln1), bias, sees_a_key, rope)
        if model.cfg.parallel_attn_mlp:  # GPT-NeoX: attention and MLP both read the block's input
            x = x + attn_out + mlp(block.mlp, norm(x, block.ln2))
        else:
            x = x + attn_out
            x = x + mlp(block.mlp, norm(x, block.ln2))
    return norm(x, model.ln_final)


def final_hidden(
    model: HookedTransformer, tokens: Int[Tensor, "batch pos"], attention_mask: Int[Tensor, "batch pos"] | None = None
) -> Float[Tensor, "batch pos d_model"]:
    """ĥ = ln_final(resid_post of the last block): what the unembedding reads (`ln_final.hook_normalized`);
    `model(...)` of a HookedTransformer is `unembed(final_hidden(...))`. The fast forward where the
    model allows it (`fast_path_reason`), else TransformerLens' own (hooks run there)."""
    if fast_path_reason(model) is None:
        return fast_final_hidden(model, tokens, attention_mask)
    resid = model(tokens, attention_mask=attention_mask, stop_at_layer=model.cfg.n_layers)
    return model.ln_final(resid)


class HiddenForward(nn.Module):
    """A trainer's learning forward for a policy that is the LM itself: `forward(tokens, mask)` →
    ĥ (`final_hidden`). A module, so that DDP and torch.compile wrap the fast path; it holds the
    LM (the same parameters), nothing else."""

    def __init__(self, lm: HookedTransformer):
        super().__init__()
        self.lm = lm

    def forward(
        self, tokens: Int[Tensor, "batch pos"], attention_mask: Int[Tensor, "batch pos"] | None = None
    ) -> Float[Tensor, "batch pos d_model"]:
        return final_hidden(self.lm, tokens, attention_mask)
