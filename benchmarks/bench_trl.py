"""Our PPO phase and RLOO step beside one round of TRL's RLOOTrainer, at equal work.

    pip install -e ".[bench]"                     # TRL 1.16 (optional extra; nothing else needs it)
    python benchmarks/bench_trl.py                 # tiny weights, CPU, 3 interleaved repeats
    python benchmarks/bench_trl.py --device cuda --threads 0 --repeats 5

Equal work, on the tiny preset's weights (the same HF folder feeds both): one prompt, 64
completions × 30 tokens forced to full length (no EOS), top-k 10, temperature 1, a reference
model (β = 0.1), 2 passes × 4 minibatches of 16, fp32, no gradient checkpointing, fused AdamW,
the same reward (the tiny sentiment classifier as a reward function), logging every round.

    ours  ppo   : RLHFTrainer,  batch 64, num_minibatches 4, batches_per_learning_phase 2, kl_coef 0.1
                  (ppo-lowmem: the same with --no-cache-ref-logprobs, a reference forward per minibatch)
    ours  rloo  : RLOOTrainer,  16 prompts × num_generations 4, num_minibatches 4, num_iterations 2, beta 0.1
    trl   rloo  : RLOOConfig(per_device_train_batch_size=16, steps_per_generation=4, num_generations=4,
                  num_iterations=2, max_completion_length=30, generation_kwargs={"min_new_tokens": 30},
                  top_k=10, temperature=1.0, beta=0.1, optim="adamw_torch_fused", logging_steps=8)

Each system runs in its own process (so peak memory is its own), the three in turn, `--repeats`
times, so machine noise hits all of them alike. A worker runs `--warmup` rounds, then `--rounds`
timed ones, then one more under torch's FlopCounterMode to count the matmul FLOPs of a round.
Printed: per-part medians, round time (min / median over repeats of each worker's median), ratio
to TRL, generated tokens/s, peak memory, and achieved FLOP/s against this machine's measured
matmul peak. `--json PATH` keeps everything.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PARTS = ("generation", "policy_forward", "reference_forward", "reward", "learning_forward", "backward",
         "optimizer_step", "logging", "other")
SYSTEMS = ("ours-ppo", "ours-ppo-lowmem", "ours-rloo", "trl-rloo")
BATCH, GEN_LEN, TOP_K, BETA, MINIBATCHES, PASSES, GROUP = 64, 30, 10, 0.1, 4, 2, 4


def peak_memory_mib(device: str) -> float:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def count_flops(fn) -> float:
    """Matmul FLOPs of fn() as torch's FlopCounterMode counts them (mm, bmm, addmm, attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


# --- workers: one system, one process ------------------------------------------------------------


def worker_ours(system: str, opts) -> dict:
    import torch

    from rlhf_scratch.algorithms.ppo import RLHFTrainer
    from rlhf_scratch.algorithms.rloo import RLOOTrainer
    from rlhf_scratch.config import make_args
    from rlhf_scratch.runs import read_metrics

    task = "sentiment"
    if opts.shape == "gpt2-small":  # a random GPT-2-small-shaped model; see phase_memory.py
        sys.path.insert(0, str(Path(__file__).parent))
        from phase_memory import gpt2_small_factory

        from rlhf_scratch import run_setup

        run_setup.load_lm = gpt2_small_factory()
        task = "periods"  # the tiny classifier's tokenizer does not cover GPT-2's vocabulary
    common = dict(task=task, total_phases=opts.warmup + opts.rounds, batch_size=BATCH, gen_len=GEN_LEN, top_k=TOP_K,
                  num_minibatches=MINIBATCHES, device=opts.device, threads=opts.threads, save_every=0,
                  save_model=False, stop_at_eos=False, warmup_steps=1, compile=opts.compile, bf16=opts.bf16)
    if system.startswith("ours-ppo"):
        args = make_args("tiny", "ppo", batches_per_learning_phase=PASSES, kl_coef=BETA,
                         cache_ref_logprobs=system == "ours-ppo", **common)
        trainer = RLHFTrainer(args, quiet=True)
    else:
        args = make_args("tiny", "rloo", num_generations=GROUP, num_iterations=PASSES, beta=BETA, **common)
        trainer = RLOOTrainer(args, quiet=True)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = trainer.train(Path(tmp) / "run")
        metrics = read_metrics(run_dir)
    rounds = []
    for this, following in zip(metrics[opts.warmup - 1 : -1], metrics[opts.warmup:]):
        # a phase's logging is measured during the next one (see loop.phase_times)
        parts = {p: this[f"time/{p}"] for p in PARTS if p != "logging"} | {"logging": following["time/logging"]}
        rounds.append({"round_s": this["charts/phase_time"] + following["time/logging"], **parts})
    torch.manual_seed(0)
    flops = count_flops(lambda: trainer.learning_phase(trainer.rollout_phase()))
    return {"rounds": rounds, "flops": flops, "peak_mib": peak_memory_mib(opts.device)}


def worker_trl(opts) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import RLOOConfig, RLOOTrainer

    from rlhf_scratch.config import make_args
    from rlhf_scratch.loading import TINY_LM_DIR, asset_path
    from rlhf_scratch.rewards import SentimentReward

    if opts.threads:
        torch.set_num_threads(opts.threads)
    times: dict[str, float] = {p: 0.0 for p in PARTS}

    class timed:
        def __init__(self, part):
            self.part = part

        def __enter__(self):
            if opts.device.startswith("cuda"):
                torch.cuda.synchronize()
            self.start = time.perf_counter()

        def __exit__(self, *exc):
            if opts.device.startswith("cuda"):
                torch.cuda.synchronize()
            times[self.part] += time.perf_counter() - self.start

    class TimedRLOOTrainer(RLOOTrainer):
        """TRL's trainer, unchanged, with a clock around the methods that do each part."""

        def _generate(self, prompts):
            with timed("generation"):
                return super()._generate(prompts)

        def _calculate_rewards(self, *a, **kw):
            with timed("reward"):
                return super()._calculate_rewards(*a, **kw)

        def _get_per_token_logps_and_entropies(self, model, *a, **kw):
            if torch.is_grad_enabled():  # inside _compute_loss: counted as learning_forward there
                return super()._get_per_token_logps_and_entropies(model, *a, **kw)
            with timed("reference_forward" if model is self.ref_model else "policy_forward"):
                return super()._get_per_token_logps_and_entropies(model, *a, **kw)

        def _compute_loss(self, model, inputs):
            with timed("learning_forward"):
                return super()._compute_loss(model, inputs)

        def log(self, *a, **kw):
            with timed("logging"):
                return super().log(*a, **kw)

    steps_per_round = MINIBATCHES * PASSES
    rounds: list[dict] = []
    flops: list[float] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            trainer.accelerator.backward = self.timed_backward(trainer.accelerator.backward)
            self.last = time.perf_counter()

        @staticmethod
        def timed_backward(backward):
            def wrapped(*a, **kw):
                with timed("backward"):
                    return backward(*a, **kw)
            return wrapped

        def on_pre_optimizer_step(self, args, state, control, **kw):
            self.step_clock = timed("optimizer_step")
            self.step_clock.__enter__()

        def on_optimizer_step(self, args, state, control, **kw):
            self.step_clock.__exit__(None, None, None)

        def on_step_end(self, args, state, control, **kw):
            if state.global_step % steps_per_round:
                return
            now = time.perf_counter()
            done = state.global_step // steps_per_round
            if done == opts.warmup + opts.rounds:  # the extra round ran under the FLOP counter
                self.counter.__exit__(None, None, None)
                flops.append(float(self.counter.get_total_flops()))
            elif done > opts.warmup:
                part_sum = sum(times.values())
                rounds.append({"round_s": now - self.last, **times, "other": max(now - self.last - part_sum, 0.0)})
            if done == opts.warmup + opts.rounds - 1:
                from torch.utils.flop_counter import FlopCounterMode

                self.counter = FlopCounterMode(display=False)
                self.counter.__enter__()
            for p in times:
                times[p] = 0.0
            self.last = time.perf_counter()

    reward = SentimentReward("tiny", direction="pos", device=opts.device)

    def sentiment(prompts, completions, **kwargs) -> list[float]:
        return reward([p + c for p, c in zip(prompts, completions)]).tolist()

    total_rounds = opts.warmup + opts.rounds + 1
    prefix = make_args("tiny").prefix
    dataset = Dataset.from_dict({"prompt": [prefix] * (BATCH // GROUP * total_rounds)})
    model_dir = str(asset_path(TINY_LM_DIR))
    with tempfile.TemporaryDirectory() as tmp:
        config = RLOOConfig(
            output_dir=tmp, per_device_train_batch_size=BATCH // MINIBATCHES, gradient_accumulation_steps=1,
            steps_per_generation=MINIBATCHES, num_generations=GROUP, num_iterations=PASSES,
            max_completion_length=GEN_LEN, generation_kwargs={"min_new_tokens": GEN_LEN}, temperature=1.0,
            top_k=TOP_K, top_p=1.0, beta=BETA, learning_rate=1e-4, lr_scheduler_type="constant",
            max_steps=steps_per_round * total_rounds, logging_steps=steps_per_round, save_strategy="no",
            report_to="none", use_cpu=not opts.device.startswith("cuda"), bf16=False, fp16=False,
            gradient_checkpointing=False, optim="adamw_torch_fused", max_grad_norm=1.0, seed=1,
            disable_tqdm=True, model_init_kwargs={"dtype": torch.float32}, dataloader_num_workers=0,
        )
        trainer = TimedRLOOTrainer(model=model_dir, reward_funcs=sentiment, args=config, train_dataset=dataset,
                                   processing_class=AutoTokenizer.from_pretrained(model_dir), callbacks=[Clock()])
        trainer.train()
    return {"rounds": rounds, "flops": flops[0], "peak_mib": peak_memory_mib(opts.device)}


def matmul_peak_flops(device: str, threads: int, dtype: str = "float32", n: int = 2048, repeats: int = 10) -> float:
    """The best FLOP/s of an n×n @ n×n matmul on this machine: the roof the utilisation is measured against."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    a = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))
    b = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))
    best = float("inf")
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


# --- the parent: interleave, summarise ------------------------------------------------------------


def run_worker(system: str, opts) -> dict:
    cmd = [sys.executable, __file__, "--worker", system, "--device", opts.device, "--threads", str(opts.threads),
           "--shape", opts.shape, *(["--compile"] if opts.compile else []), *(["--bf16"] if opts.bf16 else []),
           "--warmup", str(opts.warmup), "--rounds", str(opts.rounds)]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"{system} worker failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarise(results: dict[str, list[dict]], peak: float) -> dict:
    summary = {}
    for system, runs in results.items():
        medians = [statistics.median(r["round_s"] for r in run["rounds"]) for run in runs]
        parts = {p: statistics.median(statistics.median(r[p] for r in run["rounds"]) for run in runs) for p in PARTS}
        flops = statistics.median(run["flops"] for run in runs)
        summary[system] = {
            "round_s_min": min(medians), "round_s_median": statistics.median(medians), "parts_s": parts,
            "tokens_per_s": BATCH * GEN_LEN / statistics.median(medians),
            "peak_mib": statistics.median(run["peak_mib"] for run in runs), "gflop_per_round": flops / 1e9,
            "utilisation": flops / statistics.median(medians) / peak,
        }
    trl = results.get("trl-rloo")
    for system, runs in results.items():
        if trl:  # ratio per repeat (same sitting), then min / median
            ratios = [statistics.median(r["round_s"] for r in a["rounds"]) / statistics.median(r["round_s"] for r in b["rounds"])
                      for a, b in zip(runs, trl)]
            summary[system]["ratio_to_trl_min"], summary[system]["ratio_to_trl_median"] = min(ratios), statistics.median(ratios)
            summary[system]["memory_ratio_to_trl"] = summary[system]["peak_mib"] / summary["trl-rloo"]["peak_mib"]
    return summary


def print_tables(summary: dict, peak: float, opts) -> None:
    from tabulate import tabulate

    systems = list(summary)
    rows = [[p] + [f"{summary[s]['parts_s'][p]:.3f}" for s in systems] for p in PARTS]
    rows.append(["round (min / median)"] + [f"{summary[s]['round_s_min']:.2f} / {summary[s]['round_s_median']:.2f}" for s in systems])
    if "trl-rloo" in summary:
        rows.append(["× TRL (min / median)"] + [f"{summary[s]['ratio_to_trl_min']:.2f} / {summary[s]['ratio_to_trl_median']:.2f}"
                                                 for s in systems])
    rows.append(["generated tokens/s"] + [f"{summary[s]['tokens_per_s']:.0f}" for s in systems])
    mem = "peak GPU memory (MiB)" if opts.device.startswith("cuda") else "peak RSS (MiB)"
    rows.append([mem] + [f"{summary[s]['peak_mib']:.0f}" for s in systems])
    if "trl-rloo" in summary:
        rows.append(["memory × TRL"] + [f"{summary[s]['memory_ratio_to_trl']:.2f}" for s in systems])
    rows.append(["matmul GFLOP / round"] + [f"{summary[s]['gflop_per_round']:.1f}" for s in systems])
    rows.append([f"FLOP utilisation (of {peak / 1e9:.0f} GFLOP/s)"] + [f"{100 * summary[s]['utilisation']:.1f} %" for s in systems])
    print(tabulate(rows, headers=["seconds (median)"] + systems, tablefmt="github"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2, help="rounds run before timing (at least 1)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per worker")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shape", choices=["tiny", "gpt2-small"], default="tiny",
                        help="gpt2-small: ours only, on a random GPT-2-small-shaped model (no Hub needed)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads in every worker (0 = torch's default)")
    parser.add_argument("--peak-dtype", default="float32", help="dtype of the matmul peak the utilisation is measured against")
    parser.add_argument("--compile", action="store_true", help="ours: torch.compile the learning forward (TRL unchanged)")
    parser.add_argument("--bf16", action="store_true", help="ours: bf16 autocast on the learning forward (TRL unchanged)")
    parser.add_argument("--json", help="write every measurement here")
    parser.add_argument("--worker", choices=SYSTEMS, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.worker:
        result = worker_trl(opts) if opts.worker == "trl-rloo" else worker_ours(opts.worker, opts)
        print(json.dumps(result))
        return
    systems = opts.systems.split(",")
    if bad := [s for s in systems if s not in SYSTEMS]:
        sys.exit(f"--systems: unknown {', '.join(bad)}; choose from {', '.join(SYSTEMS)}")
    if opts.shape != "tiny" and "trl-rloo" in systems:
        sys.exit("--shape gpt2-small: ours only (TRL's round needs the tiny weights); pass --systems ours-ppo,ours-rloo")
    if opts.warmup < 1:
        sys.exit("--warmup: at least 1 (the first round pays for one-time setup)")
    if "trl-rloo" in systems:
        try:
            import trl  # noqa: F401
        except ImportError:
            sys.exit("trl is not installed: pip install -e '.[bench]' (or leave trl-rloo out of --systems)")
    from tqdm.auto import tqdm

    peak = matmul_peak_flops(opts.device, opts.threads, opts.peak_dtype, n=8192 if opts.device.startswith('cuda') else 2048)
    results: dict[str, list[dict]] = {s: [] for s in systems}
    with tqdm(total=opts.repeats * len(systems), desc="workers") as bar:
        for _ in range(opts.repeats):
            for system in systems:
                bar.set_postfix(system=system)
                results[system].append(run_worker(system, opts))
                bar.update()
    summary = summarise(results, peak)
    flags = "".join([", ours compiled" if opts.compile else "", ", ours bf16 autocast" if opts.bf16 else ""])
    print(f"\n{opts.shape} shape{flags}, {opts.device}, {opts.threads or 'default'} threads, {opts.repeats} repeats × {opts.rounds} rounds; "
          f"matmul peak {peak / 1e9:.0f} GFLOP/s ({opts.peak_dtype})\n")
    print_tables(summary, peak, opts)
    if opts.json:
        Path(opts.json).write_text(json.dumps({"options": vars(opts), "matmul_peak_flops": peak,
                                               "summary": summary, "raw": results}, indent=1))


if __name__ == "__main__":
    main()
