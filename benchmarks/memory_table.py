"""Peak memory of PPO phases against batch size and vocabulary size, this checkout beside another.

    python benchmarks/memory_table.py --other /path/to/older/checkout --json memory.json

Each cell is its own process (`phase_memory.py`, one phase after one warm-up... of the same
script): the tiny preset (d_vocab 8,192) and a random-init GPT-2-small shape (d_vocab 50,257),
at several batch sizes (4 minibatches each, so the minibatch is batch / 4), and per checkout:

    other       the checkout given by --other (e.g. the commit before chunked vocabulary terms)
    one chunk   this checkout with --chunk-logits 0: the whole minibatch's logits in one chunk
    chunked     this checkout's default --chunk-logits (vocab_terms.LOGITS_PER_CHUNK)

Printed: peak RSS (MiB) of the process and what the phases added on top of the loaded models.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from provenance import describe, provenance  # noqa: E402  (the commit that ran, read from git now)


def measure(root: Path, shape: str, batch: int, phases: int, chunk_logits: int | None, threads: int) -> dict:
    """One `phase_memory.py` process with `root` first on the import path."""
    cmd = [sys.executable, str(HERE / "phase_memory.py"), "--shape", shape, "--batch-size", str(batch),
           "--phases", str(phases), "--threads", str(threads)]
    if chunk_logits is not None:
        cmd += ["--chunk-logits", str(chunk_logits)]
    env = {**os.environ, "PYTHONPATH": str(root), "WANDB_MODE": "disabled"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root)
    if out.returncode != 0:
        sys.exit(f"{shape} batch {batch} in {root} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", help="an older checkout to measure beside this one")
    parser.add_argument("--tiny-batches", default="16,64,256")
    parser.add_argument("--gpt2-batches", default="16,64")
    parser.add_argument("--phases", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="write every measurement here")
    opts = parser.parse_args()
    from tabulate import tabulate

    this = HERE.parent
    ran = {"this": provenance(this), **({"other": provenance(opts.other)} if opts.other else {})}
    for name, record in ran.items():
        print(f"{name}: {describe(record)}", file=sys.stderr)
    systems = ([("other", Path(opts.other), None)] if opts.other else []) + [("one chunk", this, 0), ("chunked", this, None)]
    cells = [("tiny", int(b)) for b in opts.tiny_batches.split(",") if b] + [("gpt2-small", int(b)) for b in opts.gpt2_batches.split(",") if b]
    rows, raw = [], []
    for shape, batch in cells:
        row = [shape, batch]
        for name, root, chunk in systems:
            result = measure(root, shape, batch, opts.phases, chunk, opts.threads)
            raw.append({"system": name, **result})
            row.append(f"{result['peak_rss_mib']:,} (+{result['phases_added_mib']:,})")
            print(f"{shape} batch {batch} {name}: {result}", file=sys.stderr)
        rows.append(row)
    print(tabulate(rows, headers=["shape", "batch", *[f"{name}: peak RSS (+ phases), MiB" for name, _, _ in systems]],
                   tablefmt="github"))
    if opts.json:
        Path(opts.json).write_text(json.dumps({"provenance": ran["this"], "other_provenance": ran.get("other"),
                                               "options": {k: v for k, v in vars(opts).items() if k != "other"},
                                               "raw": raw}, indent=1))


if __name__ == "__main__":
    main()
