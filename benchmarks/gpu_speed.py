"""The GPU path measured in one process: matmul peak, the learning step's utilisation, decoding
tokens/s and a whole PPO round, at GPT-2 small's shape (random init) — the figures of issue 45.

    python benchmarks/gpu_speed.py --device cuda --json $OUT/gpu_speed.json
    python benchmarks/gpu_speed.py --device cpu --shape tiny --quick      # the same code, on a CPU, in seconds

One process on purpose: on the GPU machines each Python process costs ~25 s of imports.

- **peak**: the best FLOP/s of an n × n matmul in bf16 and fp32 (n = 8,192 on a GPU): the roof.
- **learn**: one minibatch of the learning phase — the training forward to ĥ (`fast_forward`), the
  generated span's log π and entropy (`token_terms`, `--chunk-logits` at a time), backward — for
  `rows` = batch / 4 sequences (the trainer's default 4 minibatches) of prompt 8 + 30 generated
  tokens. Its FLOPs are the model FLOPs of the step counted by torch's FlopCounterMode with every
  logit kept (no recomputation), so a chunked step that recomputes is not credited for the extra
  work. Variants: fp32 and bf16 autocast, chunked and not (`learn`); bf16 + torch.compile of the
  forward at the largest batch, its default mode and `reduce-overhead` (the forward and backward
  replayed as CUDA graphs: `--compile-mode reduce-overhead`) (`learn-compile`, run last: compiling
  takes a while). Chunks: 2**21
  (the CPU default), 2**27 (the GPU default), 0 (every logit at once).
- **decode**: `generation.generate` at batch 64 (8-token prompts, 30 new tokens, top-k 10), the
  static cache's step CUDA-graphed and not, graphed with the decoder kept between calls (a
  trainer's `DecoderCache`: captured once), and that with the draw inside the graph too
  (`sample_in_graph=True`, `rollout/sampling.py`: the whole step one graph, nothing read back per
  token): generated tokens per second.
- **round**: PPO's whole round (rollout + learning phase, the trainer's own timing) at batch 64,
  fp32 and bf16, median of the timed phases after warm-up.
Each section is guarded: one that fails records its error and the rest still run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_trl import matmul_peak_flops  # noqa: E402  (a sibling script: the same roof as beside TRL)
from provenance import describe, provenance  # noqa: E402  (the commit that ran, read from git now)

PROMPT, GEN = 8, 30


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def median_seconds(fn, device: str, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def make_model(shape: str, device: str):
    if shape == "gpt2-small":
        from phase_memory import gpt2_small_factory

        return gpt2_small_factory()(device=device).train()
    from rlhf_scratch.models.loading import load_lm

    return load_lm("tiny", device=device).train()


def learning_step(model, learner, rows: int, chunk_logits: int, bf16: bool, device: str, mark_steps: bool = False):
    """A closure running one minibatch's forward + backward, as the learning phase does (`mark_steps`:
    tell torch's cudagraph trees each step begins, as the trainer does under --compile-mode reduce-overhead)."""
    from rlhf_scratch.core.objectives import generated_span
    from rlhf_scratch.core.vocab_terms import token_terms, unembedding

    g = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(1, model.cfg.d_vocab, (rows, PROMPT + GEN), generator=g).to(device)
    mask = torch.ones_like(ids)
    mask[: rows // 4, :3] = 0  # a quarter of the prompts left-padded, as a rollout's
    span = generated_span(PROMPT)

    def step():
        if mark_steps:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
            hidden = learner(ids, mask)[:, span]
            terms = token_terms(hidden.flatten(0, 1), unembedding(model), ids[:, PROMPT:].flatten(), 1.0,
                                with_entropy=True, chunk_logits=chunk_logits)
            (terms.logprobs.sum() + 0.01 * terms.entropy.sum()).backward()
        model.zero_grad(set_to_none=True)

    return step


def section_learn(out: dict, model, device: str, batches: list[int], quick: bool, compiled: bool = False) -> None:
    """The learning step's variants (`compiled`: bf16 with torch.compile of the forward, the default chunking)."""
    from torch.utils.flop_counter import FlopCounterMode

    from rlhf_scratch.models.fast_forward import HiddenForward

    eager = HiddenForward(model)
    variants = ([("bf16+compile", True, "default"), ("bf16+compile-reduce-overhead", True, "reduce-overhead")] if compiled
                else [("fp32", False, None), ("bf16", True, None)])
    for batch in batches:
        rows = batch // 4
        with FlopCounterMode(display=False) as counter:
            learning_step(model, eager, rows, 0, False, device)()
        flops = float(counter.get_total_flops())
        for name, bf16, compile_ in variants:
            learner = torch.compile(eager, mode=compile_) if compile_ else eager
            for chunk in (2**27,) if compiled else (2**21, 2**27, 0):
                key = f"learn/batch{batch}/{name}/chunk{chunk}"
                try:
                    step = learning_step(model, learner, rows, chunk, bf16, device, mark_steps=compile_ == "reduce-overhead")
                    seconds = median_seconds(step, device, 1 if quick else 3, 2 if quick else 10)
                    out[key] = {"rows": rows, "tokens": rows * (PROMPT + GEN), "seconds": seconds, "model_flops": flops,
                                "flops_per_s": flops / seconds}
                except Exception as e:  # noqa: BLE001 - one failed variant must not lose the others
                    out[key] = {"error": f"{type(e).__name__}: {e}"}
                print(key, out[key], flush=True)


def section_decode(out: dict, model, device: str, quick: bool) -> None:
    from rlhf_scratch.rollout.generation import generate

    batch = 64
    g = torch.Generator(device="cpu").manual_seed(1)
    prompt_ids = torch.randint(1, model.cfg.d_vocab, (batch, PROMPT), generator=g).to(device)
    prompt_mask = torch.ones_like(prompt_ids, dtype=torch.bool)
    from rlhf_scratch.models.static_cache import DecoderCache

    for graph, reuse, in_graph in ((True, True, True), (True, True, False), (True, False, False), (False, False, False)):
        key = (f"decode/batch{batch}/cuda_graph_{'on' if graph else 'off'}{'/reused' if reuse else ''}"
               f"{'/sampled_in_graph' if in_graph else ''}")
        decoders = DecoderCache() if reuse else None  # reused: a trainer's rollouts, the graph captured once
        try:
            seconds = median_seconds(
                lambda graph=graph, decoders=decoders, in_graph=in_graph: generate(
                    model, prompt_ids, prompt_mask, GEN, 1.0, 10, False, kv_cache="static", cuda_graph=graph,
                    decoders=decoders, sample_in_graph=in_graph),
                device, 1 if quick else 2, 2 if quick else 5)
            out[key] = {"seconds": seconds, "tokens_per_s": batch * GEN / seconds}
        except Exception as e:  # noqa: BLE001
            out[key] = {"error": f"{type(e).__name__}: {e}"}
        print(key, out[key], flush=True)


def section_round(out: dict, shape: str, device: str, quick: bool) -> None:
    import tempfile

    from rlhf_scratch.config import make_args, registry
    from rlhf_scratch.core import timing
    from rlhf_scratch.engine import run_setup
    from rlhf_scratch.engine.runs import read_metrics

    timing.profile(True)  # the parts of the round (time/<part>) each with its own GPU work: a sync per section

    if shape == "gpt2-small":
        from phase_memory import gpt2_small_factory

        run_setup.load_lm = gpt2_small_factory()
    warm, timed_phases = (1, 2) if quick else (2, 4)
    for bf16 in (False, True):
        key = f"round/ppo/batch64/{'bf16' if bf16 else 'fp32'}"
        try:
            args = make_args("tiny", "ppo", task="periods" if shape == "gpt2-small" else "sentiment",
                             total_phases=warm + timed_phases, batch_size=64, gen_len=GEN, top_k=10, device=device,
                             threads=0, save_every=0, save_model=False, stop_at_eos=False, warmup_steps=1, bf16=bf16)
            trainer = registry.get("ppo").trainer_class()(args, quiet=True)
            with tempfile.TemporaryDirectory() as tmp:
                metrics = read_metrics(trainer.train(Path(tmp) / "run"))[warm:]
            parts = {k: statistics.median(m[k] for m in metrics) for k in metrics[0] if k.startswith("time/")}
            out[key] = {"phase_s": statistics.median(m["charts/phase_time"] for m in metrics), **parts}
        except Exception as e:  # noqa: BLE001
            out[key] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
        print(key, out[key], flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shape", choices=["tiny", "gpt2-small"], default="gpt2-small")
    parser.add_argument("--batches", default="64,512", help="learning-step batch sizes (rows = batch / 4)")
    parser.add_argument("--sections", default="peak,learn,decode,round", help="of peak, learn, learn-compile, decode, round")
    parser.add_argument("--quick", action="store_true", help="few repeats: a smoke run of this script")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args(argv)
    torch.manual_seed(0)
    ran = provenance()
    print(describe(ran), flush=True)
    out: dict = {"provenance": ran, "device": torch.cuda.get_device_name(0) if opts.device.startswith("cuda") else "cpu",
                 "torch": torch.__version__, "shape": opts.shape}

    def save():
        if opts.json:
            opts.json.write_text(json.dumps(out, indent=1) + "\n")

    sections = opts.sections.split(",")
    if "peak" in sections or "learn-compile" in sections:  # the roof the utilisation is read against
        n = 8192 if opts.device.startswith("cuda") else 1024
        for dtype in ("bfloat16", "float32"):
            out[f"peak/{dtype}"] = matmul_peak_flops(opts.device, 0, dtype, n=n)  # bench_trl's roof, at n
        print("peak", {k: f"{v / 1e12:.1f} TFLOP/s" for k, v in out.items() if k.startswith("peak/")}, flush=True)
        save()
    model = make_model(opts.shape, opts.device)
    batches = [int(b) for b in opts.batches.split(",")]
    if "learn" in sections:
        section_learn(out, model, opts.device, batches, opts.quick)
        save()
    if "decode" in sections:
        section_decode(out, model.eval(), opts.device, opts.quick)
        save()
    if "round" in sections:
        section_round(out, opts.shape, opts.device, opts.quick)
        save()
    if "learn-compile" in sections:  # last: compiling takes a while; the largest batch only
        section_learn(out, model.train(), opts.device, batches[-1:], opts.quick, compiled=True)
        save()
    peak = out.get("peak/bfloat16")
    if peak:
        for key, v in out.items():
            if key.startswith("learn/") and "flops_per_s" in v:
                v["of_bf16_peak"] = v["flops_per_s"] / peak
                print(f"{key}: {v['flops_per_s'] / 1e12:.2f} TFLOP/s = {100 * v['of_bf16_peak']:.2f} % of bf16 peak")
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
