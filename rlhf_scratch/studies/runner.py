"""What every study shares, written once: a study adds its plan and its report, nothing else.

    def main(argv):                                            # a study's command line, whole
        return study_main(lambda: parse_study(MyArgs, argv, default=MyArgs(), prog=..., description=...), run)

    def run(args):
        check_runs([(u.name, train_flags_of(u)) for u in plan_units(...)])      # each run's settings, before the folder
        out = open_study(Path(args.out), args.plan(), "study.json", "study")   # new, or the same plan again
        ledger = Ledger(out / "times.json")                                   # what each finished unit measured
        run_jobs([Job(u.name, command_of(u), folder_of(u), steps=phases) for u in plan_units(...)], ledger,
                 parallel=args.jobs)
        write_report(out, title, markdown_table(header, rows), data, body)     # table.md, table.json, index.html

The table's cells are means over seeds with their interval (`interval_cell`), a figure's curves
carry bands (`draw_band`), and the page opens with `verdict_html(stats.verdict(...).sentence)`.

- **Units.** A study's work is a list of units: a method (a registered algorithm, or a study's own
  such as best-of-n) under a setting (β = 0.1, a 250-pair proxy) with a seed. A unit is one process
  and one folder. Units that differ only in their seed form a group: one row of the table (mean ±
  95 % interval over its seeds, and n: `stats.py`) and one curve of a figure, drawn with its band
  (`draw_band`).
- **Plan.** OUT/<plan file> is written by the first call. The same command again continues the
  study: a finished unit is not redone. A different plan into the same folder is refused with one
  line naming what differs; a folder holding anything else is never taken over. One field may
  grow: `seeds` (`GROWS`). The same plan with more seeds, the saved ones first in their order
  (`--seeds 1,2` then `--seeds 1,2,3`), is the same study made larger: the plan file is rewritten
  and only the new seeds' units run. Fewer or other seeds are a different plan.
- **Seeds.** `--seeds` is every study's flag (`seed_list`: distinct ints); the table's n counts them
  and the page opens with the verdict over them (`stats.verdict`, `verdict_html`): a method is
  named best only when its seeds say so.
- **Processes.** Every unit runs in a process of its own, `parallel` at a time, so each has its own
  wall time and peak memory (`os.wait4`) and a crash stays in one unit. One progress bar counts the
  steps of every unit (a training run's phases, read from its status.json while it runs).
- **Checks first.** Every unit's run is checked as its own process will check it before the
  study's folder is written (`check_runs`): a plan that cannot run is never saved, so it never
  stands in the way of the corrected command.
- **Errors.** Bad input is one line, `error: <field>: <rule>`, exit code 2, nothing written. A unit
  that fails is a RuntimeError carrying its process's last `error:` line: no further unit starts,
  and the command says to run it again to continue (exit code 1; Ctrl-C: 130).

This module imports no torch: a study answers a bad flag at once.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rlhf_scratch.config import CommonArgs, ConfigError, check_seed
from rlhf_scratch.config.cli import parse_dataclass
from rlhf_scratch.config.command import command
from rlhf_scratch.pages.html import esc, page
from rlhf_scratch.studies.stats import Number, mean_interval

A = TypeVar("A")

# --- the command line ------------------------------------------------------------------------------


def parse_study(cls: type[A], argv: list[str], *, default: A, prog: str, description: str,
                aliases: dict[str, str] | None = None) -> A:
    """`cls` from `argv` over `default` (`cli.parse_dataclass`: tyro; anything it rejects is one
    ConfigError line), then `validate()`d: a study's args name their first bad field in one line.
    `aliases`: another spelling of a flag (`{"--seed": "--seeds"}`)."""
    return parse_dataclass(cls, argv, default=default, prog=prog, description=description,
                           aliases=aliases).validate()


class StudyStopped(RuntimeError):
    """A study's unit failed or a run refused: one line, and the same command continues the study (exit 1)."""


AGAIN = "run the same command again to continue"


def study_main(parse: Callable[[], A], run: Callable[[A], None]) -> int:
    """A study's error contract, for every study alike, through the one wrapper every command uses
    (`config.command.command`). `parse()` fails with one ConfigError line (exit 2, before anything is
    written; `--help` exits 0); `run(args)` may still refuse bad input the same way (its folder, a
    layer a model lacks: exit 2), or fail in a unit (exit 1) or stop at Ctrl-C (exit 130), both with
    one line that says the same command continues it."""

    def run_study(args: A) -> int:
        try:
            run(args)
        except ConfigError:  # bad input found once the study looked: nothing to continue
            raise
        except KeyboardInterrupt:
            raise KeyboardInterrupt(AGAIN) from None
        except (RuntimeError, OSError, ValueError) as e:
            raise StudyStopped(f"{first_line(e)}; {AGAIN}") from e
        return 0

    return command(lambda argv: parse(), run_study, [])


def first_line(err: BaseException) -> str:
    """The error's first line (tyro's rejection of an `int | None` flag runs to several)."""
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def csv_list(text: str, kind: type, field: str) -> list:
    """A list flag, `"0.1,0.5"` -> [0.1, 0.5] (a trailing comma is fine); a ConfigError of one line
    naming `field` otherwise, an empty entry too (`1,,2` is a typo, not [1, 2])."""
    entries = [v.strip() for v in text.split(",")]
    if entries[-1] == "":  # a trailing comma
        entries.pop()
    if not any(entries):
        raise ConfigError(f"{field}: empty list")
    if "" in entries:
        raise ConfigError(f"{field}: an empty entry in {text!r}")
    try:
        return [kind(v) for v in entries]
    except ValueError:
        raise ConfigError(f"{field}: expected a comma-separated list of {kind.__name__}s; got {text!r}") from None


def seed_list(text: str, field: str = "seeds") -> list[int]:
    """`--seeds 1,2,3` -> [1, 2, 3]: a list flag of ints, each a seed a run takes (`config.check_seed`)
    and each once (a seed given twice would count one run twice in every mean and interval)."""
    seeds = csv_list(text, int, field)
    for seed in seeds:
        check_seed(seed, field)  # a run's own rule (0..2**32 - 1), said before any run starts
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{field}: each seed once; got {text}")
    return seeds


def check_choices(values: Iterable[str], choices: Sequence[str], field: str) -> None:
    """Every value among `choices`; else one line naming the strangers and the choices."""
    if bad := [v for v in values if v not in choices]:
        raise ConfigError(f"{field}: unknown {', '.join(bad)}; choose from {', '.join(choices)}")


def check_at_least(args: object, names: Iterable[str], low: int = 1) -> None:
    """Each named field of `args` >= `low`; else one line naming the first that is not."""
    for name in names:
        if getattr(args, name) < low:
            raise ConfigError(f"{name}: must be >= {low}; got {getattr(args, name)}")


def check_runs(runs: Iterable[tuple[str, list[str]]]) -> None:
    """Each (unit name, its `python -m rlhf_scratch.train` flags) checked as that process will check
    them, before the study writes its folder: parsed and validated by train's own parser, then each
    distinct setting against its model (`check_run_args`). A ConfigError of one line naming the
    first run that would fail, and its field."""
    from rlhf_scratch.engine.run_args import parse_args  # train's own parser (below the commands)

    parsed = []
    for name, argv in runs:
        try:
            parsed.append((name, parse_args(argv)[0]))
        except ConfigError as e:
            raise ConfigError(f"run {name}: {first_line(e)}") from None
    check_run_args(parsed)


def check_run_args(runs: Iterable[tuple[str, CommonArgs]]) -> None:
    """Each distinct setting of the (unit name, validated args) checked against its model as run
    setup checks it (`run_setup.check_against_model`: the context, the LoRA rank, the prompts'
    lengths), once per setting; one ConfigError line naming the first run that would fail."""
    from rlhf_scratch.engine.run_setup import MODEL_CHECKED, check_against_model
    from rlhf_scratch.models.loading import HubUnreachableError

    checked = set()
    for name, args in runs:
        setting = tuple(getattr(args, f) for f in MODEL_CHECKED)
        if setting not in checked:
            checked.add(setting)
            try:
                check_against_model(args)
            except (ValueError, OSError, HubUnreachableError) as e:  # ConfigError, ModelFolderError, PromptError, ...
                raise ConfigError(f"run {name}: {first_line(e)}") from None


# --- the plan --------------------------------------------------------------------------------------


GROWS = ("seeds",)
"""The plan's fields that may grow between calls (`open_study`): more seeds, the saved ones first."""


def open_study(out: Path, plan: dict[str, Any], plan_file: str, kind: str, grows: Sequence[str] = GROWS) -> Path:
    """The study's folder: made, with `plan` written to OUT/`plan_file`, on the first call; the same
    plan there again continues it. A list field named in `grows` may be longer than the saved one
    if it starts with it (`seeds` [1] -> [1, 2, 3]): the plan file is rewritten and the study goes
    on larger. A different plan, or a folder holding anything else, is a ConfigError of one line,
    and nothing in the folder is touched."""
    plan = json.loads(json.dumps(plan))  # as it reads back (tuples are lists)
    path = out / plan_file
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved != plan:
            grown = [k for k in grows if isinstance(saved.get(k), list) and isinstance(plan.get(k), list)
                     and plan[k][: len(saved[k])] == saved[k]]
            allowed = {**saved, **{k: plan[k] for k in grown}}  # what differs beyond the growth is named
            if allowed != plan:
                shrunk = [k for k in grows if k in saved and k in plan and k not in grown and saved[k] != plan[k]]
                rule = "".join(f"; {k} may only grow, the saved ones first in their order" for k in shrunk)
                raise ConfigError(f"out: {out} holds a different {kind} ({plan_difference(allowed, plan)}{rule}); "
                                  "choose a new --out")
            path.write_text(json.dumps(plan, indent=1))  # more seeds: the same study, larger
    elif out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"out: {out} exists and is not a {kind} folder; choose a new one (nothing was touched)")
    else:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(plan, indent=1))
    return out


def plan_difference(saved: dict[str, Any], plan: dict[str, Any]) -> str:
    """What differs between two plans, key by key: `algos ppo,rloo there, ppo here`."""
    def show(key: str, d: dict) -> str:
        value = d.get(key, "(none)")
        return ",".join(map(str, value)) if isinstance(value, list) else str(value)

    keys = [k for k in dict.fromkeys([*saved, *plan]) if saved.get(k, ...) != plan.get(k, ...)]
    return "; ".join(f"{k} {show(k, saved)} there, {show(k, plan)} here" for k in keys)


@dataclass(frozen=True)
class Unit:
    """One unit of a study's work, one process and one folder: `method` under `setting` with `seed`."""

    method: str
    """A registered algorithm's name, or a study's own method (over-optimisation's best-of-n, "bon")."""
    seed: int | None = None
    """None: the study's one seed, left out of the name."""
    setting: tuple[str, float | int] | None = None
    """What else varies, as (tag, value): ("b", 0.1) is β = 0.1, ("rm", 250) the 250-pair proxy."""

    @property
    def name(self) -> str:
        """Its folder's and its ledger entry's name: `ppo-s1-b0.1`, `online_dpo-s3`, `rloo-rm250`."""
        seed = [] if self.seed is None else [f"s{self.seed}"]
        setting = [] if self.setting is None else [f"{self.setting[0]}{self.setting[1]:g}"]
        return "-".join([self.method, *seed, *setting])

    @property
    def value(self) -> float | int | None:
        """The setting's value (β, the proxy's pairs), or None."""
        return None if self.setting is None else self.setting[1]

    @property
    def group(self) -> tuple[str, tuple[str, float | int] | None]:
        """(method, setting): the units that differ only in their seed share one."""
        return self.method, self.setting


def plan_units(methods: Sequence[str], seeds: Sequence[int | None] = (None,),
               settings: Sequence[tuple[str, float | int] | None] = (None,)) -> list[Unit]:
    """Every (method, setting, seed), nested in that order: a group's seeds side by side."""
    return [Unit(m, s, x) for m in methods for x in settings for s in seeds]


def by_group(units: Iterable[Unit]) -> dict[tuple, list[Unit]]:
    """The units of each group (`Unit.group`), groups in their first unit's order."""
    groups: dict[tuple, list[Unit]] = {}
    for unit in units:
        groups.setdefault(unit.group, []).append(unit)
    return groups


def over_seeds(units: Iterable[Unit], value: Callable[[Unit], float | None]) -> dict[tuple, dict]:
    """{group: {seed: value(unit)}} for each group (`by_group`); a unit whose value is None (not run
    yet) is left out, so a group's n is the seeds it has."""
    out: dict[tuple, dict] = {}
    for group, members in by_group(units).items():
        out[group] = {u.seed: v for u in members if (v := value(u)) is not None}
    return out


class Ledger:
    """OUT/<file>, {unit name: what it measured}: a process's `wall_s` and `peak_mib` with its unit's
    record, or the seconds a part of the study took in this process (`timing`). Rewritten as each
    unit ends, so a study that stops keeps what its finished units measured."""

    def __init__(self, path: Path):
        self.path = Path(path)
        saved = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.entries: dict[str, dict] = {k: v for k, v in saved.items() if isinstance(v, dict)}  # (not an older flat file's)

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def __getitem__(self, name: str) -> dict:
        return self.entries[name]

    def add(self, name: str, entry: dict) -> None:
        self.entries[name] = entry
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(self.entries, indent=1))
        os.replace(tmp, self.path)

    @contextmanager
    def timing(self, name: str) -> Iterator[None]:
        """Add the block's wall seconds to `name`'s (nothing if it raises): a part run in this process."""
        start = time.perf_counter()
        yield
        self.add(name, {"wall_s": self.entries.get(name, {}).get("wall_s", 0.0) + time.perf_counter() - start})

    def seconds(self) -> dict[str, float]:
        """{`<name>_s`: wall seconds} of every entry."""
        return {f"{name}_s": entry["wall_s"] for name, entry in self.entries.items()}


# --- the processes ---------------------------------------------------------------------------------


@dataclass(eq=False)
class Job:
    """One unit's process."""

    name: str
    """Its ledger entry (the unit's name)."""
    command: Callable[[], list[str]]
    """Its argv, built when it starts (it may resume the unit's folder, or clear a folder to start over)."""
    folder: Path | None = None
    """The run folder it writes: finished there (status.json) and in the ledger, it is not run again."""
    steps: int = 1
    """What the bar counts for it: a training run's phases (status.json's `phase` while it runs); 1: ended or not."""
    record: dict = field(default_factory=dict)
    """What its ledger entry holds beside its measurements (its unit, say)."""


def run_jobs(jobs: Sequence[Job], ledger: Ledger, *, parallel: int = 1, desc: str = "units", unit: str = "step",
             watch: Callable[[str, int], None] | None = None) -> None:
    """Run every job not done yet as its own process (`run_process`), `parallel` at a time, in order,
    and add each to the ledger as it ends. One bar counts the steps of all jobs, naming the running
    ones and their step; `watch(name, steps)` hears each running job's count when it moves. The first
    failure is raised once the running jobs have ended; no job starts after it. At Ctrl-C no queued
    job starts, and the running ones (which the terminal signalled too: a training run finishes its
    phase and checkpoints) are waited for."""
    from tqdm.auto import tqdm

    from rlhf_scratch.engine.runs import read_status

    def finished(job: Job) -> bool:
        return job.name in ledger and (job.folder is None or read_status(job.folder)["status"] == "finished")

    def steps_done(job: Job) -> int:
        if job.steps <= 1 or job.folder is None:
            return 0
        try:
            return min(read_status(job.folder).get("phase") or 0, job.steps)
        except OSError:  # not made yet, or being cleared to start over
            return 0

    queue = [job for job in jobs if not finished(job)]
    done = sum(job.steps for job in jobs) - sum(job.steps for job in queue)
    bar = tqdm(total=sum(job.steps for job in jobs), initial=done, desc=desc, unit=unit, file=sys.stderr)
    failures: list[Exception] = []
    heard: dict[str, int] = {}
    running: dict[Future, Job] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, parallel))
    try:
        while queue or running:
            while queue and len(running) < max(1, parallel) and not failures:  # started here, so none after a failure
                job = queue.pop(0)
                running[pool.submit(lambda job=job: run_process(job.command(), job.name))] = job
            if not running:
                break
            ended, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in ended:
                job = running.pop(future)
                try:
                    ledger.add(job.name, {**job.record, **future.result()})
                    done += job.steps
                except Exception as e:  # its process failed (or its command could not be built)
                    failures.append(e)
            live = {job: steps_done(job) for job in running.values()}
            for job, steps in live.items():
                if watch is not None and heard.get(job.name) != steps:
                    watch(job.name, steps)
                heard[job.name] = steps
            bar.update(done + sum(live.values()) - bar.n)
            bar.set_postfix_str(", ".join(f"{job.name}: {steps}/{job.steps}" if job.steps > 1 else job.name
                                          for job, steps in live.items()))
    finally:  # Ctrl-C: the queued never start, the running are waited for
        pool.shutdown(wait=True)
        bar.close()
    if failures:
        raise failures[0]


def train_argv(name: str, run_dir: Path, fresh: Sequence[str]) -> list[str]:
    """The process of one training unit: `python -m rlhf_scratch.train` with `fresh` (its flags, its
    `--run-dir run_dir` among them) — or `--resume run_dir` where an interrupted run has a checkpoint.
    A run another process is training is refused (one line naming `name`); one with no checkpoint, or
    a finished run whose numbers were lost, is started over."""
    import shutil

    from rlhf_scratch.engine.runs import list_checkpoints, next_step, read_status

    train = [sys.executable, "-m", "rlhf_scratch.train"]
    if run_dir.exists():
        status = read_status(run_dir)
        if status["status"] == "running":
            raise RuntimeError(f"run {name}: {next_step(run_dir, status)}")
        if status["status"] != "finished" and list_checkpoints(run_dir):  # interrupted, failed or lost: continue it
            return [*train, "--resume", str(run_dir)]
        shutil.rmtree(run_dir)
    return [*train, *fresh]


def run_process(argv: list[str], name: str) -> dict[str, float]:
    """Run `argv` to its end, a process of its own: its wall seconds and peak RSS in MiB (`os.wait4`).
    A non-zero exit is a RuntimeError naming `name`, with the process's last `error:` line (else its
    last line on stderr). Its stdout is dropped; W&B is off in it unless WANDB_MODE says otherwise."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled")})
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)  # so the pipe never fills
    reader.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    proc.stderr.close()
    if proc.returncode != 0:
        lines = [line for line in "".join(stderr).splitlines() if line.strip()] or ["no output"]
        errors = [line for line in lines if line.startswith("error:")]
        raise RuntimeError(f"{name} failed (exit {proc.returncode}): {(errors or lines)[-1]}")
    return {"wall_s": time.perf_counter() - start, "peak_mib": usage.ru_maxrss / 1024}


# --- the report ------------------------------------------------------------------------------------


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A markdown table: `header`, the rule, one line per row."""
    def line(cells: Sequence[object]) -> str:
        return "| " + " | ".join(map(str, cells)) + " |"

    return "\n".join([line(header), "|" + "---|" * len(header), *map(line, rows)])


INTERVAL_NOTE = ("Each cell: the mean over the n seeds ± the half-width of its 95 % Student-t interval, "
                 "x̄ ± t_{0.975, n−1} · s/√n (one seed: its value alone).")
"""What a table's `±` means, said under every study table (rlhf_scratch/studies/stats.py)."""


def interval_cell(values: Sequence[Number], fmt: str = "{:.3f}") -> str:
    """`0.924 ± 0.041` over `values` (a value per seed), `0.924` for one, empty for none."""
    return mean_interval(values).cell(fmt) if len(values) else ""


def verdict_html(sentences: Sequence[str]) -> str:
    """The finding a study page opens with: each verdict sentence (`stats.verdict`) in bold."""
    return "".join(f"<p><b>{esc(s)}</b></p>" for s in sentences)


def draw_band(ax, xs: Sequence[Sequence[Number]], ys: Sequence[Sequence[Number]], *, band: bool = True, **plot_kw):
    """One curve of a figure over seeds: x and y are each seed's (cut to the shortest); the line is
    the mean over seeds at each point, the band its 95 % t-interval (`stats.mean_interval`) when
    there are two seeds or more. One seed draws its line alone. A seed whose y is NaN at a point (no
    value there) is left out of that point; a point no seed has is a gap in the line. Returns the line."""
    n = min(len(x) for x in xs)
    mean_x = [statistics.fmean(x[i] for x in xs) for i in range(n)]
    nan = float("nan")
    columns = [[y[i] for y in ys if y[i] == y[i]] for i in range(n)]  # y == y: not NaN
    intervals = [mean_interval(c) if c else None for c in columns]
    line, = ax.plot(mean_x, [iv.mean if iv else nan for iv in intervals], **plot_kw)
    if band and len(ys) > 1:
        spread = [iv if iv and iv.n > 1 else None for iv in intervals]  # one seed at a point: no band there
        ax.fill_between(mean_x, [iv.low if iv else nan for iv in spread], [iv.high if iv else nan for iv in spread],
                        color=line.get_color(), alpha=0.15, linewidth=0)
    return line


def write_report(out: Path, *, title: str, table_md: str, data: dict, body: Sequence[str]) -> Path:
    """OUT/table.md (`table_md`), OUT/table.json (`data`) and OUT/index.html: the page `title` with
    `body`, built from `rlhf_scratch.pages.html` (its CSS, tables and embedded figures, like every page here)."""
    (out / "table.md").write_text(table_md + "\n")
    (out / "table.json").write_text(json.dumps(data, indent=1))
    path = out / "index.html"
    path.write_text(page(title, body))
    return path
