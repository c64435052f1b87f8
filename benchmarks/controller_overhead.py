"""Per-phase time of the single controller (`train --controller ray`) against the in-process loop,
at the tiny preset's default PPO phase, interleaved A B A B; and what moving the batch costs.

    python benchmarks/controller_overhead.py --repeats 3 --phases 10 [--workers 1]

Each run is a fresh process of `python -m rlhf_scratch.train sentiment` (with `--controller ray`
for B); the phase time is the median of `charts/phase_time` over phases 2..N (phase 1 warms up).
The serialisation cost is measured apart: a phase's batch (as the driver holds it before
update_actor) put into Ray's object store and read back, median of 20.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(controller: str, phases: int, workers: int, folder: Path) -> list[float]:
    run_dir = folder / f"{controller}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "rlhf_scratch.train", "sentiment", "--total-phases", str(phases),
           "--run-dir", str(run_dir), "--no-save-model"]
    if controller == "ray":
        cmd += ["--controller", "ray", "--workers", str(workers)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [m["charts/phase_time"] for m in metrics[1:]]


def serialisation_cost(phases: int = 1) -> dict[str, float]:
    """Seconds to put one default PPO phase's batch into the object store and get it back."""
    import ray
    import torch

    from rlhf_scratch.config import make_args
    from rlhf_scratch.config.registry import get
    from rlhf_scratch.controller.workers import from_rollout

    args = make_args("tiny", total_phases=phases)
    trainer = get("ppo").trainer_class()(args, quiet=True)
    batch = from_rollout(trainer.rollout_phase())
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        times = []
        for _ in range(20):
            start = time.perf_counter()
            ray.get(ray.put(batch))
            times.append(time.perf_counter() - start)
    finally:
        ray.shutdown()
    size = sum(t.numel() * t.element_size() for t in batch.batch.values())
    return {"bytes": size, "seconds_median": statistics.median(times), "seconds_min": min(times),
            "columns": {k: tuple(v.shape) for k, v in batch.batch.items() if isinstance(v, torch.Tensor)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--phases", type=int, default=10)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", default=None, help="write the numbers here as JSON")
    opts = parser.parse_args()
    medians: dict[str, list[float]] = {"local": [], "ray": []}
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(opts.repeats):
            for controller in ("local", "ray"):  # interleaved: A B A B
                phase_times = run(controller, opts.phases, opts.workers, Path(folder))
                medians[controller].append(statistics.median(phase_times))
                print(f"repeat {repeat + 1} {controller}: median phase {medians[controller][-1]:.3f} s", flush=True)
    result = {c: {"median": statistics.median(m), "min": min(m), "runs": m} for c, m in medians.items()}
    result["ratio_median"] = result["ray"]["median"] / result["local"]["median"]
    result["serialisation"] = serialisation_cost()
    print(json.dumps(result, indent=1))
    if opts.out:
        Path(opts.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
