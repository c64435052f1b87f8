"""Device syncs inside torch: the operations of a learning step that a GPU cannot run without waiting.

`host_reads.py` counts the reads a line of Python makes (`.item()`, `bool()` …). Some operations wait
for the device inside torch, with no such line: a boolean index `x[mask]` (its result's length is the
number of True entries, which the host must know to allocate it: `nonzero`), its gradient
(`index_put` with a boolean index), `masked_select`, `nonzero`, `unique`, and `.item()` itself
(`_local_scalar_dense`). Each stalls a GPU's queue, and none can be inside a CUDA graph: a learning
step captured whole (issue 57, item 1) must have none. The count needs no GPU: the same aten
operations run on a CPU, seen here by a `TorchDispatchMode`.

    python benchmarks/device_syncs.py                                 # PPO, RLOO, GRPO: the count and its sites
    python benchmarks/device_syncs.py --json benchmarks/device_syncs_tiny.json

Counted per **step** (the objective of a minibatch and its optimizer step: what a graph would hold)
and, apart, per **phase** (the rest of the learning phase: advantages, the phase's statistics, read
once). Both with the masked statistics in their sync-free form (`core.objectives.SYNC_FREE = True`,
what a GPU runs: on a CPU the boolean index stays, bit for bit as before) and, for comparison, in the
CPU's form. One phase of the tiny preset, one thread.

tests/integration/test_device_syncs.py holds the step's count of PPO, RLOO and GRPO at 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling provenance.py, however this file is loaded
from provenance import provenance  # noqa: E402

aten = torch.ops.aten
WAITS = {aten._local_scalar_dense.default: "item", aten.nonzero.default: "nonzero", aten.masked_select.default: "masked_select",
         aten.is_nonzero.default: "is_nonzero", aten.equal.default: "equal", aten.allclose.default: "allclose",
         aten.repeat_interleave.Tensor: "repeat_interleave"}
BOOLEAN_INDEXED = (aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default)
ALGOS = ("ppo", "rloo", "grpo", "online_dpo")


def kind_of(func, args) -> str | None:
    """The kind of wait `func(*args)` makes on a GPU, or None."""
    if func in WAITS:
        return WAITS[func]
    if func in BOOLEAN_INDEXED and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or [])):
        return f"{func.__name__.split('.')[0]} (boolean index)"
    if "unique" in func.__name__:
        return "unique"
    return None


class DeviceSyncCounter(TorchDispatchMode):
    """Counts the waiting operations inside the `with` block by kind and by the first line of this
    package on the stack (the site to change)."""

    def __init__(self):
        super().__init__()
        self.sites: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.sites.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kind = kind_of(func, args)
        if kind is not None:
            frame, site = sys._getframe(1), "outside the package"
            while frame is not None:
                if "/rlhf_scratch/" in frame.f_code.co_filename:
                    site = f"{frame.f_code.co_filename.split('/rlhf_scratch/', 1)[1]}:{frame.f_lineno} {frame.f_code.co_name}"
                    break
                frame = frame.f_back
            self.sites[f"{site} [{kind}]"] += 1
        return func(*args, **(kwargs or {}))


def count_learning_phase(algo: str, sync_free: bool = True, preset: str = "tiny", **overrides) -> tuple[DeviceSyncCounter, DeviceSyncCounter]:
    """(per step, per phase): the waiting operations of phase 1's learning phase of `algo`, the steps'
    (each minibatch's objective and optimizer step) apart from the rest."""
    from rlhf_scratch.config import make_args, registry
    from rlhf_scratch.core import objectives
    from rlhf_scratch.engine import loop
    from rlhf_scratch.engine.trainer import Trainer

    step, phase = DeviceSyncCounter(), DeviceSyncCounter()
    saved = loop.learn, Trainer.ascend, Trainer.optimizer_step, getattr(objectives, "SYNC_FREE", None)  # (a checkout before it: one form)
    learn, ascend, optimizer_step = saved[:3]

    def phase_learn(trainer, batch, steps):
        with phase:
            return learn(trainer, batch, steps)

    def counted_ascend(self, minibatches, objective, total=None, learner=None):
        def counted_objective(minibatch):
            with step:
                return objective(minibatch)
        return ascend(self, minibatches, counted_objective, total, learner)

    def counted_step(self, J, learner=None):
        with step:
            return optimizer_step(self, J, learner)

    loop.learn, Trainer.ascend, Trainer.optimizer_step, objectives.SYNC_FREE = phase_learn, counted_ascend, counted_step, sync_free
    try:
        with tempfile.TemporaryDirectory() as tmp:
            args = make_args(preset, algo=algo, total_phases=1, run_dir=f"{tmp}/run", threads=1, device="cpu", **overrides)
            registry.get(algo).trainer_class()(args, quiet=True).train(args.run_dir)
    finally:
        loop.learn, Trainer.ascend, Trainer.optimizer_step, objectives.SYNC_FREE = saved
    return step, phase


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algos", default=",".join(ALGOS), help=f"comma-separated (default: {','.join(ALGOS)})")
    parser.add_argument("--json", type=Path, help="write the counts here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    counts: dict = {}
    for algo in args.algos.split(","):
        for form, sync_free in (("sync_free", True), ("cpu_form", False)):
            step, phase = count_learning_phase(algo, sync_free)
            counts.setdefault(algo, {})[form] = {
                "per_step_total": step.total, "per_step": dict(step.sites.most_common()),
                "rest_of_phase_total": phase.total - step.total, "whole_phase": dict(phase.sites.most_common())}
            print(f"{algo} ({form}): {step.total} in the steps, {phase.total - step.total} elsewhere in the learning phase")
            for site, n in step.sites.most_common():
                print(f"  step  {n:>4}  {site}")
    if args.json:
        import rlhf_scratch

        code = Path(rlhf_scratch.__file__).resolve().parents[1]
        args.json.write_text(json.dumps({
            "torch": torch.__version__, "preset": "tiny", "phase": "phase 1's learning phase, one thread, CPU",
            "provenance": provenance(code), "counts": counts}, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
