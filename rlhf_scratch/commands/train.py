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

import dataclasses
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rlhf_scratch.config import PRESETS, TASKS, CommonArgs, ConfigError, args_class, preset_values, registry
from rlhf_scratch.config.cli import flag_of, given_fields, parse_dataclass, split_flags
from rlhf_scratch.config.command import command
from rlhf_scratch.controller.options import (
    ControllerArgs,
    controller_record,
    flags_given,
    resumed_controller,
    split_controller_flags,
)

if TYPE_CHECKING:
    from rlhf_scratch.engine.contract import TrainerContract

PROG = "python -m rlhf_scratch.train"

# Fields a resumed run may change; any other flag must agree with the saved config.
RESUMABLE = ("total_phases", "save_every", "keep_checkpoints", "table_every", "plot_every", "threads", "wandb", "device")


def description(algo: str) -> str:
    """The --help text above the flags: what the command does, its two forms, the presets — short
    paragraphs (tyro keeps each one as a paragraph)."""
    cls = args_class(algo)
    gpt2 = ", ".join(f"{k}={v[algo] if isinstance(v, dict) else v}" for k, v in preset_values("gpt2", cls).items())
    return "\n\n".join([
        f"RLHF of a language model toward the reward of TASK: {PROG} TASK [--FIELD VALUE ...]. "
        f"This is --algo {algo}: {cls.__doc__.strip()}",
        f"TASK is {', '.join(TASKS)}; --algo is one of {', '.join(registry.names())} (default ppo; "
        "each has its own flags: --algo ALGO --help).",
        f"To continue an interrupted run: {PROG} --resume RUN_DIR (only "
        f"{', '.join(flag_of(f) for f in RESUMABLE)} may be given with it).",
        f"--preset tiny (default) or gpt2; gpt2 sets {gpt2}.",
        "Where it runs (read before the algorithm's flags; docs/distributed.md): --controller local|ray (default "
        "local: this process, or torchrun's; ray: verl's single controller over Ray worker groups, the same loop and "
        "numbers), --workers N (ranks per worker group), --placement colocated|split, --max-staleness 0|1 (one step "
        "of asynchrony: needs --controller ray --placement split), --ray-address HOST:PORT (join a running cluster). "
        "A resumed run is placed as its config.json records it.",
    ])


@dataclasses.dataclass
class Dispatch:
    """The flags read before the algorithm's command line: they pick its dataclass and defaults."""

    algo: str | None = None
    """The algorithm (default ppo)."""
    resume: str | None = None
    """Continue the interrupted run in this folder."""
    preset: str | None = None
    """tiny (default) or gpt2."""


def parse_dispatch(argv: list[str]) -> tuple[str | None, str | None, str | None, list[str]]:
    """--algo, --resume and --preset, read before the algorithm's command line is parsed (they
    decide which dataclass and which defaults it is parsed into), and the rest of argv for it,
    with the positional TASK turned into --task."""
    known, rest = split_flags(Dispatch, argv, default=Dispatch(), prog=PROG)
    positional = [i for i, token in enumerate(rest) if not token.startswith("-")
                  and (i == 0 or not rest[i - 1].startswith("--") or "=" in rest[i - 1] or _is_switch(rest[i - 1]))]
    if positional:  # the first bare word is the task
        i = positional[0]
        rest = rest[:i] + ["--task", rest[i]] + rest[i + 1:]
    return known.algo, known.resume, known.preset, rest


def _is_switch(token: str) -> bool:
    """Whether a flag takes no value (a boolean field's --x / --no-x, or --help)."""
    name = token[2:].removeprefix("no-").replace("-", "_")
    return token in ("-h", "--help") or any(
        f.name == name and f.type in ("bool", bool, "bool | None") for algo in registry.names()
        for f in dataclasses.fields(args_class(algo)))


def parse_args(argv: list[str]) -> tuple[CommonArgs, str | None]:
    """The run's validated args and the run folder to resume (None for a new run)."""
    algo, resume, preset, rest = parse_dispatch(argv)
    if resume is not None:
        from rlhf_scratch.engine.runs import load_args  # reads config.json only

        saved = load_args(resume)
        if algo is not None and algo != saved.algo:
            raise ConfigError(f"resume: --algo {algo} conflicts with the run's saved algo {saved.algo}")
        if preset is not None:
            rest += ["--preset", preset]
        args = parse_dataclass(type(saved), rest, default=saved, prog=PROG, description=description(saved.algo),
                               aliases=type(saved).FLAG_ALIASES)
        for name, value in given_fields(args, saved).items():
            if name not in RESUMABLE:
                allowed = ", ".join(flag_of(f) for f in RESUMABLE)
                raise ConfigError(f"resume: {flag_of(name)} {value} conflicts with the run's saved "
                                  f"{name}={getattr(saved, name)!r} (only {allowed} may change)")
        return args.validate(), resume
    algo, preset = algo or "ppo", preset or "tiny"
    cls = args_class(algo)
    if preset not in PRESETS:
        raise ConfigError(f"preset: must be one of {', '.join(PRESETS)}; got {preset!r}")
    default = cls(preset=preset, task="", **preset_values(preset, cls))
    try:
        args = parse_dataclass(cls, rest, default=default, prog=PROG, description=description(algo),
                               aliases=cls.FLAG_ALIASES)
    except ConfigError as e:
        raise ConfigError(other_algorithm_hint(str(e), algo)) from None
    if args.task == "":
        raise ConfigError(f"task: required, one of {', '.join(TASKS)} (or --resume RUN_DIR)")
    return args.validate(), None


def other_algorithm_hint(message: str, algo: str) -> str:
    """An unknown flag that another algorithm has: say which (`--judge` is Online DPO's)."""
    if not message.startswith("unrecognized arguments: "):
        return message
    flags = [t.split("=")[0] for t in message.split(": ", 1)[1].split() if t.startswith("--")]
    for flag in flags:
        aliased = [a for a in registry.names() if a != algo and flag in args_class(a).FLAG_ALIASES]
        if aliased and args_class(aliased[0]).FLAG_ALIASES[flag] != flag and \
                args_class(aliased[0]).FLAG_ALIASES[flag].removeprefix("--").replace("-", "_") in args_class(algo).__dataclass_fields__:
            target = args_class(aliased[0]).FLAG_ALIASES[flag]
            return f"{message} ({flag} is --algo {aliased[0]}'s name for {target}; here: {target})"
        owners = [a for a in registry.names() if a != algo
                  and flag.removeprefix("--").removeprefix("no-").replace("-", "_") in args_class(a).__dataclass_fields__]
        if owners:
            return f"{message} ({flag} is an option of --algo {' / --algo '.join(owners)}, not of {algo})"
    return message


def main(argv: list[str] | None = None) -> int:
    """The command: `command()` owns its one-line errors and exit codes."""
    return command(parse, run, argv)


def parse(argv: list[str]) -> tuple[CommonArgs, str | None, ControllerArgs]:
    """The run's validated args, the folder to resume (None: a new run) and the controller: for a
    resumed run, as its config.json records it unless the command line says otherwise (`options.resumed_controller`)."""
    controller, rest = split_controller_flags(argv)  # --controller ray: the single controller (controller/)
    args, resume = parse_args(rest)
    if resume is not None:
        import json
        from pathlib import Path

        from rlhf_scratch.engine.runs import CONFIG_FILE

        saved = json.loads((Path(resume) / CONFIG_FILE).read_text()).get("controller")  # (parse_args read it already)
        controller = resumed_controller(controller, flags_given(argv), saved)
    return args, resume, controller


@contextmanager
def backend(args: CommonArgs, controller: ControllerArgs) -> Iterator[TrainerContract]:
    """What the loop drives: the algorithm's trainer in this process (the default), or the single
    controller over Ray worker groups (`--controller ray`: `controller.command.ray_backend`, which
    also brings Ray up and down)."""
    if controller.controller == "ray":
        from rlhf_scratch.controller.command import ray_backend

        with ray_backend(args, controller) as trainer:
            yield trainer
    else:
        yield registry.get(args.algo).trainer_class()(args)  # run setup: models, prompts, reward


def run(parsed: tuple[CommonArgs, str | None, ControllerArgs]) -> int:
    """Train (or resume) the run with the one loop (`engine.run.run`) on either backend; print its
    summary on rank 0."""
    args, resume, controller = parsed

    from pathlib import Path

    from rlhf_scratch.engine import distributed
    from rlhf_scratch.engine.lifecycle import TrainingStopped
    from rlhf_scratch.engine.run import run as run_trainer
    from rlhf_scratch.engine.runs import check_new_run_dir, finished_summary, refuse_unresumable

    rank0 = os.environ.get("RANK", "0") == "0"  # torchrun's rank 0 (or no torchrun): the one that prints
    run_dir = Path(resume) if resume is not None else None
    finished = False
    try:
        if resume is not None:
            refuse_unresumable(resume, args)  # before the models load (and before Ray starts)
        elif rank0:  # (under torchrun rank 0 creates it)
            check_new_run_dir(args.run_dir)  # before the models load: refuse to overwrite at once
        with backend(args, controller) as trainer:
            run_dir = run_trainer(trainer, run_dir, resume=resume is not None, controller=controller_record(controller))
        finished = True
    except TrainingStopped as e:
        if rank0:
            print(e, file=sys.stderr)  # ends with the resume command
        return e.exit_code
    except KeyboardInterrupt:  # a second Ctrl-C: stopped at once, the previous checkpoint intact
        where = f"{run_dir}: " if run_dir is not None and Path(run_dir).is_dir() else ""
        ray = " --controller ray" if controller.controller == "ray" else ""
        print(f"stopped: Ctrl-C; {where}continue from the last checkpoint with {PROG} --resume RUN_DIR{ray}"
              + ("; the workers and Ray are shut down" if ray else ""), file=sys.stderr)
        return 130
    finally:
        distributed.destroy(finished)
    if rank0:
        print(finished_summary(run_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
