"""Exercises 06 (the capstones): the solutions written for reading (course/solutions_capstones.py) agree with
the package's own — RLOO's trainer phase for phase, the microscope's exact KL, `studies.stats`' paired
difference — and the microscope's check quotes each biased estimator's exact bias.

The planted bugs, written out as a learner would, are the course's catalogue (course/mistakes_capstones.py;
each check names each of them in tests/unit/ and tests/integration/test_course_mistakes_run.py). The generic
tests (each check passes its solution, no mistake gives the answer, the exercise notebook is what the generator
writes and its stubs raise) are in test_course_checks.py; they read `rlhf_scratch.course.catalogue`.
"""

import copy
import math

import pytest
from test_course_checks import fails_with

from rlhf_scratch.config import registry
from rlhf_scratch.course import checks_capstones
from rlhf_scratch.course.capstone_kit import train_phases
from rlhf_scratch.course.mistakes_capstones import k1_for_k3, k3_as_k2, k3_inverted_ratio, k3_without_the_minus_one
from rlhf_scratch.course.solutions_capstones import (
    make_rloo_algorithm,
    paired_difference_interval,
)
from rlhf_scratch.studies.stats import paired_difference, t_quantile

# --- make_rloo_algorithm: the check's own planted phase ------------------------------------------


def test_the_checks_planted_phase_without_a_mistake_is_the_package_phase():
    """`_phase` (the mistakes' runs) with no mistake gives RLOOTrainer's own update: so each mistake's
    numbers differ from the answer by the mistake alone."""
    from rlhf_scratch.engine.batch import gather_batch

    C = checks_capstones
    start = C.starting_state()
    C._restore(start.trainer, start)
    batch = gather_batch(copy.deepcopy(start.rollout))
    start.trainer.compute_advantages(batch)
    C._phase(start.trainer, batch)
    assert C._agreement(C._update(start.trainer, start), C._package_results()["package"]) == pytest.approx([1.0, 0.0], abs=1e-6)


@pytest.mark.slow  # three phases through the engine, with a run folder
def test_the_solution_trains_through_the_engine_and_unregisters_itself():
    metrics = train_phases(make_rloo_algorithm(), phases=2)
    assert [m["phase"] for m in metrics] == [1, 2]
    assert all(math.isfinite(m["objective/rloo"]) for m in metrics)
    assert "my_rloo" not in registry.ALGORITHMS


# --- calc_k3_kl: graded by the microscope -------------------------------------------------------


def test_k3_check_says_biased_by_the_exact_amount_and_names_k2():
    message = fails_with("calc_k3_kl", k3_as_k2, "that is k2")
    bias = checks_capstones.exact_mean(k3_as_k2) - checks_capstones.exact_kl()
    assert abs(bias) > 1e-3 and f"biased by {bias:+.6g}" in message


def test_k3_check_names_the_inverted_ratio_and_the_missing_minus_one_with_the_expected_length():
    fails_with("calc_k3_kl", k3_inverted_ratio, "the ratio is upside down")
    message = fails_with("calc_k3_kl", k3_without_the_minus_one, "the −1 is missing")
    length = checks_capstones._microscope()[5]
    assert f"biased by {length:+.6g}" in message, "E_π[r] = 1 per token: the bias is the expected length"


def test_the_microscope_is_exact_k1_is_unbiased_to_float_precision():
    """E_π[Σ_t k1] = KL(π ‖ π_ref) identically: the grader's own zero."""
    assert checks_capstones.exact_mean(k1_for_k3) == pytest.approx(checks_capstones.exact_kl(), abs=1e-6)


# --- paired_difference_interval -------------------------------------------------------------------


@pytest.mark.parametrize("p, df", [(0.975, 1), (0.975, 2), (0.95, 2), (0.975, 4), (0.95, 4), (0.1, 4)])
def test_the_checks_closed_form_t_quantiles_are_students(p, df):
    assert checks_capstones.t_quantile_closed_form(p, df) == pytest.approx(t_quantile(p, df), rel=1e-9)


def test_the_paired_solution_is_the_studies_paired_difference_on_the_recorded_runs():
    from rlhf_scratch.course.capstone_kit import recorded_runs

    runs = recorded_runs("compare_sentiment_2026-11-25_3seeds.json")["runs"]
    for metric in ("eval/ref_logprob_per_token_final", "reward_final"):
        a = [runs[f"ppo-s{s}"][metric] for s in (1, 2, 3)]
        b = [runs[f"online_dpo-s{s}"][metric] for s in (1, 2, 3)]
        mean, low, high = paired_difference_interval(a, b)
        ours = paired_difference(a, b)
        assert (mean, high - mean) == pytest.approx((ours.mean, ours.half_width), rel=1e-9)
    # the notebook's reversal, as recorded: seed 1 alone favours Online DPO, three seeds' mean favours PPO, unresolved
    a = [runs[f"ppo-s{s}"]["eval/ref_logprob_per_token_final"] for s in (1, 2, 3)]
    b = [runs[f"online_dpo-s{s}"]["eval/ref_logprob_per_token_final"] for s in (1, 2, 3)]
    mean, low, high = paired_difference_interval(a, b)
    assert a[0] - b[0] < 0 < mean and low < 0 < high
