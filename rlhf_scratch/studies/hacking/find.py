"""Find the hack with interpretability, without being told the flaw (issue 46, item 3): the command.

    python -m rlhf_scratch.studies.hacking.find --runs RUN [RUN ...] --proxy RM_DIR --prompts eval.txt --out DIR

Per hacked run, against its reference: the excess e = proxy − gold of each sample, the candidates
read from the model (neurons, heads, directions, top movers), the share of the excess each explains,
the top finding described and ablated against random ones. The steps and their formulas:
`find_steps.py`; the page: `find_page.py`; numbers and verdict: docs/human-feedback.md §4. The flags
are checked before torch is imported, so `--help` and a bad flag answer at once.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import tyro

from rlhf_scratch.config import ConfigError
from rlhf_scratch.config.cli import parse_dataclass
from rlhf_scratch.config.command import command
from rlhf_scratch.rollout.prompts import check_context
from rlhf_scratch.studies.hacking.find_settings import FindSettings

PROG = "python -m rlhf_scratch.studies.hacking.find"


@dataclass
class FindArgs(FindSettings):
    """Find what a policy trained against a proxy exploits, from the model: the proxy-gold gap
    decomposed over neurons, heads, directions and top movers, the top finding described, ablated
    against random ones; writes OUT/find.html and OUT/find.json."""

    runs: list[str] = field(default_factory=list)
    """Run folders of policies trained against the proxy (`python -m rlhf_scratch.train`), one per seed."""
    proxy: str = tyro.MISSING
    """The proxy: a reward-model run folder (`python -m rlhf_scratch.reward_model`)."""
    prompts: str = tyro.MISSING
    """Held-out prompts, one per line."""
    out: str = tyro.MISSING
    """The output folder."""
    threads: int = 1
    """Torch threads."""
    no_causal: bool = False
    """Skip the causal check."""


def parse(argv: list[str]) -> FindArgs:
    args = parse_dataclass(FindArgs, argv, default=None, prog=PROG, description=" ".join(FindArgs.__doc__.split()))
    if not args.runs:
        raise ConfigError("runs: give at least one run folder")
    for name in ("n_samples", "n_causal", "n_ablate", "gen_len", "top_k_movers", "threads"):
        if getattr(args, name) < 1:
            raise ConfigError(f"{name}: must be >= 1; got {getattr(args, name)}")
    if args.n_random < 0 or args.penalty < 0:
        raise ConfigError("n_random and penalty: must be >= 0")
    for run in args.runs:
        if not (Path(run) / "config.json").is_file():
            raise ConfigError(f"runs: {run} is not a run folder (no config.json)")
    from rlhf_scratch.models.loading import load_lm  # (torch: the flags are checked by now)
    from rlhf_scratch.reward.model import check_reward_model_run

    check_reward_model_run(args.proxy, "proxy")
    if not Path(args.prompts).is_file() or not Path(args.prompts).read_text().strip():
        raise ConfigError(f"prompts: {args.prompts} is no file of prompts")
    out = Path(args.out)
    if out.is_file():
        raise ConfigError(f"out: {args.out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()):
        raise ConfigError(f"out: {args.out} exists and is not empty; choose a new --out (nothing is overwritten)")
    check_context(load_lm(base_model(args.runs)), prompt_lines(args.prompts), args.gen_len, args.prompts)
    return args


def base_model(runs: list[str]) -> str:
    """The model every run in `runs` started from (`engine.runs.load_args`: one line for a folder
    that is not a finished policy's run); runs from different models are refused."""
    from rlhf_scratch.engine.runs import POLICY_FILE, load_args

    base = None
    for run in runs:
        model = load_args(run).model
        if not (Path(run) / POLICY_FILE).is_file():
            raise ConfigError(f"runs: {run} has no {POLICY_FILE} (not finished)")
        if base is not None and model != base:
            raise ConfigError(f"runs: {run} starts from {model}, the others from {base}")
        base = model
    return base


def prompt_lines(path: str) -> list[str]:
    """The held-out prompts: the file's lines that are not blank."""
    return [p for p in Path(path).read_text().splitlines() if p.strip()]


def run(args: FindArgs) -> int:
    import torch

    from rlhf_scratch.engine.runs import load_run
    from rlhf_scratch.reward.model import load_reward_model_run
    from rlhf_scratch.reward.preferences import gold_scores
    from rlhf_scratch.studies.hacking.find_page import summarise, write_page
    from rlhf_scratch.studies.hacking.find_steps import find_in_policy, sample_reference

    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    out = Path(args.out)
    prompts = prompt_lines(args.prompts)
    proxy = load_reward_model_run(args.proxy)
    settings = FindSettings(**{k: getattr(args, k) for k in FindSettings.__dataclass_fields__})
    per_run, ref = {}, None
    for run_dir in args.runs:
        loaded = load_run(run_dir)
        ref = ref or sample_reference(loaded.reference, prompts, proxy.score_texts, gold_scores, settings)
        result = find_in_policy(loaded.reference, loaded.tuned.eval(), prompts, proxy.score_texts, gold_scores, settings,
                                ref, causal=not args.no_causal)
        per_run[Path(run_dir).name] = {"seed": loaded.args.seed, **result}
        c, ct = result.get("causal", {}), result.get("causal_top", {})
        print(f"{Path(run_dir).name}: excess {result['policy']['excess']:+.3f}; top {result['finding']['label']} "
              f"(share {result['finding']['share']:.2f}); reduction {c.get('reduction', float('nan')):+.3f} vs random "
              f"{c.get('random_reduction', float('nan')):+.3f}; top {args.n_ablate}: {ct.get('reduction', float('nan')):+.3f} "
              f"vs {ct.get('random_reduction', float('nan')):+.3f} ({result['seconds']:.0f} s)", flush=True)
    summary = summarise(per_run)
    result = {"args": asdict(args), "summary": summary, "runs": per_run}
    out.mkdir(parents=True, exist_ok=True)  # only now: a run that stops before leaves no empty folder
    (out / "find.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    write_page(result, out / "find.html")
    print(summary["verdict"])
    print(f"wrote {out / 'find.html'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return command(parse, run, argv)


if __name__ == "__main__":
    sys.exit(main())
