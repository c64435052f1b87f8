"""Host reads per steady phase: how often one phase of training reads a tensor's value back into Python.

On a GPU every such read waits for the device to finish what it was given (a host sync): the chip
idles while Python decides what to launch next. The count needs no GPU: the same Python runs on a
CPU, so each call below is a sync wherever the tensors live.

    python benchmarks/host_reads.py                                   # PPO, tiny preset: the count and its sites
    python benchmarks/host_reads.py --algos ppo,rloo,grpo,online_dpo --json benchmarks/host_reads_tiny.json

Counted (`HostReadCounter`): `Tensor.item`, `bool()`, `float()`, `int()`, `operator.index`,
`.tolist()`, `.numpy()`, `np.asarray(tensor)` (`__array__`), `.cpu()`, `.to(...)` the CPU where
the calling line names "cpu" (not `.to(run_device)`, which stays on the device on a GPU), and each
device sync of the per-part clocks (`core.timing._sync`: two a `timed` section where the checkout's
clocks synchronise; now only with `timing.profile`), each call once (a read made inside a counted one, `__array__` → `numpy`, is not
counted again). A **steady phase** is one iteration of the loop (`engine.loop._run_phases`): from
the start of phase `STEADY_PHASE`'s rollout to the start of the next phase's, so the phase's
logging, early stopping and checkpoint bookkeeping are in it; phase 1 is not (the first sample
table and curves), nor the last (forced table, final plot). The preset's defaults otherwise: 64
completions × 30 tokens, 2 passes × 4 minibatches, one thread.

tests/integration/test_host_reads.py fails if PPO's count rises above the ceiling recorded in
benchmarks/host_reads_tiny.json.
"""

from __future__ import annotations

import argparse
import json
import linecache
import sys
import tempfile
import threading
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling provenance.py, however this file is loaded
from provenance import provenance  # noqa: E402

CEILING = {"ppo": 12}
"""The most host reads a steady phase may make (issue 57); tests/integration/test_host_reads.py holds PPO to it."""
STEADY_PHASE = 2
"""The phase counted (of STEADY_PHASE + 1): not the first, not the last."""
PACKAGE = "rlhf_scratch"
READS = ("item", "__bool__", "__float__", "__int__", "__index__", "tolist", "numpy", "__array__", "cpu")


def _to_host(tensor, *args, **kwargs) -> bool:
    """Whether a `.to(...)` call copies to the host on every device: its target is the CPU and the calling
    line names it ("cpu" in the source). `x.to(self.device)` or TransformerLens' `.to(cfg.device)` is a
    CPU target on a CPU run too, but stays on the device on a GPU: not a read."""
    device = args[0] if args else kwargs.get("device")
    if not ((isinstance(device, str) and device.split(":")[0] == "cpu")
            or (isinstance(device, torch.device) and device.type == "cpu")):
        return False
    caller = sys._getframe(2)
    line = linecache.getline(caller.f_code.co_filename, caller.f_lineno)
    return "'cpu'" in line or '"cpu"' in line


class HostReadCounter:
    """Counts reads of a tensor's value into Python inside the `with` block, by kind and by the first
    line of this package on the stack that made them (the site to change). Patches `torch.Tensor`'s
    methods for the block and puts them back on leaving; one thread's reads."""

    def __init__(self):
        self.kinds: Counter[str] = Counter()
        self.sites: Counter[str] = Counter()
        self.counting = False
        self._depth = threading.local()
        self._saved: dict[str, object] = {}

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def _site(self) -> str:
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if f"/{PACKAGE}/" in name:
                return f"{name.split(f'/{PACKAGE}/', 1)[1]}:{frame.f_lineno} {frame.f_code.co_name}"
            frame = frame.f_back
        return "outside the package"

    def _wrap(self, kind: str, method, counts=lambda *args, **kwargs: True):
        counter = self

        def read(*args, **kwargs):
            depth = getattr(counter._depth, "n", 0)
            if counter.counting and depth == 0 and counts(*args, **kwargs):
                counter.kinds[kind] += 1
                counter.sites[f"{counter._site()} [{kind}]"] += 1
            counter._depth.n = depth + 1
            try:
                return method(*args, **kwargs)
            finally:
                counter._depth.n = depth

        return read

    def __enter__(self) -> HostReadCounter:
        for name in (*READS, "to"):
            self._saved[name] = torch.Tensor.__dict__.get(name, getattr(torch.Tensor, name))
        for name in READS:
            setattr(torch.Tensor, name, self._wrap(name, self._saved[name]))
        torch.Tensor.to = self._wrap("to(cpu)", self._saved["to"], counts=_to_host)
        from rlhf_scratch.core import timing

        self._timing, self._saved_sync = timing, timing._sync
        # the clocks' device sync: a no-op on a CPU, a wait on a GPU wherever the checkout's timing still syncs
        timing._sync = self._wrap("sync(timed)", timing._sync, counts=lambda: getattr(timing, "_profile", True))
        self.counting = True
        return self

    def __exit__(self, *exc) -> None:
        self.counting = False
        for name, method in self._saved.items():
            setattr(torch.Tensor, name, method)
        self._saved.clear()
        self._timing._sync = self._saved_sync


@contextmanager
def counting_phase(counter: HostReadCounter, phase: int = STEADY_PHASE):
    """Count with `counter` during loop iteration `phase` only: from the start of `_one_phase(phase)`
    to the start of `_one_phase(phase + 1)` (or the loop's end)."""
    from rlhf_scratch.engine import loop

    one_phase = loop._one_phase

    def watched(trainer, at, *args, **kwargs):
        counter.counting = at == phase
        return one_phase(trainer, at, *args, **kwargs)

    loop._one_phase = watched
    try:
        with counter:
            counter.counting = False
            yield counter
    finally:
        loop._one_phase = one_phase


def count_phase(algo: str = "ppo", preset: str = "tiny", **overrides) -> HostReadCounter:
    """The host reads of one steady phase of `algo` on `preset` (defaults, one thread, CPU)."""
    from rlhf_scratch.config import make_args, registry

    with tempfile.TemporaryDirectory() as tmp:
        args = make_args(preset, algo=algo, total_phases=STEADY_PHASE + 1, run_dir=f"{tmp}/run", threads=1,
                         device="cpu", **overrides)
        trainer = registry.get(algo).trainer_class()(args, quiet=True)
        with counting_phase(HostReadCounter()) as counter:
            trainer.train(args.run_dir)
    return counter


def record(counter: HostReadCounter) -> dict:
    """One algorithm's count for the JSON: total, by kind, by site (most first)."""
    return {"total": counter.total, "by_kind": dict(counter.kinds.most_common()),
            "by_site": dict(counter.sites.most_common())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algos", default="ppo", help="comma-separated registered algorithms (default: ppo)")
    parser.add_argument("--json", type=Path, help="write the counts here, under --label (an existing file keeps its other labels)")
    parser.add_argument("--label", default="after", help="the key the counts go under in --json (default: after)")
    parser.add_argument("--sites", type=int, default=15, help="sites printed per algorithm")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    counts = {}
    for algo in args.algos.split(","):
        counter = count_phase(algo)
        counts[algo] = record(counter)
        print(f"{algo}: {counter.total} host reads in steady phase {STEADY_PHASE}: {dict(counter.kinds.most_common())}")
        for site, n in counter.sites.most_common(args.sites):
            print(f"  {n:>4}  {site}")
    if args.json:
        import rlhf_scratch

        out = json.loads(args.json.read_text()) if args.json.is_file() else {}
        code = Path(rlhf_scratch.__file__).resolve().parents[1]  # the checkout whose code ran (PYTHONPATH may name another)
        out.update({"torch": torch.__version__, "preset": "tiny", "ceiling": CEILING,
                    "phase": f"loop iteration {STEADY_PHASE} of {STEADY_PHASE + 1}, one thread, CPU",
                    args.label: {"provenance": provenance(code), "counts": counts}})
        out["provenance"] = out[args.label]["provenance"] if args.label == "after" else out.get("provenance", out[args.label]["provenance"])
        args.json.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
