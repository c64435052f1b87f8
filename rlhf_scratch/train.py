"""Command line: `python -m rlhf_scratch.train TASK [--algo ALGO] [--field value …]`.

    python -m rlhf_scratch.train sentiment                  # PPO, tiny preset, offline, minutes on a CPU
    python -m rlhf_scratch.train sentiment --algo rloo      # RLOO: 4 completions per prompt, no critic
    python -m rlhf_scratch.train sentiment --algo online_dpo --judge vader
    python -m rlhf_scratch.train sentiment --prompts rt     # review openings instead of one prefix
    python -m rlhf_scratch.train sentiment --preset gpt2    # the blog's GPT-2 + distilbert-imdb

Every field of the algorithm's args is a flag (`--kl-coef 1.0`, `--no-prepend-bos`, …);
`--algo rloo --help` lists RLOO's. A bad value stops the run at start with one line naming the
field, before torch is imported.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import os
import sys
import textwrap

from rlhf_scratch.config import ALGOS, ARGS_OF_ALGO, PRESETS, TASKS, ConfigError, make_args

TRAINER_OF_ALGO = {
    "ppo": ("rlhf_scratch.algorithms.ppo", "RLHFTrainer"),
    "rloo": ("rlhf_scratch.algorithms.rloo", "RLOOTrainer"),
    "online_dpo": ("rlhf_scratch.algorithms.online_dpo", "OnlineDPOTrainer"),
}


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each dataclass field, by field name (base classes first, so a
    subclass's own docstring wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                docs[node.target.id] = " ".join(str(nxt.value.value).split())  # type: ignore[union-attr]
    return docs


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (`error: ...`) and exit code 2, like a bad value."""

    def error(self, message: str):
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser(algo: str = "ppo") -> argparse.ArgumentParser:
    cls = ARGS_OF_ALGO[algo]
    parser = _OneLineParser(
        prog="python -m rlhf_scratch.train",
        description=f"RLHF of a language model toward a reward — {algo} ({cls.__doc__.strip()})",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"Presets: {', '.join(PRESETS)}; the gpt2 preset overrides: "
        + ", ".join(f"{k}={v}" for k, v in PRESETS["gpt2"].items()),
    )
    parser.add_argument("task", nargs="?", help=f"reward to maximise: {', '.join(TASKS)}")
    parser.add_argument("--algo", default="ppo", help=f"algorithm: {', '.join(ALGOS)} (default: ppo)")
    parser.add_argument("--resume", metavar="RUN_DIR", default=None,
                        help="continue an interrupted run from its latest checkpoint, with its saved config; "
                             f"only {', '.join('--' + f.replace('_', '-') for f in RESUMABLE)} may be given too")
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        if f.name == "task":
            continue
        flag = "--" + f.name.replace("_", "-")
        kwargs: dict = dict(default=None, help=docs.get(f.name, "") + f" (default: {f.default})", dest=f.name)
        if str(f.type) in ("bool", "bool | None"):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
        else:
            kind = {"int": int, "float": float, "float | None": float}.get(str(f.type), str)
            parser.add_argument(flag, type=kind, **kwargs)
    return parser


# Fields a resumed run may change; any other flag must agree with the saved config.
RESUMABLE = ("total_phases", "save_every", "keep_checkpoints", "table_every", "plot_every", "threads", "wandb", "device")


def parse_algo_and_resume(argv: list[str]) -> tuple[str, str | None]:
    """--algo (default ppo) and --resume, read before the full parser is built for that algorithm."""
    pre = _OneLineParser(add_help=False)
    pre.add_argument("--algo", default=None)
    pre.add_argument("--resume", default=None)
    known = pre.parse_known_args(argv)[0]
    algo = known.algo or "ppo"
    if known.resume is not None:
        from rlhf_scratch.runs import load_args  # reads config.json only

        saved = load_args(known.resume)
        if known.algo is not None and known.algo != saved.algo:
            raise ConfigError(f"resume: --algo {known.algo} conflicts with the run's saved algo {saved.algo}")
        algo = saved.algo
    if algo not in ARGS_OF_ALGO:
        raise ConfigError(f"algo: must be one of {', '.join(ALGOS)}; got {algo!r}")
    return algo, known.resume


def resumed_args(run_dir: str, opts: dict):
    """The saved config of `run_dir`, with the flags a resumed run may change applied."""
    from rlhf_scratch.runs import load_args

    args = load_args(run_dir)
    for name, value in opts.items():
        if value is None or name == "preset" and value == args.preset:
            continue
        if name in RESUMABLE:
            setattr(args, name, value)
        elif value != getattr(args, name):
            allowed = ", ".join("--" + f.replace("_", "-") for f in RESUMABLE)
            raise ConfigError(f"resume: --{name.replace('_', '-')} {value} conflicts with the run's saved "
                              f"{name}={getattr(args, name)!r} (only {allowed} may change)")
    return args.validate()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        algo, resume = parse_algo_and_resume(argv)
        opts = vars(build_parser(algo).parse_args(argv))
        opts.pop("algo"), opts.pop("resume")
        if resume is not None:
            args = resumed_args(resume, opts)
        else:
            if opts["task"] is None:
                raise ConfigError(f"task: required, one of {', '.join(TASKS)} (or --resume RUN_DIR)")
            args = make_args(opts.pop("preset") or "tiny", algo=algo, **opts)
    except ConfigError as e:  # RunFolderError is one too
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # argparse: --help (0) or a usage error, already printed in one line (2)
        return int(e.code or 0)

    import importlib
    from pathlib import Path

    from rlhf_scratch import distributed
    from rlhf_scratch.loading import HubUnreachableError
    from rlhf_scratch.loop import TrainingStopped
    from rlhf_scratch.runs import check_new_run_dir

    module, name = TRAINER_OF_ALGO[algo]
    rank0 = os.environ.get("RANK", "0") == "0"  # torchrun's rank 0 (or no torchrun): the one that prints
    run_dir = Path(resume) if resume is not None else None
    finished = False
    try:
        if resume is None and rank0:  # (under torchrun rank 0 creates it)
            check_new_run_dir(args.run_dir)  # before the models load: refuse to overwrite at once
        trainer = getattr(importlib.import_module(module), name)(args)  # loads models and prompts
        run_dir = trainer.train(run_dir, resume=resume is not None)
        finished = True
    except (ValueError, OSError, HubUnreachableError) as e:  # ConfigError, RunFolderError, PromptError, ...
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    except TrainingStopped as e:
        if rank0:
            print(f"{e}; resume with: python -m rlhf_scratch.train --resume {e.run_dir}", file=sys.stderr)
        return e.exit_code
    finally:
        distributed.destroy(finished)
    if rank0:
        print(f"done: {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
