"""Our PPO, RLOO and GRPO beside TRL 1.16's RLOOTrainer and GRPOTrainer, at equal work.

    pip install -e ".[bench]"                     # TRL 1.16 (optional extra; nothing else needs it)
    python benchmarks/bench_trl.py                 # tiny weights, CPU, 3 interleaved repeats
    python benchmarks/bench_trl.py --whole 6       # whole processes of 6 rounds: wall, start-up, peak RSS
    python benchmarks/bench_trl.py --help-repeats 10    # `--help` of our command line beside TRL's
    python benchmarks/bench_trl.py --device cuda --threads 0 --repeats 5

Equal work, on the tiny preset's weights (the same HF folder feeds both): one prompt, 64
completions × 30 tokens forced to full length (no EOS), top-k 10, temperature 1, a reference
model (β = 0.1), 2 passes × 4 minibatches of 16, fp32, no gradient checkpointing, fused AdamW,
the same reward (the tiny sentiment classifier as a reward function), logging every round.

    ours  ppo   : RLHFTrainer,  batch 64, num_minibatches 4, batches_per_learning_phase 2, beta 0.1
                  (ppo-lowmem: the same with --no-cache-ref-logprobs, a reference forward per minibatch)
    ours  rloo  : RLOOTrainer,  16 prompts × num_generations 4, num_minibatches 4, num_iterations 2, beta 0.1
    ours  grpo  : GRPOTrainer,  the same shape as rloo (loss_type dapo, scale_rewards group: both TRL's defaults)
    trl   rloo  : RLOOConfig(per_device_train_batch_size=16, steps_per_generation=4, num_generations=4,
                  num_iterations=2, max_completion_length=30, generation_kwargs={"min_new_tokens": 30},
                  top_k=10, temperature=1.0, beta=0.1, optim="adamw_torch_fused", logging_steps=8)
    trl   grpo  : GRPOConfig with the same fields

Who is compared with whom (`PAIRS`): ours-ppo, ours-ppo-lowmem and ours-rloo with trl-rloo (TRL 1.16
has no PPO trainer), ours-grpo with trl-grpo.

Each system runs in its own process (so peak memory is its own), the systems in turn, `--repeats`
times, so machine noise hits all of them alike; a ratio is taken per repeat (the two ran in the
same sitting), then min / median. A worker runs `--warmup` rounds, then `--rounds` timed ones, then
one more under torch's FlopCounterMode to count the matmul FLOPs of a round (not with `--whole`).
A round is clocked alike on both sides, from the end of one round's last optimizer step to the end
of the next's: it holds the previous round's log line and the loop's bookkeeping ("other").

Measured per round: per-part medians, round time (min / median over repeats of each worker's
median), ratio to the paired TRL trainer, generated tokens/s, peak memory, and achieved FLOP/s
against this machine's measured matmul peak. Measured per process: its wall time from launch to
exit (the parent's clock around the subprocess), its start-up (launch → the first round's start:
imports, model loading, trainer init, the training loop's set-up; the parent passes its launch time)
and its peak RSS (the kernel's, from wait4). `--json PATH` keeps everything.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling provenance.py, however this file is loaded
from provenance import describe, provenance  # noqa: E402

PARTS = ("generation", "policy_forward", "reference_forward", "reward", "learning_forward", "backward",
         "optimizer_step", "logging", "other")
OURS = ("ours-ppo", "ours-ppo-lowmem", "ours-rloo", "ours-grpo")
TRL = ("trl-rloo", "trl-grpo")
SYSTEMS = OURS + TRL
PAIRS = {"ours-ppo": "trl-rloo", "ours-ppo-lowmem": "trl-rloo", "ours-rloo": "trl-rloo", "ours-grpo": "trl-grpo"}
BATCH, GEN_LEN, TOP_K, BETA, MINIBATCHES, PASSES, GROUP = 64, 30, 10, 0.1, 4, 2, 4

# `--help` of each command line. TRL's is what its `trl` console script runs (without the script's
# launcher, so neither side pays for a shim); TRL 1.16's CLI has rloo and grpo, no ppo.
TRL_CLI = "import sys; from trl.cli import main; sys.exit(main())"
HELP_COMMANDS = {
    "ours-ppo": ["-m", "rlhf_scratch.train", "sentiment", "--help"],
    "ours-rloo": ["-m", "rlhf_scratch.train", "sentiment", "--algo", "rloo", "--help"],
    "ours-grpo": ["-m", "rlhf_scratch.train", "sentiment", "--algo", "grpo", "--help"],
    "trl-rloo": ["-c", TRL_CLI, "rloo", "--help"],
    "trl-grpo": ["-c", TRL_CLI, "grpo", "--help"],
}


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
# Each returns {"rounds": [{round_s, <part>: s, ...}], "flops", "peak_mib", "marks"}; marks are the
# moments the worker reached (seconds since the parent launched it, time.time() on both sides):
#   imports        the worker's imports done (torch, the trainer's library)
#   trainer_init   the trainer built: model, reference, reward classifier, optimizer
#   first_round    the first round starts (our loop's first rollout; TRL's on_train_begin)
#   train_end      the last round of --warmup + --rounds is done (the FLOP-counted round comes after)


def worker_ours(system: str, opts) -> dict:
    import torch

    from rlhf_scratch.config import make_args, registry
    from rlhf_scratch.engine.runs import read_metrics

    algo = system.split("-")[1]  # ours-ppo-lowmem -> ppo
    Trainer = registry.get(algo).trainer_class()  # only the chosen algorithm's module, as train does
    marks = {"imports": time.time()}

    task = "sentiment"
    if opts.shape == "gpt2-small":  # a random GPT-2-small-shaped model; see phase_memory.py
        sys.path.insert(0, str(Path(__file__).parent))
        from phase_memory import gpt2_small_factory

        from rlhf_scratch.engine import run_setup

        run_setup.load_lm = gpt2_small_factory()
        task = "periods"  # the tiny classifier's tokenizer does not cover GPT-2's vocabulary
    common = dict(task=task, total_phases=opts.warmup + opts.rounds, batch_size=BATCH, gen_len=GEN_LEN, top_k=TOP_K,
                  num_minibatches=MINIBATCHES, device=opts.device, threads=opts.threads, save_every=0,
                  save_model=False, stop_at_eos=False, warmup_steps=1, compile=opts.compile, bf16=opts.bf16, beta=BETA)
    if algo == "ppo":
        args = make_args("tiny", "ppo", batches_per_learning_phase=PASSES, cache_ref_logprobs=system == "ours-ppo", **common)
    else:  # rloo and grpo: G completions of BATCH / G prompts
        args = make_args("tiny", algo, num_generations=GROUP, num_iterations=PASSES, **common)
    trainer = Trainer(args, quiet=True)
    marks["trainer_init"] = time.time()
    clock = PhaseClock(marks)
    learning_ends = clock.learning_ends
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = trainer.train(Path(tmp) / "run", hooks=[clock])
        marks["train_end"] = time.time()
        metrics = read_metrics(run_dir)
    rounds = []
    for k in range(opts.warmup, opts.warmup + opts.rounds):  # metrics[k]: phase k + 1
        round_s = learning_ends[k] - learning_ends[k - 1]
        parts = {p: metrics[k][f"time/{p}"] for p in PARTS if p != "other"}
        rounds.append({"round_s": round_s, **parts, "other": max(round_s - sum(parts.values()), 0.0)})
    flops = None
    if opts.flops:
        torch.manual_seed(0)
        flops = count_flops(lambda: trainer.learning_phase(trainer.rollout_phase()))
    return {"rounds": rounds, "flops": flops, "peak_mib": peak_memory_mib(opts.device),
            "marks": {k: t - opts.t0 for k, t in marks.items()}}


class PhaseClock:
    """A `loop.PhaseHook` that clocks the loop: marks["first_round"] just before the first rollout,
    and `learning_ends` gets the perf_counter at the end of every learning phase. A round is then
    timed as TRL's clock times one (from one optimizer step's end to the next round's): end of phase
    k−1's learning → end of phase k's, so it holds phase k−1's log line and the loop's bookkeeping
    too. Its parts are phase k's `time/<part>`, whose `logging` is phase k−1's log line
    (loop.phase_times)."""

    METRICS: tuple[str, ...] = ()

    def __init__(self, marks: dict):
        self.marks, self.learning_ends = marks, []

    def start(self, run_dir, phase: int) -> None:
        self.marks.setdefault("first_round", time.time())

    def after_phase(self, run_dir, phase: int) -> dict[str, float]:
        self.learning_ends.append(time.perf_counter())
        return {}


def asset_folder(name: str) -> Path:
    """A shipped asset's folder (rlhf_scratch/assets/NAME), as loading.asset_path finds it, without
    importing loading.py (which imports TransformerLens: only our side should pay for that)."""
    from importlib.resources import as_file, files

    with as_file(files("rlhf_scratch") / "assets" / name) as path:
        return Path(path)


def tiny_sentiment_reward(device: str):
    """The tiny classifier's P(positive | prompt + completion) as a TRL reward function: our
    `train sentiment` reward (rewards.SentimentReward("tiny")), built from transformers alone so the
    TRL process imports nothing TRL would not (tests/unit/test_bench_summary.py checks the two agree)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = str(asset_folder("tiny_reward"))
    model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token is None:  # as loading.as_classifier
        tokenizer.pad_token = tokenizer.eos_token
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    max_length = min(512, model.config.n_positions)

    @torch.inference_mode()
    def sentiment(prompts, completions, **kwargs) -> list[float]:
        batch = tokenizer([p + c for p, c in zip(prompts, completions)], padding=True, truncation=True,
                          max_length=max_length, return_tensors="pt").to(device)
        return model(**batch).logits.float().softmax(dim=-1)[:, 1].tolist()

    return sentiment


def timed_trl_trainer(Base, timed):
    """TRL's trainer, unchanged, with a clock around the methods that do each part. RLOOTrainer and
    GRPOTrainer 1.16 share these names: `_generate` (sampling and decoding), `_get_per_token_logps_and_entropies`
    (every forward; without gradient in `_generate_and_score_completions`: the old policy's and the
    reference's log-probs), `_calculate_rewards`, `_compute_loss` (the forward with gradient and the
    loss) and `log`."""
    import torch

    class Timed(Base):
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

    Timed.__name__ = f"Timed{Base.__name__}"
    return Timed


def worker_trl(system: str, opts) -> dict:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    from rlhf_scratch.config import make_args  # plain dataclasses: no torch, no TransformerLens

    kind = system.split("-")[1].upper()  # trl-grpo -> GRPO: TRL imports a trainer's module on first use
    Config, Trainer = getattr(trl, f"{kind}Config"), getattr(trl, f"{kind}Trainer")
    marks = {"imports": time.time()}
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

    steps_per_round = MINIBATCHES * PASSES
    last_round = opts.warmup + opts.rounds  # of the warm-up and timed ones; a FLOP-counted round may follow
    rounds: list[dict] = []
    flops: list[float] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            trainer.accelerator.backward = self.timed_backward(trainer.accelerator.backward)
            marks["first_round"] = time.time()
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
            if done > last_round:  # the extra round ran under the FLOP counter
                self.counter.__exit__(None, None, None)
                flops.append(float(self.counter.get_total_flops()))
            elif done > opts.warmup:
                part_sum = sum(times.values())
                rounds.append({"round_s": now - self.last, **times, "other": max(now - self.last - part_sum, 0.0)})
            if done == last_round and opts.flops:
                from torch.utils.flop_counter import FlopCounterMode

                marks["train_end"] = time.time()
                self.counter = FlopCounterMode(display=False)
                self.counter.__enter__()
            for p in times:
                times[p] = 0.0
            self.last = time.perf_counter()

    total_rounds = last_round + (1 if opts.flops else 0)
    prefix = make_args("tiny").prefix
    dataset = Dataset.from_dict({"prompt": [prefix] * (BATCH // GROUP * total_rounds)})
    model_dir = str(asset_folder("tiny_lm"))
    with tempfile.TemporaryDirectory() as tmp:
        config = Config(
            output_dir=tmp, per_device_train_batch_size=BATCH // MINIBATCHES, gradient_accumulation_steps=1,
            steps_per_generation=MINIBATCHES, num_generations=GROUP, num_iterations=PASSES,
            max_completion_length=GEN_LEN, generation_kwargs={"min_new_tokens": GEN_LEN}, temperature=1.0,
            top_k=TOP_K, top_p=1.0, beta=BETA, learning_rate=1e-4, lr_scheduler_type="constant",
            max_steps=steps_per_round * total_rounds, logging_steps=steps_per_round, save_strategy="no",
            report_to="none", use_cpu=not opts.device.startswith("cuda"), bf16=False, fp16=False,
            gradient_checkpointing=False, optim="adamw_torch_fused", max_grad_norm=1.0, seed=1,
            disable_tqdm=True, model_init_kwargs={"dtype": torch.float32}, dataloader_num_workers=0,
        )
        trainer = timed_trl_trainer(Trainer, timed)(
            model=model_dir, reward_funcs=tiny_sentiment_reward(opts.device), args=config, train_dataset=dataset,
            processing_class=AutoTokenizer.from_pretrained(model_dir), callbacks=[Clock()])
        marks["trainer_init"] = time.time()
        trainer.train()
        marks.setdefault("train_end", time.time())
    return {"rounds": rounds, "flops": flops[0] if flops else None, "peak_mib": peak_memory_mib(opts.device),
            "marks": {k: t - opts.t0 for k, t in marks.items()}}


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


# --- the parent: launch, interleave, summarise ---------------------------------------------------


def run_process(argv: list[str], env: dict) -> dict:
    """Run `python *argv` to its exit: its wall time (launch → reaped), exit code, peak RSS (the
    kernel's ru_maxrss of that one child, from wait4) and output. `launched_at` is time.time() at the
    launch, the zero of a worker's marks."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        launched_at = time.time()
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *argv], stdout=out, stderr=err, env=env, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        out.seek(0), err.seek(0)
        return {"wall_s": wall, "returncode": proc.returncode, "peak_rss_mib": usage.ru_maxrss / 1024,
                "launched_at": launched_at, "stdout": out.read(), "stderr": err.read()}


def worker_env() -> dict:
    # RLHF_SCRATCH_PROFILE: the per-part clocks synchronise the device (core.timing.profile), so on a GPU each
    # part holds its own work, ours and TRL's alike; a run without it does not wait on the device per section
    return {**os.environ, "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled", "RLHF_SCRATCH_PROFILE": "1"}


def run_worker(system: str, opts) -> dict:
    """One worker process of `system`: its rounds and marks, and the parent's view of the process."""
    flags = ["--worker", system, "--device", opts.device, "--threads", str(opts.threads), "--shape", opts.shape,
             *(["--compile"] if opts.compile else []), *(["--bf16"] if opts.bf16 else []),
             *([] if opts.flops else ["--no-flops"]), "--warmup", str(opts.warmup), "--rounds", str(opts.rounds)]
    t0 = time.time()  # the worker's marks count from here: a few microseconds before the launch
    proc = run_process([__file__, *flags, "--t0", repr(t0)], worker_env())
    if proc["returncode"] != 0:
        sys.exit(f"{system} worker failed:\n{proc['stderr'][-3000:]}")
    result = json.loads(proc["stdout"].strip().splitlines()[-1])
    result["process"] = {"wall_s": proc["wall_s"], "peak_rss_mib": proc["peak_rss_mib"],
                         "rounds_run": opts.warmup + opts.rounds + (1 if opts.flops else 0)}
    return result


def min_median(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values)}


def paired_ratios(values: list[float], baseline: list[float]) -> dict[str, float]:
    """values[i] / baseline[i] for each repeat i (the two ran in the same sitting), then min / median."""
    if len(values) != len(baseline):
        raise ValueError(f"paired_ratios: {len(values)} values against {len(baseline)} baseline values")
    return min_median([v / b for v, b in zip(values, baseline)])


def baseline_of(system: str, present) -> str | None:
    """The TRL trainer `system` is compared with, if it was measured (None for TRL's own)."""
    base = PAIRS.get(system)
    return base if base in present else None


def startup_parts(marks: dict[str, float], wall_s: float) -> dict[str, float]:
    """A process's wall time cut at its marks: imports, trainer init, the loop's set-up before the
    first round (these three: the start-up), the rounds, and the rest (a FLOP-counted round, if any,
    and the interpreter's exit)."""
    return {
        "imports": marks["imports"],
        "trainer_init": marks["trainer_init"] - marks["imports"],
        "to_first_round": marks["first_round"] - marks["trainer_init"],
        "startup": marks["first_round"],
        "training": marks["train_end"] - marks["first_round"],
        "after_training": wall_s - marks["train_end"],
    }


def summarise_process(runs: list[dict], base_runs: list[dict] | None) -> dict:
    """Whole-process numbers of one system over its repeats, and their ratios to its baseline's."""
    walls = [r["process"]["wall_s"] for r in runs]
    splits = [startup_parts(r["marks"], r["process"]["wall_s"]) for r in runs]
    startups = [s["startup"] for s in splits]
    rss = statistics.median(r["process"]["peak_rss_mib"] for r in runs)
    summary = {
        "rounds_run": runs[0]["process"]["rounds_run"],
        "wall_s": min_median(walls), "startup_s": min_median(startups),
        "parts_s": {k: statistics.median(s[k] for s in splits) for k in splits[0]},
        "peak_rss_mib": rss,
        "wall_ratio": None, "startup_ratio": None, "rss_ratio": None,
    }
    if base_runs:
        summary["wall_ratio"] = paired_ratios(walls, [r["process"]["wall_s"] for r in base_runs])
        base_splits = [startup_parts(r["marks"], r["process"]["wall_s"]) for r in base_runs]
        summary["startup_ratio"] = paired_ratios(startups, [s["startup"] for s in base_splits])
        summary["rss_ratio"] = rss / statistics.median(r["process"]["peak_rss_mib"] for r in base_runs)
    return summary


def summarise(results: dict[str, list[dict]], peak: float) -> dict:
    """Per system: round time and parts (medians of each worker's median), its ratio to its paired
    TRL trainer (per repeat, then min / median), memory, FLOPs, and the whole process's numbers."""
    def round_medians(runs):
        return [statistics.median(r["round_s"] for r in run["rounds"]) for run in runs]

    summary = {}
    for system, runs in results.items():
        base = baseline_of(system, results)
        medians = round_medians(runs)
        peak_mib = statistics.median(run["peak_mib"] for run in runs)
        counted = [run["flops"] for run in runs if run.get("flops") is not None]
        flops = statistics.median(counted) if counted else None
        summary[system] = {
            "compared_with": base,
            "round_s": min_median(medians),
            "round_ratio": paired_ratios(medians, round_medians(results[base])) if base else None,
            "parts_s": {p: statistics.median(statistics.median(r[p] for r in run["rounds"]) for run in runs)
                        for p in PARTS},
            "tokens_per_s": BATCH * GEN_LEN / statistics.median(medians),
            "peak_mib": peak_mib,
            "memory_ratio": peak_mib / statistics.median(run["peak_mib"] for run in results[base]) if base else None,
            "gflop_per_round": flops / 1e9 if flops is not None else None,
            "utilisation": flops / statistics.median(medians) / peak if flops is not None else None,
            "process": summarise_process(runs, results[base] if base else None),
        }
    return summary


def fmt_min_median(d: dict | None, digits: int = 2) -> str:
    return "—" if d is None else f"{d['min']:.{digits}f} / {d['median']:.{digits}f}"


def fmt_ratio(system: str, value) -> str:
    """A ratio cell: the number, 'baseline' for TRL's own column, '—' where its baseline was not run."""
    if system in TRL:
        return "baseline"
    if value is None:
        return "—"
    return fmt_min_median(value) if isinstance(value, dict) else f"{value:.2f}"


def print_round_table(summary: dict, peak: float, opts) -> None:
    from tabulate import tabulate

    systems = list(summary)
    rows = [[p] + [f"{summary[s]['parts_s'][p]:.3f}" for s in systems] for p in PARTS]
    rows.append(["round (min / median)"] + [fmt_min_median(summary[s]["round_s"]) for s in systems])
    rows.append(["compared with"] + [summary[s]["compared_with"] or "—" for s in systems])
    rows.append(["× it (min / median)"] + [fmt_ratio(s, summary[s]["round_ratio"]) for s in systems])
    rows.append(["generated tokens/s"] + [f"{summary[s]['tokens_per_s']:.0f}" for s in systems])
    mem = "peak GPU memory (MiB)" if opts.device.startswith("cuda") else "peak RSS (MiB)"
    rows.append([mem] + [f"{summary[s]['peak_mib']:.0f}" for s in systems])
    rows.append(["memory × it"] + [fmt_ratio(s, summary[s]["memory_ratio"]) for s in systems])
    if opts.flops:
        rows.append(["matmul GFLOP / round"] + [f"{summary[s]['gflop_per_round']:.1f}" for s in systems])
        rows.append([f"FLOP utilisation (of {peak / 1e9:.0f} GFLOP/s)"]
                    + [f"{100 * summary[s]['utilisation']:.1f} %" for s in systems])
    print(tabulate(rows, headers=["seconds (median)"] + systems, tablefmt="github"))


def print_process_table(summary: dict) -> None:
    from tabulate import tabulate

    systems = list(summary)
    proc = {s: summary[s]["process"] for s in systems}
    rows = [
        ["rounds in the process"] + [proc[s]["rounds_run"] for s in systems],
        ["process wall, s (min / median)"] + [fmt_min_median(proc[s]["wall_s"]) for s in systems],
        ["× it (min / median)"] + [fmt_ratio(s, proc[s]["wall_ratio"]) for s in systems],
        ["start-up, s (min / median)"] + [fmt_min_median(proc[s]["startup_s"]) for s in systems],
        ["× it (min / median)"] + [fmt_ratio(s, proc[s]["startup_ratio"]) for s in systems],
    ]
    labels = {"imports": "… imports", "trainer_init": "… trainer init", "to_first_round": "… loop set-up",
              "training": "rounds", "after_training": "after the rounds (exit)"}
    rows += [[label] + [f"{proc[s]['parts_s'][k]:.2f}" for s in systems] for k, label in labels.items()]
    rows.append(["peak RSS of the process (MiB)"] + [f"{proc[s]['peak_rss_mib']:.0f}" for s in systems])
    rows.append(["RSS × it"] + [fmt_ratio(s, proc[s]["rss_ratio"]) for s in systems])
    print(tabulate(rows, headers=["whole process (median)"] + systems, tablefmt="github"))


# --- `--help` of the command lines ----------------------------------------------------------------


def time_help(repeats: int) -> dict:
    """Each HELP_COMMANDS entry run `repeats` times, interleaved: wall time and peak RSS per run."""
    from tqdm.auto import tqdm

    raw: dict[str, list[dict]] = {name: [] for name in HELP_COMMANDS}
    with tqdm(total=repeats * len(HELP_COMMANDS), desc="--help") as bar:
        for _ in range(repeats):
            for name, argv in HELP_COMMANDS.items():
                proc = run_process(argv, worker_env())
                if proc["returncode"] != 0:
                    sys.exit(f"{name}: `python {' '.join(argv)}` failed:\n{proc['stderr'][-3000:]}")
                raw[name].append({"wall_s": proc["wall_s"], "peak_rss_mib": proc["peak_rss_mib"]})
                bar.update()
    return raw


def summarise_help(raw: dict[str, list[dict]]) -> dict:
    summary = {}
    for name, runs in raw.items():
        base = baseline_of(name, raw)
        walls = [r["wall_s"] for r in runs]
        summary[name] = {"compared_with": base, "wall_s": min_median(walls),
                         "ratio": paired_ratios(walls, [r["wall_s"] for r in raw[base]]) if base else None,
                         "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in runs)}
    return summary


def print_help_table(summary: dict) -> None:
    from tabulate import tabulate

    rows = [[f"python {' '.join(HELP_COMMANDS[name]).replace(TRL_CLI, '<trl.cli.main>')}",
             fmt_min_median(s["wall_s"]), s["compared_with"] or "—", fmt_ratio(name, s["ratio"]),
             f"{s['peak_rss_mib']:.0f}"] for name, s in summary.items()]
    print(tabulate(rows, headers=["command", "wall s (min / median)", "compared with", "× it (min / median)",
                                  "peak RSS (MiB)"], tablefmt="github"))


# --- the command line -----------------------------------------------------------------------------


def machine() -> dict:
    """What ran it, without anything that names this machine."""
    return {"cpu_count": os.cpu_count(), "cpus_available": len(os.sched_getaffinity(0)), "processor": platform.machine(),
            "python": platform.python_version(),
            **{pkg: installed_version(pkg) for pkg in ("torch", "transformers", "trl", "transformer_lens")}}


def installed_version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def write_json(path: str, opts, ran: dict, **content) -> None:
    """Every measurement, with what ran it: `ran` is `provenance()` read when the run started."""
    options = {k: v for k, v in vars(opts).items() if k not in ("worker", "t0", "json")}
    data = {"provenance": ran, "options": options, "machine": machine(), "pairs": PAIRS, **content}
    Path(path).write_text(json.dumps(data, indent=1))


def parse_options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2, help="rounds run before timing (at least 1)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per worker")
    parser.add_argument("--whole", type=int, metavar="N",
                        help="whole processes of exactly N rounds: 1 warm-up + N-1 timed, no FLOP-counted round "
                             "(overrides --warmup and --rounds)")
    parser.add_argument("--no-flops", dest="flops", action="store_false",
                        help="no extra round under the FLOP counter")
    parser.add_argument("--help-repeats", type=int, default=0, metavar="N",
                        help="instead of training: time each command line's --help, N interleaved repeats")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shape", choices=["tiny", "gpt2-small"], default="tiny",
                        help="gpt2-small: ours only, on a random GPT-2-small-shaped model (no Hub needed)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads in every worker (0 = torch's default)")
    parser.add_argument("--peak-dtype", default="float32", help="dtype of the matmul peak the utilisation is measured against")
    parser.add_argument("--compile", action="store_true", help="ours: torch.compile the learning forward (TRL unchanged)")
    parser.add_argument("--bf16", action="store_true", help="ours: bf16 autocast on the learning forward (TRL unchanged)")
    parser.add_argument("--json", help="write every measurement here")
    parser.add_argument("--worker", choices=SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--t0", type=float, help=argparse.SUPPRESS)  # the parent's time.time() at the launch
    opts = parser.parse_args(argv)
    if opts.whole is not None:
        if opts.whole < 2:
            parser.error("--whole: at least 2 rounds (1 warm-up + 1 timed)")
        opts.warmup, opts.rounds, opts.flops = 1, opts.whole - 1, False
    return opts


def main() -> None:
    opts = parse_options()
    if opts.worker:
        if opts.t0 is None:  # run by hand: count from now (the start-up then misses the interpreter's own)
            opts.t0 = time.time()
        result = worker_trl(opts.worker, opts) if opts.worker in TRL else worker_ours(opts.worker, opts)
        print(json.dumps(result))
        return
    ran = provenance()  # the commit that runs, read now (the tree may change while the workers run)
    print(describe(ran))
    if opts.help_repeats:
        raw = time_help(opts.help_repeats)
        summary = summarise_help(raw)
        print(f"\n`--help`, {opts.help_repeats} interleaved repeats\n")
        print_help_table(summary)
        if opts.json:
            commands = {name: ["python", *argv] for name, argv in HELP_COMMANDS.items()}
            write_json(opts.json, opts, ran, help={"commands": commands, "summary": summary, "raw": raw})
        return
    systems = opts.systems.split(",")
    if bad := [s for s in systems if s not in SYSTEMS]:
        sys.exit(f"--systems: unknown {', '.join(bad)}; choose from {', '.join(SYSTEMS)}")
    if opts.shape != "tiny" and any(s in TRL for s in systems):
        sys.exit("--shape gpt2-small: ours only (TRL's round needs the tiny weights); pass --systems ours-ppo,ours-rloo")
    if opts.warmup < 1:
        sys.exit("--warmup: at least 1 (the first round pays for one-time setup)")
    if any(s in TRL for s in systems):
        try:
            import trl  # noqa: F401
        except ImportError:
            sys.exit("trl is not installed: pip install -e '.[bench]' (or leave trl-* out of --systems)")
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
    rounds_run = opts.warmup + opts.rounds + (1 if opts.flops else 0)
    print(f"\n{opts.shape} shape{flags}, {opts.device}, {opts.threads or 'default'} threads, {opts.repeats} repeats × "
          f"{opts.rounds} timed rounds after {opts.warmup} warm-up; matmul peak {peak / 1e9:.0f} GFLOP/s ({opts.peak_dtype})\n")
    print_round_table(summary, peak, opts)
    print(f"\nwhole processes of {rounds_run} rounds{' (the last one FLOP-counted)' if opts.flops else ''}, "
          f"launch → exit; start-up = launch → the first round's start\n")
    print_process_table(summary)
    if opts.json:
        write_json(opts.json, opts, ran, matmul_peak_flops=peak, summary=summary, raw=results)


if __name__ == "__main__":
    main()
