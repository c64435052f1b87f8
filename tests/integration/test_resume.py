"""Runs that survive: an interrupted run resumed from its checkpoint ends bit-identical to one that
was never interrupted; kill -9 at any instant leaves a run folder that resumes."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from toy_algorithm import algorithms, registered, small_settings

from rlhf_scratch.algorithms.ppo import RLHFTrainer
from rlhf_scratch.config import make_args, registry
from rlhf_scratch.engine.loop import TrainingStopped, without_timings
from rlhf_scratch.engine.runs import read_metrics, read_status


def small_args(run_dir, prompts_file, **overrides):
    # k = 2 of 4 phases falls in the middle of the 3-phase warmup
    values = dict(total_phases=4, batch_size=8, num_minibatches=2, batches_per_learning_phase=1, gen_len=6,
                  warmup_steps=3, base_lr=1e-3, save_every=1, keep_checkpoints=2, prompts=str(prompts_file),
                  seed=5, run_dir=str(run_dir), table_every=1)
    return make_args("tiny", **{**values, **overrides})


@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("This movie was really\nI thought the film\nThe acting\nA\nWorst of all,\n")
    return path


def status_and_phase(run_dir):
    status = read_status(run_dir)
    return status["status"], status["phase"]


def without_timing(metrics):
    return [without_timings(m) for m in metrics]


def test_interrupted_and_resumed_run_is_bit_identical(tmp_path, prompts_file, one_thread):
    straight = RLHFTrainer(small_args(tmp_path / "a", prompts_file), quiet=True)
    straight.train(tmp_path / "a")

    interrupted = RLHFTrainer(small_args(tmp_path / "b", prompts_file), quiet=True)
    learn = interrupted.update_actor

    def learn_then_ctrl_c(batch):  # Ctrl-C arrives during phase 2's learning
        stats = learn(batch)
        if interrupted.scheduler.last_epoch == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return stats

    interrupted.update_actor = learn_then_ctrl_c
    with pytest.raises(TrainingStopped, match=r"^interrupted after phase 2 \(SIGINT\); resume it from phase 2 with: "
                                              rf"python -m rlhf_scratch.train --resume {tmp_path / 'b'}$"):
        interrupted.train(tmp_path / "b")  # (Ctrl-C in Python: the message says how to continue)
    assert status_and_phase(tmp_path / "b") == ("interrupted", 2)
    assert not (tmp_path / "b" / "policy.pt").exists()

    resumed = RLHFTrainer(small_args(tmp_path / "b", prompts_file), quiet=True)
    resumed.train(tmp_path / "b", resume=True)
    assert status_and_phase(tmp_path / "b") == ("finished", 4)
    for name, tensor in straight.policy.state_dict().items():
        assert torch.equal(tensor, resumed.policy.state_dict()[name]), f"{name} differs after resume"
    a, b = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert [m["phase"] for m in b] == [1, 2, 3, 4], "no phase duplicated or missing"
    assert without_timing(a) == without_timing(b)
    sections = (tmp_path / "b" / "samples.md").read_text().count("## phase ")
    assert sections == 4


def test_a_separate_critic_resumes_bit_identical(tmp_path, prompts_file, one_thread):
    """PPO's --critic separate: the critic's weights, AdamW and schedule travel in the checkpoint, so a run
    stopped after phase 2 and resumed ends with the policy, the critic and every logged number of the
    uninterrupted run (a checkpoint without the critic would restart it from the initial copy)."""
    def args(run):
        return small_args(tmp_path / run, prompts_file, critic="separate", critic_lr=5e-4, critic_warmup=1)

    straight = RLHFTrainer(args("a"), quiet=True)
    straight.train(tmp_path / "a")
    interrupted = RLHFTrainer(args("b"), quiet=True)
    learn = interrupted.update_actor

    def learn_then_ctrl_c(batch):
        stats = learn(batch)
        if interrupted.scheduler.last_epoch == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return stats

    interrupted.update_actor = learn_then_ctrl_c
    with pytest.raises(TrainingStopped):
        interrupted.train(tmp_path / "b")
    resumed = RLHFTrainer(args("b"), quiet=True)
    resumed.train(tmp_path / "b", resume=True)
    for module in ("policy", "critic"):
        want, got = getattr(straight, module).state_dict(), getattr(resumed, module).state_dict()
        moved = [name for name in want if not torch.equal(want[name], got[name])]
        assert not moved, f"{module}: {moved[:3]} differ after resume"
    assert resumed.critic_scheduler.last_epoch == straight.critic_scheduler.last_epoch == 4
    assert without_timing(read_metrics(tmp_path / "a")) == without_timing(read_metrics(tmp_path / "b"))


def test_a_failure_between_the_critics_step_and_the_policys_leaves_critic_and_policy_of_one_phase(
        tmp_path, prompts_file, one_thread):
    """--critic separate: phase 3 fails after update_critic stepped the critic and before the policy's
    first step. The run's checkpoint (written at phase 2, save_every 2) must still hold the critic and
    the policy of phase 2: the failure's own checkpoint of phase 2 is written only while no optimizer
    of the trainer has stepped since (`Trainer.steps_taken` counts the critic's steps too). Red if
    the critic's steps are not counted: the new critic would be saved under phase 2."""
    from rlhf_scratch.engine.checkpoint import load_latest_checkpoint

    trainer = RLHFTrainer(small_args(tmp_path / "run", prompts_file, critic="separate", critic_lr=5e-4,
                                     total_phases=3, save_every=2), quiet=True)
    at_phase_2 = {}

    class Snapshot:
        METRICS = ()

        def start(self, run_dir, phase): ...

        def after_phase(self, run_dir, phase):
            if phase == 2:
                at_phase_2.update(critic={k: v.clone() for k, v in trainer.critic.state_dict().items()},
                                  policy={k: v.clone() for k, v in trainer.policy.state_dict().items()})
            return {}

    def policy_fails(batch):
        raise RuntimeError("the policy's step failed")

    update_critic = trainer.update_critic

    def critic_then_arm(batch):
        stats = update_critic(batch)
        if trainer.scheduler.last_epoch == 2:  # phase 3: the critic has stepped; now the policy's update fails
            trainer.update_policy = policy_fails
        return stats

    trainer.update_critic = critic_then_arm
    with pytest.raises(RuntimeError, match="the policy's step failed"):
        trainer.train(tmp_path / "run", hooks=[Snapshot()])
    assert read_status(tmp_path / "run")["status"] == "failed"
    saved = load_latest_checkpoint(tmp_path / "run", lambda text: None)
    assert saved["phase"] == 2
    now = trainer.critic.state_dict()
    assert any(not torch.equal(now[k], at_phase_2["critic"][k]) for k in now), "the critic did not step in phase 3"
    for module in ("critic", "policy"):
        stale = [k for k in at_phase_2[module] if not torch.equal(saved[module][k], at_phase_2[module][k])]
        assert not stale, f"the checkpoint of phase 2 holds a {module} of another phase: {stale[:3]}"


def _train_cmd(run_dir, prompts_file, *extra):
    return [sys.executable, "-m", "rlhf_scratch.train", "periods", "--total-phases", "6", "--batch-size", "8",
            "--num-minibatches", "2", "--gen-len", "6", "--save-every", "1", "--prompts", str(prompts_file),
            "--run-dir", str(run_dir), *extra]


def _run_and_kill(cmd, env, ready, delay=0.0, timeout=120):
    """Start `cmd`, wait until `ready()` is true (polling every 2 ms), wait `delay` s, SIGKILL it."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while not ready() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    return proc.wait()


@pytest.mark.slow
def test_kill_9_at_any_instant_leaves_a_run_that_resumes(tmp_path, prompts_file):
    """SIGKILL the trainer while a checkpoint is being written, just after one, and mid-phase;
    after each, `--resume` continues from the latest complete checkpoint."""
    run_dir = tmp_path / "run"
    ckpts = run_dir / "checkpoints"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    resume = [sys.executable, "-m", "rlhf_scratch.train", "--resume", str(run_dir)]

    def writing():  # a checkpoint's temporary folder exists: the write is under way
        return ckpts.is_dir() and any(p.name.endswith(".tmp") for p in ckpts.iterdir())

    # first run: killed as soon as its first checkpoint is complete
    _run_and_kill(_train_cmd(run_dir, prompts_file), env, lambda: (ckpts / "latest").exists())
    seen = {p.name for p in ck_dirs(ckpts)}
    _run_and_kill(resume, env, writing)  # during a checkpoint write
    _run_and_kill(resume, env, lambda: {p.name for p in ck_dirs(ckpts)} != seen, delay=0.0)  # right after a rename
    _run_and_kill(resume, env, lambda: False, delay=0.0, timeout=2.0)  # while loading the models
    logged = len(read_metrics(run_dir))
    _run_and_kill(resume, env, lambda: len(read_metrics(run_dir)) > logged, delay=0.3)  # mid-phase
    final = subprocess.run(resume, env=env, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr[-2000:]
    assert status_and_phase(run_dir) == ("finished", 6)
    assert [m["phase"] for m in read_metrics(run_dir)] == [1, 2, 3, 4, 5, 6], "no phase duplicated or missing"
    assert (run_dir / "policy.pt").is_file()
    assert json.loads((run_dir / "config.json").read_text())["total_phases"] == 6


def ck_dirs(ckpts):
    return [p for p in ckpts.iterdir() if p.name.startswith("phase-")] if ckpts.is_dir() else []


def test_resume_refuses_a_conflicting_flag_and_a_missing_folder(tmp_path, prompts_file, capsys):
    from rlhf_scratch.commands.train import main

    run_dir = tmp_path / "r"
    args = small_args(run_dir, prompts_file, total_phases=1)
    RLHFTrainer(args, quiet=True).train(run_dir)
    before = (run_dir / "metrics.jsonl").read_text()
    assert main(["--resume", str(run_dir), "--kl-coef", "0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: resume: --beta 0.5 conflicts with the run's saved beta=0.1 (only --total-phases")
    assert main(["--resume", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'nope' / 'config.json'}: not found (is {tmp_path / 'nope'} a run folder?)"
    assert (run_dir / "metrics.jsonl").read_text() == before, "a refused resume touches nothing"


@pytest.fixture
def algo(request):
    """The parametrized algorithm, registered for the test when it is the toy (tests/toy_algorithm.py)."""
    with registered(request.param):
        yield request.param


@pytest.mark.parametrize("algo", [a for a in algorithms() if a != "ppo"], indirect=True)  # PPO's: the tests above
def test_every_other_algorithm_resumes_bit_identical(tmp_path, prompts_file, one_thread, algo):
    cls = registry.get(algo).trainer_class()
    # GRPO with β > 0: at β = 0 no reference runs and its KL is logged as NaN, which never equals itself
    extra = {**small_settings(algo), **({"beta": 0.04} if algo == "grpo" else {})}

    def args(run):
        return make_args("tiny", algo=algo, total_phases=3, batch_size=8, num_minibatches=2, gen_len=6, warmup_steps=2,
                         base_lr=1e-3, save_every=1, prompts=str(prompts_file), seed=5, run_dir=str(run), **extra)

    straight = cls(args(tmp_path / "a"), quiet=True)
    straight.train(tmp_path / "a")
    interrupted = cls(args(tmp_path / "b"), quiet=True)
    learn = interrupted.update_actor

    def learn_then_sigterm(batch):
        stats = learn(batch)
        if interrupted.scheduler.last_epoch == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return stats

    interrupted.update_actor = learn_then_sigterm
    with pytest.raises(TrainingStopped, match=r"interrupted after phase 1 \(SIGTERM\)") as err:
        interrupted.train(tmp_path / "b")
    assert err.value.exit_code == 128 + signal.SIGTERM
    resumed = cls(args(tmp_path / "b"), quiet=True)
    resumed.train(tmp_path / "b", resume=True)
    for name, tensor in straight.policy.state_dict().items():
        assert torch.equal(tensor, resumed.policy.state_dict()[name]), f"{name} differs after resume"
    assert without_timing(read_metrics(tmp_path / "a")) == without_timing(read_metrics(tmp_path / "b"))


def test_non_finite_steps_are_skipped_counted_and_stop_the_run(tmp_path, prompts_file, one_thread):
    args = small_args(tmp_path / "nan", prompts_file, total_phases=4, max_skipped_steps=3, save_every=1)
    trainer = RLHFTrainer(args, quiet=True)
    # phase 1 runs normally; from phase 2 on every objective is NaN (2 minibatch steps a phase)
    objective = trainer.minibatch_objective

    def nan_in_phase_2(mb, temperature):
        total, stats = objective(mb, temperature)
        return (total * float("nan"), stats) if trainer.scheduler.last_epoch >= 1 else (total, stats)

    trainer.minibatch_objective = nan_in_phase_2
    with pytest.raises(TrainingStopped, match=r"^stopped after phase 3: 4 optimizer steps in a row had a non-finite") as err:
        trainer.train(tmp_path / "nan")
    assert err.value.exit_code == 3
    assert [m["charts/skipped_steps"] for m in read_metrics(tmp_path / "nan")] == [0, 2, 2]
    assert all(torch.isfinite(p).all() for p in trainer.policy.parameters()), "a NaN step reached the weights"
    from rlhf_scratch.engine.checkpoint import load_latest_checkpoint

    assert load_latest_checkpoint(tmp_path / "nan")["phase"] == 1, "the checkpoint from before the fault is kept"


def test_a_reward_function_returning_nan_stops_the_run_naming_it(tmp_path, prompts_file):
    from rlhf_scratch.reward.tasks import RewardFunctionError

    def flaky_reward(prompts, completions, **kwargs):
        return [0.5] * (len(completions) - 1) + [float("nan")]

    trainer = RLHFTrainer(small_args(tmp_path / "r", prompts_file), reward_fn=flaky_reward, quiet=True)
    with pytest.raises(RewardFunctionError, match=r"^reward function 'flaky_reward' returned nan for completion 7\n"):
        trainer.train(tmp_path / "r")


def test_disk_full_while_checkpointing_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, prompts_file, monkeypatch):
    from rlhf_scratch.engine import checkpoint as ck

    trainer = RLHFTrainer(small_args(tmp_path / "full", prompts_file), quiet=True)
    real_save = torch.save

    def save_then_disk_full(obj, f, *a, **k):
        if obj.get("phase") == 2:
            raise OSError(28, "No space left on device")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(ck.torch, "save", save_then_disk_full)
    with pytest.raises(ck.CheckpointError) as err:
        trainer.train(tmp_path / "full")
    assert str(err.value) == (f"checkpoint: cannot write {tmp_path / 'full' / 'checkpoints' / 'phase-0002'} "
                              "(No space left on device); the previous checkpoint is intact")
    monkeypatch.undo()
    assert ck.load_latest_checkpoint(tmp_path / "full")["phase"] == 1
    assert [p.name for p in (tmp_path / "full" / "checkpoints").iterdir()] == ["phase-0001", "latest"] or \
        sorted(p.name for p in (tmp_path / "full" / "checkpoints").iterdir()) == ["latest", "phase-0001"]


def test_a_lora_run_resumes_bit_identical_from_its_adapters_and_base_hash(tmp_path, prompts_file, one_thread):
    """A LoRA checkpoint holds the adapters and the value head (not the base) with the base's sha256: resumed
    on the base loaded again, the run ends bit-identical to one never interrupted."""
    from rlhf_scratch.engine.checkpoint import load_latest_checkpoint
    from rlhf_scratch.models.lora import lora_state_dict

    def args(run):
        return small_args(run, prompts_file, lora_rank=4, lora_targets="W_Q,W_V,W_in,W_out")

    straight = RLHFTrainer(args(tmp_path / "a"), quiet=True)
    straight.train(tmp_path / "a")
    interrupted = RLHFTrainer(args(tmp_path / "b"), quiet=True)
    learn = interrupted.update_actor

    def learn_then_sigterm(batch):
        stats = learn(batch)
        if interrupted.scheduler.last_epoch == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return stats

    interrupted.update_actor = learn_then_sigterm
    with pytest.raises(TrainingStopped, match=r"interrupted after phase 2 \(SIGTERM\)"):
        interrupted.train(tmp_path / "b")
    saved = load_latest_checkpoint(tmp_path / "b")["policy"]
    assert set(saved["trainable"]) == set(lora_state_dict(interrupted.policy)) | {
        k for k in interrupted.policy.state_dict() if k.startswith("value_head.")}, "no base weight in the checkpoint"
    resumed = RLHFTrainer(args(tmp_path / "b"), quiet=True)
    resumed.train(tmp_path / "b", resume=True)
    for name, tensor in straight.policy.state_dict().items():
        assert torch.equal(tensor, resumed.policy.state_dict()[name]), f"{name} differs after resume"
    assert without_timing(read_metrics(tmp_path / "a")) == without_timing(read_metrics(tmp_path / "b"))
