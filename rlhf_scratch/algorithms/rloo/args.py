"""RLOO's config: a `GroupArgs` (G completions, a clipped ratio, β) with RLOO's defaults. Torch-free: the command line reads it
before torch loads, so a bad flag is answered at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rlhf_scratch.config import GroupArgs


@dataclass
class RLOOArgs(GroupArgs):
    """RLOO (Ahmadian et al. 2024): G completions per prompt, leave-one-out baseline, no critic."""

    ALGO: ClassVar[str] = "rloo"

    num_generations: int = 4
    """G: completions per prompt (consecutive in the batch); batch_size must divide by it. 4, not TRL's
    2: at the same batch the leave-one-out baseline averages G − 1 = 3 other rewards instead of 1, so
    the advantage's variance is σ²·G/(G − 1) = 1.33 σ² instead of 2 σ² (docs/fidelity.md, "RLOO's G")."""
    num_iterations: int = 1
    """Passes over each rollout batch. With 1, the ratio is 1 (plain REINFORCE) only on the first
    minibatch; later minibatches are scored by a policy that has already stepped."""
    epsilon_low: float = 0.2
    """Lower clip of the sequence ratio: 1 - epsilon_low."""
    epsilon_high: float = 0.2
    """Upper clip of the sequence ratio: 1 + epsilon_high."""
    beta: float = 0.05
    """β of the sequence-level KL folded into the reward: r <- R - β Σ_t (log π_old - log π_ref)."""
    normalize_advantages: bool = False
    """Whiten the advantages over the whole batch ((A - mean) / (std + 1e-4)); off as in TRL."""
    top_k: int = 0
    """Sample from the top-k tokens only (0 = all, TRL's default: see docs/fidelity.md, "Top-k")."""
