"""PPO vs RLOO vs Online DPO in one command: equal budget, a reward–KL frontier, held-out judges.

    python -m rlhf_scratch.compare sentiment                                   # the three, defaults
    python -m rlhf_scratch.compare sentiment --algos ppo,rloo --seeds 0,1,2 --total-phases 50
    python -m rlhf_scratch.compare sentiment --algos rloo --betas 0.02,0.1,0.5      # a β sweep: the frontier
    python -m rlhf_scratch.compare sentiment --algos ppo --top-ks 0,10 --seeds 1,2,3 --no-interp  # the top-k lesson
    python -m rlhf_scratch.compare sentiment --algos ppo,rloo,online_dpo,grpo        # GRPO too (docs/grpo.md)
    python -m rlhf_scratch.compare sentiment --out comparisons/x -- --prompts rt    # flags after -- go to every run
    python -m rlhf_scratch.compare sentiment --quick --seeds 1,2                     # tiny: tests and notebooks

Every (algorithm, seed, β or top-k) is one `python -m rlhf_scratch.train` run in its own process
(`studies.runner`), so each gets its own wall time and peak memory and a crash stays in one run;
`--jobs` runs at a time (default 1: a run's wall time is then its own). The runs write to
OUT/runs/<algo>-s<seed>[-b<β>|-k<top-k>]/. Every run has the same prompts, seed, reward and generated tokens
per phase (batch_size completions of gen_len tokens: PPO 64 prompts × 1, RLOO 16 × 4, DPO 32 × 2,
GRPO 8 × 8). An algorithm's runs get its registry entry's `study_flags`: GRPO's default β = 0 needs
no reference model and so logs no KL, and `--measure-kl` gives it a point on the reward–KL frontier.
Then the command writes to OUT:

    reward_vs_phase.png   proxy reward per phase, one line per algorithm (mean over seeds, its 95 % band)
    frontier.png          proxy reward vs KL(π‖π_ref), each point a phase of a run; each curve's final
                          mean with its intervals on both axes
    heldout.png           proxy reward and the held-out scores (eval/*) per phase, per algorithm (bands)
    inside.png            residual drift and per-head DLA change of each tuned model (interp.across_runs)
    features.png          with --features: do the runs move the same SAE features? (compare_features.py;
                          --features-crosscoder adds each run's own features page in its interp/ folder)
    table.md, table.json  a row per algorithm (and β): n seeds, start/final reward, KL, held-out scores,
                          wall, peak memory, tokens/s, each the mean ± its 95 % interval over the seeds
    index.html            its first lines the verdicts (`stats.verdict`): which reaches the highest final
                          reward, and at what KL, and which ends at the lowest KL, each named only when
                          the seeds resolve it; then all of it, with the last samples of each run

An interrupted comparison continues where it stopped: finished runs are kept, an interrupted run
is resumed from its checkpoint (one with none is started again), a run another process is still
training is refused. One bar counts the phases of all runs and names the running ones. The final
columns average the last 10 phases (fewer in a shorter run: the table says how many). The plan is
saved in OUT/compare.json and must match, but for `--seeds`, which may grow: the same command with
more seeds (the saved ones first) trains the new seeds' runs only. What each run measured is in
OUT/results.json.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from rlhf_scratch.config import TASKS, ConfigError, registry
from rlhf_scratch.pages.html import esc, figure, table
from rlhf_scratch.studies.base import Study
from rlhf_scratch.studies.runner import (
    INTERVAL_NOTE,
    Ledger,
    Unit,
    by_group,
    check_at_least,
    check_choices,
    csv_list,
    interval_cell,
    markdown_table,
    over_seeds,
    parse_study,
    plan_units,
    seed_list,
    train_argv,
    verdict_html,
    write_report,
)
from rlhf_scratch.studies.stats import Verdict, mean_interval, verdict

PROG = "python -m rlhf_scratch.compare"
PLAN_FILE, RESULTS_FILE = "compare.json", "results.json"
LAST = 10  # "final" = the mean of the last 10 phases (fewer if the run is shorter)
TASK_METAVAR = "{" + ",".join(TASKS) + "}"


def compared_by_default() -> list[str]:
    """The algorithms `--algos` defaults to: the registry's that are `compared_by_default`."""
    return [name for name in registry.names() if registry.get(name).compared_by_default]


@dataclass
class CompareArgs:
    """The comparison: which runs, and how to run them."""

    task: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar=TASK_METAVAR, help_behavior_hint="(required)")] = ""
    """The reward every run maximises."""
    algos: str = field(default_factory=lambda: ",".join(compared_by_default()))
    """Comma-separated algorithms, any of the registry's (`ppo,rloo,online_dpo,grpo` adds GRPO)."""
    seeds: str = "1"
    """Comma-separated seeds, a run each per algorithm (and β): the table's mean ± 95 % interval and n,
    the figures' bands. The same command with more seeds continues a comparison, adding their runs."""
    kl_coefs: Annotated[str | None, tyro.conf.arg(name="betas", aliases=("--kl-coefs",))] = None
    """--betas (or its old spelling --kl-coefs): comma-separated β values, a run each per algorithm (the frontier); None: each algorithm's default β."""
    top_ks: str | None = None
    """Comma-separated top-k values (0: the whole vocabulary), a run each per algorithm: the top-k lesson
    (docs/fidelity.md). None: each algorithm's default. One sweep at a time: not with --betas."""
    total_phases: int = 100
    """Phases of every run."""
    prompts: str | None = None
    """As train's --prompts (None: the blog's prefix)."""
    threads: int = 1
    """Torch CPU threads of every run."""
    jobs: int = 1
    """Runs at a time, each its own process (more share the cores, and their wall times say less)."""
    out: str | None = None
    """The comparison folder (None: comparisons/<task>-<time>); the same command again continues it."""
    interp: bool = True
    """The inside view (interp.across_runs): residual drift and per-head DLA change of each tuned model."""
    features: bool = False
    """Add the SAE-features view: do the runs move the same features? (trains an SAE the first time:
    minutes; needs the `sae` extra). Given on a finished comparison, it retrains no run."""
    features_layer: int | None = None
    """The features view's site: this block's residual stream (None: n_layers // 2)."""
    features_d_sae: int = 1024
    """Features of its SAE (as interp.features)."""
    features_tokens: int = 400_000
    """Training tokens of its SAE."""
    features_eval_batches: int = 8
    """Batches of SAE Lens's evals of its SAE."""
    features_top: int = 10
    """Top changed features shown per run."""
    features_dictionary: str = "batchtopk"
    """SAE Lens architecture of its SAE, as interp.features' --dictionary: batchtopk, matryoshka_batchtopk
    or standard (L1)."""
    features_crosscoder: bool = False
    """Also each run's own features page, `python -m interp.features RUN --crosscoder` with the same
    SAE (RUN/interp/features.html and features.json: a crosscoder of the reference vs that run, the
    causal checks, the other levels); minutes per run."""
    features_cc_latents: int = 1024
    """Crosscoder latents of each run's page (interp.features --cc-latents)."""
    features_cc_k: float = 16.0
    """Crosscoder BatchTopK k of each run's page (interp.features --cc-k)."""
    features_cc_tokens: int = 400_000
    """Positions each run's crosscoder trains on (interp.features --cc-tokens)."""
    quick: bool = False
    """Tiny settings, for tests and notebooks: 3 phases of 8 completions of 6 tokens and no inside
    view (`QUICK`), seconds a run; flags given beside it (and after --) still win."""
    train_flags: tyro.conf.Suppress[tuple[str, ...]] = ()
    """The flags after `--`: given to every run's `python -m rlhf_scratch.train`."""

    def algo_names(self) -> list[str]:
        names = csv_list(self.algos, str, "algos")
        check_choices(names, registry.names(), "algos")
        return names

    def seed_list(self) -> list[int]:
        return seed_list(self.seeds)

    def betas(self) -> list[float] | None:
        return csv_list(self.kl_coefs, float, "kl_coefs") if self.kl_coefs else None

    def ks(self) -> list[int] | None:
        return csv_list(self.top_ks, int, "top_ks") if self.top_ks else None

    def settings(self) -> list[tuple[str, float | int] | None]:
        """The swept setting of each run (`SETTING_FLAGS`' tag and a value), or [None]: no sweep."""
        betas, ks = self.betas(), self.ks()
        if betas:
            return [("b", b) for b in betas]
        return [("k", k) for k in ks] if ks else [None]

    def validate(self) -> CompareArgs:
        """Every field checked (one line naming the first bad one), SAE Lens too with --features."""
        if self.task not in TASKS:
            got = f"; got {self.task!r}" if self.task else " (required)"
            raise ConfigError(f"task: must be one of {', '.join(TASKS)}{got}")
        self.algo_names(), self.seed_list()  # each parsed, or its one line
        if any(b < 0 for b in self.betas() or []):
            raise ConfigError(f"kl_coefs: must be >= 0; got {self.kl_coefs}")
        if any(k < 0 for k in self.ks() or []):
            raise ConfigError(f"top_ks: must be >= 0 (0: the whole vocabulary); got {self.top_ks}")
        if self.kl_coefs and self.top_ks:
            raise ConfigError("top_ks: one sweep at a time; give --betas or --top-ks, not both")
        check_at_least(self, ("total_phases", "jobs"))
        if self.features_crosscoder and not self.features:
            raise ConfigError("features_crosscoder: needs --features")
        if self.features:
            from rlhf_scratch.studies.compare_features import check_features_flags

            check_features_flags(self)
        return self

    def run_flags(self) -> list[str]:
        """The flags every run gets (the `--` ones last)."""
        return ["--total-phases", str(self.total_phases), "--threads", str(self.threads),
                *(["--prompts", self.prompts] if self.prompts else []), *self.train_flags]

    def plan(self) -> dict:
        """What makes the comparison (OUT/compare.json): a second call into the folder must match it."""
        sweep = {"top_ks": self.ks()} if self.top_ks else {}  # absent unless given: older plans stay the same plan
        return {"task": self.task, "algos": self.algo_names(), "seeds": self.seed_list(),
                "kl_coefs": self.betas(), **sweep, "train_flags": self.run_flags()}

    def units(self) -> list[Unit]:
        """A run per (algorithm, setting, seed): β is the setting tagged `b` (`ppo-s1-b0.1`), top-k `k` (`ppo-s1-k10`)."""
        return plan_units(self.algo_names(), self.seed_list(), self.settings())


QUICK = {"total_phases": 3, "interp": False}
QUICK_TRAIN_FLAGS = ("--batch-size", "8", "--gen-len", "6", "--num-minibatches", "2", "--warmup-steps", "1")
"""`--quick`: CompareArgs' fields and every run's train flags (the user's flags after -- come after them)."""


SETTING_FLAGS = {"b": "--beta", "k": "--top-k"}
"""A swept setting's tag -> the train flag it sets."""
SETTING_NAMES = {"b": "β", "k": "top-k"}


def label(unit: Unit) -> str:
    """The curve a run belongs to: the algorithm's label, and its swept setting (`RLOO β=0.1`, `PPO top-k=10`)."""
    if unit.setting is None:
        return registry.get(unit.method).label
    return f"{registry.get(unit.method).label} {SETTING_NAMES[unit.setting[0]]}={unit.value:g}"


# --- running -------------------------------------------------------------------------------------


def train_flags(unit: Unit, task: str, run_dir: Path, flags: Sequence[str]) -> list[str]:
    """A new run's `python -m rlhf_scratch.train` flags: its algorithm, seed and setting (β or top-k),
    the algorithm's study flags and `flags`."""
    setting = [] if unit.setting is None else [SETTING_FLAGS[unit.setting[0]], str(unit.value)]
    return [task, "--algo", unit.method, "--seed", str(unit.seed), "--run-dir", str(run_dir),
            *flags, *registry.get(unit.method).study_flags, *setting]


def train_command(unit: Unit, task: str, run_dir: Path, flags: Sequence[str]) -> list[str]:
    """The process of one run (`runner.train_argv`): `python -m rlhf_scratch.train` with `train_flags`
    — or `--resume` of its interrupted run that has a checkpoint."""
    return train_argv(unit.name, run_dir, train_flags(unit, task, run_dir, flags))


def summarize(run_dir: Path, measured: dict) -> dict:
    """One row of the table from a finished run's metrics.jsonl and what its process measured."""
    from rlhf_scratch.engine.runs import read_metrics

    m = read_metrics(run_dir)
    last = m[-LAST:]

    def final(key: str) -> float:
        return statistics.mean(x[key] for x in last)

    row = {"phases": len(m), "averaged": len(last), "reward_start": m[0]["rewards/mean"], "reward_final": final("rewards/mean"),
           "kl_final": final("rollout/kl_full_vocab"), "length_final": final("completions/mean_length"),
           "tokens_per_s": statistics.median(x["charts/tokens_per_s"] for x in m),
           "wall_s": measured["wall_s"], "peak_mib": measured["peak_mib"]}
    for key in ("eval/vader", "eval/ref_logprob_per_token", "eval/repeated_3grams"):
        if key in m[0]:
            row[key + "_start"], row[key + "_final"] = m[0][key], final(key)
    return row


# --- the table and the page ----------------------------------------------------------------------


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


def _cell(rows: list[dict], key: str, fmt: str) -> str:
    """A group's cell over its runs (a row per seed): mean ± 95 % interval; a held-out key
    `start → final`, the start's mean and the final's mean ± interval."""
    if key.startswith("eval/"):
        finals = [r[key + "_final"] for r in rows if key + "_final" in r]
        if not finals:
            return ""
        start = statistics.mean(r[key + "_start"] for r in rows if key + "_start" in r)
        return f"{fmt.format(start)} → {interval_cell(finals, fmt)}"
    return interval_cell([r[key] for r in rows if key in r], fmt)


def group_rows(results: dict[str, dict], units: list[Unit]) -> dict[str, list[dict]]:
    """{curve label: its runs' rows}, a curve per (algorithm, β) over its seeds, runs not finished left out."""
    return {label(g[0]): [results[u.name] for u in g if u.name in results] for g in by_group(units).values()}


def results_table(results: dict[str, dict], units: list[Unit]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the table: a row per algorithm (and β), n its seeds, every cell the mean ±
    95 % interval over them (`runner.interval_cell`), formatted (markdown and HTML alike)."""
    final = averaged_label(results)
    header = ["run", "n", *(title.format(final=final) for _, title, _ in TABLE_COLUMNS)]
    return header, [[name, str(len(rows)), *(_cell(rows, key, fmt) for key, _, fmt in TABLE_COLUMNS)]
                    for name, rows in group_rows(results, units).items() if rows]


def group_stats(results: dict[str, dict], units: list[Unit]) -> dict[str, dict]:
    """table.json's `groups`: per curve its seeds, n, and each numeric column's mean, interval, sd."""
    stats = {}
    for members in by_group(units).values():
        runs = [results[u.name] for u in members if u.name in results]
        entry: dict = {"seeds": [u.seed for u in members if u.name in results], "n": len(runs)}
        for key in (runs[0] if runs else {}):
            if key not in ("phases", "averaged") and all(key in r for r in runs):
                values = [r[key] for r in runs]
                entry[key] = {**mean_interval(values).as_json(), "values": values}
        stats[label(members[0])] = entry
    return stats


def comparison_verdict(results: dict[str, dict], units: list[Unit]) -> Verdict:
    """The page's first line: which curve reaches the highest final proxy reward, and at what KL,
    named only when its seeds resolve it against every other (`stats.verdict`)."""
    rewards = over_seeds(units, lambda u: results.get(u.name, {}).get("reward_final"))
    kls = over_seeds(units, lambda u: results.get(u.name, {}).get("kl_final"))
    groups = by_group(units)
    names = {group: label(members[0]) for group, members in groups.items()}
    notes = {names[g]: f" at KL {mean_interval(list(kl.values())).cell()}" for g, kl in kls.items() if kl}
    return verdict({names[g]: v for g, v in rewards.items()}, f"proxy reward ({averaged_label(results)})",
                   notes=notes)


def kl_verdict(results: dict[str, dict], units: list[Unit]) -> Verdict:
    """The page's second line: which curve ends at the lowest KL(π‖π_ref), named only when its seeds
    resolve it against every other (`stats.verdict`, lower is better)."""
    kls = over_seeds(units, lambda u: results.get(u.name, {}).get("kl_final"))
    names = {group: label(members[0]) for group, members in by_group(units).items()}
    return verdict({names[g]: v for g, v in kls.items()}, f"KL ({averaged_label(results)})", higher_is_better=False)


def last_samples(run_dir: Path, n: int = 3) -> str:
    """The last sample table of a run's samples.md, its first `n` rows."""
    from rlhf_scratch.engine.runs import SAMPLES_FILE

    section = (run_dir / SAMPLES_FILE).read_text().split("## phase ")[-1]
    lines = section.splitlines()
    return "\n".join([f"phase {lines[0]}", *[l for l in lines[1:] if l.startswith("|")][: n + 2]])


def page_body(results: dict[str, dict], figures: list[Path], inside: dict | None, units: list[Unit], out: Path,
              features_parts: list[str], findings: Sequence[Verdict]) -> list[str]:
    """index.html's parts: the verdict, the table, the figures, the inside view, the features view,
    the last samples."""
    header, rows = results_table(results, units)
    title = " vs ".join(dict.fromkeys(registry.get(unit.method).label for unit in units))
    parts = [f"<h1>{esc(title)}</h1>", verdict_html([f.sentence for f in findings]),
             "<p>Same prompts, seeds, reward and generated tokens per phase. Proxy = the training reward. "
             "Held out = judges the runs never trained on (rlhf_scratch/reward/heldout.py). Final = mean of the "
             f"{esc(averaged_label(results))}. {esc(INTERVAL_NOTE)}</p>", table(rows, header=header),
             *map(figure, figures)]
    if inside is not None:
        labels = inside["labels"]
        cosines = [[l, *("nan" if v is None else f"{v:+.2f}" for v in row)]
                   for l, row in zip(labels, inside["dla_change_cosine"])]
        parts.append("<h2>What each changed inside</h2><p>Cosine of the per-head DLA-change vectors "
                     "(1 = the same heads moved the same way):</p>" + table(cosines, header=["", *labels]))
    parts += features_parts
    parts.append("<h2>Last samples</h2>")
    parts += [f"<h3>{esc(u.name)}</h3><pre>{esc(last_samples(out / 'runs' / u.name))}</pre>" for u in units]
    return parts


# --- the study -----------------------------------------------------------------------------------


DESCRIPTION = __doc__.split("\n\n")[0]
"""--help's first paragraph: the module docstring's."""


class CompareStudy(Study[CompareArgs]):
    """The comparison as a `Study`: a train run per unit, and its report."""

    prog, description, args_class, kind = PROG, DESCRIPTION, CompareArgs, "comparison"
    plan_file, ledger_file = PLAN_FILE, RESULTS_FILE

    def parse(self, argv: list[str]) -> CompareArgs:
        """The comparison's args from its command line, validated: the flags after `--` go to every
        run, --quick starts from `QUICK` (the flags given, and those after --, still win). Bad input
        is a ConfigError of one line."""
        cut = argv.index("--") if "--" in argv else len(argv)
        quick = "--quick" in argv[:cut]
        default = CompareArgs(**(QUICK if quick else {}),
                              train_flags=(*(QUICK_TRAIN_FLAGS if quick else ()), *argv[cut + 1:]))
        description = self.description + " Flags after -- go to every `python -m rlhf_scratch.train` run."
        return parse_study(CompareArgs, argv[:cut], default=default, prog=PROG, description=description)

    def folder(self, args: CompareArgs) -> Path:
        return Path(args.out or f"comparisons/{args.task}-{time.strftime('%Y%m%d-%H%M%S')}")

    def train_flags(self, args: CompareArgs, unit: Unit, run_dir: Path) -> list[str]:
        return train_flags(unit, args.task, run_dir, args.run_flags())

    def report(self, args: CompareArgs, out: Path, ledger: Ledger) -> str:
        """The figures, the table and the page; the verdicts and the table to print."""
        from rlhf_scratch.engine.runs import read_metrics
        from rlhf_scratch.studies.compare_figures import inside_view, plot_comparison

        units = args.units()
        run_dirs = {unit.name: self.run_dir(out, unit) for unit in units}
        results = {u.name: summarize(run_dirs[u.name], ledger[u.name]) for u in units}
        groups = by_group(units).values()
        metrics = {label(g[0]): [read_metrics(run_dirs[u.name]) for u in g] for g in groups}
        figures = plot_comparison(metrics, out, LAST)
        inside = None
        if args.interp:
            inside_png, inside = inside_view({label(g[0]): run_dirs[g[0].name] for g in groups}, out)
            figures.append(inside_png)
        features, features_parts = None, []
        if args.features:
            from rlhf_scratch.studies.compare_features import features_of_runs

            features, features_parts = features_of_runs(args, run_dirs, out)
        finding, kl_finding = comparison_verdict(results, units), kl_verdict(results, units)
        table_md = markdown_table(*results_table(results, units)) + f"\n\n{INTERVAL_NOTE}"
        page = write_report(out, title="rlhf_scratch comparison", table_md=table_md,
                            data={"verdict": finding.sentence, "verdict_kl": kl_finding.sentence,
                                  "groups": group_stats(results, units), "runs": results, "inside": inside,
                                  "features": features},
                            body=page_body(results, figures, inside, units, out, features_parts, [finding, kl_finding]))
        said = [finding.sentence + "\n" + kl_finding.sentence + "\n", table_md]
        if inside is not None:
            said.append("\nper-head DLA-change cosine: "
                        + json.dumps(dict(zip(inside["labels"], inside["dla_change_cosine"]))))
        if features is not None:
            said.append("SAE feature-change cosine: " + json.dumps(dict(zip(features["labels"], features["cosine"]))))
            for k, m in features["jaccard"].items():
                said.append(f"top-{k} Jaccard (chance {features['chance_jaccard'][k]}): "
                            + json.dumps(dict(zip(features["labels"], m))))
        return "\n".join([*said, f"\nwrote {page}"])


STUDY = CompareStudy()
main = STUDY.main
"""`python -m rlhf_scratch.compare TASK [--flag value …] [-- train flags …]`."""
compare_args = STUDY.parse
"""The comparison's args from its command line (`CompareStudy.parse`)."""
run_comparison = STUDY.run
"""Train the runs not done yet, then write the figures, the table and the page, and print them."""


if __name__ == "__main__":
    sys.exit(main())
