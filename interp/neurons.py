"""What RLHF changed in the MLP neurons: direct logit attribution, activation change, top tokens.

A neuron (layer l, index n) writes post_{l,n} · W_out[l][n] into the residual stream
(`blocks.{l}.mlp.hook_post` times its row of W_out; the bias b_out is nobody's). Its direct
logit attribution (DLA) at a prompt's last token is that vector through the model's own cached
final-norm scale, dotted with the model's own sentiment direction — the neuron-level version of
`interp.attention.head_dla`, and the neurons of a layer plus b_out add up to the layer's MLP DLA.
That holds for every family `interp.families` lists: a gated MLP's hook_post is act(gate)·up
(Llama, Qwen2, Gemma), still one number per neuron times its W_out row; where each block's output
is normalized before it joins the residual (Gemma 2) `neuron_dla` refuses.
Units: nats of logit difference (`interp.logits.logit_diff`); activations in the MLP's own units
(`interp.families.mlp_activation`: gelu(pre) for GPT-2, silu(gate)·up for Llama).
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import ActivationCache, HookedTransformer

from interp.families import centre_like_final_norm, require_additive_blocks
from interp.logits import SentimentTokens, logit_diff, residual_sentiment_direction
from interp.residual import real_position_mask, recovered_fraction

Neuron = tuple[int, int]


def _at_last(x: Float[Tensor, "batch pos ..."], last_pos: Int[Tensor, " batch"] | None) -> Float[Tensor, "batch ..."]:
    if last_pos is None:
        return x[:, -1]
    return x[torch.arange(x.shape[0], device=x.device), last_pos.to(x.device)]


def neuron_dla(
    cache: ActivationCache, tokens: SentimentTokens, last_pos: Int[Tensor, " batch"] | None = None
) -> Float[Tensor, "n_layers d_mlp"]:
    """Each neuron's direct contribution to the logit difference at the last token (nats, batch mean):

        DLA_{l,n} = mean_b  post_{l,n}[b] · c(W_out[l][n]) · d / scale[b]

    d the model's `residual_sentiment_direction`, scale[b] the cached final-norm scale at the last
    token, c(w) = w − mean(w) under a final LayerNorm (it centres every component) and c(w) = w
    under RMSNorm (it does not: `interp.families.centre_like_final_norm`).
    """
    model = cache.model
    require_additive_blocks(model, "per-neuron DLA")
    direction = residual_sentiment_direction(model, tokens)  # [d_model]
    scale = _at_last(cache["ln_final.hook_scale"], last_pos)[:, 0]  # [batch]
    rows = []
    for layer in range(model.cfg.n_layers):
        W_out = model.blocks[layer].mlp.W_out  # [d_mlp, d_model]
        per_neuron = centre_like_final_norm(model, W_out) @ direction  # [d_mlp]
        post = _at_last(cache[f"blocks.{layer}.mlp.hook_post"], last_pos)  # [batch, d_mlp]
        rows.append((post * per_neuron / scale[:, None]).mean(0))
    return torch.stack(rows)


def neuron_activation_change(
    ref_cache: ActivationCache,
    tuned_cache: ActivationCache,
    prompt_tokens: Int[Tensor, "batch pos"],
    last_pos: Int[Tensor, " batch"] | None = None,
) -> Float[Tensor, "n_layers d_mlp"]:
    """mean over the prompts' real positions of post_tuned − post_ref, per neuron (signed; the
    same tokens through both models)."""
    mask = real_position_mask(prompt_tokens, last_pos)  # [batch, pos]
    n_layers = ref_cache.model.cfg.n_layers
    rows = []
    for layer in range(n_layers):
        diff = tuned_cache[f"blocks.{layer}.mlp.hook_post"] - ref_cache[f"blocks.{layer}.mlp.hook_post"]
        rows.append((diff * mask[..., None]).sum((0, 1)) / mask.sum())
    return torch.stack(rows)


def top_neurons(scores: Float[Tensor, "n_layers d_mlp"], k: int = 5, absolute: bool = True) -> list[Neuron]:
    """The k (layer, neuron) pairs with the largest |score| (or score when absolute=False)."""
    flat = (scores.abs() if absolute else scores).flatten()
    idx = flat.topk(min(k, flat.numel())).indices.tolist()
    d_mlp = scores.shape[1]
    return [(i // d_mlp, i % d_mlp) for i in idx]


@torch.no_grad()
def top_activating_tokens(
    model: HookedTransformer, prompt_tokens: Int[Tensor, "batch pos"], neuron: Neuron,
    last_pos: Int[Tensor, " batch"] | None = None, k: int = 10,
) -> list[tuple[float, str, str]]:
    """The k (activation, token, context) where `neuron` fires most on the prompts (real positions
    only): the token and the few tokens before it, so a reader can guess what the neuron reads."""
    layer, n = neuron
    _, cache = model.run_with_cache(prompt_tokens, names_filter=f"blocks.{layer}.mlp.hook_post")
    acts = cache[f"blocks.{layer}.mlp.hook_post"][..., n]  # [batch, pos]
    acts = acts.masked_fill(real_position_mask(prompt_tokens, last_pos) == 0, float("-inf"))
    best = acts.flatten().topk(min(k, int(torch.isfinite(acts).sum()))).indices.tolist()
    out = []
    for i in best:
        b, pos = divmod(i, acts.shape[1])
        context = model.to_string(prompt_tokens[b, max(0, pos - 4) : pos + 1])
        out.append((acts[b, pos].item(), model.to_string(prompt_tokens[b, pos : pos + 1]), context))
    return out


@torch.no_grad()
def neuron_patching(
    reference: HookedTransformer,
    tuned: HookedTransformer,
    tokens: Int[Tensor, "batch pos"],
    sentiment: SentimentTokens,
    neurons: list[Neuron],
    last_pos: Int[Tensor, " batch"] | None = None,
) -> tuple[Float[Tensor, " k"], Float[Tensor, " k"]]:
    """Put one neuron's tuned activation (hook_post, every position) into the reference, one
    neuron at a time: (effect on the reference's logit difference in nats, fraction of the
    tuned − reference gap recovered; nan when the gap is ~0). The reference keeps its own W_out,
    so this measures what the neuron now *reads*, not what it writes."""
    ref_ld = logit_diff(reference(tokens), sentiment, last_pos).mean().item()
    tuned_logits, tuned_cache = tuned.run_with_cache(tokens, names_filter=lambda name: name.endswith("mlp.hook_post"))
    tuned_ld = logit_diff(tuned_logits, sentiment, last_pos).mean().item()
    effects = torch.zeros(len(neurons))
    for i, (layer, n) in enumerate(neurons):
        new = tuned_cache[f"blocks.{layer}.mlp.hook_post"][..., n]

        def patch(post: Tensor, hook, new=new, n=n) -> Tensor:
            post[..., n] = new.to(post.device)
            return post

        logits = reference.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{layer}.mlp.hook_post", patch)])
        effects[i] = logit_diff(logits, sentiment, last_pos).mean().item() - ref_ld
    return effects, recovered_fraction(effects + ref_ld, ref_ld, tuned_ld)
