"""What the planted-mistake catalogue (`course.mistakes`) is made of: one `Planted` per mistake. Its own
module so that the topic modules (`mistakes_formulas`, ...) import it without importing the catalogue
that gathers them."""

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Planted:
    """One classic mistake in one exercise.

    exercise  the function the learner writes (its check is `check_<exercise>`)
    id        short, unique within the exercise
    fn        the learner's function with this one mistake
    named     words the check's message must contain: the mistake named as itself
    also      more words it must contain (the case it fails on, the number it quotes)
    not_said  words it must not contain (a second, wrong diagnosis)
    """

    exercise: str
    id: str
    fn: Callable
    named: str
    also: tuple[str, ...] = ()
    not_said: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.exercise}/{self.id}"


TRAINS = ("make_rloo_algorithm", "learning_phase")
"""The exercises whose checks train a few steps (seconds a mistake): the integration tier plants these."""
