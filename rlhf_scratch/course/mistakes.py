"""The planted-mistake catalogue: each classic mistake a learner makes in an exercise, written out as the
learner writes it (the solution with that one mistake: a sign flipped, an off-by-one, a mean for a sum, a
missing detach, the wrong axis, the mask ignored, an eps where the answer is NaN, ÷ n for ÷ (n − 1), chosen
and rejected swapped, logits for log-probs, ...), with the words its check must say.

    from rlhf_scratch.course.mistakes import CATALOGUE, unnamed, verdict
    planted = CATALOGUE[0]
    verdict(planted)          # the check's message on this mistake (None: the check passed it)
    unnamed(planted)          # None if the check named it; else what it said instead

The course's tests plant every one and assert that its check fails AND names it (`named`, and `also` where
the case or a number matters): a check that stopped recognising a mistake, or passed it, turns them red
(tests/unit/test_course_mistakes.py; the two exercises whose checks train, `TRAINS`, in
tests/integration/test_course_mistakes_run.py). The mistakes live by exercise notebook: `mistakes_formulas`
(01, PPO's objective), `mistakes_beyond_ppo` (02), `mistakes_components` (03), `mistakes_sampling` (04),
`mistakes_interp` (05), `mistakes_capstones` (06), `mistakes_loop` (notebook 06's learning phase),
`mistakes_hacking` (09), `mistakes_verifiable` (10).
Importing this imports them all (TransformerLens and the PPO trainer among them).
"""

import warnings
from collections import Counter
from collections.abc import Callable

from rlhf_scratch.course.planted import TRAINS, Planted

__all__ = ["CATALOGUE", "COUNTS", "TRAINS", "Planted", "check_of", "unnamed", "verdict"]


def check_of(exercise: str) -> Callable[[Callable], object]:
    """`check_<exercise>`: the catalogue's (`course.catalogue.CHECKS`), or notebook 06's `check_learning_phase`."""
    if exercise == "learning_phase":
        from rlhf_scratch.course.loop_check import check_learning_phase

        return check_learning_phase
    from rlhf_scratch.course.catalogue import CHECKS

    return CHECKS[exercise]


def verdict(planted: Planted) -> str | None:
    """The check's message on the planted mistake, or None where the check passed it. The mistake's own
    warnings (the std of one number) are silenced: they are the learner's, not the check's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            check_of(planted.exercise)(planted.fn)
        except AssertionError as e:
            return str(e)
    return None


def _gather() -> tuple[Planted, ...]:
    from rlhf_scratch.course import (
        mistakes_beyond_ppo,
        mistakes_capstones,
        mistakes_components,
        mistakes_formulas,
        mistakes_hacking,
        mistakes_interp,
        mistakes_loop,
        mistakes_sampling,
        mistakes_verifiable,
    )

    modules = (mistakes_formulas, mistakes_beyond_ppo, mistakes_components, mistakes_sampling, mistakes_interp, mistakes_capstones, mistakes_loop,
               mistakes_hacking, mistakes_verifiable)
    return tuple(p for m in modules for p in m.PLANTED)


CATALOGUE: tuple[Planted, ...] = _gather()
"""Every planted mistake, in the exercises' order."""

COUNTS: Counter[str] = Counter(p.exercise for p in CATALOGUE)
"""How many mistakes each exercise's check is tested against."""


def unnamed(planted: Planted) -> str | None:
    """What is wrong with the check's answer to `planted`: it passed the mistake, or its message does not
    name it (`named`, `also`), or says what it must not (`not_said`, "not a mistake this check knows");
    None when the check named it."""
    message = verdict(planted)
    if message is None:
        return f"check_{planted.exercise} passed the planted mistake {planted}"
    missing = [w for w in (planted.named, *planted.also) if w not in message]
    wrong = [w for w in (*planted.not_said, "not a mistake this check knows") if w in message]
    if not missing and not wrong:
        return None
    return (f"check_{planted.exercise} on the planted mistake {planted} said:\n{message}\n"
            + "".join(f"expected the words {w!r}\n" for w in missing) + "".join(f"and not {w!r}\n" for w in wrong))
