"""A worker killed mid-phase (issue 44's "Done when"): `train --controller ray` stops with one line
naming the role and rank, leaves none of Ray's processes behind, and `--resume RUN --controller ray`
finishes the run bit for bit as an uninterrupted run.

The kill is not timed by a sleep. The driver's own records say where it is: status.json reaches
phase 1 only after phase 1's checkpoint was written, and the driver then goes straight into phase 2;
the worker's process title (Ray sets it) reads `ray::WorkerDict.execute_role` while it runs a call.
The test SIGKILLs the worker once both hold, so phase 2 is in flight, and then checks it was: the
run failed at phase 1, with phase 1's line alone in metrics.jsonl.
"""

import json
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch
from processes import run_bounded

from rlhf_scratch.config import make_args, registry
from rlhf_scratch.engine.loop import without_timings

SEED = 3  # not the default (1): the flag reaches both runs
FLAGS = dict(total_phases=3, batch_size=8, num_minibatches=2, gen_len=6, warmup_steps=1, seed=SEED)
COLOCATED = "ray::WorkerDict"  # the process title of a colocated worker (every role in one process per rank)
DIED = re.compile(r"^error: (actor_rollout_ref|rm) rank 0: the worker process died \((\w+)\)$")


def train(*args: str) -> list[str]:
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in FLAGS.items()]
    return [sys.executable, "-m", "rlhf_scratch.train", *args, *flags, "--save-every", "1", "--keep-checkpoints", "3"]


def status_of(run_dir) -> dict:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):  # not written yet (it is replaced atomically: never half-written)
        return {}


def busy_worker(driver: psutil.Process) -> psutil.Process | None:
    """The driver's colocated worker while it runs a call (its title `ray::WorkerDict.<method>`)."""
    for child in driver.children(recursive=True):
        try:
            title = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if title.startswith(f"{COLOCATED}.") and not title.startswith(f"{COLOCATED}.__init__"):
            return child
    return None


def kill_a_worker_mid_phase_2(run_dir) -> tuple[subprocess.Popen, list[psutil.Process]]:
    """Start the run; once phase 1 is checkpointed and the worker is inside a call, SIGKILL it.
    Returns the driver (still running) and every process it had started."""
    proc = subprocess.Popen(train("sentiment", "--controller", "ray", "--run-dir", str(run_dir)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    driver, deadline = psutil.Process(proc.pid), time.monotonic() + 180
    while True:
        assert proc.poll() is None, f"the run ended before its worker was killed:\n{proc.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, "phase 1 was not checkpointed within 180 s"
        if status_of(run_dir).get("phase") == 1 and (worker := busy_worker(driver)) is not None:
            break
        time.sleep(0.02)
    family = driver.children(recursive=True)
    worker.send_signal(signal.SIGKILL)
    return proc, family


@pytest.mark.slow
def test_a_worker_killed_mid_phase_stops_the_run_in_one_line_and_resume_finishes_it_bit_exact(tmp_path):
    run_dir = tmp_path / "run"
    proc, family = kill_a_worker_mid_phase_2(run_dir)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            for p in [*family, psutil.Process(proc.pid)]:
                p.kill()
    assert proc.returncode == 1, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    lines = err.strip().splitlines()
    line = next((x for x in lines if x.startswith("error: ")), lines[-1])  # the error's line, then what to do next
    assert DIED.match(line), f"not one line naming role, rank and the death: {line!r}"
    assert lines[-1].endswith(f"resume it from phase 1 with: python -m rlhf_scratch.train --resume {run_dir}"), lines[-1]
    status = status_of(run_dir)
    assert (status["status"], status["phase"], status["error"]) == ("failed", 1, f"WorkerError: {line.removeprefix('error: ')}"), \
        "status.json: failed at the last checkpoint (phase 1), with the command's line"
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 1, "the kill came in phase 2: only phase 1 logged"

    deadline = time.monotonic() + 15  # the driver's reaper and Ray's own shutdown end them
    while (left := [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"left running after the worker's death: {[' '.join(p.cmdline())[:60] for p in left]}"

    resumed = run_bounded(train("--resume", str(run_dir), "--controller", "ray"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert status_of(run_dir)["status"] == "finished"

    # the uninterrupted run, in this process (tests/integration/test_controller.py: the controller's equals it)
    args = make_args("tiny", **FLAGS, save_every=1, keep_checkpoints=3)
    trainer = registry.get(args.algo).trainer_class()(args, quiet=True)
    initial = {k: v.detach().clone() for k, v in trainer.policy.state_dict().items()}
    expected_dir = trainer.train(tmp_path / "uninterrupted")
    got, expected = ([json.loads(s) for s in (d / "metrics.jsonl").read_text().splitlines()] for d in (run_dir, expected_dir))
    assert [m["phase"] for m in got] == [1, 2, 3]
    assert [without_timings(m) for m in got] == [without_timings(m) for m in expected]
    saved, uninterrupted = torch.load(run_dir / "policy.pt"), torch.load(expected_dir / "policy.pt")
    assert saved.keys() == uninterrupted.keys()
    moved = [k for k in saved if not torch.equal(saved[k], uninterrupted[k])]
    assert not moved, f"the resumed run's weights differ from the uninterrupted run's: {moved[:5]}"
    assert any(not torch.equal(saved[k], initial[k]) for k in initial), "the run trained: not an equality of untouched weights"
