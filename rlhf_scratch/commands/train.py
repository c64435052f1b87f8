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

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rlhf_scratch.config import CommonArgs, registry
from rlhf_scratch.config.command import command
from rlhf_scratch.controller.options import (
    ControllerArgs,
    controller_record,
    flags_given,
    resumed_controller,
    split_controller_flags,
)
from rlhf_scratch.engine.run_args import PROG, parse_args

if TYPE_CHECKING:
    from rlhf_scratch.engine.contract import TrainerContract


def main(argv: list[str] | None = None) -> int:
    """The command: `command()` owns its one-line errors and exit codes."""
    return command(parse, run, argv)


def parse(argv: list[str]) -> tuple[CommonArgs, str | None, ControllerArgs]:
    """The run's validated args, the folder to resume (None: a new run) and the controller: for a
    resumed run, as its config.json records it unless the command line says otherwise (`options.resumed_controller`)."""
    resuming = any(arg == "--resume" or arg.startswith("--resume=") for arg in argv)
    controller, rest = split_controller_flags(argv, resuming)  # --controller ray: the single controller (controller/)
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
