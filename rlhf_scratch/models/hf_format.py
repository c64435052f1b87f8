"""Our models in Hugging Face's formats: a tuned HookedTransformer as its own family's causal LM
(`GPT2LMHeadModel`, `GPTNeoXForCausalLM`, `LlamaForCausalLM`, `Qwen2ForCausalLM`, `GemmaForCausalLM`),
a reward model as a `GPT2ForSequenceClassification`, with the same log-probs / scores.

TransformerLens loads a model with its norms folded into the next layer's weights, the residual-
writing weights centred (LayerNorm models only), the value biases folded into the output bias and
the unembedding centred; each `to_hf_*` re-expresses that in the family's layout (see docs/export.md
for GPT-2's identities, and each function's docstring for its own). The result must hold for ANY
weights of the HookedTransformer, not only freshly converted ones: training moves every bias,
including biases the HF class does not have. Where a weight cannot be re-expressed exactly, the
conversion raises a one-line `ValueError` naming the class and the weight; it never drops it.
`to_hf_causal_lm` picks the function by `cfg.original_architecture`. No run folders and no files
here: the command `python -m rlhf_scratch.export` and the loaders build on these conversions.

Longer than 500 lines because the families are read side by side: each `to_hf_*` re-expresses the
same folded norms, centred weights and folded biases in its own family's layout, and the shared
unfolding helpers at the top serve them all; one job, one conversion per family.
"""

from __future__ import annotations

import einops
import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens import HookedTransformer

EXTRAS_FILE = "{name}.safetensors"  # a policy's extra module `name` (`models.policy.PolicyWithExtras`), exported beside the LM


def final_norm_and_unembed(
    model: HookedTransformer,
) -> tuple[Float[Tensor, " d_model"], Float[Tensor, " d_model"], Float[Tensor, "d_vocab d_model"]]:
    """GPT-2's `ln_f.weight`, `ln_f.bias` and untied `lm_head.weight` giving the model's logits
    (see the module docstring: bias 1, W_U + 1 cᵀ/d with c = b_U − 1·W_U)."""
    W_U, b_U = model.unembed.W_U.detach(), model.unembed.b_U.detach()
    d_model = W_U.shape[0]
    ln = model.ln_final
    if hasattr(ln, "w"):  # an unfolded final LayerNorm: fold it into the unembedding first
        b_U = ln.b.detach() @ W_U + b_U
        W_U = ln.w.detach()[:, None] * W_U
    ones = torch.ones(d_model, dtype=W_U.dtype, device=W_U.device)
    c = b_U - ones @ W_U
    lm_head = W_U + torch.outer(ones, c) / d_model
    return ones, ones.clone(), lm_head.T.contiguous()


def _layer_norm(ln, d_model: int) -> tuple[Tensor, Tensor]:
    """A block LayerNorm's weight and bias in GPT-2's layout (1 and 0 where TransformerLens folded them)."""
    if hasattr(ln, "w"):
        return ln.w.detach(), ln.b.detach()
    return torch.ones(d_model), torch.zeros(d_model)


def gpt2_state_dict(model: HookedTransformer) -> dict[str, Tensor]:
    """The HookedTransformer's weights under GPT2LMHeadModel's names and shapes (Conv1D: x @ W + b)."""
    cfg = model.cfg
    sd: dict[str, Tensor] = {
        "transformer.wte.weight": model.embed.W_E.detach(),
        "transformer.wpe.weight": model.pos_embed.W_pos.detach(),
    }
    for layer, block in enumerate(model.blocks):
        p = f"transformer.h.{layer}."
        attn, mlp = block.attn, block.mlp
        sd[p + "ln_1.weight"], sd[p + "ln_1.bias"] = _layer_norm(block.ln1, cfg.d_model)
        qkv = [einops.rearrange(w.detach(), "n d h -> d (n h)") for w in (attn.W_Q, attn.W_K, attn.W_V)]
        sd[p + "attn.c_attn.weight"] = torch.cat(qkv, dim=1)
        sd[p + "attn.c_attn.bias"] = torch.cat([b.detach().flatten() for b in (attn.b_Q, attn.b_K, attn.b_V)])
        sd[p + "attn.c_proj.weight"] = einops.rearrange(attn.W_O.detach(), "n h d -> (n h) d")
        sd[p + "attn.c_proj.bias"] = attn.b_O.detach()
        sd[p + "ln_2.weight"], sd[p + "ln_2.bias"] = _layer_norm(block.ln2, cfg.d_model)
        sd[p + "mlp.c_fc.weight"], sd[p + "mlp.c_fc.bias"] = mlp.W_in.detach(), mlp.b_in.detach()
        sd[p + "mlp.c_proj.weight"], sd[p + "mlp.c_proj.bias"] = mlp.W_out.detach(), mlp.b_out.detach()
    sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"], sd["lm_head.weight"] = final_norm_and_unembed(model)
    return {k: v.float().cpu().contiguous() for k, v in sd.items()}


def check_exportable(model: HookedTransformer) -> None:
    """What GPT2LMHeadModel can express: learned absolute positions, LayerNorm, one MLP per block."""
    cfg = model.cfg
    problems = [
        f"{name}={value!r}" for name, value, ok in [
            ("positional_embedding_type", cfg.positional_embedding_type, cfg.positional_embedding_type == "standard"),
            ("normalization_type", cfg.normalization_type, cfg.normalization_type in ("LN", "LNPre")),
            ("act_fn", cfg.act_fn, cfg.act_fn in ("gelu_new", "gelu", "relu", "gelu_fast")),
            ("attn_only", cfg.attn_only, not cfg.attn_only),
            ("parallel_attn_mlp", cfg.parallel_attn_mlp, not cfg.parallel_attn_mlp),
        ] if not ok
    ]
    if problems:
        raise ValueError(f"cannot export to GPT2LMHeadModel: {', '.join(problems)}")


def to_hf_gpt2(model: HookedTransformer):
    """A `transformers.GPT2LMHeadModel` computing the same next-token distribution as `model`."""
    from transformers import GPT2Config, GPT2LMHeadModel

    check_exportable(model)
    cfg, tok = model.cfg, model.tokenizer
    config = GPT2Config(
        vocab_size=cfg.d_vocab, n_positions=cfg.n_ctx, n_ctx=cfg.n_ctx, n_embd=cfg.d_model, n_layer=cfg.n_layers, n_head=cfg.n_heads,
        n_inner=cfg.d_mlp, activation_function=cfg.act_fn, layer_norm_epsilon=cfg.eps, tie_word_embeddings=False,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=getattr(tok, "bos_token_id", None), eos_token_id=getattr(tok, "eos_token_id", None),
        pad_token_id=getattr(tok, "pad_token_id", None), architectures=["GPT2LMHeadModel"],
    )
    hf = GPT2LMHeadModel(config)
    missing, unexpected = hf.load_state_dict(gpt2_state_dict(model), strict=False)
    missing = [k for k in missing if not k.endswith((".attn.bias", ".attn.masked_bias"))]  # causal-mask buffers
    if missing or unexpected:
        raise RuntimeError(f"GPT-2 layout mismatch: missing {missing}, unexpected {unexpected}")
    return hf.eval()


def to_hf_reward_model(model):
    """A `transformers.GPT2ForSequenceClassification` (num_labels=1) giving the same scalar as a
    `reward_modeling.RewardModel`, whose head reads n̂ = ln_final.hook_normalized.

    The trunk is `to_hf_gpt2`'s, whose final LayerNorm has weight 1 and bias 1, so the hidden
    state the `score` head reads is n̂ + 1. `score` has no bias; since n̂ · 1 = 0, the weight

        w' = w + (b − w · 1) / d · 1      gives      w' · (n̂ + 1) = w · n̂ + b,

    exactly the RewardModel's r = w · n̂ + b. Both read the last non-pad token.
    """
    from transformers import GPT2ForSequenceClassification

    lm = to_hf_gpt2(model.base)
    config = lm.config
    config.architectures, config.num_labels = ["GPT2ForSequenceClassification"], 1
    config.pad_token_id = model.pad_token_id
    hf = GPT2ForSequenceClassification(config)
    w, b = model.score.weight.detach().float().cpu()[0], model.score.bias.detach().float().cpu()[0]
    d_model = w.shape[0]
    score = w + (b - w.sum()) / d_model
    state = {f"transformer.{k}": v for k, v in lm.transformer.state_dict().items()}
    state["score.weight"] = score[None, :].contiguous()
    missing, unexpected = hf.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith((".attn.bias", ".attn.masked_bias"))]
    if missing or unexpected:
        raise RuntimeError(f"GPT-2 classifier layout mismatch: missing {missing}, unexpected {unexpected}")
    return hf.eval()


# --- The rotary families: GPT-NeoX (Pythia), Llama, Qwen2, Gemma --------------------------------
#
# Shared notation (TransformerLens' forward, which the HF model must reproduce):
#   n̂ = x / √(mean(x²) + ε)                      RMSNormPre (folded; an unfolded RMSNorm adds ⊙ w)
#   q_h = n̂ W_Q[h] + b_Q[h],  k_g = n̂ W_K[g] + b_K[g],  v_g = n̂ W_V[g] + b_V[g]   (g: the K/V head of h)
#   attn = Σ_h softmax(rot(q_h) rot(k_g)ᵀ / √d_head) v_g W_O[h] + b_O
#   mlp  = (act(n̂ W_gate) ⊙ (n̂ W_in) + b_in) W_out + b_out     (TransformerLens adds b_in after ⊙)
#   logits = n̂ W_U + b_U
# TransformerLens keeps one W_K, W_V, b_K, b_V per K/V head (`_W_K`, ...) and repeats them over the
# n_heads / n_kv query heads of a group (repeat_interleave), as HF's repeat_kv does.

EXACT_TOL = 1e-6
"""How large a term an export may drop (max |·|, relative to the kept term's scale when there is
one): float32 rounding, not a trained weight (one Adam step at lr 1e-5 moves a weight by ~1e-5)."""


class Unplaced:
    """The trained weights a class has no place for, gathered so that one line names them all.

    `add` records a term the export would have to drop; `refuse` raises the one-line ValueError if
    any term was more than float noise (EXACT_TOL, relative to `scale` when that is above 1)."""

    def __init__(self, architecture: str):
        self.architecture = architecture
        self.found: dict[str, tuple[list[int], float, str]] = {}  # what -> (layers, largest |·|, why)

    def add(self, what: str, term: Tensor | float, why: str, layer: int | None = None, scale: float = 1.0) -> None:
        size = float(term.detach().abs().max()) if isinstance(term, Tensor) else float(term)
        if size > EXACT_TOL * max(1.0, scale):
            layers, largest, _ = self.found.get(what, ([], 0.0, why))
            self.found[what] = ([*layers, layer] if layer is not None else layers, max(largest, size), why)

    def refuse(self) -> None:
        if self.found:
            items = []
            for what, (layers, size, why) in self.found.items():
                where = "blocks " + ",".join(map(str, layers)) + ": " if layers else ""
                items.append(f"{where}{what} (|·| up to {size:.1g}; {why})")
            raise ValueError(f"cannot export to {self.architecture}, which has no place for {'; '.join(items)} — "
                             f"a full fine-tune trains these, a LoRA run leaves them as loaded")


def _check_features(model: HookedTransformer, architecture: str, expected: dict[str, object]) -> None:
    """Refuse, in one line, a config whose forward the HF class does not compute (QK norm, soft-caps, ...)."""
    cfg = model.cfg
    common = {"use_qk_norm": False, "clip_qkv": None, "use_logn_attn": False, "use_dynamic_ntk_rope": False,
              "use_local_attn": False, "use_yarn_rope": False, "use_attention_sinks": False, "attn_only": False,
              "post_embedding_ln": False, "scale_attn_by_inverse_layer_idx": False, "num_experts": None,
              "rotary_adjacent_pairs": False, "rotary_scaling_factor": 1.0, "use_attn_scale": True,
              "positional_embedding_type": "rotary", "use_normalization_before_and_after": False}
    problems = []
    for name, wanted in {**common, **expected}.items():  # a tuple: any of these values
        value = getattr(cfg, name, None)
        if value not in (wanted if isinstance(wanted, tuple) else (wanted,)):
            problems.append(f"{name}={value!r}")
    if cfg.attn_scale != cfg.d_head**0.5:
        problems.append(f"attn_scale={cfg.attn_scale!r} (HF scales by 1/√d_head)")
    if cfg.attn_scores_soft_cap > 0 or cfg.output_logits_soft_cap > 0:
        problems.append("soft-capped attention or logits")
    if cfg.d_vocab_out != cfg.d_vocab:
        problems.append(f"d_vocab_out={cfg.d_vocab_out} != d_vocab={cfg.d_vocab}")
    from transformers.activations import ACT2FN

    if cfg.act_fn not in ACT2FN:
        problems.append(f"act_fn={cfg.act_fn!r}")
    if problems:
        raise ValueError(f"cannot export to {architecture}: {', '.join(problems)}")


def _rope_parameters(cfg) -> dict:
    """HF's `rope_parameters` for TransformerLens' rotary: plain (θ = rotary_base) or Llama 3.1's
    NTK-by-parts scaling (`rope_type="llama3"`)."""
    rope = {"rope_type": "default", "rope_theta": float(cfg.rotary_base)}
    if cfg.use_NTK_by_parts_rope:
        rope.update(rope_type="llama3", factor=float(cfg.NTK_by_parts_factor),
                    low_freq_factor=float(cfg.NTK_by_parts_low_freq_factor),
                    high_freq_factor=float(cfg.NTK_by_parts_high_freq_factor),
                    original_max_position_embeddings=int(cfg.NTK_original_ctx_len))
    return rope


def _token_ids(model: HookedTransformer) -> dict:
    tok = model.tokenizer
    return dict(bos_token_id=getattr(tok, "bos_token_id", None), eos_token_id=getattr(tok, "eos_token_id", None),
                pad_token_id=getattr(tok, "pad_token_id", None))


def _kv_weights(attn) -> tuple[Float[Tensor, "n_kv d_model d_head"], Float[Tensor, "n_kv d_model d_head"],
                               Float[Tensor, "n_kv d_head"], Float[Tensor, "n_kv d_head"]]:
    """W_K, W_V, b_K, b_V once per K/V head (grouped-query attention stores them so; plain attention
    has n_kv = n_heads)."""
    from transformer_lens.components import GroupedQueryAttention

    if isinstance(attn, GroupedQueryAttention):
        return attn._W_K, attn._W_V, attn._b_K, attn._b_V
    return attn.W_K, attn.W_V, attn.b_K, attn.b_V


def _rows(W: Float[Tensor, "n d_model h"]) -> Float[Tensor, "n_h d_model"]:
    """Per-head input weights as an nn.Linear weight (out = (n h), in = d_model)."""
    return einops.rearrange(W.detach(), "n d h -> (n h) d")


def _load(hf, state: dict[str, Tensor], architecture: str):
    state = {k: v.detach().float().cpu().contiguous() for k, v in state.items()}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"{architecture} layout mismatch: missing {missing}, unexpected {unexpected}")
    return hf.eval()


def gpt_neox_state_dict(model: HookedTransformer) -> dict[str, Tensor]:
    """The HookedTransformer's weights under GPTNeoXForCausalLM's names (nn.Linear: x Wᵀ + b).

    query_key_value.weight = rows of [W_Q[i]ᵀ; W_K[i]ᵀ; W_V[i]ᵀ] head by head: layout (head, q|k|v, d_head)
    query_key_value.bias   = [b_Q[i]; b_K[i]; b_V[i]] in the same order;  dense = W_Oᵀ, b_O
    dense_h_to_4h = W_inᵀ, b_in;  dense_4h_to_h = W_outᵀ, b_out;  LayerNorms 1, 0 where folded
    final_layer_norm, lm_head: GPT-2's identity (`final_norm_and_unembed`): weight 1, bias 1, and
    W_U + 1 cᵀ/d for c = b_U − 1·W_U, exact because the LayerNorm's n̂ has mean zero.
    """
    cfg = model.cfg
    sd: dict[str, Tensor] = {"gpt_neox.embed_in.weight": model.embed.W_E.detach()}
    for layer, block in enumerate(model.blocks):
        p = f"gpt_neox.layers.{layer}."
        attn, mlp = block.attn, block.mlp
        sd[p + "input_layernorm.weight"], sd[p + "input_layernorm.bias"] = _layer_norm(block.ln1, cfg.d_model)
        sd[p + "post_attention_layernorm.weight"], sd[p + "post_attention_layernorm.bias"] = _layer_norm(
            block.ln2, cfg.d_model)
        W_QKV = torch.stack([attn.W_Q.detach(), attn.W_K.detach(), attn.W_V.detach()])  # [3, n, d_model, h]
        sd[p + "attention.query_key_value.weight"] = einops.rearrange(W_QKV, "qkv i m h -> (i qkv h) m")
        b_QKV = torch.stack([attn.b_Q.detach(), attn.b_K.detach(), attn.b_V.detach()])  # [3, n, h]
        sd[p + "attention.query_key_value.bias"] = einops.rearrange(b_QKV, "qkv i h -> (i qkv h)")
        sd[p + "attention.dense.weight"] = einops.rearrange(attn.W_O.detach(), "i h m -> m (i h)")
        sd[p + "attention.dense.bias"] = attn.b_O.detach()
        sd[p + "mlp.dense_h_to_4h.weight"], sd[p + "mlp.dense_h_to_4h.bias"] = mlp.W_in.detach().T, mlp.b_in.detach()
        sd[p + "mlp.dense_4h_to_h.weight"], sd[p + "mlp.dense_4h_to_h.bias"] = mlp.W_out.detach().T, mlp.b_out.detach()
    weight, bias, lm_head = final_norm_and_unembed(model)
    sd["gpt_neox.final_layer_norm.weight"], sd["gpt_neox.final_layer_norm.bias"], sd["lm_head.weight"] = (
        weight, bias, lm_head)
    return sd


def to_hf_gpt_neox(model: HookedTransformer):
    """A `transformers.GPTNeoXForCausalLM` (Pythia) computing the same next-token distribution as
    `model`: partial rotary (rotary_dim of d_head, rotate-half pairs), parallel or sequential
    residual, LayerNorms with bias, biases everywhere but the unembedding (see `gpt_neox_state_dict`).
    Exact for any weights."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    architecture = "GPTNeoXForCausalLM"
    cfg = model.cfg
    _check_features(model, architecture, {"normalization_type": ("LN", "LNPre"), "gated_mlp": False,
                                          "n_key_value_heads": None, "final_rms": False})
    partial = cfg.rotary_dim / cfg.d_head
    if cfg.n_heads * cfg.d_head != cfg.d_model or int(cfg.d_head * partial) != cfg.rotary_dim:
        raise ValueError(f"cannot export to {architecture}: d_head {cfg.d_head} × n_heads {cfg.n_heads} must be "
                         f"d_model {cfg.d_model} and rotary_dim {cfg.rotary_dim} a fraction of d_head")
    config = GPTNeoXConfig(
        vocab_size=cfg.d_vocab, hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, intermediate_size=cfg.d_mlp, hidden_act=cfg.act_fn,
        max_position_embeddings=cfg.n_ctx, layer_norm_eps=cfg.eps, use_parallel_residual=cfg.parallel_attn_mlp,
        rope_parameters={**_rope_parameters(cfg), "partial_rotary_factor": partial}, attention_bias=True,
        tie_word_embeddings=False, hidden_dropout=0.0, attention_dropout=0.0, architectures=[architecture],
        **_token_ids(model))
    return _load(GPTNeoXForCausalLM(config), gpt_neox_state_dict(model), architecture)


def _rms_weight(ln, d_model: int, offset: float) -> Tensor:
    """A block RMSNorm's HF weight: TransformerLens' w (1 where folded) − offset (1 for Gemma's x·(1 + w))."""
    w = ln.w.detach() if hasattr(ln, "w") else torch.ones(d_model)
    return w - offset


def llama_layout_state_dict(
    model: HookedTransformer, norm_offset: float = 0.0, embed_scale: float = 1.0
) -> dict[str, Tensor]:
    """The weights under the names Llama, Qwen2 and Gemma share, with every bias the HookedTransformer
    has (each `to_hf_*` keeps, moves or refuses those its class lacks):

    embed_tokens = W_E / embed_scale (Gemma multiplies by √d_model in its forward)
    q_proj = W_Q as rows (n h) × d, bias b_Q;  k_proj, v_proj = W_K, W_V per K/V head, bias b_K, b_V
    o_proj = W_Oᵀ, bias b_O
    gate_proj = W_gateᵀ, up_proj = W_inᵀ;  down_proj = W_outᵀ, bias b_in W_out + b_out
        (TransformerLens adds b_in after act(·) ⊙ (·), so it reaches the residual only as b_in W_out)
    input/post_attention_layernorm = w − norm_offset  (w = 1 where folded)
    norm = 1 − norm_offset;  lm_head = (diag(w_final) W_U)ᵀ — the final norm's weight folded into it.
    b_U is not here: no class of these has an lm_head bias (`_unembedding_bias`).
    """
    cfg = model.cfg
    sd: dict[str, Tensor] = {"model.embed_tokens.weight": model.embed.W_E.detach() / embed_scale}
    for layer, block in enumerate(model.blocks):
        p = f"model.layers.{layer}."
        attn, mlp = block.attn, block.mlp
        W_K, W_V, b_K, b_V = _kv_weights(attn)
        sd[p + "input_layernorm.weight"] = _rms_weight(block.ln1, cfg.d_model, norm_offset)
        sd[p + "post_attention_layernorm.weight"] = _rms_weight(block.ln2, cfg.d_model, norm_offset)
        sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.q_proj.bias"] = _rows(attn.W_Q), attn.b_Q.detach().flatten()
        sd[p + "self_attn.k_proj.weight"], sd[p + "self_attn.k_proj.bias"] = _rows(W_K), b_K.detach().flatten()
        sd[p + "self_attn.v_proj.weight"], sd[p + "self_attn.v_proj.bias"] = _rows(W_V), b_V.detach().flatten()
        sd[p + "self_attn.o_proj.weight"] = einops.rearrange(attn.W_O.detach(), "n h d -> d (n h)")
        sd[p + "self_attn.o_proj.bias"] = attn.b_O.detach()
        sd[p + "mlp.gate_proj.weight"] = mlp.W_gate.detach().T
        sd[p + "mlp.up_proj.weight"] = mlp.W_in.detach().T
        sd[p + "mlp.down_proj.weight"] = mlp.W_out.detach().T
        sd[p + "mlp.down_proj.bias"] = mlp.b_in.detach() @ mlp.W_out.detach() + mlp.b_out.detach()
    sd["model.norm.weight"] = torch.ones(cfg.d_model) - norm_offset
    sd["lm_head.weight"] = _lm_head(model)
    return sd


def _lm_head(model: HookedTransformer) -> Float[Tensor, "d_vocab d_model"]:
    """(diag(w_final) W_U)ᵀ: an unfolded final RMSNorm's weight folded into the unembedding."""
    W_U = model.unembed.W_U.detach()
    if hasattr(model.ln_final, "w"):
        W_U = model.ln_final.w.detach()[:, None] * W_U
    return W_U.T


def _unembedding_bias(model: HookedTransformer, unplaced: Unplaced) -> None:
    """A b_U that is constant over the vocabulary shifts every logit alike and leaves the log-probs
    as they are; any other needs the bias these classes' lm_head lacks.

    Why no trick as GPT-2's: there the final LayerNorm's n̂ has mean zero, so its bias can carry a
    constant direction. An RMSNorm does not centre and its HF versions have no bias, so no part of
    the hidden state is the same for every token."""
    b_U = model.unembed.b_U.detach()
    unplaced.add("unembed.b_U beyond a constant", b_U - b_U.mean(), "lm_head has no bias",
                 scale=float(b_U.abs().max()))


def _rms_family_config(model: HookedTransformer, config_class, architecture: str, **extra):
    cfg = model.cfg
    return config_class(
        vocab_size=cfg.d_vocab, hidden_size=cfg.d_model, intermediate_size=cfg.d_mlp,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_key_value_heads or cfg.n_heads, head_dim=cfg.d_head, hidden_act=cfg.act_fn,
        max_position_embeddings=cfg.n_ctx, rms_norm_eps=cfg.eps, rope_parameters=_rope_parameters(cfg),
        tie_word_embeddings=False, attention_dropout=0.0, architectures=[architecture], **_token_ids(model),
        **extra)


RMS_FEATURES = {"normalization_type": ("RMS", "RMSPre"), "gated_mlp": True, "parallel_attn_mlp": False,
                "final_rms": True}


def _optional_biases(sd: dict[str, Tensor], suffixes: tuple[str, ...]) -> bool:
    """For a config flag that adds biases (`attention_bias`, `mlp_bias`): True, keeping them, if any
    of `*suffixes` is nonzero; else False, with the (exactly zero) biases removed, as the family's
    own config has none."""
    keys = [k for k in sd if k.endswith(suffixes)]
    if any(bool(sd[k].any()) for k in keys):
        return True
    for k in keys:
        del sd[k]
    return False


def _drop_mlp_biases(sd: dict[str, Tensor], unplaced: Unplaced) -> None:
    """Remove the down_proj biases of a class whose MLP has none (recording any that is not 0)."""
    for key in [k for k in sd if k.endswith("mlp.down_proj.bias")]:
        unplaced.add("b_in·W_out + b_out", sd.pop(key), "the MLP has no bias", layer=int(key.split(".")[2]))


def to_hf_llama(model: HookedTransformer):
    """A `transformers.LlamaForCausalLM` computing the same next-token distribution as `model`
    (`llama_layout_state_dict`; RMSNorm weights 1 where folded, rotate-half rotary, grouped K/V).

    Llama's config can give every attention projection a bias (`attention_bias`) and every MLP
    projection one (`mlp_bias`): switched on when the model has a nonzero bias there (a freshly
    loaded Llama has none, so its config stays Llama's own; gate and up biases are then 0).
    Refuses only a b_U that is not constant over the vocabulary."""
    from transformers import LlamaConfig, LlamaForCausalLM

    architecture = "LlamaForCausalLM"
    _check_features(model, architecture, RMS_FEATURES)
    unplaced = Unplaced(architecture)
    _unembedding_bias(model, unplaced)
    unplaced.refuse()
    sd = llama_layout_state_dict(model)
    attention_bias = _optional_biases(sd, ATTENTION_BIASES)
    mlp_bias = _optional_biases(sd, ("down_proj.bias",))
    if mlp_bias:
        for layer in range(model.cfg.n_layers):
            for name in ("gate", "up"):
                sd[f"model.layers.{layer}.mlp.{name}_proj.bias"] = torch.zeros(model.cfg.d_mlp)
    config = _rms_family_config(model, LlamaConfig, architecture, attention_bias=attention_bias, mlp_bias=mlp_bias)
    return _load(LlamaForCausalLM(config), sd, architecture)


ATTENTION_BIASES = ("q_proj.bias", "k_proj.bias", "v_proj.bias", "o_proj.bias")


def value_bias_for_output_bias(
    W_O: Float[Tensor, "n_heads d_head d_model"], b_O: Float[Tensor, " d_model"], n_kv: int
) -> tuple[Float[Tensor, "n_kv d_head"], float]:
    """δ with Σ_h δ_g(h) W_O[h] = b_O (least squares), and the residual max |Σ_h δ_g(h) W_O[h] − b_O|.

    The inverse of fold_value_biases: attention weights sum to 1 over the positions, so a bias δ_g
    on the values of K/V head g reaches the residual stream as the constant Σ_{h in g} δ_g W_O[h],
    whatever the queries. A b_O of that form moves into the value bias exactly; any other b_O
    (d_model > n_kv·d_head, so most are not) has no place in an attention without an output bias.
    Query head h reads K/V head g(h) = h // (n_heads / n_kv), TransformerLens' repeat_interleave.
    """
    n_heads, d_head, d_model = W_O.shape
    M = W_O.detach().double().reshape(n_kv, n_heads // n_kv, d_head, d_model).sum(1).reshape(n_kv * d_head, d_model)
    target = b_O.detach().double()
    delta = torch.linalg.lstsq(M.T, target[:, None]).solution[:, 0]
    residual = (delta @ M - target).abs().max().item()
    return delta.reshape(n_kv, d_head).to(W_O.dtype), residual


def to_hf_qwen2(model: HookedTransformer):
    """A `transformers.Qwen2ForCausalLM` computing the same next-token distribution as `model`.

    Qwen2 has q, k, v biases (kept as they are) but no o_proj bias and no MLP biases, and
    TransformerLens folded the value biases into b_O (b_O = Σ_h b_V[g(h)] W_O[h], b_V = 0). The
    inverse: v_proj.bias = b_V + δ with Σ_h δ_g(h) W_O[h] = b_O (`value_bias_for_output_bias`), exact
    whenever b_O is of that form — a loaded model, and any whose b_O training left in that span.
    Refuses a b_O outside it, a nonzero MLP bias (b_in W_out + b_out) and a non-constant b_U."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    architecture = "Qwen2ForCausalLM"
    _check_features(model, architecture, RMS_FEATURES)
    unplaced = Unplaced(architecture)
    _unembedding_bias(model, unplaced)
    sd = llama_layout_state_dict(model)
    n_kv = model.cfg.n_key_value_heads or model.cfg.n_heads
    for layer, block in enumerate(model.blocks):
        p = f"model.layers.{layer}."
        b_O = sd.pop(p + "self_attn.o_proj.bias")
        delta, residual = value_bias_for_output_bias(block.attn.W_O, b_O, n_kv)
        unplaced.add("attn.b_O outside the value biases' span through W_O", residual, "o_proj has no bias",
                     layer=layer, scale=float(b_O.abs().max()))
        sd[p + "self_attn.v_proj.bias"] = sd[p + "self_attn.v_proj.bias"] + delta.flatten()
    _drop_mlp_biases(sd, unplaced)
    unplaced.refuse()
    config = _rms_family_config(model, Qwen2Config, architecture, use_sliding_window=False)
    return _load(Qwen2ForCausalLM(config), sd, architecture)


def to_hf_gemma(model: HookedTransformer):
    """A `transformers.GemmaForCausalLM` computing the same next-token distribution as `model`.

    Gemma's RMSNorm computes x̂ ⊙ (1 + w), so a folded norm is w = 0 and an unfolded one w − 1;
    its forward multiplies the embeddings by √d_model, which TransformerLens folded into W_E, so
    embed_tokens = W_E / √d_model. The exported model is untied (lm_head = (diag(w_final) W_U)ᵀ is
    not the embedding after folding). `attention_bias` is switched on for nonzero attention biases,
    as Llama's; Gemma's MLP has none, so a nonzero b_in W_out + b_out refuses, as does a
    non-constant b_U."""
    from transformers import GemmaConfig, GemmaForCausalLM

    architecture = "GemmaForCausalLM"
    _check_features(model, architecture, RMS_FEATURES)
    unplaced = Unplaced(architecture)
    _unembedding_bias(model, unplaced)
    sd = llama_layout_state_dict(model, norm_offset=1.0, embed_scale=model.cfg.d_model**0.5)
    _drop_mlp_biases(sd, unplaced)
    unplaced.refuse()
    attention_bias = _optional_biases(sd, ATTENTION_BIASES)
    config = _rms_family_config(model, GemmaConfig, architecture, attention_bias=attention_bias)
    return _load(GemmaForCausalLM(config), sd, architecture)


CAUSAL_LM_EXPORTS = {"GPT2LMHeadModel": to_hf_gpt2, "GPTNeoXForCausalLM": to_hf_gpt_neox,
                     "LlamaForCausalLM": to_hf_llama, "Qwen2ForCausalLM": to_hf_qwen2,
                     "GemmaForCausalLM": to_hf_gemma}
"""`cfg.original_architecture` -> the conversion to that same HF class."""


def to_hf_causal_lm(model: HookedTransformer):
    """`model` as its own family's HF causal LM (`CAUSAL_LM_EXPORTS`, by `cfg.original_architecture`);
    a HookedTransformer built from a bare config (no architecture) goes to GPT-2, as it always did."""
    architecture = model.cfg.original_architecture
    if architecture is None:
        return to_hf_gpt2(model)
    if architecture not in CAUSAL_LM_EXPORTS:
        raise ValueError(f"cannot export a {architecture} model: the exports are to "
                         f"{', '.join(CAUSAL_LM_EXPORTS)} (its own class only)")
    return CAUSAL_LM_EXPORTS[architecture](model)
