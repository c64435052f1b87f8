"""The shape every study shares, as one class: a study says what it plans and what it reports.

    class LengthStudy(Study[LengthArgs]):
        prog, description, args_class, quick, kind = PROG, DESCRIPTION, LengthArgs, QUICK, "length study"

        def train_flags(self, args, unit, run_dir):   # one unit's `python -m rlhf_scratch.train` flags
            ...
        def report(self, args, out, ledger):          # collect, stats, figures, page; what to print
            ...

    STUDY = LengthStudy()
    main = STUDY.main                                   # `python -m …`: the error contract, whole

`Study.run(args)` is the shape, top to bottom:

    args ─► units ─► check each unit's run ─► the study's folder ─► run the units ─► report ─► print
           (args.units())  (`check`: as its own    (`open_study`: new,      (`run_units`: each a
                           process will, before    the same plan again, or  resumable process,
                           any folder exists)      more seeds)              `--jobs` at a time)

A unit of a training study is `python -m rlhf_scratch.train` in OUT/runs/<unit name>/
(`run_dir`), resumed from its checkpoint when it was interrupted (`runner.train_argv`), counted on
the bar by its phases. `report` reads what the units wrote, computes the table's means and
intervals (`stats.py`), writes table.md, table.json and index.html (`runner.write_report`) and
returns what the command prints. A study whose units are not only training runs (over-optimisation:
reward models, best-of-n, its own RL process) overrides `check` and `run_units`; the rest is the
same. The pieces (`runner.py`: the plan file, the ledger, the processes, the page's cells) stay
usable alone. No torch here: a study answers a bad flag at once.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from rlhf_scratch.studies.runner import (
    Job,
    Ledger,
    Unit,
    check_runs,
    open_study,
    parse_study,
    run_jobs,
    study_main,
    train_argv,
)

A = TypeVar("A")

RUNS = "runs"
"""OUT/runs/<unit name>/: a training unit's run folder."""


class Study(Generic[A]):
    """A study: its args dataclass (with `plan()`, `units()`, `out`, `jobs`, `total_phases` and a
    `validate()` that names the first bad field), the train flags of a unit, and its report."""

    prog: ClassVar[str]
    """The command (`python -m rlhf_scratch.compare`), for --help and its usage line."""
    description: ClassVar[str]
    """--help's first paragraph."""
    args_class: ClassVar[type]
    """The args dataclass, parsed by tyro (`runner.parse_study`)."""
    quick: ClassVar[dict[str, Any]] = {}
    """`--quick`: the args' fields for a study of seconds (flags given beside it still win)."""
    aliases: ClassVar[dict[str, str] | None] = None
    """Other spellings of a flag (`{"--seed": "--seeds"}`)."""
    plan_file: ClassVar[str] = "study.json"
    """OUT/<plan_file>: the plan a second call into the folder must match (`open_study`)."""
    ledger_file: ClassVar[str] = "times.json"
    """OUT/<ledger_file>: what each finished unit measured (`runner.Ledger`)."""
    kind: ClassVar[str] = "study"
    """What the folder holds, in the one line that refuses a different plan there."""

    # --- the command line ------------------------------------------------------------------------

    def parse(self, argv: list[str]) -> A:
        """The args from `argv`, validated; over `quick` with --quick. Bad input: one ConfigError line."""
        default = self.args_class(**(self.quick if "--quick" in argv else {}))
        return parse_study(self.args_class, argv, default=default, prog=self.prog, description=self.description,
                           aliases=self.aliases)

    def main(self, argv: list[str] | None = None) -> int:
        """The study's command: `runner.study_main`'s error contract around `parse` and `run`."""
        argv = sys.argv[1:] if argv is None else argv
        return study_main(lambda: self.parse(argv), self.run)

    # --- the plan --------------------------------------------------------------------------------

    def folder(self, args: A) -> Path:
        """The study's folder."""
        return Path(args.out)

    def run_dir(self, out: Path, unit: Unit) -> Path:
        """A unit's run folder: OUT/runs/<unit name>."""
        return out / RUNS / unit.name

    def train_flags(self, args: A, unit: Unit, run_dir: Path) -> list[str]:
        """A training unit's new run: its `python -m rlhf_scratch.train` flags (`--run-dir run_dir` among them)."""
        raise NotImplementedError(f"{type(self).__name__}: a training study says its units' train flags")

    def train_command(self, args: A, unit: Unit, run_dir: Path) -> list[str]:
        """A training unit's process: `train_flags`, or `--resume` of its interrupted run (`runner.train_argv`)."""
        return train_argv(unit.name, run_dir, self.train_flags(args, unit, run_dir))

    # --- the run ---------------------------------------------------------------------------------

    def check(self, args: A, out: Path) -> None:
        """Before the folder is written: every unit's run checked as its own process will check it
        (`runner.check_runs`), so a plan that cannot run is never saved."""
        check_runs((u.name, self.train_flags(args, u, self.run_dir(out, u))) for u in args.units())

    def run_units(self, args: A, out: Path, ledger: Ledger) -> None:
        """Every unit not finished yet, a `python -m rlhf_scratch.train` process each, `args.jobs` at a
        time, one bar over all their phases (`runner.run_jobs`)."""
        jobs = [Job(u.name, partial(self.train_command, args, u, self.run_dir(out, u)), self.run_dir(out, u),
                    args.total_phases, asdict(u)) for u in args.units()]
        run_jobs(jobs, ledger, parallel=args.jobs, desc="phases, all runs", unit="phase")

    def timed(self, args: A, ledger: Ledger) -> AbstractContextManager:
        """Around running the units and the report (over-optimisation times the whole call); by default nothing."""
        return nullcontext()

    def report(self, args: A, out: Path, ledger: Ledger) -> str:
        """Read what the units wrote; write table.md, table.json, index.html and the figures; return what to print."""
        raise NotImplementedError(f"{type(self).__name__}: a study says what it reports")

    def run(self, args: A) -> None:
        """The shape: check, open the folder (new, the same plan, or more seeds), run the units not
        done yet, report, print."""
        out = self.folder(args)
        self.check(args, out)
        open_study(out, args.plan(), self.plan_file, self.kind)
        ledger = Ledger(out / self.ledger_file)
        with self.timed(args, ledger):
            self.run_units(args, out, ledger)
            said = self.report(args, out, ledger)
        print(said)
