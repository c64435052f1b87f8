"""GRPO end to end through the train command: a whole run (its formulas and one phase: tests/unit/test_grpo.py)."""

import json
import math

import pytest

from rlhf_scratch.algorithms.grpo import GRPO_METRICS, KL_METRIC
from rlhf_scratch.engine.loop import SHARED_METRICS
from rlhf_scratch.engine.runs import read_metrics


def test_the_cli_runs_grpo_end_to_end_without_a_reference(tmp_path, one_thread):
    from rlhf_scratch.commands.train import main

    run_dir = tmp_path / "run"
    assert main(["sentiment", "--algo", "grpo", "--total-phases", "2", "--batch-size", "8", "--num-generations", "4",
                 "--num-minibatches", "2", "--gen-len", "6", "--warmup-steps", "1", "--loss-type", "grpo",
                 "--importance-sampling-level", "sequence", "--threads", "1", "--seed", "2",
                 "--run-dir", str(run_dir)]) == 0
    metrics = read_metrics(run_dir)
    assert [m["phase"] for m in metrics] == [1, 2]
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["algo"], config["loss_type"], config["importance_sampling_level"]) == ("grpo", "grpo", "sequence")
    for m in metrics:
        missing = set(SHARED_METRICS + GRPO_METRICS) - set(m)
        optional = {KL_METRIC, "cispo_clip_ratio", "vespo/phi_seq_mean"}  # kl: only when beta > 0; the others: their loss type's
        assert missing == optional, f"missing metrics: {missing - optional}"
        assert "kl" not in m, "TRL logs kl only when β > 0"
        assert math.isnan(m["rollout/kl_full_vocab"]), "β = 0: no reference ran, the KL is not made up"
        assert m["completions/total_tokens"] == 8 * 6, "--prompts prefix: fixed-length completions"
        # fixed lengths: every completion is 6 tokens, whatever its advantage's sign
        assert m["completions/mean_length_neg_adv"] == m["completions/mean_length_pos_adv"] == 6.0
        assert m["reward_std"] == pytest.approx(m["rewards/std"]), "no EOS penalty: scores = rewards"
        assert 0 <= m["clip_ratio/region_mean"] <= 1 and m["objective/beta"] == 0.0
    assert metrics[0]["charts/learning_rate"] == 0.0, "warmup: the first phase trains at 0"
    assert (run_dir / "policy.pt").is_file()
