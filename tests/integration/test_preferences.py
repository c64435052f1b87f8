"""Preference pairs from the reference model labelled by a gold reward, and the whole pipeline
preferences → reward model → PPO against it, on the tiny preset."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlhf_scratch.commands.preferences import main
from rlhf_scratch.reward.preferences import bradley_terry_label


def test_argmax_label_chooses_the_higher_gold_score_ties_to_a():
    g_a, g_b = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([0.0, 3.0, 0.5])
    assert bradley_terry_label(g_a, g_b, "argmax").tolist() == [True, False, True]
    assert bradley_terry_label(g_b, g_a, "argmax").tolist() == [False, True, True]


def test_bradley_terry_label_is_drawn_with_probability_sigmoid_of_the_difference():
    n = 40000
    g_a = torch.full((n,), math.log(3.0))  # σ(log 3 − 0) = 3/4
    g_b = torch.zeros(n)
    frac = bradley_terry_label(g_a, g_b, "bt", torch.Generator().manual_seed(0)).float().mean().item()
    assert frac == pytest.approx(0.75, abs=0.01), "P(a≻b) must be σ(g(a) − g(b)) = 0.75"
    frac_swapped = bradley_terry_label(g_b, g_a, "bt", torch.Generator().manual_seed(0)).float().mean().item()
    assert frac_swapped == pytest.approx(0.25, abs=0.01)
    # far apart: the better one always wins, as a rater would never flip a clear case
    assert bradley_terry_label(torch.tensor([50.0, -50.0]), torch.zeros(2), "bt").tolist() == [True, False]


@pytest.mark.parametrize("argv, message", [
    (["--num-pairs", "0"], "error: num_pairs: must be >= 1; got 0"),
    (["--num-pairs", "3", "--label", "vote"], "error: label: must be one of bt, argmax; got 'vote'"),
    (["--num-pairs", "3", "--gold", "oracle"], "error: gold: must be one of tiny, vader or a classifier folder; got 'oracle'"),
    (["--num-pairs", "x"], "error: argument --num-pairs: invalid int value: 'x'"),
    (["--num-pairs", "3", "--rater", "lazy"], "error: rater: must be one of honest, length, token, repetition; got 'lazy'"),
    (["--num-pairs", "3", "--rater-margin", "-1"], "error: rater_margin: must be finite and >= 0; got -1.0"),
    (["--num-pairs", "3", "--rater-token", "two words"], "error: rater_token: must be one word; got 'two words'"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv, message, tmp_path, capsys):
    assert main(["--out", str(tmp_path / "p.jsonl"), *argv]) == 2
    assert capsys.readouterr().err.strip() == message


def test_an_existing_out_file_is_refused_not_overwritten(tmp_path, capsys):
    out = tmp_path / "p.jsonl"
    out.write_text("keep me\n")
    assert main(["--out", str(out), "--num-pairs", "2"]) == 2
    assert "exists" in capsys.readouterr().err
    assert out.read_text() == "keep me\n"


def test_pipeline_preferences_then_reward_model_then_ppo(tmp_path, capsys):
    """preferences (CLI) → reward model → 2 PPO phases rewarded by it, all on the tiny preset."""
    from rlhf_scratch.algorithms.ppo import RLHFTrainer
    from rlhf_scratch.config import make_args
    from rlhf_scratch.engine.reward_model import train_reward_model
    from rlhf_scratch.engine.runs import read_metrics, read_status
    from rlhf_scratch.reward.model import RewardModelArgs, load_reward_model_run

    pairs = tmp_path / "pairs.jsonl"
    assert main(["--out", str(pairs), "--num-pairs", "12", "--gen-len", "6", "--label", "argmax",
                 "--batch-size", "12"]) == 0
    rows = [json.loads(x) for x in pairs.read_text().splitlines()]
    assert len(rows) == 12 and set(rows[0]) == {"prompt", "chosen", "rejected", "score_chosen", "score_rejected"}
    assert all(r["score_chosen"] >= r["score_rejected"] for r in rows)  # argmax labels

    rm_dir = train_reward_model(RewardModelArgs(pairs=str(pairs), run_dir=str(tmp_path / "rm"), epochs=1,
                                                batch_size=5, quiet=True))
    args = make_args("tiny", task="sentiment", reward_model=str(rm_dir), total_phases=2, batch_size=4,
                     num_minibatches=2, gen_len=6, warmup_steps=1, run_dir=str(tmp_path / "ppo"), seed=0, threads=1)
    trainer = RLHFTrainer(args, quiet=True)
    rollout = trainer.rollout_phase()
    expected = load_reward_model_run(rm_dir).score_texts(rollout.texts)
    torch.testing.assert_close(rollout.scores, expected, atol=1e-4, rtol=0)  # the reward is the head's scalar
    run = trainer.train(tmp_path / "ppo")
    assert read_status(run)["status"] == "finished" and len(read_metrics(run)) == 2
