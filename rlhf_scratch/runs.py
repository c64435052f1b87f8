"""The run folder: what a training run writes, and `load_run` to read it back.

    runs/<task>-<direction>-<YYYYmmdd-HHMMSS>/
        config.json      the algorithm and every field of its args
        metrics.jsonl    one JSON object per phase (see loop.SHARED_METRICS and each trainer's)
        samples.md       the sample tables printed during training
        curves.png       reward and KL per phase
        policy.pt        state_dict of the tuned policy: PPO's TransformerWithValueHead (trunk +
                         value head), or the HookedTransformer for RLOO and Online DPO
        status.json      {"status": running | finished | interrupted, "phase": completed phases}
        checkpoints/     phase-XXXX/checkpoint.pt and `latest` (see checkpoint.py)

The reference model is not copied: it is `loading.load_lm(config.model)`, the untouched model
the run started from. `load_run` rebuilds both.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformer_lens import HookedTransformer

from rlhf_scratch.config import CommonArgs, ConfigError
from rlhf_scratch.loading import load_lm
from rlhf_scratch.model import TransformerWithValueHead

CONFIG_FILE = "config.json"
STATUS_FILE = "status.json"
METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.md"
CURVES_FILE = "curves.png"
POLICY_FILE = "policy.pt"


class RunFolderError(ConfigError):
    """A run folder that is missing, unreadable or would be overwritten (one-line message)."""


def check_new_run_dir(path: str | Path | None) -> None:
    """Refuse a run folder that is a file or a non-empty folder (None: an automatic name, fine)."""
    if path is None:
        return
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RunFolderError(f"run_dir: {path} is a file, not a folder; choose another --run-dir")
    if path.exists() and any(path.iterdir()):
        raise RunFolderError(f"run_dir: {path} exists and is not empty; choose another --run-dir")


def new_run_dir(args: CommonArgs, path: str | Path | None = None, root: str | Path = "runs") -> Path:
    """Create the run folder: `path`, `args.run_dir`, or `root/<task>-<direction>-<timestamp>`.
    Never reuse a non-empty folder, so no earlier run is overwritten."""
    path = path if path is not None else args.run_dir
    if path is not None:
        path = Path(path)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path(root) / f"{args.task}-{args.direction}-{stamp}"
        n = 1
        while path.exists():
            n += 1
            path = Path(root) / f"{args.task}-{args.direction}-{stamp}-{n}"
    check_new_run_dir(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / CONFIG_FILE).write_text(json.dumps(args.to_dict(), indent=2) + "\n")
    except OSError as e:
        raise RunFolderError(f"run_dir: cannot write to {path} ({e.strerror or type(e).__name__})") from None
    return path


def write_status(run_dir: Path, status: str, phase: int) -> None:
    """Record whether the run is running, finished or interrupted (written atomically)."""
    path = Path(run_dir) / STATUS_FILE
    tmp = path.with_name(f".{STATUS_FILE}.tmp")
    tmp.write_text(json.dumps({"status": status, "phase": phase}) + "\n")
    os.replace(tmp, path)


def read_status(run_dir: str | Path) -> dict:
    """The run's status; a run folder from before status files counts as finished if it has a policy."""
    path = Path(run_dir) / STATUS_FILE
    if path.is_file():
        return json.loads(path.read_text())
    return {"status": "finished" if (Path(run_dir) / POLICY_FILE).is_file() else "unknown", "phase": None}


def append_metrics(run_dir: Path, metrics: dict[str, float | int]) -> None:
    """Append one phase's metrics as a JSON line."""
    try:
        with open(run_dir / METRICS_FILE, "a") as f:
            f.write(json.dumps(metrics) + "\n")
    except OSError as e:
        raise RunFolderError(f"run_dir: cannot write {run_dir / METRICS_FILE} ({e.strerror})") from None


def read_metrics(run_dir: str | Path) -> list[dict[str, float | int]]:
    """All phases' metrics of a run, in order."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise RunFolderError(f"{path}: no metrics file (is this a run folder?)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def save_run_policy(run_dir: str | Path, policy: torch.nn.Module) -> Path:
    """Save the tuned policy (PPO: trunk + value head) as `policy.pt` in the run folder."""
    path = Path(run_dir) / POLICY_FILE
    torch.save({k: v.detach().cpu() for k, v in policy.state_dict().items()}, path)
    return path


@dataclass
class LoadedRun:
    policy: TransformerWithValueHead | HookedTransformer
    """The tuned policy: PPO's TransformerWithValueHead, or the HookedTransformer (RLOO, Online DPO)."""
    reference: HookedTransformer
    """The model the run started from, untouched."""
    args: CommonArgs
    path: Path

    @property
    def tuned(self) -> HookedTransformer:
        """The tuned language model, whatever the algorithm."""
        return self.policy.base if isinstance(self.policy, TransformerWithValueHead) else self.policy


def load_args(run_dir: str | Path) -> CommonArgs:
    """The args saved in a run folder (of the class its `algo` names; PPO for older runs)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise RunFolderError(f"{path}: not found (is {run_dir} a run folder?)")
    try:
        return CommonArgs.from_dict(json.loads(path.read_text()))
    except (json.JSONDecodeError, ValueError, TypeError) as e:
        raise RunFolderError(f"{path}: unreadable config ({e})") from None


def load_run(run_dir: str | Path, device: str = "cpu") -> LoadedRun:
    """Rebuild the tuned policy and the reference model of a finished run."""
    run_dir = Path(run_dir)
    args = load_args(run_dir)
    weights = run_dir / POLICY_FILE
    if not weights.is_file():
        status = read_status(run_dir)
        if status["status"] in ("running", "interrupted"):
            raise RunFolderError(f"{run_dir}: the run is {status['status']} after phase {status['phase']} and has no "
                                 f"{POLICY_FILE} yet; finish it with: python -m rlhf_scratch.train --resume {run_dir}")
        raise RunFolderError(f"{weights}: not found (did the run finish with save_model on?)")
    try:
        state = torch.load(weights, map_location=device, weights_only=True)
    except Exception as e:  # truncated, corrupt or not a torch file: one line, no unpickling traceback
        raise RunFolderError(f"{weights}: unreadable ({type(e).__name__}); the file is truncated or not a policy") from None
    reference = load_lm(args.model, device=device).eval()
    lm = load_lm(args.model, device=device)
    policy = TransformerWithValueHead(lm, args.detach_value_head) if args.algo == "ppo" else lm
    try:
        policy.load_state_dict(state)
    except RuntimeError as e:
        raise RunFolderError(f"{weights}: does not fit {type(policy).__name__} of {args.model!r} "
                             f"({str(e).splitlines()[0]})") from None
    return LoadedRun(policy=policy.eval(), reference=reference, args=args, path=run_dir)
