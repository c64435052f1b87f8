"""Does the tool help RL? Held-out accuracy of GRPO with the calculator against without it, at equal phases,
over seeds, by op; and how the call rate moves during training (issue 58, item 7).

    rlhf calculator-study --out studies/calc                        # 3 seeds
    rlhf calculator-study --out studies/calc --seeds 1              # ... one seed at a time: each call runs only
    rlhf calculator-study --out studies/calc --seeds 1,2              what is not done yet (resumable)
    rlhf calculator-study --out s/ --quick                          # seconds: tests (`QUICK`); its verdict says nothing

**The question.** The calculator sibling (`--model arithmetic_calc`, docs/environments.md) can call
`<calc>47*85</calc>` and read `3995=`; it cannot do 2-digit products in its head, and does sums and differences
partly. Trained by RL with the tool, does it end more accurate than the same model trained by RL without it, and
does it learn when to call?

**The arms**, per seed, the same GRPO run (`python -m rlhf_scratch.train arithmetic`, `--total-phases` each, the
learning rate constant after its warmup, `--final-scale 1`, so that a run trained in segments is one run):
- `tool`: `--env calculator` (its defaults: the sibling, the calculator's problems — sums, differences and
  products — and a 20-token episode); evaluated with the calculator answering;
- `no_tool`: the same model, problems and budget without `--env`: a call is answered by nothing, the model must
  answer in its head (RL can teach it to stop calling); evaluated without the calculator.

**The measure.** The `--problems` first held-out problems (`--prompts calculator:test`, never trained on, nor
pretrained on), `--samples` n samples each at temperature 1 from the whole softmax (`rollout.episodes.generate_episodes`),
drawn from a random stream seeded with the seed; pass@1 = the share right, overall, on products and on sums and
differences; the call rate = the share of episodes whose model tokens hold `<calc>`. The base model is measured
both ways with each seed's stream. Each run is trained in segments of `--curve-every` phases (`--resume` with a
larger `--total-phases`), its policy kept after each (OUT/runs/<unit>/policy-PPPP.pt) and measured the same way on
`--curve-samples` samples a problem: the call rate and pass@1 curves.

**What is reported.** For each slice (all, products, sums and differences): the tool arm's pass@1 minus the
no-tool arm's, seed by seed, as the mean over seeds with its 95 % paired interval (`stats.py`); each arm against
the base. Writes OUT/table.md, table.json, curves.png, index.html. The same command continues an interrupted study;
`--seeds` may grow.
"""

from __future__ import annotations

import json
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

PROG = "rlhf calculator-study"
ARMS = ("tool", "no_tool")
"""The units' methods: GRPO with `--env calculator`, and the same run without it."""
HELD_OUT = "calculator:test"
GEN_LEN = 20
"""An episode's budget, both arms (the calculator environment's default gen_len)."""
SLICES = {"all": "+-*", "products": "*", "sums and differences": "+-"}
"""The held-out problems each accuracy is read over, by their op."""
OUTCOMES = "outcomes.json"
"""A run's (called, right) per sample: its final policy and each checkpoint (beside the run's folder)."""


@dataclass
class CalculatorStudyArgs:
    """The calculator study: seeds, each run's length, how many samples of each held-out problem."""

    out: Annotated[str, tyro.conf.arg(help_behavior_hint="(required)")] = ""
    """The study folder; the same command again continues the study there."""
    seeds: str = "1,2,3"
    """Comma-separated seeds: a run of each arm each, and the base measured with each (the pairs of the intervals)."""
    total_phases: int = 300
    """GRPO phases of every run (both arms alike)."""
    curve_every: int = 50
    """Phases of each segment a run is trained in: the policies whose call rate and pass@1 make the curves."""
    samples: int = 8
    """n: samples of each held-out problem from each final model and the base."""
    curve_samples: int = 2
    """Samples of each held-out problem at each checkpoint of the curves."""
    problems: int = 500
    """Held-out problems (the first of the calculator's 500 test problems)."""
    threads: int = 1
    """Torch threads of each run and of the sampling (the segments run one at a time, in order)."""
    quick: bool = False
    """Tiny settings for tests (`QUICK`); its verdict says nothing. Flags given beside it still win."""

    def seed_list(self) -> list[int]:
        return seed_list(self.seeds)

    def validate(self) -> CalculatorStudyArgs:
        if not self.out:
            raise ConfigError("out: required (the study folder)")
        self.seed_list()
        check_at_least(self, ("total_phases", "curve_every", "samples", "curve_samples", "problems", "threads"))
        if self.problems > 500:
            raise ConfigError(f"problems: at most 500 (the calculator's test split); got {self.problems}")
        if self.curve_every > self.total_phases:
            raise ConfigError(f"curve_every: at most total_phases {self.total_phases}; got {self.curve_every}")
        return self

    def plan(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k not in ("out", "threads", "quick")},
                "seeds": self.seed_list()}

    def units(self) -> list[Unit]:
        return plan_units(ARMS, self.seed_list())

    def curve_phases(self) -> list[int]:
        """0 (the base), every --curve-every phases, and the last."""
        return sorted({0, *range(self.curve_every, self.total_phases + 1, self.curve_every), self.total_phases})


QUICK = {"total_phases": 2, "curve_every": 1, "samples": 2, "curve_samples": 1, "problems": 12}
"""`--quick`: the args' fields for a study of seconds."""


# --- the measure -------------------------------------------------------------------------------------


class NoTool:
    """The `no_tool` arm's evaluation: an environment factory with no stop token, whose every episode is one
    turn (the model's own tokens, a `<calc>` among them or not): the single-turn rollout."""

    stop_ids: tuple[int, ...] = ()

    def __call__(self, prompt: str):
        return self

    def reset(self) -> tuple[int, ...]:
        return ()

    def step(self, turn_ids: tuple[int, ...]):
        from rlhf_scratch.rollout.environment import Step

        return Step(done=True)


def held_out_prompts(problems: int) -> list[str]:
    """The first `problems` of the calculator's test split, each a Prompt carrying its ground truth and op."""
    from rlhf_scratch.config import make_args
    from rlhf_scratch.rollout.rl_dataset import run_prompts

    return run_prompts(make_args(algo="grpo", task="arithmetic", env="calculator"), say=None, source=HELD_OUT)[:problems]


def episode_outcomes(lm, prompts: list[str], n: int, seed: int, tool: bool) -> list[list[list[bool]]]:
    """Each problem's `n` samples as [called, right]: episodes of up to 4 turns with the calculator answering
    (`tool`), or one turn without it; called = the model's tokens hold `<calc>`; right = `accuracy_reward` of the
    last turn. Drawn from a random stream seeded with `seed` (the caller's stream left as it was)."""
    import torch

    from rlhf_scratch.reward.calculator import OPEN, CalculatorFactory
    from rlhf_scratch.reward.verifiable import accuracy_reward
    from rlhf_scratch.rollout.episodes import generate_episodes
    from rlhf_scratch.rollout.rl_dataset import prompt_columns

    open_id = lm.tokenizer.get_vocab()[OPEN]
    factory = CalculatorFactory(lm.tokenizer) if tool else NoTool()
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        rollout, episodes = generate_episodes(lm, prompts, factory, num_generations=n, gen_len=GEN_LEN, max_turns=4,
                                              temperature=1.0, top_k=0, top_p=1.0, prepend_bos=True)
    finally:
        torch.random.set_rng_state(state)
    right = accuracy_reward(completions=rollout.completions, ground_truth=prompt_columns(rollout.prompts)["ground_truth"])
    called = [any(s.by_model and open_id in s.ids for s in e.segments) for e in episodes]
    rows = [[bool(c), r == 1.0] for c, r in zip(called, right)]
    return [rows[i : i + n] for i in range(0, len(rows), n)]


def op_of(prompts: list[str]) -> list[str]:
    """Each problem's op, from its row's extra_info."""
    from rlhf_scratch.reward.verifiable_eval import difficulty_cells

    return [cell["op"] for cell in difficulty_cells(prompts, 1)]


def rates(outcomes: list[list[list[bool]]], ops: list[str]) -> dict[str, dict[str, float | None]]:
    """pass@1 (the share right) and the call rate over the samples of each slice (`SLICES`); None for an empty one.

        outcomes [[[T, T], [F, F]], [[T, F], [F, T]]], ops ["*", "+"]
        -> all: pass@1 2/4, call rate 2/4; products: 1/2, 1/2; sums and differences: 1/2, 1/2"""
    out = {}
    for name, kept in SLICES.items():
        samples = [s for per, op in zip(outcomes, ops) if op in kept for s in per]
        out[name] = {"pass@1": sum(r for _, r in samples) / len(samples) if samples else None,
                     "call_rate": sum(c for c, _ in samples) / len(samples) if samples else None}
    return out


# --- the study ---------------------------------------------------------------------------------------


def compare(a: dict[int, float], b: dict[int, float], seeds: list[int]) -> dict:
    """a − b seed by seed (`stats.paired_difference`): each side's mean and interval, the difference's, resolved."""
    d = paired_difference([a[s] for s in seeds], [b[s] for s in seeds])
    return {"a": d.a.as_json(), "b": d.b.as_json(), "difference": mean_interval([a[s] - b[s] for s in seeds]).as_json(),
            "resolved": d.resolved, "p": d.p}


def cell(interval: dict, signed: bool = False) -> str:
    fmt = "{:+.3f}" if signed else "{:.3f}"
    hw = interval["half_width"]
    return fmt.format(interval["mean"]) + (f" ± {hw:.3f}" if hw is not None else "")


def verdict_sentences(tool_vs_none: dict[str, dict], calls: dict[str, dict], n_seeds: int) -> list[str]:
    """What the comparison says, slice by slice: the tool arm ahead, behind, or not resolved; and the call rate's move."""
    said = []
    for name, d in tool_vs_none.items():
        if d["resolved"]:
            word = "ahead" if d["difference"]["mean"] > 0 else "behind"
            verdict = f"resolved: with the tool, RL ends {word}"
        else:
            verdict = "not resolved"
        said.append(f"{name}: held-out pass@1 with the tool {cell(d['a'])} against {cell(d['b'])} without, "
                    f"{cell(d['difference'], signed=True)} ({verdict}).")
    said[0] = f"Over {n_seeds} seed{'s' if n_seeds != 1 else ''} (95 % paired intervals), at equal GRPO phases, " + said[0]
    moves = "; ".join(f"{name} {cell(c['before'])} → {cell(c['after'])}" for name, c in calls.items())
    said.append(f"The call rate of the tool arm, before → after RL: {moves}.")
    if n_seeds < 2:
        said.append("One seed: no interval; this is not a finding.")
    return said


class CalculatorStudy(Study[CalculatorStudyArgs]):
    """Both arms' runs per seed; the base, each final model and each checkpoint measured on the held-out problems."""

    prog, description, args_class, quick, kind = PROG, __doc__.split("\n\n")[0], CalculatorStudyArgs, QUICK, "calculator study"

    def train_flags(self, args: CalculatorStudyArgs, unit: Unit, run_dir: Path, phases: int | None = None) -> list[str]:
        """A unit's new run, to `phases` (default: the whole run; its first segment when trained in segments)."""
        arm = (["--env", "calculator"] if unit.method == "tool" else
               ["--model", "arithmetic_calc", "--prompts", "calculator", "--gen-len", str(GEN_LEN)])
        return ["arithmetic", "--algo", "grpo", *arm, "--seed", str(unit.seed), "--run-dir", str(run_dir),
                "--total-phases", str(phases or args.total_phases), "--final-scale", "1", "--threads", str(args.threads),
                "--val-prompts", "", "--table-every", str(args.total_phases), "--plot-every", str(args.total_phases),
                *(["--batch-size", "8", "--num-generations", "4"] if args.quick else [])]

    def segment_command(self, args: CalculatorStudyArgs, unit: Unit, phases: int, run_dir: Path) -> list[str] | None:
        """The process that trains `unit` up to `phases`: a new run, `--resume` of one that stopped before (a
        segment's end or an interruption), or None when it has finished there already."""
        from rlhf_scratch.engine.runs import list_checkpoints, read_status
        from rlhf_scratch.studies.runner import train_argv

        status = read_status(run_dir) if run_dir.exists() else {"status": "new"}
        if status["status"] == "finished" and status.get("phase") == phases:
            return None
        if status["status"] == "running":
            return train_argv(unit.name, run_dir, [])  # (refused there, in one line)
        if list_checkpoints(run_dir):
            return [sys.executable, "-m", "rlhf_scratch.train", "--resume", str(run_dir), "--total-phases", str(phases)]
        return train_argv(unit.name, run_dir, self.train_flags(args, unit, run_dir, phases))

    def run_units(self, args: CalculatorStudyArgs, out: Path, ledger: Ledger) -> None:
        """Each unit trained in segments of --curve-every phases, one process each, in order; after each, its
        policy kept as policy-PPPP.pt (the curves'). A segment in the ledger is done; one bar over all phases."""
        import shutil

        from tqdm.auto import tqdm

        from rlhf_scratch.engine.runs import POLICY_FILE
        from rlhf_scratch.studies.runner import run_process

        segments = [(u, p) for u in args.units() for p in args.curve_phases()[1:]]
        bar = tqdm(total=len(args.units()) * args.total_phases, desc="phases, all runs", unit="phase", file=sys.stderr)
        for unit, phases in segments:
            name, run_dir = f"{unit.name}@{phases}", self.run_dir(out, unit)
            if name not in ledger:
                bar.set_postfix_str(name)
                command = self.segment_command(args, unit, phases, run_dir)
                measured = {"wall_s": 0.0} if command is None else run_process(command, name)
                shutil.copyfile(run_dir / POLICY_FILE, run_dir / snapshot_name(phases))
                ledger.add(name, {**asdict(unit), **measured})
            bar.update(args.units().index(unit) * args.total_phases + phases - bar.n)
        bar.close()

    def measure(self, args: CalculatorStudyArgs, out: Path, prompts: list[str]) -> tuple[dict, dict]:
        """Outcomes of the base (per seed, with and without the tool) and of each run (final and curve):
        read back, or sampled now and saved."""
        import torch

        from rlhf_scratch.engine.runs import load_run
        from rlhf_scratch.models.loading import load_lm
        from rlhf_scratch.models.policy import language_model, load_saved_state

        torch.set_num_threads(args.threads)
        base, runs, lm = {}, {}, None
        for seed in args.seed_list():
            path = out / f"base-s{seed}.json"
            if not path.is_file():
                lm = lm or load_lm("arithmetic_calc").eval()
                print(f"measuring the base model, seed {seed}", file=sys.stderr)
                path.write_text(json.dumps({arm: episode_outcomes(lm, prompts, args.samples, seed, arm == "tool") for arm in ARMS}))
            base[seed] = json.loads(path.read_text())
        for unit in args.units():
            run_dir = self.run_dir(out, unit)
            path, tool = run_dir / OUTCOMES, unit.method == "tool"
            if not path.is_file():
                phases = args.curve_phases()[1:]
                print(f"measuring {unit.name}: its policy after {len(phases)} segments", file=sys.stderr)
                run = load_run(run_dir)
                curve = {}
                for phase in phases:
                    load_saved_state(run.policy, torch.load(run_dir / snapshot_name(phase), map_location="cpu", weights_only=True))
                    curve[phase] = episode_outcomes(language_model(run.policy).eval(), prompts, args.curve_samples, unit.seed, tool)
                final = load_run(run_dir).tuned.eval()  # policy.pt, the run's end
                path.write_text(json.dumps({"final": episode_outcomes(final, prompts, args.samples, unit.seed, tool),
                                            "curve": curve}))
            runs[unit.name] = json.loads(path.read_text())
        return base, runs

    def report(self, args: CalculatorStudyArgs, out: Path, ledger: Ledger) -> str:
        prompts = held_out_prompts(args.problems)
        ops = op_of(prompts)
        seeds = args.seed_list()
        base, runs = self.measure(args, out, prompts)
        final = {arm: {s: rates(runs[f"{arm}-s{s}"]["final"], ops) for s in seeds} for arm in ARMS}
        start = {arm: {s: rates(base[s][arm], ops) for s in seeds} for arm in ARMS}

        def pass1(table_: dict, arm: str, name: str) -> dict[int, float]:
            return {s: table_[arm][s][name]["pass@1"] for s in seeds}

        names = [n for n in SLICES if all(final["tool"][s][n]["pass@1"] is not None for s in seeds)]
        tool_vs_none = {n: compare(pass1(final, "tool", n), pass1(final, "no_tool", n), seeds) for n in names}
        gains = {arm: {n: compare(pass1(final, arm, n), pass1(start, arm, n), seeds) for n in names} for arm in ARMS}
        calls = {n: {"before": mean_interval([start["tool"][s][n]["call_rate"] for s in seeds]).as_json(),
                     "after": mean_interval([final["tool"][s][n]["call_rate"] for s in seeds]).as_json()} for n in names}
        curves = {arm: {s: {int(p): rates(o, ops) for p, o in runs[f"{arm}-s{s}"]["curve"].items()} for s in seeds}
                  for arm in ARMS}
        for arm in ARMS:  # phase 0: the base, measured with the curves' fewer samples
            for s in seeds:
                curves[arm][s].setdefault(0, rates([per[: args.curve_samples] for per in base[s][arm]], ops))
        said = verdict_sentences(tool_vs_none, calls, len(seeds))
        header = ["held-out problems", "problems", "base, with the tool", "RL with the tool", "base, without",
                  "RL without the tool", "with − without (RL)", "resolved"]
        rows = [[n, sum(op in SLICES[n] for op in ops), _mean(start, "tool", n, seeds), cell(d["a"]),
                 _mean(start, "no_tool", n, seeds), cell(d["b"]), cell(d["difference"], signed=True),
                 "yes" if d["resolved"] else "no"] for n, d in tool_vs_none.items()]
        call_header = ["held-out problems", "call rate before RL", "after RL with the tool", "after RL without (calls unanswered)"]
        call_rows = [[n, cell(c["before"]), cell(c["after"]),
                      cell(mean_interval([final["no_tool"][s][n]["call_rate"] for s in seeds]).as_json())] for n, c in calls.items()]
        phases = sorted({p for arm in ARMS for s in seeds for p in curves[arm][s]})
        curve_header = ["phase", "tool: call rate, products", "tool: call rate, sums and differences", "tool: pass@1",
                        "no tool: pass@1"]
        curve_rows = [[p, _over(curves, "tool", "products", p, seeds, "call_rate"),
                       _over(curves, "tool", "sums and differences", p, seeds, "call_rate"),
                       _over(curves, "tool", "all", p, seeds, "pass@1"), _over(curves, "no_tool", "all", p, seeds, "pass@1")]
                      for p in phases]
        fig = self.plot(curves, seeds, phases, out)
        table_md = "\n\n".join([markdown_table(header, rows), markdown_table(call_header, call_rows),
                                markdown_table(curve_header, curve_rows), INTERVAL_NOTE])
        data = {"verdict": said, "settings": args.plan(), "tool_vs_no_tool": tool_vs_none, "gain_over_base": gains,
                "call_rate": calls, "problems": {n: sum(op in SLICES[n] for op in ops) for n in SLICES},
                "final": {arm: {str(s): v for s, v in final[arm].items()} for arm in ARMS},
                "base": {arm: {str(s): v for s, v in start[arm].items()} for arm in ARMS},
                "curves": {arm: {str(s): {str(p): v for p, v in sorted(c.items())} for s, c in curves[arm].items()} for arm in ARMS},
                "times": ledger.seconds()}
        body = [verdict_html(said), figure(fig, "call rate and pass@1 during training (mean over seeds, 95 % band)"),
                table(rows, header), table(call_rows, call_header), table(curve_rows, curve_header),
                f"<p>{esc(INTERVAL_NOTE)}</p>",
                bullets([f"{len(prompts)} held-out problems, n = {args.samples} samples each at temperature 1 "
                         f"({args.curve_samples} at each checkpoint); {args.total_phases} GRPO phases per arm and seed; "
                         f"seeds {', '.join(map(str, seeds))}."])]
        page = write_report(out, title="rlhf_scratch calculator study", table_md=table_md, data=data, body=body)
        return "\n".join(["\n".join(said) + "\n", table_md, f"\nwrote {page}"])

    @staticmethod
    def plot(curves: dict, seeds: list[int], phases: list[int], out: Path) -> Path:
        fig, (calls_ax, acc_ax) = new_figure(1, 2, figsize=(10.0, 4.0))
        for name, color in (("products", "tab:red"), ("sums and differences", "tab:blue")):
            ys = [[curves["tool"][s].get(p, {}).get(name, {}).get("call_rate") or float("nan") for p in phases] for s in seeds]
            draw_band(calls_ax, [phases] * len(seeds), ys, label=name, color=color)
        calls_ax.set(xlabel="GRPO phase", ylabel="call rate (tool arm)", ylim=(0, 1))
        calls_ax.legend()
        for arm, color in (("tool", "tab:green"), ("no_tool", "tab:gray")):
            ys = [[curves[arm][s].get(p, {}).get("all", {}).get("pass@1", float("nan")) for p in phases] for s in seeds]
            draw_band(acc_ax, [phases] * len(seeds), ys, label=arm.replace("_", " "), color=color)
        acc_ax.set(xlabel="GRPO phase", ylabel="held-out pass@1", ylim=(0, 1))
        acc_ax.legend()
        return save_figure(fig, out / "curves.png")


def snapshot_name(phase: int) -> str:
    """The policy a unit had after `phase` phases, kept beside its run (policy.pt is overwritten by the next segment)."""
    return f"policy-{phase:04d}.pt"


def _mean(table_: dict, arm: str, name: str, seeds: list[int]) -> str:
    return cell(mean_interval([table_[arm][s][name]["pass@1"] for s in seeds]).as_json())


def _over(curves: dict, arm: str, name: str, phase: int, seeds: list[int], key: str) -> str:
    values = [curves[arm][s][phase][name][key] for s in seeds if phase in curves[arm][s] and curves[arm][s][phase][name][key] is not None]
    return cell(mean_interval(values).as_json()) if values else ""


STUDY = CalculatorStudy()
main = STUDY.main
"""`rlhf calculator-study --out DIR [--seeds 1,2,3 …]`."""

if __name__ == "__main__":
    sys.exit(main())
