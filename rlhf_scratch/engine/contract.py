"""The trainer contract: everything the phase loop (`loop.run_training`) reads or calls on an
algorithm's trainer, and nothing else. `trainer.Trainer` implements the shared part of it (the
rollout's three roles, resume as one dict); an algorithm adds `compute_advantages` and
`update_actor` (see docs/architecture.md). The role methods carry verl's names: the controller's
workers call the very same methods, remote instead of local.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from transformer_lens import HookedTransformer

from rlhf_scratch.config import CommonArgs
from rlhf_scratch.engine.batch import Batch
from rlhf_scratch.models.policy import Policy
from rlhf_scratch.reward.judges import Judge
from rlhf_scratch.reward.tasks import RewardFn
from rlhf_scratch.rollout.phase import Rollout
from rlhf_scratch.rollout.prompts import PromptIterator


@runtime_checkable
class TrainerContract(Protocol):
    """Everything `loop.run_training` reads or calls on a trainer. Runtime-checkable: with the
    test suite's type checking on, a trainer missing any of these fails at the loop's door."""

    args: CommonArgs
    device: str
    quiet: bool
    """No progress bars nor notes (every process but rank 0 is quiet)."""
    lm: HookedTransformer
    """The language model being tuned: what samples, what is unembedded, what interp reads."""
    policy: Policy
    """What the run folder and the checkpoints save: `lm`, or an algorithm's module around it (`models.policy`)."""
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    prompts: PromptIterator
    reward_fn: RewardFn
    """What rewards the run (recorded in the run folder, so a resume can check it is the same)."""
    judge: Judge | None
    """Who picks the winner of a pair instead of the reward (Online DPO), recorded likewise."""
    skipped_in_a_row: int
    """Optimizer steps skipped in a row for a non-finite objective or gradient (the loop stops at
    args.max_skipped_steps)."""
    METRICS: ClassVar[tuple[str, ...]]
    """The names learning_phase may return (besides the loop's shared ones): the loop refuses any other."""

    # the phase's dataflow, in order (verl's names)
    def next_prompts(self) -> list[str]: ...
    def generate_sequences(self, prompts: list[str]) -> Rollout: ...
    def compute_log_prob(self, rollout: Rollout) -> Rollout: ...
    def compute_scores(self, rollout: Rollout) -> Rollout: ...
    def compute_advantages(self, batch: Batch) -> None: ...
    def update_actor(self, batch: Batch) -> dict[str, float]: ...
    # resume as one dict (nanoGPT's way); `weights_state` is its large part, for a failure's checkpoint
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def weights_state(self) -> dict[str, Any]: ...
