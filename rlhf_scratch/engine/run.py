"""The one front door of a run: `run(trainer, ...)` trains a built trainer to the end.

    trainer = registry.get(args.algo).trainer_class()(args)    # run setup: models, prompts, reward
    run_dir = run(trainer)                                      # the phase loop, the run folder

`python -m rlhf_scratch.train` (commands/train.py) and `Trainer.train` both come here; the phase
loop itself is `loop.run_training`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rlhf_scratch.engine.contract import TrainerContract
from rlhf_scratch.engine.loop import PhaseHook, run_training


def run(trainer: TrainerContract, run_dir: str | Path | None = None, *, resume: bool = False,
        hooks: Sequence[PhaseHook] = (), quiet: bool | None = None, controller: dict | None = None) -> Path:
    """Run every phase of `trainer` (an algorithm's trainer, or `controller.RayPPOTrainer`): a new run
    folder (or `run_dir`), or with `resume=True` continue the run in `run_dir` from its latest
    checkpoint. `hooks` run after every phase and log beside it (`loop.PhaseHook`); `quiet` defaults
    to the trainer's; `controller` is how the run is placed, recorded in config.json. Returns the folder."""
    quiet = trainer.quiet if quiet is None else quiet
    return run_training(trainer, None if run_dir is None else Path(run_dir), quiet, resume, hooks, controller=controller)
