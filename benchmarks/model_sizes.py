"""Sizes a user can plan for: parameters, peak memory and time per phase of PPO on published shapes.

    python benchmarks/model_sizes.py --work /tmp/shapes --json benchmarks/model_sizes_<date>.json

Each shape (`rlhf_scratch.model_families.REAL_SHAPES`: GPT-2 small, Pythia-160M/410M, Qwen2.5-0.5B,
Llama-3.2-1B) is built offline as a random-init HF folder (its real vocabulary, the tiny tokenizer),
then trained by `python -m rlhf_scratch.train sentiment --model FOLDER` at the default batch (64
completions of ≤ 30 tokens, PPO, tiny reward classifier) for `--phases` phases, each cell its own
process. Reported: parameters of the policy LM, the process's peak RSS (/usr/bin/time's maximum
resident set), and the median `charts/phase_time` of the phases after the first (the first pays
for allocator warm-up). `--lora-rank R` measures the same with LoRA adapters (the reference is the
policy with its adapters off, so one copy of the weights is held instead of two, and AdamW keeps
state for the adapters only). Random weights: only sizes and speed mean anything here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def measure(folder: Path, phases: int, threads: int, lora_rank: int, extra: list[str]) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix="size_run_"))
    cmd = ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "rlhf_scratch.train", "sentiment",
           "--model", str(folder), "--total-phases", str(phases), "--threads", str(threads),
           "--run-dir", str(run_dir / "run"), *(["--lora-rank", str(lora_rank)] if lora_rank else []), *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "disabled"})
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-2] if out.stderr.strip() else "failed"}
    peak_kib = int(out.stderr.strip().splitlines()[-1])
    rows = [json.loads(line) for line in (run_dir / "run" / "metrics.jsonl").read_text().splitlines()]
    times = [r["charts/phase_time"] for r in rows[1:]] or [rows[0]["charts/phase_time"]]
    return {"peak_rss_mib": peak_kib / 1024, "phase_s": statistics.median(times), "phases": len(rows)}


def main() -> None:
    from tabulate import tabulate
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlhf_scratch.model_families import REAL_SHAPES, build_folder

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="/tmp/shapes", help="where the shape folders are built (kept)")
    parser.add_argument("--shapes", default=",".join(REAL_SHAPES))
    parser.add_argument("--phases", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lora-rank", type=int, default=0)
    parser.add_argument("--json", help="write the measurements here")
    parser.add_argument("extra", nargs="*", help="after --: more train flags for every cell")
    opts = parser.parse_args()
    rows, raw = [], []
    for shape in opts.shapes.split(","):
        folder = Path(opts.work) / shape
        if not (folder / "config.json").exists():
            build_folder(shape, folder, shape="real")
        with __import__("torch").device("meta"):
            n_params = sum(p.numel() for p in AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder)).parameters())
        result = {"shape": shape, "params": n_params, "lora_rank": opts.lora_rank, "threads": opts.threads,
                  **measure(folder, opts.phases, opts.threads, opts.lora_rank, opts.extra)}
        raw.append(result)
        rows.append([shape, f"{n_params / 1e6:.0f} M", result.get("peak_rss_mib", "—"),
                     result.get("phase_s", result.get("error"))])
        print(json.dumps(result), flush=True)
    print(tabulate(rows, headers=["shape", "parameters", "peak RSS (MiB)", "s / phase"], floatfmt=".1f"))
    if opts.json:
        Path(opts.json).write_text(json.dumps(raw, indent=1) + "\n")


if __name__ == "__main__":
    main()
