"""PPO vs RLOO vs Online DPO in one command: equal budget, a reward–KL frontier, held-out judges.

    python -m rlhf_scratch.compare sentiment                                   # the three, defaults
    python -m rlhf_scratch.compare sentiment --algos ppo,rloo --seeds 0,1,2 --total-phases 50
    python -m rlhf_scratch.compare sentiment --algos rloo --kl-coefs 0.02,0.1,0.5   # a β sweep: the frontier
    python -m rlhf_scratch.compare sentiment --algos ppo,rloo,online_dpo,grpo        # GRPO too (docs/grpo.md)
    python -m rlhf_scratch.compare sentiment --out comparisons/x -- --prompts rt    # flags after -- go to every run

Every (algorithm, seed, β) is one `python -m rlhf_scratch.train` run in its own process, so each
gets its own wall time and peak memory and a crash stays in one run. The runs write to
OUT/runs/<algo>-s<seed>[-b<β>]/. Every run has the same prompts, seed, reward and generated
tokens per phase (batch_size completions of gen_len tokens: PPO 64 prompts × 1, RLOO 16 × 4,
DPO 32 × 2, GRPO 8 × 8). GRPO's default β is 0, which needs no reference model and so logs no KL;
its runs here are given `--measure-kl` so that they have a point on the reward–KL frontier. Then
the command writes to OUT:

    reward_vs_phase.png   proxy reward per phase, one line per algorithm (the band spans the seeds)
    frontier.png          proxy reward vs KL(π‖π_ref), each point a phase
    heldout.png           proxy reward and the held-out scores (eval/*) per phase, per algorithm
    inside.png            residual drift and per-head DLA change of each tuned model (interp.across_runs)
    features.png          with --features: do the runs move the same SAE features? (interp.across_runs)
    table.md, table.json  start/final reward, KL, held-out scores, wall, peak memory, tokens/s
    index.html            all of it, with the last samples of each run

--features (opt-in) reads every run through ONE sparse autoencoder trained on the shared reference
(`interp.features`; cached, so a second comparison or `python -m interp.features` on any of these
runs reuses it): per run the change in each feature's mean activation, the top changed features side
by side, the top-k overlap (Jaccard, against chance) and the cosine of the change vectors. Training
the SAE takes minutes the first time (114 s to 14 min on 2 CPU cores at the default settings, by
load); run the same command again with --features to add the view to a finished comparison (no run
is retrained).

An interrupted comparison continues where it stopped. Finished runs are kept. An interrupted
run is resumed from its checkpoint (one with none is started again); a run another process is
still training is refused. One bar counts the phases of all runs and names the run and its phase.
The final columns average the last 10 phases (fewer in a shorter run: the table says how many).
The plan is saved in OUT/compare.json and must match.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from interp.pages import Html, esc, figure, page, pyplot, rounded, table
from rlhf_scratch.config import ALGOS, TASKS, ConfigError

BETA_FLAG = {"ppo": "--kl-coef", "rloo": "--beta", "online_dpo": "--beta", "grpo": "--beta"}  # each algorithm's β
LABEL = {"ppo": "PPO", "rloo": "RLOO", "online_dpo": "Online DPO", "grpo": "GRPO"}
DEFAULT_ALGOS = ("ppo", "rloo", "online_dpo")  # the three of the blog post; --algos adds grpo
# Flags an algorithm's runs get in a comparison: GRPO at β = 0 skips the reference and logs a NaN
# KL; --measure-kl runs the reference anyway, only to log the KL the frontier plots.
ALGO_FLAGS = {"grpo": ["--measure-kl"]}
PLAN_FILE, RESULTS_FILE = "compare.json", "results.json"
LAST = 10  # "final" = the mean of the last 10 phases (fewer if the run is shorter)


@dataclass(frozen=True)
class RunSpec:
    algo: str
    seed: int
    beta: float | None = None  # None: the algorithm's default

    @property
    def name(self) -> str:
        return f"{self.algo}-s{self.seed}" + (f"-b{self.beta:g}" if self.beta is not None else "")

    @property
    def group(self) -> str:
        """The curve a run belongs to: runs differing only in seed share one."""
        return LABEL[self.algo] + (f" β={self.beta:g}" if self.beta is not None else "")


def plan_runs(algos: list[str], seeds: list[int], betas: list[float] | None) -> list[RunSpec]:
    return [RunSpec(a, s, b) for a in algos for b in (betas or [None]) for s in seeds]


def _csv(text: str, kind, field: str) -> list:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{field}: expected a comma-separated list of {kind.__name__}s; got {text!r}") from None
    if not values:
        raise ConfigError(f"{field}: empty list")
    return values


# --- running -------------------------------------------------------------------------------------


def run_one(spec: RunSpec, task: str, run_dir: Path, train_flags: list[str], progress=None) -> dict:
    """Train one run in its own process (or resume it); its wall seconds and peak RSS (MiB).

    A run another process is training is refused (one line); an unfinished run with a checkpoint
    is resumed, one without (or a finished run whose numbers were lost) is started again.
    `progress(phase)` is called with the run's completed phases while it trains."""
    from rlhf_scratch.runs import list_checkpoints, next_step, read_status

    cmd = [sys.executable, "-m", "rlhf_scratch.train", task, "--algo", spec.algo, "--seed", str(spec.seed),
           "--run-dir", str(run_dir), *train_flags]
    cmd += ALGO_FLAGS.get(spec.algo, [])
    if spec.beta is not None:
        cmd += [BETA_FLAG[spec.algo], str(spec.beta)]
    if run_dir.exists():
        status = read_status(run_dir)
        if status["status"] == "running":
            raise RuntimeError(f"run {spec.name}: {next_step(run_dir, status)}")
        if status["status"] != "finished" and list_checkpoints(run_dir):  # interrupted, failed or lost: continue it
            cmd = [sys.executable, "-m", "rlhf_scratch.train", "--resume", str(run_dir)]
        else:
            shutil.rmtree(run_dir)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled")})
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)  # so the pipe never fills
    reader.start()
    while True:
        pid, status_code, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if progress is not None and (run_dir / "status.json").is_file():
            progress(read_status(run_dir).get("phase") or 0)
        time.sleep(0.5)
    reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status_code)
    if progress is not None and (run_dir / "status.json").is_file():
        progress(read_status(run_dir).get("phase") or 0)
    if proc.returncode != 0:
        lines = "".join(stderr).splitlines()
        errors = [line for line in lines if line.startswith("error:")]
        raise RuntimeError(f"run {spec.name} failed (exit {proc.returncode}): "
                           f"{errors[-1] if errors else ([l for l in lines if l.strip()] or ['no output'])[-1]}")
    return {"wall_s": time.perf_counter() - start, "peak_mib": usage.ru_maxrss / 1024}


def summarize(run_dir: Path, measured: dict) -> dict:
    """One row of the table from a finished run's metrics.jsonl."""
    from rlhf_scratch.runs import read_metrics

    m = read_metrics(run_dir)
    last = m[-LAST:]

    def final(key: str) -> float:
        return statistics.mean(x[key] for x in last)

    row = {"phases": len(m), "averaged": len(last), "reward_start": m[0]["rewards/mean"], "reward_final": final("rewards/mean"),
           "kl_final": final("rollout/kl_full_vocab"), "length_final": final("completions/mean_length"),
           "tokens_per_s": statistics.median(x["charts/tokens_per_s"] for x in m), **measured}
    for key in ("eval/vader", "eval/ref_logprob_per_token", "eval/repeated_3grams"):
        if key in m[0]:
            row[key + "_start"], row[key + "_final"] = m[0][key], final(key)
    return row


# --- figures -------------------------------------------------------------------------------------


def _by_group(specs: list[RunSpec], out: Path) -> dict[str, list[list[dict]]]:
    from rlhf_scratch.runs import read_metrics

    groups: dict[str, list[list[dict]]] = {}
    for spec in specs:
        groups.setdefault(spec.group, []).append(read_metrics(out / "runs" / spec.name))
    return groups


def _band(ax, runs: list[list[dict]], x_key: str, y_key: str, label: str) -> None:
    """The mean over seeds as a line; min–max over seeds as a band (one seed: just the line)."""
    n = min(len(r) for r in runs)
    xs = [runs[0][i][x_key] for i in range(n)]
    ys = [[r[i][y_key] for r in runs] for i in range(n)]
    line, = ax.plot(xs, [statistics.mean(y) for y in ys], label=label)
    if len(runs) > 1:
        ax.fill_between(xs, [min(y) for y in ys], [max(y) for y in ys], color=line.get_color(), alpha=0.2)


def plot_comparison(groups: dict[str, list[list[dict]]], out: Path) -> list[Path]:
    plt = pyplot()
    paths = []
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for label, runs in groups.items():
        _band(ax, runs, "phase", "rewards/mean", label)
    ax.set(xlabel="phase", ylabel="proxy reward (training reward)", title="reward per phase")
    ax.grid(alpha=0.3), ax.legend()
    paths.append(out / "reward_vs_phase.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight"), plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 4))
    for label, runs in groups.items():
        for i, r in enumerate(runs):
            ax.plot([x["rollout/kl_full_vocab"] for x in r], [x["rewards/mean"] for x in r], marker=".", alpha=0.6,
                    label=label if i == 0 else None, color=f"C{list(groups).index(label)}")
    ax.set(xlabel="KL(π‖π_ref), nats per token", ylabel="proxy reward", title="the reward–KL frontier (a point per phase)")
    ax.grid(alpha=0.3), ax.legend()
    paths.append(out / "frontier.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight"), plt.close(fig)

    keys = [("rewards/mean", "proxy reward"), ("eval/vader", "held-out: VADER"),
            ("eval/ref_logprob_per_token", "held-out: reference log-prob / token"),
            ("eval/repeated_3grams", "held-out: repeated 3-grams")]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.6))
    for ax, (key, title) in zip(axes, keys):
        for label, runs in groups.items():
            if key in runs[0][0]:
                _band(ax, runs, "phase", key, label)
        ax.set(xlabel="phase", title=title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    paths.append(out / "heldout.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight"), plt.close(fig)
    return paths


def inside_view(specs: list[RunSpec], out: Path) -> tuple[Path, dict]:
    """interp.across_runs on the first run of each group: residual drift, head DLA change, similarity."""
    from interp.across_runs import change_similarity, inside_changes, plot_inside_changes
    from interp.probes import REVIEW_PROMPTS
    from rlhf_scratch.runs import load_run

    firsts: dict[str, RunSpec] = {}
    for spec in specs:
        firsts.setdefault(spec.group, spec)
    runs = {label: load_run(out / "runs" / spec.name) for label, spec in firsts.items()}
    reference = next(iter(runs.values())).reference
    changes = inside_changes(reference, {label: run.tuned for label, run in runs.items()}, list(REVIEW_PROMPTS))
    sim = change_similarity(changes)
    labels = [c.label for c in changes]
    summary = {"labels": labels, "dla_change_cosine": [[None if v != v else round(v, 3) for v in row] for row in sim.tolist()],
               "logit_diff_change": {c.label: round(c.logit_diff_change, 3) for c in changes},
               "final_drift": {c.label: round(c.drift[-1].item(), 4) for c in changes},
               "head_dla_change": {c.label: [[round(v, 4) for v in row] for row in c.head_dla_change.tolist()] for c in changes}}
    return plot_inside_changes(changes, out / "inside.png"), summary


FEATURE_KS = (10, 50)  # the top-k overlaps shown


def check_features_flags(opts) -> None:
    """The --features-* flags, and SAE Lens installed: one ConfigError line, before any run trains."""
    for name in ("features_d_sae", "features_tokens", "features_top", "features_eval_batches"):
        if getattr(opts, name) < 1:
            raise ConfigError(f"{name}: must be >= 1; got {getattr(opts, name)}")
    if opts.features_layer is not None and opts.features_layer < 0:
        raise ConfigError(f"features_layer: must be >= 0; got {opts.features_layer}")
    from interp.features import FeaturesError, SAESettings, require_sae_lens

    if not 0 < SAESettings.k <= opts.features_d_sae:
        raise ConfigError(f"features_d_sae: must be >= the SAE's k = {SAESettings.k:g}; got {opts.features_d_sae}")
    try:
        require_sae_lens()
    except FeaturesError as e:
        raise ConfigError(str(e)) from None


def features_view(run_dirs: dict[str, Path], out: Path, settings, layer: int | None = None, hook: str = "resid_post",
                  n_diff: int = 64, top_n: int = 10, cache_dir: str | Path | None = None) -> tuple[Path, dict]:
    """Do the runs move the same SAE features? One SAE (trained on the shared reference, or loaded from
    the cache), one set of sequences every model reads (`n_diff` completions sampled from the reference
    and from each run), then `interp.across_runs.feature_overlap`. `settings`: the SAE's
    `interp.features.SAESettings`. Raises FeaturesError (one line) on runs from different models or a
    bad layer."""
    import torch

    from interp import features as F
    from interp.across_runs import (
        feature_changes,
        feature_overlap,
        plot_feature_overlap,
        shared_top_features,
        top_k_features,
    )
    from rlhf_scratch.prompts import load_prompts
    from rlhf_scratch.runs import load_run

    reference = args = None
    tuned = {}
    for label, run_dir in run_dirs.items():  # each run loaded once; the first run's reference reads them all
        run = load_run(run_dir)
        if reference is None:
            reference, args = run.reference, run.args
        elif run.args.model != args.model:
            raise F.FeaturesError(f"features: {label} starts from {run.args.model}, not {args.model}: one SAE cannot read both")
        tuned[label] = run.tuned
    n_layers = reference.cfg.n_layers
    layer = n_layers // 2 if layer is None else layer
    if not 0 <= layer < n_layers:
        raise F.FeaturesError(f"features_layer: must be in 0..{n_layers - 1}; got {layer}")
    hook_name = F.site_hook(layer, hook)
    sae, quality, folder, cached = F.load_or_train_sae(reference, hook_name, settings, cache_dir)
    print(f"features: SAE {'loaded from' if cached else 'trained and cached in'} {folder}", file=sys.stderr)

    with torch.no_grad():
        prompts = load_prompts(args.prompts, args.prefix, args.seed)[:256]
        sampling = F.SampleSettings.from_args(args, n_diff, args.seed).for_diff(n_diff)
        tokens, attend = F.diff_tokens([reference, *tuned.values()], prompts, sampling)
        changes, alive = feature_changes(reference, tuned, sae, hook_name, tokens, attend)
        overlap = feature_overlap(list(tuned), changes, alive, FEATURE_KS)
        scale = F.final_ln_scale(reference, tokens, attend)
        ranked = top_k_features(changes, top_n)  # [runs, top_n]
        W_dec = sae.W_dec.detach()
        summary = {
            "site": hook_name, "sae_cache": str(folder), "sae": {k: v for k, v in quality.items() if k != "settings"},
            "n_sequences": tokens.shape[0], "n_positions": int(F.real_positions(reference, tokens, attend).sum()),
            "labels": overlap.labels, "n_alive": overlap.n_alive,
            "cosine": overlap.cosine.tolist(),
            "jaccard": {str(k): m.tolist() for k, m in overlap.jaccard.items()},
            "chance_jaccard": {str(k): v for k, v in overlap.chance.items()},
            "top": {label: [[int(f), changes[i, f].item()] for f in ranked[i]] for i, label in enumerate(overlap.labels)},
            "shared": [{"feature": f, "in_top": n,
                        "change": {label: changes[i, f].item() for i, label in enumerate(overlap.labels)},
                        "promotes": [tok for tok, _ in F.promoted_tokens(reference, W_dec[f], scale, k=5)]}
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
             f"<p>One sparse autoencoder, trained on the shared reference at <code>{esc(features['site'])}</code> "
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


# --- the page ------------------------------------------------------------------------------------


TABLE_COLUMNS = [("reward_start", "reward, phase 1", "{:.3f}"), ("reward_final", "reward, {final}", "{:.3f}"),
                 ("kl_final", "KL, {final}", "{:.3f}"),
                 ("eval/vader", "VADER (held out)", "{:.3f}"),
                 ("eval/ref_logprob_per_token", "ref log-prob / token (held out)", "{:.2f}"),
                 ("eval/repeated_3grams", "repeated 3-grams (held out)", "{:.3f}"), ("wall_s", "wall (s)", "{:.0f}"),
                 ("peak_mib", "peak RSS (MiB)", "{:,.0f}"), ("tokens_per_s", "tokens/s", "{:.0f}")]
"""(key, title, format); a held-out key `eval/…` shows its phase-1 value and its mean over the last LAST
phases, `start → final`; `{final}` in a title says what was averaged (see `averaged_label`)."""


def averaged_label(results: dict[str, dict]) -> str:
    """What the final columns average, e.g. `last 5 of 5 phases` (LAST, or fewer in a shorter run)."""
    spans = {(r["averaged"], r["phases"]) for r in results.values() if "averaged" in r}
    if len(spans) == 1:
        n, m = spans.pop()
        return f"last {n} of {m} phases"
    return f"last {LAST} phases (fewer in shorter runs)"


def column_titles(results: dict[str, dict]) -> list[str]:
    final = averaged_label(results)
    return [title.format(final=final) for _, title, _ in TABLE_COLUMNS]


def _cell(row: dict, key: str, fmt: str) -> str:
    if key.startswith("eval/"):
        if key + "_final" not in row:
            return ""
        return f"{fmt.format(row[key + '_start'])} → {fmt.format(row[key + '_final'])}"
    return fmt.format(row[key]) if key in row else ""


def markdown_table(results: dict[str, dict]) -> str:
    head = "| run | " + " | ".join(column_titles(results)) + " |"
    rows = ["| " + name + " | " + " | ".join(_cell(r, key, fmt) for key, _, fmt in TABLE_COLUMNS) + " |"
            for name, r in results.items()]
    return "\n".join([head, "|" + "---|" * (len(TABLE_COLUMNS) + 1), *rows])


def last_samples(run_dir: Path, n: int = 3) -> str:
    from rlhf_scratch.runs import SAMPLES_FILE

    text = (run_dir / SAMPLES_FILE).read_text()
    section = text.split("## phase ")[-1]
    lines = section.splitlines()
    return "\n".join([f"phase {lines[0]}", *[l for l in lines[1:] if l.startswith("|")][: n + 2]])


def write_html(out: Path, results: dict, figures: list[Path], inside: dict | None, specs: list[RunSpec],
               features: dict | None = None, features_png: Path | None = None, top_n: int = 10) -> Path:
    runs = table([[name, *(_cell(r, k, fmt) for k, _, fmt in TABLE_COLUMNS)] for name, r in results.items()],
                 header=["run", *column_titles(results)])
    title = " vs ".join(dict.fromkeys(LABEL[spec.algo] for spec in specs))
    parts = [f"<h1>{esc(title)}</h1>",
             "<p>Same prompts, seed, reward and generated tokens per phase. Proxy = the training reward. "
             "Held out = judges the runs never trained on (rlhf_scratch/heldout.py). Final = mean of the "
             f"{esc(averaged_label(results))}.</p>", runs]
    parts += [figure(p) for p in figures]
    if inside is not None:
        labels = inside["labels"]
        cosines = [[l, *("nan" if v is None else f"{v:+.2f}" for v in row)]
                   for l, row in zip(labels, inside["dla_change_cosine"])]
        parts.append("<h2>What each changed inside</h2><p>Cosine of the per-head DLA-change vectors "
                     "(1 = the same heads moved the same way):</p>" + table(cosines, header=["", *labels]))
    if features is not None:
        parts += features_section(features, top_n)
        if features_png is not None:
            parts.append(figure(features_png, caption="Run × run: the cosine of the feature-change vectors and "
                                                      "the top-k overlaps (chance level in each title)."))
    parts.append("<h2>Last samples</h2>")
    for spec in specs:
        parts.append(f"<h3>{esc(spec.name)}</h3><pre>{esc(last_samples(out / 'runs' / spec.name))}</pre>")
    path = out / "index.html"
    path.write_text(page("rlhf_scratch comparison", parts))
    return path


# --- the command ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    train_flags: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, train_flags = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(prog="python -m rlhf_scratch.compare", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                     epilog="Flags after -- go to every `python -m rlhf_scratch.train` run.")
    parser.add_argument("task", choices=TASKS, help="the reward every run maximises")
    parser.add_argument("--algos", default=",".join(DEFAULT_ALGOS), help="comma-separated, of " + ", ".join(ALGOS))
    parser.add_argument("--seeds", default="1", help="comma-separated seeds (a band over them in the figures)")
    parser.add_argument("--kl-coefs", default=None, help="comma-separated β values: one run per β (the frontier)")
    parser.add_argument("--total-phases", type=int, default=100, help="phases of every run")
    parser.add_argument("--prompts", default=None, help="as train's --prompts (None: the blog's prefix)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of every run")
    parser.add_argument("--out", default=None, help="the comparison folder (None: comparisons/<task>-<time>)")
    parser.add_argument("--no-interp", action="store_true", help="skip the inside view (interp.across_runs)")
    parser.add_argument("--features", action="store_true",
                        help="add the SAE-features view: do the runs move the same features? (trains an SAE the first "
                             "time: minutes; needs the `sae` extra)")
    parser.add_argument("--features-layer", type=int, default=None, help="its site's block (None: n_layers // 2)")
    parser.add_argument("--features-d-sae", type=int, default=1024, help="its SAE's features (as interp.features)")
    parser.add_argument("--features-tokens", type=int, default=400_000, help="its SAE's training tokens")
    parser.add_argument("--features-eval-batches", type=int, default=8, help="batches of SAE Lens's evals of its SAE")
    parser.add_argument("--features-top", type=int, default=10, help="top changed features shown per run")
    opts = parser.parse_args(argv)
    try:
        algos = _csv(opts.algos, str, "algos")
        if bad := [a for a in algos if a not in ALGOS]:
            raise ConfigError(f"algos: unknown {', '.join(bad)}; choose from {', '.join(ALGOS)}")
        seeds = _csv(opts.seeds, int, "seeds")
        betas = _csv(opts.kl_coefs, float, "kl_coefs") if opts.kl_coefs else None
        if betas and any(b < 0 for b in betas):
            raise ConfigError(f"kl_coefs: must be >= 0; got {opts.kl_coefs}")
        if opts.total_phases < 1:
            raise ConfigError(f"total_phases: must be >= 1; got {opts.total_phases}")
        if opts.features:
            check_features_flags(opts)
        out = Path(opts.out or f"comparisons/{opts.task}-{time.strftime('%Y%m%d-%H%M%S')}")
        flags = ["--total-phases", str(opts.total_phases), "--threads", str(opts.threads),
                 *(["--prompts", opts.prompts] if opts.prompts else []), *train_flags]
        plan = {"task": opts.task, "algos": algos, "seeds": seeds, "kl_coefs": betas, "train_flags": flags}
        plan_path = out / PLAN_FILE
        if plan_path.is_file():
            if json.loads(plan_path.read_text()) != plan:
                raise ConfigError(f"out: {out} holds a different comparison ({plan_path}); choose a new --out")
        elif out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ConfigError(f"out: {out} exists and is not a comparison folder; choose a new one (nothing was touched)")
        out.mkdir(parents=True, exist_ok=True)
        plan_path.write_text(json.dumps(plan, indent=1))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    from tqdm.auto import tqdm

    from rlhf_scratch.runs import read_status

    bad_input: tuple[type[Exception], ...] = (ConfigError,)
    if opts.features:
        from interp.features import FeaturesError

        bad_input = (ConfigError, FeaturesError)
    specs = plan_runs(algos, seeds, betas)
    results_path = out / RESULTS_FILE
    measured: dict[str, dict] = json.loads(results_path.read_text()) if results_path.is_file() else {}
    bar = tqdm(total=len(specs) * opts.total_phases, desc="phases, all runs", unit="phase", file=sys.stderr)
    try:
        for i, spec in enumerate(specs):
            run_dir = out / "runs" / spec.name
            done = (run_dir / "status.json").is_file() and read_status(run_dir)["status"] == "finished"
            if done and spec.name in measured:
                bar.update(i * opts.total_phases + opts.total_phases - bar.n)
                continue  # finished in an earlier call: not redone

            def progress(phase: int, i=i, spec=spec) -> None:
                bar.set_postfix_str(f"run {i + 1}/{len(specs)} {spec.name}: phase {phase}/{opts.total_phases}")
                bar.update(i * opts.total_phases + phase - bar.n)

            progress(0)
            measured[spec.name] = {**asdict(spec), **run_one(spec, opts.task, run_dir, flags, progress)}
            results_path.write_text(json.dumps(measured, indent=1))
        bar.close()
        results = {s.name: summarize(out / "runs" / s.name, {k: measured[s.name][k] for k in ("wall_s", "peak_mib")})
                   for s in specs}
        figures = plot_comparison(_by_group(specs, out), out)
        inside = None
        if not opts.no_interp:
            inside_png, inside = inside_view(specs, out)
            figures.append(inside_png)
        features, features_png = None, None
        if opts.features:
            from interp.features import SAESettings

            settings = SAESettings(d_sae=opts.features_d_sae, training_tokens=opts.features_tokens,
                                   eval_batches=opts.features_eval_batches)
            features_png, features = features_view({s.name: out / "runs" / s.name for s in specs}, out, settings,
                                                   opts.features_layer, top_n=opts.features_top)
    except bad_input as e:  # a bad --features-layer, runs from different models: not an interruption
        bar.close()
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError, ValueError) as e:
        bar.close()
        print(f"error: {str(e).splitlines()[0]}; run the same command again to continue", file=sys.stderr)
        return 1
    (out / "table.md").write_text(markdown_table(results) + "\n")
    (out / "table.json").write_text(json.dumps({"runs": results, "inside": inside, "features": features}, indent=1))
    write_html(out, results, figures, inside, specs, features, features_png, opts.features_top)
    print(markdown_table(results))
    if inside is not None:
        print("\nper-head DLA-change cosine:", json.dumps(dict(zip(inside["labels"], inside["dla_change_cosine"]))))
    if features is not None:
        print("SAE feature-change cosine:", json.dumps(dict(zip(features["labels"], features["cosine"]))))
        for k, m in features["jaccard"].items():
            print(f"top-{k} Jaccard (chance {features['chance_jaccard'][k]}):", json.dumps(dict(zip(features["labels"], m))))
    print(f"\nwrote {out}/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
