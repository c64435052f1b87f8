"""No module of the package over 500 lines without its reason at its top (issue 43: split by job).

A module longer than `LIMIT` lines either is split by job or says why not in its module docstring,
in a sentence that starts "Longer than 500 lines because". `PENDING` names the modules another
step of the issue is still splitting, each with the step that owns it; a module leaves the list the
moment it is short enough (the test says so), so the list cannot go stale.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rlhf_scratch", "interp")
LIMIT = 500
REASON = "Longer than 500 lines because"

PENDING: dict[str, str] = {
    # e.g. "rlhf_scratch/config/__init__.py": "issue 43, step 5: config split by algorithm (helper A)",
}
"""Over the limit, with no reason yet, because a named step of issue 43 is splitting it now."""


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def lines_of(path: Path) -> int:
    return len(path.read_text().splitlines())


def gives_reason(source: str) -> bool:
    """Whether the module's docstring (not a comment, not a string further down) says why it is long."""
    doc = ast.get_docstring(ast.parse(source)) or ""
    return REASON in " ".join(doc.split())  # the sentence may wrap


def over_limit() -> dict[str, int]:
    return {str(p.relative_to(ROOT)): n for p in modules() if (n := lines_of(p)) > LIMIT}


def test_every_long_module_gives_its_reason_at_its_top():
    unexplained = []
    for name, n in over_limit().items():
        if not gives_reason((ROOT / name).read_text()) and name not in PENDING:
            unexplained.append(f"{name} ({n} lines)")
    assert not unexplained, (f"over {LIMIT} lines with no reason: {', '.join(unexplained)}. Split it by job, or say "
                             f"why not in its module docstring: '{REASON} …'")


def test_the_pending_list_names_only_modules_still_over_the_limit():
    long = over_limit()
    done = [name for name in PENDING if name not in long]
    assert not done, f"no longer over {LIMIT} lines: take {', '.join(done)} out of PENDING"


WRAPPED = REASON.replace("500 lines", "500\n    lines")


@pytest.mark.parametrize("source, explained", [
    (f'"""A module.\n\n{REASON} it is one table."""\nx = 1\n', True),
    (f'"""A module.\n\n{WRAPPED} it is one table."""\nx = 1\n', True),
    ('"""A module that is simply long."""\nx = 1\n', False),
    (f"# {REASON} a comment is not the docstring\nx = 1\n", False),
    (f'x = 1\n"""{REASON} a string below the code is not the docstring"""\n', False)])
def test_the_reason_is_read_from_the_module_docstring_only(source, explained):
    assert gives_reason(source) is explained
