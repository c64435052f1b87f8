"""studies.features_seeds: the features view's claims over seeds, on hand numbers."""

import json
import math

import pytest

from rlhf_scratch.studies.features_seeds import FEATURES_JSON, causal_fractions, main, read_run, summarise

T_975_DF2 = 4.302652729911275  # t_{0.975, 2}: three seeds


def causal(ref, tuned, steered, steered_random, ablated, ablated_random):
    return {"reference": {"reward": ref}, "tuned": {"reward": tuned}, "steered": {"reward": steered},
            "steered_random_mean": {"reward": steered_random},
            "ablated": {"reward_drop": tuned - ablated}, "ablated_random_mean": {"reward_drop": tuned - ablated_random}}


def test_the_shares_of_the_reward_gap_by_hand():
    """gap 0.9 − 0.5 = 0.4: steering to 0.74 recovers 0.24/0.4 = 60 %, random to 0.54 10 %; ablating to
    0.7 removes 0.2/0.4 = 50 %, random to 0.88 5 %. A swapped reference/tuned pair flips every sign."""
    f = causal_fractions(causal(0.5, 0.9, 0.74, 0.54, 0.7, 0.88))
    assert f["gap"] == pytest.approx(0.4)
    assert f["recovered"] == pytest.approx(0.6) and f["recovered_random"] == pytest.approx(0.1)
    assert f["removed"] == pytest.approx(0.5) and f["removed_random"] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="no gain"):
        causal_fractions(causal(0.5, 0.5, 0.6, 0.5, 0.5, 0.5))


def write_runs(tmp_path, recovered, recovered_random, removed=(0.5, 0.5, 0.5), removed_random=(0.45, 0.55, 0.5)):
    runs = []
    for i, (rec, rnd, rem, rrm) in enumerate(zip(recovered, recovered_random, removed, removed_random)):
        run = tmp_path / f"run{i}"
        (run / FEATURES_JSON).parent.mkdir(parents=True)
        S = {"dead_fraction": 0.1 * (i + 1), "explained_change": 0.8,
             "causal": causal(0.5, 0.9, 0.5 + 0.4 * rec, 0.5 + 0.4 * rnd, 0.9 - 0.4 * rem, 0.9 - 0.4 * rrm),
             "crosscoder": {"counts": {"shared": 100 + i, "tuned-only": 2}, "confirmed_by_scaling": {"tuned-only": 1}}}
        (run / FEATURES_JSON).write_text(json.dumps(S))
        runs.append(run)
    return runs


def test_three_seeds_give_the_t_interval_and_a_resolved_paired_difference(tmp_path):
    """recovered [0.5, 0.6, 0.7]: mean 0.6, s 0.1, ± t_{.975,2}·0.1/√3 = ±0.248; random [0.1, 0.0, 0.2]:
    paired differences [0.4, 0.6, 0.5], mean 0.5 ± 0.248 — excludes 0, so the claim replicates. The
    ablation's differences [0.05, −0.05, 0] do not resolve."""
    rows = [read_run(r) for r in write_runs(tmp_path, (0.5, 0.6, 0.7), (0.1, 0.0, 0.2))]
    s = summarise(rows)
    hw = T_975_DF2 * 0.1 / math.sqrt(3)
    rec = s["numbers"]["recovered"]
    assert rec["mean"] == pytest.approx(0.6) and rec["half_width"] == pytest.approx(hw) and rec["n"] == 3
    assert s["numbers"]["dead_fraction"]["mean"] == pytest.approx(0.2)
    assert s["numbers"]["crosscoder shared"]["mean"] == pytest.approx(101)
    c = s["recovered_vs_random"]
    assert c["difference"] == pytest.approx(0.5) and c["half_width"] == pytest.approx(hw) and c["resolved"]
    assert not s["removed_vs_random"]["resolved"]


def test_the_page_says_what_replicates_and_what_does_not(tmp_path, capsys):
    runs = write_runs(tmp_path, (0.5, 0.6, 0.7), (0.1, 0.0, 0.2))
    out = tmp_path / "seeds.md"
    assert main([str(r) for r in runs] + ["--out", str(out)]) == 0
    page = out.read_text()
    assert "**Replicates at n = 3:** steering the reference with the top features recovers 60% ± 25%" in page
    assert "**Not resolved at n = 3 runs**" in page and "ablating them" in page
    assert json.loads(out.with_suffix(".json").read_text())["n_runs"] == 3
    assert main([str(r) for r in runs] + ["--out", str(out)]) == 2, "an existing page is never overwritten"


def test_a_run_without_its_features_file_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "interp.features" in err[0]
