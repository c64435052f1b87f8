"""The features view over seeds: which of its claims replicate across runs of one recipe.

    python -m interp.features runs/ppo-s1 --crosscoder     # each run's features.json first
    python -m rlhf_scratch.studies.features_seeds runs/ppo-s1 runs/ppo-s2 runs/ppo-s3 --out features_seeds.md

`python -m interp.features RUN` writes `RUN/interp/features/features.json`: the dictionary's dead
fraction, the share of the residual change it explains, the crosscoder's counts and the causal checks
of one run. This reads several runs' files (one per seed of the same recipe) and reports each number
as mean ± its 95 % Student-t interval over the seeds (`studies.stats.mean_interval`), and the causal
claims as paired differences over seeds against random features of equal norm:

    recovered = (r_steered − r_ref) / (r_tuned − r_ref)     steering the reference with the top features
    removed   = (r_tuned − r_ablated) / (r_tuned − r_ref)    ablating the raised top features from the tuned model

each beside the same fraction for random live features (the mean of `n_random` draws per run). A claim
"the top features cause the gain" is kept only where the paired difference top − random resolves
over the seeds (`stats.verdict`'s rule: its interval excludes 0, or the two intervals separate).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

from rlhf_scratch.config import ConfigError
from rlhf_scratch.config.cli import parse_dataclass
from rlhf_scratch.config.command import command
from rlhf_scratch.studies.stats import mean_interval, paired_difference

FEATURES_JSON = Path("interp") / "features" / "features.json"


def causal_fractions(causal: dict) -> dict[str, float]:
    """One run's causal checks as shares of its reward gap r_tuned − r_ref (see the module docstring)."""
    ref, tuned = causal["reference"]["reward"], causal["tuned"]["reward"]
    gap = tuned - ref
    if abs(gap) < 1e-9:
        raise ValueError("the tuned model's reward equals the reference's: no gain to explain")
    return {
        "gap": gap,
        "recovered": (causal["steered"]["reward"] - ref) / gap,
        "recovered_random": (causal["steered_random_mean"]["reward"] - ref) / gap,
        "removed": causal["ablated"]["reward_drop"] / gap,
        "removed_random": causal["ablated_random_mean"]["reward_drop"] / gap,
    }


def read_run(run_dir: Path) -> dict:
    """The numbers of one run's features.json that this study compares (missing ones are left out)."""
    path = run_dir / FEATURES_JSON
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (run `python -m interp.features {run_dir}` first)")
    S = json.loads(path.read_text())
    row = {k: S[k] for k in ("dead_fraction", "explained_change") if S.get(k) is not None}
    if "causal" in S:
        row.update(causal_fractions(S["causal"]))
    for label, count in (S.get("crosscoder") or {}).get("counts", {}).items():  # latents per label
        row[f"crosscoder {label}"] = count
    for label, count in (S.get("crosscoder") or {}).get("confirmed_by_scaling", {}).items():
        row[f"crosscoder {label}, confirmed by latent scaling"] = count
    return row


def summarise(rows: list[dict]) -> dict:
    """Every number as mean ± interval over the runs that have it, and the two causal comparisons."""
    keys = sorted({k for r in rows for k in r})
    out = {"n_runs": len(rows), "numbers": {k: mean_interval([r[k] for r in rows if k in r]).as_json() for k in keys}}
    for claim in ("recovered", "removed"):
        pairs = [(r[claim], r[f"{claim}_random"]) for r in rows if claim in r]
        if len(pairs) >= 1:
            d = paired_difference([a for a, _ in pairs], [b for _, b in pairs])
            out[f"{claim}_vs_random"] = {"difference": d.mean, "half_width": d.half_width, "p": d.p, "n": len(pairs),
                                         "resolved": d.resolved, "seeds_needed": d.seeds_needed()}
    return out


def _pm(v: dict) -> str:
    """A share as "m % ± h %" (± ∞ from one run)."""
    return f"{v['mean']:.0%} ± " + ("∞" if v["half_width"] is None else f"{v['half_width']:.0%}")


def report(runs: list[Path], summary: dict) -> str:
    """A markdown page: the verdicts first, then the table of every number."""
    lines = [f"# The features view over {summary['n_runs']} runs", ""]
    for claim, what in (("recovered", "steering the reference with the top features recovers"),
                        ("removed", "ablating them from the tuned model removes")):
        c = summary.get(f"{claim}_vs_random")
        if not c:
            continue
        top, rnd = (_pm(summary["numbers"][k]) for k in (claim, f"{claim}_random"))
        hw = "∞" if c["half_width"] in (None, float("inf")) else f"{c['half_width']:.0%}"
        if c["resolved"]:
            head = f"**Replicates at n = {c['n']}:** {what} {top} of the reward gain"
        else:
            need = f"; about {c['seeds_needed']} seeds would resolve a difference this size" if c["seeds_needed"] else ""
            head = (f"**Not resolved at n = {c['n']} runs** (interval width ±{hw}{need}): {what} "
                    f"{top} of the reward gain")
        lines.append(f"- {head}, against {rnd} for random features of equal norm "
                     f"(paired difference {c['difference']:+.0%} ± {hw}, p = {c['p']:.3g}).")
    lines += ["", "| number | mean ± 95 % t-interval | n |", "|---|---|---|"]
    for k, v in summary["numbers"].items():
        hw = "∞" if v["half_width"] is None else f"{v['half_width']:.3f}"
        lines.append(f"| {k} | {v['mean']:.3f} ± {hw} | {v['n']} |")
    lines += ["", "Runs: " + ", ".join(f"`{r}`" for r in runs)]
    return "\n".join(lines) + "\n"


@dataclass
class FeaturesSeedsArgs:
    """The features view over seeds: which of its claims replicate across runs of one recipe."""

    runs: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="RUN ...")] = tyro.MISSING
    """Run folders, each with interp/features/features.json (one per seed of the same recipe)."""
    out: str | None = None
    """Write the page here (markdown) and its JSON beside it; an existing file is never overwritten."""


def parse_args(argv: list[str]) -> FeaturesSeedsArgs:
    """The flags (tyro), checked before anything is read: one ConfigError line naming the field."""
    args = parse_dataclass(FeaturesSeedsArgs, argv, default=None, prog="python -m rlhf_scratch.studies.features_seeds",
                           description=" ".join(FeaturesSeedsArgs.__doc__.split()))
    if not args.runs:
        raise ConfigError("runs: give at least one run folder")
    if args.out and Path(args.out).exists():
        raise ConfigError(f"out: {args.out} exists; not overwritten")
    return args


def run(args: FeaturesSeedsArgs) -> int:
    """Read each run's features.json, print the page, and write it (with its JSON) to --out."""
    runs = [Path(r) for r in args.runs]
    try:
        rows = [read_run(r) for r in runs]
    except json.JSONDecodeError as e:
        raise ConfigError(f"features.json: not JSON ({e})") from None
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None
    summary = summarise(rows)
    page = report(runs, summary)
    print(page)
    if args.out:
        out = Path(args.out)
        out.write_text(page)
        out.with_suffix(".json").write_text(json.dumps({"runs": [str(r) for r in runs], "per_run": rows, **summary},
                                                       indent=1, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command: `command()` owns its one-line errors and exit codes."""
    return command(parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
