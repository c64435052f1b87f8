"""`python -m interp.report RUN_DIR`: what did RLHF change? An HTML report of interp's analyses.

The command: it reads the run folder — the run's reference and tuned models
(`rlhf_scratch.engine.runs.load_run`), its prompt and its reward — and hands them to the pipeline,
`interp.report_page.make_report` (importable from here too), which runs the steps of
`interp.report_steps` and writes

    RUN_DIR/interp/report.html   self-contained (figures embedded), with the key numbers
    RUN_DIR/interp/*.png         the same figures as files
    RUN_DIR/interp/summary.json  the key numbers, machine-readable

into a temporary folder, moved into place when done (`_write_in_place`: never old and new files mixed).
The flags are checked before torch is imported (`make_report` too is imported on first use), so
`--help` and a bad flag answer at once.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

from interp.probes import REVIEW_PROMPTS
from rlhf_scratch.config import ConfigError
from rlhf_scratch.config.cli import parse_dataclass
from rlhf_scratch.config.command import command, first_line

__all__ = ["main", "make_report"]  # noqa: F822 (__getattr__)


def __getattr__(name: str):
    """`make_report` (`interp.report_page`'s, importable from here too), imported on first use: torch comes with it."""
    if name == "make_report":
        from interp.report_page import make_report

        return make_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class ReportArgs:
    """Interpret what RLHF changed in a run: writes RUN_DIR/interp/report.html, PNG figures and
    summary.json. The output folder is derived data: an existing one is overwritten."""

    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")] = tyro.MISSING
    """A run folder written by `python -m rlhf_scratch.train`."""
    out: str | None = None
    """Output folder (None: RUN_DIR/interp)."""
    n_samples: int = 16
    """Samples per reward estimate."""
    gen_len: int = 20
    """Tokens per sample."""
    no_reward: bool = False
    """Skip the sampled reward analyses."""
    device: str = "cpu"
    """Where the models run."""
    n_problems: int = 0
    """For a run of a task with its own problems (arithmetic): how many of its held-out problems the report
    reads, the first N of the test split (0: all)."""
    threads: int = 1
    """Torch CPU threads (1: the tiny model's matrices are too small to gain from more, and on a busy
    CPU extra threads made it 30x slower; 0 = torch's default)."""


def _parse(argv: list[str]) -> ReportArgs:
    """The command line (tyro), every argument checked before anything is loaded."""
    args = parse_dataclass(ReportArgs, argv, default=None, prog="python -m interp.report",
                           description=" ".join(ReportArgs.__doc__.split()))
    run_dir = Path(args.run_dir)
    if (problem := _bad_argument(args, run_dir, Path(args.out) if args.out else run_dir / "interp")) is not None:
        raise ConfigError(problem)
    return args


def _bad_argument(args: ReportArgs, run_dir: Path, out: Path) -> str | None:
    """The first bad argument as one line (before anything is loaded), or None."""
    if args.n_samples < 1:
        return f"--n-samples: must be >= 1; got {args.n_samples}"
    if args.gen_len < 1:
        return f"--gen-len: must be >= 1; got {args.gen_len}"
    if args.threads < 0:
        return f"--threads: must be >= 0; got {args.threads}"
    if args.n_problems < 0:
        return f"--n-problems: must be >= 0; got {args.n_problems}"
    if args.device.startswith("cuda") and not _cuda_available():
        return f"--device: {args.device!r} requested but no CUDA GPU is available; use --device cpu"
    if out.exists() and not out.is_dir():
        return f"--out: {out} is a file, not a folder"
    if not run_dir.is_dir():
        return f"{run_dir}: no such run folder"
    if not (run_dir / "config.json").is_file():
        return f"{run_dir} is not a run folder (no config.json)"
    return None


def _cuda_available() -> bool:
    import torch  # (only when --device asks for CUDA)

    return torch.cuda.is_available()


def _write_in_place(out: Path, write: Callable[[Path], dict]) -> dict:
    """`write(folder)` into a fresh temporary folder beside `out`, then move it into place, so an
    interrupted report never leaves old and new files mixed. interp.features' page lives beside the
    report: it is kept."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        summary = write(tmp)
        for kept in ("features.html", "features"):
            if (out / kept).exists():
                os.replace(out / kept, tmp / kept)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary


def main(argv: list[str] | None = None) -> int:
    """The command: `command()` owns its one-line errors and exit codes."""
    return command(_parse, _run, argv)


def _run(args: ReportArgs) -> int:
    """Load the run, write the report in place, print its headline."""
    import torch

    run_dir = Path(args.run_dir)
    out = Path(args.out) if args.out else run_dir / "interp"
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        from rlhf_scratch.engine.runs import load_run, reward_shown

        run = load_run(run_dir, device=args.device)
        problems = _held_out_problems(run, args.n_problems)
        reward_fn = None
        if not args.no_reward and problems is None:
            from rlhf_scratch.reward.tasks import make_reward_fn

            reward_fn = make_reward_fn(run.args, device=args.device)
    except ValueError as err:  # RunFolderError (still training: what to do), a bad reward model: the run named
        message = first_line(err)
        raise ConfigError(f"{'' if message.startswith(f'{run_dir}: ') else f'{run_dir}: '}{message}") from None
    if problems is not None:  # a task with its own problems: the answer analyses on its held-out ones
        summary = _write_in_place(out, lambda folder: _answer_report(run, problems, folder))
    else:
        summary = _review_report(run, run_dir, out, args, reward_fn, reward_shown(run_dir, run.args))
    for line in summary["headline"]:
        print(line)
    print(f"wrote {out / 'report.html'} in {summary['seconds']:.1f} s")
    return 0


def _review_report(run, run_dir: Path, out: Path, args: ReportArgs, reward_fn, shown: str) -> dict:
    """The blog's report: the run's prompt and the review prompts (a task without problems of its own)."""
    from interp import families
    from interp.report_page import make_report

    if reward_fn is not None:  # a Python reward the command line cannot load: said so
        print(shown)
    longest = max(len(run.reference.to_tokens(p)[0]) for p in [run.args.prefix, *REVIEW_PROMPTS])
    if longest + args.gen_len > run.reference.cfg.n_ctx:
        raise ConfigError(f"--gen-len: {args.gen_len} + the longest prompt ({longest} tokens) exceeds the model's "
                          f"context n_ctx={run.reference.cfg.n_ctx}")
    title = f"What did RLHF change? {run_dir.name}" + (f" ({shown})" if reward_fn is not None else "")
    try:
        return _write_in_place(out, lambda folder: make_report(
            run.reference, run.tuned, list(REVIEW_PROMPTS), folder, reward_fn=reward_fn, run_prompt=run.args.prefix,
            n_samples=args.n_samples, gen_len=args.gen_len, title=title))
    except families.UnsupportedModel as err:  # an analysis that would be wrong on this family: one line
        raise ConfigError(str(err)) from None


def _held_out_problems(run, n: int) -> tuple[str, list] | None:
    """(source, prompts) of the run's task's held-out problems — its registry entry's `data`, the test split
    (the first `n`; 0: all), each prompt carrying its ground truth — or None for a task without problems."""
    from rlhf_scratch.config import registry
    from rlhf_scratch.rollout.rl_dataset import run_prompts

    task = registry.get_task(run.args.task)
    if task.data is None:
        return None
    source = f"{task.name}:{'test' if 'test' in task.splits else task.splits[-1]}"
    prompts = run_prompts(run.args, tokenizer=run.reference.tokenizer, say=None, source=source)
    prompts = prompts[:n] if n else prompts
    if any("ground_truth" not in getattr(p, "columns", {}) for p in prompts):
        raise ValueError(f"{source}: a problem without a ground_truth column; the answer analyses need one")
    longest = max(len(run.reference.to_tokens(p + p.columns["ground_truth"])[0]) + 1 for p in prompts)
    if longest > run.reference.cfg.n_ctx:
        raise ValueError(f"{source}: the longest problem with its answer and EOS ({longest} tokens) exceeds the "
                         f"model's context n_ctx={run.reference.cfg.n_ctx}")
    return source, prompts


def _answer_report(run, problems: tuple[str, list], folder: Path) -> dict:
    """The report of a task with its own problems (`interp.answer_page`), on its held-out ones."""
    from interp.answer_page import make_answer_report
    from rlhf_scratch.engine.runs import read_status

    source, prompts = problems
    a = run.args
    phase = read_status(run.path).get("phase")
    draws = (f"one {a.algo.upper()} run (seed {a.seed}{f', {phase} phases' if phase is not None else ''}): one seed, "
             "so no interval over seeds")
    return make_answer_report(run.reference, run.tuned, [str(p) for p in prompts],
                              [str(p.columns["ground_truth"]) for p in prompts], folder,
                              columns=[p.columns for p in prompts], source=f"held-out problems ({source})", draws=draws,
                              title=f"What did RL change? {run.path.name} ({a.task})")


if __name__ == "__main__":
    sys.exit(main())
