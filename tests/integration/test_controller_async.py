"""One step of asynchrony in the single controller (issue 44, item 11; docs/distributed.md#one-step-of-asynchrony):
the non-blocking dispatch (`register(blocking=False)` → `DataProtoFuture`), the lag of `--max-staleness 1`
(phase n's samples drawn with the weights after update n − 2), those samples against a generation
from a saved copy of those weights, the refusals, and a resumed asynchronous run."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
import torch

from rlhf_scratch.config import make_args
from rlhf_scratch.controller.decorator import Dispatch, register
from rlhf_scratch.controller.protocol import DataProto
from rlhf_scratch.controller.worker_group import (
    DataProtoFuture,
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    Worker,
    WorkerError,
)
from rlhf_scratch.engine.loop import without_timings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from toy_algorithm import registered  # noqa: E402


class Slow(Worker):
    """A worker without a model whose non-blocking call takes `seconds`: the driver must not wait for it."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def scaled(self, batch: DataProto) -> DataProto:
        time.sleep(self.seconds * (2 - self.rank))  # rank 0 finishes last: the order must come from the rank, not the clock
        if batch.batch["x"].min() < 0:
            raise ValueError(f"negative row on rank {self.rank}\nsecond line")
        return DataProto({"x": batch.batch["x"] * 3 + self.rank})


def test_a_non_blocking_call_returns_at_once_and_get_collects_in_rank_order(local_ray):
    group = RayWorkerGroup(RayResourcePool(process_on_nodes=[2]), RayClassWithInitArgs(Slow, 1.5), role="slow")
    try:
        start = time.perf_counter()
        future = group.scaled(DataProto({"x": torch.tensor([[5], [7], [11], [13]])}))
        returned = time.perf_counter() - start
        assert isinstance(future, DataProtoFuture)
        assert returned < 1.0, f"the call waited {returned:.2f} s for ranks that sleep 1.5 s and 3 s"
        assert future.get().batch["x"].flatten().tolist() == [15, 21, 34, 40]  # rank 0's rows first, +0; rank 1's +1
        assert time.perf_counter() - start >= 3.0  # .get() waited for the slower rank
        failing = group.scaled(DataProto({"x": torch.tensor([[1], [2], [-3], [4]])}))  # a bad row on rank 1
        assert isinstance(failing, DataProtoFuture)  # the failure is not raised at the call ...
        with pytest.raises(WorkerError, match="^slow rank 1: scaled failed: ValueError: negative row on rank 1$"):
            failing.get()  # ... but at .get(), as the one line a blocking call raises
    finally:
        group.kill()
        group.resource_pool.release()


@pytest.mark.parametrize("argv, line", [
    (["sentiment", "--controller", "ray", "--placement", "split", "--max-staleness", "2"],
     "error: max_staleness: must be 0 (synchronous) or 1 (one step of asynchrony); got 2"),
    (["sentiment", "--controller", "ray", "--max-staleness", "1"],
     "error: max_staleness: 1 needs --controller ray --placement split (a rollout pool of its own)"),
    (["sentiment", "--max-staleness", "1"],
     "error: max_staleness: 1 needs --controller ray --placement split (a rollout pool of its own)"),
    (["sentiment", "--controller", "ray", "--placement", "split", "--max-staleness", "1", "--workers", "2"],
     "error: max_staleness: 1 runs with --workers 1 only (a rollout pool of several ranks is not tested); got 2"),
    (["sentiment", "--algo", "toy", "--controller", "ray", "--placement", "split", "--max-staleness", "1"],
     "error: max_staleness: toy's loss has no ratio against the sampler's log-probs to correct stale samples; "
     "1 runs ppo, rloo, online_dpo, grpo"),
])
def test_bad_staleness_flags_refused_in_one_line(argv, line, capsys, tmp_path):
    from rlhf_scratch.commands.train import main

    with registered("toy"):
        assert main([*argv, "--run-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [line]
    assert not (tmp_path / "run").exists()  # refused before a run folder (and before Ray: check_staleness comes first)


def args_for(algo, **overrides):
    return make_args("tiny", algo=algo, **{**dict(total_phases=3, batch_size=8, num_minibatches=2, gen_len=6,
                                                    warmup_steps=0, table_every=100, plot_every=100), **overrides})


@pytest.mark.parametrize("algo, overrides", [
    pytest.param("ppo", {}, id="ppo"),
    pytest.param("online_dpo", {"base_lr": 1e-3}, marks=pytest.mark.slow, id="online_dpo"),  # (at 2e-5 one update
    pytest.param("grpo", {}, marks=pytest.mark.slow, id="grpo")])                              #  flips no sample of phase 3)
def test_the_lag_is_one_and_the_samples_are_those_of_the_weights_one_update_old(algo, overrides, local_ray, tmp_path):
    """Phase n's samples carry the weights after update n − 2 (0 at phases 1 and 2), and are exactly what
    a synchronous generation gives from a saved copy of those weights with the rollout's RNG stream: an
    in-process trainer built with the same seed (so the same RNG as the rollout worker's after its
    construction) that loads version v(n) before generating phase n's prompts."""
    from rlhf_scratch.config import registry
    from rlhf_scratch.controller.ray_trainer import RayPPOTrainer
    from rlhf_scratch.controller.workers import _no_reward

    args = args_for(algo, **overrides)
    controller = RayPPOTrainer(args, workers=1, placement="split", max_staleness=1, quiet=True)
    rollouts, scores = [], controller.compute_scores

    def kept(rollout):  # each phase's rollout, as the loop gets it
        rollouts.append(scores(rollout))
        return rollouts[-1]

    class Versions:  # the actor's weights after each update
        METRICS = ()

        def start(self, run_dir, phase):
            versions[0] = controller.policy_state_dict()

        def after_phase(self, run_dir, phase):
            versions[phase] = controller.policy_state_dict()
            return {}

    versions = {}
    controller.compute_scores = kept
    try:
        run_dir = controller.fit(tmp_path / "run", hooks=[Versions()])
    finally:
        controller.shutdown()
    got = list(zip([json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()], rollouts, strict=True))
    assert [m["async/weights_version"] for m, _ in got] == [0, 0, 1]
    assert any(not torch.equal(versions[1][k], versions[0][k]) for k in versions[0]), "the actor never learned"

    replica = registry.get(algo).trainer_class()(args, reward_fn=_no_reward, quiet=True)  # built as the rollout worker is
    for phase, (metrics, rollout) in enumerate(got, start=1):
        prompts = replica.next_prompts()
        replica.policy.load_state_dict(versions[metrics["async/weights_version"]])
        torch_state = torch.get_rng_state()
        expected = replica.generate_sequences(prompts)
        assert expected.prompts == rollout.prompts
        assert torch.equal(expected.sample_ids, rollout.sample_ids), f"phase {phase}: not the samples of version {metrics['async/weights_version']}"
        if phase == 3:  # the check can fail: the fresher weights (lag 0) draw other samples from the same RNG
            after = torch.get_rng_state()
            torch.set_rng_state(torch_state)
            replica.policy.load_state_dict(versions[2])
            assert not torch.equal(replica.generate_sequences(prompts).sample_ids, rollout.sample_ids)
            torch.set_rng_state(after)


@pytest.mark.slow
def test_a_resumed_async_run_keeps_the_lag_and_finishes(local_ray, tmp_path, capsys):
    """`train --controller ray --placement split --max-staleness 1` (PPO, 3 phases) against the same run
    sent SIGTERM in phase 2: the loop checkpoints phase 2 with the rollout pool's state and the generation in
    flight's prompts, and `--resume RUN` (no controller flag: config.json places it) re-does phase 3's
    generation from the checkpointed rollout weights (version 1) and RNG: the lag is still 1, and every
    non-timing number and the final weights equal the uninterrupted run's bit for bit."""
    import signal

    from rlhf_scratch.commands.train import main
    from rlhf_scratch.controller.ray_trainer import RayPPOTrainer
    from rlhf_scratch.engine.lifecycle import TrainingStopped

    def numbers(run_dir):
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [without_timings(m) for m in rows]

    argv = ["sentiment", "--controller", "ray", "--placement", "split", "--max-staleness", "1", "--total-phases", "3",
            "--batch-size", "8", "--num-minibatches", "2", "--gen-len", "6", "--warmup-steps", "0"]
    assert main([*argv, "--run-dir", str(tmp_path / "straight")]) == 0
    uninterrupted, weights = numbers(tmp_path / "straight"), torch.load(tmp_path / "straight" / "policy.pt")
    assert [m["async/weights_version"] for m in uninterrupted] == [0, 0, 1]

    class SigtermInPhase2:
        METRICS = ()

        def start(self, run_dir, phase): ...

        def after_phase(self, run_dir, phase):
            if phase == 2:
                os.kill(os.getpid(), signal.SIGTERM)
            return {}

    run_dir = tmp_path / "run"
    controller = RayPPOTrainer(args_for("ppo"), workers=1, placement="split", max_staleness=1, quiet=True)
    try:
        with pytest.raises(TrainingStopped, match="interrupted after phase 2"):
            controller.fit(run_dir, hooks=[SigtermInPhase2()])
    finally:
        controller.shutdown()
    assert main(["--resume", str(run_dir)]) == 0
    resumed = numbers(run_dir)
    assert [m["async/weights_version"] for m in resumed] == [0, 0, 1]
    assert resumed == uninterrupted
    again = torch.load(run_dir / "policy.pt")
    assert all(torch.equal(again[k], weights[k]) for k in weights)
    assert capsys.readouterr().out.count("done: ") == 2
