"""Notebook 10's checks (`course/checks_verifiable.py`): each passes the course's solution AND the package's own
function; the course's solutions equal the package's `reward.verifiable` and `reward.pass_at_k`. The classic
bugs each check names are the course's catalogue (`course/mistakes_verifiable.py`, planted in
tests/unit/test_course_mistakes.py).
"""

import random

import pytest
from graded_notebooks import (
    assert_predictions_answered,
    assert_stubs_raise_and_solutions_pass,
    assert_written_by,
    load_generator,
)

from rlhf_scratch.course import catalogue
from rlhf_scratch.course import checks_verifiable as C
from rlhf_scratch.course import solutions_verifiable as S
from rlhf_scratch.course.mistakes_verifiable import pass_float_binomials
from rlhf_scratch.reward import pass_at_k as package_pass_at_k
from rlhf_scratch.reward import verifiable

# --- the solutions are the package's ------------------------------------------------------------

TEXTS = ["132", "-5", "0", "1320", " 132 ", "\t47\n", "132\n47+85=", "\n132", "081", "81.0", "+81", "-0", "00",
         "1 32", "132 apples", "12-", "", "abc", "  \n", "-12\nx", "7 \n 8"]


def test_parse_answer_and_the_rewards_are_the_packages():
    truths = ["132", "-5", "0", "132", "132", "47", "132", "132", "81", "81", "81", "0", "0", "132", "132", "12",
              "0", "0", "0", "-12", "7"]
    for text in TEXTS:
        assert S.parse_answer(text) == verifiable.parse_answer(text), text
    assert S.accuracy_reward(TEXTS, truths) == verifiable.accuracy_reward(completions=TEXTS, ground_truth=truths)
    assert S.accuracy_reward(TEXTS, [int(t) for t in truths]) == verifiable.accuracy_reward(
        completions=TEXTS, ground_truth=[int(t) for t in truths])
    assert S.format_reward(TEXTS) == verifiable.format_reward(completions=TEXTS)


def test_pass_at_k_is_the_packages_on_every_small_case():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert S.pass_at_k(n, c, k) == pytest.approx(package_pass_at_k.pass_at_k(n, c, k), abs=1e-12)
    assert S.pass_at_k(2000, 3, 1000) == pytest.approx(package_pass_at_k.pass_at_k(2000, 3, 1000), rel=1e-12)


def test_every_verifiable_check_passes_the_packages_own_functions(capsys):
    catalogue.CHECKS["parse_answer"](verifiable.parse_answer)
    catalogue.CHECKS["accuracy_reward"](lambda completions, ground_truth, **kwargs: verifiable.accuracy_reward(
        completions=completions, ground_truth=ground_truth, **kwargs))
    catalogue.CHECKS["format_reward"](lambda completions, **kwargs: verifiable.format_reward(
        completions=completions, **kwargs))
    catalogue.CHECKS["pass_at_k"](package_pass_at_k.pass_at_k)
    assert capsys.readouterr().out.splitlines() == [
        "check_parse_answer: all 4 cases pass", "check_accuracy_reward: all 3 cases pass",
        "check_format_reward: all 1 cases pass", "check_pass_at_k: all 3 cases pass"]


# --- pass_at_k: the planted overflow is that alone ------------------------------------------------


def test_the_float_binomial_learner_is_right_where_it_is_finite():
    """The planted overflow is only that: below n = 1000 it is the solution (so case 3 names nothing else)."""
    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(1, 60)
        c, k = rng.randint(0, n), rng.randint(1, n)
        assert pass_float_binomials(n, c, k) == pytest.approx(S.pass_at_k(n, c, k), abs=1e-9)


# --- notebook 10 and its solutions -----------------------------------------------------------------

SCRIPT = "make_10_verifiable_rewards.py"


@pytest.fixture
def make_10(monkeypatch):
    return load_generator(monkeypatch, SCRIPT)  # as `python notebooks/make_10_verifiable_rewards.py` runs it


def test_notebook_10_and_its_solutions_are_what_the_generator_writes(make_10):
    assert_written_by(make_10, SCRIPT)


def test_notebook_10_ships_stubs_that_raise_with_the_solutions_signature_and_the_solutions_pass(make_10, capsys):
    """Each stub raises NotImplementedError inside its check (the signature test passed), each solution cell
    is the course's solution and passes; every check of checks_verifiable has one stub."""
    assert_stubs_raise_and_solutions_pass(make_10, C, capsys)


def test_every_prediction_of_notebook_10_is_answered_after_code(make_10):
    assert_predictions_answered(make_10, 2)
