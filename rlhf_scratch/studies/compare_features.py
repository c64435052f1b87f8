"""`compare --features`: do the compared runs move the same sparse-autoencoder features?

ONE SAE, trained on the shared reference (`interp.sae`; cached, so a second comparison or
`python -m interp.features` on any of these runs reuses it), reads every run on the same sequences:
per run the change Δa(f) in each feature's mean activation, the top changed features side by side,
the top-k overlap (Jaccard, against chance) and the cosine of the change vectors
(`interp.across_runs`). Training the SAE takes minutes the first time (114 s to 14 min on 2 CPU
cores at the default settings, by load); the same `compare` command again with --features adds the
view to a finished comparison (no run is retrained).

`--features-dictionary` picks the SAE's architecture (interp.features' --dictionary). A crosscoder
reads one pair of models, so `--features-crosscoder` writes each run's own features page:
`python -m interp.features RUN --crosscoder` with the view's dictionary and SAE settings (the same
cached SAE), into RUN/interp/ (features.html, features/features.json: its `sae.settings.architecture`
and `crosscoder.settings` record the choice); `run_pages_argv` is that command line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rlhf_scratch.config import ConfigError
from rlhf_scratch.pages.html import Html, esc, figure, rounded, table
from rlhf_scratch.studies.runner import check_at_least, check_choices

FEATURE_KS = (10, 50)  # the top-k overlaps shown


def check_features_flags(args) -> None:
    """The --features-* flags, and SAE Lens installed: one ConfigError line, before any run trains."""
    check_at_least(args, ("features_d_sae", "features_tokens", "features_top", "features_eval_batches",
                          "features_cc_latents", "features_cc_tokens"))
    if args.features_layer is not None and args.features_layer < 0:
        raise ConfigError(f"features_layer: must be >= 0; got {args.features_layer}")
    from interp.sae import ARCHITECTURES, FeaturesError, SAESettings, require_sae_lens

    check_choices([args.features_dictionary], ARCHITECTURES, "features_dictionary")
    if not 0 < args.features_cc_k <= args.features_cc_latents:
        raise ConfigError(f"features_cc_k: must be in (0, features_cc_latents = {args.features_cc_latents}]; "
                          f"got {args.features_cc_k:g}")
    if not 0 < SAESettings.k <= args.features_d_sae:
        raise ConfigError(f"features_d_sae: must be >= the SAE's k = {SAESettings.k:g}; got {args.features_d_sae}")
    try:
        require_sae_lens()
    except FeaturesError as e:
        raise ConfigError(str(e)) from None


def features_of_runs(args, run_dirs: dict[str, Path], out: Path) -> tuple[dict, list[str]]:
    """The view for `compare`'s args (--features-*): its summary (table.json's "features") and its
    part of the page. Runs from different models, or a layer the model lacks, are bad input: one
    ConfigError line."""
    from interp.sae import FeaturesError, SAESettings

    settings = SAESettings(d_sae=args.features_d_sae, training_tokens=args.features_tokens,
                           eval_batches=args.features_eval_batches, architecture=args.features_dictionary)
    try:
        png, summary = features_view(run_dirs, out, settings, args.features_layer, top_n=args.features_top)
    except FeaturesError as e:
        raise ConfigError(str(e)) from None
    caption = "Run × run: the cosine of the feature-change vectors and the top-k overlaps (chance level in each title)."
    parts = [*features_section(summary, args.features_top), figure(png, caption=caption)]
    if args.features_crosscoder:
        summary["run_pages"] = run_pages(args, run_dirs)
        parts += run_pages_section(summary["run_pages"], out)
    return summary, parts


def run_pages_argv(args, run_dir: Path) -> list[str]:
    """`python -m interp.features`' argv for one run of the comparison: the view's dictionary, SAE
    settings, site and top-n, and the crosscoder with --features-cc-*."""
    argv = [str(run_dir), "--dictionary", args.features_dictionary, "--d-sae", str(args.features_d_sae),
            "--training-tokens", str(args.features_tokens), "--eval-batches", str(args.features_eval_batches),
            "--top-n", str(args.features_top), "--threads", str(args.threads)]
    if args.features_layer is not None:
        argv += ["--layer", str(args.features_layer)]
    if args.features_crosscoder:
        argv += ["--crosscoder", "--cc-latents", str(args.features_cc_latents), "--cc-k", f"{args.features_cc_k:g}",
                 "--cc-tokens", str(args.features_cc_tokens)]
    return argv


def run_pages(args, run_dirs: dict[str, Path]) -> dict:
    """Each run's own features page (`interp.features.main` on `run_pages_argv`), and from its
    features.json the dictionary, dead fraction, explained change and crosscoder counts. A run whose
    page fails (its own line printed) is one ConfigError line naming it."""
    import json

    from interp import features

    pages = {}
    for label, run_dir in run_dirs.items():
        if features.main(run_pages_argv(args, run_dir)) != 0:
            raise ConfigError(f"features_crosscoder: the features page of {label} failed (its error above)")
        path = run_dir / "interp" / "features" / "features.json"
        S = json.loads(path.read_text())
        cc = S.get("crosscoder", {})
        pages[label] = {"features_json": str(path), "dictionary": S["sae"].get("settings", {}).get("architecture"),
                        "dead_fraction": S["dead_fraction"], "explained_change": S["explained_change"],
                        "crosscoder_counts": cc.get("counts"), "confirmed_by_scaling": cc.get("confirmed_by_scaling")}
    return pages


def run_pages_section(pages: dict, out: Path) -> list[str]:
    """The page's table of each run's own features page."""
    import os

    def counts(p: dict) -> str:
        c, ok = p["crosscoder_counts"], p["confirmed_by_scaling"]
        if not c:
            return ""
        return (f"{c['shared']} / {c['reference-only']} ({ok['reference-only']} confirmed) / "
                f"{c['tuned-only']} ({ok['tuned-only']} confirmed)")

    rows = [[Html(f"<a href='{esc(os.path.relpath(Path(p['features_json']).parent.parent / 'features.html', out))}'>"
                  f"{esc(label)}</a>"), p["dictionary"] or "", f"{p['dead_fraction']:.2f}", f"{p['explained_change']:.3f}",
             counts(p)] for label, p in pages.items()]
    return ["<h3>Each run's own features page</h3><p>python -m interp.features RUN --crosscoder, with the SAE above: "
            "crosscoder latents shared / reference-only / tuned-only (confirmed by latent scaling).</p>"
            + table(rows, header=["run", "dictionary", "dead fraction", "explained change", "crosscoder latents"])]


def features_view(run_dirs: dict[str, Path], out: Path, settings, layer: int | None = None, hook: str = "resid_post",
                  n_diff: int = 64, top_n: int = 10, cache_dir: str | Path | None = None) -> tuple[Path, dict]:
    """Do the runs move the same SAE features? One SAE (trained on the shared reference, or loaded from
    the cache), one set of sequences every model reads (`n_diff` completions sampled from the reference
    and from each run), then `interp.across_runs.feature_overlap`. `settings`: the SAE's
    `interp.sae.SAESettings`. Raises FeaturesError (one line) on runs from different models or a
    bad layer."""
    import torch

    from interp.across_runs import (
        feature_changes,
        feature_overlap,
        plot_feature_overlap,
        shared_top_features,
        top_k_features,
    )
    from interp.feature_diff import diff_tokens, final_ln_scale, promoted_tokens, real_positions
    from interp.features import load_or_train_sae
    from interp.sae import FeaturesError, site_hook
    from interp.sampling import SampleSettings
    from rlhf_scratch.engine.runs import load_run
    from rlhf_scratch.rollout.prompts import load_prompts

    reference = args = None
    tuned = {}
    for label, run_dir in run_dirs.items():  # each run loaded once; the first run's reference reads them all
        run = load_run(run_dir)
        if reference is None:
            reference, args = run.reference, run.args
        elif run.args.model != args.model:
            raise FeaturesError(f"features: {label} starts from {run.args.model}, not {args.model}: one SAE cannot read both")
        tuned[label] = run.tuned
    n_layers = reference.cfg.n_layers
    layer = n_layers // 2 if layer is None else layer
    if not 0 <= layer < n_layers:
        raise FeaturesError(f"features_layer: must be in 0..{n_layers - 1}; got {layer}")
    hook_name = site_hook(layer, hook)
    sae, quality, folder, cached = load_or_train_sae(reference, hook_name, settings, cache_dir)
    print(f"features: SAE {'loaded from' if cached else 'trained and cached in'} {folder}", file=sys.stderr)

    with torch.no_grad():
        prompts = load_prompts(args.prompts, args.prefix, args.seed)[:256]
        sampling = SampleSettings.from_args(args, n_diff, args.seed).for_diff(n_diff)
        tokens, attend = diff_tokens([reference, *tuned.values()], prompts, sampling)
        changes, alive = feature_changes(reference, tuned, sae, hook_name, tokens, attend)
        overlap = feature_overlap(list(tuned), changes, alive, FEATURE_KS)
        scale = final_ln_scale(reference, tokens, attend)
        ranked = top_k_features(changes, top_n)  # [runs, top_n]
        W_dec = sae.W_dec.detach()
        summary = {
            "site": hook_name, "sae_cache": str(folder), "dictionary": settings.architecture,
            "sae": {k: v for k, v in quality.items() if k != "settings"},
            "n_sequences": tokens.shape[0], "n_positions": int(real_positions(reference, tokens, attend).sum()),
            "labels": overlap.labels, "n_alive": overlap.n_alive,
            "cosine": overlap.cosine.tolist(),
            "jaccard": {str(k): m.tolist() for k, m in overlap.jaccard.items()},
            "chance_jaccard": {str(k): v for k, v in overlap.chance.items()},
            "top": {label: [[int(f), changes[i, f].item()] for f in ranked[i]] for i, label in enumerate(overlap.labels)},
            "shared": [{"feature": f, "in_top": n,
                        "change": {label: changes[i, f].item() for i, label in enumerate(overlap.labels)},
                        "promotes": [tok for tok, _ in promoted_tokens(reference, W_dec[f], scale, k=5)]}
                       for f, n in shared_top_features(changes, top_n)],
        }
    return plot_feature_overlap(overlap, out / "features.png"), rounded(summary, nd=6)  # Δa of a short run: ~1e-4


def features_section(features: dict, top_n: int) -> list[str]:
    """The page's 'same features?' part: SAE quality, the top changes side by side, the overlaps."""
    labels, shared = features["labels"], {s["feature"] for s in features["shared"]}
    q = features["sae"]

    def cell(f: int, change: float) -> Html:
        text = esc(f"F{f} {change:+.3g}")
        return Html(f"<b>{text}</b>" if f in shared else text)

    side_by_side = table([[i + 1, *(cell(*features["top"][label][i]) if i < len(features["top"][label]) else ""
                                    for label in labels)] for i in range(top_n)], header=["rank", *labels])

    def matrix(m: list[list], fmt: str) -> str:
        return table([[a, *("–" if v is None else fmt.format(v) for v in row)] for a, row in zip(labels, m)],
                     header=["", *labels])

    parts = ["<h2>Do the algorithms move the same features?</h2>",
             f"<p>One sparse autoencoder ({esc(features.get('dictionary', 'batchtopk'))}), trained on the shared "
             f"reference at <code>{esc(features['site'])}</code> "
             f"({q['d_sae']} features; explained variance {q['explained_variance']:.3f}, L0 {q['l0']:.1f}, "
             f"dead {q['dead_features']}, CE loss +{q['ce_loss_increase']:.3f} nats with it spliced in), reads every "
             f"model on the same {features['n_sequences']} sequences (completions sampled from the reference and "
             f"from each run; {features['n_positions']} token positions). Per run: Δa(f), the change in feature f's "
             f"mean activation, tuned − reference. {features['n_alive']} features fire at all. In bold: features in "
             "the top list of more than one run.</p>", side_by_side]
    parts.append("<p>Cosine of the change vectors Δa (1 = the same features moved in the same proportions; "
                 "−1 = opposite; 0 = unrelated):</p>" + matrix(features["cosine"], "{:+.2f}"))
    for k, m in features["jaccard"].items():
        parts.append(f"<p>Top-{k} overlap, Jaccard |T_i ∩ T_j| / |T_i ∪ T_j| of the {k} features with the largest "
                     f"|Δa| (two random {k}-sets of the {features['n_alive']} live features: "
                     f"{features['chance_jaccard'][k]:.3f} on average):</p>" + matrix(m, "{:.2f}"))
    if features["shared"]:
        parts.append("<p>Features in more than one run's top list (tokens their decoder direction promotes "
                     "through the reference's unembedding):</p>" + table(
            [[f"F{s['feature']}", s["in_top"], *(f"{s['change'][label]:+.3g}" for label in labels), ", ".join(map(repr, s["promotes"]))]
             for s in features["shared"]], header=["feature", "in top lists", *(f"Δa {label}" for label in labels), "promotes"]))
    return parts
