"""The planted-mistake catalogue's two exercises whose checks train a few steps (`mistakes.TRAINS`): RLOO's
trainer from the contract (`check_make_rloo_algorithm`, a short run per mistake) and notebook 06's learning
phase (`check_learning_phase`: the package's phase re-run with each known mistake until one matches). Each
planted mistake fails AND is named as itself; the rest of the catalogue is in tests/unit/test_course_mistakes.py.
"""

import pytest

from rlhf_scratch.config import registry
from rlhf_scratch.course.mistakes import CATALOGUE, TRAINS, unnamed


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """The loop check runs one torch thread (as the suite's workers do)."""


@pytest.mark.parametrize("planted", [p for p in CATALOGUE if p.exercise in TRAINS], ids=str)
def test_the_check_names_the_planted_mistake(planted):
    problem = unnamed(planted)
    assert problem is None, problem
    assert "my_rloo" not in registry.ALGORITHMS, "the RLOO check registers the entry only while it runs"
