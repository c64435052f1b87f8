"""The trainer contract: everything the phase loop (`loop.run_training`) reads or calls on an
algorithm's trainer, and nothing else. `trainer.Trainer` implements the shared part of it; an
algorithm adds its two phases (see docs/architecture.md).
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from transformer_lens import HookedTransformer

from rlhf_scratch.config import CommonArgs
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

    def rollout_phase(self) -> Rollout: ...
    def learning_phase(self, rollout: Rollout) -> dict[str, float]: ...
    def extra_state(self) -> dict[str, Any]: ...
    def load_extra_state(self, state: dict[str, Any]) -> None: ...
