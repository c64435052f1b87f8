"""Solutions of exercises 05 (interpretability), written to be read: plain torch and TransformerLens'
hooks, one step per line. The package's versions do the same on whole caches, batches of prompts and
any model family (`interp.logits.logit_diff`, `interp.residual.logit_lens_logit_diff` and
`residual_patching`, `interp.feature_diff.feature_diff`, `interp.causal.steering_vector` with
`add_vector_hook`); tests/integration/test_course_interp.py checks that each solution passes its check
and agrees with the package's on a planted model.

Read one after your own passes its check.
"""

from collections.abc import Callable

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor
from transformer_lens import HookedTransformer


def logit_diff(
    logits: Float[Tensor, "batch pos d_vocab"],
    pos_ids: list[int],
    neg_ids: list[int],
    last_pos: Int[Tensor, " batch"] | None = None,
) -> Float[Tensor, " batch"]:
    """mean logit of the positive tokens − mean logit of the negative ones, at each prompt's last token."""
    diffs = []
    for b in range(logits.shape[0]):
        last = -1 if last_pos is None else int(last_pos[b])  # right padding: the last REAL token
        at_last = logits[b, last]
        diffs.append(at_last[pos_ids].mean() - at_last[neg_ids].mean())
    return torch.stack(diffs)


def logit_lens_logit_diff(
    resid: Float[Tensor, "site batch d_model"],
    ln_weight: Float[Tensor, " d_model"],
    ln_bias: Float[Tensor, " d_model"],
    direction: Float[Tensor, " d_model"],
    unembed_bias_diff: Float[Tensor, ""],
    eps: float = 1e-5,
) -> Float[Tensor, "site batch"]:
    """The logit difference the model would give if its residual stopped at each site: the final
    LayerNorm with each site's OWN statistics, its weight and bias, then the unembedding's direction."""
    centred = resid - resid.mean(dim=-1, keepdim=True)
    scale = (centred.pow(2).mean(dim=-1, keepdim=True) + eps).sqrt()  # this site's scale, not the final one
    normalised = centred / scale * ln_weight + ln_bias  # ln_final, module and all
    return normalised @ direction + unembed_bias_diff  # direction = W_U[:, pos] − W_U[:, neg] (means)


def site_hook_name(model: HookedTransformer, site: int) -> str:
    """Residual site s: the input of block s, or after the last block for s = n_layers."""
    n = model.cfg.n_layers
    return f"blocks.{site}.hook_resid_pre" if site < n else f"blocks.{n - 1}.hook_resid_post"


@torch.no_grad()
def residual_patching(
    reference: HookedTransformer,
    tuned: HookedTransformer,
    tokens: Int[Tensor, "batch pos"],
    metric: Callable[[Tensor], Tensor],
) -> Float[Tensor, " site"]:
    """For each residual site: run the REFERENCE with its residual there replaced by the tuned model's
    (every position), and return metric(patched) − metric(reference)."""
    _, tuned_cache = tuned.run_with_cache(tokens)
    baseline = metric(reference(tokens))
    effects = []
    for site in range(reference.cfg.n_layers + 1):
        name = site_hook_name(reference, site)

        def patch(resid: Tensor, hook, name: str = name) -> Tensor:
            return tuned_cache[name]  # from here on the reference computes on the tuned model's residual

        patched = reference.run_with_hooks(tokens, fwd_hooks=[(name, patch)])
        effects.append(metric(patched) - baseline)
    return torch.stack(effects)


def feature_change(
    x_ref: Float[Tensor, "batch pos d_model"],
    x_tuned: Float[Tensor, "batch pos d_model"],
    mask: Bool[Tensor, "batch pos"],
    encode: Callable[[Tensor], Tensor],
) -> Float[Tensor, " d_sae"]:
    """Δa(f) = mean over the real positions of a_f(x_tuned) − mean of a_f(x_ref): one SAE encodes both."""
    a_ref = encode(x_ref[mask])  # [n, d_sae]: encode each position, then average (the encoder is not linear)
    a_tuned = encode(x_tuned[mask])
    return a_tuned.mean(dim=0) - a_ref.mean(dim=0)


def steered_logits(
    model: HookedTransformer,
    tokens: Int[Tensor, "batch pos"],
    hook_name: str,
    W_dec: Float[Tensor, "d_sae d_model"],
    features: list[int],
    coefficients: Float[Tensor, " n"],
) -> Float[Tensor, "batch pos d_vocab"]:
    """The model's logits with v = Σ_i coefficients[i] · W_dec[features[i]] added at hook_name, at every position."""
    vector = torch.zeros(W_dec.shape[1])
    for feature, c in zip(features, coefficients):
        vector = vector + c * W_dec[feature]  # a decoder row is the direction the feature writes

    def add(x: Tensor, hook) -> Tensor:
        return x + vector

    return model.run_with_hooks(tokens, fwd_hooks=[(hook_name, add)])


@torch.no_grad()
def changed_head_scores(
    reference: HookedTransformer,
    tuned: HookedTransformer,
    tokens: Int[Tensor, "prompt pos"],
    metric: Callable[[Tensor], Tensor],
) -> Float[Tensor, "prompt layer head"]:
    """Per prompt, the effect on `metric` of swapping ONE head's output (its `result`, z @ W_O) in the reference
    for the tuned model's, each head alone: the reference's attn_out at that layer plus the difference
    (`interp.attention.head_patching_metric` does it for the batch's mean, one number a head).

    A cause, not a correlate: a head whose weights moved without its output moving (re-expressed in another
    basis) patches in nothing, and a head downstream of the changed one, patched alone, brings only its own
    output's change, not its input's. Per prompt, so that the margin over the runner-up has an interval."""
    ref_logits, ref_cache = reference.run_with_cache(tokens)
    _, tuned_cache = tuned.run_with_cache(tokens)
    n_prompts, (n_layers, n_heads) = tokens.shape[0], reference.W_O.shape[:2]

    def per_prompt(logits: Tensor) -> Tensor:
        return torch.stack([metric(logits[b : b + 1]) for b in range(n_prompts)])

    base = per_prompt(ref_logits)
    scores = torch.zeros(n_prompts, n_layers, n_heads)
    for layer in range(n_layers):
        for head in range(n_heads):
            # result = z @ W_O of this head, in each model: [prompt, pos, d_model]
            delta = (tuned_cache["z", layer][:, :, head] @ tuned.W_O[layer, head]
                     - ref_cache["z", layer][:, :, head] @ reference.W_O[layer, head])
            logits = reference.run_with_hooks(
                tokens, fwd_hooks=[(f"blocks.{layer}.hook_attn_out", lambda out, hook, d=delta: out + d)])
            scores[:, layer, head] = per_prompt(logits) - base
    return scores
