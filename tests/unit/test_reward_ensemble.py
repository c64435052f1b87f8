"""The reward-model ensemble (reward/ensemble.py): mean, worst case (WCO) and UWO against numbers
worked by hand, the `--reward-model min:A,B` spec, and its one-line refusals."""

import json

import pytest
import torch

from rlhf_scratch.reward.ensemble import (
    EnsembleSpec,
    RewardEnsemble,
    check_members,
    ensemble_mean,
    ensemble_min,
    ensemble_uwo,
    is_ensemble,
    parse_ensemble,
)

# Three members (rows) score two samples (columns). Sample 0: 3, −1, 1 — one member loves it,
# one dislikes it. Sample 1: 0.6, 0.2, 0.4 — all mildly like it.
SCORES = torch.tensor([[3.0, 0.6],
                       [-1.0, 0.2],
                       [1.0, 0.4]])


def test_mean_and_min_disagree_on_which_sample_is_better():
    mean, worst = ensemble_mean(SCORES), ensemble_min(SCORES)
    assert mean.tolist() == pytest.approx([1.0, 0.4])  # (3 − 1 + 1)/3, (0.6 + 0.2 + 0.4)/3
    assert worst.tolist() == pytest.approx([-1.0, 0.2])
    assert mean[0] > mean[1], "the mean prefers sample 0, which one member overrates"
    assert worst[1] > worst[0], "the worst case prefers sample 1, which no member dislikes"
    assert ensemble_min(SCORES).tolist() != SCORES[0].tolist(), "min over members (dim 0), not the first member"
    assert ensemble_mean(SCORES).tolist() != pytest.approx(SCORES.mean(dim=1).tolist()), "mean over members, not samples"


def test_uwo_subtracts_lambda_times_the_members_population_variance():
    # sample 0: deviations 2, −2, 0 -> variance (4 + 4 + 0)/3 = 8/3; 1 − 0.5 · 8/3 = −1/3
    # sample 1: deviations 0.2, −0.2, 0 -> variance 0.08/3;        0.4 − 0.5 · 0.08/3 = 0.38667
    uwo = ensemble_uwo(SCORES, lam=0.5)
    assert uwo.tolist() == pytest.approx([-1 / 3, 0.4 - 0.04 / 3])
    assert uwo[0].item() != pytest.approx(1 - 0.5 * 4.0), "the variance is 1/k (population), not 1/(k−1)"
    assert ensemble_uwo(SCORES, lam=0.0).tolist() == pytest.approx(ensemble_mean(SCORES).tolist())


def test_a_spec_reads_its_reduction_lambda_and_members():
    assert parse_ensemble("min:a,b,c") == EnsembleSpec("min", ("a", "b", "c"))
    assert parse_ensemble("mean: a , b") == EnsembleSpec("mean", ("a", "b"))
    spec = parse_ensemble("uwo=0.25:x,y")
    assert (spec.reduction, spec.lam, spec.members) == ("uwo", 0.25, ("x", "y"))
    assert spec.text() == "uwo=0.25:x,y"
    assert is_ensemble("min:a,b") and is_ensemble("max:a,b") and is_ensemble("uwo=1:a,b")
    assert not is_ensemble("tiny") and not is_ensemble("lvwerra/distilbert-imdb") and not is_ensemble("runs/rm")


@pytest.mark.parametrize("text, message", [
    ("max:a,b", "reduction must be one of mean, min, uwo=λ; got 'max'"),
    ("min:a", "needs at least 2 members, comma-separated; got 1"),
    ("uwo:a,b", "uwo needs its λ, as uwo=0.5:RM,RM"),
    ("uwo=-1:a,b", "uwo's λ must be a number >= 0"),
    ("uwo=abc:a,b", "uwo's λ must be a number >= 0"),
])
def test_a_bad_spec_is_one_line_naming_reward_model(text, message):
    with pytest.raises(ValueError, match="reward_model: ") as err:
        parse_ensemble(text)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_ensemble_stacks_members_in_order_and_reduces():
    fake = {"a": [3.0, 0.6], "b": [-1.0, 0.2], "c": [1.0, 0.4]}
    ens = RewardEnsemble("min:a,b,c", member_fn=lambda m: (lambda samples: fake[m]))
    assert ens(["x", "y"]).tolist() == pytest.approx([-1.0, 0.2])
    assert torch.equal(ens.last_scores, SCORES)
    mean = RewardEnsemble("mean:c,a,b", member_fn=lambda m: (lambda samples: fake[m]))
    assert mean(["x", "y"]).tolist() == pytest.approx([1.0, 0.4])
    assert mean.__name__ == "RewardEnsemble(mean:c,a,b, pos)"


def _fake_run(folder, model="tiny", weights=True):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"algo": "reward_model", "model": model}))
    if weights:
        (folder / "reward_model.pt").write_bytes(b"not read by the check")
    return str(folder)


def test_a_missing_or_mismatched_member_is_one_line_naming_it(tmp_path):
    a, b = _fake_run(tmp_path / "a"), _fake_run(tmp_path / "b", model="gpt2")
    unfinished = _fake_run(tmp_path / "u", weights=False)
    with pytest.raises(ValueError, match=f"ensemble member {tmp_path / 'nope'} is not a finished reward-model run"):
        check_members([a, str(tmp_path / "nope")])
    with pytest.raises(ValueError, match=f"ensemble member {unfinished} is not a finished"):
        check_members([a, unfinished])
    with pytest.raises(ValueError, match=f"member {b} is on base model 'gpt2', the first member .* on 'tiny'"):
        check_members([a, b])
    check_members([a, _fake_run(tmp_path / "c")])


def test_a_run_records_its_members_absolute_and_their_weights_hashed(tmp_path, monkeypatch):
    """Which bug turns it red: members recorded as given (`min:rmA,rmB`), so a run resumed from another
    folder holding its own rmA silently trains against other weights; or no hash, so changed weights
    resume unnoticed (a single --reward-model already had both)."""
    from rlhf_scratch.config import make_args
    from rlhf_scratch.reward.tasks import rewarded_by

    for name, data in (("rmA", b"weights A"), ("rmB", b"weights B")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "reward_model.pt").write_bytes(data)
    monkeypatch.chdir(tmp_path)
    args = make_args("tiny", "ppo", task="sentiment", reward_model="min:rmA, rmB,missing").with_local_paths_resolved()
    assert args.reward_model == f"min:{tmp_path / 'rmA'},{tmp_path / 'rmB'},missing", "each existing member made absolute"
    digest = rewarded_by(args, None)["reward_model_sha256"]
    (tmp_path / "rmB" / "reward_model.pt").write_bytes(b"weights B, retrained")
    assert rewarded_by(args, None)["reward_model_sha256"] != digest, "one member's new weights change the record"
    (tmp_path / "rmB" / "reward_model.pt").write_bytes(b"weights B")
    assert rewarded_by(args, None)["reward_model_sha256"] == digest, "the same weights, the same record"
    swapped = make_args("tiny", "ppo", task="sentiment", reward_model=f"min:{tmp_path / 'rmB'},{tmp_path / 'rmA'},missing")
    assert rewarded_by(swapped, None)["reward_model_sha256"] != digest, "in the spec's order"
