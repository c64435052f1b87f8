"""Sizes a user can plan for: parameters, peak memory and time per phase of PPO on published shapes.

    python benchmarks/model_sizes.py --work /tmp/shapes --json benchmarks/model_sizes_<date>.json

Each shape (`rlhf_scratch.models.families.REAL_SHAPES`: GPT-2 small, Pythia-160M/410M, Qwen2.5-0.5B,
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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling provenance.py
from provenance import describe, provenance  # noqa: E402  (the commit that ran, read from git now)


def measure(folder: Path, phases: int, threads: int, lora_rank: int, extra: list[str]) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix="size_run_"))
    cmd = ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "rlhf_scratch.train", "sentiment",
           "--model", str(folder), "--total-phases", str(phases), "--threads", str(threads),
           "--run-dir", str(run_dir / "run"), *(["--lora-rank", str(lora_rank)] if lora_rank else []), *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "disabled"})
    lines = out.stderr.strip().splitlines()
    peak_kib = int(lines[-1]) if lines and lines[-1].isdigit() else None  # /usr/bin/time's %M, printed last
    if out.returncode != 0:  # the run's own last line, not /usr/bin/time's "Command exited with non-zero status"
        said = [line for line in lines[:-1] if not line.startswith("Command ")]
        return {"error": said[-1] if said else f"exit {out.returncode}",
                "peak_rss_mib": None if peak_kib is None else peak_kib / 1024}
    rows = [json.loads(line) for line in (run_dir / "run" / "metrics.jsonl").read_text().splitlines()]
    times = [r["charts/phase_time"] for r in rows[1:]] or [rows[0]["charts/phase_time"]]
    return {"peak_rss_mib": peak_kib / 1024, "phase_s": statistics.median(times), "phases": len(rows)}


def main() -> None:
    from tabulate import tabulate
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlhf_scratch.models.families import REAL_SHAPES, build_folder

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="/tmp/shapes", help="where the shape folders are built (kept)")
    parser.add_argument("--shapes", default=",".join(REAL_SHAPES))
    parser.add_argument("--phases", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lora-rank", type=int, default=0)
    parser.add_argument("--json", help="write the measurements here")
    parser.add_argument("--max-gib", type=float, default=22.0,
                        help="skip a cell whose weights and optimizer alone would need more (this machine: 24 GiB)")
    parser.add_argument("extra", nargs="*", help="after --: more train flags for every cell")
    opts = parser.parse_args()
    ran = provenance()
    print(describe(ran), flush=True)
    rows, raw = [], []
    for shape in opts.shapes.split(","):
        folder = Path(opts.work) / shape
        if not (folder / "config.json").exists():
            build_folder(shape, folder, shape="real")
        config = AutoConfig.from_pretrained(folder)
        with __import__("torch").device("meta"):
            n_params = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
        # TransformerLens holds a tied unembedding as a matrix of its own: that many more weights are trained
        tied = getattr(config, "tie_word_embeddings", False)
        trained = n_params + (config.vocab_size * config.hidden_size if tied else 0)
        # float32 full fine-tune: policy + reference + gradients + AdamW's two moments ≈ 20 bytes per trained weight
        need_gib = (20 * trained if not opts.lora_rank else 4 * trained) / 2**30
        if need_gib > opts.max_gib:
            result = {"shape": shape, "params": n_params, "trained_params": trained, "lora_rank": opts.lora_rank,
                      "error": f"not run: needs about {need_gib:.0f} GiB for the weights and optimizer alone "
                               f"(--max-gib {opts.max_gib:g})"}
        else:
            result = {"shape": shape, "params": n_params, "trained_params": trained, "lora_rank": opts.lora_rank,
                      "threads": opts.threads, **measure(folder, opts.phases, opts.threads, opts.lora_rank, opts.extra)}
        raw.append(result)
        rss = result.get("peak_rss_mib")
        rows.append([shape, f"{n_params / 1e6:.0f} M", f"{trained / 1e6:.0f} M", "—" if rss is None else f"{rss:,.0f}",
                     f"{result['phase_s']:.1f}" if "phase_s" in result else result.get("error")])
        print(json.dumps(result), flush=True)
    print(tabulate(rows, headers=["shape", "parameters (HF)", "trained (TransformerLens)", "peak RSS (MiB)", "s / phase"],
                   floatfmt=".1f", tablefmt="github"))
    if opts.json:
        Path(opts.json).write_text(json.dumps({"provenance": ran, "rows": raw}, indent=1) + "\n")


if __name__ == "__main__":
    main()
