"""The features page: diff, explain, steer and ablate through one SAE, and write features.html.

`make_features_report(reference, tuned, sae, quality, prompts, out_dir, reward_fn=...)` runs
`interp.feature_diff` and `interp.causal` on any pair of HookedTransformers and an SAE, the other
levels of the diff (`interp.levels`: weights, the Activation Difference Lens, optionally a
crosscoder), and writes

    out_dir/features.html             self-contained (figures embedded), linked from the report
    out_dir/features/*.png            the same figures as files
    out_dir/features/features.json    the numbers, machine-readable; at the top `dead_fraction` (the
                                      SAE's, on the reference) and `explained_change` (the share of the
                                      residual change all its features explain)

`python -m interp.features RUN_DIR` (interp.features) loads a run, the SAE and the review snippets
and calls it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from transformer_lens import HookedTransformer

from interp.causal import causal_checks
from interp.feature_diff import (
    EXPLAINED_KS,
    FeatureDiff,
    diff_tokens,
    explained_fraction,
    feature_diff,
    final_ln_scale,
    promoted_tokens,
    top_activating_snippets,
)
from interp.figures import bars
from interp.levels import DiffLevels, levels_headline, levels_html, other_levels
from interp.logits import RewardFn
from interp.sampling import SampleSettings
from rlhf_scratch.pages.html import (
    Html,
    esc,
    figures_html,
    findings_html,
    generated_in,
    new_figure,
    page,
    rounded,
    save_figure,
    table,
)

OUT_NAME = "features"  # out_dir/features.html and out_dir/features/
STEPS = ("diff", "explained", "snippets", "levels", "causal", "write")


@torch.no_grad()
def make_features_report(reference: HookedTransformer, tuned: HookedTransformer, sae, quality: dict,
                         prompts: list[str], out_dir: str | Path, reward_fn: RewardFn | None = None,
                         samples: SampleSettings | None = None, n_diff: int = 64, top_n: int = 10,
                         snippet_texts: Sequence[str] = (), title: str = "What did RLHF change? Features",
                         progress: bool = True, extra: dict | None = None, levels: DiffLevels | None = None,
                         quality_tuned: dict | None = None) -> dict:
    """Diff, explain, steer and ablate, and write `out_dir/features.html` (+ `out_dir/features/`).

    `n_diff` completions are sampled from each model on `prompts`; both models then read all of
    them. Each top feature's examples are its top-activating `snippet_texts` (none when empty).
    reward_fn=None skips the causal checks. `levels` adds the weight diff, the Activation Difference
    Lens and the crosscoder (the weight diff always runs); `quality_tuned` is the SAE's quality on the
    tuned model's activations, shown beside the reference's. Returns the summary (also features.json)."""
    from tqdm.auto import tqdm

    out_dir = Path(out_dir)
    fig_dir = out_dir / OUT_NAME
    fig_dir.mkdir(parents=True, exist_ok=True)
    s = samples or SampleSettings()
    hook_name = sae.cfg.metadata.hook_name
    t0 = time.time()
    bar = tqdm(STEPS, desc="interp features", disable=not progress, file=sys.stderr)
    step = iter(bar)
    S: dict = {"site": hook_name, "dead_fraction": quality.get("dead_fraction"), "sae": quality,
               "prompts": prompts[:5], **(extra or {})}
    if quality_tuned is not None:
        S["sae_on_tuned"] = quality_tuned

    # diff on the same sequences: completions from each model, read by both
    bar.set_postfix_str(next(step))
    tokens, attend = diff_tokens([reference, tuned], prompts, s.for_diff(n_diff))
    diff = feature_diff(reference, tuned, sae, hook_name, tokens, attend)
    top = [int(f) for f in diff.ranked[:top_n]]
    scale = final_ln_scale(tuned, tokens, attend)
    W_dec = sae.W_dec.detach()
    S["diff"] = {"n_sequences": tokens.shape[0], "n_positions": diff.resid_change.shape[0],
                 "tuned_final_ln_scale": scale,
                 "alive_ref": int((diff.freq_ref > 0).sum()), "alive_tuned": int((diff.freq_tuned > 0).sum()),
                 "mean_abs_change": diff.change.abs().mean().item(),
                 "resid_change_norm": diff.resid_change.norm(dim=-1).mean().item()}

    bar.set_postfix_str(next(step))
    S["explained"] = explained_fraction(diff, W_dec)
    S["explained_change"] = S["explained"]["all_features"]

    bar.set_postfix_str(next(step))
    snippets = top_activating_snippets(reference, sae, hook_name, list(snippet_texts), top) if snippet_texts else {}
    S["top_features"] = [
        {"feature": f, "change": float(diff.change[f]), "mean_ref": float(diff.mean_ref[f]),
         "mean_tuned": float(diff.mean_tuned[f]), "freq_ref": float(diff.freq_ref[f]),
         "freq_tuned": float(diff.freq_tuned[f]), "decoder_norm": float(W_dec[f].norm()),
         "promotes": promoted_tokens(tuned, W_dec[f], scale), "snippets": snippets.get(f, [])}
        for f in top]

    bar.set_postfix_str(next(step))
    S.update(other_levels(reference, tuned, sae, hook_name, tokens, attend, levels or DiffLevels(),
                          snippet_texts, top_n, progress, sae_alive=(diff.freq_ref > 0) | (diff.freq_tuned > 0)))

    bar.set_postfix_str(next(step))
    if reward_fn is not None:
        S["causal"] = causal_checks(reference, tuned, sae, hook_name, diff, prompts, reward_fn, s, top_n)

    bar.set_postfix_str(next(step))
    figures = _figures(S, diff, top, fig_dir)
    S["headline"] = _headline(S)
    S["seconds"] = time.time() - t0
    summary = rounded(S)
    (fig_dir / "features.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out_dir / "features.html").write_text(_html(title, summary, figures))
    bar.close()
    return summary


def _figures(S: dict, diff: FeatureDiff, top: list[int], fig_dir: Path) -> list[tuple[str, Path, str]]:
    """The page's figures, as (title, path, caption)."""
    figures = []
    labels = [f"F{f}" for f in top]
    figures.append(("Top changed features", bars(
        labels, {"reference": [t["mean_ref"] for t in S["top_features"]],
                 "tuned": [t["mean_tuned"] for t in S["top_features"]]},
        fig_dir, "features_top_changed.png", f"the {len(top)} features whose mean activation changed most",
        "mean activation"), "Mean SAE activation over the real positions of the same sequences, per model."))
    figures.append(("Firing frequency", _frequency_scatter(diff, top, fig_dir / "features_frequency.png"),
                    "Each point a feature: how often it fires in the reference vs the tuned model "
                    "(log scale; features that never fire in a model sit on its axis floor)."))
    ks = [k for k in EXPLAINED_KS] + ["all"]
    figures.append(("Explained change", bars(
        [f"top {k}" for k in ks], {"fraction": [S["explained"][f"top_{k}"] if k != "all" else S["explained"]["all_features"]
                                               for k in ks]},
        fig_dir, "features_explained.png", "share of the residual-stream change explained by the top-k features",
        "fraction"), f"Per position; the change in the SAE's reconstruction error is "
                      f"{S['explained']['error_change']:.3f} of it."))
    if "causal" in S:
        c = S["causal"]
        names = ["reference", "steered (top)", "steered (random)", "tuned", "ablated (top)", "ablated (random)"]
        rewards = [c["reference"]["reward"], c["steered"]["reward"], c["steered_random_mean"]["reward"],
                   c["tuned"]["reward"], c["ablated"]["reward"], c["ablated_random_mean"]["reward"]]
        figures.append(("Steering and ablation", bars(
            names, {"reward": rewards}, fig_dir, "features_causal.png", "mean reward of samples", "reward"),
            f"{c['n_samples']} samples of {c['gen_len']} tokens per bar, one seed for all; random bars: mean of "
            f"{len(c['steered_random'])} draws."))
    return figures


def _frequency_scatter(diff: FeatureDiff, top: list[int], path: Path) -> Path:
    fig, ax = new_figure(figsize=(4.6, 4.2))
    floor = 1e-5
    x, y = diff.freq_ref.clamp_min(floor).cpu(), diff.freq_tuned.clamp_min(floor).cpu()
    ax.scatter(x, y, s=5, alpha=0.4, label="all features")
    ax.scatter(x[top], y[top], s=18, color="C3", label="top changed")
    ax.plot([floor, 1], [floor, 1], color="grey", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("firing frequency, reference")
    ax.set_ylabel("firing frequency, tuned")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def causal_verdict(c: dict) -> str:
    """The causal checks in one sentence: the share of the reward gap (tuned − reference) that
    steering the reference with the top features recovers, and that ablating them from the tuned
    model removes, each beside random features of equal norm.

        recovered = (r_steered − r_ref) / (r_tuned − r_ref)      removed = drop_ablated / (r_tuned − r_ref)
    """
    gap = c["tuned"]["reward"] - c["reference"]["reward"]
    if abs(gap) < 1e-9:
        return "The tuned model's reward equals the reference's here: there is no gain for features to explain."
    recovered = (c["steered"]["reward"] - c["reference"]["reward"]) / gap
    random_recovered = (c["steered_random_mean"]["reward"] - c["reference"]["reward"]) / gap
    removed = c["ablated"]["reward_drop"] / gap
    random_removed = c["ablated_random_mean"]["reward_drop"] / gap
    how = "almost none" if abs(recovered) < 0.1 else ("part" if recovered < 0.7 else "most")
    return (f"Verdict: the top {c['top_n']} features recover {how} of the reward gain — steering the reference with them "
            f"recovers {recovered:.0%} of the gap {c['reference']['reward']:.3f} → {c['tuned']['reward']:.3f} (random "
            f"features: {random_recovered:.0%}), and ablating them from the tuned model removes {removed:.0%} (random: "
            f"{random_removed:.0%}). One run, one seed; the rewards' standard errors are below.")


def _headline(S: dict) -> list[str]:
    q, e = S["sae"], S["explained"]
    lines = [f"SAE at {S['site']} ({q['d_sae']} features): explained variance {q['explained_variance']:.3f}, "
             f"L0 {q['l0']:.1f}, dead {q['dead_features']} ({q['dead_fraction']:.0%}); CE loss {q['ce_loss_clean']:.3f} → "
             f"{q['ce_loss_with_sae']:.3f} with the reconstruction spliced in (+{q['ce_loss_increase']:.3f} nats; "
             f"zero-ablated {q['ce_loss_zero_ablated']:.3f})."]
    lines.append(f"Residual change explained by the top 1 / 10 / 100 features: {e['top_1']:.3f} / {e['top_10']:.3f} / "
                 f"{e['top_100']:.3f}; all features {e['all_features']:.3f}, reconstruction-error change {e['error_change']:.3f}.")
    if S["top_features"]:
        t = S["top_features"][0]
        lines.append(f"Largest change: feature {t['feature']} ({t['mean_ref']:.3f} → {t['mean_tuned']:.3f}, fires "
                     f"{t['freq_ref']:.1%} → {t['freq_tuned']:.1%} of positions); its decoder direction promotes "
                     + ", ".join(repr(tok) for tok, _ in t["promotes"][:5]) + ".")
    if "causal" in S:
        c = S["causal"]
        lines.insert(0, causal_verdict(c))
        lines.append(f"Steering the reference with the top {c['top_n']} features: reward {c['reference']['reward']:.3f} → "
                     f"{c['steered']['reward']:.3f} ± {c['steered']['reward_se']:.3f} s.e. (KL {c['steered']['kl']:.3f}); "
                     "random features of equal norm: "
                     f"{c['steered_random_mean']['reward']:.3f} (KL {c['steered_random_mean']['kl']:.3f}); "
                     f"tuned model {c['tuned']['reward']:.3f} (KL {c['tuned']['kl']:.3f}).")
        lines.append(f"Ablating the {len(c['ablated']['features'])} top features RLHF turned up from the tuned model: reward "
                     f"drop {c['ablated']['reward_drop']:+.3f}; as many random features: {c['ablated_random_mean']['reward_drop']:+.3f}.")
    if "sae_on_tuned" in S:
        t = S["sae_on_tuned"]
        lines.insert(1, f"The same SAE on the tuned model's activations: explained variance {t['explained_variance']:.3f}, "
                        f"L0 {t['l0']:.1f}, dead {t['dead_features']} ({t['dead_fraction']:.0%}), CE loss +{t['ce_loss_increase']:.3f} nats.")
    return lines + levels_headline(S)


def _html(title: str, S: dict, figures: list[tuple[str, Path, str]]) -> str:
    tuned_q = S.get("sae_on_tuned", {})
    quality = table([(k, v, tuned_q.get(k, "")) if tuned_q else (k, v) for k, v in S["sae"].items() if k != "settings"],
                    header=["", "reference", "tuned"] if tuned_q else ())
    features = table(
        [(f"F{t['feature']}", f"{t['mean_ref']:.3f} → {t['mean_tuned']:.3f}", f"{t['freq_ref']:.3f} → {t['freq_tuned']:.3f}",
          ", ".join(f"{tok!r} {v:+.2f}" for tok, v in t["promotes"]),
          Html("<br>".join(esc(f"{a:.2f}: {snip}") for a, snip in t["snippets"])))
         for t in S["top_features"]],
        header=["feature", "mean activation ref → tuned", "firing frequency ref → tuned",
                "tokens its decoder direction promotes (tuned unembedding; logit change per unit of activation)",
                "top-activating review snippets (reference; activation: text, token in [[ ]])"],
        row_headers=False)
    parts = [
        f"<h1>{esc(title)}</h1><p><a href='report.html'>← the interp report</a></p>" + findings_html(S["headline"]),
        "<h2>The SAE (SAE Lens evals, validation split)</h2>" + quality,
        "<p>Explained variance: 1 − E|x − x̂|² / Var(x). CE loss in nats per token with the SAE's reconstruction "
        "spliced in at the site; zero-ablated: the site's activations set to 0. Dead: never fires on the eval tokens. "
        "If explained variance is low or the CE increase is a large part of the zero-ablation increase, the features "
        "below are a coarse view.</p>",
        "<h2>Top changed features</h2>" + features,
        *levels_html(S),
    ]
    if "causal" in S:
        parts.insert(1, "<p>KL here is sampled: the mean over the samples of Σ_t log p_model(o_t) − log p_ref(o_t) on each "
                        "completion's tokens. One sample's sum is negative wherever the reference liked those tokens more, so "
                        "a mean of a few dozen can be below 0 although the true KL is ≥ 0 (its expectation when the samples "
                        "come from the model; with top-k sampling, scored with the full softmax, even the expectation can be "
                        "below 0). Compare conditions with each other, not with 0.</p>")
    parts += figures_html(figures)
    parts.append(generated_in(S["seconds"]))
    return page(title, parts)
