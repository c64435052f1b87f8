"""What the capstones' notebook (exercises 06) uses besides its checks: the pieces of the algorithm
contract a new algorithm is written with, a short training run of a registry entry, and the package's
recorded runs over seeds.

    Trainer, Batch          the shared scaffolding (`engine.trainer`): a subclass writes compute_advantages
                            and update_actor; `self.ascend`, `self.sequence_log_probs` carry the learning phase
    Algorithm, RLOOArgs     a registry entry (`config.registry`) and RLOO's config (`algorithms.rloo.args`)
    minibatch_rows          how every algorithm cuts a batch (`core.memory`)
    sequence_log_probs      Σ_t over the completion mask (`core.objectives`)
    train_phases(entry)     register the entry, train it a few phases on the tiny preset, its metrics per phase
    recorded_runs(name)     a benchmark JSON of this checkout (`benchmarks/`), as it was recorded
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from rlhf_scratch.algorithms.rloo.args import RLOOArgs
from rlhf_scratch.config import make_args, registry
from rlhf_scratch.config.registry import Algorithm
from rlhf_scratch.core.memory import minibatch_rows
from rlhf_scratch.core.objectives import sequence_log_probs
from rlhf_scratch.engine.batch import Batch
from rlhf_scratch.engine.trainer import Trainer

__all__ = ["Algorithm", "Batch", "RLOOArgs", "Trainer", "minibatch_rows", "recorded_runs", "sequence_log_probs",
           "train_phases"]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
"""The recorded benchmark results (a source checkout: the folder beside the package)."""


def train_phases(entry: Algorithm, phases: int = 3, **settings: Any) -> list[dict[str, Any]]:
    """Register `entry` (for this call), train it `phases` phases on the tiny preset in a temporary run
    folder through the engine's one front door (`Trainer.train`), and return each phase's metrics
    (its `metrics.jsonl`). `settings`: fields of its args over the small defaults here."""
    values = dict(batch_size=16, gen_len=16, num_minibatches=2, total_phases=phases, seed=0, threads=1,
                  device="cpu", **settings)
    registry.unregister(entry.name)
    registry.register(entry)
    try:
        trainer = entry.trainer_class()(make_args("tiny", entry.name, **values), quiet=True)
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = trainer.train(Path(tmp) / "run")
            return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    finally:
        registry.unregister(entry.name)


def recorded_runs(name: str) -> dict[str, Any]:
    """`benchmarks/<name>` as recorded (e.g. compare_sentiment_2026-11-25_3seeds.json: its "runs" by
    "<algo>-s<seed>"); nothing is re-run."""
    return json.loads((BENCHMARKS / name).read_text())
