"""The GRPO length lesson as a study: on a right/wrong reward blind to length, does a loss's average
over tokens make the answers it pushes down (A < 0) longer than the ones it pushes up (A > 0)?

    python -m rlhf_scratch.studies.length --out studies/length                    # the defaults, one seed
    python -m rlhf_scratch.studies.length --out studies/length --seeds 1,2,3      # … three (or more later)
    python -m rlhf_scratch.studies.length --methods grpo,dr_grpo,dapo,rloo,sapo,luspo --out s/
    python -m rlhf_scratch.studies.length --quick --seeds 1,2 --out s/             # tiny: tests (`QUICK`)

**The task** is `first_token` (reward/tasks.py, `reward_fn_first_token`): r = 1 if the completion's
first generated token is one of nine fixed tokens, else 0. Every later token, EOS included, is
free, so the true gradient has no part that changes length after the first token: whatever
length does is the estimator's. Completions continue the blog's prefix, stop at EOS, and have room
to grow (`gen_len` 64; the tiny LM's run 25 tokens on average, from 2 to 64).

**The methods** are GRPO's loss types (`--methods`: any of config.GRPO_LOSS_TYPES) and RLOO (`rloo`),
each a `python -m rlhf_scratch.train first_token` run per seed, its own process (`studies.runner`),
all with the same prompts, batch, G, phases, learning rate and seed; β = 0 and top-k 0 for all, GRPO
at `scale_rewards="group"` whatever its loss type: only the advantage and the average over tokens
differ. The runs write OUT/runs/<method>-s<seed>/; every run logs `completions/mean_length_neg_adv`
and `_pos_adv` (the mean length of the completions with A < 0 and A > 0; NaN in a phase with none).

**What is reported** (`length_by_sign`): the phases cut into blocks of `--block`, and in each block
each run's mean over the phases that have a value; per method the mean over seeds with its 95 %
interval and n (`stats.py`). The study's number is the *gap* = length(A < 0) − length(A > 0), per
run the mean over its late phases (the second half) that have both signs; the verdict says which
method's gap is largest, and each method's gap against RLOO's (the estimator without a length
weight; against `dr_grpo`'s when RLOO is not run), paired over seeds, only where the seeds resolve it.

**The microscope beside it** (`microscope_lesson`): the exact-gradient microscope's own length lesson
(rlhf_scratch/microscope, docs/exact.md), recomputed here with its own code and seeds: per unit of J
gained, how many tokens each estimator's expected update adds to right and to wrong answers, where
the true gradient adds exactly 0 — the direction and size the runs are held against.

Writes OUT/table.md and table.json (a row per method; the lengths by block; the microscope's
numbers), length.png (reward, mean length, length of A < 0 and A > 0, and the gap per block, bands
over seeds), index.html (the verdicts first), OUT/times.json (each run's wall time and peak memory).
The same command continues an interrupted study; `--seeds` may grow (the finished runs are kept).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Annotated

import tyro

from rlhf_scratch.config import GRPO_LOSS_TYPES, ConfigError
from rlhf_scratch.pages.html import bullets, esc, figure, new_figure, save_figure, table
from rlhf_scratch.studies.base import Study
from rlhf_scratch.studies.length_microscope import MICROSCOPE_HEADER, microscope_lesson, microscope_rows
from rlhf_scratch.studies.runner import (
    INTERVAL_NOTE,
    Ledger,
    Unit,
    by_group,
    check_at_least,
    check_choices,
    csv_list,
    draw_band,
    interval_cell,
    markdown_table,
    over_seeds,
    plan_units,
    seed_list,
    train_argv,
    verdict_html,
    write_report,
)
from rlhf_scratch.studies.stats import mean_interval, verdict

PROG = "python -m rlhf_scratch.studies.length"
PLAN_FILE, TIMES_FILE, MICROSCOPE_FILE = "study.json", "times.json", "microscope.json"
RLOO = "rloo"
METHODS = (*GRPO_LOSS_TYPES, RLOO)
"""What `--methods` may name: a GRPO loss type (a GRPO run with that `--loss-type`) or RLOO."""
UNBIASED = (RLOO, "dr_grpo")
"""The methods the others are held against, the first that was run: no length weight in expectation."""
NEG, POS = "completions/mean_length_neg_adv", "completions/mean_length_pos_adv"


def label(method: str) -> str:
    return "RLOO" if method == RLOO else f"GRPO {method}"


@dataclass
class LengthArgs:
    """The length study: which methods, over which seeds, at which settings."""

    out: Annotated[str, tyro.conf.arg(help_behavior_hint="(required)")] = ""
    """The study folder; the same command again continues the study there."""
    methods: str = "grpo,dr_grpo,dapo,rloo"
    """Comma-separated: GRPO loss types (grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo) and rloo."""
    seeds: str = "1"
    """Comma-separated seeds, a run each per method (the tables' mean ± 95 % interval and n, the bands).
    The same command with more seeds (the saved ones first) runs only the new seeds' runs."""
    total_phases: int = 20
    """Phases of every run. At the default learning rate the reward reached 1 (every group all right,
    every advantage 0, nothing more to learn) within about 14 phases in one exploratory seed (docs/grpo.md)."""
    batch_size: int = 64
    """Completions per phase: batch_size / num_generations groups of the one prompt."""
    num_generations: int = 8
    """G of every method, RLOO's too (its own default is 4): the same groups for all."""
    gen_len: int = 64
    """Most tokens of a completion; it ends at its first EOS (room to grow: the tiny LM's average 25)."""
    base_lr: float = 3e-4
    """Learning rate of every run (the tiny preset's 1e-4 three times: the effect accumulates while
    the groups are mixed, so the study wants the whole climb of the reward in few phases)."""
    warmup_steps: int = 3
    """Phases of learning-rate warm-up (phase 1 trains at learning rate 0, so phases 1–2 sample the start)."""
    block: int = 4
    """Phases per block of the lengths-over-phases table and figure."""
    threads: int = 1
    """Torch threads of each run."""
    jobs: int = 1
    """Runs at a time, each its own process (more share the cores, and their wall times say less)."""
    microscope_draws: int = 10_000
    """Monte-Carlo batches per policy of the microscope's length lesson (its own default: the numbers of
    docs/exact.md, exactly)."""
    quick: bool = False
    """Tiny settings for tests (`QUICK`: 3 phases of 8 completions of at most 8 tokens, 50 microscope
    batches; seconds a run, and its verdict says nothing); flags given beside it still win."""

    def method_names(self) -> list[str]:
        names = csv_list(self.methods, str, "methods")
        check_choices(names, METHODS, "methods")
        if len(set(names)) != len(names):
            raise ConfigError(f"methods: each method once; got {self.methods}")
        return names

    def seed_list(self) -> list[int]:
        return seed_list(self.seeds)

    def validate(self) -> LengthArgs:
        """Every field checked; one line naming the first bad one."""
        if not self.out:
            raise ConfigError("out: required (the study folder)")
        self.method_names(), self.seed_list()
        check_at_least(self, ("block", "jobs"))
        check_at_least(self, ("microscope_draws",), 2)
        if not (math.isfinite(self.base_lr) and self.base_lr > 0):
            raise ConfigError(f"base_lr: must be > 0; got {self.base_lr}")
        from rlhf_scratch.config import make_args  # no torch: each run's own rules, before a folder is made

        for algo in dict.fromkeys("rloo" if m == RLOO else "grpo" for m in self.method_names()):
            make_args("tiny", algo, **self.run_fields())
        return self

    def run_fields(self) -> dict:
        """The train fields every run shares (`run_flags` on the command line)."""
        return dict(task="first_token", prompts="prefix", stop_at_eos=True, gen_len=self.gen_len,
                    batch_size=self.batch_size, num_generations=self.num_generations, total_phases=self.total_phases,
                    base_lr=self.base_lr, warmup_steps=self.warmup_steps, beta=0.0, top_k=0, threads=self.threads)

    def plan(self) -> dict:
        """What makes the study (OUT/study.json): everything but the folder and how it is run."""
        skip = ("out", "threads", "jobs", "quick", "block")  # block: how the report cuts the phases, not what runs
        return {**{k: v for k, v in asdict(self).items() if k not in skip}, "methods": self.method_names(),
                "seeds": self.seed_list()}

    def units(self) -> list[Unit]:
        """A run per (method, seed): `grpo-s1`, `rloo-s2`."""
        return plan_units(self.method_names(), self.seed_list())

    def run_flags(self) -> list[str]:
        """What every run shares: the task, the one prompt stopping at EOS, the batch, the schedule."""
        return ["first_token", "--prompts", "prefix", "--stop-at-eos", "--gen-len", str(self.gen_len),
                "--batch-size", str(self.batch_size), "--num-generations", str(self.num_generations),
                "--total-phases", str(self.total_phases), "--base-lr", str(self.base_lr),
                "--warmup-steps", str(self.warmup_steps), "--beta", "0", "--top-k", "0", "--threads", str(self.threads),
                "--save-every", "5", "--table-every", str(self.total_phases), "--plot-every", str(self.total_phases),
                "--no-save-model"]


QUICK = {"total_phases": 3, "batch_size": 8, "num_generations": 4, "gen_len": 8, "warmup_steps": 1, "block": 2,
         "microscope_draws": 50}
"""`--quick`: LengthArgs' fields for a study of seconds."""


def train_flags(unit: Unit, args: LengthArgs, run_dir: Path) -> list[str]:
    """A new run's `python -m rlhf_scratch.train` flags: GRPO with `--loss-type <method>`, or RLOO, at
    the study's flags."""
    algo = ["--algo", RLOO] if unit.method == RLOO else ["--algo", "grpo", "--loss-type", unit.method]
    flags = args.run_flags()
    return [flags[0], *algo, "--seed", str(unit.seed), "--run-dir", str(run_dir), *flags[1:]]


def train_command(unit: Unit, args: LengthArgs, run_dir: Path) -> list[str]:
    """The process of one run, `train_flags` (`runner.train_argv`: or `--resume` of its interrupted run)."""
    return train_argv(unit.name, run_dir, train_flags(unit, args, run_dir))


# --- the numbers ---------------------------------------------------------------------------------


def _nanmean(values: Sequence[float | int]) -> float:
    """The mean of the finite values; NaN when there are none."""
    finite = [v for v in values if math.isfinite(v)]
    return statistics.fmean(finite) if finite else math.nan


def blocks_of(total_phases: int, block: int) -> list[tuple[int, int]]:
    """Phases 1..total cut into (first, last) blocks of `block` (the last may be shorter)."""
    return [(a, min(a + block - 1, total_phases)) for a in range(1, total_phases + 1, block)]


def late_phases(total_phases: int) -> tuple[int, int]:
    """The second half of a run's phases, (first, last): the phases after total_phases // 2."""
    return total_phases // 2 + 1, total_phases


def length_by_sign(metrics: Sequence[dict], blocks: Sequence[tuple[int, int]]) -> dict:
    """One run's lengths, from its metrics.jsonl (a dict per phase with `phase`, NEG and POS):

        neg, pos    per block, the mean over its phases of the mean length of the A < 0 (A > 0)
                    completions, phases without any left out (NaN: none in the whole block)
        gap         per block, the mean over its phases that have both of neg − pos
        late_*      the same over the run's second half (`late_phases`)

    A phase's length is averaged as one number whatever the number of completions behind it."""
    by_phase = {m["phase"]: m for m in metrics}

    def over(first: int, last: int) -> dict[str, float]:
        ms = [by_phase[p] for p in range(first, last + 1) if p in by_phase]
        return {"neg": _nanmean([m[NEG] for m in ms]), "pos": _nanmean([m[POS] for m in ms]),
                "gap": _nanmean([m[NEG] - m[POS] for m in ms])}

    per_block = [over(a, b) for a, b in blocks]
    late = over(*late_phases(max(by_phase)))
    return {"neg": [b["neg"] for b in per_block], "pos": [b["pos"] for b in per_block],
            "gap": [b["gap"] for b in per_block], **{f"late_{k}": v for k, v in late.items()}}


def summarize(metrics: Sequence[dict], blocks: Sequence[tuple[int, int]], measured: dict) -> dict:
    """One run's row: its lengths by sign (`length_by_sign`), the reward and mean length of the first
    and last block, the gap's growth per unit of reward gained, its wall time and memory."""
    by_block = length_by_sign(metrics, blocks)
    first, last = blocks[0], blocks[-1]

    def block_mean(key: str, span: tuple[int, int]) -> float:
        return _nanmean([m[key] for m in metrics if span[0] <= m["phase"] <= span[1]])

    row = {**by_block, "reward_first": block_mean("rewards/mean", first), "reward_last": block_mean("rewards/mean", last),
           "length_first": block_mean("completions/mean_length", first),
           "length_last": block_mean("completions/mean_length", last),
           "reward_late": block_mean("rewards/mean", late_phases(metrics[-1]["phase"])),
           "length_late": block_mean("completions/mean_length", late_phases(metrics[-1]["phase"])),
           "wall_s": measured["wall_s"], "peak_mib": measured["peak_mib"]}
    gained = row["reward_late"] - row["reward_first"]
    row["gap_growth_per_reward"] = (row["late_gap"] - by_block["gap"][0]) / gained if gained > 0 else math.nan
    return row


def _cell(values: Sequence[float | int], fmt: str = "{:.1f}") -> str:
    """mean ± interval over the finite values, with their n when some seed has none: `24.1 ± 2.0 (n 2)`."""
    finite = [v for v in values if math.isfinite(v)]
    cell = interval_cell(finite, fmt) or "—"
    return cell if len(finite) == len(values) else f"{cell} (n {len(finite)})"


# --- the report ----------------------------------------------------------------------------------


TABLE_HEADER = ["method", "n", "reward, first block → last", "mean length, first block → last",
                "length A<0, late", "length A>0, late", "gap A<0 − A>0, first block", "gap, late",
                "gap growth per unit of reward", "wall (s)"]


def _column(runs: list[dict], key: str) -> list[float | int]:
    return [r[key] for r in runs]


def results_table(results: dict[str, dict], units: list[Unit]) -> list[list[str]]:
    """A row per method over its finished seeds (mean ± 95 % interval, n)."""
    rows = []
    for (method, _), members in by_group(units).items():
        runs = [results[u.name] for u in members if u.name in results]
        if not runs:
            continue
        col = partial(_column, runs)
        rows.append([label(method), str(len(runs)),
                     f"{_cell(col('reward_first'), '{:.2f}')} → {_cell(col('reward_last'), '{:.2f}')}",
                     f"{_cell(col('length_first'))} → {_cell(col('length_last'))}",
                     _cell(col("late_neg")), _cell(col("late_pos")), _cell([r["gap"][0] for r in runs]),
                     _cell(col("late_gap")), _cell(col("gap_growth_per_reward")), _cell(col("wall_s"), "{:.0f}")])
    return rows


def blocks_table(results: dict[str, dict], units: list[Unit], blocks: Sequence[tuple[int, int]]) -> tuple[list, list]:
    """(header, rows): per method the length of its A < 0 and A > 0 completions and the gap, block by block."""
    header = ["method", "", *(f"phases {a}–{b}" for a, b in blocks)]
    rows = []
    for (method, _), members in by_group(units).items():
        runs = [results[u.name] for u in members if u.name in results]
        if runs:
            for key, what in (("neg", "A < 0"), ("pos", "A > 0"), ("gap", "gap")):
                rows.append([label(method), what, *(_cell([r[key][i] for r in runs]) for i in range(len(blocks)))])
    return header, rows


GROUP_KEYS = ("late_gap", "late_neg", "late_pos", "gap_growth_per_reward", "reward_late", "length_last", "length_late",
              "wall_s")


def group_stats(results: dict[str, dict], units: list[Unit]) -> dict[str, dict]:
    """table.json's `groups`: per method its seeds and, for each of `GROUP_KEYS`, the mean, interval,
    sd and n over the seeds where it is finite, and the values."""
    stats = {}
    for (method, _), members in by_group(units).items():
        runs = [results[u.name] for u in members if u.name in results]
        entry: dict = {"seeds": [u.seed for u in members if u.name in results]}
        for key in GROUP_KEYS:
            values = [r[key] for r in runs if math.isfinite(r[key])]
            if values:
                entry[key] = {**mean_interval(values).as_json(), "values": values}
        stats[label(method)] = entry
    return stats


def verdicts(results: dict[str, dict], units: list[Unit], key: str, what: str, *, higher_is_better: bool = True,
             fmt: str = "{:.2f}") -> list[str]:
    """Which method's `key` (a run's number: `late_gap`, `late_pos`) is the highest (lowest if not
    `higher_is_better`), named only when the seeds resolve it (`stats.verdict`); then each other method
    against the unbiased reference (`UNBIASED`, the first that was run), paired over seeds."""
    values = over_seeds(units, lambda u: _finite(results.get(u.name, {}).get(key)))
    named = {label(method): v for (method, _), v in values.items()}
    sentences = [verdict(named, what, fmt=fmt, higher_is_better=higher_is_better).sentence]
    methods = [m for (m, _) in values]
    reference = next((m for m in UNBIASED if m in methods), None)
    for method in methods:
        if reference is not None and method != reference:
            pair = {label(method): values[(method, None)], label(reference): values[(reference, None)]}
            sentences.append(verdict(pair, what, fmt=fmt, higher_is_better=higher_is_better).sentence)
    return sentences


def aggregation_verdict(results: dict[str, dict], units: list[Unit], what: str) -> list[str]:
    """Dr. GRPO's own comparison, named before the study ran: `grpo` against `dr_grpo`, which differ in the
    aggregation alone (1/|o_i| per sequence against one constant), paired over seeds on the late mean
    length of every completion. Empty unless both were run."""
    values = over_seeds(units, lambda u: _finite(results.get(u.name, {}).get("length_late")))
    if ("grpo", None) not in values or ("dr_grpo", None) not in values:
        return []
    pair = {label("grpo"): values[("grpo", None)], label("dr_grpo"): values[("dr_grpo", None)]}
    return [verdict(pair, what, fmt="{:.1f}", higher_is_better=False).sentence]


def study_findings(results: dict[str, dict], units: list[Unit], total_phases: int) -> tuple[list[str], list[str]]:
    """(the page's findings, the pairs against the reference): the aggregation verdict first when both
    grpo and dr_grpo ran, then the largest late gap, the shortest A > 0 and the shortest completions;
    each sentence once (of two methods the pair against the reference is the verdict over all, and
    without RLOO the grpo pair on the mean length is the aggregation verdict: same rounding, said once)."""
    first, last = late_phases(total_phases)
    gap = verdicts(results, units, "late_gap", f"length gap, A < 0 minus A > 0 (tokens, phases {first}–{last})")
    right = verdicts(results, units, "late_pos", f"length of the A > 0 completions (tokens, phases {first}–{last})",
                     higher_is_better=False)
    # every completion's length: defined in every late phase, where A<0 / A>0 are missing once a whole group is right
    what = f"mean completion length (tokens, phases {first}–{last})"
    length = verdicts(results, units, "length_late", what, higher_is_better=False, fmt="{:.1f}")
    aggregation = aggregation_verdict(results, units, what)
    findings = list(dict.fromkeys([*aggregation, gap[0], right[0], length[0]]))
    return findings, [s for s in dict.fromkeys([*gap[1:], *right[1:], *length[1:]]) if s not in findings]


def _finite(x: float | int | None) -> float | int | None:
    return x if x is not None and math.isfinite(x) else None


def plot_lengths(results: dict[str, dict], curves: dict[str, list[list[dict]]], units: list[Unit],
                 blocks: Sequence[tuple[int, int]], out: Path) -> Path:
    """length.png: reward and mean length per phase, and the A < 0 and A > 0 lengths and their gap per
    block; each method's mean over seeds with its 95 % band."""
    fig, axes = new_figure(1, 5, figsize=(22.0, 4.0))
    centres = [(a + b) / 2 for a, b in blocks]
    for (method, _), members in by_group(units).items():
        runs = [u for u in members if u.name in results]
        if not runs:
            continue
        name = label(method)
        for ax, key in zip(axes[:2], ("rewards/mean", "completions/mean_length")):
            per_seed = curves[name]
            draw_band(ax, [[m["phase"] for m in r] for r in per_seed], [[m[key] for m in r] for r in per_seed], label=name)
        for ax, key in zip(axes[2:], ("neg", "pos", "gap")):
            draw_band(ax, [centres] * len(runs), [results[u.name][key] for u in runs], label=name, marker=".")
    titles = ["reward (first token right)", "mean completion length, tokens", "length of completions with A < 0",
              "length of completions with A > 0", "gap: length(A < 0) − length(A > 0)"]
    for ax, title in zip(axes, titles):
        ax.set(title=title, xlabel="phase")
        ax.grid(alpha=0.3)
    axes[4].axhline(0, color="k", lw=0.8)
    axes[0].legend(fontsize=8)
    return save_figure(fig, out / "length.png")


def page_body(findings: list[str], pairs: list[str], settings: str, table_rows: list, blocks_header: list,
              blocks_rows: list, fig: Path, microscope: dict | None) -> list[str]:
    """index.html's parts: the verdicts (Dr. GRPO's own pair first), each method against the reference, the settings, the
    table, the figure, the lengths block by block, the microscope's numbers."""
    parts = ["<h1>The GRPO length lesson: task first_token</h1>", verdict_html(findings),
             bullets(pairs), f"<p>{esc(settings)}</p>",
             table(table_rows, header=TABLE_HEADER), f"<p>{esc(INTERVAL_NOTE)}</p>", figure(fig),
             "<h2>Lengths over phases</h2>", table(blocks_rows, header=blocks_header)]
    if microscope is not None:
        parts += ["<h2>What the microscope computes exactly</h2>",
                  "<p>rlhf_scratch/microscope's length lesson (docs/exact.md), with its own code and seeds: tokens of expected "
                  "length per unit of J gained, from the rows after the first token. The true gradient's is exactly 0 "
                  "there: the right/wrong reward is decided by the first token.</p>",
                  table(microscope_rows(microscope), header=MICROSCOPE_HEADER)]
    return parts


# --- the study -----------------------------------------------------------------------------------


DESCRIPTION = __doc__.split("\n\n")[0]
"""--help's first paragraph: the module docstring's."""


class LengthStudy(Study[LengthArgs]):
    """The length study as a `Study`: a train run per (method, seed), the microscope once, its report."""

    prog, description, args_class, quick, kind = PROG, DESCRIPTION, LengthArgs, QUICK, "length study"
    plan_file, ledger_file = PLAN_FILE, TIMES_FILE

    def train_flags(self, args: LengthArgs, unit: Unit, run_dir: Path) -> list[str]:
        return train_flags(unit, args, run_dir)

    def report(self, args: LengthArgs, out: Path, ledger: Ledger) -> str:
        """The microscope's lesson once, then the tables, the figure and the page; the verdicts and the
        table to print."""
        microscope_path = out / MICROSCOPE_FILE
        if not microscope_path.is_file():
            print(f"the microscope's length lesson: {args.microscope_draws:,} batches per policy", file=sys.stderr)
            with ledger.timing("microscope"):
                microscope_path.write_text(json.dumps(microscope_lesson(args.microscope_draws), indent=1))
        microscope = json.loads(microscope_path.read_text())

        from rlhf_scratch.engine.runs import read_metrics

        units = args.units()
        blocks = blocks_of(args.total_phases, args.block)
        metrics = {u.name: read_metrics(self.run_dir(out, u)) for u in units}
        results = {u.name: summarize(metrics[u.name], blocks, ledger[u.name]) for u in units}
        findings, pairs = study_findings(results, units, args.total_phases)
        curves = {label(g[0].method): [metrics[u.name] for u in g] for g in by_group(units).values()}
        fig = plot_lengths(results, curves, units, blocks, out)
        rows = results_table(results, units)
        blocks_header, blocks_rows = blocks_table(results, units, blocks)
        settings = (f"The prefix \"This movie was really\", {args.batch_size // args.num_generations} groups of "
                    f"G = {args.num_generations} per phase, at most {args.gen_len} tokens (ending at EOS), "
                    f"{args.total_phases} phases at learning rate {args.base_lr:g} ({args.warmup_steps} of warm-up), "
                    "β = 0, top-k 0. Late = the second half of the phases; first block = phases "
                    f"{blocks[0][0]}–{blocks[0][1]}. Gap growth per unit of reward = (late gap − first block's) ÷ "
                    "(late reward − first block's): the runs' counterpart of the microscope's tokens per unit of J.")
        table_md = "\n\n".join([markdown_table(TABLE_HEADER, rows), markdown_table(blocks_header, blocks_rows),
                                 markdown_table(MICROSCOPE_HEADER, microscope_rows(microscope)), INTERVAL_NOTE])
        page = write_report(out, title="rlhf_scratch length study", table_md=table_md,
                            data={"verdicts": findings, "against_reference": pairs, "settings": args.plan(),
                                  "blocks": blocks, "groups": group_stats(results, units),
                                  "runs": results, "microscope": microscope, "times": ledger.seconds()},
                            body=page_body(findings, pairs, settings, rows, blocks_header, blocks_rows, fig, microscope))
        return "\n".join(["\n".join([*findings, *pairs]) + "\n", table_md, f"\nwrote {page}"])


STUDY = LengthStudy()
main = STUDY.main
"""`python -m rlhf_scratch.studies.length --out DIR [--flag value …]`."""
length_args = STUDY.parse
"""The study's args from its command line, validated; --quick starts from `QUICK` (flags given still win)."""
run_study = STUDY.run
"""Train the runs not done yet, compute the microscope's lesson once, then write the tables, the
figure and the page, and print the verdicts and the table."""


if __name__ == "__main__":
    sys.exit(main())
