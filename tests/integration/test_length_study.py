"""The length study (rlhf_scratch/studies/length.py) and its task, `first_token` (reward/tasks.py):
the reward on hand-made completions, the lengths-by-sign arithmetic on hand numbers, the verdicts,
bad input, and the quick study end to end."""

from __future__ import annotations

import json
import math

import pytest

from rlhf_scratch.config import make_args
from rlhf_scratch.reward.tasks import (
    FIRST_TOKENS,
    first_token_ids,
    make_reward_fn,
    reward_fn_first_token,
    score_completions,
)
from rlhf_scratch.studies.length import (
    LengthArgs,
    blocks_of,
    length_args,
    length_by_sign,
    main,
    microscope_rows,
    results_table,
    summarize,
    verdicts,
)
from rlhf_scratch.studies.runner import Unit

NAN = float("nan")

# --- the task ------------------------------------------------------------------------------------


def test_the_first_token_alone_decides_and_length_does_not_matter():
    right = frozenset({7, 12})
    got = reward_fn_first_token(completion_ids=[[12], [12, 3, 3, 3, 3, 3, 3, 0], [3, 12], [7, 0], [], [0]], right_ids=right)
    assert got == [1.0, 1.0, 0.0, 1.0, 0.0, 0.0], \
        "right iff ids[0] is in the set: a right token later (row 3) does not count, an empty completion scores 0"


def test_the_task_scores_the_tiny_lms_tokens_through_the_reward_contract():
    """`make_reward_fn` for task first_token is TRL-style (it reads completion_ids), and each of
    FIRST_TOKENS is one token of the tiny tokenizer: the same text scores 1 as its first token, 0 after a space."""
    from rlhf_scratch.models.loading import load_tokenizer

    fn = make_reward_fn(make_args("tiny", task="first_token"))
    tokenizer = load_tokenizer("tiny")
    ids = [tokenizer.encode(t, add_special_tokens=False) for t in FIRST_TOKENS]
    assert all(len(i) == 1 for i in ids) and len(first_token_ids("tiny")) == len(FIRST_TOKENS)
    wrong = tokenizer.encode(" movie", add_special_tokens=False)
    completions = [[*ids[0], *wrong, *wrong], [*wrong, *ids[1]], [*ids[-1]]]
    scores = score_completions(fn, ["p"] * 3, [tokenizer.decode(c) for c in completions], completions)
    assert scores.tolist() == [1.0, 0.0, 1.0]
    assert fn.__name__ == "reward_fn_first_token"


def test_a_right_token_that_is_not_one_token_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^task: first_token needs ' cinematographically' to be one token of tiny's"):
        first_token_ids("tiny", (" not", " cinematographically"))


def test_a_reward_model_for_the_first_token_task_names_what_scores_it():
    from rlhf_scratch.config import ConfigError

    with pytest.raises(ConfigError, match="task first_token is scored by its first token: drop --reward-model"):
        make_args("tiny", task="first_token", reward_model="some/folder")


# --- the numbers ---------------------------------------------------------------------------------


def _phase(phase: int, neg: float, pos: float, reward: float = 0.5, length: float = 20.0) -> dict:
    return {"phase": phase, "completions/mean_length_neg_adv": neg, "completions/mean_length_pos_adv": pos,
            "rewards/mean": reward, "completions/mean_length": length}


# Six phases in blocks of 4 (phases 1–4, 5–6); phase 3 has no A > 0 completion, phase 6 none at all.
#   block 1: neg (10 + 12 + 14 + 8) / 4 = 11,  pos (10 + 8 + 6) / 3 = 8,  gap of the phases with both: (0 + 4 + 2) / 3 = 2
#   block 2: neg 20 (phase 5 alone), pos 4, gap 16;   late = phases 4–6: neg (8 + 20) / 2 = 14, pos 5, gap (2 + 16) / 2 = 9
METRICS = [_phase(1, 10, 10, 0.1, 20), _phase(2, 12, 8, 0.3, 22), _phase(3, 14, NAN, 0.2, 24), _phase(4, 8, 6, 0.6),
           _phase(5, 20, 4, 0.9, 30), _phase(6, NAN, NAN, 1.0, 34)]


def test_lengths_by_sign_average_the_phases_that_have_them_by_hand():
    got = length_by_sign(METRICS, blocks_of(6, 4))
    assert blocks_of(6, 4) == [(1, 4), (5, 6)]
    assert got["neg"] == [11, 20] and got["pos"] == [8, 4] and got["gap"] == [2, 16]
    assert (got["late_neg"], got["late_pos"], got["late_gap"]) == (14, 5, 9), "late: phases 4–6, NaNs left out"
    none = length_by_sign([_phase(1, NAN, NAN), _phase(2, NAN, 3)], [(1, 2)])
    assert math.isnan(none["neg"][0]) and none["pos"] == [3] and math.isnan(none["gap"][0]), "no value: NaN, not 0"


def test_a_runs_row_by_hand():
    """reward: first block (0.1 + 0.3 + 0.2 + 0.6) / 4 = 0.3, late (0.6 + 0.9 + 1.0) / 3 = 0.8333, last block 0.95;
    gap growth per unit of reward: (late gap 9 − first block's 2) / (0.8333 − 0.3) = 13.125."""
    row = summarize(METRICS, blocks_of(6, 4), {"wall_s": 12.0, "peak_mib": 800.0})
    assert row["reward_first"] == pytest.approx(0.3) and row["reward_last"] == pytest.approx(0.95)
    assert row["length_first"] == pytest.approx(21.5) and row["length_last"] == pytest.approx(32.0)
    assert row["gap_growth_per_reward"] == pytest.approx(7 / (2.5 / 3 - 0.3))
    flat = summarize([_phase(1, 5, 5, 0.5), _phase(2, 6, 5, 0.5)], [(1, 2)], {"wall_s": 1.0, "peak_mib": 1.0})
    assert math.isnan(flat["gap_growth_per_reward"]), "no reward gained: no rate"


def _row(late_gap: float, gap_first: float = 0.0) -> dict:
    return {"neg": [20.0], "pos": [20.0 - gap_first], "gap": [gap_first], "late_neg": 20 + late_gap, "late_pos": 20.0,
            "late_gap": late_gap, "reward_first": 0.2, "reward_last": 1.0, "reward_late": 0.9, "length_first": 25.0,
            "length_last": 30.0, "gap_growth_per_reward": late_gap / 0.7, "wall_s": 100.0, "peak_mib": 900.0}


# GRPO grpo's late gaps 4, 5, 6 (5 ± 4.303 · 1/√3 = ± 2.48); RLOO's 0, 1, −1 (0 ± 2.48); dr_grpo's 1, 0, 2 (1 ± 2.48).
# Paired grpo − dr_grpo: 3, 5, 4 → +4 ± 2.48; grpo − rloo: 4, 4, 7 → +5 ± 4.303 · √3/√3 = ± 4.30;
# dr_grpo − rloo: 1, −1, 3 → +1 ± 4.97: not resolved.
RESULTS = {"grpo-s1": _row(4), "grpo-s2": _row(5), "grpo-s3": _row(6), "rloo-s1": _row(0), "rloo-s2": _row(1),
           "rloo-s3": _row(-1), "dr_grpo-s1": _row(1), "dr_grpo-s2": _row(0), "dr_grpo-s3": _row(2)}
UNITS = LengthArgs(out="x", methods="grpo,dr_grpo,rloo", seeds="1,2,3").units()


def test_the_table_is_a_method_per_row_with_mean_interval_and_n():
    rows = results_table(RESULTS, UNITS)
    assert [r[:2] for r in rows] == [["GRPO grpo", "3"], ["GRPO dr_grpo", "3"], ["RLOO", "3"]]
    assert rows[0][7] == "5.0 ± 2.5" and rows[2][7] == "0.0 ± 2.5", "late gap: mean ± t-interval over 3 seeds"
    some = {**RESULTS, "rloo-s3": {**_row(-1), "late_gap": NAN}}
    assert results_table(some, UNITS)[2][7] == "0.5 ± 6.4 (n 2)", "a seed with no late gap is left out and said so"


def test_the_verdicts_name_the_largest_gap_and_each_method_against_rloo_only_when_resolved():
    first, grpo_vs_rloo, dr_vs_rloo = verdicts(RESULTS, UNITS, "late_gap", "gap")
    assert first.startswith("GRPO grpo reaches the highest gap, 5.00 ± 2.48: above GRPO dr_grpo (1.00 ± 2.48) by +4.00 "
                            "(95 % interval +1.52 to +6.48")
    assert grpo_vs_rloo.startswith("GRPO grpo reaches the highest gap, 5.00 ± 2.48: above RLOO (0.00 ± 2.48) by +5.00 "
                                   "(95 % interval +0.70 to +9.30, paired over n = 3 seeds")
    assert dr_vs_rloo.startswith("Which has the highest gap is not resolved at n = 3 seeds")
    only = verdicts({k: v for k, v in RESULTS.items() if not k.startswith("rloo")},
                    LengthArgs(out="x", methods="grpo,dr_grpo", seeds="1,2,3").units(), "late_gap", "gap")
    assert len(only) == 2 and "GRPO dr_grpo" in only[1], "without RLOO the reference is dr_grpo"
    shortest, *_ = verdicts(RESULTS, UNITS, "late_neg", "length", higher_is_better=False)
    assert shortest.startswith("Which has the lowest length is not resolved at n = 3 seeds") and \
        "RLOO 20.00 ± 2.48 against GRPO dr_grpo 21.00 ± 2.48" in shortest, "the lowest, when asked for it"


def test_each_verdict_is_said_once_without_rloo_too():
    """Of two methods the pair against the reference is the verdict over both, and without RLOO the
    reference is dr_grpo, whose grpo pair on the mean length is the aggregation verdict: each said once
    (they were printed twice, the aggregation's with other rounding)."""
    from rlhf_scratch.studies.length import study_findings

    lengths = {"grpo": (30.0, 32.0, 31.0), "dr_grpo": (25.0, 26.0, 24.5)}
    results = {f"{m}-s{i + 1}": {**_row(4 - i), "length_late": v} for m, vs in lengths.items() for i, v in enumerate(vs)}
    units = LengthArgs(out="x", methods="grpo,dr_grpo", seeds="1,2,3").units()
    findings, pairs = study_findings(results, units, 6)
    said = findings + pairs
    assert len(said) == len(set(said)), said
    assert sum("mean completion length" in s for s in said) == 1 and len(said) == 3, said
    assert findings[0].startswith("GRPO dr_grpo reaches the lowest mean completion length (tokens, phases 4–6), 25.2 ± ")


def test_the_microscope_rows_by_hand():
    e = {"length_per_gain": 2.0, "length_per_gain_after_right": -0.06, "length_per_gain_after_wrong": 0.02,
         "length_per_gain_se": 0.01, "length_per_gain_after_right_se": 0.001, "length_per_gain_after_wrong_se": 0.0005}
    lesson = {"p_right=0.2": {"policy": {}, "estimators": {"true": {"length_per_gain": 1.6}, "grpo_grpo": e}}}
    true, grpo = microscope_rows(lesson)
    assert true == ["p_right=0.2", "true gradient", "0", "0", "0", "1.600 (1)"]
    assert grpo == ["p_right=0.2", "GRPO grpo", "-0.0600 ± 0.0010", "+0.0200 ± 0.0005", "+0.0800 (± ≤ 0.0015)",
                    "2.000 (1.25)"]


# --- the command ---------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--methods", "grpo,ppo"], "methods: unknown ppo"),
    (["--methods", "grpo,grpo"], "methods: each method once"),
    (["--batch-size", "12"], "batch_size: must be divisible by num_generations (12 % 8 != 0)"),
    (["--num-generations", "1", "--batch-size", "8"], "num_generations: must be >= 2"),
    (["--batch-size", "18", "--num-generations", "2"], "batch_size: must be divisible by num_minibatches (18 % 4"),
    (["--gen-len", "0"], "gen_len: must be >= 1"),
    (["--base-lr", "0"], "base_lr: must be > 0"),
    (["--seeds", "1,1"], "seeds: each seed once"),
])
def test_bad_input_is_one_line_and_nothing_is_written(argv, message, tmp_path, capsys):
    assert main([*argv, "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {message}"), err
    assert not (tmp_path / "s").exists()
    assert main([]) == 2 and capsys.readouterr().err.startswith("error: out: required")


def test_each_run_is_grpo_with_its_loss_type_or_rloo_at_the_same_flags(tmp_path):
    from rlhf_scratch.studies.length import train_command

    args = length_args(["--out", "x"])
    grpo = train_command(Unit("dr_grpo", 2), args, tmp_path / "a")
    rloo = train_command(Unit("rloo", 2), args, tmp_path / "b")
    assert grpo[3:9] == ["first_token", "--algo", "grpo", "--loss-type", "dr_grpo", "--seed"]
    assert rloo[3:6] == ["first_token", "--algo", "rloo"]
    assert grpo[12:] == rloo[10:] == args.run_flags()[1:], "everything else the same"
    assert {"--stop-at-eos", "--beta", "--num-generations"} <= set(grpo), "EOS ends them; β = 0 and one G for all"
    quick = length_args(["--quick", "--out", "x", "--total-phases", "4"])
    assert (quick.total_phases, quick.gen_len, quick.microscope_draws) == (4, 8, 50), "--quick, and the flag given wins"


@pytest.mark.slow
def test_the_quick_study_runs_end_to_end_and_grows_by_a_seed(tmp_path, capsys):
    out = tmp_path / "length"
    argv = ["--quick", "--methods", "grpo,rloo", "--out", str(out)]
    assert main([*argv, "--seeds", "1"]) == 0
    for name in ("study.json", "times.json", "microscope.json", "table.md", "table.json", "length.png", "index.html"):
        assert (out / name).is_file(), name
    data = json.loads((out / "table.json").read_text())
    assert sorted(data["runs"]) == ["grpo-s1", "rloo-s1"]
    rloo = json.loads((out / "runs" / "rloo-s1" / "metrics.jsonl").read_text().splitlines()[-1])
    assert "completions/mean_length_neg_adv" in rloo, "RLOO logs the lengths by sign too"
    assert set(data["microscope"]) == {"p_right=0.2", "p_right=0.8"}
    assert {"true", "rloo", "grpo_grpo", "grpo_dr_grpo", "grpo_dapo"} == set(data["microscope"]["p_right=0.2"]["estimators"])
    html = (out / "index.html").read_text()
    assert html.index(data["verdicts"][0][:30]) < html.index("<table>"), "the page opens with its verdict"
    assert "What the microscope computes exactly" in html and html.count("data:image/png;base64,") == 1
    assert capsys.readouterr().out.startswith(data["verdicts"][0])
    before = (out / "runs" / "grpo-s1" / "metrics.jsonl").read_text(), (out / "microscope.json").read_text()
    assert main([*argv, "--seeds", "1,2"]) == 0
    grown = json.loads((out / "table.json").read_text())
    assert sorted(grown["runs"]) == ["grpo-s1", "grpo-s2", "rloo-s1", "rloo-s2"]
    assert grown["groups"]["RLOO"]["seeds"] == [1, 2] and " ± " in (out / "table.md").read_text()
    assert ((out / "runs" / "grpo-s1" / "metrics.jsonl").read_text(), (out / "microscope.json").read_text()) == before, \
        "finished runs and the microscope are not redone"
    assert main([*argv, "--seeds", "1,2", "--gen-len", "9"]) == 2, "a different plan is refused"
