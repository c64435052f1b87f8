"""A toy algorithm, registered only while a test runs it: the proof that every test list of
algorithms comes from the registry. A registered algorithm — this one — goes through the contract
test (tests/integration/test_contract.py), the resume test (tests/integration/test_resume.py) and the two-process test
(tests/slow/test_distributed.py) with no line of those tests naming it.

REINFORCE with the batch-mean baseline, the smallest whole algorithm over the shared scaffolding:

    A_i = R_i − mean_j R_j                         (the global batch's mean, every rank's rewards)
    J   = mean_i A_i · log π(o_i | q)              (ascended, one step per minibatch)

A torchrun process knows it through the registry's environment hook:
RLHF_SCRATCH_ALGORITHMS=tests/toy_algorithm.py:register.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

from rlhf_scratch.config import CommonArgs, registry
from rlhf_scratch.core.memory import minibatch_rows
from rlhf_scratch.engine.batch import Batch
from rlhf_scratch.engine.trainer import Trainer

TOY = "toy"


@dataclass
class ToyArgs(CommonArgs):
    """Toy REINFORCE (tests only): the batch-mean baseline, one pass, no reference term."""

    ALGO: ClassVar[str] = TOY

    top_k: int = 0
    """Sample from the top-k tokens only (0 = all: the score-function gradient needs the full softmax)."""


class ToyTrainer(Trainer):
    METRICS = ("objective/toy", "advantages/abs_mean", "charts/skipped_steps")

    def compute_advantages(self, batch: Batch) -> None:
        rewards = batch.everyone.rewards  # the global batch's baseline: the same on every rank
        batch.advantages = rewards - rewards.mean()

    def update_actor(self, batch: Batch) -> dict[str, float]:
        rollout, advantages = batch.rollout, batch.local_advantages

        def objective(rows):
            J = (advantages[rows] * self.sequence_log_probs(rollout, rows)).mean()
            return J, {"objective/toy": J.item()}

        learned = self.ascend(minibatch_rows(len(rollout), self.args.num_minibatches), objective)
        return {**learned, "advantages/abs_mean": advantages.abs().mean().item()}


ENTRY = registry.Algorithm(TOY, "Toy", f"{__name__}:ToyArgs", f"{__name__}:ToyTrainer", compared_by_default=False)


def register() -> None:
    """Add the toy to the registry (nothing if it is there already)."""
    if TOY not in registry.ALGORITHMS:
        registry.register(ENTRY)


@contextmanager
def registered(algo: str) -> Iterator[str]:
    """For the test of `algo`: the toy registered until the block ends when `algo` is the toy; any other as it is."""
    if algo != TOY:
        yield algo
        return
    register()
    try:
        yield algo
    finally:
        registry.unregister(TOY)


def algorithms() -> list[str]:
    """What a test runs through: every registered algorithm, and the toy (registered by `registered`)."""
    return [*registry.names(), TOY]


def small_settings(algo: str, num_generations: int = 4) -> dict:
    """The fields a small test run of `algo` needs beyond the shared ones: G for a group algorithm."""
    fields = registry.get(algo).args_class().__dataclass_fields__
    return {"num_generations": num_generations} if "num_generations" in fields else {}
