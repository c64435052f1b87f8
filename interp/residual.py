"""What RLHF changed in the residual stream: logit lens, decomposition, layer-wise drift, patching.

All functions read each model's *own* ActivationCache (`cache.model` is the model that made it):
the final-norm scale (LayerNorm or RMSNorm), ln_final and the unembedding used on a residual are
always those of the model whose residual it is. (The blog's notebook scaled GPT-2's stack with the
RLHF model's cache; here that cannot happen because no function takes one model's cache for
another's stack.)

Residual "sites" are the accumulated residual before each block and after the last one, in the
order and with the labels of `cache.accumulated_resid`: site i < n_layers is
`blocks.{i}.hook_resid_pre` ("{i}_pre"), site n_layers is the final residual
(`blocks.{n_layers-1}.hook_resid_post`, "final_post").

Patching fractions: (metric_patched - metric_ref) / (metric_tuned - metric_ref), so 0 = patching
did nothing and 1 = it turned the reference into the tuned model as far as the metric can tell.
When |metric_tuned - metric_ref| < `GAP_EPS` the fraction is undefined and returned as nan.
Patching the final residual leaves the reference's ln_final and unembedding in place, so it
recovers 100% only when RLHF left those alone; what it leaves is the unembedding's share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import ActivationCache, HookedTransformer

from interp.families import require_additive_logits
from interp.logits import (
    RewardFn,
    SentimentTokens,
    logit_diff,
    logit_diff_bias,
    mean_reward,
    residual_sentiment_direction,
    sentiment_direction,
)

GAP_EPS = 1e-6


def recovered_fraction(
    patched: Float[Tensor, "*shape"], ref: float, tuned: float, eps: float = GAP_EPS
) -> Float[Tensor, "*shape"]:
    """(patched - ref) / (tuned - ref); nan everywhere when the gap |tuned - ref| < eps."""
    gap = tuned - ref
    if abs(gap) < eps:
        return torch.full_like(patched, float("nan"))
    return (patched - ref) / gap


def real_position_mask(
    tokens: Int[Tensor, "batch pos"], last_pos: Int[Tensor, " batch"] | None
) -> Float[Tensor, "batch pos"]:
    """1.0 at each row's real tokens (positions <= last_pos), 0.0 at right padding."""
    pos = torch.arange(tokens.shape[1], device=tokens.device)
    if last_pos is None:
        return torch.ones(tokens.shape, device=tokens.device)
    return (pos[None, :] <= last_pos.to(tokens.device)[:, None]).float()


def stack_at_last_pos(
    stack: Float[Tensor, "component batch pos d_model"], last_pos: Int[Tensor, " batch"] | None = None
) -> Float[Tensor, "component batch d_model"]:
    """stack[:, b, last_pos[b]] for each row b (the last position when last_pos is None)."""
    if last_pos is None:
        return stack[:, :, -1]
    return stack[:, torch.arange(stack.shape[1], device=stack.device), last_pos.to(stack.device)]


# --- logit lens -----------------------------------------------------------------------------------


def logit_lens_resid(cache: ActivationCache) -> tuple[Float[Tensor, "site batch pos d_model"], list[str]]:
    """The accumulated residual at every site, through the cache's own ln_final (module and all).

    Each site's residual is normalized with its *own* statistics (`recompute_ln=True`): the
    logit lens asks "what would the model say if the residual stopped here?".
    """
    require_additive_logits(cache.model, "logit lens")  # a soft cap after the unembedding is not applied here
    stack, labels = cache.accumulated_resid(layer=None, incl_mid=False, return_labels=True)
    return cache.apply_ln_to_stack(stack, layer=-1, recompute_ln=True), labels


def logit_lens_logprobs(cache: ActivationCache) -> tuple[Float[Tensor, "site batch pos d_vocab"], list[str]]:
    """log-softmax(unembed(ln_final(resid at site))) for every site (nats).

    At the last site this is the model's own final log-probs. Memory: sites x batch x pos x d_vocab.
    """
    normalized, labels = logit_lens_resid(cache)
    return cache.model.unembed(normalized).log_softmax(-1), labels


def logit_lens_logit_diff(
    cache: ActivationCache, tokens: SentimentTokens, last_pos: Int[Tensor, " batch"] | None = None
) -> tuple[Float[Tensor, "site batch"], list[str]]:
    """The logit difference (nats) the model would output if its residual stopped at each site.

    ln_final(resid) . sentiment_direction + b_U diff, with the cache's model's own ln_final and
    W_U. At the last site this equals `logit_diff` of the model's logits.
    """
    normalized, labels = logit_lens_resid(cache)
    last = stack_at_last_pos(normalized, last_pos)
    model = cache.model
    b_U = model.b_U
    bias = b_U[list(tokens.pos_ids)].mean() - b_U[list(tokens.neg_ids)].mean()
    return last @ sentiment_direction(model, tokens) + bias, labels


# --- decomposition --------------------------------------------------------------------------------


def decompose_final_resid(cache: ActivationCache) -> tuple[Float[Tensor, "component batch pos d_model"], list[str]]:
    """The final residual as embed, pos_embed, then each layer's attention and MLP output.

    The parts sum to `blocks.{n_layers-1}.hook_resid_post` exactly (biases ride in attn/mlp out).
    """
    return cache.decompose_resid(layer=None, mode="all", incl_embeds=True, return_labels=True)


def component_logit_diff(
    cache: ActivationCache, tokens: SentimentTokens, last_pos: Int[Tensor, " batch"] | None = None
) -> tuple[Float[Tensor, "component batch"], list[str]]:
    """Direct logit attribution of each residual component to the logit difference (nats).

    Each part of `decompose_final_resid` is scaled by the cache's final-norm scale (frozen, so the
    map is linear) and dotted with the model's `residual_sentiment_direction`; a last component
    "bias" holds `logit_diff_bias`. The components sum to the model's logit difference. The
    final-norm step centres the parts only under LayerNorm (TransformerLens' `apply_ln_to_stack`).
    """
    require_additive_logits(cache.model, "residual decomposition")
    stack, labels = decompose_final_resid(cache)
    scaled = cache.apply_ln_to_stack(stack, layer=-1)
    last = stack_at_last_pos(scaled, last_pos)
    model = cache.model
    attrs = last @ residual_sentiment_direction(model, tokens)
    bias = logit_diff_bias(model, tokens).expand(1, attrs.shape[1])
    return torch.cat([attrs, bias], dim=0), labels + ["bias"]


# --- how far the residual moved ------------------------------------------------------------------


@dataclass
class ResidualDrift:
    """Per-site comparison of the reference's and the tuned model's residuals on the same tokens.

    cosine: mean over real positions of cos(resid_ref, resid_tuned) (1 = same direction).
    diff_norm: mean over real positions of |resid_tuned - resid_ref| (residual-stream units).
    ref_norm: mean |resid_ref|, for scale.
    """

    labels: list[str]
    cosine: Float[Tensor, " site"]
    diff_norm: Float[Tensor, " site"]
    ref_norm: Float[Tensor, " site"]


def residual_drift(
    ref_cache: ActivationCache,
    tuned_cache: ActivationCache,
    tokens: Int[Tensor, "batch pos"],
    last_pos: Int[Tensor, " batch"] | None = None,
) -> ResidualDrift:
    """Cosine similarity and norm of the difference of the raw (un-normalized) residuals per site."""
    ref, labels = ref_cache.accumulated_resid(return_labels=True)
    tuned = tuned_cache.accumulated_resid()
    mask = real_position_mask(tokens, last_pos)

    def masked_mean(x: Tensor) -> Tensor:  # site batch pos -> site
        return (x * mask).sum((1, 2)) / mask.sum()

    cosine = torch.nn.functional.cosine_similarity(ref, tuned, dim=-1)
    return ResidualDrift(
        labels,
        masked_mean(cosine),
        masked_mean((tuned - ref).norm(dim=-1)),
        masked_mean(ref.norm(dim=-1)),
    )


# --- activation patching --------------------------------------------------------------------------


def site_hook_name(model: HookedTransformer, site: int) -> str:
    """The hook holding residual site `site` (0..n_layers) of `model`."""
    n = model.cfg.n_layers
    if not 0 <= site <= n:
        raise ValueError(f"site must be in 0..{n}; got {site}")
    return f"blocks.{site}.hook_resid_pre" if site < n else f"blocks.{n - 1}.hook_resid_post"


def patched_residual_logits(
    reference: HookedTransformer,
    tokens: Int[Tensor, "batch pos"],
    tuned_cache: ActivationCache,
    sites: list[int],
    position: int | None = None,
) -> Float[Tensor, "batch pos d_vocab"]:
    """The reference's logits with its residual at `sites` replaced by the tuned model's.

    `tuned_cache` must come from the tuned model on the same `tokens`. position=None patches
    every position; an int patches only that one.
    """
    def make_hook(name: str):
        def hook(resid: Tensor, hook) -> Tensor:
            if position is None:
                return tuned_cache[name].to(resid.device)
            resid = resid.clone()
            resid[:, position] = tuned_cache[name][:, position].to(resid.device)
            return resid
        return hook

    names = [site_hook_name(reference, s) for s in sites]
    return reference.run_with_hooks(tokens, fwd_hooks=[(name, make_hook(name)) for name in names])


@dataclass
class PatchingResult:
    """Effect of patching tuned -> reference at each site (or site x position).

    effect: mean logit difference of the patched reference minus that of the reference (nats).
    fraction: effect / (tuned - reference) logit difference: the share of the gap recovered
    (nan when the gap is below GAP_EPS).
    """

    labels: list[str]
    effect: Float[Tensor, " site *pos"]
    fraction: Float[Tensor, " site *pos"]
    ref_logit_diff: float
    tuned_logit_diff: float


@torch.no_grad()
def residual_patching(
    reference: HookedTransformer,
    tuned: HookedTransformer,
    tokens: Int[Tensor, "batch pos"],
    sentiment: SentimentTokens,
    last_pos: Int[Tensor, " batch"] | None = None,
    per_position: bool = False,
) -> PatchingResult:
    """Patch the tuned residual into the reference at each site (and each position), one at a time.

    The metric is the logit difference (nats) averaged over the batch, read with the
    *reference's* sentiment direction (the patched model is the reference from the site on).
    per_position=True gives a site x position grid; use it with one prompt (or equal lengths).
    """
    return residual_patching_metric(reference, tuned, tokens, lambda logits: logit_diff(logits, sentiment, last_pos).mean(),
                                    per_position)


@torch.no_grad()
def residual_patching_metric(
    reference: HookedTransformer,
    tuned: HookedTransformer,
    tokens: Int[Tensor, "batch pos"],
    metric: Callable[[Tensor], Tensor],
    per_position: bool = False,
) -> PatchingResult:
    """`residual_patching` for any `metric(logits)` -> one number (the logit difference, or a right
    answer's log-prob in `interp.answers`); the result's `*_logit_diff` fields hold the metric."""
    ref_m = float(metric(reference(tokens)))
    tuned_logits, tuned_cache = tuned.run_with_cache(tokens, names_filter=lambda n: "hook_resid" in n)
    tuned_m = float(metric(tuned_logits))
    n_sites = reference.cfg.n_layers + 1
    positions = list(range(tokens.shape[1])) if per_position else [None]
    effect = torch.zeros(n_sites, len(positions))
    for site in range(n_sites):
        for j, pos in enumerate(positions):
            logits = patched_residual_logits(reference, tokens, tuned_cache, [site], pos)
            effect[site, j] = float(metric(logits)) - ref_m
    if not per_position:
        effect = effect[:, 0]
    labels = [f"{i}_pre" for i in range(n_sites - 1)] + ["final_post"]
    fraction = recovered_fraction(effect + ref_m, ref_m, tuned_m)
    return PatchingResult(labels, effect, fraction, ref_m, tuned_m)


def hybrid_logits_fn(reference: HookedTransformer, tuned: HookedTransformer, site: int):
    """A model that runs the tuned model up to residual `site` and the reference from there on.

    At every position and every forward call, so it can be sampled from: patching site s of the
    reference with the tuned residual, generalised to sequences the tuned cache never saw.
    """
    def logits_fn(tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_vocab"]:
        resid = tuned(tokens, stop_at_layer=site)  # site 0: just the embeddings
        return reference(resid, start_at_layer=site, tokens=tokens)
    return logits_fn


@torch.no_grad()
def residual_patching_reward(
    reference: HookedTransformer,
    tuned: HookedTransformer,
    prompt: str,
    reward_fn: RewardFn,
    n_samples: int = 16,
    gen_len: int = 20,
    seed: int = 0,
) -> tuple[Float[Tensor, " site"], Float[Tensor, " site"], float, float]:
    """Mean reward of samples from each hybrid (tuned below site, reference above), and its fraction.

    Returns (reward per site, fraction of the reward gap per site, reference reward, tuned
    reward). Sampled with one seed for all models; coarser than the logit-difference patching.
    """
    ref_r = mean_reward(reference, reference, prompt, reward_fn, n_samples, gen_len, seed)
    tuned_r = mean_reward(tuned, reference, prompt, reward_fn, n_samples, gen_len, seed)
    rewards = torch.tensor([
        mean_reward(hybrid_logits_fn(reference, tuned, s), reference, prompt, reward_fn, n_samples, gen_len, seed)
        for s in range(reference.cfg.n_layers + 1)
    ])
    return rewards, recovered_fraction(rewards, ref_r, tuned_r), ref_r, tuned_r
