"""Reward-model over-optimisation (Gao, Schulman & Hilton 2022), reproduced at tiny scale.

    python -m rlhf_scratch.overoptimization --out study/                       # the defaults below
    python -m rlhf_scratch.overoptimization --out study/ --seeds 1,2,3         # the same, three seeds (or more later)
    python -m rlhf_scratch.overoptimization --rm-pairs 250,1000 --algos ppo,bon --total-phases 30 --out s/
    python -m rlhf_scratch.overoptimization --quick --seeds 1,2 --out s/       # tiny: tests and notebooks (`QUICK`)

Seeds (`--seeds`, `--seed N` the same as `--seeds N`): the first seeds the prompts' split, the
gold pairs and the proxies, which every seed shares (each method meets the same proxies, so the
methods are compared seed by seed, paired); best-of-n's sampling and every RL run happen once per
seed, each its own unit (`bon-s2`, `rloo-s2-rm250`). The same command with more seeds continues a
study: only the new seeds' units run.

1. Gold-labelled pairs, once: `preferences.make_preference_pairs` on training prompts (the gold
   is the tiny classifier's log-odds, labels drawn by Bradley–Terry), max(--rm-pairs) of them
   plus --test-pairs more that no proxy trains on. Smaller sizes are prefixes of the big file.
2. One proxy reward model per size (`python -m rlhf_scratch.reward_model`, own process); its
   accuracy against gold on the common test pairs goes in the table.
3. Best-of-n from the reference on the held-out prompts, per seed: n = 1, 2, 4 … --bon-max, the
   sample the proxy ranks first, scored by gold. KL_bon = log n − (n−1)/n; the expectation over the
   n-subsets of the --bon-max samples is exact (the i-th best of N is the best of a random n-subset
   with probability C(i−1, n−1)/C(N, n)).
4. Every RL algorithm of the registry against every proxy, per seed, each run its own process
   (resumable, a run folder each: `overoptimization_run`). After every --eval-every-th phase (and the
   last) the policy is evaluated on the same held-out prompts (`HeldOutEvaluation`, a `loop.PhaseHook`):
   gold and proxy reward, gold's standard error (prompts held fixed), and KL(π‖π_ref) = the
   full-vocabulary per-token KL summed over the completion, averaged over samples — one estimator for
   every algorithm; d = √KL. Plus the KL-penalty sweep (--kl-sweep): PPO against the smallest proxy
   at each β given (`ppo-s1-b0.3`), β = 0 among them.
5. Gao et al.'s functional forms, fitted by least squares per (method, proxy size) to the gold
   reward's gain over the reference, R = gold − gold(π_ref):

       R_bon(d) = d(α − β d)        peak at d* = α / 2β,          R* = α² / 4β
       R_RL(d)  = d(α − β log d)    peak at d* = exp(α/β − 1),   R* = β d*

   through the points of every seed.
6. The verdict, per proxy size: which method's gold gain is highest at matched KL — at d_match,
   the largest d that every run against that proxy reached, each run's gold read off its curve
   there (linearly between its two points around d_match) — named only when the seeds resolve it
   (`stats.verdict`: paired over seeds). Read at one d, not as the highest point up to it: the
   highest of 30 noisy RL points sits above the curve by the noise's reach, best-of-n's 9 exact
   ones do not, and that bias would favour RL.
7. The KL penalty against early stopping (Gao et al. 2022, §3.6: the penalty acted like early
   stopping): each β > 0 run's final (d, gold) against the β = 0 run of the same seed at that d —
   its checkpoint where it first reached that KL (`kl_sweep_rows`), the gap paired over seeds.

Writes OUT/table.md and table.json (a row per method and proxy size: n seeds, and the gold at
matched d, the gold peak, the final gold, proxy and d, each the mean ± its 95 % interval over the
seeds), overoptimization.png (gold solid with its band over seeds, proxy dashed, against d, one
colour per proxy size, one panel per method) and index.html (the verdicts first, then the figure,
the table, the KL-penalty sweep with its figure kl_sweep.png, and samples at each run's gold peak and
at its end, of the first seed); OUT/times.json
has what each part and process took. Run the same command again to continue an interrupted study
(`studies.runner`).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated

import tyro

from rlhf_scratch.config import ConfigError, registry
from rlhf_scratch.pages.html import esc, figure, new_figure, save_figure, table
from rlhf_scratch.studies.overoptimization_run import SAMPLES_FILE, START_FILE, rl_command
from rlhf_scratch.studies.runner import (
    INTERVAL_NOTE,
    Job,
    Ledger,
    Unit,
    check_at_least,
    check_choices,
    csv_list,
    draw_band,
    interval_cell,
    markdown_table,
    open_study,
    parse_study,
    plan_units,
    run_jobs,
    seed_list,
    study_main,
    verdict_html,
    write_report,
)
from rlhf_scratch.studies.stats import finite_or_none, mean_interval, paired_difference, verdict

PROG = "python -m rlhf_scratch.overoptimization"
BON = "bon"  # best-of-n: a method of this study, not an RL algorithm
PLAN_FILE, TIMES_FILE = "study.json", "times.json"


def methods() -> list[str]:
    """Every method the study knows: the registry's algorithms, then best-of-n."""
    return [*registry.names(), BON]


def label(method: str) -> str:
    return "best-of-n" if method == BON else registry.get(method).label


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


# --- the study -----------------------------------------------------------------------------------


@dataclass
class StudyArgs:
    """The study: what it trains and measures, and how many processes at a time."""

    out: Annotated[str, tyro.conf.arg(help_behavior_hint="(required)")] = ""
    """The study folder; the same command again continues the study there."""
    rm_pairs: str = "1000,4000"
    """Comma-separated preference-pair counts: one proxy reward model each. (250 pairs gave a proxy at
    chance against gold, 0.47 ± 0.07: too few to say anything about over-optimising *it*.)"""
    algos: str = field(default_factory=lambda: ",".join(methods()))
    """Comma-separated methods: the registry's algorithms and `bon` (best-of-n)."""
    total_phases: int = 20
    """Phases per RL run."""
    test_pairs: int = 400
    """Gold pairs no proxy trains on (each proxy's accuracy: ± 0.05 at 400)."""
    eval_prompts: int = 128
    """Held-out prompts, evaluated every --eval-every phases."""
    eval_per_prompt: int = 16
    """Samples per held-out prompt at each evaluation. 128 × 16 = 2,048: gold's within-prompt s.d. is
    about 1.2 log-odds, so a point's 95 % interval is about 1.96 · 1.2 / √2048 = ± 0.05."""
    eval_every: int = 4
    """Evaluate after every this many phases (and after the last); phase 0 is the reference."""
    bon_max: int = 64
    """Largest n of best-of-n (a power of 2)."""
    rm_epochs: int = 3
    """Epochs of each proxy reward model."""
    gen_len: int = 16
    """Tokens per completion (the most)."""
    batch_size: int = 32
    """Completions per RL phase."""
    base_lr: float = 2e-4
    """Learning rate of every RL run."""
    kl_sweep: str = "0,0.03,0.3"
    """PPO's KL coefficients β (`--beta`) of the KL-penalty sweep, each a PPO run per seed against the
    smallest proxy (`ppo-s1-b0.3`); β = 0 is the early-stopping curve the others are read against
    (the grid's PPO run, at PPO's default β, joins them). `none`: no sweep."""
    seeds: str = "1"
    """Comma-separated seeds: best-of-n and every RL run once per seed (the table's mean ± 95 % interval
    and n); the first also seeds the prompts' split, the pairs and the proxies, which all share.
    `--seed N` is `--seeds N`. The same command with more seeds (the saved ones first) adds their runs."""
    threads: int = 1
    """Torch threads of each process."""
    jobs: int = 2
    """Processes (reward models, RL runs) at a time."""
    report: bool = False
    """Train nothing more: write the table, figure and page from the runs so far."""
    quick: bool = False
    """Tiny settings, for tests and notebooks (`QUICK`: one 10-pair proxy, RLOO and best-of-n, 2 phases,
    seconds a run); flags given beside it still win. The default settings are the ones that decide."""

    def sizes(self) -> list[int]:
        return sorted(set(csv_list(self.rm_pairs, int, "rm_pairs")))

    def methods(self) -> list[str]:
        return csv_list(self.algos, str, "algos")

    def seed_list(self) -> list[int]:
        return seed_list(self.seeds)

    def sweep_betas(self) -> list[float]:
        """--kl-sweep's β values, [] for `none`."""
        if self.kl_sweep.strip().lower() == "none":
            return []
        return csv_list(self.kl_sweep, float, "kl_sweep")

    @property
    def data_seed(self) -> int:
        """The first seed: the prompts' split, the gold pairs and the proxies, shared by every seed."""
        return self.seed_list()[0]

    def validate(self) -> StudyArgs:
        """Every field checked; one line naming the first bad one."""
        if not self.out:
            raise ConfigError("out: required (the study folder)")
        sizes = self.sizes()
        check_choices(self.methods(), methods(), "algos")
        self.seed_list()
        if min(sizes) < 10:
            raise ConfigError(f"rm_pairs: each size must be >= 10; got {min(sizes)}")
        check_at_least(self, ("total_phases", "test_pairs", "eval_prompts", "eval_per_prompt", "eval_every", "rm_epochs",
                              "gen_len", "batch_size", "jobs"))
        betas = self.sweep_betas()
        if any(not math.isfinite(b) or b < 0 for b in betas) or len(set(betas)) != len(betas):
            raise ConfigError(f"kl_sweep: each β once, finite and >= 0; got {self.kl_sweep}")
        if betas and 0.0 not in betas:
            raise ConfigError(f"kl_sweep: must hold 0 (the early-stopping curve the others are read against); "
                              f"got {self.kl_sweep}")
        if self.bon_max < 2 or self.bon_max & (self.bon_max - 1):
            raise ConfigError(f"bon_max: must be a power of 2 >= 2; got {self.bon_max}")
        from rlhf_scratch.config import make_args  # no torch: each RL run's own rules, before a folder is made

        for unit in self.rl_units():
            try:
                make_args("tiny", algo=unit.method, task="sentiment", **self.rl_fields(unit))
            except ConfigError as e:
                raise ConfigError(f"run {unit.name}: {e}") from None
        return self

    def plan(self) -> dict:
        """What makes the study (OUT/study.json): everything but the folder and how it is run."""
        skip = ("out", "threads", "jobs", "report", "quick")
        return {**{k: v for k, v in asdict(self).items() if k not in skip}, "rm_pairs": self.sizes(),
                "algos": self.methods(), "seeds": self.seed_list(), "kl_sweep": self.sweep_betas()}

    def rl_units(self) -> list[Unit]:
        """An RL run per (algorithm, proxy size, seed): the setting tagged `rm` (`rloo-s1-rm250`); then
        the KL-penalty sweep, a PPO run per (β, seed) against the smallest proxy, tagged `b` (`ppo-s1-b0.3`)."""
        grid = plan_units([m for m in self.methods() if m != BON], self.seed_list(), [("rm", n) for n in self.sizes()])
        return grid + plan_units([SWEEP_ALGO], self.seed_list(), [("b", b) for b in self.sweep_betas()])

    def rl_fields(self, unit: Unit) -> dict:
        """The train fields of an RL unit's run (`rl_spec`; a sweep run's β is its setting)."""
        beta = {"beta": unit.value} if unit.setting[0] == "b" else {}
        return {"total_phases": self.total_phases, "batch_size": self.batch_size, "gen_len": self.gen_len, "top_k": 0,
                "base_lr": self.base_lr, "warmup_steps": 2, "threads": self.threads, "seed": unit.seed, "save_every": 5,
                "table_every": 10**6, "plot_every": 10**6, **beta}


SWEEP_ALGO = "ppo"  # the KL-penalty sweep's algorithm: the blog's, whose β is a penalty in the reward

QUICK = {"rm_pairs": "10", "algos": "rloo,bon", "total_phases": 2, "test_pairs": 4, "eval_prompts": 2,
         "eval_per_prompt": 2, "eval_every": 1, "bon_max": 4, "rm_epochs": 1, "gen_len": 4, "batch_size": 8,
         "base_lr": 1e-4, "kl_sweep": "0,1"}
"""`--quick`: StudyArgs' fields for a study of seconds (its verdict, on 2 prompts, says nothing)."""


def check_context(args: StudyArgs) -> None:
    """Every review opening the study may use, plus --gen-len tokens, must fit the tiny model's context:
    one line naming the first that does not, before the study folder is made (a half-made folder
    would hold the bad plan and refuse the corrected command)."""
    from rlhf_scratch.models.loading import load_lm
    from rlhf_scratch.rollout.prompts import PromptError, check_prompt_lengths, load_prompts

    lm = load_lm("tiny")
    n_ctx = lm.cfg.n_ctx
    if args.gen_len >= n_ctx:
        raise ConfigError(f"gen_len: {args.gen_len} leaves no room for a prompt in the model's context n_ctx={n_ctx}")
    prompts = [p for p in load_prompts("rt", seed=args.data_seed) if "\n" not in p]
    try:
        check_prompt_lengths(prompts, lambda p: lm.to_tokens(p, truncate=False).shape[1], n_ctx, args.gen_len, "rt")
    except PromptError as e:  # bad input: exit 2, nothing written
        raise ConfigError(f"gen_len: {e}") from None


def run_study(args: StudyArgs) -> None:
    """Everything not done yet, then the table, the figure and the page (`--report`: no training);
    the wall time of the whole call goes to times.json (study_wall_s)."""
    if not args.report:
        check_context(args)
    out = open_study(Path(args.out), args.plan(), PLAN_FILE, "study")
    ledger = Ledger(out / TIMES_FILE)
    if args.report:
        page = build_study(args, out, ledger)
    else:
        with ledger.timing("study_wall"):
            page = build_study(args, out, ledger)
    data = json.loads((out / "table.json").read_text())
    print("\n".join(data["verdicts"] + data["kl_sweep"]["verdicts"]) + "\n")
    print((out / "table.md").read_text())
    print(f"wrote {page}")


def build_study(args: StudyArgs, out: Path, ledger: Ledger) -> Path:
    """Steps 1–5 of the module docstring, each skipped where its result is already in OUT; the page."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    train_file, eval_file = split_prompts(out, args)
    pairs = gold_pairs(out, args, train_file, ledger)
    proxies: dict[int, Path] = {n: out / f"rm-{n}" for n in args.sizes()}
    run_jobs([Job(f"rm-{n}", partial(proxy_command, pairs, n, out, args), rm_dir) for n, rm_dir in proxies.items()],
             ledger, parallel=args.jobs, desc="proxy reward models", unit="model")
    accuracy = proxy_accuracies(proxies, pairs[max(args.sizes()):], out)
    if not args.report:
        for seed in args.seed_list() if BON in args.methods() else []:
            if not bon_file(out, seed).is_file():
                with ledger.timing(Unit(BON, seed).name):
                    bon = best_of_n_study(proxies, eval_file.read_text().splitlines(), args, seed)
                    bon_file(out, seed).write_text(json.dumps(bon, indent=1))
        run_jobs([Job(u.name, partial(rl_command, rl_spec(u, args, out, proxies, train_file, eval_file)),
                      out / "runs" / u.name, args.total_phases, asdict(u)) for u in args.rl_units()],
                 ledger, parallel=args.jobs, desc="RL runs", unit="phase")
    return write_study_report(args, out, accuracy, ledger.seconds())


def rl_spec(unit: Unit, args: StudyArgs, out: Path, proxies: dict[int, Path], train_file: Path, eval_file: Path) -> dict:
    """One RL run, as its process reads it (`overoptimization_run.train_against_proxy`): the tiny
    preset against the proxy (a sweep run: the smallest, at its β), whole-vocabulary sampling (so its
    KL is the KL of what is sampled)."""
    tag, value = unit.setting
    proxy = proxies[value] if tag == "rm" else proxies[min(proxies)]
    return {"algo": unit.method, "proxy": str(proxy), "run_dir": str(out / "runs" / unit.name),
            "train_prompts": str(train_file), "eval_prompts": str(eval_file), "per_prompt": args.eval_per_prompt,
            "eval_every": args.eval_every, "train_fields": args.rl_fields(unit)}


def write_study_report(args: StudyArgs, out: Path, accuracy: dict[str, float], times: dict[str, float]) -> Path:
    """table.md, table.json and index.html from what is in OUT: the verdicts, the curves, their fits,
    the samples."""
    sizes, methods, seeds = args.sizes(), args.methods(), args.seed_list()
    curves = collect_curves(out, sizes, methods, seeds)
    rows = make_table(curves, accuracy, sizes, methods)
    verdicts = study_verdicts(rows, sizes)
    sweep = sweep_curves(out, args)
    sweep_rows = kl_sweep_rows(sweep)
    sweep_verdicts = kl_sweep_verdicts(sweep_rows, min(sizes))
    precision = evaluation_precision(curves, sweep)
    precision_note = "" if not precision else (
        f" Each RL point: {args.eval_prompts} held-out prompts × {args.eval_per_prompt} samples; its gold's 95 % "
        f"sampling interval (prompts held fixed) is at most ± {precision['max']:.3f} (median ± {precision['median']:.3f}, "
        f"{precision['points']} points).")
    header, cells = table_cells(rows)
    body = ["<h1>Reward-model over-optimisation (Gao et al. 2022), tiny preset</h1>", verdict_html(verdicts),
            "<p>Gold = the tiny classifier's log-odds; proxies = Bradley–Terry reward models trained on "
            f"gold-labelled pairs. Gains are over the reference policy, d = √KL. Seeds: {', '.join(map(str, seeds))} "
            "(the first made the pairs and the proxies). Matched d: the largest d every run against that proxy "
            f"reached; each run's gold there, read off its curve.{esc(precision_note)} {esc(INTERVAL_NOTE)}</p>",
            figure(plot_study(curves, sizes, methods, out)), "<h2>Table</h2>", table(cells, header=header),
            *sweep_section(sweep, sweep_rows, sweep_verdicts, min(sizes), out),
            f"<h2>Wall time (s)</h2><pre>{esc(json.dumps(times, indent=1))}</pre>",
            f"<h2>Samples at the gold peak and at the end (seed {args.data_seed})</h2>",
            *samples_section(out, [u for u in args.rl_units() if u.seed == args.data_seed and u.setting[0] == "rm"])]
    return write_report(out, title="Reward-model over-optimisation",
                        table_md=markdown_table(header, cells) + f"\n\n{INTERVAL_NOTE}{precision_note}",
                        data={"verdicts": verdicts, "rows": rows, "proxy_accuracy": accuracy, "times_s": times,
                              "curves": curves, "evaluation_precision": precision,
                              "kl_sweep": {"proxy": min(sizes), "verdicts": sweep_verdicts, "rows": sweep_rows,
                                           "curves": sweep}}, body=body)


def split_prompts(out: Path, args: StudyArgs) -> tuple[Path, Path]:
    """OUT/prompts_eval.txt (the first --eval-prompts of the shuffled review openings: held out) and
    OUT/prompts_train.txt (the rest: pairs and RL), made once."""
    import random

    from rlhf_scratch.rollout.prompts import load_prompts

    train_file, eval_file = out / "prompts_train.txt", out / "prompts_eval.txt"
    if not eval_file.is_file():
        prompts = load_prompts("rt", seed=args.data_seed)
        random.Random(args.data_seed).shuffle(prompts)
        prompts = [p for p in prompts if "\n" not in p]
        eval_file.write_text("\n".join(prompts[: args.eval_prompts]) + "\n")
        train_file.write_text("\n".join(prompts[args.eval_prompts :]) + "\n")
    return train_file, eval_file


def gold_pairs(out: Path, args: StudyArgs, train_file: Path, ledger: Ledger) -> list[dict]:
    """OUT/pairs.jsonl, made once: max(--rm-pairs) training pairs, then --test-pairs test pairs."""
    from rlhf_scratch.reward.preferences import make_preference_pairs, write_pairs

    pairs_file, n = out / "pairs.jsonl", max(args.sizes())
    if not pairs_file.is_file():
        from tqdm.auto import tqdm

        from rlhf_scratch.models.loading import load_lm

        tqdm.write(f"gold pairs: {n} + {args.test_pairs} test")
        with ledger.timing("pairs"):
            rows = make_preference_pairs(load_lm("tiny").eval(), train_file.read_text().splitlines(),
                                         n + args.test_pairs, gold="tiny", label="bt", seed=args.data_seed,
                                         gen_len=args.gen_len)
            write_pairs(rows, pairs_file)
    return [json.loads(x) for x in pairs_file.read_text().splitlines()]


def proxy_command(rows: list[dict], n: int, out: Path, args: StudyArgs) -> list[str]:
    """The process of the proxy trained on the first `n` pairs (OUT/pairs-n.jsonl): a new reward-model
    run in OUT/rm-n, or `--resume` of one that has begun."""
    from rlhf_scratch.engine.runs import STATUS_FILE
    from rlhf_scratch.reward.preferences import write_pairs

    rm_dir, subset = out / f"rm-{n}", out / f"pairs-{n}.jsonl"
    if not subset.is_file():
        write_pairs(rows[:n], subset)
    cmd = [sys.executable, "-m", "rlhf_scratch.reward_model", "--quiet", "--threads", str(args.threads)]
    if (rm_dir / STATUS_FILE).is_file():
        return [*cmd, "--resume", str(rm_dir)]
    return [*cmd, "--pairs", str(subset), "--run-dir", str(rm_dir), "--epochs", str(args.rm_epochs),
            "--seed", str(args.data_seed)]


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


def bon_file(out: Path, seed: int) -> Path:
    """Best-of-n's result for one seed: OUT/bon-s<seed>.json."""
    return out / f"{Unit(BON, seed).name}.json"


def best_of_n_study(proxies: dict[int, Path], eval_prompts: list[str], args: StudyArgs, seed: int) -> dict:
    """bon_max samples of each held-out prompt from the reference (drawn with `seed`); per proxy size
    and n = 1, 2, 4 … the exact expected gold and proxy of the proxy's pick, averaged over prompts."""
    import torch
    from tqdm.auto import tqdm

    from rlhf_scratch.models.loading import load_lm
    from rlhf_scratch.reward.model import load_reward_model_run
    from rlhf_scratch.reward.preferences import gold_scores
    from rlhf_scratch.rollout.generation import decode_completions, generate, tokenize_prompts

    torch.manual_seed(seed)
    lm = load_lm("tiny").eval()
    texts: list[list[str]] = []
    for prompt in tqdm(eval_prompts, desc="best-of-n samples", file=sys.stderr):
        ids, mask = tokenize_prompts(lm, [prompt] * args.bon_max, True)
        comp, cmask = generate(lm, ids, mask, args.gen_len, 1.0, 0, True)
        texts.append([prompt + c for c in decode_completions(lm, comp, cmask, True)])
    flat = [t for group in texts for t in group]
    gold = gold_scores(flat).view(len(eval_prompts), args.bon_max).tolist()
    ns = [2**k for k in range(int(math.log2(args.bon_max)) + 1)]
    result = {"n": ns, "kl": [kl_bon(n) for n in ns], "d": [math.sqrt(kl_bon(n)) for n in ns], "sizes": {}}
    for size, rm_dir in proxies.items():
        proxy = load_reward_model_run(rm_dir).score_texts(flat).view(len(eval_prompts), args.bon_max).tolist()
        result["sizes"][str(size)] = {
            "gold": [sum(best_of_n_expectation(p, g, n) for p, g in zip(proxy, gold)) / len(gold) for n in ns],
            "proxy": [sum(best_of_n_expectation(p, p, n) for p in proxy) / len(proxy) for n in ns],
        }
    return result


# --- the curves, the table, the figure, the samples ----------------------------------------------


def reference_means(out: Path, size: int, seeds: list[int]) -> tuple[float, float] | None:
    """Mean gold and proxy of the reference policy on the held-out prompts, from best-of-n's
    samples of every seed that has them (bon_max per prompt and seed: a far tighter estimate than
    one phase's evaluation), or None."""
    files = [bon_file(out, seed) for seed in seeds if bon_file(out, seed).is_file()]
    if not files:
        return None
    firsts = [json.loads(f.read_text())["sizes"][str(size)] for f in files]
    return statistics.fmean(s["gold"][0] for s in firsts), statistics.fmean(s["proxy"][0] for s in firsts)


def collect_curves(out: Path, sizes: list[int], methods: list[str], seeds: list[int]) -> dict:
    """{method: {size: {seed: {"d": [...], "gold": [...], "proxy": [...]}}}} of every run there is,
    gold and proxy as gains over the reference policy (its best-of-n samples' means when there are
    any, pooled over the seeds: the same policy; else each run's phase 0)."""
    curves: dict = {}
    for method in methods:
        curves[method] = {}
        for n in sizes:
            reference = reference_means(out, n, seeds)
            runs = {}
            for seed in seeds:
                if method == BON:
                    if not bon_file(out, seed).is_file():
                        continue
                    bon = json.loads(bon_file(out, seed).read_text())
                    s = bon["sizes"][str(n)]
                    gold0, proxy0 = reference
                    runs[str(seed)] = {"d": bon["d"], "gold": [g - gold0 for g in s["gold"]],
                                       "proxy": [p - proxy0 for p in s["proxy"]], "n": bon["n"]}
                    continue
                curve = run_curve(out / "runs" / Unit(method, seed, ("rm", n)).name, reference)
                if curve:
                    runs[str(seed)] = curve
            if runs:
                curves[method][str(n)] = runs
    return curves


def run_curve(run_dir: Path, reference: tuple[float, float] | None) -> dict | None:
    """One RL run's evaluated points, phase 0 (the reference) first: d, gold and proxy as gains over
    `reference` (else over its own phase 0), gold's standard error, the phase; None if not started."""
    if not (run_dir / START_FILE).is_file():  # not started (--report)
        return None
    start = json.loads((run_dir / START_FILE).read_text())
    phases = [m for m in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "study/d" in m]
    points = [start] + phases
    gold0, proxy0 = reference or (start["study/gold"], start["study/proxy"])
    return {"d": [m["study/d"] for m in points], "gold": [m["study/gold"] - gold0 for m in points],
            "proxy": [m["study/proxy"] - proxy0 for m in points],
            "gold_se": [m.get("study/gold_se", math.nan) for m in points], "phase": [0] + [m["phase"] for m in phases]}


def sweep_curves(out: Path, args: StudyArgs) -> dict[str, dict[str, dict]]:
    """{β: {seed: curve}} of the KL-penalty sweep's runs there are, against the smallest proxy; the
    grid's PPO run against that proxy joins at the β its config.json holds (PPO's default)."""
    n, seeds = min(args.sizes()), args.seed_list()
    reference = reference_means(out, n, seeds)
    sweep: dict[str, dict[str, dict]] = {}
    planned = args.rl_units()
    units = [u for u in planned if u.setting[0] == "b"]
    if SWEEP_ALGO in args.methods() and units:
        units += [u for u in planned if u.method == SWEEP_ALGO and u.setting == ("rm", n)]
    for unit in units:
        run_dir = out / "runs" / unit.name
        curve = run_curve(run_dir, reference)
        if curve:
            beta = unit.value if unit.setting[0] == "b" else json.loads((run_dir / "config.json").read_text())["beta"]
            sweep.setdefault(f"{beta:g}", {})[str(unit.seed)] = curve
    return dict(sorted(sweep.items(), key=lambda kv: float(kv[0])))


def kl_sweep_rows(sweep: dict[str, dict[str, dict]]) -> list[dict]:
    """A row per β > 0 of the sweep: each seed's final d and gold, and the β = 0 run's gold where that
    run of the same seed first reached the same d (its early-stopped checkpoint there, `at_d`); the
    gap = final gold − that, paired over the seeds where β = 0 reached the d (`stats.paired_difference`)."""
    zero = sweep.get("0", {})
    rows = []
    for beta, runs in sweep.items():
        if float(beta) == 0:
            continue
        final_d = {seed: c["d"][-1] for seed, c in runs.items()}
        final_gold = {seed: c["gold"][-1] for seed, c in runs.items()}
        stopped = {seed: at_d(zero[seed]["d"], zero[seed]["gold"], final_d[seed]) for seed in runs if seed in zero}
        paired = [seed for seed, g in stopped.items() if g is not None]
        row = {"beta": float(beta), "seeds": [int(x) for x in runs], "n": len(runs),
               "final_d": {**mean_interval(list(final_d.values())).as_json(), "values": list(final_d.values())},
               "final_gold": {**mean_interval(list(final_gold.values())).as_json(), "values": list(final_gold.values())},
               "paired_seeds": [int(x) for x in paired], "beyond_beta0": sorted(int(x) for x in set(runs) - set(paired))}
        if paired:
            diff = paired_difference([final_gold[x] for x in paired], [stopped[x] for x in paired])
            row["stopped_gold"] = [stopped[x] for x in paired]
            row["gap"] = {"mean": diff.mean, "low": finite_or_none(diff.low), "high": finite_or_none(diff.high),
                          "half_width": finite_or_none(diff.half_width), "p": finite_or_none(diff.p), "n": len(paired),
                          "resolved": diff.resolved}
        rows.append(row)
    return rows


def kl_sweep_verdicts(rows: list[dict], n: int) -> list[str]:
    """A sentence per β > 0: is its final point on the early-stopping curve (β = 0 at the same KL)?"""
    out = []
    for r in rows:
        head = (f"PPO with β = {r['beta']:g} against the {n}-pair proxy ends at d = {r['final_d']['mean']:.2f}, "
                f"gold {r['final_gold']['mean']:+.3f}")
        gap = r.get("gap")
        if not gap:
            out.append(f"{head}: further than the β = 0 run ever went, so no early-stopped checkpoint to hold it against.")
            continue
        spread = (f"{gap['mean']:+.3f} (95 % interval {gap['low']:+.3f} to {gap['high']:+.3f}, n = {gap['n']} seeds, "
                  f"p = {gap['p']:.2g})" if gap["half_width"] is not None else f"{gap['mean']:+.3f} (n = 1 seed)")
        if gap["resolved"]:
            side = "above" if gap["mean"] > 0 else "below"
            what = "better" if gap["mean"] > 0 else "worse"
            out.append(f"{head}: {side} the β = 0 run's checkpoint at the same KL by {spread}; the penalty did "
                       f"{what} than stopping early.")
        else:
            out.append(f"{head}: not distinguishable from the β = 0 run stopped at the same KL, gap {spread}: "
                       "not resolved, whether the penalty did better or worse than stopping early.")
    return out


def plot_kl_sweep(sweep: dict[str, dict[str, dict]], rows: list[dict], out: Path) -> Path:
    """Gold gain against d: the β = 0 run's checkpoints (its band over seeds) and each β > 0 run's
    final point (mean over seeds, with its 95 % intervals in d and in gold)."""
    fig, axes = new_figure(1, 1, figsize=(5.5, 4.2), squeeze=False)
    ax = axes[0][0]
    zero = list(sweep.get("0", {}).values())
    if zero:
        draw_band(ax, [c["d"] for c in zero], [c["gold"] for c in zero], color="black", marker="o", ms=3,
                  label=f"β = 0, its checkpoints ({len(zero)} seeds)")
        draw_band(ax, [c["d"] for c in zero], [c["proxy"] for c in zero], band=False, color="black", linestyle="--",
                  alpha=0.5, label="β = 0, proxy")
    for r in rows:
        d, g = r["final_d"], r["final_gold"]
        ax.errorbar([d["mean"]], [g["mean"]], xerr=[[d["half_width"] or 0]], yerr=[[g["half_width"] or 0]],
                    fmt="s", capsize=3, label=f"β = {r['beta']:g}, final ({r['n']} seeds)")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set(title="KL penalty or early stopping (PPO)", xlabel="d = √KL(π‖π_ref)  (nats^½)", ylabel="gold gain over π_ref")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save_figure(fig, out / "kl_sweep.png")


def sweep_section(sweep: dict, rows: list[dict], verdicts: list[str], n: int, out: Path) -> list[str]:
    """The page's KL-penalty section: the verdicts, the figure, the table (a sweep of β = 0 alone: its
    curve, further in KL, and no table)."""
    if not sweep:
        return []
    header = ["β", "n", "final d", "final gold Δ", "β = 0 at that d", "gap (paired)"]
    cells = [[f"{r['beta']:g}", str(r["n"]), interval_cell(r["final_d"]["values"], "{:.2f}"),
              interval_cell(r["final_gold"]["values"]), interval_cell(r.get("stopped_gold", [])),
              (f"{r['gap']['mean']:+.3f}" + (f" ± {r['gap']['half_width']:.3f}, p = {r['gap']['p']:.2g}"
                                             if r["gap"]["half_width"] is not None else "")) if r.get("gap") else "—"]
             for r in rows]
    return [f"<h2>KL penalty or early stopping: PPO against the {n}-pair proxy</h2>", verdict_html(verdicts),
            figure(plot_kl_sweep(sweep, rows, out)), *([table(cells, header=header)] if rows else [])]


def evaluation_precision(curves: dict, sweep: dict) -> dict | None:
    """Over every evaluated RL point after phase 0: the largest and the median 95 % half-width of its
    gold (1.96 · its standard error, prompts held fixed: `overoptimization_run.gold_standard_error`)."""
    runs = [c for by_size in curves.values() for runs in by_size.values() for c in runs.values() if "gold_se" in c]
    runs += [c for runs in sweep.values() for c in runs.values()]
    widths = [1.96 * se for c in runs for se in c["gold_se"][1:] if math.isfinite(se)]
    if not widths:
        return None
    return {"max": max(widths), "median": statistics.median(widths), "points": len(widths)}


def at_d(ds: list[float], ys: list[float], d: float) -> float | None:
    """y where a curve first reaches d: linear between the two points around it (the first point if
    it starts there); None if it never does."""
    for i, x in enumerate(ds):
        if x >= d:
            if i == 0:
                return ys[0]
            return ys[i - 1] + (ys[i] - ys[i - 1]) * (d - ds[i - 1]) / (x - ds[i - 1])
    return None


def matched_d(curves: dict, size: int) -> float | None:
    """The largest d that every run against the `size`-pair proxy reached (each method, each seed)."""
    reach = [max(c["d"]) for runs in curves.values() for c in runs.get(str(size), {}).values()]
    return min(reach) if reach else None


PER_SEED = ("gold_at_matched_d", "gold_at_rl_matched_d", "peak_gold", "peak_d", "final_gold", "final_proxy", "final_d")
"""What a row measures once per seed (its mean, interval and n in the table; a row where a seed has
no value, best-of-n beyond its largest n, leaves that measure out)."""


def run_numbers(c: dict, d_match: float, d_rl: float | None) -> dict[str, float | None]:
    """One run's numbers: gold at the matched d and at the RL-matched d, its highest gold and where,
    and where it ended."""
    peak = max(range(len(c["gold"])), key=lambda i: c["gold"][i])
    return {"gold_at_matched_d": at_d(c["d"], c["gold"], d_match),
            "gold_at_rl_matched_d": None if d_rl is None else at_d(c["d"], c["gold"], d_rl),
            "peak_gold": c["gold"][peak], "peak_d": c["d"][peak],
            "final_gold": c["gold"][-1], "final_proxy": c["proxy"][-1], "final_d": c["d"][-1]}


def rl_matched_d(curves: dict, size: int) -> float | None:
    """The largest d that every RL run against the `size`-pair proxy reached: best-of-n stops at
    --bon-max, and the RL algorithms are compared again where they all went further."""
    return matched_d({m: runs for m, runs in curves.items() if m != BON}, size)


def make_table(curves: dict, accuracy: dict, sizes: list[int], methods: list[str]) -> list[dict]:
    """A row per (method, proxy size) with runs: its seeds, each of `PER_SEED` as its mean, 95 %
    interval and per-seed values, and the Gao fit through the points of every seed."""
    d_match = {n: matched_d(curves, n) for n in sizes}
    d_rl = {n: rl_matched_d(curves, n) for n in sizes}
    rows = []
    for method in methods:
        for n in sizes:
            runs = curves[method].get(str(n))
            if not runs:
                continue
            ds = [d for c in runs.values() for d in c["d"]]
            fit = fit_gao(ds, [g for c in runs.values() for g in c["gold"]], "bon" if method == BON else "rl") or {}
            why_not = unsupported_fit(fit, ds)
            if why_not:
                fit = {}
            per_seed = [run_numbers(c, d_match[n], d_rl[n]) for c in runs.values()]
            row = {"method": method, "rm_pairs": n, "rm_gold_accuracy": accuracy.get(str(n)),
                   "seeds": [int(seed) for seed in runs], "n": len(runs), "matched_d": d_match[n],
                   "rl_matched_d": d_rl[n]}
            for key in PER_SEED:
                values = [numbers[key] for numbers in per_seed]
                row[key] = None if None in values else {**mean_interval(values).as_json(), "values": values}
            rows.append({**row, **{k: fit.get(k) for k in ("alpha", "beta", "d_star", "R_star")},
                         "fit": why_not or "fitted", "points": len(ds)})
    return rows


def study_verdicts(rows: list[dict], sizes: list[int]) -> list[str]:
    """The page's first lines, one per proxy size: which method's gold gain is highest at the matched
    d, named only when the seeds resolve it (`stats.verdict`, paired over seeds)."""
    sentences = []
    for n in sizes:
        mine = [r for r in rows if r["rm_pairs"] == n]
        if not mine:
            continue
        what = f"gold gain at matched KL (d = {mine[0]['matched_d']:.2f}) against the {n}-pair proxy"
        groups = {label(r["method"]): dict(zip(r["seeds"], r["gold_at_matched_d"]["values"])) for r in mine}
        sentences.append(verdict(groups, what).sentence)
        rl = [r for r in mine if r["method"] != BON and r["gold_at_rl_matched_d"]]
        if len(rl) > 1 and rl[0]["rl_matched_d"] > mine[0]["matched_d"] + 1e-9:
            what = (f"gold gain among the RL algorithms at matched KL (d = {rl[0]['rl_matched_d']:.2f}, the largest every "
                    f"RL run reached) against the {n}-pair proxy")
            groups = {label(r["method"]): dict(zip(r["seeds"], r["gold_at_rl_matched_d"]["values"])) for r in rl}
            sentences.append(verdict(groups, what).sentence)
    return sentences


MIN_FIT_POINTS = 6
"""Fewest (d, gold) points a two-parameter Gao fit is reported from."""
PEAK_REACH = 1.5
"""A fitted peak is reported only within this factor of the largest d measured: beyond it the curve
has not turned, and the fit is extrapolating (4 points within ±1 once gave R* = 162)."""


def unsupported_fit(fit: dict, ds: list[float]) -> str | None:
    """Why a Gao fit must not be reported, or None: too few points, or a peak outside the data."""
    points = sum(d > 1e-6 for d in ds)
    if not fit or points < MIN_FIT_POINTS:
        return f"not enough points ({points} < {MIN_FIT_POINTS})"
    if math.isfinite(fit["d_star"]) and fit["d_star"] > PEAK_REACH * max(ds):
        return f"peak outside the data (d* {fit['d_star']:.2f} > {PEAK_REACH} × largest d {max(ds):.2f})"
    return None


def _f(x, digits: int = 3) -> str:
    return "—" if x is None else ("∞" if x == math.inf else f"{x:.{digits}f}")


def table_cells(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the table, formatted: the same in table.md and on the page. A measured cell is
    the mean over the row's n seeds ± its 95 % interval (`runner.interval_cell`)."""
    def cell(r: dict, key: str, digits: int = 3) -> str:
        return interval_cell(r[key]["values"], f"{{:.{digits}f}}")

    def rl_cell(r: dict) -> str:
        return "—" if not r.get("gold_at_rl_matched_d") else f"{cell(r, 'gold_at_rl_matched_d')} (d {r['rl_matched_d']:.2f})"

    header = ["method", "RM pairs", "RM acc. vs gold", "n", "gold Δ at matched d", "gold Δ at RL-matched d",
              "peak gold Δ (at d)", "final gold Δ", "final proxy Δ", "final d", "α", "β", "d* (fit)", "R* (fit)", "fit"]
    return header, [[label(r["method"]), str(r["rm_pairs"]), _f(r["rm_gold_accuracy"]), str(r["n"]),
                     f"{cell(r, 'gold_at_matched_d')} (d {r['matched_d']:.2f})", rl_cell(r),
                     f"{cell(r, 'peak_gold')} ({_f(r['peak_d']['mean'], 2)})", cell(r, "final_gold"),
                     cell(r, "final_proxy"), cell(r, "final_d", 2), _f(r["alpha"]), _f(r["beta"]), _f(r["d_star"], 2),
                     _f(r["R_star"]), r["fit"]] for r in rows]


def plot_study(curves: dict, sizes: list[int], methods: list[str], out: Path) -> Path:
    """One panel per method: gold gain (solid, with its 95 % band over seeds) and proxy gain (dashed)
    against d = √KL, one colour per proxy size, the fitted Gao form dotted. Over seeds each point is
    the mean of the seeds' d and gain at that phase (at that n for best-of-n); one seed draws its line."""
    import numpy as np
    from matplotlib import colormaps

    fig, axes = new_figure(1, len(methods), figsize=(4.2 * len(methods), 3.8), squeeze=False)
    colours = colormaps["viridis"](np.linspace(0.1, 0.85, len(sizes)))
    for ax, method in zip(axes[0], methods):
        for colour, n in zip(colours, sizes):
            runs = list(curves[method].get(str(n), {}).values())
            if not runs:
                continue
            seeds = f", {len(runs)} seeds" if len(runs) > 1 else ""
            ds = [c["d"] for c in runs]
            draw_band(ax, ds, [c["gold"] for c in runs], color=colour, marker="o", ms=2.5,
                      label=f"gold, RM {n} pairs{seeds}")
            draw_band(ax, ds, [c["proxy"] for c in runs], band=False, color=colour, linestyle="--", alpha=0.8,
                      label=f"proxy, RM {n} pairs")
            all_d = [d for c in runs for d in c["d"]]
            fit = fit_gao(all_d, [g for c in runs for g in c["gold"]], "bon" if method == BON else "rl")
            if fit and not unsupported_fit(fit, all_d):
                d = np.linspace(1e-3, max(all_d) or 1e-3, 60)
                r = d * (fit["alpha"] - fit["beta"] * (d if method == BON else np.log(d)))
                ax.plot(d, r, ":", color=colour, lw=1)
        ax.axhline(0, color="grey", lw=0.6)
        ax.set(title=label(method), xlabel="d = √KL(π‖π_ref)  (nats^½)", ylabel="reward gain over π_ref")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return save_figure(fig, out / "overoptimization.png")


def samples_section(out: Path, units: list[Unit]) -> list[str]:
    """The page's samples of each RL run: at its gold peak and at its end."""
    parts = []
    for unit in units:
        path = out / "runs" / unit.name / SAMPLES_FILE
        if not path.is_file():
            continue
        evals = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        peak = max(evals, key=lambda e: e["study/gold"])
        parts.append(f"<h3>{esc(label(unit.method))}, RM {unit.value} pairs, seed {unit.seed}</h3>")
        for title, e in (("gold peak", peak), ("end", evals[-1])):
            lines = "\n".join(f"[gold {s['gold']:+.2f} proxy {s['proxy']:+.2f}] {s['prompt']}|{s['completion']}"
                              for s in e["samples"])
            parts.append(f"<p><b>{title}</b>: phase {e['phase']}, gold {e['study/gold']:.3f}, proxy "
                         f"{e['study/proxy']:.3f}, d {e['study/d']:.2f}</p><pre>{esc(lines)}</pre>")
    return parts


def study_args(argv: list[str]) -> StudyArgs:
    """The study's args from its command line, validated: over `QUICK` with --quick (the flags given
    still win), `--seed N` read as `--seeds N`. Bad input is a ConfigError of one line."""
    default = StudyArgs(**QUICK) if "--quick" in argv else StudyArgs()
    return parse_study(StudyArgs, argv, default=default, prog=PROG, aliases={"--seed": "--seeds"},
                       description=__doc__.split("\n\n")[0])


def main(argv: list[str] | None = None) -> int:
    """`python -m rlhf_scratch.overoptimization --out DIR [--flag value …]`."""
    argv = sys.argv[1:] if argv is None else argv
    return study_main(lambda: study_args(argv), run_study)


if __name__ == "__main__":
    sys.exit(main())
