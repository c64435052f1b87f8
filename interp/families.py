"""What interp's analyses assume of a model's architecture, said once and checked once.

interp began on GPT-2: LayerNorm, learned positions, one K/V per head, a plain MLP, attention then
MLP. The families `--model FOLDER` loads (TransformerLens, fold_ln: ln_final has no weights of its
own, they are in W_U) differ in ways an analysis must know about:

- The final norm. LayerNorm (GPT-2, Pythia: normalization_type "LNPre") centres the residual
  before dividing by its scale; RMSNorm (Llama, Qwen2, Gemma: "RMSPre") only divides. So a
  residual direction d reaches the logits at a frozen scale s as (d − mean d)/s · W_U under
  LayerNorm and as d/s · W_U under RMSNorm (`centre_like_final_norm`).
- Parallel attention and MLP (Pythia): both read resid_pre; the block has no resid_mid.
- Gated MLPs (Llama, Qwen2, Gemma): hook_post = act(x W_gate) · (x W_in) (+ b_in), and the MLP
  writes hook_post @ W_out + b_out, so a neuron is still its activation times its W_out row.
- Grouped-query attention (Llama, Qwen2: 4 query heads on 2 K/V heads; Gemma: on 1). hook_z and
  W_O are per query head, so per-head outputs and their attribution are exact. W_K and W_V belong
  to a K/V head shared by n_heads / n_key_value_heads query heads; TransformerLens' `W_K` / `W_V`
  repeat it for each query head that reads it (query head h reads K/V head h // group).

Two things no family here has, but a checkpoint may (Gemma 2), break a sum, so the analyses that
rely on one refuse (`UnsupportedModel`, one line naming the family and the reason):
a logit soft cap (logits = c·tanh(x / c): no sum of components is the logits) and a norm on each
attention / MLP output before it joins the residual (heads and neurons no longer add up to it).
"""

from __future__ import annotations

from torch import Tensor
from transformer_lens import HookedTransformer


class UnsupportedModel(ValueError):
    """An analysis that would be silently wrong on this architecture: one line, family and reason."""


def family(model: HookedTransformer) -> str:
    """The model's architecture as Hugging Face names it (e.g. "LlamaForCausalLM")."""
    return model.cfg.original_architecture or "this HookedTransformer (built from a config)"


def final_norm_centres(model: HookedTransformer) -> bool:
    """True for LayerNorm (subtracts the mean before scaling), False for RMSNorm or no norm."""
    return model.cfg.normalization_type in ("LN", "LNPre")


def centre_like_final_norm(model: HookedTransformer, x: Tensor) -> Tensor:
    """x − mean(x) over d_model when the final norm is a LayerNorm; x itself under RMSNorm,
    which does not centre (centring there would subtract a part the model does read)."""
    return x - x.mean(-1, keepdim=True) if final_norm_centres(model) else x


def gqa_group(model: HookedTransformer) -> int:
    """Query heads per K/V head: 1 without grouped-query attention."""
    n_kv = model.cfg.n_key_value_heads
    return model.cfg.n_heads // n_kv if n_kv else 1


def mlp_activation(model: HookedTransformer) -> str:
    """What a neuron's activation (hook_post) is, in words: "gelu(pre)" or "silu(gate)·up"."""
    act = model.cfg.act_fn or "act"
    return f"{act}(gate)·up" if model.cfg.gated_mlp else f"{act}(pre)"


def require_additive_logits(model: HookedTransformer, analysis: str) -> None:
    """Refuse an analysis that splits the logits into a sum when the logits are soft-capped."""
    cap = model.cfg.output_logits_soft_cap
    if cap is not None and cap > 0:
        raise UnsupportedModel(
            f"{analysis}: {family(model)} soft-caps its logits ({cap:g}·tanh(logit/{cap:g})), so no sum of "
            "residual components equals them; not computed for this family")


def require_additive_blocks(model: HookedTransformer, analysis: str) -> None:
    """Refuse a per-head or per-neuron attribution when heads and neurons do not add up to the block."""
    require_additive_logits(model, analysis)
    if model.cfg.use_normalization_before_and_after:
        raise UnsupportedModel(
            f"{analysis}: {family(model)} normalizes each attention and MLP output before adding it to the "
            "residual, so heads and neurons do not add up to it; not computed for this family")


def require_site(model: HookedTransformer, hook_name: str) -> None:
    """Refuse a hook the model does not have, saying why (parallel blocks have no resid_mid)."""
    if hook_name in model.hook_dict:
        return
    if hook_name.endswith("hook_resid_mid") and model.cfg.parallel_attn_mlp:
        raise UnsupportedModel(
            f"{hook_name}: {family(model)} runs attention and the MLP in parallel (both read resid_pre), so "
            "there is no resid_mid; use resid_pre, resid_post, attn_out or mlp_out")
    raise UnsupportedModel(f"{hook_name}: {family(model)} has no such hook")
