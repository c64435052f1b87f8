"""The run folder as a new user meets it: one owner (a lock), a status that advances every phase,
what rewarded the run, a failure that leaves a checkpoint, and advice that fits the state."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rlhf_scratch.algorithms.ppo import RLHFTrainer
from rlhf_scratch.config import ConfigError, make_args
from rlhf_scratch.engine.runs import (
    CONFIG_FILE,
    LOCK_FILE,
    RunFolderError,
    lock_run,
    new_run_dir,
    next_step,
    read_metrics,
    read_status,
    write_status,
)

SMALL = dict(batch_size=8, num_minibatches=2, batches_per_learning_phase=1, gen_len=6, warmup_steps=1,
             base_lr=1e-3, threads=1, seed=3)
CLI_SMALL = ["--batch-size", "8", "--num-minibatches", "2", "--gen-len", "6", "--threads", "1"]


def small_args(run_dir, **overrides):
    return make_args("tiny", **{**SMALL, "run_dir": str(run_dir), **overrides})


calls = {"n": 0, "fail_at": None}


def count_the(prompts, completions, **kwargs):
    """A custom reward (TRL's contract) that can be told to raise at its n-th call (= phase)."""
    calls["n"] += 1
    if calls["n"] == calls["fail_at"]:
        raise RuntimeError("reward server unreachable")
    return [float(c.count(" the")) + 0.01 * len(c) for c in completions]


@pytest.fixture(autouse=True)
def _reset_calls():
    calls.update(n=0, fail_at=None)


def test_run_folder_names_carry_the_algorithm(tmp_path):
    for algo in ("ppo", "rloo", "online_dpo"):
        path = new_run_dir(make_args("tiny", algo=algo), root=tmp_path)
        assert path.name.startswith(f"sentiment-pos-{algo}-"), path.name


def test_status_advances_every_phase_while_the_lock_names_the_owner(tmp_path, one_thread):
    seen = []

    def reward_that_looks(prompts, completions, **kwargs):  # called once per phase, during its rollout
        seen.append(read_status(tmp_path / "run"))
        return [0.0] * len(completions)

    RLHFTrainer(small_args(tmp_path / "run", total_phases=3), reward_fn=reward_that_looks, quiet=True).train()
    assert [(s["status"], s["phase"], s["total_phases"]) for s in seen] == [("running", 0, 3), ("running", 1, 3),
                                                                           ("running", 2, 3)]
    assert {s["pid"] for s in seen} == {os.getpid()}, "the lock holder is this process"
    final = read_status(tmp_path / "run")
    assert (final["status"], final["phase"]) == ("finished", 3)


def test_a_reward_exception_leaves_a_checkpoint_of_the_last_phase_a_failed_status_and_resumes_bit_exact(
        tmp_path, one_thread):
    straight = RLHFTrainer(small_args(tmp_path / "a", total_phases=3), reward_fn=count_the, quiet=True)
    straight.train()

    calls.update(n=0, fail_at=2)  # raises in phase 2's rollout; save_every is 10: no periodic checkpoint
    failing = RLHFTrainer(small_args(tmp_path / "b", total_phases=3), reward_fn=count_the, quiet=True)
    with pytest.raises(RuntimeError, match="^reward server unreachable\n") as err:
        failing.train()
    status = read_status(tmp_path / "b")
    assert (status["status"], status["phase"], status["error"]) == (
        "failed", 1, "RuntimeError: reward server unreachable")
    assert [p.name for p in (tmp_path / "b" / "checkpoints").iterdir() if p.name.startswith("phase")] == ["phase-0001"]
    hint = err.value.__notes__[0]
    assert "resume it from phase 1 in Python with the same reward (python " in hint and "count_the" in hint, hint

    resumed = RLHFTrainer(small_args(tmp_path / "b", total_phases=3), reward_fn=count_the, quiet=True)
    resumed.train(tmp_path / "b", resume=True)
    assert [m["phase"] for m in read_metrics(tmp_path / "b")] == [1, 2, 3]
    assert read_status(tmp_path / "b")["status"] == "finished"
    for name, tensor in straight.policy.state_dict().items():
        assert torch.equal(tensor, resumed.policy.state_dict()[name]), f"{name}: the checkpoint was not phase 1's"


def test_a_custom_reward_is_recorded_and_a_command_line_resume_is_refused(tmp_path, one_thread, capsys):
    from rlhf_scratch.commands import train
    from rlhf_scratch.commands.sample import main as sample_main

    run = tmp_path / "custom"
    RLHFTrainer(small_args(run, total_phases=1), reward_fn=count_the, quiet=True).train()
    rewarded = json.loads((run / CONFIG_FILE).read_text())["rewarded_by"]
    assert rewarded["reward"].startswith("python ") and rewarded["reward"].endswith("test_run_folder.count_the")
    assert rewarded["judge"] is None
    metrics_before = (run / "metrics.jsonl").read_text()

    assert train.main(["--resume", str(run), "--total-phases", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"error: resume: {run} was rewarded by python ")
    assert "which the command line cannot rebuild; resume it from Python with the same function: RLHFTrainer(" in err
    assert (run / "metrics.jsonl").read_text() == metrics_before, "the refused resume touched nothing"

    with pytest.raises(ConfigError, match="leaves none to run; give a larger --total-phases"):
        RLHFTrainer(small_args(run, total_phases=1), reward_fn=count_the, quiet=True).train(run, resume=True)
    with pytest.raises(ConfigError, match="was rewarded by .*count_the.*; resume it with the same reward function"):
        RLHFTrainer(small_args(run, total_phases=2), quiet=True).train(run, resume=True)  # the task's reward
    RLHFTrainer(small_args(run, total_phases=2), reward_fn=count_the, quiet=True).train(run, resume=True)
    assert [m["phase"] for m in read_metrics(run)] == [1, 2]

    assert sample_main([str(run), "x", "-n", "1", "--gen-len", "2"]) == 0
    shown = capsys.readouterr().out.splitlines()[0]
    assert shown.startswith("reward shown: task sentiment, NOT the run's own: it was rewarded by python "), shown


def _hold_lock_in_a_child(run_dir):
    """A process that owns `run_dir` as the trainer does, until killed."""
    code = (f"import sys, time; from rlhf_scratch.engine.runs import lock_run; lock = lock_run({str(run_dir)!r}); "
            "print('locked', flush=True); time.sleep(120)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "locked"
    return child


def test_running_becomes_lost_when_the_owner_is_killed_9_and_the_advice_follows(tmp_path):
    run = new_run_dir(make_args("tiny"), tmp_path / "r")
    write_status(run, "running", 2, 5)
    (run / "checkpoints" / "phase-0002").mkdir(parents=True)
    child = _hold_lock_in_a_child(run)
    try:
        status = read_status(run)
        assert (status["status"], status["pid"]) == ("running", child.pid)
        assert next_step(run) == (f"the run is still training (process {child.pid}, phase 2/5); wait for it to finish, "
                                  f"or stop it with `kill -INT {child.pid}` (it saves a checkpoint) and resume it later")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert read_status(run)["status"] == "lost", "kill -9 leaves no stale lock"
    assert next_step(run) == ("the run stopped without a word after phase 2/5 (killed, or the machine stopped); "
                              f"resume it from phase 2 with: python -m rlhf_scratch.train --resume {run}")
    assert (run / LOCK_FILE).is_file()


def _train_cmd(run_dir, *extra):
    return [sys.executable, "-m", "rlhf_scratch.train", "periods", "--run-dir", str(run_dir), *CLI_SMALL, *extra]


def _wait_for_phase(run_dir, phase, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if (run_dir / "status.json").is_file() and (read_status(run_dir).get("phase") or 0) >= phase:
            return
        time.sleep(0.05)
    raise AssertionError(f"phase {phase} never came: {proc.poll()}")


@pytest.mark.slow
def test_a_live_run_is_refused_by_resume_export_sample_report_and_compare_and_finishes_intact(tmp_path, capsys):
    """Also the console: a table at the first and last phase only, a bar that reaches 6/6, and `done`
    saying where the run is, the two commands to look at it, and that one checkpoint is kept."""
    from interp.report import main as report_main
    from rlhf_scratch.commands import export, sample
    from rlhf_scratch.studies.compare import train_command
    from rlhf_scratch.studies.runner import Unit

    run = tmp_path / "live"
    live = subprocess.Popen(_train_cmd(run, "--total-phases", "6", "--save-every", "1"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    _wait_for_phase(run, 1, live)
    live.send_signal(signal.SIGSTOP)  # frozen, alive and holding its lock, for as long as the checks take
    resume = subprocess.Popen([sys.executable, "-m", "rlhf_scratch.train", "--resume", str(run)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for command, argv in ((export.main, [str(run), str(tmp_path / "out")]), (sample.main, [str(run), "x"]),
                          (report_main, [str(run)])):
        assert command(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"the run is still training (process {live.pid}" in err, err
        assert "--resume" not in err, "no advice to resume a run that is running"
    with pytest.raises(RuntimeError, match=f"run ppo-s1: the run is still training \\(process {live.pid}"):
        train_command(Unit("ppo", 1), "periods", run, [])
    _, resume_err = resume.communicate(timeout=300)
    live.send_signal(signal.SIGCONT)
    assert resume.returncode == 2
    assert resume_err.startswith(f"error: resume: {run}: the run is still training (process {live.pid}, phase ")
    assert "\n" not in resume_err.strip() and f"kill -INT {live.pid}" in resume_err

    out, err = live.communicate(timeout=600)
    assert live.returncode == 0, err[-2000:]
    assert [m["phase"] for m in read_metrics(run)] == [1, 2, 3, 4, 5, 6], "one writer: no phase twice or out of order"
    assert read_status(run)["status"] == "finished"
    assert [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("phase")] == ["phase-0006"]
    assert "phase 1 samples" in out and "phase 6 samples" in out and "phase 2 samples" not in out
    assert "6/6" in err.split("phases:")[-1], "the bar reaches the total"
    done = out[out.index("done: "):].splitlines()
    assert done[0].startswith(f"done: {run}  (6 phases, reward ") and "checkpoints" in done[0] and "MB" in done[0]
    assert done[1:] == [f"  look inside:  python -m interp.report {run}", f"  sample it:    python -m rlhf_scratch.sample {run}"]


@pytest.mark.slow
def test_the_pasted_resume_hint_works_with_a_space_in_the_run_dir(tmp_path):
    run = tmp_path / "sp ace" / "it's"
    proc = subprocess.Popen(_train_cmd(run, "--total-phases", "3"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    _wait_for_phase(run, 1, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGINT, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert " with: python -m rlhf_scratch.train --resume " in last, last
    pasted = last.split(" with: ", 1)[1]
    assert shlex.split(pasted)[-1] == str(run)
    done = subprocess.run(pasted.replace("python", shlex.quote(sys.executable), 1), shell=True, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [m["phase"] for m in read_metrics(run)] == [1, 2, 3]


def test_lock_run_refuses_a_second_owner_in_one_line(tmp_path):
    run = new_run_dir(make_args("tiny"), tmp_path / "r")
    child = _hold_lock_in_a_child(run)
    try:
        with pytest.raises(RunFolderError, match=f"^{run}: the run is still training \\(process {child.pid}"):
            lock_run(run)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert not Path(run / "status.json").exists()


def test_rewarded_by_names_the_task_a_python_function_and_a_judge():
    from rlhf_scratch.reward.judges import make_judge
    from rlhf_scratch.reward.tasks import make_reward_fn, rewarded_by

    args = make_args("tiny", algo="online_dpo", task="vader", judge="vader")
    assert rewarded_by(args, make_reward_fn(args), make_judge("vader", "pos")) == {"reward": "task vader",
                                                                                  "judge": "judge vader"}
    other = make_args("tiny", task="vader", direction="neg")
    assert rewarded_by(args, make_reward_fn(other))["reward"] == "python rlhf_scratch.reward.functions.reward_fn_vader", \
        "the task's reward built for other args (direction neg) is not this run's"
    assert rewarded_by(args, count_the, make_judge("vader", "neg")) == {
        "reward": f"python {count_the.__module__}.count_the", "judge": "python rlhf_scratch.reward.judges.VaderJudge"}


def test_sizes_under_ten_megabytes_keep_two_figures(tmp_path):
    """A LoRA run's adapters (a few hundred kB) read `0.31 MB`, not `0 MB`."""
    from rlhf_scratch.engine.runs import size_text

    (tmp_path / "small.pt").write_bytes(b"\0" * 310_000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "big.pt").write_bytes(b"\0" * 4_200_000)
    assert size_text(tmp_path / "small.pt") == "0.31 MB"
    assert size_text(tmp_path / "sub") == "4.2 MB"
    assert size_text(tmp_path) == "4.5 MB", "a folder counts every file below it"


@pytest.mark.parametrize("err, status", [(BrokenPipeError(32, "Broken pipe"), "interrupted"),
                                         (KeyboardInterrupt(), "interrupted"), (ValueError("a bug"), "failed")])
def test_a_run_whose_output_closed_is_interrupted_not_failed(tmp_path, err, status):
    """A study killed mid-run closes its runs' stderr: their next write raises BrokenPipeError. That
    run was interrupted (the same study command continues it), not failed; a bug is still a failure."""
    from rlhf_scratch.engine.lifecycle import RunLife
    from rlhf_scratch.engine.runs import read_status

    (tmp_path / "config.json").write_text('{"algo": "ppo", "task": "sentiment"}')
    life = RunLife(tmp_path, 3, 1, state_now=lambda: {"w": 1}, moved=lambda: 0)
    with pytest.raises(type(err)):
        with life:
            life.start(0, {"phase": 0})
            life.completed(1, {"phase": 1}, save=False)
            raise err
    saved = read_status(tmp_path)
    assert saved["status"] == status and saved["phase"] == 1, saved


def test_a_failure_whose_weights_cannot_be_read_is_still_recorded_failed(tmp_path, capsys):
    """Through Ray the weights are the workers': after a worker died, reading them for the failure's
    checkpoint raises too. The run is still marked failed with the FIRST error's line and no checkpoint
    is written (the older one stands); the first error is what comes out."""
    from rlhf_scratch.engine.lifecycle import RunLife
    from rlhf_scratch.engine.runs import read_status

    def dead_worker():
        raise RuntimeError("actor_rollout_ref rank 0: the worker process died (weights_state)")

    (tmp_path / "config.json").write_text('{"algo": "ppo", "task": "sentiment"}')
    life = RunLife(tmp_path, 3, 1, state_now=dead_worker, moved=lambda: 0)
    with pytest.raises(ValueError, match="^the reward function raised"):
        with life:
            life.start(0, {"phase": 0})
            life.completed(1, {"phase": 1}, save=False)
            raise ValueError("the reward function raised")
    saved = read_status(tmp_path)
    assert (saved["status"], saved["phase"], saved["error"]) == ("failed", 1, "ValueError: the reward function raised")
    assert not (tmp_path / "checkpoints").exists()
    assert "could not read the state of phase 1 (RuntimeError: actor_rollout_ref rank 0" in capsys.readouterr().out  # (tqdm.write)


def test_a_run_killed_after_its_last_checkpoint_is_finished_by_resume(tmp_path, one_thread):
    """kill -9 after the last phase's checkpoint but before the run finished (policy.pt, status):
    `--resume` finishes it from that checkpoint — the same policy as the uninterrupted run's — instead
    of refusing for lack of phases to run (the kill -9 sweep found it). A finished run still refuses."""
    from rlhf_scratch.engine.runs import STATUS_FILE

    run = tmp_path / "run"
    RLHFTrainer(small_args(run, total_phases=2), quiet=True).train()
    finished_policy = torch.load(run / "policy.pt", weights_only=True)
    metrics = (run / "metrics.jsonl").read_text()
    (run / "policy.pt").unlink()
    status = json.loads((run / STATUS_FILE).read_text())
    (run / STATUS_FILE).write_text(json.dumps({**status, "status": "running", "pid": 2**22 + 7}))  # a dead owner: lost
    assert read_status(run)["status"] == "lost"
    RLHFTrainer(small_args(run, total_phases=2), quiet=True).train(run, resume=True)
    assert read_status(run)["status"] == "finished" and (run / "metrics.jsonl").read_text() == metrics
    for name, tensor in torch.load(run / "policy.pt", weights_only=True).items():
        assert torch.equal(tensor, finished_policy[name]), name
    with pytest.raises(ConfigError, match="leaves none to run; give a larger --total-phases"):
        RLHFTrainer(small_args(run, total_phases=2), quiet=True).train(run, resume=True)
