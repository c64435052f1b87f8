"""The run folder: what a training run writes, and `load_run` to read it back.

    runs/<task>-<YYYYmmdd-HHMMSS>/
        config.json      the RLHFArgs of the run (all fields)
        metrics.jsonl    one JSON object per phase (see trainer.PHASE_METRICS)
        samples.md       the sample tables printed during training
        curves.png       reward and KL per phase
        policy.pt        state_dict of the tuned TransformerWithValueHead (trunk + value head)

The reference model is not copied: it is `loading.load_lm(config.model)`, the untouched model
the run started from. `load_run` rebuilds both.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformer_lens import HookedTransformer

from rlhf_scratch.config import RLHFArgs
from rlhf_scratch.loading import load_lm
from rlhf_scratch.model import TransformerWithValueHead

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.md"
CURVES_FILE = "curves.png"
POLICY_FILE = "policy.pt"


class RunFolderError(ValueError):
    """A run folder that is missing, unreadable or would be overwritten (one-line message)."""


def new_run_dir(args: RLHFArgs, root: str | Path = "runs") -> Path:
    """Create the run folder: `args.run_dir`, or `root/<task>-<timestamp>`. Never reuse a
    non-empty folder, so no earlier run is overwritten."""
    if args.run_dir is not None:
        path = Path(args.run_dir)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path(root) / f"{args.task}-{args.direction}-{stamp}"
        n = 1
        while path.exists():
            n += 1
            path = Path(root) / f"{args.task}-{args.direction}-{stamp}-{n}"
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise RunFolderError(f"run_dir: {path} exists and is not empty; choose another --run-dir")
    path.mkdir(parents=True, exist_ok=True)
    (path / CONFIG_FILE).write_text(json.dumps(args.to_dict(), indent=2) + "\n")
    return path


def append_metrics(run_dir: Path, metrics: dict[str, float | int]) -> None:
    """Append one phase's metrics as a JSON line."""
    with open(run_dir / METRICS_FILE, "a") as f:
        f.write(json.dumps(metrics) + "\n")


def read_metrics(run_dir: str | Path) -> list[dict[str, float | int]]:
    """All phases' metrics of a run, in order."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise RunFolderError(f"{path}: no metrics file (is this a run folder?)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def save_run_policy(run_dir: str | Path, policy: TransformerWithValueHead) -> Path:
    """Save the tuned policy (trunk + value head) as `policy.pt` in the run folder."""
    path = Path(run_dir) / POLICY_FILE
    torch.save({k: v.detach().cpu() for k, v in policy.state_dict().items()}, path)
    return path


@dataclass
class LoadedRun:
    policy: TransformerWithValueHead
    """The tuned policy; `policy.base` is the tuned HookedTransformer."""
    reference: HookedTransformer
    """The model the run started from, untouched."""
    args: RLHFArgs
    path: Path


def load_args(run_dir: str | Path) -> RLHFArgs:
    """The RLHFArgs saved in a run folder."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise RunFolderError(f"{path}: not found (is {run_dir} a run folder?)")
    try:
        return RLHFArgs.from_dict(json.loads(path.read_text()))
    except (json.JSONDecodeError, ValueError) as e:
        raise RunFolderError(f"{path}: unreadable config ({e})") from None


def load_run(run_dir: str | Path, device: str = "cpu") -> LoadedRun:
    """Rebuild the tuned policy and the reference model of a finished run."""
    run_dir = Path(run_dir)
    args = load_args(run_dir)
    weights = run_dir / POLICY_FILE
    if not weights.is_file():
        raise RunFolderError(f"{weights}: not found (did the run finish with save_model on?)")
    reference = load_lm(args.model, device=device).eval()
    policy = TransformerWithValueHead(load_lm(args.model, device=device), args.detach_value_head)
    policy.load_state_dict(torch.load(weights, map_location=device, weights_only=True))
    return LoadedRun(policy=policy.eval(), reference=reference, args=args, path=run_dir)
