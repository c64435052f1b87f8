"""The over-optimisation study's plan: its args (what it trains and measures), its methods (the
registry's algorithms and best-of-n), its units (an RL run per algorithm, proxy size and seed, and
the KL-penalty sweep's PPO runs) and the files it names. No torch: a bad flag is answered at once.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from rlhf_scratch.config import ConfigError, registry
from rlhf_scratch.studies.runner import Unit, check_at_least, check_choices, csv_list, plan_units, seed_list

PROG = "python -m rlhf_scratch.overoptimization"
BON = "bon"  # best-of-n: a method of this study, not an RL algorithm
PLAN_FILE, TIMES_FILE = "study.json", "times.json"


def methods() -> list[str]:
    """Every method the study knows: the registry's algorithms, then best-of-n."""
    return [*registry.names(), BON]


def label(method: str) -> str:
    return "best-of-n" if method == BON else registry.get(method).label


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
    kl_sweep: Annotated[str, tyro.conf.arg(name="betas", aliases=("--kl-sweep",))] = "0,0.03,0.3"
    """--betas (or its old spelling --kl-sweep): PPO's KL coefficients β (`--beta`) of the KL-penalty sweep, each a PPO run per seed against the
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


def bon_file(out: Path, seed: int) -> Path:
    """Best-of-n's result for one seed: OUT/bon-s<seed>.json."""
    return out / f"{Unit(BON, seed).name}.json"
