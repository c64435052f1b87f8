"""Command line: train a Bradley–Terry reward model on preference pairs.

    python -m rlhf_scratch.preferences --out pairs.jsonl --num-pairs 1000
    python -m rlhf_scratch.reward_model --pairs pairs.jsonl --run-dir runs/rm
    python -m rlhf_scratch.reward_model --resume runs/rm                 # after Ctrl-C
    python -m rlhf_scratch.reward_model --pairs pairs.jsonl --run-dir runs/rm --export-to rm_hf/
    python -m rlhf_scratch.train sentiment --reward-model runs/rm        # RLHF against it (or rm_hf/)

The model, loss and run folder are in `reward_modeling.py`; every field of `RewardModelArgs` is a
flag. A bad flag, file or folder is one line and exit code 2 (`config.command`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rlhf_scratch.config import ConfigError
from rlhf_scratch.config.cli import given_fields, parse_dataclass, split_flags
from rlhf_scratch.config.command import command

if TYPE_CHECKING:
    from rlhf_scratch.reward.model_args import RewardModelArgs


PROG = "python -m rlhf_scratch.reward_model"
EXTRA = "Also: --resume RUN_DIR (continue an interrupted run), --export-to OUT (then write a GPT2ForSequenceClassification folder)."


@dataclass
class Around:
    """The flags around the reward model's own (`RewardModelArgs`): where it comes from, where it goes."""

    resume: str | None = None
    """Continue the interrupted reward-model run in this folder."""
    export_to: str | None = None
    """Then write a GPT2ForSequenceClassification folder here (new or empty)."""


def main(argv: list[str] | None = None) -> int:
    """The command: `command()` owns its one-line errors and exit codes."""
    return command(parse, run, argv)


def parse(argv: list[str]) -> tuple[RewardModelArgs, Around]:
    """The reward model's validated args (a resumed run's own, the few flags it may change applied)."""
    from rlhf_scratch.reward.model_args import KIND, RewardModelArgs  # torch-free: --help answers at once

    around, rest = split_flags(Around, argv, default=Around(), prog=PROG)
    parsed = parse_dataclass(RewardModelArgs, rest, default=RewardModelArgs(), prog=PROG,
                             description=__doc__.split("\n\n")[0] + " " + EXTRA)
    opts = given_fields(parsed, RewardModelArgs())
    if around.resume is not None:
        resume = around.resume
        config = Path(resume) / "config.json"
        if not config.is_file():
            from rlhf_scratch.engine.runs import start_over_hint, stopped_before_config  # (torch: only here)

            if stopped_before_config(resume):
                raise ConfigError(f"resume: {resume}: {start_over_hint(resume, 'it wrote config.json')}")
            raise ConfigError(f"resume: {resume} is not a reward-model run folder (no config.json)")
        saved = json.loads(config.read_text())
        if saved.pop("algo", None) != KIND:
            raise ConfigError(f"resume: {resume} is not a reward-model run folder")
        args = RewardModelArgs(**saved)
        args.run_dir = resume
        for name in ("threads", "device", "quiet"):
            if opts.get(name) is not None:
                setattr(args, name, opts[name])
    else:
        args = parsed
    args.validate()
    if around.export_to is not None:
        out = Path(around.export_to)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ConfigError(f"export_to: {out} exists and is not an empty folder; choose a new one")
    return args, around


def run(parsed: tuple[RewardModelArgs, Around]) -> int:
    """Train (or resume) the reward model, then export it if asked."""
    from rlhf_scratch.engine.lifecycle import TrainingStopped
    from rlhf_scratch.engine.reward_model import train_reward_model

    args, around = parsed
    try:
        run_dir = train_reward_model(args, resume=around.resume is not None)
        if around.export_to is not None:
            from rlhf_scratch.commands.export import export_reward_model

            export_reward_model(run_dir, around.export_to)
            print(f"exported {run_dir} -> {around.export_to}  (AutoModelForSequenceClassification.from_pretrained)")
    except TrainingStopped as e:  # Ctrl-C or SIGTERM: the step finished, a checkpoint was written
        print(e, file=sys.stderr)  # ends with the resume command
        return e.exit_code
    print(f"done: {run_dir}\n"
          f"  train against it:  python -m rlhf_scratch.train sentiment --reward-model {run_dir}\n"
          f"  export it:         python -m rlhf_scratch.export {run_dir} OUT_DIR")
    return 0


if __name__ == "__main__":
    sys.exit(main())
