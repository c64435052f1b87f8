"""`python -m rlhf_scratch.train TASK --controller ray [--workers N] [--placement colocated|split]
[--max-staleness 0|1] [--ray-address ADDR]`: the same run through the single controller.

The run is the engine's one loop (`engine.loop.run_training`) with `RayPPOTrainer` as its backend;
this module only brings the backend up and down: `ray_backend` checks what can be checked before Ray
starts (the flags: `options`; torchrun; an unreachable address), starts a local Ray instance (or joins
`--ray-address`), builds the worker groups, and at the end — Ctrl-C, SIGTERM or a failure too — ends
the workers and shuts down the Ray it started. Checkpoints, early stopping, hooks, status.json and the
signals are the loop's, as in process.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rlhf_scratch.config import CommonArgs
from rlhf_scratch.controller.options import ControllerArgs, check_ray_address, check_staleness, refuse_torchrun

if TYPE_CHECKING:
    from rlhf_scratch.controller.ray_trainer import RayPPOTrainer


def preflight(args: CommonArgs, controller: ControllerArgs) -> None:
    """Everything about a Ray run that can be refused before Ray starts, one ConfigError line each."""
    from rlhf_scratch.config import registry

    refuse_torchrun(controller)
    check_staleness(args.algo, controller.max_staleness, args.filters_groups())
    registry.get(args.algo).trainer_class().check_ranks(args, controller.workers)  # (imports torch: still before Ray)
    check_ray_address(controller.ray_address)


@contextmanager
def ray_backend(args: CommonArgs, controller: ControllerArgs, quiet: bool = False) -> Iterator[RayPPOTrainer]:
    """The single controller, ready for the loop: Ray started (or joined), the worker groups built;
    on the way out, however it is left, the workers ended and the Ray this started shut down."""
    from rlhf_scratch.controller.ray_trainer import RayPPOTrainer, init_ray, shutdown_ray

    preflight(args, controller)
    started = init_ray(controller.ray_address, num_cpus=controller.workers * (1 + (controller.placement == "split")))
    trainer = None
    try:
        trainer = RayPPOTrainer(args, workers=controller.workers, placement=controller.placement,
                                max_staleness=controller.max_staleness, quiet=quiet)
        yield trainer
    finally:
        if trainer is not None:
            trainer.shutdown()
        if started:
            shutdown_ray()
