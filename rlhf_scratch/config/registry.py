"""The algorithms, written once: the one table every other list is derived from.

    --algo choices, make_args, a run folder's config   config.py, train.py, runs.py
    labels, default sets and extra flags of the studies  studies/
    the top-level imports (`from rlhf_scratch import RLOOTrainer, compute_rloo_advantages`)
    the benchmarks                                       benchmarks/

An entry names its args dataclass and its trainer as "module:Name" strings, imported on first use:
this module imports nothing, so a command line that rejects a bad flag answers before torch loads.

Adding an algorithm is one file (its trainer and its formulas, `algorithms/<name>.py`), its args
dataclass (a subclass of `config.CommonArgs` with `ALGO = "<name>"`), and one `register(...)`:
here for the package's own, or from your code for yours (docs/architecture.md, "Adding an algorithm").
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


def resolve(target: str | type) -> Any:
    """A "module:Name" string imported (or a class, returned as it is)."""
    if not isinstance(target, str):
        return target
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Algorithm:
    """One algorithm: what the command line, the run folder, the studies and the exports need to know."""

    name: str
    """`--algo NAME`; also the args class's ALGO and the run folder's `algo`."""
    label: str
    """How tables and figures name it (`Online DPO`)."""
    args: str | type
    """Its config dataclass, "module:Name" (or the class)."""
    trainer: str | type
    """Its trainer class, "module:Name" (or the class): `Trainer(args, reward_fn=None, quiet=False)`."""
    exports: tuple[str, ...] = ()
    """Public names of the trainer's module, importable from `rlhf_scratch` (its formulas)."""
    study_flags: tuple[str, ...] = ()
    """Flags every study run of it adds (GRPO at β = 0 runs no reference: `--measure-kl` logs its KL anyway)."""
    compared_by_default: bool = True
    """Whether `compare` runs it when `--algos` is not given."""
    value_head: bool = False
    """Whether its policy is the LM with a value head (`model.TransformerWithValueHead`): how a run folder is rebuilt."""

    def args_class(self) -> type:
        return resolve(self.args)

    def trainer_class(self) -> type:
        return resolve(self.trainer)

    @property
    def module(self) -> str:
        """The module that defines the trainer (where its `exports` live)."""
        return self.trainer.partition(":")[0] if isinstance(self.trainer, str) else self.trainer.__module__


ALGORITHMS: dict[str, Algorithm] = {}


def register(algorithm: Algorithm) -> Algorithm:
    """Add `algorithm` to the table (a name already taken is an error: unregister it first)."""
    if algorithm.name in ALGORITHMS:
        raise ValueError(f"register: an algorithm named {algorithm.name!r} is registered already")
    ALGORITHMS[algorithm.name] = algorithm
    return algorithm


def unregister(name: str) -> None:
    """Remove `name` from the table (tests register a toy algorithm and take it away again)."""
    ALGORITHMS.pop(name, None)


def names() -> tuple[str, ...]:
    """Every registered --algo, in registration order."""
    return tuple(ALGORITHMS)


def get(name: str) -> Algorithm:
    """The entry of `name`; a ValueError naming the choices for an unknown one."""
    if name not in ALGORITHMS:
        raise ValueError(f"algo: must be one of {', '.join(ALGORITHMS)}; got {name!r}")
    return ALGORITHMS[name]


register(Algorithm(
    "ppo", "PPO", "rlhf_scratch.config:RLHFArgs", "rlhf_scratch.algorithms.ppo:RLHFTrainer",
    exports=("RLHFTrainer", "compute_rlhf_objective"), value_head=True,
))
register(Algorithm(
    "rloo", "RLOO", "rlhf_scratch.config:RLOOArgs", "rlhf_scratch.algorithms.rloo:RLOOTrainer",
    exports=("RLOOTrainer", "compute_rloo_advantages", "compute_kl_shaped_rewards", "calc_rloo_objective"),
))
register(Algorithm(
    "online_dpo", "Online DPO", "rlhf_scratch.config:OnlineDPOArgs", "rlhf_scratch.algorithms.online_dpo:OnlineDPOTrainer",
    exports=("OnlineDPOTrainer", "calc_dpo_loss", "select_chosen"),
))
register(Algorithm(
    "grpo", "GRPO", "rlhf_scratch.config:GRPOArgs", "rlhf_scratch.algorithms.grpo:GRPOTrainer",
    exports=("GRPOTrainer", "compute_grpo_advantages", "calc_grpo_objective", "calc_grpo_terms", "calc_importance_ratio",
             "calc_k3_kl", "calc_clipped_surrogate", "calc_cispo_surrogate", "calc_sapo_surrogate", "calc_vespo_weights",
             "aggregate_grpo_terms", "calc_clip_counts", "mean_length_by_advantage_sign"),
    study_flags=("--measure-kl",), compared_by_default=False,
))
