"""A run's args from the train command's flags: `parse_args(argv)` -> (the validated args, the run
folder to resume or None), as `python -m rlhf_scratch.train` (commands/train.py) reads them after its
controller flags.

--algo, --resume and --preset are read first (they pick the algorithm's dataclass and its defaults),
the bare TASK becomes --task, every other flag is a field; a resumed run takes its saved config.json
with only the RESUMABLE fields changed. A bad value is one ConfigError line naming the field, before
torch is imported. The study runner checks each of its runs with it before a study's folder is made
(`studies.runner.check_runs`), so it lives below the command layer.
"""

from __future__ import annotations

import dataclasses

from rlhf_scratch.config import (
    PRESETS,
    TASKS,
    CommonArgs,
    ConfigError,
    args_class,
    default_values,
    preset_values,
    registry,
)
from rlhf_scratch.config.cli import flag_of, given_fields, parse_dataclass, split_flags

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
        f"TASK is {', '.join(TASKS)}; --algo is one of {', '.join(registry.names())} (default ppo, the arithmetic task's grpo; "
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
    task = task_given(rest)
    algo, preset = algo or registry.default_algo(task), preset or "tiny"
    cls = args_class(algo)
    if preset not in PRESETS:
        raise ConfigError(f"preset: must be one of {', '.join(PRESETS)}; got {preset!r}")
    default = cls(preset=preset, task="", **default_values(preset, task, flag_given(rest, "--env"), cls))
    try:
        args = parse_dataclass(cls, rest, default=default, prog=PROG, description=description(algo),
                               aliases=cls.FLAG_ALIASES)
    except ConfigError as e:
        raise ConfigError(other_algorithm_hint(str(e), algo)) from None
    if args.task == "":
        raise ConfigError(f"task: required, one of {', '.join(TASKS)} (or --resume RUN_DIR)")
    return args.validate(), None


def task_given(argv: list[str]) -> str:
    """The task the command line names (`--task T` or `--task=T`, the last if repeated; "" if none):
    its defaults are the parse's, under the flags (`config.task_values`)."""
    return flag_given(argv, "--task")


def flag_given(argv: list[str], flag: str) -> str:
    """The value the command line gives `flag` (`--env E` or `--env=E`, the last if repeated; "" if none):
    the task's and the environment's defaults are the parse's, under the flags (`config.default_values`)."""
    value = ""
    for i, token in enumerate(argv):
        if token == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif token.startswith(f"{flag}="):
            value = token.split("=", 1)[1]
    return value


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
