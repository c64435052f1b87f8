"""One step of asynchrony measured: the single controller's phase time with `--placement split` at
`--max-staleness 0` (synchronous) against `--max-staleness 1` (the rollout pool samples phase n+1 while
the actor learns phase n), and colocated for reference; interleaved A B C A B C.

    python benchmarks/controller_async.py --repeats 3 --phases 10 --out benchmarks/controller_async_<date>.json

Each repeat runs three fresh processes, one after the other:

    A  python -m rlhf_scratch.train sentiment --controller ray --placement split                     2 worker processes
    B  python -m rlhf_scratch.train sentiment --controller ray --placement split --max-staleness 1   2 worker processes
    C  python -m rlhf_scratch.train sentiment --controller ray                                       1 worker process

A run's figure is the median of `charts/phase_time` over phases 2..P (phase 1 warms up); the speed-up is
A/B taken pair by pair (a repeat's A against the B beside it), min, median and max, and C/B likewise.
The report also gives each side's median timing/<step> (where the time goes: with asynchrony
timing/gen is only the wait for a generation that ran during the previous update). Every process
trains with `--threads T` torch threads (1 by default) and OMP_NUM_THREADS=T; the report states T, the
machine's cores and its load average before and after. Smallest setting (a check that it works):

    python benchmarks/controller_async.py --repeats 1 --phases 2 --batch-size 8 --num-minibatches 2 --gen-len 6
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from controller_overhead import ROOT, shape_flags, spread
from provenance import describe, provenance

SIDES = {"split_sync": ["--placement", "split"],
         "split_async": ["--placement", "split", "--max-staleness", "1"],
         "colocated": []}
"""Each side's controller flags (A, B, C)."""


def run(side: str, folder: Path, opts: argparse.Namespace) -> dict:
    """One fresh run: the median of its phases 2..P, each timing/<step>'s median over them, its wall seconds."""
    run_dir = folder / f"{side}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "rlhf_scratch.train", "sentiment", "--total-phases", str(opts.phases),
           "--run-dir", str(run_dir), "--no-save-model", *shape_flags(opts), "--controller", "ray", *SIDES[side]]
    env = {**os.environ, "OMP_NUM_THREADS": str(opts.threads), "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{side} failed: {done.stderr.strip().splitlines()[-1:]}")
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][1:]
    steps = sorted({k for m in metrics for k in m if k.startswith("timing/")})
    return {"phase_median": statistics.median(m["charts/phase_time"] for m in metrics), "wall": wall,
            "timing_median": {k: statistics.median(m[k] for m in metrics if k in m) for k in steps},
            "weights_versions": [m.get("async/weights_version") for m in metrics]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="A B C triples")
    parser.add_argument("--phases", type=int, default=10, help="phases per run (phase 1 is left out of the figure)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in every process (OMP_NUM_THREADS too)")
    parser.add_argument("--batch-size", type=int, default=None, help="the tiny preset's when not given")
    parser.add_argument("--num-minibatches", type=int, default=None)
    parser.add_argument("--gen-len", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None, help="write the numbers here as JSON")
    opts = parser.parse_args()
    if opts.phases < 2:
        parser.error("--phases: at least 2 (phase 1 warms up and is not counted)")
    result = {"provenance": provenance(), "device": opts.device, "threads_per_process": opts.threads, "cores": os.cpu_count(),
              "load_before": os.getloadavg(), "phases": opts.phases, "repeats": opts.repeats, "shape": shape_flags(opts),
              "sides": {k: " ".join(["--controller ray", *v]) for k, v in SIDES.items()}}
    print(describe(result["provenance"]), flush=True)
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(opts.repeats):
            for side in SIDES:
                runs[side].append(run(side, Path(folder), opts))
                print(f"repeat {repeat + 1}, {side}: median phase {runs[side][-1]['phase_median']:.3f} s "
                      f"(process {runs[side][-1]['wall']:.1f} s)", flush=True)
    result["load_after"] = os.getloadavg()
    result["median_phase"] = {side: spread([r["phase_median"] for r in rs]) for side, rs in runs.items()}
    result["speedup_sync_over_async"] = spread([a["phase_median"] / b["phase_median"]
                                                for a, b in zip(runs["split_sync"], runs["split_async"])])
    result["colocated_over_async"] = spread([c["phase_median"] / b["phase_median"]
                                             for c, b in zip(runs["colocated"], runs["split_async"])])
    result["runs"] = runs
    for side, s in result["median_phase"].items():
        print(f"{side:<12} median phase {s['median']:.3f} s (min {s['min']:.3f}, max {s['max']:.3f})")
    s = result["speedup_sync_over_async"]
    print(f"split sync / split async, pair by pair: median {s['median']:.2f}x (min {s['min']:.2f}, max {s['max']:.2f})")
    print(f"threads per process {opts.threads}, {result['cores']} cores, load {result['load_before'][0]:.2f} -> "
          f"{result['load_after'][0]:.2f}")
    if opts.out:
        Path(opts.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
