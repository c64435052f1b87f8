"""The kill -9 sweep (tests/kill_sweep.py): long commands killed at seeded random instants and
continued as their docs and error lines say end in the folder an uninterrupted run leaves.

Which bug turns each red: a resume that logs a phase or step twice or skips one, a metrics window
or a due log line not kept in the checkpoint (the reward model's line after a resume averaged other
steps than the uninterrupted run's), a checkpoint or metrics line half-written, a lock left held,
a temporary folder left behind, a folder that neither --resume nor the starting command accepts."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]  # tests/: kill_sweep.py


def kill_sweep():
    spec = importlib.util.spec_from_file_location("kill_sweep", HERE / "kill_sweep.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_ppo_run_killed_once_continues_to_the_uninterrupted_runs_folder(tmp_path):
    results = kill_sweep().sweep(["train-ppo"], instants=1, seed=3, root=tmp_path, say=lambda line: None)
    assert [r["problems"] for r in results] == [[]], results


@pytest.mark.slow
def test_every_long_command_killed_continues_to_the_uninterrupted_runs_folder(tmp_path):
    ks = kill_sweep()
    results = ks.sweep(list(ks.CASES), instants=1, seed=5, root=tmp_path, say=lambda line: None)
    assert {r["case"]: r["problems"] for r in results} == {name: [] for name in ks.CASES}, results


def test_a_folder_killed_before_its_config_is_refused_with_the_way_to_start_over(tmp_path, capsys):
    """Killed between taking the lock and writing config.json: the folder holds only train.lock. Both
    `--resume` and the command that began it say to remove it and start again (before: "not found"
    from one and "not empty" from the other, with no way out)."""
    from rlhf_scratch.commands.reward_model import main as reward_model_main
    from rlhf_scratch.commands.train import main as train_main

    run = tmp_path / "run"
    run.mkdir()
    (run / "train.lock").write_text(f"{os.getpid() + 10**6}\n")  # no live holder: the lock is not taken
    assert train_main(["--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "stopped before it wrote config.json" in err and f"rm -r {run}" in err
    assert train_main(["periods", "--total-phases", "1", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "stopped before it wrote config.json" in err and f"rm -r {run}" in err
    assert reward_model_main(["--resume", str(run)]) == 2
    assert "stopped before it wrote config.json" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == ["train.lock"], "a refused command touches nothing"


@pytest.mark.slow
def test_a_multi_turn_run_killed_in_the_middle_resumes_bit_exact(tmp_path):
    """Issue 58's "Done when": a run whose episodes call the calculator (kill_sweep's train-calculator case), SIGKILLed
    once phase 3 of 8 is checkpointed (status.json says so: the kill lands in the middle, not at start-up), then
    `--resume RUN`: the uninterrupted run's metrics and weights, bit for bit, and calls in every phase."""
    ks = kill_sweep()
    case, shared = ks.CASES["train-calculator"], tmp_path / "shared"
    ks.prepare_shared(shared, [case.name])
    code, _, out = ks.run_to_end(case.start(tmp_path / "reference", shared))
    assert code == 0, out
    run = tmp_path / "killed"
    proc = subprocess.Popen(case.start(run, shared), env=ks.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    try:
        while not (run / "status.json").is_file() or (json.loads((run / "status.json").read_text()).get("phase") or 0) < 3:
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended, or reached no phase 3 in 180 s"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    logged = len((run / "metrics.jsonl").read_text().splitlines())
    assert proc.returncode == -signal.SIGKILL and 3 <= logged < 8, f"killed after {logged} phases: not in the middle"
    code, _, out = ks.run_to_end(case.cont(run, shared))
    assert code == 0, out
    assert ks.check_folder(case, run, tmp_path / "reference") == []
