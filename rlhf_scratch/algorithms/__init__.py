"""The algorithms, one folder each, siblings over the shared rollout and `engine.trainer.Trainer`:

    ppo/          the blog's RLHFTrainer, with the policy it builds (policy.py: the LM and its critic)
    rloo/         RLOO: the leave-one-out baseline
    online_dpo/   Online DPO: pairs picked by the reward or a judge
    grpo/         GRPO and TRL's seven other loss types

Each folder holds `args.py` (its config dataclass, torch-free), its formulas (`objective.py` or
`loss.py`: pure functions of tensors, each with its hand-worked test) and `trainer.py` (its two
phases). None imports another; each composes `rollout`, `core` and the trainer's learning-phase
carrier. The table that names them for everything else is `rlhf_scratch/config/registry.py`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_package(package: str, parts: tuple[str, ...]) -> Callable[[str], Any]:
    """A module `__getattr__` for an algorithm's package: `name` from the first of its `parts`
    (submodules, imported on first use) that has it. So `from rlhf_scratch.algorithms.ppo import
    RLHFTrainer` works as it did when the algorithm was one file, while importing the package for its
    `args` (the command line does, through the registry) loads no torch."""

    def __getattr__(name: str) -> Any:
        if not name.startswith("__"):
            for part in parts:
                module = importlib.import_module(f"{package}.{part}")
                if name in vars(module):
                    return vars(module)[name]
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
