"""The trainer contract: everything the phase loop (`loop.run_training`) reads or calls on what it
drives, and nothing else. Two things meet it:

    an algorithm's trainer      (engine.trainer.Trainer and a subclass): the in-process backend,
                                each role the trainer's own method
    controller.RayPPOTrainer    the Ray backend: each role forwarded to its worker group, where the
                                same trainer's method runs

so a feature of the run (checkpoints on a signal, early stopping, hooks, the METRICS check, status.json)
is written once, in the loop, and both have it. The role methods carry verl's names and run in
verl's order (`dataflow`); the state is handed over in two parts, the small one copied every phase
and the large one read only when a checkpoint is written (see docs/architecture.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from torch import Tensor

from rlhf_scratch.config import CommonArgs
from rlhf_scratch.core.host import Stats
from rlhf_scratch.engine.batch import Batch
from rlhf_scratch.rollout.phase import Rollout


@runtime_checkable
class TrainerContract(Protocol):
    """Everything `loop.run_training` reads or calls. Runtime-checkable: with the test suite's type
    checking on, an object missing any of these fails at the loop's door."""

    args: CommonArgs
    device: str
    quiet: bool
    """No progress bars nor notes (every process but rank 0 is quiet)."""
    skipped_in_a_row: int
    """Optimizer steps skipped in a row for a non-finite objective or gradient (the loop stops at
    args.max_skipped_steps)."""
    METRICS: ClassVar[tuple[str, ...]]
    """The names update_critic and update_actor may return (besides the loop's shared ones): the loop refuses any other."""

    # the phase's dataflow, in verl's order (`dataflow.roll_out`, `dataflow.learn`)
    def next_prompts(self) -> list[str]: ...
    def generate_sequences(self, prompts: list[str], validate: dict | None = None) -> Rollout: ...
    def compute_ref_log_prob(self, rollout: Rollout) -> Tensor | None: ...
    def compute_log_prob(self, rollout: Rollout, ref_hidden: Tensor | None = None) -> Rollout: ...
    def compute_values(self, rollout: Rollout) -> Tensor | None: ...
    def compute_scores(self, rollout: Rollout) -> Rollout: ...
    def compute_advantages(self, batch: Batch) -> None: ...
    def update_critic(self, batch: Batch) -> Stats: ...
    def update_actor(self, batch: Batch) -> Stats: ...

    # what the run folder records
    def learning_rate(self) -> float:
        """The policy's learning rate for the next update (charts/learning_rate)."""
    def rewarded_by(self) -> dict:
        """What scores the samples (`reward.tasks.rewarded_by`): recorded, and checked on resume."""
    def save_policy(self, run_dir: Path) -> None:
        """Write the tuned policy into the run folder (`runs.save_run_policy`)."""

    # the state, in two parts: nothing large is copied every phase
    def progress_state(self) -> dict[str, Any]:
        """Everything a bit-exact resume needs but the weights, optimizers and schedules: small,
        copied after every phase (the prompts' position, the algorithm's state, every rank's RNG)."""
    def weights_state(self) -> dict[str, Any]:
        """The large part: every model's weights, every optimizer's moments, every schedule; read
        when a checkpoint is written."""
    def steps_taken(self) -> int | None:
        """How many optimizer and scheduler steps every optimizer this trainer owns has taken (None:
        unknown, an update in flight). While it is unchanged, `weights_state()` is still the last phase's."""
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back a checkpoint: `{**progress_state(), **weights_state()}` and the loop's entries."""
