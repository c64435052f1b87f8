"""The reward-hacking pilot (issue 46): does RL against a flawed proxy raise the proxy while gold falls?

    python -m rlhf_scratch.studies.hacking.pilot --out hack/ --raters length,token,repetition --seeds 1
    python -m rlhf_scratch.studies.hacking.pilot --out hack/ --raters token --seeds 1,2,3   # more seeds later

Each step is skipped where its result is already in OUT, so the same command continues (more seeds,
more raters). Every process is niced and runs on --threads torch threads, one at a time.

1. Prompts: the review openings (`rt`, one line each) in a seeded order; the first --eval-prompts are
   held out for evaluation (OUT/eval.txt), the rest write the pairs and train the policy (OUT/train.txt).
2. Pairs per rater: `python -m rlhf_scratch.preferences --rater R` (reward/preferences.py has each
   rater's formula), --rm-pairs + --test-pairs of them from the reference, the same samples for
   every rater (one seed); the last --test-pairs are the proxy's test pairs.
3. A proxy per rater: `python -m rlhf_scratch.reward_model` on the first --rm-pairs pairs.
4. Its accuracy against gold on its test pairs (gold = g, or g' for `repetition`; ties skipped),
   with Wilson's 95 % interval (`formulas.wilson_interval`): OUT/accuracy.json.
5. RL against each proxy, per seed: the over-optimisation study's RL process
   (studies/overoptimization/run.py) with its held-out hook, which logs gold, proxy, KL and the
   flaw measures (study/length, study/word_count, study/repeated_3grams) every --eval-every phases.
6. OUT/pilot-<algo>.json (and the curves in pilot-<algo>.png): per run its curve and gold's fall (peak − final, `formulas.gold_fall`); per rater
   the fall paired over seeds (`stats.paired_difference(peaks, finals)`: mean and 95 % interval).
   For `repetition`, gold at each point is g − c · rep₃ = study/gold − c · study/repeated_3grams
   (the mean of a difference is the difference of the means).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import tyro

from rlhf_scratch.config import ConfigError
from rlhf_scratch.config.cli import parse_dataclass
from rlhf_scratch.config.command import command
from rlhf_scratch.reward.preferences import RATER_DEFAULTS, RATER_USES, RATERS, check_rater_params
from rlhf_scratch.studies.hacking.formulas import gold_fall, wilson_interval
from rlhf_scratch.studies.runner import check_choices, csv_list, seed_list

PROG = "python -m rlhf_scratch.studies.hacking.pilot"
FLAW_MEASURE = {"honest": "study/length", "length": "study/length", "token": "study/word_count",
                "repetition": "study/repeated_3grams"}
"""The measure of each rater's flaw that the held-out hook logs."""


@dataclass
class HackSettings:
    """What the pilot and the study (`studies.hacking.study`) share: the raters, their proxies and the RL runs."""

    raters: str = "length,token,repetition"
    """Comma-separated raters (reward/preferences.py): honest, length, token, repetition."""
    seeds: str = "1"
    """Comma-separated RL seeds (the pairs and proxies use the first)."""
    beta: float = 0.0
    """The KL coefficient β of every RL run (0: the policy may move as far as it likes)."""
    total_phases: int = 30
    """Phases per RL run."""
    eval_every: int = 3
    """Evaluate gold, proxy and the flaw every this many phases (and after the last)."""
    eval_prompts: int = 64
    """Held-out prompts."""
    eval_per_prompt: int = 8
    """Samples per held-out prompt at each evaluation."""
    rm_pairs: int = 1000
    """Training pairs of each proxy."""
    test_pairs: int = 400
    """Test pairs of each proxy (its accuracy against gold)."""
    rm_epochs: int = 2
    """Epochs of each proxy."""
    gen_len: int = 16
    """Tokens per completion (the most)."""
    batch_size: int = 32
    """Completions per RL phase."""
    base_lr: float = 2e-4
    """Learning rate of every RL run."""
    threads: int = 1
    """Torch threads of each process."""
    device: str = "auto"
    """Each RL process's device, as `train --device` (auto: cuda when there is one); gold is scored on the CPU."""
    rater_margin: float = RATER_DEFAULTS["margin"]
    """length: δ (`python -m rlhf_scratch.preferences --rater-margin`)."""
    rater_token: str = RATER_DEFAULTS["token"]
    """token: the raters' word."""
    rater_bonus: float = RATER_DEFAULTS["bonus"]
    """token: b per occurrence."""
    rater_penalty: float = RATER_DEFAULTS["penalty"]
    """repetition: c."""

    def rater_params(self) -> dict:
        return {"margin": self.rater_margin, "token": self.rater_token, "bonus": self.rater_bonus,
                "penalty": self.rater_penalty}

    def rater_list(self) -> list[str]:
        raters = csv_list(self.raters, str, "raters")
        check_choices(raters, RATERS, "raters")
        return raters

    def validate(self) -> HackSettings:
        """The cheap checks, one ConfigError line each (`check_context` and `check_runs` load the model)."""
        self.rater_list()
        seed_list(self.seeds)
        for name in ("total_phases", "eval_every", "eval_prompts", "eval_per_prompt", "rm_pairs", "test_pairs",
                     "rm_epochs", "gen_len", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1; got {getattr(self, name)}")
        if self.beta < 0:
            raise ConfigError(f"beta: must be >= 0; got {self.beta}")
        check_rater_params(self.rater_params())  # as each rater's `preferences` process will check them
        return self

    def check_context(self, data: Path) -> None:
        """--gen-len against the tiny model's context and the prompts the pairs and runs will use
        (data's train.txt and eval.txt once written, else the review openings of the first seed):
        refused here, before any folder is made, not by the pairs' process once it is."""
        from rlhf_scratch.models.loading import load_lm
        from rlhf_scratch.rollout.prompts import PromptError, check_context, prompts_from_txt
        from rlhf_scratch.studies.overoptimization.study import one_line_openings

        files = [data / "train.txt", data / "eval.txt"]
        sources = ([(prompts_from_txt(f), str(f)) for f in files] if all(f.is_file() for f in files)
                   else [(one_line_openings(seed_list(self.seeds)[0]), "rt")])
        lm = load_lm("tiny")
        try:
            for prompts, source in sources:
                check_context(lm, prompts, self.gen_len, source)
        except PromptError as e:
            raise ConfigError(str(e)) from None

    def check_runs(self, runs: list[tuple[str, str, int]]) -> None:
        """Each RL run, (name, algorithm, seed), by the run's own rules (`config.make_args`), before a folder is made."""
        from rlhf_scratch.config import make_args

        for name, algo, seed in runs:
            try:
                make_args("tiny", algo=algo, task="sentiment", **rl_fields(self, seed))
            except ConfigError as e:
                raise ConfigError(f"run {name}: {e}") from None


@dataclass
class PilotArgs(HackSettings):
    """The reward-hacking pilot: flawed raters -> proxies -> RL against each, gold measured every few phases."""

    out: str = tyro.MISSING
    """The pilot's folder; the same command again continues it."""
    algo: str = "ppo"
    """The RL algorithm."""

    def validate(self) -> PilotArgs:
        from rlhf_scratch.config import registry

        super().validate()
        check_choices([self.algo], registry.names(), "algo")
        if Path(self.out).exists() and not Path(self.out).is_dir():
            raise ConfigError(f"out: {self.out} is a file, not a folder")
        self.check_runs([(f"{self.algo}-{r}-s{s}", self.algo, s) for r in self.rater_list() for s in seed_list(self.seeds)])
        self.check_context(Path(self.out))
        return self


def parse(argv: list[str]) -> PilotArgs:
    return parse_dataclass(PilotArgs, argv, default=None, prog=PROG, description=PilotArgs.__doc__).validate()


class StepFailed(RuntimeError):
    """A step's process failed: one line, its name and the process's last line (exit 1, no traceback)."""


def step(cmd: list[str], name: str) -> None:
    """One niced process; a failure is a StepFailed with its last line."""
    done = subprocess.run(["nice", "-n", "10", *cmd], capture_output=True, text=True)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise StepFailed(f"{name} failed: {last}")


def split_prompts(out: Path, args: HackSettings) -> tuple[Path, Path]:
    from rlhf_scratch.studies.overoptimization.study import one_line_openings

    train, held = out / "train.txt", out / "eval.txt"
    if not held.is_file():
        prompts = one_line_openings(seed_list(args.seeds)[0])
        held.write_text("\n".join(prompts[: args.eval_prompts]) + "\n")
        train.write_text("\n".join(prompts[args.eval_prompts :]) + "\n")
    return train, held


def make_proxy(out: Path, args: HackSettings, rater: str, train: Path) -> tuple[Path, list[dict]]:
    """The rater's pairs, its proxy's run folder and its test rows (steps 2 and 3)."""
    data_seed = str(seed_list(args.seeds)[0])
    pairs, subset, rm_dir = out / f"pairs-{rater}.jsonl", out / f"pairs-{rater}-train.jsonl", out / f"rm-{rater}"
    if not pairs.is_file():
        step([sys.executable, "-m", "rlhf_scratch.preferences", "--out", str(pairs), "--num-pairs",
              str(args.rm_pairs + args.test_pairs), "--prompts", str(train), "--rater", rater, "--gen-len",
              str(args.gen_len), "--seed", data_seed, "--threads", str(args.threads),
              *[f"--rater-{k}={args.rater_params()[k]}" for k in RATER_USES[rater]]], f"pairs-{rater}")
    rows = [json.loads(x) for x in pairs.read_text().splitlines()]
    if not subset.is_file():
        subset.write_text("".join(json.dumps(r) + "\n" for r in rows[: args.rm_pairs]))
    if not (rm_dir / "reward_model.pt").is_file():
        step([sys.executable, "-m", "rlhf_scratch.reward_model", "--quiet", "--threads", str(args.threads),
              "--pairs", str(subset), "--run-dir", str(rm_dir), "--epochs", str(args.rm_epochs), "--seed", data_seed],
             f"rm-{rater}")
    return rm_dir, rows[args.rm_pairs :]


def proxy_accuracy(rm_dir: Path, test_rows: list[dict]) -> dict:
    """How often the proxy orders a test pair as gold does (ties in gold skipped), with Wilson's interval."""
    from rlhf_scratch.reward.model import load_reward_model_run, pair_texts

    model = load_reward_model_run(rm_dir)
    chosen, rejected = pair_texts(test_rows)
    gap = (model.score_texts(chosen) - model.score_texts(rejected)).tolist()
    judged = [(r, g) for r, g in zip(gap, test_rows) if g["score_chosen"] != g["score_rejected"]]
    right = sum((r > 0) == (g["score_chosen"] > g["score_rejected"]) for r, g in judged)
    p, low, high = wilson_interval(right, len(judged))
    return {"accuracy": p, "low": low, "high": high, "n": len(judged)}


def rl_fields(args: HackSettings, seed: int) -> dict:
    """The train fields of every RL run (`rl_spec`)."""
    return {"total_phases": args.total_phases, "batch_size": args.batch_size, "gen_len": args.gen_len, "top_k": 0,
              "base_lr": args.base_lr, "warmup_steps": 2, "threads": args.threads, "device": args.device, "seed": seed, "save_every": 5,
              "table_every": 10**6, "plot_every": 10**6, "beta": args.beta}


def rl_spec(args: HackSettings, algo: str, seed: int, run_dir: Path, rm_dir: Path, train: Path, held: Path) -> dict:
    """One RL run against a proxy: the over-optimisation study's RL process's spec (`run.train_against_proxy`)."""
    return {"run_dir": str(run_dir), "algo": algo, "proxy": str(rm_dir), "train_prompts": str(train),
            "eval_prompts": str(held), "per_prompt": args.eval_per_prompt, "eval_every": args.eval_every,
            "word": args.rater_token, "train_fields": rl_fields(args, seed)}


def rl_run(out: Path, args: PilotArgs, rater: str, seed: int, rm_dir: Path, train: Path, held: Path) -> Path:
    """Step 5: one RL process against the rater's proxy (resumable; skipped when finished)."""
    from rlhf_scratch.studies.overoptimization.run import rl_command

    run_dir = out / f"{args.algo}-{rater}-s{seed}"
    spec = rl_spec(args, args.algo, seed, run_dir, rm_dir, train, held)
    status = run_dir / "status.json"
    if not (status.is_file() and json.loads(status.read_text()).get("status") == "finished"):
        step(rl_command(spec), run_dir.name)
    return run_dir


def curve(run_dir: Path, rater: str, penalty: float) -> list[dict]:
    """Phase 0 (the reference) and every evaluated phase: phase, d, gold, proxy and the flaw measures;
    for `repetition`, gold = study/gold − c · study/repeated_3grams."""
    rows = [{"phase": 0, **json.loads((run_dir / "study_start.json").read_text())}]
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        if "study/gold" in m:
            rows.append({"phase": m.get("phase"), **{k: v for k, v in m.items() if k.startswith("study/")}})
    penalty = penalty if rater == "repetition" else 0.0
    return [{"phase": r["phase"], "d": r["study/d"], "gold": r["study/gold"] - penalty * r["study/repeated_3grams"],
             "proxy": r["study/proxy"], "length": r["study/length"], "word_count": r["study/word_count"],
             "repeated_3grams": r["study/repeated_3grams"]} for r in rows]


def held_out_peaks(by_seed: dict[int, list[dict]]) -> dict[int, float]:
    """Each seed's gold at the phase where the *other* seeds' mean gold peaks: a peak not picked by
    this seed's own noise (the highest of a run's own noisy points sits above its curve, so its own
    peak − final is > 0 even where the curve is flat). Needs ≥ 2 seeds evaluated at the same phases."""
    peaks = {}
    for s, c in by_seed.items():
        others = [by_seed[o] for o in by_seed if o != s]
        mean = [sum(o[i]["gold"] for o in others) / len(others) for i in range(len(c))]
        peaks[s] = c[max(range(len(c)), key=mean.__getitem__)]["gold"]
    return peaks


def interval(diff) -> dict:
    """A paired difference as JSON: mean, 95 % interval, n, p (None where one seed gives no spread)."""
    from rlhf_scratch.studies.stats import finite_or_none

    return {"mean": diff.mean, "low": finite_or_none(diff.low), "high": finite_or_none(diff.high), "n": diff.a.n,
            "p": finite_or_none(diff.p)}


def summarise(runs: dict[str, dict[int, list[dict]]]) -> dict:
    """Per rater: each seed's peak, final and fall of gold, proxy's rise, and over seeds the fall paired
    (own peak − final, and `held_out_peaks` − final) and the proxy's rise (final − start)."""
    from rlhf_scratch.studies.stats import paired_difference

    summary = {}
    for rater, by_seed in runs.items():
        seeds = sorted(by_seed)
        peaks = [max(p["gold"] for p in by_seed[s]) for s in seeds]
        finals = [by_seed[s][-1]["gold"] for s in seeds]
        fall = paired_difference(peaks, finals)
        held = held_out_peaks(by_seed) if len(seeds) > 1 else {}
        summary[rater] = {
            "seeds": seeds,
            "per_seed": {str(s): {"gold_start": c[0]["gold"], "gold_peak": max(p["gold"] for p in c),
                                  "gold_final": c[-1]["gold"], "fall": gold_fall([p["gold"] for p in c]),
                                  "proxy_start": c[0]["proxy"], "proxy_final": c[-1]["proxy"], "d_final": c[-1]["d"],
                                  "flaw_start": c[0][FLAW_KEY[rater]], "flaw_final": c[-1][FLAW_KEY[rater]]}
                         for s, c in ((s, by_seed[s]) for s in seeds)},
            "fall": interval(fall),
            "fall_held_out_peak": interval(paired_difference([held[s] for s in seeds], finals)) if held else None,
            "proxy_rise": interval(paired_difference([by_seed[s][-1]["proxy"] for s in seeds],
                                                     [by_seed[s][0]["proxy"] for s in seeds])),
        }
    return summary


FLAW_KEY = {r: m.removeprefix("study/") for r, m in FLAW_MEASURE.items()}


def plot_pilot(runs: dict[str, dict[int, list[dict]]], path: Path) -> Path:
    """A row per rater: gold (solid) and proxy (dashed) against phase, and the flaw's measure, one
    colour per seed. Each seed's own line, no band: the hack sets in at a different phase per seed,
    and a mean would draw a slow slide that no seed had."""
    from rlhf_scratch.pages.html import new_figure, save_figure

    fig, axes = new_figure(len(runs), 2, figsize=(9.0, 3.2 * len(runs)), squeeze=False)
    for (left, right), (rater, by_seed) in zip(axes, runs.items()):
        for i, (seed, c) in enumerate(sorted(by_seed.items())):
            phases, colour = [p["phase"] for p in c], f"C{i}"
            left.plot(phases, [p["gold"] for p in c], color=colour, label=f"gold, seed {seed}")
            left.plot(phases, [p["proxy"] for p in c], color=colour, linestyle="--", label=f"proxy, seed {seed}")
            right.plot(phases, [p[FLAW_KEY[rater]] for p in c], color=colour, label=f"seed {seed}")
        gold = "gold g′ = g − c·rep₃" if rater == "repetition" else "gold"
        left.set(title=f"{rater} proxy: {gold} (solid), proxy (dashed)", xlabel="phase", ylabel="mean score")
        right.set(title=f"the flaw: {FLAW_KEY[rater]}", xlabel="phase")
        left.legend(fontsize=7)
    return save_figure(fig, path)


def run(args: PilotArgs) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    train, held = split_prompts(out, args)
    accuracy_file = out / "accuracy.json"
    accuracy = json.loads(accuracy_file.read_text()) if accuracy_file.is_file() else {}
    proxies = {}
    for rater in args.rater_list():
        proxies[rater], test_rows = make_proxy(out, args, rater, train)
        if rater not in accuracy:
            accuracy[rater] = proxy_accuracy(proxies[rater], test_rows)
            accuracy_file.write_text(json.dumps(accuracy, indent=1))
        a = accuracy[rater]
        print(f"proxy {rater}: accuracy against gold {a['accuracy']:.3f} (95 % {a['low']:.3f}-{a['high']:.3f}, "
              f"n {a['n']})", flush=True)
    runs: dict[str, dict[int, list[dict]]] = {}
    for rater in args.rater_list():
        for seed in seed_list(args.seeds):
            run_dir = rl_run(out, args, rater, seed, proxies[rater], train, held)
            runs.setdefault(rater, {})[seed] = curve(run_dir, rater, args.rater_penalty)
            c = runs[rater][seed]
            print(f"{run_dir.name}: gold {c[0]['gold']:+.3f} -> peak {max(p['gold'] for p in c):+.3f} -> "
                  f"{c[-1]['gold']:+.3f}; proxy {c[0]['proxy']:+.3f} -> {c[-1]['proxy']:+.3f}; "
                  f"{FLAW_KEY[rater]} {c[0][FLAW_KEY[rater]]:.3f} -> {c[-1][FLAW_KEY[rater]]:.3f}; "
                  f"d {c[-1]['d']:.2f}", flush=True)
    result = {"args": asdict(args), "accuracy": accuracy,
              "summary": summarise(runs), "curves": {r: {str(s): c for s, c in v.items()} for r, v in runs.items()}}
    plot_pilot(runs, out / f"pilot-{args.algo}.png")
    result_file = out / f"pilot-{args.algo}.json"
    result_file.write_text(json.dumps(result, indent=1))
    print(f"wrote {result_file}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return command(parse, run, argv)


if __name__ == "__main__":
    sys.exit(main())
