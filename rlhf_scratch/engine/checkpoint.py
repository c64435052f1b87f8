"""Checkpoints that survive a crash at any instant, and the state that makes resume bit-exact.

    run_dir/checkpoints/
        phase-0004/checkpoint.pt     one plain dict (nanoGPT's pattern), see `capture_state`
        phase-0008/checkpoint.pt
        latest                       "phase-0008": written last, atomically

A checkpoint is written into a temporary folder, flushed to disk, then renamed into place with
`os.replace` (atomic on POSIX); only then is `latest` replaced (again write-then-rename). A crash
or `kill -9` at any instant therefore leaves either the previous checkpoint as `latest` or the
new one — never a half-written file under a final name. Reading falls back to the previous
checkpoint, saying so, if the newest one is unreadable.

Bit-exact resume on CPU needs every source of randomness and every piece of mutable state: the
weights, the optimizer moments and step counts, the scheduler, the phase counter, the prompt
iterator's position, the controllers (adaptive KL, early stopping), and the RNG states of
python, numpy and torch (CPU and CUDA).
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from rlhf_scratch.engine.runs import CHECKPOINTS_DIR, POLICY_FILE, list_checkpoints, read_status

LATEST_FILE = "latest"
CHECKPOINT_FILE = "checkpoint.pt"


class CheckpointError(ValueError):
    """No usable checkpoint (one-line message naming the folder)."""


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def checkpoint_name(phase: int) -> str:
    return f"phase-{phase:04d}"


def save_checkpoint(run_dir: Path, phase: int, state: dict, keep: int) -> Path:
    """Write `state` as checkpoints/phase-XXXX/ atomically, point `latest` at it, keep the last `keep`."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    root.mkdir(exist_ok=True)
    final = root / checkpoint_name(phase)
    tmp = root / f".{final.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        with open(tmp / CHECKPOINT_FILE, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
    except (OSError, RuntimeError) as e:  # disk full, read-only, quota: the previous checkpoint stays
        shutil.rmtree(tmp, ignore_errors=True)
        reason = getattr(e, "strerror", None) or str(e).splitlines()[0]
        raise CheckpointError(f"checkpoint: cannot write {final} ({reason}); the previous checkpoint is intact") from None
    if final.exists():  # a checkpoint of this phase from an earlier, interrupted attempt
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    _atomic_write_text(root / LATEST_FILE, final.name + "\n")
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_latest_checkpoint(run_dir: Path, say=print) -> dict:
    """The newest readable checkpoint's state; an unreadable one is skipped, saying so."""
    found = list_checkpoints(run_dir)
    if not found:
        raise CheckpointError(f"resume: {run_dir} has no checkpoints (was it saved with --save-every?)")
    latest_file = Path(run_dir) / CHECKPOINTS_DIR / LATEST_FILE
    if latest_file.is_file():  # a checkpoint newer than `latest` was not finished being announced
        latest = latest_file.read_text().strip()
        found = [p for p in found if p.name <= latest] or found
    for path in reversed(found):
        try:
            return torch.load(path / CHECKPOINT_FILE, map_location="cpu", weights_only=False)
        except Exception as e:  # truncated, corrupt or missing file
            say(f"resume: {path} is unreadable ({type(e).__name__}); falling back to the previous checkpoint")
    if read_status(run_dir).get("status") == "finished" and (Path(run_dir) / POLICY_FILE).is_file():
        raise CheckpointError(
            f"resume: {run_dir} finished, but its only checkpoint is unreadable, so it cannot be continued "
            f"(its {POLICY_FILE} is intact: sample, export and interpret it as it is); to train on from its weights, "
            f"start a new run: python -m rlhf_scratch.export {run_dir} OUT, then train ... --model OUT")
    raise CheckpointError(f"resume: no readable checkpoint in {Path(run_dir) / CHECKPOINTS_DIR}")
