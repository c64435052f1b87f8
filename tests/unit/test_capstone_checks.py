"""Exercises 06's fast parts: the paired-interval check's closed-form t quantiles are Student's, its cases
worked by hand are what `studies.stats` computes, and the microscope grades estimators exactly (k1 and k3
unbiased, k2 and a k3 without its −1 biased by the amounts the algebra says). The checks against planted
bugs and the trainer are in tests/integration/test_course_capstones.py.
"""

import math

import pytest

from rlhf_scratch.course import checks_capstones as C
from rlhf_scratch.studies.stats import paired_difference, t_quantile


@pytest.mark.parametrize("p, df", [(0.975, 1), (0.975, 2), (0.95, 2), (0.975, 4), (0.95, 4), (0.1, 4), (0.3, 2)])
def test_the_closed_form_t_quantiles_are_students(p, df):
    assert C.t_quantile_closed_form(p, df) == pytest.approx(t_quantile(p, df), rel=1e-9)


@pytest.mark.parametrize("p, df", sorted(C.T_TABLE))
def test_the_printed_t_table_values_are_students(p, df):
    assert C.T_TABLE[(p, df)] == pytest.approx(t_quantile(p, df), rel=1e-9)


def test_a_degree_of_freedom_without_a_closed_form_is_refused():
    with pytest.raises(ValueError, match="df must be 1, 2 or 4; got 3"):
        C.t_quantile_closed_form(0.975, 3)


def test_the_hand_worked_three_seed_case_is_the_studies_paired_difference():
    """d = [0.2, 0.05, 0.25]: d̄ = 1/6, half-width 4.302653 · 0.1040833 / √3 = 0.258557 (the comment in the cases)."""
    a, b = [0.9, 0.8, 0.85], [0.7, 0.75, 0.6]
    mean, low, high = C._intervals(a, b, 0.95)["right"]
    assert (mean, high - mean) == pytest.approx((1 / 6, 0.258557), abs=1e-6)
    ours = paired_difference(a, b)
    assert (mean, high - mean) == pytest.approx((ours.mean, ours.half_width), rel=1e-12)


def test_every_interval_case_matches_the_studies_and_its_mistakes_differ():
    for case in C._paired_cases()[:3]:
        assert not any(m.gives == case.expected for m in case.mistakes), case.name
    for a, b, conf in (([1.3, 0.9, 1.0, 1.6, 0.5], [1.0, 1.0, 0.8, 1.2, 0.5], 0.90), ([2.0, 1.5], [1.5, 1.4], 0.95)):
        mean, low, high = C._intervals(a, b, conf)["right"]
        ours = paired_difference(a, b, conf)
        assert (mean, high - mean) == pytest.approx((ours.mean, ours.half_width), rel=1e-12)


def test_the_microscope_grades_k1_k2_and_k3_exactly():
    kl, length = C.exact_kl(), C._microscope()[5]
    k1 = C.exact_mean(lambda lp, rf: lp - rf)
    k3 = C.exact_mean(lambda lp, rf: (rf - lp).exp() - 1 - (rf - lp))
    k3_without_minus_one = C.exact_mean(lambda lp, rf: (rf - lp).exp() - (rf - lp))
    k2 = C.exact_mean(lambda lp, rf: 0.5 * (lp - rf) ** 2)
    assert k1 == pytest.approx(kl, abs=1e-6) and k3 == pytest.approx(kl, abs=1e-6)
    assert k3_without_minus_one - kl == pytest.approx(length, abs=1e-5), "E_π[r] = 1 per kept token"
    assert k2 - kl > 0.01, "k2's value is biased (here upward)"
    assert 0 < kl < math.inf and len(C._microscope()[0].completions) == 121  # 1 + 3 + 9 + 27 ending at EOS, 81 cut
