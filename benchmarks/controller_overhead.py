"""Per-phase time of the single controller (`train --controller ray`) against the in-process trainer,
at 1 and 2 ranks, interleaved A B A B; and what moving the batch through Ray costs, column by column.

    python benchmarks/controller_overhead.py --repeats 3 --phases 10 --ranks 1,2 --out benchmarks/controller_overhead_<date>.json

For each rank count N, each repeat runs two fresh processes, one after the other (A B A B …):

    A  python -m rlhf_scratch.train sentiment --controller ray --workers N      the driver and N worker processes
    B  N = 1: python -m rlhf_scratch.train sentiment                           the in-process loop
       N > 1: python -m torch.distributed.run --standalone --nproc-per-node N -m rlhf_scratch.train sentiment

A run's figure is the median of `charts/phase_time` over phases 2..P (phase 1 warms up); over the
repeats the report gives each side's min and median, and the ratio A/B taken pair by pair (a repeat's
A against the B beside it, so a drift in the machine's speed cancels), min, median and max. Every
process trains with `--threads T` torch threads (1 by default) and OMP_NUM_THREADS=T; the report
states T, the processes per run, the machine's cores and its load average before and after.

The serialisation cost is measured apart, in one process: one phase's batch as the driver holds it
before `update_actor` (the trainer's rollout as a DataProto, with the rewards and PPO's advantages),
each column alone and the whole batch put into Ray's object store (`ray.put`) and read back
(`ray.get`), its bytes and the milliseconds of each, min and median of `--serialisation-reps`.
Smallest setting (a check that it works, not a measurement):

    python benchmarks/controller_overhead.py --repeats 1 --phases 2 --ranks 1,2 --batch-size 8 --num-minibatches 2 --gen-len 6 --serialisation-reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository: the runs start there, and this process imports the package from it."""

sys.path.insert(0, str(ROOT))  # the package of this checkout, installed or not
sys.path.insert(0, str(ROOT / "benchmarks"))  # the sibling provenance.py, however this file is loaded

from provenance import describe, provenance  # noqa: E402 (the commit that ran, read from git now)

from rlhf_scratch.engine.loop import TIMING_PREFIXES  # noqa: E402 (wall-clock metrics: left out when the sides are compared)


def shape_flags(opts: argparse.Namespace) -> list[str]:
    """The phase's shape and device, as train's flags (the tiny preset's default where a field is not given)."""
    given = {"--batch-size": opts.batch_size, "--num-minibatches": opts.num_minibatches, "--gen-len": opts.gen_len}
    return [f"--threads={opts.threads}", f"--device={opts.device}", *(f"{k}={v}" for k, v in given.items() if v is not None)]


def largest_difference(a: list[dict], b: list[dict]) -> dict:
    """The two sides' metrics.jsonl, phase by phase, every non-timing number: the largest |a − b| and its key
    (0.0 when bit-equal; the runs share the seed, so this is the equivalence check on the benchmark's device)."""
    worst, where = 0.0, None
    for row_a, row_b in zip(a, b, strict=True):
        for key in sorted(set(row_a) & set(row_b)):
            if key.startswith(TIMING_PREFIXES) or not isinstance(row_a[key], (int, float)):
                continue
            gap = abs(row_a[key] - row_b[key])
            if where is None or gap > worst:
                worst, where = gap, key
    return {"max_abs_difference": worst, "key": where, "phases": len(a)}


def command(side: str, ranks: int, run_dir: Path, opts: argparse.Namespace) -> list[str]:
    train = ["-m", "rlhf_scratch.train", "sentiment", "--total-phases", str(opts.phases), "--run-dir", str(run_dir),
             "--no-save-model", *shape_flags(opts)]
    if side == "controller":
        return [sys.executable, *train, "--controller", "ray", "--workers", str(ranks)]
    if ranks == 1:
        return [sys.executable, *train]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", *train]


def run(side: str, ranks: int, folder: Path, opts: argparse.Namespace) -> dict[str, float]:
    """One fresh run: the median of its phases 2..P and the whole process's wall seconds."""
    run_dir = folder / f"{side}-{ranks}-{time.monotonic_ns()}"
    env = {**os.environ, "OMP_NUM_THREADS": str(opts.threads), "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    done = subprocess.run(command(side, ranks, run_dir, opts), capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{side} at {ranks} rank(s) failed: {done.stderr.strip().splitlines()[-1:]}")
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {"phase_median": statistics.median(m["charts/phase_time"] for m in metrics[1:]), "wall": wall,
            "metrics": metrics}


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def overhead(ranks: int, folder: Path, opts: argparse.Namespace) -> dict:
    """Controller (A) against in-process (B) at `ranks`, A B A B over the repeats."""
    runs: dict[str, list[dict[str, float]]] = {"controller": [], "in_process": []}
    for repeat in range(opts.repeats):
        for side in ("controller", "in_process"):
            runs[side].append(run(side, ranks, folder, opts))
            print(f"{ranks} rank(s), repeat {repeat + 1}, {side}: median phase {runs[side][-1]['phase_median']:.3f} s "
                  f"(process {runs[side][-1]['wall']:.1f} s)", flush=True)
    ratios = [a["phase_median"] / b["phase_median"] for a, b in zip(runs["controller"], runs["in_process"])]
    equal = [largest_difference(a.pop("metrics"), b.pop("metrics")) for a, b in zip(runs["controller"], runs["in_process"])]
    return {"ranks": ranks,
            "processes": {"controller": f"1 driver + {ranks} worker(s) (+ Ray's own)",
                          "in_process": "1" if ranks == 1 else f"{ranks} (torchrun)"},
            "controller": spread([r["phase_median"] for r in runs["controller"]]),
            "in_process": spread([r["phase_median"] for r in runs["in_process"]]),
            "ratio_pairwise": spread(ratios), "metrics_difference": equal, "runs": runs}


def timed(fn, reps: int) -> dict[str, float]:
    """Milliseconds of `fn()`, min and median of `reps` calls."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return {"min_ms": min(times), "median_ms": statistics.median(times)}


def serialisation_cost(opts: argparse.Namespace) -> dict:
    """Bytes and ms of ray.put / ray.get for each column of one phase's driver batch, and for the whole batch."""
    import ray
    import torch

    sys.path.insert(0, str(ROOT))
    from rlhf_scratch.config import make_args
    from rlhf_scratch.config.registry import get
    from rlhf_scratch.controller.workers import from_rollout
    from rlhf_scratch.engine.batch import batch_of

    torch.set_num_threads(opts.threads)
    shape = {k: v for k, v in {"batch_size": opts.batch_size, "num_minibatches": opts.num_minibatches,
                               "gen_len": opts.gen_len}.items() if v is not None}
    args = make_args("tiny", total_phases=1, threads=opts.threads, **shape)
    trainer = get("ppo").trainer_class()(args, quiet=True)
    rollout = trainer.rollout_phase()
    batch = from_rollout(rollout)
    batch.batch["rewards"] = rollout.rewards
    advantages = batch_of(rollout)
    trainer.compute_advantages(advantages)  # PPO's, as the driver computes them (the trainer's own function)
    batch.batch["advantages"] = advantages.advantages
    parts = {**batch.batch, **batch.non_tensor_batch}
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        def cost(value) -> dict:
            ref = ray.put(value)
            return {"put": timed(lambda: ray.put(value), opts.serialisation_reps),
                    "get": timed(lambda: ray.get(ref), opts.serialisation_reps)}

        columns = {}
        for name, value in parts.items():
            size = value.numel() * value.element_size() if isinstance(value, torch.Tensor) else len(pickle.dumps(value))
            columns[name] = {"bytes": size, "shape": list(value.shape) if isinstance(value, torch.Tensor) else [len(value)],
                             "dtype": str(value.dtype) if isinstance(value, torch.Tensor) else "list[str] (pickled)",
                             **cost(value)}
        whole = {"bytes": sum(c["bytes"] for c in columns.values()), **cost(batch)}
    finally:
        ray.shutdown()
    return {"batch_size": args.batch_size, "gen_len": args.gen_len, "reps": opts.serialisation_reps,
            "columns": columns, "whole_batch": whole}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="A B pairs per rank count")
    parser.add_argument("--phases", type=int, default=10, help="phases per run (phase 1 is left out of the figure)")
    parser.add_argument("--ranks", default="1,2", help="rank counts to measure, comma-separated")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in every process (OMP_NUM_THREADS too)")
    parser.add_argument("--batch-size", type=int, default=None, help="the tiny preset's when not given")
    parser.add_argument("--num-minibatches", type=int, default=None)
    parser.add_argument("--gen-len", type=int, default=None)
    parser.add_argument("--device", default="cpu", help="train's --device for both sides (cuda: one GPU, colocated)")
    parser.add_argument("--serialisation-reps", type=int, default=20, help="0: the serialisation cost is not measured")
    parser.add_argument("--out", default=None, help="write the numbers here as JSON")
    opts = parser.parse_args()
    if opts.phases < 2:
        parser.error("--phases: at least 2 (phase 1 warms up and is not counted)")
    ranks = [int(r) for r in opts.ranks.split(",")]
    result = {"provenance": provenance(), "device": opts.device, "threads_per_process": opts.threads, "cores": os.cpu_count(),
              "load_before": os.getloadavg(),
              "phases": opts.phases, "repeats": opts.repeats, "shape": shape_flags(opts)}
    print(describe(result["provenance"]), flush=True)
    with tempfile.TemporaryDirectory() as folder:
        result["overhead"] = [overhead(n, Path(folder), opts) for n in ranks]
    if opts.serialisation_reps:
        result["serialisation"] = serialisation_cost(opts)
    result["load_after"] = os.getloadavg()
    for o in result["overhead"]:
        print(f"{o['ranks']} rank(s): controller {o['controller']['median']:.3f} s (min {o['controller']['min']:.3f}), "
              f"in-process {o['in_process']['median']:.3f} s (min {o['in_process']['min']:.3f}), "
              f"ratio A/B median {o['ratio_pairwise']['median']:.2f}× (min {o['ratio_pairwise']['min']:.2f}, "
              f"max {o['ratio_pairwise']['max']:.2f}); largest metrics difference "
              f"{max(d['max_abs_difference'] for d in o['metrics_difference']):.3g}")
    s = result.get("serialisation", {"columns": {}, "whole_batch": None})
    if s["whole_batch"]:
        print(f"serialisation (batch {s['batch_size']}, gen_len {s['gen_len']}, {s['reps']} reps; put / get median ms):")
    for name, c in [*s["columns"].items(), *([("(whole batch)", s["whole_batch"])] if s["whole_batch"] else [])]:
        print(f"  {name:<22} {c['bytes']:>10,d} B   put {c['put']['median_ms']:7.3f}   get {c['get']['median_ms']:7.3f}")
    print(f"threads per process {opts.threads}, {result['cores']} cores, load {result['load_before'][0]:.2f} -> "
          f"{result['load_after'][0]:.2f}")
    if opts.out:
        Path(opts.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
