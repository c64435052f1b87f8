"""The planted-mistake catalogue (`rlhf_scratch.course.mistakes`): every check fails on each planted mistake of
its exercise AND names it as itself; none is passed, none answered "not a mistake this check knows". Here the
exercises whose checks train nothing (each check runs in milliseconds); the two that train a few steps
(`TRAINS`: RLOO's trainer, notebook 06's learning phase) are planted in tests/integration/test_course_mistakes_run.py.

Which bug turns this red: a check that stops recognising a mistake, names it wrongly or passes it; a planted
function that stops being the mistake it says (it then gets another hint, or passes).
"""

import re
from collections import Counter
from pathlib import Path

import pytest

from rlhf_scratch.course import catalogue
from rlhf_scratch.course.mistakes import CATALOGUE, COUNTS, TRAINS, Planted, unnamed


@pytest.mark.parametrize("planted", [p for p in CATALOGUE if p.exercise not in TRAINS], ids=str)
def test_the_check_names_the_planted_mistake(planted):
    problem = unnamed(planted)
    assert problem is None, problem


def test_the_catalogue_holds_the_reviews_hundred_and_the_loop_bugs_each_once():
    """At least the 100 of the course review's kinds, the learning phase's 10 among them; each id once per exercise."""
    assert len(CATALOGUE) >= 100 and COUNTS["learning_phase"] >= 10, COUNTS
    twice = [k for k, n in Counter(str(p) for p in CATALOGUE).items() if n > 1]
    assert not twice, twice
    assert len({p.fn for p in CATALOGUE}) == len(CATALOGUE), "one function planted under two names"


def test_the_readme_says_how_many_mistakes_are_planted():
    """README's course section quotes the catalogue's size and its loop bugs: the numbers are these."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    said = re.search(r"names it: (\d+)\s+in \[course/mistakes\.py\]\S+ catalogue, (\d+) of them bugs of the PPO loop",
                     readme)
    assert said, "README no longer says how many mistakes the catalogue plants"
    assert (int(said[1]), int(said[2])) == (len(CATALOGUE), COUNTS["learning_phase"]), said.group()


def test_every_planted_exercise_is_a_check_of_the_course():
    assert set(COUNTS) - {"learning_phase"} <= set(catalogue.CHECKS), set(COUNTS) - set(catalogue.CHECKS)


def test_a_check_that_passes_or_misnames_a_mistake_is_reported():
    """`unnamed` itself: the solution planted as a 'mistake' is passed; a right mistake with the wrong words is
    reported with what the check said."""
    from rlhf_scratch.course import mistakes_formulas as M
    from rlhf_scratch.course import solutions_formulas as S

    passed = unnamed(Planted("normalize_reward", "none", S.normalize_reward, "anything"))
    assert passed == "check_normalize_reward passed the planted mistake normalize_reward/none"
    misnamed = unnamed(Planted("normalize_reward", "population-std", M.normalize_with_population_std, "eps was ignored"))
    assert "population std (÷ n)" in misnamed and "expected the words 'eps was ignored'" in misnamed
    said = unnamed(Planted("normalize_reward", "population-std", M.normalize_with_population_std, "population std",
                           not_said=("Bessel",)))
    assert "and not 'Bessel'" in said
