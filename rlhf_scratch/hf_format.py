"""Our models in Hugging Face's formats: a tuned HookedTransformer as a `GPT2LMHeadModel`, a reward
model as a `GPT2ForSequenceClassification`, with the same log-probs / scores (tested to 1e-4).

TransformerLens loads GPT-2 with its LayerNorms folded into the next layer's weights, the residual-
writing weights centred and the unembedding centred; `to_hf_gpt2` re-expresses that in GPT-2's
layout (see docs/export.md for the identities). No run folders and no files here: the command
`python -m rlhf_scratch.export` and the loaders build on these conversions.
"""

from __future__ import annotations

import einops
import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens import HookedTransformer

VALUE_HEAD_FILE = "value_head.safetensors"


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
