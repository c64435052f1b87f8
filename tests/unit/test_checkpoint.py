"""Checkpoints: atomic writes, `latest` written last, fallback past a corrupt one, RNG round trip."""

import random

import numpy as np
import pytest
import torch

from rlhf_scratch.engine import checkpoint as ck


def test_save_keeps_the_newest_and_points_latest_at_it(tmp_path):
    for phase in (1, 2, 3):
        ck.save_checkpoint(tmp_path, phase, {"phase": phase, "w": torch.full((2,), float(phase))}, keep=2)
    names = [p.name for p in ck.list_checkpoints(tmp_path)]
    assert names == ["phase-0002", "phase-0003"], "keep=2 keeps the two newest"
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "phase-0003"
    assert ck.load_latest_checkpoint(tmp_path)["phase"] == 3


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_one_saying_so(tmp_path):
    ck.save_checkpoint(tmp_path, 1, {"phase": 1}, keep=3)
    ck.save_checkpoint(tmp_path, 2, {"phase": 2}, keep=3)
    path = tmp_path / "checkpoints" / "phase-0002" / "checkpoint.pt"
    path.write_bytes(path.read_bytes()[:20])  # truncated, as by a full disk
    said = []
    assert ck.load_latest_checkpoint(tmp_path, said.append)["phase"] == 1
    assert len(said) == 1 and "phase-0002 is unreadable" in said[0] and "falling back" in said[0]


def test_a_crash_mid_write_leaves_the_previous_checkpoint_as_latest(tmp_path):
    ck.save_checkpoint(tmp_path, 1, {"phase": 1}, keep=3)
    # what a kill -9 during the next write leaves: a temporary folder with a partial file
    tmp = tmp_path / "checkpoints" / ".phase-0002.tmp"
    tmp.mkdir()
    (tmp / "checkpoint.pt").write_bytes(b"\x80\x02partial")
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["phase-0001"], "a .tmp folder is not a checkpoint"
    assert ck.load_latest_checkpoint(tmp_path)["phase"] == 1
    # ... and a kill between the rename and the `latest` update: the renamed one is complete, but
    # `latest` still names phase 1, which is what resume uses
    ck.save_checkpoint(tmp_path, 2, {"phase": 2}, keep=3)
    assert not tmp.exists(), "the next save of that phase replaces the stale temporary folder"
    (tmp_path / "checkpoints" / "latest").write_text("phase-0001\n")
    assert ck.load_latest_checkpoint(tmp_path)["phase"] == 1


def test_a_finished_runs_only_checkpoint_unreadable_says_it_cannot_be_continued_and_how(tmp_path):
    """A finished run keeps one checkpoint; if that one is truncated, --resume --total-phases cannot
    extend the run: one line says so, that policy.pt is intact, and how to train on from it."""
    ck.save_checkpoint(tmp_path, 4, {"phase": 4}, keep=1)
    path = tmp_path / "checkpoints" / "phase-0004" / "checkpoint.pt"
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(ck.CheckpointError, match=r"^resume: no readable checkpoint in"):
        ck.load_latest_checkpoint(tmp_path, lambda _: None)  # not finished: the plain line
    (tmp_path / "status.json").write_text('{"status": "finished", "phase": 4}')
    (tmp_path / "policy.pt").write_bytes(b"weights")
    with pytest.raises(ck.CheckpointError) as e:
        ck.load_latest_checkpoint(tmp_path, lambda _: None)
    line = str(e.value)
    assert "\n" not in line and "finished, but its only checkpoint is unreadable, so it cannot be continued" in line
    assert "policy.pt is intact" in line and f"python -m rlhf_scratch.export {tmp_path} OUT" in line


def test_no_checkpoints_is_one_line(tmp_path):
    with pytest.raises(ck.CheckpointError, match=r"^resume: .* has no checkpoints \(was it saved with --save-every\?\)$"):
        ck.load_latest_checkpoint(tmp_path)


def test_rng_state_round_trip():
    state = ck.rng_state()
    a = (random.random(), np.random.rand(), torch.rand(3))
    ck.set_rng_state(state)
    b = (random.random(), np.random.rand(), torch.rand(3))
    assert a[0] == b[0] and a[1] == b[1] and torch.equal(a[2], b[2])
