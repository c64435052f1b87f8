"""Reward-model over-optimisation (Gao, Schulman & Hilton 2022), reproduced at tiny scale.

    python -m rlhf_scratch.overoptimization --out study/                       # the defaults below
    python -m rlhf_scratch.overoptimization --rm-pairs 250,1000 --algos ppo,bon --total-phases 20 --out s/

1. Gold-labelled pairs, once: `preferences.make_preference_pairs` on training prompts (the gold
   is the tiny classifier's log-odds, labels drawn by Bradley–Terry), max(--rm-pairs) of them
   plus --test-pairs more that no proxy trains on. Smaller sizes are prefixes of the big file.
2. One proxy reward model per size (`python -m rlhf_scratch.reward_model`, own process); its
   accuracy against gold on the common test pairs goes in the table.
3. Best-of-n from the reference on the held-out prompts: n = 1, 2, 4 … --bon-max, the sample the
   proxy ranks first, scored by gold. KL_bon = log n − (n−1)/n; the expectation over the n-subsets
   of the --bon-max samples is exact (the i-th best of N is the best of a random n-subset with
   probability C(i−1, n−1)/C(N, n)).
4. Every RL algorithm against every proxy, each run its own `train`-like process (resumable, a
   run folder each). After every phase the policy is evaluated on the same held-out prompts:
   gold and proxy reward, and KL(π‖π_ref) = the full-vocabulary per-token KL summed over the
   completion, averaged over samples — one estimator for every algorithm; d = √KL.
5. Gao et al.'s functional forms, fitted by least squares per (method, proxy size) to the gold
   reward's gain over the reference, R = gold − gold(π_ref):

       R_bon(d) = d(α − β d)        peak at d* = α / 2β,          R* = α² / 4β
       R_RL(d)  = d(α − β log d)    peak at d* = exp(α/β − 1),   R* = β d*

Writes OUT/table.md, table.json, overoptimization.png (gold solid, proxy dashed, against d, one
colour per proxy size, one panel per method) and index.html (with samples at each run's gold
peak and at its end). Run the same command again to continue an interrupted study.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from rlhf_scratch.config import ConfigError

METHODS = ("ppo", "rloo", "grpo", "online_dpo", "bon")
LABEL = {"ppo": "PPO", "rloo": "RLOO", "grpo": "GRPO", "online_dpo": "Online DPO", "bon": "best-of-n"}
PLAN_FILE = "study.json"
STUDY_METRICS = ("study/gold", "study/proxy", "study/kl", "study/d")  # logged by every RL run, every phase
SAMPLES_FILE = "study_samples.jsonl"
START_FILE = "study_start.json"  # the reference policy's evaluation (phase 0)


# --- the pieces ----------------------------------------------------------------------------------


def kl_bon(n: int) -> float:
    """KL(best-of-n ‖ reference) = log n − (n − 1)/n (Stiennon et al. 2020; an upper bound, tight
    for continuous rewards)."""
    return math.log(n) - (n - 1) / n


def best_of_n_expectation(proxy: list[float], values: list[float], n: int) -> float:
    """E[value of the proxy's best among n draws without replacement from N samples], exactly:
    with samples sorted by proxy ascending, sample i (1-based) is the best of a random n-subset
    with probability C(i−1, n−1) / C(N, n)."""
    N = len(proxy)
    if not 1 <= n <= N:
        raise ValueError(f"best_of_n_expectation: n must be in 1..{N}; got {n}")
    order = sorted(range(N), key=lambda j: proxy[j])
    log_total = math.lgamma(N + 1) - math.lgamma(n + 1) - math.lgamma(N - n + 1)
    out = 0.0
    for rank, j in enumerate(order, start=1):
        if rank >= n:
            log_c = math.lgamma(rank) - math.lgamma(n) - math.lgamma(rank - n + 1)
            out += values[j] * math.exp(log_c - log_total)
    return out


def fit_gao(ds: list[float], rs: list[float], form: str) -> dict[str, float] | None:
    """Least-squares α, β of R_bon(d) = d(α − βd) (`form="bon"`) or R_RL(d) = d(α − β log d)
    (`form="rl"`) through the points (d, R) with d > 0, and the peak d*, R* (inf when β ≤ 0:
    no peak within the fit; 0 for a best-of-n curve that only falls). None with fewer than 2 points."""
    import numpy as np

    pts = [(d, r) for d, r in zip(ds, rs) if d > 1e-6 and math.isfinite(r)]
    if len(pts) < 2:
        return None
    d = np.array([p[0] for p in pts])
    r = np.array([p[1] for p in pts])
    X = np.stack([d, -d * d], 1) if form == "bon" else np.stack([d, -d * np.log(d)], 1)
    (alpha, beta), *_ = np.linalg.lstsq(X, r, rcond=None)
    if beta <= 0:
        d_star, r_star = math.inf, math.inf
    elif form == "bon" and alpha <= 0:  # falling from the start: the peak is the reference itself
        d_star, r_star = 0.0, 0.0
    elif form == "bon":
        d_star, r_star = alpha / (2 * beta), alpha**2 / (4 * beta)
    else:
        d_star = math.exp(min(alpha / beta - 1, 50.0))
        r_star = beta * d_star
    return {"alpha": float(alpha), "beta": float(beta), "d_star": float(d_star), "R_star": float(r_star)}


def evaluate_policy(lm, ref, prompts: list[str], proxy_fn, gen_len: int, per_prompt: int, chunk_size: int = 32):
    """Sample `per_prompt` completions of each held-out prompt (temperature 1, whole vocabulary,
    stop at EOS), and return (metrics, samples): mean gold, mean proxy, and KL = mean over samples
    of Σ_t KL(π(·|s_t) ‖ π_ref(·|s_t)) over the kept completion tokens (the full-vocabulary
    per-token KL of the rollout, summed), d = √KL."""
    import torch

    from rlhf_scratch.reward.preferences import gold_scores
    from rlhf_scratch.rollout import make_rollout

    with torch.no_grad():
        rollout = make_rollout(lm, ref, prompts, proxy_fn, num_generations=per_prompt, gen_len=gen_len,
                               temperature=1.0, top_k=0, prepend_bos=True, stop_at_eos=True, chunk_size=chunk_size)
    kl = (rollout.kl * rollout.completion_mask).sum(-1)
    gold = gold_scores(rollout.texts)
    metrics = {"study/gold": gold.mean().item(), "study/proxy": rollout.scores.mean().item(),
               "study/kl": kl.mean().item(), "study/d": math.sqrt(max(kl.mean().item(), 0.0))}
    samples = [{"prompt": p, "completion": c, "gold": g, "proxy": r}
               for p, c, g, r in zip(rollout.prompts, rollout.completions, gold.tolist(), rollout.scores.tolist())]
    return metrics, samples


# --- one RL run (its own process) ----------------------------------------------------------------


def train_against_proxy(spec: dict) -> int:
    """The body of one run's process: train `spec["algo"]` against the proxy `spec["proxy"]`,
    evaluating on the held-out prompts after every phase (logged as study/* in metrics.jsonl)."""
    import importlib

    from rlhf_scratch.config import make_args
    from rlhf_scratch.loading import load_lm
    from rlhf_scratch.reward.tasks import make_reward_fn
    from rlhf_scratch.runs import load_args, read_status
    from rlhf_scratch.train import TRAINER_OF_ALGO

    run_dir = Path(spec["run_dir"])
    resume = (run_dir / "status.json").is_file()
    if resume and read_status(run_dir)["status"] == "finished":
        return 0
    if resume:
        args = load_args(run_dir)
    else:
        args = make_args("tiny", algo=spec["algo"], task="sentiment", reward_model=spec["proxy"],
                         prompts=spec["train_prompts"], run_dir=str(run_dir), **spec["train_fields"])
    module, name = TRAINER_OF_ALGO[spec["algo"]]
    trainer = getattr(importlib.import_module(module), name)(args, quiet=True)
    eval_prompts = Path(spec["eval_prompts"]).read_text().splitlines()
    ref = load_lm(args.model).eval()
    proxy_fn = make_reward_fn(args)
    lm_of = lambda: trainer.policy.base if hasattr(trainer.policy, "value_head") else trainer.policy  # noqa: E731

    pending: list[str] = []  # phase 0's lines, written once the run folder exists (it must start empty)

    def evaluate(phase: int) -> dict:
        metrics, samples = evaluate_policy(lm_of(), ref, eval_prompts, proxy_fn, args.gen_len, spec["per_prompt"])
        pending.append(json.dumps({"phase": phase, **metrics, "samples": samples[:: spec["per_prompt"]][:6]}))
        if run_dir.is_dir():
            with open(run_dir / SAMPLES_FILE, "a") as f:
                f.write("".join(line + "\n" for line in pending))
            pending.clear()
        return metrics

    learning_phase, phase = trainer.learning_phase, [0]

    def learning_phase_then_evaluate(rollout):
        stats = learning_phase(rollout)
        phase[0] += 1
        return {**stats, **evaluate(phase[0])}

    trainer.learning_phase = learning_phase_then_evaluate
    if not resume:  # the reference's evaluation: phase 0 of every curve
        start = evaluate(0)
        learning_phase_inner = trainer.learning_phase

        def first_phase_writes_start(rollout):
            stats = learning_phase_inner(rollout)
            if not (run_dir / START_FILE).is_file():
                (run_dir / START_FILE).write_text(json.dumps(start))
            return stats

        trainer.learning_phase = first_phase_writes_start
    else:
        phase[0] = read_status(run_dir).get("phase") or 0
    trainer.train(run_dir, resume=resume)
    return 0


def run_process(cmd: list[str], what: str) -> float:
    """Run `cmd` as its own process; its wall seconds, or a RuntimeError with its last error line."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled")})
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["no output"]
        errors = [x for x in lines if x.startswith("error:")]
        raise RuntimeError(f"{what} failed (exit {proc.returncode}): {(errors or lines)[-1]}")
    return time.perf_counter() - start


def run_processes(commands: dict[str, list[str]], jobs: int, out: Path, desc: str) -> None:
    """Run each named command as its own process, `jobs` at a time, with a progress bar; each one's
    wall seconds go to OUT/times.json as it finishes. The first failure is raised once the others end."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from tqdm.auto import tqdm

    failures = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(run_process, cmd, name): name for name, cmd in commands.items()}
        for future in tqdm(as_completed(futures), total=len(futures), desc=desc, file=sys.stderr):
            try:
                _timed(out, f"{futures[future]}_s", future.result())
            except RuntimeError as e:
                failures.append(e)
    if failures:
        raise failures[0]


# --- the study -----------------------------------------------------------------------------------


def _csv(text: str, kind, field: str) -> list:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{field}: expected a comma-separated list; got {text!r}") from None
    if not values:
        raise ConfigError(f"{field}: empty list")
    return values


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m rlhf_scratch.overoptimization", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="study folder (a finished or interrupted study there is continued)")
    p.add_argument("--rm-pairs", default="250,1000,4000", help="preference pairs per proxy reward model")
    p.add_argument("--algos", default=",".join(METHODS), help=f"methods: {', '.join(METHODS)}")
    p.add_argument("--total-phases", type=int, default=30, help="phases per RL run")
    p.add_argument("--test-pairs", type=int, default=200, help="gold pairs no proxy trains on (its accuracy)")
    p.add_argument("--eval-prompts", type=int, default=32, help="held-out prompts evaluated every phase")
    p.add_argument("--eval-per-prompt", type=int, default=2, help="samples per held-out prompt each phase")
    p.add_argument("--bon-max", type=int, default=256, help="largest n of best-of-n (a power of 2)")
    p.add_argument("--rm-epochs", type=int, default=2, help="epochs of each proxy reward model")
    p.add_argument("--gen-len", type=int, default=16, help="tokens per completion (the most)")
    p.add_argument("--batch-size", type=int, default=32, help="completions per RL phase")
    p.add_argument("--base-lr", type=float, default=1e-4, help="learning rate of every RL run")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch threads of each process")
    p.add_argument("--jobs", type=int, default=2, help="processes (reward models, RL runs) at a time")
    p.add_argument("--report", action="store_true",
                   help="train nothing more: write the table, figure and page from the runs so far")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_train"]:  # one RL run's process
        return train_against_proxy(json.loads(argv[1]))
    try:
        opts = build_parser().parse_args(argv)
        sizes = sorted(set(_csv(opts.rm_pairs, int, "rm_pairs")))
        methods = _csv(opts.algos, str, "algos")
        for m in methods:
            if m not in METHODS:
                raise ConfigError(f"algos: unknown method {m!r}; choose from {', '.join(METHODS)}")
        if min(sizes) < 10:
            raise ConfigError(f"rm_pairs: each size must be >= 10; got {min(sizes)}")
        for name in ("total_phases", "test_pairs", "eval_prompts", "eval_per_prompt", "rm_epochs", "gen_len", "batch_size", "jobs"):
            if getattr(opts, name) < 1:
                raise ConfigError(f"{name}: must be >= 1; got {getattr(opts, name)}")
        if opts.bon_max < 2 or opts.bon_max & (opts.bon_max - 1):
            raise ConfigError(f"bon_max: must be a power of 2 >= 2; got {opts.bon_max}")
        out = Path(opts.out)
        plan = {k: v for k, v in vars(opts).items() if k not in ("threads", "jobs", "report")} | {"rm_pairs": sizes, "algos": methods}
        plan_path = out / PLAN_FILE
        if plan_path.is_file():
            if json.loads(plan_path.read_text()) != plan:
                raise ConfigError(f"out: {out} holds a different study ({plan_path}); choose a new --out")
        elif out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ConfigError(f"out: {out} exists and is not a study folder; choose a new one (nothing was touched)")
        out.mkdir(parents=True, exist_ok=True)
        plan_path.write_text(json.dumps(plan, indent=1))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:
        return int(e.code or 0)
    try:
        start = time.perf_counter()
        run_study(opts, sizes, methods, out)
        if not opts.report:
            _timed(out, "study_wall_s", time.perf_counter() - start)
    except (RuntimeError, OSError, ValueError) as e:
        print(f"error: {str(e).splitlines()[0]}; run the same command again to continue", file=sys.stderr)
        return 1
    print((out / "table.md").read_text())
    print(f"wrote {out}/index.html")
    return 0


def _timed(out: Path, key: str, seconds: float) -> None:
    path = out / "times.json"
    times = json.loads(path.read_text()) if path.is_file() else {}
    times[key] = times.get(key, 0.0) + seconds
    path.write_text(json.dumps(times, indent=1))


def run_study(opts, sizes: list[int], methods: list[str], out: Path) -> None:
    import random

    import torch
    from tqdm.auto import tqdm

    from rlhf_scratch.prompts import load_prompts
    from rlhf_scratch.reward.preferences import make_preference_pairs, write_pairs

    if opts.threads:
        torch.set_num_threads(opts.threads)
    say = tqdm.write
    # 1. prompts: held-out evaluation prompts, the rest for pairs and RL
    train_file, eval_file = out / "prompts_train.txt", out / "prompts_eval.txt"
    if not eval_file.is_file():
        prompts = load_prompts("rt", seed=opts.seed)
        random.Random(opts.seed).shuffle(prompts)
        prompts = [p for p in prompts if "\n" not in p]
        eval_file.write_text("\n".join(prompts[: opts.eval_prompts]) + "\n")
        train_file.write_text("\n".join(prompts[opts.eval_prompts :]) + "\n")
    eval_prompts = eval_file.read_text().splitlines()
    # 2. gold pairs, once
    pairs_file = out / "pairs.jsonl"
    if not pairs_file.is_file():
        start = time.perf_counter()
        say(f"gold pairs: {max(sizes)} + {opts.test_pairs} test")
        from rlhf_scratch.loading import load_lm

        rows = make_preference_pairs(load_lm("tiny").eval(), train_file.read_text().splitlines(),
                                     max(sizes) + opts.test_pairs, gold="tiny", label="bt", seed=opts.seed,
                                     gen_len=opts.gen_len)
        write_pairs(rows, pairs_file)
        _timed(out, "pairs_s", time.perf_counter() - start)
    rows = [json.loads(x) for x in pairs_file.read_text().splitlines()]
    test_rows = rows[max(sizes):]
    # 3. one proxy per size
    proxies: dict[int, Path] = {n: out / f"rm-{n}" for n in sizes}
    commands = {}
    for n, rm_dir in proxies.items():
        subset = out / f"pairs-{n}.jsonl"
        if rm_dir.joinpath("status.json").is_file() and json.loads(rm_dir.joinpath("status.json").read_text())["status"] == "finished":
            continue
        if not subset.is_file():
            write_pairs(rows[:n], subset)
        cmd = [sys.executable, "-m", "rlhf_scratch.reward_model", "--quiet", "--threads", str(opts.threads)]
        cmd += (["--resume", str(rm_dir)] if rm_dir.joinpath("status.json").is_file() else
                ["--pairs", str(subset), "--run-dir", str(rm_dir), "--epochs", str(opts.rm_epochs), "--seed", str(opts.seed)])
        commands[f"rm-{n}"] = cmd
    run_processes(commands, opts.jobs, out, "proxy reward models")
    accuracy = proxy_accuracies(proxies, test_rows, out)
    # 4a. best-of-n
    if "bon" in methods and not (out / "bon.json").is_file() and not opts.report:
        start = time.perf_counter()
        (out / "bon.json").write_text(json.dumps(best_of_n_study(proxies, eval_prompts, opts), indent=1))
        _timed(out, "bon_s", time.perf_counter() - start)
    # 4b. RL runs, each in its own process, `--jobs` at a time
    algos = [m for m in methods if m != "bon"]
    commands = {}
    for algo, n in [] if opts.report else [(a, n) for a in algos for n in sizes]:
        run_dir = out / "runs" / f"{algo}-rm{n}"
        if (run_dir / "status.json").is_file() and json.loads((run_dir / "status.json").read_text())["status"] == "finished":
            continue
        spec = {"algo": algo, "proxy": str(proxies[n]), "run_dir": str(run_dir), "train_prompts": str(train_file),
                "eval_prompts": str(eval_file), "per_prompt": opts.eval_per_prompt,
                "train_fields": {"total_phases": opts.total_phases, "batch_size": opts.batch_size,
                                 "gen_len": opts.gen_len, "top_k": 0, "base_lr": opts.base_lr, "warmup_steps": 2, "threads": opts.threads, "seed": opts.seed,
                                 "save_every": 5, "table_every": 10**6, "plot_every": 10**6}}
        commands[f"{algo}-rm{n}"] = [sys.executable, "-m", "rlhf_scratch.overoptimization", "_train", json.dumps(spec)]
    run_processes(commands, opts.jobs, out, "RL runs")
    # 5. fits, table, figure, page
    curves = collect_curves(out, sizes, methods)
    table = make_table(curves, accuracy, sizes, methods)
    times = json.loads((out / "times.json").read_text()) if (out / "times.json").is_file() else {}
    (out / "table.json").write_text(json.dumps({"rows": table, "proxy_accuracy": accuracy, "times_s": times,
                                                "curves": curves}, indent=1))
    (out / "table.md").write_text(markdown_table(table) + "\n")
    figure = plot_study(curves, sizes, methods, out)
    write_html(out, table, figure, sizes, methods, times)


def proxy_accuracies(proxies: dict[int, Path], test_rows: list[dict], out: Path) -> dict[str, float]:
    """Each proxy's accuracy against gold on the common test pairs (cached in OUT/proxy_accuracy.json)."""
    path = out / "proxy_accuracy.json"
    if path.is_file():
        return json.loads(path.read_text())
    from rlhf_scratch.reward.model import gold_accuracy, load_reward_model_run, pair_texts

    chosen, rejected = pair_texts(test_rows)
    acc = {}
    for n, rm_dir in proxies.items():
        model = load_reward_model_run(rm_dir)
        acc[str(n)] = gold_accuracy(model.score_texts(chosen), model.score_texts(rejected), test_rows)
    path.write_text(json.dumps(acc, indent=1))
    return acc


def best_of_n_study(proxies: dict[int, Path], eval_prompts: list[str], opts) -> dict:
    """bon_max samples of each held-out prompt from the reference; per proxy size and n = 1, 2, 4 …
    the exact expected gold and proxy of the proxy's pick, averaged over prompts."""
    import torch

    from rlhf_scratch.generation import decode_completions, generate, tokenize_prompts
    from rlhf_scratch.loading import load_lm
    from rlhf_scratch.reward.model import load_reward_model_run
    from rlhf_scratch.reward.preferences import gold_scores

    torch.manual_seed(opts.seed)
    lm = load_lm("tiny").eval()
    texts: list[list[str]] = []
    from tqdm.auto import tqdm

    for prompt in tqdm(eval_prompts, desc="best-of-n samples", file=sys.stderr):
        ids, mask = tokenize_prompts(lm, [prompt] * opts.bon_max, True)
        comp, cmask = generate(lm, ids, mask, opts.gen_len, 1.0, 0, True)
        texts.append([prompt + c for c in decode_completions(lm, comp, cmask, True)])
    flat = [t for group in texts for t in group]
    gold = gold_scores(flat).view(len(eval_prompts), opts.bon_max).tolist()
    ns = [2**k for k in range(int(math.log2(opts.bon_max)) + 1)]
    result = {"n": ns, "kl": [kl_bon(n) for n in ns], "d": [math.sqrt(kl_bon(n)) for n in ns], "sizes": {}}
    for size, rm_dir in proxies.items():
        proxy = load_reward_model_run(rm_dir).score_texts(flat).view(len(eval_prompts), opts.bon_max).tolist()
        result["sizes"][str(size)] = {
            "gold": [sum(best_of_n_expectation(p, g, n) for p, g in zip(proxy, gold)) / len(gold) for n in ns],
            "proxy": [sum(best_of_n_expectation(p, p, n) for p in proxy) / len(proxy) for n in ns],
        }
    return result


def reference_means(out: Path, size: int) -> tuple[float, float] | None:
    """Mean gold and proxy of the reference policy on the held-out prompts, from best-of-n's
    samples (bon_max per prompt: a far tighter estimate than one phase's evaluation), or None."""
    path = out / "bon.json"
    if not path.is_file():
        return None
    s = json.loads(path.read_text())["sizes"][str(size)]
    return s["gold"][0], s["proxy"][0]


def collect_curves(out: Path, sizes: list[int], methods: list[str]) -> dict:
    """{method: {size: {"d": [...], "gold": [...], "proxy": [...]}}}, gold and proxy as gains over
    the reference policy (its best-of-n samples' means when there are any, else phase 0)."""
    curves: dict = {}
    for method in methods:
        curves[method] = {}
        for n in sizes:
            if method == "bon":
                if not (out / "bon.json").is_file():
                    continue
                bon = json.loads((out / "bon.json").read_text())
                s = bon["sizes"][str(n)]
                curves[method][str(n)] = {"d": bon["d"], "gold": [g - s["gold"][0] for g in s["gold"]],
                                          "proxy": [p - s["proxy"][0] for p in s["proxy"]], "n": bon["n"]}
                continue
            run_dir = out / "runs" / f"{method}-rm{n}"
            if not (run_dir / START_FILE).is_file():  # not started, or not past its first phase (--report)
                continue
            start = json.loads((run_dir / START_FILE).read_text())
            phases = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
            points = [start] + phases
            gold0, proxy0 = reference_means(out, n) or (start["study/gold"], start["study/proxy"])
            curves[method][str(n)] = {
                "d": [m["study/d"] for m in points],
                "gold": [m["study/gold"] - gold0 for m in points],
                "proxy": [m["study/proxy"] - proxy0 for m in points],
                "phase": [0] + [m["phase"] for m in phases],
            }
    return curves


def make_table(curves: dict, accuracy: dict, sizes: list[int], methods: list[str]) -> list[dict]:
    rows = []
    for method in methods:
        for n in sizes:
            c = curves[method].get(str(n))
            if c is None:
                continue
            fit = fit_gao(c["d"], c["gold"], "bon" if method == "bon" else "rl") or {}
            peak = max(range(len(c["gold"])), key=lambda i: c["gold"][i])
            rows.append({"method": method, "rm_pairs": n, "rm_gold_accuracy": accuracy.get(str(n)),
                         **{k: fit.get(k) for k in ("alpha", "beta", "d_star", "R_star")},
                         "peak_gold": c["gold"][peak], "peak_d": c["d"][peak],
                         "final_gold": c["gold"][-1], "final_proxy": c["proxy"][-1], "final_d": c["d"][-1],
                         "points": len(c["d"])})
    return rows


def _f(x, digits: int = 3) -> str:
    return "—" if x is None else ("∞" if x == math.inf else f"{x:.{digits}f}")


def markdown_table(rows: list[dict]) -> str:
    head = ("| method | RM pairs | RM acc. vs gold | α | β | d* (fit) | R* (fit) | peak gold Δ (at d) "
            "| final gold Δ | final proxy Δ | final d |\n|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [f"| {LABEL[r['method']]} | {r['rm_pairs']} | {_f(r['rm_gold_accuracy'])} | {_f(r['alpha'])} | "
             f"{_f(r['beta'])} | {_f(r['d_star'], 2)} | {_f(r['R_star'])} | {_f(r['peak_gold'])} ({_f(r['peak_d'], 2)}) | "
             f"{_f(r['final_gold'])} | {_f(r['final_proxy'])} | {_f(r['final_d'], 2)} |" for r in rows]
    return "\n".join([head, *lines])


def plot_study(curves: dict, sizes: list[int], methods: list[str], out: Path) -> Path:
    """One panel per method: gold gain (solid) and proxy gain (dashed) against d = √KL, one colour
    per proxy size, the fitted Gao form dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods), 3.8), squeeze=False)
    colours = plt.cm.viridis(np.linspace(0.1, 0.85, len(sizes)))
    for ax, method in zip(axes[0], methods):
        for colour, n in zip(colours, sizes):
            c = curves[method].get(str(n))
            if c is None:
                continue
            ax.plot(c["d"], c["gold"], "-o", ms=2.5, color=colour, label=f"gold, RM {n} pairs")
            ax.plot(c["d"], c["proxy"], "--", color=colour, alpha=0.8, label=f"proxy, RM {n} pairs")
            fit = fit_gao(c["d"], c["gold"], "bon" if method == "bon" else "rl")
            if fit:
                d = np.linspace(1e-3, max(c["d"]) or 1e-3, 60)
                r = d * (fit["alpha"] - fit["beta"] * (d if method == "bon" else np.log(d)))
                ax.plot(d, r, ":", color=colour, lw=1)
        ax.axhline(0, color="grey", lw=0.6)
        ax.set(title=LABEL[method], xlabel="d = √KL(π‖π_ref)  (nats^½)", ylabel="reward gain over π_ref")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path = out / "overoptimization.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_html(out: Path, table: list[dict], figure: Path, sizes: list[int], methods: list[str], times: dict) -> Path:
    """index.html: the figure, the table, wall times, and samples at each RL run's gold peak and end."""
    img = base64.b64encode(figure.read_bytes()).decode()
    parts = ["<!doctype html><meta charset='utf-8'><title>Reward-model over-optimisation</title>",
             "<style>body{font-family:sans-serif;max-width:1400px;margin:auto}td,th{border:1px solid #ccc;"
             "padding:3px 6px}table{border-collapse:collapse}pre{white-space:pre-wrap}</style>",
             "<h1>Reward-model over-optimisation (Gao et al. 2022), tiny preset</h1>",
             "<p>Gold = the tiny classifier's log-odds; proxies = Bradley–Terry reward models trained on "
             "gold-labelled pairs. Gains are over the reference policy, d = √KL.</p>",
             f"<img src='data:image/png;base64,{img}' style='max-width:100%'>",
             "<h2>Table</h2><table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in
             ["method", "RM pairs", "RM acc. vs gold", "α", "β", "d*", "R*", "peak gold Δ", "peak d",
              "final gold Δ", "final proxy Δ", "final d"]) + "</tr>"]
    for r in table:
        cells = [LABEL[r["method"]], r["rm_pairs"], _f(r["rm_gold_accuracy"]), _f(r["alpha"]), _f(r["beta"]),
                 _f(r["d_star"], 2), _f(r["R_star"]), _f(r["peak_gold"]), _f(r["peak_d"], 2), _f(r["final_gold"]),
                 _f(r["final_proxy"]), _f(r["final_d"], 2)]
        parts.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    parts.append("</table><h2>Wall time (s)</h2><pre>" + html.escape(json.dumps(times, indent=1)) + "</pre>")
    parts.append("<h2>Samples at the gold peak and at the end</h2>")
    for method in methods:
        if method == "bon":
            continue
        for n in sizes:
            path = out / "runs" / f"{method}-rm{n}" / SAMPLES_FILE
            if not path.is_file():
                continue
            evals = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
            peak = max(evals, key=lambda e: e["study/gold"])
            parts.append(f"<h3>{LABEL[method]}, RM {n} pairs</h3>")
            for title, e in (("gold peak", peak), ("end", evals[-1])):
                parts.append(f"<p><b>{title}</b>: phase {e['phase']}, gold {e['study/gold']:.3f}, "
                             f"proxy {e['study/proxy']:.3f}, d {e['study/d']:.2f}</p><pre>"
                             + "\n".join(html.escape(f"[gold {s['gold']:+.2f} proxy {s['proxy']:+.2f}] "
                                                     f"{s['prompt']}|{s['completion']}") for s in e["samples"])
                             + "</pre>")
    path = out / "index.html"
    path.write_text("\n".join(parts))
    return path


if __name__ == "__main__":
    sys.exit(main())
