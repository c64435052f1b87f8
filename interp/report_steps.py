"""The interp report's steps (`interp.report_page.make_report` runs them in order): each takes the one
`Context` — both models, the prompts' tokens, their logits and caches — runs interp's analyses on it
(`interp.logits`, `residual`, `attention`, `neurons`), adds its figures and returns its sections of
the summary. `ANALYSES` is the order; a later step may read an earlier one's section. Reads no files.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import ActivationCache, HookedTransformer

from interp import attention, families, logits, neurons, residual
from interp.figures import bars, heatmaps, lines, position_heatmap

# --- what the analyses share ----------------------------------------------------------------------


@dataclass
class Context:
    """Everything an analysis reads, and the figures it adds.

    Each analysis returns its sections of the summary (tensors allowed: rounded when written);
    `make_report` merges them into `summary`, where a later analysis may read an earlier one's
    (the attention and reward steps read the head DLA, patching and ablation sections).
    """

    reference: HookedTransformer
    tuned: HookedTransformer
    prompts: list[str]  # the run prompt first
    tokens: Int[Tensor, "batch pos"]  # the prompts, right-padded
    last: Int[Tensor, " batch"]  # index of each prompt's last real token
    sentiment: logits.SentimentTokens
    ref_logits: Float[Tensor, "batch pos d_vocab"]
    tuned_logits: Float[Tensor, "batch pos d_vocab"]
    ref_cache: ActivationCache
    tuned_cache: ActivationCache
    out_dir: Path  # where the figures go
    reward_fn: Callable | None = None  # None: the sampled reward analyses are skipped
    n_samples: int = 16  # samples per reward estimate
    gen_len: int = 20  # tokens per sample
    k_heads: int = 4  # heads (and neurons) listed per ranking
    seed: int = 0  # one sampling seed for every model
    summary: dict = field(default_factory=dict)  # the sections so far, under summary.json's keys
    figures: list[tuple[str, Path, str]] = field(default_factory=list)  # (title, path, caption), page order
    attention_html: Path | None = None  # circuitsvis' interactive view, when it could be written

    @property
    def run_prompt(self) -> str:
        return self.prompts[0]

    @property
    def run_tokens(self) -> Int[Tensor, "1 pos"]:
        """The run prompt alone, unpadded."""
        return self.tokens[:1, : int(self.last[0]) + 1]

    @cached_property
    def head_means(self) -> Float[Tensor, "n_layers n_heads d_head"]:
        """The tuned model's mean z per head: what mean-ablation puts in (the ablation and reward steps)."""
        return attention.head_means(self.tuned, self.tokens, self.last)

    def add_figure(self, title: str, path: Path, caption: str) -> None:
        self.figures.append((title, path, caption))


def _head_list(scores: Tensor, k: int) -> list[dict]:
    """The top-k heads by |score| as {"head": "L1H2", "value": ...}; heads scoring exactly 0 are left out."""
    return [{"head": f"L{l}H{h}", "value": float(scores[l, h])} for l, h in attention.top_heads(scores, k)
            if float(scores[l, h]) != 0.0]


# --- the analyses, in report order ----------------------------------------------------------------


def analyse_logits(ctx: Context) -> dict:
    """Logit difference, next-token KL, the sentiment direction's cosine, the most moved tokens."""
    st, last = ctx.sentiment, ctx.last
    ref_ld = logits.logit_diff(ctx.ref_logits, st, last)
    tuned_ld = logits.logit_diff(ctx.tuned_logits, st, last)
    kl = logits.next_token_kl(ctx.ref_logits, ctx.tuned_logits)
    mask = residual.real_position_mask(ctx.tokens, last)
    change = logits.logprob_change(ctx.ref_logits, ctx.tuned_logits, last)
    promoted, demoted = logits.top_token_changes(ctx.reference, change, 10)
    return {
        "logit_diff": {"reference": ref_ld.mean().item(), "tuned": tuned_ld.mean().item(),
                       "per_prompt_reference": ref_ld, "per_prompt_tuned": tuned_ld},
        "kl_next_token": {"mean_all_positions": ((kl * mask).sum() / mask.sum()).item(),
                          "mean_last_position": logits.at_last_pos(kl, last).mean().item()},
        "sentiment_direction_cosine": logits.direction_cosine(ctx.reference, ctx.tuned, st),
        "top_promoted": promoted,
        "top_demoted": demoted,
    }


def analyse_logit_lens(ctx: Context) -> dict:
    """The logit difference read off the accumulated residual at every site."""
    lens_ref, sites = residual.logit_lens_logit_diff(ctx.ref_cache, ctx.sentiment, ctx.last)
    lens_tuned, _ = residual.logit_lens_logit_diff(ctx.tuned_cache, ctx.sentiment, ctx.last)
    series = {"reference": lens_ref.mean(1).tolist(), "tuned": lens_tuned.mean(1).tolist()}
    ctx.add_figure(
        "Logit lens",
        lines(sites, series, ctx.out_dir, "logit_lens.png",
              "logit lens: the logit difference if the residual stopped here", "logit diff (nats)"),
        "Each model's accumulated residual at each site through its own ln_final and unembedding, "
        "on its own sentiment direction; mean over prompts, last token.")
    return {"logit_lens": {"sites": sites, "reference": lens_ref.mean(1), "tuned": lens_tuned.mean(1)}}


def analyse_decomposition(ctx: Context) -> dict:
    """Direct logit attribution of the embeddings, each attention layer and each MLP."""
    comp_ref, comp_labels = residual.component_logit_diff(ctx.ref_cache, ctx.sentiment, ctx.last)
    comp_tuned, _ = residual.component_logit_diff(ctx.tuned_cache, ctx.sentiment, ctx.last)
    series = {"reference": comp_ref.mean(1).tolist(), "tuned": comp_tuned.mean(1).tolist(),
              "tuned - reference": (comp_tuned - comp_ref).mean(1).tolist()}
    ctx.add_figure(
        "Residual decomposition",
        bars(comp_labels, series, ctx.out_dir, "decomposition.png",
             "direct logit attribution of each component", "logit diff (nats)"),
        "The final residual split into embeddings, each attention layer and each MLP, plus the "
        "unembedding bias; a model's bars sum to its logit difference.")
    return {"decomposition": {"components": comp_labels, "reference": comp_ref.mean(1), "tuned": comp_tuned.mean(1)}}


def analyse_residual_drift(ctx: Context) -> dict:
    """How far the tuned residual moved from the reference's, per site."""
    drift = residual.residual_drift(ctx.ref_cache, ctx.tuned_cache, ctx.tokens, ctx.last)
    series = {"|tuned - ref| / |ref|": (drift.diff_norm / drift.ref_norm).tolist(),
              "1 - cosine": (1 - drift.cosine).tolist()}
    ctx.add_figure(
        "Residual drift",
        lines(drift.labels, series, ctx.out_dir, "residual_drift.png",
              "how far the tuned residual moved from the reference", "fraction"),
        "Per site, mean over prompts and positions.")
    return {"residual_drift": {"sites": drift.labels, "cosine": drift.cosine, "diff_norm": drift.diff_norm,
                               "ref_norm": drift.ref_norm}}


def analyse_residual_patching(ctx: Context) -> dict:
    """The tuned residual patched into the reference at one site (then one site and position)."""
    patch = residual.residual_patching(ctx.reference, ctx.tuned, ctx.tokens, ctx.sentiment, ctx.last)
    patch_pos = residual.residual_patching(ctx.reference, ctx.tuned, ctx.run_tokens, ctx.sentiment, per_position=True)
    jumps = patch.fraction[1:] - patch.fraction[:-1]  # what block l adds: site l+1 minus site l
    ctx.add_figure(
        "Residual patching",
        bars(patch.labels, {"logit diff": patch.fraction.nan_to_num().tolist()}, ctx.out_dir,
             "patching_layers.png", "tuned residual patched into the reference at one site (all positions)",
             "fraction of gap recovered"),
        "0 = none of the tuned - reference logit-diff gap, 1 = all of it. At the final site the "
        "reference's unembedding reads the tuned residual: what is missing there is the unembedding's share.")
    str_tokens = ctx.reference.to_str_tokens(ctx.run_tokens[0])
    ctx.add_figure(
        "Residual patching by position",
        position_heatmap(patch_pos.fraction, patch_pos.labels, str_tokens, ctx.out_dir, "patching_positions.png"),
        f"Run prompt {ctx.run_prompt!r}, one (site, position) at a time.")
    return {"residual_patching": {"sites": patch.labels, "fraction": patch.fraction, "effect": patch.effect,
                                  "block_contribution": jumps}}


def analyse_head_dla(ctx: Context) -> dict:
    """Each head's direct logit attribution in both models, and the heads whose DLA changed most."""
    dla_ref = attention.head_dla(ctx.ref_cache, ctx.sentiment, ctx.last)
    dla_tuned = attention.head_dla(ctx.tuned_cache, ctx.sentiment, ctx.last)
    dla_diff = dla_tuned - dla_ref
    panels = [("reference", dla_ref), ("tuned", dla_tuned), ("tuned - reference", dla_diff)]
    ctx.add_figure(
        "Per-head direct logit attribution",
        heatmaps(panels, ctx.out_dir, "head_dla.png", "nats", own_scale=(2,)),
        "Each head's output at the last token, through its model's own final-norm scale, on its own "
        "sentiment direction. The difference panel has its own colour scale. Heads whose weights did not "
        "change still differ a little when the final-norm scale changed.")
    return {"head_dla": {"reference": dla_ref, "tuned": dla_tuned, "top_diff": _head_list(dla_diff, ctx.k_heads)}}


def analyse_weight_change(ctx: Context) -> dict:
    """How much each head's weights moved, relative to the reference's."""
    change = attention.head_weight_change(ctx.reference, ctx.tuned, relative=True)
    group = families.gqa_group(ctx.reference)
    shared = (f" Grouped-query attention: {group} query heads share one K/V head, so W_K and W_V show, for each "
              "query head, the change of the K/V head it reads (equal across a group).") if group > 1 else ""
    ctx.add_figure(
        "Per-head weight change",
        heatmaps(list(change.items()), ctx.out_dir, "head_weight_change.png", "|ΔW| / |W_ref|", diverging=False),
        "Frobenius norm of each head's weight change, relative to the reference's." + shared)
    return {"head_weight_change_relative": {k: _head_list(v, ctx.k_heads) for k, v in change.items()}}


def analyse_head_ablation(ctx: Context) -> dict:
    """Mean-ablation of one head at a time in the tuned model."""
    ablation = attention.head_ablation_effects(ctx.tuned, ctx.tokens, ctx.sentiment, ctx.head_means, ctx.last)
    ctx.add_figure(
        "Mean-ablation in the tuned model",
        heatmaps([("Δ logit diff when ablated", ablation)], ctx.out_dir, "head_ablation.png", "nats"),
        "Each head's z replaced by its mean over the prompts, one head at a time.")
    return {"head_ablation": {"effect": ablation, "top": _head_list(ablation, ctx.k_heads)}}


def analyse_head_patching(ctx: Context) -> dict:
    """One head's output of the tuned model patched into the reference, one head at a time."""
    effect, fraction = attention.head_patching(ctx.reference, ctx.tuned, ctx.tokens, ctx.sentiment, ctx.last)
    ctx.add_figure(
        "Head-output patching",
        heatmaps([("fraction of gap recovered", fraction.nan_to_num())], ctx.out_dir, "head_patching.png",
                 "fraction"),
        "One head's output (z·W_O) of the tuned model put into the reference, one head at a time.")
    return {"head_patching": {"fraction": fraction, "top": _head_list(effect, ctx.k_heads)}}


def analyse_neurons(ctx: Context) -> dict:
    """DLA per MLP neuron, the activation change, and where the most changed neuron fires."""
    n_ref = neurons.neuron_dla(ctx.ref_cache, ctx.sentiment, ctx.last)
    n_tuned = neurons.neuron_dla(ctx.tuned_cache, ctx.sentiment, ctx.last)
    n_diff = n_tuned - n_ref
    act_change = neurons.neuron_activation_change(ctx.ref_cache, ctx.tuned_cache, ctx.tokens, ctx.last)
    top_n = neurons.top_neurons(n_diff, ctx.k_heads)
    section = {
        "top_dla_change": [{"neuron": f"L{l}N{n}", "reference": float(n_ref[l, n]), "tuned": float(n_tuned[l, n]),
                            "change": float(n_diff[l, n]), "activation_change": float(act_change[l, n])}
                           for l, n in top_n],
        "top_activation_change": [{"neuron": f"L{l}N{n}", "value": float(act_change[l, n])}
                                  for l, n in neurons.top_neurons(act_change, ctx.k_heads)],
        "dla_change_by_layer": n_diff.abs().sum(-1),
    }
    if top_n:
        section["top_neuron_tokens"] = [
            {"activation": a, "token": t, "context": c}
            for a, t, c in neurons.top_activating_tokens(ctx.tuned, ctx.tokens, top_n[0], ctx.last, k=5)]
    ctx.add_figure(
        "Neurons: direct logit attribution",
        bars([f"L{l}N{n}" for l, n in top_n], {"reference": [float(n_ref[l, n]) for l, n in top_n],
                                               "tuned": [float(n_tuned[l, n]) for l, n in top_n]},
             ctx.out_dir, "neuron_dla.png", f"the {len(top_n)} MLP neurons whose DLA changed most", "nats"),
        f"Each neuron's activation ({families.mlp_activation(ctx.reference)}) times its W_out row, through its "
        "model's own final-norm scale, on its own sentiment direction (the neurons of a layer plus b_out add up "
        "to the layer's MLP DLA).")
    return {"neurons": section}


def analyse_attention_patterns(ctx: Context) -> dict:
    """The attention patterns of the heads whose DLA changed most, on one of the tuned model's samples."""
    dla = ctx.summary["head_dla"]
    heads = attention.top_heads(dla["tuned"] - dla["reference"], min(ctx.k_heads, 4))
    sample = logits.sample_continuations(ctx.tuned, ctx.run_tokens, 1, ctx.gen_len, ctx.seed)
    _, sample_cache = ctx.tuned.run_with_cache(sample)
    sample_str = ctx.tuned.to_str_tokens(sample[0])
    ctx.add_figure(
        "Attention patterns",
        attention.plot_attention_patterns(sample_cache, heads, sample_str, ctx.out_dir / "attention_patterns.png",
                                          title="tuned model, heads with the largest DLA change"),
        "The tuned model on one of its own samples from the run prompt.")
    ctx.attention_html = attention.attention_patterns_html(sample_cache, heads[0][0], sample_str,
                                                           ctx.out_dir / "attention_patterns.html")
    return {"attention_heads_shown": [f"L{layer}H{head}" for layer, head in heads]}


def analyse_reward(ctx: Context) -> dict:
    """Sampled reward (coarser than the logit difference): residual patching and head ablation."""
    if ctx.reward_fn is None:
        return {}
    n, gen_len, patch = ctx.n_samples, ctx.gen_len, ctx.summary["residual_patching"]
    rewards, fraction, ref_r, tuned_r = residual.residual_patching_reward(
        ctx.reference, ctx.tuned, ctx.run_prompt, ctx.reward_fn, n, gen_len, ctx.seed)
    abl_heads = attention.top_heads(ctx.summary["head_ablation"]["effect"], ctx.k_heads)
    abl_rewards, clean = attention.head_ablation_reward(
        ctx.tuned, abl_heads, ctx.head_means, ctx.run_prompt, ctx.reward_fn, n, gen_len, ctx.seed)
    series = {"reward": fraction.nan_to_num().tolist(), "logit diff": patch["fraction"].nan_to_num().tolist()}
    ctx.add_figure(
        "Residual patching, reward",
        bars(patch["sites"], series, ctx.out_dir, "patching_reward.png",
             "fraction of the gap recovered: reward vs logit diff", "fraction"),
        f"Mean reward of {n} samples of {gen_len} tokens from the hybrid (tuned below the site, "
        "reference above). One seed for every model, but still noisy: coarser than the logit difference.")
    return {"reward": {
        "reference": ref_r, "tuned": tuned_r, "n_samples": n, "gen_len": gen_len,
        "patching_sites": patch["sites"], "patching_fraction": fraction,
        "ablation": [{"head": f"L{layer}H{head}", "reward": r, "change": r - clean}
                     for (layer, head), r in zip(abl_heads, abl_rewards)],
    }}


ANALYSES: tuple[Callable[[Context], dict], ...] = (
    analyse_logits, analyse_logit_lens, analyse_decomposition, analyse_residual_drift, analyse_residual_patching,
    analyse_head_dla, analyse_weight_change, analyse_head_ablation, analyse_head_patching, analyse_neurons,
    analyse_attention_patterns, analyse_reward,
)
"""The report's steps in order (a later one may read an earlier one's summary section)."""


def step_name(analysis: Callable) -> str:
    """What the progress bar calls a step: `analyse_logit_lens` -> "logit lens"."""
    return analysis.__name__.removeprefix("analyse_").replace("_", " ")


def run_steps(analyses: tuple[Callable, ...], ctx, progress: bool = True):
    """Each of `analyses` in order on `ctx` (a `Context`, or `interp.answer_steps.AnswerContext`), its sections
    merged into `ctx.summary`, under a progress bar naming each step; returns the bar, at the page's "write"
    step (one count left: the caller updates and closes it when the page is written)."""
    from tqdm.auto import tqdm

    bar = tqdm(total=len(analyses) + 1, desc="interp report", disable=not progress, file=sys.stderr)
    for analysis in analyses:
        bar.set_postfix_str(step_name(analysis))
        ctx.summary.update(analysis(ctx))
        bar.update()
    bar.set_postfix_str("write")
    return bar

