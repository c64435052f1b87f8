"""Issue 58, item 6: every algorithm on episodes that call the calculator, in process and through
`--controller ray`, bit for bit the same, and `--resume` bit-exact; and an environment that owns its
reward (tests/toy_environment.py) scores its episodes on both backends.

The model is the shipped calculator sibling, `--env calculator`'s default (`arithmetic_calc`, on the calculator's
problems, gen_len 20): it calls on a share of the problems, so its episodes have the tool's replies in them — each
test checks they do (`tools/call_frequency`, `episodes/env_tokens`, `episodes/model_turns/max`, holes in the mask), so none
can pass on one-turn episodes — and is right on a share, so every algorithm has rewards to learn from (Online
DPO's pairs by the task's rule).

In the integration tier: the holes, GRPO and PPO resumed, GRPO on Ray, the toy on both backends (~45 s on 2 cores);
RLOO and Online DPO resumed, and RLOO, PPO and Online DPO on Ray are slow (~35 s more). The kill -9 in the middle of
a multi-turn run is tests/integration/test_kill_sweep.py's (slow).

Which bug turns each red: a column of the episode's record (the environment's reward, turns, calls, tokens)
lost on the way through the worker group, DAPO's groups or the gather (the two backends log different
numbers); an episode's state that a checkpoint does not carry (the resumed run samples other episodes);
the task's reward scoring an episode its environment scored."""

import os
import signal

import pytest
import torch
from test_controller import SignalIn
from toy_environment import PLUGIN, TOY_ENV
from toy_environment import register as register_toy

from rlhf_scratch.config import make_args, registry
from rlhf_scratch.engine.loop import TrainingStopped, without_timings
from rlhf_scratch.engine.runs import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")
ALGOS = ("grpo", "rloo", "ppo", "online_dpo")


@pytest.fixture(scope="module", autouse=True)
def toy_environment_everywhere():
    """The toy environment registered in this process, and in every process started from here on (the controller's
    Ray workers) through the registry's plugin hook; taken away after the module."""
    registry.load_plugins()  # this process has read its plugins already: the variable is for the processes it starts
    before = os.environ.get(registry.PLUGINS_ENV)
    os.environ[registry.PLUGINS_ENV] = ",".join(filter(None, [before, PLUGIN]))
    register_toy()
    yield
    registry.unregister_env(TOY_ENV)
    if before is None:
        os.environ.pop(registry.PLUGINS_ENV)
    else:
        os.environ[registry.PLUGINS_ENV] = before


def args_for(algo, **overrides):
    groups = {"num_generations": 4} if algo in ("grpo", "rloo") else {}
    return make_args("tiny", algo=algo, task="arithmetic", env="calculator", **{
        **dict(total_phases=3, batch_size=8, num_minibatches=2, warmup_steps=1, test_freq=3, val_size=6, val_n=2,
               table_every=100, plot_every=100, seed=2), **groups, **overrides})


RUNS: dict = {}


def in_process(algo, folder):
    """The in-process run of `algo` (metrics, weights), once per module."""
    if algo not in RUNS:
        args = args_for(algo)
        trainer = registry.get(algo).trainer_class()(args, quiet=True)
        run_dir = trainer.train(folder / f"in_process-{algo}")
        RUNS[algo] = read_metrics(run_dir), {k: v.detach().clone() for k, v in trainer.policy.state_dict().items()}
    return RUNS[algo]


def assert_called(metrics):
    """The run's episodes called the calculator (in some phase: a batch of 8 may have no call) and it answered."""
    assert all("tools/call_frequency" in m for m in metrics)
    assert any(m["tools/call_frequency"] > 0 and m["episodes/env_tokens"] > 0 and m["episodes/model_turns/max"] > 1 for m in metrics)


def assert_same_run(got, expected, weights, expected_weights):
    assert [without_timings(m) for m in got] == [without_timings(m) for m in expected]
    moved = [k for k in expected_weights if not torch.equal(weights[k], expected_weights[k])]
    assert weights.keys() == expected_weights.keys() and not moved, f"weights differ: {moved[:5]}"


def test_the_siblings_episodes_have_the_calculators_replies_as_holes_in_the_mask():
    """The rollout a trainer samples: some row's mask is False between two of the model's tokens (the reply),
    and the episode's record counts those tokens."""
    trainer = registry.get("grpo").trainer_class()(args_for("grpo"), quiet=True)
    torch.manual_seed(0)
    rollout = trainer.generate_sequences(trainer.next_prompts())
    mask = rollout.completion_mask
    last = mask.shape[1] - 1 - mask.flip(1).int().argmax(1)  # each row's last model token
    holes = (~mask & (torch.arange(mask.shape[1]) < last[:, None])).sum(1)
    assert holes.sum() > 0, "no episode had a reply between two model turns"
    assert (holes <= rollout.env_tokens).all() and (rollout.tool_calls >= (holes > 0)).all()
    assert rollout.env_rewards.isnan().all(), "the calculator owns no reward: the task scores every episode"


@pytest.mark.parametrize("algo", [  # ~6 s each: GRPO and PPO in the integration tier, RLOO and Online DPO slow
    "grpo", "ppo", *(pytest.param(algo, marks=pytest.mark.slow) for algo in ("rloo", "online_dpo"))])
def test_every_algorithm_on_episodes_with_calls_resumes_bit_exact(algo, tmp_path_factory):
    """Stopped by SIGTERM after phase 2 of 3 (the loop's own checkpoint), then resumed: the uninterrupted run's
    metrics and weights, bit for bit."""
    expected, expected_weights = in_process(algo, tmp_path_factory.getbasetemp())
    assert_called(expected)
    run_dir = tmp_path_factory.mktemp(f"resumed-{algo}")
    trainer = registry.get(algo).trainer_class()(args_for(algo), quiet=True)
    with pytest.raises(TrainingStopped, match="interrupted after phase 2"):
        trainer.train(run_dir, hooks=[SignalIn(2, signal.SIGTERM)])
    resumed = registry.get(algo).trainer_class()(args_for(algo), quiet=True)
    resumed.train(run_dir, resume=True)
    assert_same_run(read_metrics(run_dir), expected, resumed.policy.state_dict(), expected_weights)


@pytest.mark.parametrize("algo", [  # ~8 s each (a worker's start): GRPO in the integration tier, the other three slow
    "grpo", *(pytest.param(algo, marks=pytest.mark.slow) for algo in ALGOS if algo != "grpo")])
def test_every_algorithm_on_episodes_with_calls_through_ray_equals_the_in_process_run(algo, local_ray, tmp_path_factory):
    from rlhf_scratch.controller.ray_trainer import RayPPOTrainer

    expected, expected_weights = in_process(algo, tmp_path_factory.getbasetemp())
    controller = RayPPOTrainer(args_for(algo), workers=1, quiet=True)
    try:
        got = read_metrics(controller.fit(tmp_path_factory.mktemp(f"ray-{algo}")))
        weights = controller.policy_state_dict()
    finally:
        controller.shutdown()
    assert_called(got)
    assert "eval/tools/call_frequency" in got[-1], "the validation's episodes (after phase 3) logged no record"
    assert_same_run(got, expected, weights, expected_weights)


def test_an_environment_that_owns_its_reward_scores_its_episodes_on_both_backends(local_ray, tmp_path):
    """The toy's reward is −(the model's turns): every phase's rewards/mean is −episodes/model_turns/mean, and episodes with no
    call (one turn) score −1, on the shipped arithmetic model whose task reward is 0 or 1 — in process and on Ray alike."""
    from rlhf_scratch.controller.ray_trainer import RayPPOTrainer

    args = make_args("tiny", algo="grpo", task="arithmetic", env=TOY_ENV, num_generations=4, total_phases=2, batch_size=8,
                     num_minibatches=2, warmup_steps=1, val_prompts="", table_every=100, plot_every=100)
    trainer = registry.get("grpo").trainer_class()(args, quiet=True)
    expected = read_metrics(trainer.train(tmp_path / "in_process"))
    controller = RayPPOTrainer(args, workers=1, quiet=True)
    try:
        got = read_metrics(controller.fit(tmp_path / "ray"))
    finally:
        controller.shutdown()
    assert [without_timings(m) for m in got] == [without_timings(m) for m in expected]
    for m in got:
        assert m["episodes/model_turns/max"] > 1 and m["tools/call_frequency"] > 0, "the toy was never called"
        assert m["rewards/mean"] == pytest.approx(-m["episodes/model_turns/mean"], abs=1e-6)
        assert m["tools/reward_by_calls/0"] == -1.0

