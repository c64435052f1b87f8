"""Feature diffing: the same token sequences through the reference and the tuned model, both
encoded by ONE SAE (trained on the reference, `interp.sae`) at its site.

Per feature f, over the real positions p (not padding, BOS, EOS or pad):

    mean_m(f) = mean_p a_f(x_m[p]),   freq_m(f) = mean_p [a_f(x_m[p]) > 0],   m ∈ {ref, tuned}
    Δa(f)     = mean_tuned(f) − mean_ref(f)          (features ranked by |Δa|)

How much of the change the features explain: with Δx[p] = x_tuned[p] − x_ref[p] and Δa_f[p] the
per-position activation change, the top-k features (by |Δa|) explain

    1 − Σ_p |Δx[p] − Σ_{f ∈ top k} Δa_f[p] d_f|² / Σ_p |Δx[p]|²

of it (d_f = W_dec[f]). With all features the rest is the change in the SAE's reconstruction
error, Σ_p |Δerr[p]|² / Σ_p |Δx[p]|².

What a feature means: its top-activating snippets (`top_activating_snippets`, on texts passed in)
and the tokens its decoder direction promotes through a model's unembedding at that model's own
mean final-norm scale s: logits_f = (c(d_f) / s) · w_ln · W_U (`direction_logits`), c(d) = d − mean(d)
under a final LayerNorm and c(d) = d under RMSNorm, which does not centre.

Units: feature activations in SAE units (a_f · |d_f| is a residual-stream norm).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor
from transformer_lens import HookedTransformer

from interp.families import centre_like_final_norm, require_additive_logits
from interp.sae import special_token_ids
from interp.sampling import SampleSettings, sample

EXPLAINED_KS = (1, 10, 100)
"""The k of "the top-k features explain ..." on the features page."""


def real_positions(model: HookedTransformer, tokens: Int[Tensor, "batch pos"],
                   attention_mask: Bool[Tensor, "batch pos"] | None = None) -> Bool[Tensor, "batch pos"]:
    """Positions that hold a real token: attended (not padding) and not BOS / EOS / pad, whose
    activations are outliers an SAE is not trained on."""
    mask = torch.ones_like(tokens, dtype=torch.bool) if attention_mask is None else attention_mask.bool().clone()
    for i in special_token_ids(model):
        mask &= tokens != i
    return mask


@torch.no_grad()
def site_activations(model: HookedTransformer, hook_name: str, tokens: Int[Tensor, "batch pos"],
                     attention_mask: Bool[Tensor, "batch pos"] | None = None) -> Float[Tensor, "batch pos d_model"]:
    """The model's activations at `hook_name` (left padding handled by the attention mask). A
    block's hook stops the forward after that block: the unembedding, the largest matmul of a small
    model, is never computed for a site inside it."""
    kw = {} if attention_mask is None or bool(attention_mask.all()) else {"attention_mask": attention_mask.long()}
    parts = hook_name.split(".")
    if parts[0] == "blocks" and parts[1].isdigit():
        kw["stop_at_layer"] = int(parts[1]) + 1
    _, cache = model.run_with_cache(tokens, names_filter=hook_name, **kw)
    return cache[hook_name]


@torch.no_grad()
def diff_tokens(models: list[HookedTransformer], prompts: list[str], s: SampleSettings
                ) -> tuple[Int[Tensor, "seqs pos"], Bool[Tensor, "seqs pos"]]:
    """The sequences a diff reads: `s.n_samples` completions of `prompts` sampled from each model in
    turn (same prompts, same seed), stacked, as (tokens, attention mask). Every model then reads all
    of them, so a feature's activation change is a change in the model, not in the text it reads."""
    batches = [sample(m, prompts, s) for m in models]
    prompt_ids = torch.cat([b.prompt_ids for b in batches])
    prompt_mask = torch.cat([b.prompt_mask for b in batches])
    completions = torch.cat([b.completion_ids for b in batches])
    return torch.cat([prompt_ids, completions], 1), torch.cat([prompt_mask, torch.ones_like(completions, dtype=torch.bool)], 1)


@dataclass
class FeatureDiff:
    """Per-feature statistics of the reference and the tuned model on the same tokens (see the
    module docstring); `ranked` orders the features by |change|, largest first."""

    mean_ref: Float[Tensor, " d_sae"]
    mean_tuned: Float[Tensor, " d_sae"]
    freq_ref: Float[Tensor, " d_sae"]
    freq_tuned: Float[Tensor, " d_sae"]
    change: Float[Tensor, " d_sae"]
    ranked: Int[Tensor, " d_sae"]
    resid_change: Float[Tensor, "n d_model"] = field(repr=False)
    """x_tuned − x_ref at each real position."""
    act_change: Float[Tensor, "n d_sae"] = field(repr=False)
    """a(x_tuned) − a(x_ref) at each real position."""
    recon_change: Float[Tensor, "n d_model"] = field(repr=False)
    """x̂_tuned − x̂_ref (the SAE's reconstructions) at each real position."""


@torch.no_grad()
def feature_diff(reference: HookedTransformer, tuned: HookedTransformer, sae, hook_name: str,
                 tokens: Int[Tensor, "batch pos"], attention_mask: Bool[Tensor, "batch pos"] | None = None) -> FeatureDiff:
    """Encode both models' activations at `hook_name` on the same `tokens` with one SAE and compare."""
    mask = real_positions(reference, tokens, attention_mask)
    x_ref = site_activations(reference, hook_name, tokens, attention_mask)[mask]  # [n, d_model]
    x_tuned = site_activations(tuned, hook_name, tokens, attention_mask)[mask]
    a_ref, a_tuned = sae.encode(x_ref), sae.encode(x_tuned)  # [n, d_sae]
    change = a_tuned.mean(0) - a_ref.mean(0)
    return FeatureDiff(
        mean_ref=a_ref.mean(0), mean_tuned=a_tuned.mean(0),
        freq_ref=(a_ref > 0).float().mean(0), freq_tuned=(a_tuned > 0).float().mean(0),
        change=change, ranked=change.abs().argsort(descending=True, stable=True),
        resid_change=x_tuned - x_ref, act_change=a_tuned - a_ref,
        recon_change=sae.decode(a_tuned) - sae.decode(a_ref),
    )


def explained_fraction(diff: FeatureDiff, W_dec: Float[Tensor, "d_sae d_model"],
                       ks: tuple[int, ...] = EXPLAINED_KS) -> dict[str, float]:
    """Share of the residual-stream change explained by the top-k features' decoder directions
    (per position, see the module docstring), for each k and for all features; and the change in
    the SAE's reconstruction error. nan when the residual did not change at all."""
    total = diff.resid_change.pow(2).sum().item()

    def frac(rest: Tensor) -> float:
        return float("nan") if total == 0 else 1 - rest.pow(2).sum().item() / total

    out = {}
    for k in ks:
        top = diff.ranked[:k]
        out[f"top_{k}"] = frac(diff.resid_change - diff.act_change[:, top] @ W_dec[top])
    out["all_features"] = frac(diff.resid_change - diff.act_change @ W_dec)
    out["error_change"] = float("nan") if total == 0 else (diff.resid_change - diff.recon_change).pow(2).sum().item() / total
    return out


@torch.no_grad()
def final_ln_scale(model: HookedTransformer, tokens: Int[Tensor, "batch pos"],
                   attention_mask: Bool[Tensor, "batch pos"] | None = None) -> float:
    """The model's mean final-norm scale (ln_final.hook_scale) over the real positions."""
    scale = site_activations(model, "ln_final.hook_scale", tokens, attention_mask)[..., 0]
    return scale[real_positions(model, tokens, attention_mask)].mean().item()


def direction_logits(model: HookedTransformer, direction: Float[Tensor, " d_model"], scale: float) -> Float[Tensor, " d_vocab"]:
    """What adding `direction` to the final residual does to `model`'s logits at final-norm scale
    `scale`: (c(d) / scale) · w_ln · W_U, c(d) = d − mean d under LayerNorm and d under RMSNorm
    (`interp.families.centre_like_final_norm`); w_ln = 1 when the norm's weights are folded in."""
    require_additive_logits(model, "feature logit effects")
    d = centre_like_final_norm(model, direction) / scale
    if getattr(model.ln_final, "w", None) is not None:
        d = d * model.ln_final.w
    return d @ model.W_U


@torch.no_grad()
def promoted_tokens(model: HookedTransformer, direction: Float[Tensor, " d_model"], scale: float,
                    k: int = 8) -> list[tuple[str, float]]:
    """The k tokens whose logits `direction` raises most (token, logit change)."""
    logits = direction_logits(model, direction, scale)
    top = logits.topk(k)
    return [(model.to_string(torch.tensor([int(i)])), float(v)) for v, i in zip(top.values, top.indices)]


def right_padded(model: HookedTransformer, texts: list[str]) -> tuple[Int[Tensor, "batch pos"], Bool[Tensor, "batch pos"]]:
    """`texts` tokenized (BOS first, each truncated to the context) and right-padded into one batch,
    as (tokens, attention mask): with causal attention the real positions are exact without the mask."""
    toks = [model.to_tokens(t, truncate=True)[0] for t in texts]
    width = max(len(t) for t in toks)
    tokens = torch.zeros(len(toks), width, dtype=torch.long, device=model.cfg.device)
    attend = torch.zeros(len(toks), width, dtype=torch.bool, device=model.cfg.device)
    for i, t in enumerate(toks):
        tokens[i, : len(t)], attend[i, : len(t)] = t, True
    return tokens, attend


@torch.no_grad()
def top_activating(model: HookedTransformer, encode: Callable[[Tensor], Tensor], texts: list[str],
                   features: list[int], k: int = 5, batch: int = 32) -> dict[int, list[tuple[float, str]]]:
    """For each feature, the k (activation, snippet) where it fires most on `texts`, with
    `encode(tokens) -> [batch, pos, n_features]` the dictionary's activations on a batch; the
    snippet is the text up to the token, the token in [[ ]], and three tokens after it."""
    acts, rows = [], []
    for start in range(0, len(texts), batch):
        tokens, attend = right_padded(model, texts[start : start + batch])
        a = encode(tokens)[..., features]  # [b, pos, n]
        a = a.masked_fill(~real_positions(model, tokens, attend)[..., None], float("-inf"))
        acts.append(a.flatten(0, 1))
        rows += [(tokens[i], p) for i in range(tokens.shape[0]) for p in range(tokens.shape[1])]
    table = torch.cat(acts)  # [rows, n]
    out = {}
    for j, f in enumerate(features):
        best = table[:, j].topk(min(k, table.shape[0]))
        out[f] = []
        for v, r in zip(best.values.tolist(), best.indices.tolist()):
            if v <= 0:
                break
            t, p = rows[r]
            before, tok, after = model.to_string(t[max(1, p - 12) : p]), model.to_string(t[p : p + 1]), model.to_string(t[p + 1 : p + 4])
            out[f].append((v, f"{before}[[{tok}]]{after}".replace("<|endoftext|>", "")))
    return out


def top_activating_snippets(model: HookedTransformer, sae, hook_name: str, texts: list[str],
                            features: list[int], k: int = 5, batch: int = 32) -> dict[int, list[tuple[float, str]]]:
    """`top_activating` through an SAE reading `model` at `hook_name`."""
    return top_activating(model, lambda tokens: sae.encode(site_activations(model, hook_name, tokens)),
                          texts, features, k, batch)
