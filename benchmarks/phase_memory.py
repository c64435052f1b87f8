"""Peak memory and time of PPO phases, on the tiny preset or a random GPT-2-small-shaped model.

    python benchmarks/phase_memory.py --shape tiny --phases 3
    python benchmarks/phase_memory.py --shape gpt2-small --phases 1 --batch-size 128

`gpt2-small` is a randomly initialised HookedTransformer with GPT-2 small's shape (12 layers,
d_model 768, 12 heads, n_ctx 1024, d_vocab 50,257) built from a config — no Hub needed. Its
tokenizer is the tiny preset's, padded with placeholder tokens to 50,257 entries so that every
sampled id decodes; the reward is the `periods` task (the classifier is not what is measured).

Prints one JSON line: peak resident memory of the process (MiB) before the first phase and after
the last, their difference (what the phases added on top of the loaded models), and each phase's
wall time. Written against the trainer's public pieces only (`rollout_phase`, `learning_phase`),
so the same script measures older checkouts that keep those names.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path


def rss_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def gpt2_small_factory():
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    from rlhf_scratch.models.loading import load_tokenizer

    tok = load_tokenizer("tiny")
    tok.add_tokens([f"<x{i}>" for i in range(50257 - len(tok))])
    cfg = HookedTransformerConfig(
        n_layers=12, d_model=768, n_heads=12, d_head=64, d_mlp=3072, n_ctx=1024, d_vocab=50257,
        act_fn="gelu_new", normalization_type="LN", seed=0,
    )

    def load(name: str = "tiny", device: str = "cpu") -> HookedTransformer:
        return HookedTransformer(cfg, tokenizer=tok).to(device)

    return load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=["tiny", "gpt2-small"], default="tiny")
    parser.add_argument("--phases", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--chunk-logits", type=int, help="the run's --chunk-logits (left out: the checkout's default)")
    opts = parser.parse_args()

    import torch

    import rlhf_scratch
    from rlhf_scratch.config import make_args

    if opts.threads:
        torch.set_num_threads(opts.threads)
    from rlhf_scratch.algorithms.ppo import RLHFTrainer
    from rlhf_scratch.engine import run_setup

    task = "sentiment"
    if opts.shape == "gpt2-small":  # every model the run loads becomes the random GPT-2-small shape
        run_setup.load_lm = gpt2_small_factory()
        task = "periods"
    values = dict(task=task, batch_size=opts.batch_size, total_phases=opts.phases, warmup_steps=1)
    if opts.chunk_logits is not None:
        values["chunk_logits"] = opts.chunk_logits
    args = make_args("tiny", threads=opts.threads, **values)
    trainer = RLHFTrainer(args, quiet=True)
    before = rss_peak_mib()
    times = []
    for _ in range(opts.phases):
        start = time.perf_counter()
        trainer.learning_phase(trainer.rollout_phase())
        times.append(round(time.perf_counter() - start, 3))
    after = rss_peak_mib()
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling provenance.py
    from provenance import provenance

    # the checkout whose package ran (memory_table.py puts an older one first on the import path)
    print(json.dumps({"provenance": provenance(Path(rlhf_scratch.__file__).resolve().parents[1]), "shape": opts.shape, "batch_size": opts.batch_size, "chunk_logits": opts.chunk_logits, "version": rlhf_scratch.__doc__.splitlines()[0],
                      "peak_rss_before_phases_mib": round(before), "peak_rss_mib": round(after),
                      "phases_added_mib": round(after - before), "phase_times_s": times}))


if __name__ == "__main__":
    main()
