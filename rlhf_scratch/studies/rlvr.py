"""Does RL add what the base model lacks? pass@k of the base model and of GRPO-tuned models on held-out
arithmetic, for k = 1 … 256, over seeds, by difficulty.

    rlhf pass-at-k --out studies/passk                       # 3 seeds (about 7 minutes on 2 CPU cores)
    rlhf pass-at-k --out studies/passk --seeds 1,2,3,4,5     # … more seeds later: only the new ones run
    rlhf pass-at-k --out s/ --quick                          # seconds: tests (`QUICK`); its verdict says nothing

**The question.** RL with a verifiable reward raises pass@1. Does it teach the model to solve problems it
could not solve before, or does it concentrate the probability the base model already put on right answers?
The published finding (Yue et al. 2025, "Does Reinforcement Learning Really Incentivize Reasoning Capacity
in LLMs Beyond the Base Model?") is the second: the base model catches up with, then passes, the tuned one
at large k. Here the question is decided on a model small enough to run on a laptop.

**The runs.** Per seed, `python -m rlhf_scratch.train arithmetic` (GRPO, the task's defaults: the shipped
model, the 5,000 train problems, `--total-phases`), its own process (`studies.runner`). **The measure.**
The same 500 held-out problems (`--prompts arithmetic:test`, never trained on), `--samples` n samples of
each at temperature 1 from the whole softmax, from the base model and from each seed's tuned model, each
drawn from a random stream seeded with the seed; c right of n per problem, pass@k = 1 − C(n−c, k)/C(n, k)
(Chen et al.'s unbiased estimator, reward/pass_at_k.py), averaged over problems, for k = 1, 2, 4, … n.

**What is reported.** For each k, the tuned model's pass@k minus the base model's, seed by seed (the base
sampled with the same seed), as the mean over seeds with its 95 % interval (paired t, `stats.py`); the same
by difficulty (op, carry). The verdict says where the difference is resolved above 0, where it is resolved
below 0, and where not; the crossing k, if any. Writes OUT/table.md, table.json, passk.png, index.html.
The same command continues an interrupted study; `--seeds` may grow.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import tyro

from rlhf_scratch.config import ConfigError
from rlhf_scratch.pages.html import bullets, esc, figure, new_figure, save_figure, table
from rlhf_scratch.studies.base import Study
from rlhf_scratch.studies.runner import (
    INTERVAL_NOTE,
    Ledger,
    Unit,
    check_at_least,
    draw_band,
    markdown_table,
    plan_units,
    seed_list,
    verdict_html,
    write_report,
)
from rlhf_scratch.studies.stats import mean_interval, paired_difference

PROG = "rlhf pass-at-k"
METHOD = "grpo"
HELD_OUT = "arithmetic:test"
COUNTS_FILE = "counts.json"
"""A model's c per held-out problem (beside a tuned run's folder, or OUT/base-s<seed>.json for the base)."""


@dataclass
class PassAtKArgs:
    """The pass@k study: seeds, each run's length, and how many samples of each held-out problem."""

    out: Annotated[str, tyro.conf.arg(help_behavior_hint="(required)")] = ""
    """The study folder; the same command again continues the study there."""
    seeds: str = "1,2,3"
    """Comma-separated seeds: a GRPO run each, and the base sampled with each (the pairs of the intervals)."""
    total_phases: int = 1000
    """Phases of every run (the arithmetic task's default)."""
    samples: int = 256
    """n: samples of each held-out problem from each model; pass@k for every power of 2 up to n."""
    problems: int = 500
    """Held-out problems (the first of the task's 500 test problems)."""
    threads: int = 1
    """Torch threads of each run and of the sampling."""
    jobs: int = 1
    """Runs at a time, each its own process."""
    quick: bool = False
    """Tiny settings for tests (`QUICK`); its verdict says nothing. Flags given beside it still win."""

    def seed_list(self) -> list[int]:
        return seed_list(self.seeds)

    def validate(self) -> PassAtKArgs:
        if not self.out:
            raise ConfigError("out: required (the study folder)")
        self.seed_list()
        check_at_least(self, ("total_phases", "problems", "threads", "jobs"))
        check_at_least(self, ("samples",), 2)
        if self.problems > 500:
            raise ConfigError(f"problems: at most 500 (the task's test split); got {self.problems}")
        return self

    def plan(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k not in ("out", "threads", "jobs", "quick")},
                "seeds": self.seed_list()}

    def units(self) -> list[Unit]:
        return plan_units([METHOD], self.seed_list())

    def ks(self) -> list[int]:
        """k = 1, 2, 4, … up to n, and n itself."""
        return sorted({2**i for i in range(int(math.log2(self.samples)) + 1)} | {self.samples})


QUICK = {"total_phases": 3, "samples": 4, "problems": 8}
"""`--quick`: PassAtKArgs' fields for a study of seconds."""


# --- the measure -------------------------------------------------------------------------------------


def held_out_prompts(problems: int) -> list[str]:
    """The first `problems` of the task's test split, each a Prompt carrying its ground truth and difficulty."""
    from rlhf_scratch.config import make_args
    from rlhf_scratch.rollout.rl_dataset import run_prompts

    return run_prompts(make_args(algo=METHOD, task="arithmetic"), say=None, source=HELD_OUT)[:problems]


def sample_counts(lm, prompts: list[str], n: int, seed: int, gen_len: int, rows_per_call: int = 4096) -> list[int]:
    """c of each prompt: how many of `n` samples (temperature 1, the whole softmax, stopping at EOS) are
    right, drawn from a random stream seeded with `seed` (`reward.verifiable_eval.correct_per_problem`)."""
    import torch

    from rlhf_scratch.reward.verifiable_eval import correct_per_problem
    from rlhf_scratch.rollout.phase import generate_sequences

    per_call = max(1, rows_per_call // n)
    counts: list[int] = []
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        with torch.no_grad():
            for i in range(0, len(prompts), per_call):
                rollout = generate_sequences(lm, prompts[i : i + per_call], num_generations=n, gen_len=gen_len,
                                             temperature=1.0, top_k=0, top_p=1.0, stop_at_eos=True)
                counts += correct_per_problem(rollout.prompts, rollout.completions, n)
    finally:
        torch.random.set_rng_state(generator_state)
    return counts


def pass_curve(counts: list[int], n: int, ks: list[int]) -> dict[int, float]:
    """pass@k averaged over problems, for each k."""
    from rlhf_scratch.reward.pass_at_k import pass_at_k

    return {k: sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in ks}


def difficulty_of(prompts: list[str]) -> list[str]:
    """Each problem's cell, `op=+ carry=yes`, from its row's extra_info (`verifiable_eval.difficulty_cells`)."""
    from rlhf_scratch.reward.verifiable_eval import difficulty_cells

    return [f"op={cell['op']} carry={cell['carry']}" for cell in difficulty_cells(prompts, 1)]


# --- the study ---------------------------------------------------------------------------------------


def differences(base: dict[int, dict[int, float]], tuned: dict[int, dict[int, float]], seeds: list[int], ks: list[int]) -> dict:
    """Per k: the tuned model's pass@k minus the base's, paired over seeds (`stats.paired_difference`)."""
    out = {}
    for k in ks:
        d = paired_difference([tuned[s][k] for s in seeds], [base[s][k] for s in seeds])
        out[k] = {"tuned": d.a.as_json(), "base": d.b.as_json(), "difference": mean_interval(
            [tuned[s][k] - base[s][k] for s in seeds]).as_json(), "resolved": d.resolved, "p": d.p}
    return out


def verdict_sentences(diffs: dict, n_seeds: int) -> list[str]:
    """Where RL's pass@k is resolved above the base's, where below, where not; the crossing k."""
    above = [k for k, d in diffs.items() if d["resolved"] and d["difference"]["mean"] > 0]
    below = [k for k, d in diffs.items() if d["resolved"] and d["difference"]["mean"] < 0]
    unresolved = [k for k in diffs if k not in above and k not in below]
    ks = sorted(diffs)

    def cell(k):
        d = diffs[k]["difference"]
        hw = d["half_width"]
        return f"{d['mean']:+.3f}" + (f" ± {hw:.3f}" if hw is not None else "")

    said = [f"Over {n_seeds} seed{'s' if n_seeds != 1 else ''}, RL (GRPO) changes held-out pass@1 by {cell(ks[0])} "
            f"(base {diffs[ks[0]]['base']['mean']:.3f}, tuned {diffs[ks[0]]['tuned']['mean']:.3f}) and pass@{ks[-1]} by "
            f"{cell(ks[-1])} (base {diffs[ks[-1]]['base']['mean']:.3f}, tuned {diffs[ks[-1]]['tuned']['mean']:.3f}); "
            "95 % paired intervals."]
    crossing = next((k for k in ks if diffs[k]["difference"]["mean"] <= 0), None)
    if below:
        said.append(f"The base model is resolved ahead at k = {', '.join(map(str, below))}: it solves, given enough "
                    "samples, problems the tuned model no longer does. RL narrowed what the model can do, as published.")
    elif crossing is not None:
        said.append(f"The mean difference reaches 0 by k = {crossing}, but no k has the base resolved ahead: "
                    "the base catches up; whether it passes is not resolved at this n.")
    elif ks[-1] in above:
        said.append(f"RL stays resolved ahead up to k = {ks[-1]}: here RL adds what the base model lacks "
                    "(the published finding does not hold at this scale).")
    else:
        said.append(f"RL is ahead in the mean at every k, resolved at k = {', '.join(map(str, above)) or 'none'}; "
                    f"not resolved at k = {', '.join(map(str, unresolved))}.")
    if n_seeds < 2:
        said.append("One seed: no interval; this is not a finding.")
    return said


class PassAtKStudy(Study[PassAtKArgs]):
    """A GRPO run per seed; the base and each tuned model sampled on the held-out problems; the report."""

    prog, description, args_class, quick, kind = PROG, __doc__.split("\n\n")[0], PassAtKArgs, QUICK, "pass@k study"

    def train_flags(self, args: PassAtKArgs, unit: Unit, run_dir: Path) -> list[str]:
        return ["arithmetic", "--algo", METHOD, "--seed", str(unit.seed), "--run-dir", str(run_dir),
                "--total-phases", str(args.total_phases), "--threads", str(args.threads),
                "--test-freq", str(max(1, args.total_phases // 10)), "--val-size", str(args.problems),
                "--table-every", str(args.total_phases), "--plot-every", str(args.total_phases),
                *(["--batch-size", "8", "--num-generations", "4"] if args.quick else [])]

    def counts(self, args: PassAtKArgs, out: Path, prompts: list[str]) -> tuple[dict, dict]:
        """c per problem of the base (per seed) and of each tuned run: read back, or sampled now and saved."""
        import torch

        from rlhf_scratch.engine.runs import load_run
        from rlhf_scratch.models.loading import load_lm

        torch.set_num_threads(args.threads)
        gen_len = 6
        base, tuned, lm = {}, {}, None
        for seed in args.seed_list():
            path = out / f"base-s{seed}.json"
            if not path.is_file():
                lm = lm or load_lm("arithmetic").eval()
                print(f"sampling the base model: {args.samples} samples of {len(prompts)} problems, seed {seed}", file=sys.stderr)
                path.write_text(json.dumps(sample_counts(lm, prompts, args.samples, seed, gen_len)))
            base[seed] = json.loads(path.read_text())
        for unit in args.units():
            path = self.run_dir(out, unit) / COUNTS_FILE
            if not path.is_file():
                print(f"sampling {unit.name}: {args.samples} samples of {len(prompts)} problems", file=sys.stderr)
                policy = load_run(self.run_dir(out, unit)).policy.eval()
                path.write_text(json.dumps(sample_counts(policy, prompts, args.samples, unit.seed, gen_len)))
            tuned[unit.seed] = json.loads(path.read_text())
        return base, tuned

    def report(self, args: PassAtKArgs, out: Path, ledger: Ledger) -> str:
        prompts = held_out_prompts(args.problems)
        seeds, ks, n = args.seed_list(), args.ks(), args.samples
        base_counts, tuned_counts = self.counts(args, out, prompts)
        base = {s: pass_curve(base_counts[s], n, ks) for s in seeds}
        tuned = {s: pass_curve(tuned_counts[s], n, ks) for s in seeds}
        diffs = differences(base, tuned, seeds, ks)
        said = verdict_sentences(diffs, len(seeds))
        cells = difficulty_of(prompts)
        by_cell = {}
        for cell in sorted(set(cells)):
            keep = [i for i, c in enumerate(cells) if c == cell]
            b = {s: pass_curve([base_counts[s][i] for i in keep], n, ks) for s in seeds}
            t = {s: pass_curve([tuned_counts[s][i] for i in keep], n, ks) for s in seeds}
            by_cell[cell] = {"problems": len(keep), "differences": differences(b, t, seeds, ks)}
        header = ["k", "base pass@k", "tuned pass@k", "tuned − base", "resolved"]
        rows = [[k, _cell(d["base"]), _cell(d["tuned"]), _cell(d["difference"], signed=True), "yes" if d["resolved"] else "no"]
                for k, d in diffs.items()]
        cell_header = ["difficulty", "problems", *[f"Δ pass@{k}" for k in (ks[0], ks[len(ks) // 2], ks[-1])]]
        cell_rows = [[c, v["problems"], *[_cell(v["differences"][k]["difference"], signed=True) for k in (ks[0], ks[len(ks) // 2], ks[-1])]]
                     for c, v in by_cell.items()]
        fig = self.plot(base, tuned, seeds, ks, out)
        table_md = "\n\n".join([markdown_table(header, rows), markdown_table(cell_header, cell_rows), INTERVAL_NOTE])
        data = {"verdict": said, "settings": args.plan(), "ks": ks, "differences": {str(k): v for k, v in diffs.items()},
                "by_difficulty": {c: {"problems": v["problems"], "differences": {str(k): d for k, d in v["differences"].items()}}
                                  for c, v in by_cell.items()},
                "base": {str(s): {str(k): v for k, v in base[s].items()} for s in seeds},
                "tuned": {str(s): {str(k): v for k, v in tuned[s].items()} for s in seeds}, "times": ledger.seconds()}
        body = [verdict_html(said), figure(fig, "pass@k of the base and the tuned models (mean over seeds, 95 % band)"),
                table(rows, header), "<h2>By difficulty</h2>", table(cell_rows, cell_header), f"<p>{esc(INTERVAL_NOTE)}</p>",
                bullets([f"{len(prompts)} held-out problems, n = {n} samples each at temperature 1; "
                         f"{args.total_phases} GRPO phases per seed; seeds {', '.join(map(str, seeds))}."])]
        page = write_report(out, title="rlhf_scratch pass@k study", table_md=table_md, data=data, body=body)
        return "\n".join(["\n".join(said) + "\n", table_md, f"\nwrote {page}"])

    @staticmethod
    def plot(base: dict, tuned: dict, seeds: list[int], ks: list[int], out: Path) -> Path:
        fig, ax = new_figure()
        for name, curves, color in (("base", base, "tab:gray"), ("GRPO-tuned", tuned, "tab:blue")):
            draw_band(ax, [ks] * len(seeds), [[curves[s][k] for k in ks] for s in seeds], label=name, color=color)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k (samples)")
        ax.set_ylabel("held-out pass@k")
        ax.legend()
        return save_figure(fig, out / "passk.png")


def _cell(interval: dict, signed: bool = False) -> str:
    fmt = "{:+.3f}" if signed else "{:.3f}"
    hw = interval["half_width"]
    return fmt.format(interval["mean"]) + (f" ± {hw:.3f}" if hw is not None else "")


STUDY = PassAtKStudy()
main = STUDY.main
"""`rlhf pass-at-k --out DIR [--seeds 1,2,3 …]`."""

if __name__ == "__main__":
    sys.exit(main())
