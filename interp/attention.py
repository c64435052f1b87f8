"""What RLHF changed in the attention heads: DLA, weight change, patterns, ablation, patching.

Heads are indexed (layer, head); every per-head result is a layer x head tensor. A head's output
is its `result` = z @ W_O (hook_z times the head's slice of W_O, no b_O), as
`ActivationCache.stack_head_results` computes it. Units:

- direct logit attribution (DLA) and ablation / patching effects: nats of logit difference
  (the logit difference is defined in `interp.logits`);
- weight-change norms: Frobenius norm of W_tuned - W_ref in weight units (or relative to |W_ref|).

Each model's DLA uses its own cache (final-norm scale) and its own sentiment direction.

Grouped-query attention (Llama, Qwen2, Gemma; `interp.families`): hook_z and W_O are per query
head, so DLA, ablation and patching are per query head and exact. W_K and W_V belong to a K/V head
that a group of query heads shares; the weight change shows, for each query head, the change of
the K/V head it reads, so W_K and W_V panels repeat across a group.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable
from pathlib import Path

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import ActivationCache, HookedTransformer

from interp.families import require_additive_blocks
from interp.logits import RewardFn, SentimentTokens, logit_diff, mean_reward, residual_sentiment_direction
from interp.residual import real_position_mask, recovered_fraction, stack_at_last_pos
from rlhf_scratch.pages.html import new_figure, save_figure

Head = tuple[int, int]


class _DropAlreadyCached(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Tried to compute head results when they were already cached" not in record.getMessage()


@contextlib.contextmanager
def _quiet_recompute():
    # ActivationCache.stack_head_results reuses results it already computed but logs a warning
    # on the root logger each time; silence only that message, only here.
    drop = _DropAlreadyCached()
    logging.getLogger().addFilter(drop)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(drop)


def head_results(cache: ActivationCache) -> Float[Tensor, "layer_head batch pos d_model"]:
    """Every head's output z @ W_O, stacked layer-major (index layer * n_heads + head)."""
    with _quiet_recompute():
        return cache.stack_head_results(layer=-1)


# --- direct logit attribution ---------------------------------------------------------------------


def head_dla(
    cache: ActivationCache, tokens: SentimentTokens, last_pos: Int[Tensor, " batch"] | None = None
) -> Float[Tensor, "n_layers n_heads"]:
    """Each head's direct contribution to the logit difference at the last token (nats, batch mean).

    result_{l,h} scaled by the cache's final-norm scale, dotted with the cache model's
    `residual_sentiment_direction`. With the other components (embeddings, MLPs, b_O, and the
    ln_final/unembedding bias) it sums to the logit difference.
    """
    model = cache.model
    require_additive_blocks(model, "per-head DLA")
    stack = head_results(cache)
    scaled = stack_at_last_pos(cache.apply_ln_to_stack(stack, layer=-1), last_pos)
    attrs = (scaled @ residual_sentiment_direction(model, tokens)).mean(-1)
    return attrs.reshape(model.cfg.n_layers, model.cfg.n_heads)


def head_dla_diff(
    ref_cache: ActivationCache,
    tuned_cache: ActivationCache,
    tokens: SentimentTokens,
    last_pos: Int[Tensor, " batch"] | None = None,
) -> Float[Tensor, "n_layers n_heads"]:
    """head_dla(tuned) - head_dla(reference): which heads push sentiment harder after RLHF (nats).

    An unchanged head can still show a (small) difference: its input may have changed upstream, and
    each model's output is read through that model's own final-norm scale.
    """
    return head_dla(tuned_cache, tokens, last_pos) - head_dla(ref_cache, tokens, last_pos)


# --- weights --------------------------------------------------------------------------------------


@torch.no_grad()
def head_weight_change(
    reference: HookedTransformer, tuned: HookedTransformer, relative: bool = False
) -> dict[str, Float[Tensor, "n_layers n_heads"]]:
    """|W_tuned - W_ref| (Frobenius, per head) for W_Q, W_K, W_V, W_O and "all" (their root-sum-square).

    relative=True divides each by |W_ref| of the same head (a dimensionless fraction).
    Per query head. Under grouped-query attention W_K and W_V are TransformerLens' repeated view:
    query head h shows the change of the K/V head it reads (h // group), so a group's heads share
    one value, and "all" is the change of every weight that head's output depends on.
    """
    out = {}
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        ref_w, tuned_w = getattr(reference, name), getattr(tuned, name)  # layer head a b
        change = (tuned_w - ref_w).norm(dim=(-2, -1))
        out[name] = change / ref_w.norm(dim=(-2, -1)).clamp_min(1e-12) if relative else change
    out["all"] = torch.stack([out[n] ** 2 for n in ("W_Q", "W_K", "W_V", "W_O")]).sum(0).sqrt()
    return out


def top_heads(scores: Float[Tensor, "n_layers n_heads"], k: int = 5, absolute: bool = True) -> list[Head]:
    """The k (layer, head) pairs with the largest |score| (or score when absolute=False)."""
    flat = (scores.abs() if absolute else scores).flatten().nan_to_num(nan=-math.inf)
    idx = flat.topk(min(k, flat.numel())).indices.tolist()
    n_heads = scores.shape[1]
    return [(i // n_heads, i % n_heads) for i in idx]


# --- attention patterns ---------------------------------------------------------------------------


def plot_attention_patterns(
    cache: ActivationCache,
    heads: list[Head],
    str_tokens: list[str],
    path: str | Path,
    batch_index: int = 0,
    title: str = "",
) -> Path:
    """Save a PNG of the attention patterns (query rows x key columns) of `heads` on one prompt."""
    n = len(str_tokens)
    fig, axes = new_figure(1, len(heads), figsize=(3.2 * len(heads) + 1, 3.4), squeeze=False)
    for ax, (layer, head) in zip(axes[0], heads):
        pattern = cache["pattern", layer][batch_index, head, :n, :n].detach().cpu().numpy()
        ax.imshow(pattern, cmap="Blues", vmin=0, vmax=1)
        ax.set_title(f"L{layer}H{head}", fontsize=9)
        ax.set_xticks(range(n), [repr(t)[1:-1] for t in str_tokens], rotation=90, fontsize=6)
        ax.set_yticks(range(n), [repr(t)[1:-1] for t in str_tokens], fontsize=6)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, Path(path))


def attention_patterns_html(cache: ActivationCache, layer: int, str_tokens: list[str], path: str | Path) -> Path | None:
    """Write circuitsvis's interactive view of one layer's heads; None if circuitsvis is missing."""
    try:
        import circuitsvis as cv
    except ImportError:
        return None
    n = len(str_tokens)
    html = cv.attention.attention_patterns(tokens=str_tokens, attention=cache["pattern", layer][0, :, :n, :n])
    path = Path(path)
    path.write_text(str(html))
    return path


# --- mean ablation --------------------------------------------------------------------------------


@torch.no_grad()
def head_means(
    model: HookedTransformer, tokens: Int[Tensor, "batch pos"], last_pos: Int[Tensor, " batch"] | None = None
) -> Float[Tensor, "n_layers n_heads d_head"]:
    """Each head's z (hook_z) averaged over the batch and its real (non-padding) positions."""
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_z"))
    mask = real_position_mask(tokens, last_pos)[:, :, None, None]
    z = torch.stack([cache["z", layer] for layer in range(model.cfg.n_layers)])  # layer batch pos head d_head
    return (z * mask).sum((1, 2)) / mask.sum()


def mean_ablation_hooks(heads: list[Head], means: Float[Tensor, "n_layers n_heads d_head"]) -> list:
    """fwd_hooks that replace each head's z by its mean (at every position, any sequence length)."""
    def make_hook(head: int, mean: Tensor):
        def hook(z: Tensor, hook) -> Tensor:
            z = z.clone()
            z[:, :, head] = mean.to(z.device)
            return z
        return hook
    return [(f"blocks.{layer}.attn.hook_z", make_hook(head, means[layer, head])) for layer, head in heads]


@torch.no_grad()
def head_ablation_effects(
    model: HookedTransformer,
    tokens: Int[Tensor, "batch pos"],
    sentiment: SentimentTokens,
    means: Float[Tensor, "n_layers n_heads d_head"],
    last_pos: Int[Tensor, " batch"] | None = None,
) -> Float[Tensor, "n_layers n_heads"]:
    """Logit difference with each head mean-ablated minus without (nats, batch mean), one head at a time.

    Negative = the head was pushing towards the positive words. Run it on the tuned model.
    """
    return head_ablation_metric(model, tokens, means, lambda logits: logit_diff(logits, sentiment, last_pos).mean())


@torch.no_grad()
def head_ablation_metric(
    model: HookedTransformer,
    tokens: Int[Tensor, "batch pos"],
    means: Float[Tensor, "n_layers n_heads d_head"],
    metric: Callable[[Tensor], Tensor],
) -> Float[Tensor, "n_layers n_heads"]:
    """metric(logits) with each head mean-ablated minus without, one head at a time (`metric` maps the
    logits to one number: the logit difference, or a right answer's log-prob in `interp.answers`)."""
    clean = float(metric(model(tokens)))
    effects = torch.zeros(model.cfg.n_layers, model.cfg.n_heads)
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            logits = model.run_with_hooks(tokens, fwd_hooks=mean_ablation_hooks([(layer, head)], means))
            effects[layer, head] = float(metric(logits)) - clean
    return effects


@torch.no_grad()
def head_ablation_reward(
    model: HookedTransformer,
    heads: list[Head],
    means: Float[Tensor, "n_layers n_heads d_head"],
    prompt: str,
    reward_fn: RewardFn,
    n_samples: int = 16,
    gen_len: int = 20,
    seed: int = 0,
) -> tuple[list[float], float]:
    """Mean reward of samples with each of `heads` mean-ablated (one at a time), and without.

    Returns (reward per head, in the order of `heads`; clean reward). Sampled with one seed for
    all; coarser than `head_ablation_effects`.
    """
    clean = mean_reward(model, model, prompt, reward_fn, n_samples, gen_len, seed)
    rewards = []
    for head in heads:
        with model.hooks(fwd_hooks=mean_ablation_hooks([head], means)):
            rewards.append(mean_reward(model, model, prompt, reward_fn, n_samples, gen_len, seed))
    return rewards, clean


# --- head-output patching -------------------------------------------------------------------------


@torch.no_grad()
def head_patching(
    reference: HookedTransformer,
    tuned: HookedTransformer,
    tokens: Int[Tensor, "batch pos"],
    sentiment: SentimentTokens,
    last_pos: Int[Tensor, " batch"] | None = None,
) -> tuple[Float[Tensor, "n_layers n_heads"], Float[Tensor, "n_layers n_heads"]]:
    """Swap one head's output (z @ W_O) in the reference for the tuned model's, one head at a time.

    The swap adds result_tuned - result_ref of that head to the reference's hook_attn_out of its
    layer, so changes to the head's W_O count as well as changes to its z. Returns (effect on the
    reference's logit difference in nats, fraction of the tuned - reference gap recovered; nan
    when the gap is ~0).
    """
    return head_patching_metric(reference, tuned, tokens, lambda logits: logit_diff(logits, sentiment, last_pos).mean())


@torch.no_grad()
def head_patching_metric(
    reference: HookedTransformer,
    tuned: HookedTransformer,
    tokens: Int[Tensor, "batch pos"],
    metric: Callable[[Tensor], Tensor],
) -> tuple[Float[Tensor, "n_layers n_heads"], Float[Tensor, "n_layers n_heads"]]:
    """`head_patching` for any `metric(logits)` -> one number: (its change in the reference, the
    fraction of the tuned - reference gap of it recovered; nan when the gap is ~0)."""
    require_additive_blocks(reference, "head-output patching")  # the swap adds to hook_attn_out
    ref_logits, ref_cache = reference.run_with_cache(tokens)
    tuned_logits, tuned_cache = tuned.run_with_cache(tokens)
    ref_m, tuned_m = float(metric(ref_logits)), float(metric(tuned_logits))
    n_layers, n_heads = reference.cfg.n_layers, reference.cfg.n_heads
    delta = head_results(tuned_cache) - head_results(ref_cache)
    delta = delta.reshape(n_layers, n_heads, *delta.shape[1:])  # layer head batch pos d_model

    effects = torch.zeros(n_layers, n_heads)
    for layer in range(n_layers):
        for head in range(n_heads):
            def add_delta(attn_out: Tensor, hook, d=delta[layer, head]) -> Tensor:
                return attn_out + d.to(attn_out.device)
            logits = reference.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{layer}.hook_attn_out", add_delta)])
            effects[layer, head] = float(metric(logits)) - ref_m
    return effects, recovered_fraction(effects + ref_m, ref_m, tuned_m)
