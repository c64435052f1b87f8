"""The reward model's loss and metrics against numbers worked out by hand.

Pairs: r_c = [2, 0.5, -1], r_r = [0, 1.5, -3], so r_c − r_r = [2, −1, 2] (one pair the model gets
wrong) and r_c + r_r = [2, 2, −4] (mean 0, mean square 8: a centring term written as the square
of the mean would vanish).

    loss      = (softplus(−2) + softplus(1) + softplus(−2)) / 3 = (0.126928 + 1.313262 + 0.126928) / 3
              = 0.522373
    swapped   = (softplus(2) + softplus(−1) + softplus(2)) / 3 = 1.522373   (chosen/rejected swapped)
    margin m = [0.5, 0, 1]:  (softplus(−1.5) + softplus(1) + softplus(−1)) / 3 = 0.609312
    centring c = 0.01:  + 0.01 · 8 = 0.08
"""

from __future__ import annotations

import json

import pytest
import torch

from rlhf_scratch.reward.ensemble import RewardEnsemble
from rlhf_scratch.reward.model import calc_reward_model_loss, reward_model_metrics

CHOSEN = [2.0, 0.5, -1.0]
REJECTED = [0.0, 1.5, -3.0]
LOSS = 0.5223725698680559
LOSS_SWAPPED = 1.5223725698680564


def _pair():
    return torch.tensor(CHOSEN, requires_grad=True), torch.tensor(REJECTED, requires_grad=True)


def test_loss_is_the_mean_bradley_terry_negative_log_likelihood():
    chosen, rejected = _pair()
    loss = calc_reward_model_loss(chosen, rejected)
    assert loss.shape == ()
    assert loss.item() != pytest.approx(LOSS_SWAPPED, abs=1e-5), "chosen and rejected are swapped"
    assert loss.item() != pytest.approx(-LOSS, abs=1e-5), "the loss must be minimised: −log σ, not log σ"
    assert loss.item() == pytest.approx(LOSS, abs=1e-6)


def test_margin_is_subtracted_from_the_difference_per_pair():
    chosen, rejected = _pair()
    loss = calc_reward_model_loss(chosen, rejected, margin=torch.tensor([0.5, 0.0, 1.0]))
    assert loss.item() != pytest.approx(0.48024625779483815, abs=1e-5), "the margin was added instead of subtracted"
    assert loss.item() == pytest.approx(0.609312217673066, abs=1e-6)
    # One number for every pair: (softplus(-1.5) + softplus(1.5) + softplus(-1.5)) / 3
    assert calc_reward_model_loss(chosen, rejected, margin=0.5).item() == pytest.approx(0.7014132779827524, abs=1e-6)


def test_centring_adds_coefficient_times_mean_of_squared_sums():
    chosen, rejected = _pair()
    loss = calc_reward_model_loss(chosen, rejected, center_rewards_coefficient=0.01)
    assert loss.item() != pytest.approx(LOSS + 8.0, abs=1e-4), "the coefficient was forgotten"
    assert loss.item() != pytest.approx(LOSS, abs=1e-4), "mean((r_c + r_r)²), not mean(r_c + r_r)² (= 0 here)"
    assert loss.item() == pytest.approx(LOSS + 0.08, abs=1e-6)
    assert calc_reward_model_loss(chosen, rejected, center_rewards_coefficient=0.0).item() == pytest.approx(LOSS)


def test_gradient_raises_chosen_and_lowers_rejected_most_for_the_wrong_pair():
    chosen, rejected = _pair()
    calc_reward_model_loss(chosen, rejected).backward()
    # ∂loss/∂r_c,i = −σ(−(r_c,i − r_r,i)) / B; ∂loss/∂r_r,i = +σ(−(r_c,i − r_r,i)) / B
    expected = torch.tensor([-0.03973430734070585, -0.2436861928766683, -0.03973430734070585])
    torch.testing.assert_close(chosen.grad, expected)
    torch.testing.assert_close(rejected.grad, -expected)
    # gradient descent moves chosen up, rejected down; the wrongly ranked pair (index 1) the most
    assert int(chosen.grad.abs().argmax()) == 1


def test_loss_is_stable_for_huge_rewards():
    chosen = torch.tensor([1000.0, -1000.0])
    rejected = torch.tensor([-1000.0, 1000.0])
    loss = calc_reward_model_loss(chosen, rejected)
    assert torch.isfinite(loss)
    assert loss.item() == pytest.approx(1000.0, abs=1e-3)  # (0 + 2000) / 2


def test_mismatched_shapes_are_refused():
    # jaxtyping's runtime check (on in the test suite) or the function's own one-line ValueError
    with pytest.raises(Exception, match="same shape|batch"):
        calc_reward_model_loss(torch.zeros(3), torch.zeros(2))


def test_metrics_have_trl_names_and_hand_values():
    m = reward_model_metrics(torch.tensor(CHOSEN), torch.tensor(REJECTED))
    assert set(m) == {"accuracy", "margin", "min_reward", "mean_reward", "max_reward"}
    assert m["accuracy"] == pytest.approx(2 / 3)
    assert m["margin"] == pytest.approx(1.0)  # mean of [2, -1, 2]
    assert (m["min_reward"], m["max_reward"]) == (-3.0, 2.0)
    assert m["mean_reward"] == pytest.approx(0.0)  # (2 + 0.5 - 1 + 0 + 1.5 - 3) / 6


def test_gold_accuracy_counts_pairs_ordered_as_gold_ignoring_ties():
    from rlhf_scratch.reward.model import gold_accuracy

    rows = [{"score_chosen": 1.0, "score_rejected": 0.0},   # gold: chosen better; RM agrees
            {"score_chosen": 0.0, "score_rejected": 2.0},   # a noisy label: gold prefers rejected; RM agrees with gold
            {"score_chosen": 3.0, "score_rejected": 1.0},   # RM disagrees
            {"score_chosen": 5.0, "score_rejected": 5.0}]   # a tie: not counted
    r_c, r_r = torch.tensor([0.5, -1.0, 0.0, 9.0]), torch.tensor([0.0, 1.0, 2.0, 0.0])
    assert gold_accuracy(r_c, r_r, rows) == pytest.approx(2 / 3)
    assert gold_accuracy(r_r, r_c, rows) == pytest.approx(1 / 3)  # swapped sides
    assert gold_accuracy(r_c, r_r, [{"chosen": "a", "rejected": "b"}]) is None


# --- a reward model trained on pairs whose chosen side always holds a marker word ----------------

MARKER = " marvelous"
OTHERS = [" table", " blue", " seven", " window", " quiet", " paper", " river", " metal"]
OPENINGS = ["The film was", "I thought it", "This movie is", "The plot felt", "Its ending was", "The cast seemed",
            "Overall it was", "The music sounded"]


@pytest.fixture(scope="module")
def marker_run(tmp_path_factory):
    """48 pairs: chosen = opening + marker + '.', rejected = opening + another word + '.'; gold 1 vs 0."""
    import json

    from rlhf_scratch.engine.reward_model import train_reward_model
    from rlhf_scratch.reward.model import RewardModelArgs

    root = tmp_path_factory.mktemp("rm")
    rows = []
    for i in range(48):
        opening, other = OPENINGS[i % len(OPENINGS)], OTHERS[(i * 3) % len(OTHERS)]
        rows.append({"prompt": opening, "chosen": MARKER + ".", "rejected": other + ".",
                     "score_chosen": 1.0, "score_rejected": 0.0})
    pairs = root / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    torch.set_num_threads(1)
    args = RewardModelArgs(pairs=str(pairs), run_dir=str(root / "run"), epochs=3, batch_size=8, lr=1e-3,
                           eval_fraction=0.25, log_every=5, save_every=10, quiet=True)
    return train_reward_model(args)


def test_reward_model_run_folder_has_trl_metric_names_and_checkpoints(marker_run):
    import json

    from rlhf_scratch.engine.runs import read_status

    lines = [json.loads(x) for x in (marker_run / "metrics.jsonl").read_text().splitlines()]
    for name in ("loss", "accuracy", "margin", "min_reward", "mean_reward", "max_reward"):
        assert name in lines[-1] and f"eval/{name}" in lines[-1]
    assert json.loads((marker_run / "config.json").read_text())["algo"] == "reward_model"
    assert read_status(marker_run)["status"] == "finished"
    assert (marker_run / "checkpoints").is_dir() and (marker_run / "reward_model.pt").is_file()
    assert lines[0]["loss"] > lines[-1]["loss"]


def test_reward_model_ranks_the_marker_word_first_and_agrees_with_gold(marker_run):
    import json

    from rlhf_scratch.reward.model import load_reward_model_run

    model = load_reward_model_run(marker_run)
    words = [MARKER, *OTHERS, " dull", " good"]
    scores = model.score_texts([f"The soundtrack was{w}." for w in words])  # an opening never trained on
    assert words[int(scores.argmax())] == MARKER, dict(zip(words, scores.tolist()))
    last = json.loads((marker_run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["eval/gold_accuracy"] == pytest.approx(1.0)  # held-out pairs, ordered as gold orders them
    assert last["eval/accuracy"] == pytest.approx(1.0)


def test_export_loads_in_transformers_and_scores_like_the_run(marker_run, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rlhf_scratch.commands.export import export_reward_model
    from rlhf_scratch.reward.functions import SentimentReward
    from rlhf_scratch.reward.model import load_reward_model_run

    texts = ["The film was marvelous.", "A long, dull and lifeless film that never ends", "ok"]
    expected = load_reward_model_run(marker_run).score_texts(texts)
    out = export_reward_model(marker_run, tmp_path / "hf")
    hf = AutoModelForSequenceClassification.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    assert type(hf).__name__ == "GPT2ForSequenceClassification" and hf.config.num_labels == 1
    with torch.no_grad():
        batch = tok(texts, padding=True, return_tensors="pt")  # padded together: the last kept token is found
        got = hf(**batch).logits[:, 0]
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
    # --reward-model takes the run folder and the export alike; the reward is the scalar (−scalar for neg)
    torch.testing.assert_close(SentimentReward(str(marker_run))(texts), expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(SentimentReward(str(out), direction="neg")(texts), -expected, atol=1e-4, rtol=0)


def test_export_command_takes_a_reward_model_run_folder(marker_run, tmp_path, capsys):
    """`python -m rlhf_scratch.export RUN OUT` tells a reward-model run (config.json's algo) from a
    policy run and writes a GPT2ForSequenceClassification folder scoring like the run."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rlhf_scratch.commands.export import main
    from rlhf_scratch.reward.model import load_reward_model_run

    texts = ["The film was marvelous.", "The film was table.", "ok"]
    expected = load_reward_model_run(marker_run).score_texts(texts)
    out = tmp_path / "hf"
    assert main([str(marker_run), str(out)]) == 0, capsys.readouterr().err
    assert "AutoModelForSequenceClassification" in capsys.readouterr().out
    hf = AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert type(hf).__name__ == "GPT2ForSequenceClassification" and hf.config.num_labels == 1
    with torch.no_grad():
        got = hf(**AutoTokenizer.from_pretrained(out)(texts, padding=True, return_tensors="pt")).logits[:, 0]
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
    capsys.readouterr()  # transformers' loading bar
    assert main([str(marker_run), str(tmp_path / "vh"), "--value-head"]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --value-head: {marker_run} is a reward-model run; "
                                               "only PPO runs have a value head")


def test_reward_model_resume_continues_from_the_checkpoint(marker_run, tmp_path):
    import json
    import shutil

    from rlhf_scratch.engine.checkpoint import list_checkpoints
    from rlhf_scratch.engine.reward_model import train_reward_model
    from rlhf_scratch.reward.model import RewardModelArgs

    run = tmp_path / "run"
    shutil.copytree(marker_run, run)
    shutil.rmtree(list_checkpoints(run)[-1])  # the final checkpoint lost: resume from step 10
    (run / "checkpoints" / "latest").write_text("phase-0010\n")
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 16, "epo')  # and the last line cut short by a kill
    saved = json.loads((run / "config.json").read_text())
    saved.pop("algo")
    args = RewardModelArgs(**{**saved, "run_dir": str(run)})
    train_reward_model(args, resume=True)
    a = torch.load(run / "reward_model.pt", weights_only=True)
    b = torch.load(marker_run / "reward_model.pt", weights_only=True)
    for k in a:
        torch.testing.assert_close(a[k], b[k], msg=f"resumed weights differ at {k}")
    resumed, whole = ([json.loads(line) for line in (r / "metrics.jsonl").read_text().splitlines()] for r in (run, marker_run))
    assert [m["step"] for m in resumed] == [m["step"] for m in whole] == [5, 10, 15], \
        "the lines logged after the checkpoint (step 15) must be cut on resume, not logged twice"
    for x, y in zip(resumed, whole):
        assert x == pytest.approx(y, rel=1e-5, abs=1e-6), "a resumed step logged other numbers than the whole run's"


def test_reward_model_command_refuses_bad_input_in_one_line(tmp_path, capsys):
    from rlhf_scratch.commands.reward_model import main

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"chosen": "a", "rejected": "b"}\n{"chosen": "a"}\n')
    assert main(["--pairs", str(bad), "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f'error: pairs: {bad} line 2: no "rejected" field'
    assert main(["--pairs", str(bad), "--lr", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "error: lr: must be > 0; got -1.0"


def test_task_sentiment_scores_with_the_ensemble_of_two_real_reward_models(tmp_path, one_thread):
    from rlhf_scratch.config import make_args
    from rlhf_scratch.engine.reward_model import train_reward_model
    from rlhf_scratch.reward.functions import SentimentReward
    from rlhf_scratch.reward.model import RewardModelArgs
    from rlhf_scratch.reward.tasks import make_reward_fn

    rows = [{"prompt": p, "chosen": " good.", "rejected": " bad.", "score_chosen": 1.0, "score_rejected": 0.0}
            for p in ("The film was", "I thought it", "This movie is", "The plot felt")]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    members = []
    for seed in (1, 2):  # same pairs, different training seeds: different heads, different scores
        run = tmp_path / f"rm{seed}"
        train_reward_model(RewardModelArgs(pairs=str(pairs), run_dir=str(run), epochs=1, batch_size=2, lr=1e-3,
                                           eval_fraction=0.25, seed=seed, quiet=True))
        members.append(str(run))
    samples = ["The film was good.", "The film was bad.", "I thought it dull"]
    each = torch.stack([SentimentReward(m)(samples) for m in members])
    assert not torch.allclose(each[0], each[1]), "two training seeds should give two different proxies"
    fn = make_reward_fn(make_args("tiny", reward_model=f"min:{members[0]},{members[1]}"))
    assert isinstance(fn, RewardEnsemble)
    assert fn(samples).tolist() == pytest.approx(each.min(dim=0).values.tolist(), abs=1e-6)
    neg = make_reward_fn(make_args("tiny", reward_model=f"mean:{members[0]},{members[1]}", direction="neg"))
    assert neg(samples).tolist() == pytest.approx((-each.mean(dim=0)).tolist(), abs=1e-6)
    with pytest.raises(ValueError, match="ensemble member .*nope is not a finished reward-model run"):
        make_reward_fn(make_args("tiny", reward_model=f"min:{members[0]},{tmp_path / 'nope'}"))
