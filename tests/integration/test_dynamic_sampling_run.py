"""DAPO's dynamic sampling and the overlong penalty in a whole run (issue 56, item 5): a short arithmetic
GRPO run with --filter-groups drops groups, counts them in metrics.jsonl, trains on batches with no
all-equal group, and, interrupted and resumed, ends bit-identical to the run never interrupted (its extra
generation batches move the prompt iterator, which the checkpoint keeps). The Ray backend's run equals the
in-process one: tests/integration/test_controller.py (grpo-arithmetic-dynamic_sampling). By hand:
tests/unit/test_dynamic_sampling.py."""

import os
import signal

import pytest
import torch

from rlhf_scratch.algorithms.grpo import GRPOTrainer
from rlhf_scratch.config import make_args
from rlhf_scratch.engine.dataflow import FILTER_GROUPS_METRICS
from rlhf_scratch.engine.loop import OVERLONG_METRICS, TrainingStopped, without_timings
from rlhf_scratch.engine.runs import read_metrics


def args(run_dir, **overrides):
    # β > 0: at β = 0 the KL is logged as NaN, which never equals itself
    return make_args("tiny", algo="grpo", **{**dict(
        task="arithmetic", val_prompts="", total_phases=3, batch_size=8, num_generations=4, num_minibatches=2,
        warmup_steps=1, base_lr=1e-3, beta=0.04, save_every=1, seed=1, run_dir=str(run_dir), filter_groups=True,
        overlong_buffer=True, overlong_buffer_len=3, table_every=100, plot_every=100), **overrides})


def test_a_run_with_dynamic_sampling_drops_counts_and_resumes_bit_identical(tmp_path, one_thread):
    straight = GRPOTrainer(args(tmp_path / "a"), quiet=True)
    straight.train(tmp_path / "a")
    metrics = read_metrics(tmp_path / "a")
    for m in metrics:
        assert set(FILTER_GROUPS_METRICS) | set(OVERLONG_METRICS) <= set(m), m["phase"]
        # every group trained on has a spread unless the limit filled it up
        assert m["frac_reward_zero_std"] * 2 == m["filter_groups/filled_groups"], m["phase"]
        assert m["rewards/overlong_reward"] <= 0 and 0 <= m["completions/overlong_ratio"] <= 1
    assert sum(m["filter_groups/dropped_groups"] for m in metrics) > 0, "the test's seed must drop a group"
    first, second = (int(m["filter_groups/num_gen_batches"]) for m in metrics[:2])
    assert second > 1, "the test's seed must sample again in phase 2"

    interrupted = GRPOTrainer(args(tmp_path / "b"), quiet=True)
    draw, draws = interrupted.next_prompts, []

    def sigterm_while_sampling_again():  # phase 2's second generation batch: the phase ends, then the run stops
        draws.append(1)
        if len(draws) == first + 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return draw()

    interrupted.next_prompts = sigterm_while_sampling_again
    with pytest.raises(TrainingStopped, match=r"interrupted after phase 2 \(SIGTERM\)"):
        interrupted.train(tmp_path / "b")
    resumed = GRPOTrainer(args(tmp_path / "b"), quiet=True)
    resumed.train(tmp_path / "b", resume=True)
    for name, tensor in straight.policy.state_dict().items():
        assert torch.equal(tensor, resumed.policy.state_dict()[name]), f"{name} differs after resume"
    assert [without_timings(m) for m in metrics] == [without_timings(m) for m in read_metrics(tmp_path / "b")]


def test_without_the_flags_nothing_is_logged_of_them(tmp_path, one_thread):
    run = GRPOTrainer(args(tmp_path / "plain", filter_groups=False, overlong_buffer=False, overlong_buffer_len=0,
                           total_phases=1), quiet=True).train(tmp_path / "plain")
    (m,) = read_metrics(run)
    assert not (set(FILTER_GROUPS_METRICS) | set(OVERLONG_METRICS)) & set(m)
