"""Online DPO's config, TRL's names (beta, loss_type, judge). Torch-free: the command line reads it
before torch loads, so a bad flag is answered at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rlhf_scratch.config import CommonArgs, _check, _finite, registry

DPO_LOSS_TYPES = ("sigmoid", "ipo")
JUDGES = ("tiny", "vader", "rule")


@dataclass
class OnlineDPOArgs(CommonArgs):
    """Online DPO (Guo et al. 2024): two completions per prompt, a reward model or judge picks the winner."""

    ALGO: ClassVar[str] = "online_dpo"

    temperature: float = 0.9
    """Sampling temperature (> 0); 0.9 is TRL's OnlineDPOConfig default. Every log-prob of the pair is
    taken at it too (TRL's online trainer scores at 1: docs/peer-check.md)."""
    num_iterations: int = 1
    """Passes over each batch of pairs."""
    beta: float = 0.1
    """β of the DPO loss: how strongly the log-ratio to the reference is pushed."""
    loss_type: str = "sigmoid"
    """`sigmoid` (DPO: -log σ(β h)) or `ipo` ((h - 1/(2β))²)."""
    judge: str | None = None
    """Who picks the winner: None (the task's reward, higher wins), `tiny` (the tiny classifier as
    a pairwise judge), `vader` (the VADER lexicon as a judge) or `rule` (a verifiable task's rule: the right
    answer wins, two right or two wrong is undecided; task arithmetic's default)."""
    top_k: int = 0
    """Sample from the top-k tokens only (0 = all, TRL's default: see docs/fidelity.md, "Top-k")."""

    def samples_per_group(self) -> int:
        return 2

    def validate(self) -> "OnlineDPOArgs":
        super().validate()
        _check(self.batch_size % 2 == 0, "batch_size", f"must be even (two completions per prompt); got {self.batch_size}")
        _check(self.minibatch_size() % 2 == 0, "num_minibatches",
               f"must keep whole pairs in a minibatch (batch_size / num_minibatches = {self.minibatch_size()} is odd)")
        _check(self.loss_type in DPO_LOSS_TYPES, "loss_type", f"must be one of {', '.join(DPO_LOSS_TYPES)}; got {self.loss_type!r}")
        _check(self.judge is None or self.judge in JUDGES, "judge", f"must be one of {', '.join(JUDGES)}; got {self.judge!r}")
        _check(self.judge != "rule" or registry.get_task(self.task).evaluate is not None, "judge",
               f"rule judges a verifiable task's answers against their ground truth (task arithmetic); got task {self.task}")
        _check(_finite(self.beta) and self.beta > 0, "beta", f"must be > 0; got {self.beta}")
        return self

    def _positive_ints(self) -> tuple[str, ...]:
        return super()._positive_ints() + ("num_iterations",)
