"""Every exercise of the course in one place: its solution's `Reference`, its cases and its `check_*`,
gathered from the topic modules (`checks`, `checks_sampling`, `checks_reward`, `checks_parts`, `checks_interp`,
`checks_discovery`, `checks_capstones`, and `checks_hacking`, `checks_verifiable` and `checks_episodes`: notebooks 09's, 10's and
11's, whose stubs are in those notebooks).

The tests read this (every check passes its solution, no classic mistake gives the answer, every stub
has its check), and so does `notebooks/exercises/make_exercises.py`'s test of which checks exist.
Importing it imports TransformerLens (the interp checks build a planted model on first use).
"""

from collections.abc import Callable

from rlhf_scratch.course import (
    checks,
    checks_capstones,
    checks_discovery,
    checks_episodes,
    checks_hacking,
    checks_interp,
    checks_parts,
    checks_reward,
    checks_sampling,
    checks_verifiable,
)
from rlhf_scratch.course.checks import Case, Reference

MODULES = (checks, checks_sampling, checks_reward, checks_parts, checks_interp, checks_discovery, checks_capstones,
           checks_hacking, checks_verifiable, checks_episodes)

REFERENCES: dict[str, Reference] = {name: ref for m in MODULES for name, ref in m.REFERENCES.items()}
"""Each exercise's solution: `from <module> import <name>`, with this signature."""

CASES: dict[str, Callable[[], list[Case]]] = {name: cases for m in MODULES for name, cases in m.CASES.items()}
"""Each exercise's cases, by function name."""

CHECKS: dict[str, Callable[[Callable], None]] = {
    name: getattr(m, f"check_{name}") for m in MODULES for name in m.REFERENCES}
"""Each exercise's check, by function name."""
