"""`rlhf calculator-study`'s arithmetic (studies/calculator.py): the rates of a slice, the paired comparison and
the verdict's words, on hand-made outcomes; its flags refused in one line."""

import pytest

from rlhf_scratch.config import ConfigError
from rlhf_scratch.studies.calculator import CalculatorStudyArgs, compare, rates, verdict_sentences


def test_rates_read_each_slice_of_the_problems_by_op():
    # problem 1 a product: called and right, called and wrong, not called and wrong; problem 2 a sum: one of
    # two right, neither called; problem 3 a difference: right without a call
    outcomes = [[[True, True], [True, False], [False, False]], [[False, True], [False, False]], [[False, True]]]
    got = rates(outcomes, ["*", "+", "-"])
    assert got["all"] == pytest.approx({"pass@1": 3 / 6, "call_rate": 2 / 6})
    assert got["products"] == pytest.approx({"pass@1": 1 / 3, "call_rate": 2 / 3})
    assert got["sums and differences"] == pytest.approx({"pass@1": 2 / 3, "call_rate": 0.0})
    assert rates([[[True, True]]], ["+"])["products"] == {"pass@1": None, "call_rate": None}


def test_compare_pairs_the_seeds_and_the_verdict_says_which_side_is_ahead():
    seeds = [1, 2, 3]
    tool, without = {1: 0.80, 2: 0.70, 3: 0.75}, {1: 0.50, 2: 0.42, 3: 0.43}  # differences 0.30, 0.28, 0.32
    d = compare(tool, without, seeds)
    assert d["difference"]["mean"] == pytest.approx(0.30) and d["resolved"]
    # paired: s_d = 0.02, t_{0.975,2} = 4.303, half-width 4.303 * 0.02 / sqrt(3) = 0.0497
    assert d["difference"]["half_width"] == pytest.approx(4.302653 * 0.02 / 3**0.5, rel=1e-4)
    swapped = compare(without, tool, seeds)
    assert swapped["difference"]["mean"] == pytest.approx(-0.30)
    noisy = compare({1: 0.6, 2: 0.4, 3: 0.5}, {1: 0.45, 2: 0.55, 3: 0.52}, seeds)
    assert not noisy["resolved"]
    calls = {"all": {"before": {"mean": 0.3, "half_width": 0.01}, "after": {"mean": 0.9, "half_width": 0.05}}}
    said = verdict_sentences({"all": d, "products": swapped, "sums and differences": noisy}, calls, 3)
    assert said[0].startswith("Over 3 seeds (95 % paired intervals), at equal GRPO phases, all: held-out pass@1 with the tool")
    assert said[0].endswith("+0.300 ± 0.050 (resolved: with the tool, RL ends ahead).")
    assert said[1].endswith("(resolved: with the tool, RL ends behind).")
    assert said[2].endswith("(not resolved).")
    assert said[3] == "The call rate of the tool arm, before → after RL: all 0.300 ± 0.010 → 0.900 ± 0.050."


@pytest.mark.parametrize("fields, line", [
    (dict(out=""), "out: required (the study folder)"),
    (dict(out="x", problems=501), "problems: at most 500 (the calculator's test split); got 501"),
    (dict(out="x", total_phases=10, curve_every=20), "curve_every: at most total_phases 10; got 20"),
])
def test_bad_study_flags_are_one_line(fields, line):
    with pytest.raises(ConfigError) as err:
        CalculatorStudyArgs(**fields).validate()
    assert str(err.value) == line


def test_the_curve_is_measured_at_the_base_every_curve_every_phases_and_the_last():
    assert CalculatorStudyArgs(out="x", total_phases=120, curve_every=50).curve_phases() == [0, 50, 100, 120]
