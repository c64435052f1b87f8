"""The notebooks' text has no control characters where LaTeX was meant.

A generator that writes `\\tfrac`, `\\text`, `\\frac` or `\\bar` in a non-raw string (or a tool that
rewrote such a file) leaves a tab, form feed or backspace where the backslash was: Jupyter renders
"$\\gamma = <TAB>frac12$" as broken maths, and nothing else notices. Exercises 03 shipped with 16 of them.
"""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTROL = re.compile(r"[\x07\x08\x0b\x0c]|\t(?=[a-z])")


def control_characters(text: str) -> list[str]:
    """Each control character that stands where a LaTeX backslash was, with a little context."""
    return [repr(text[max(0, m.start() - 12):m.end() + 8]) for m in CONTROL.finditer(text)]


def test_the_pattern_finds_what_a_lost_backslash_leaves():
    hits = control_characters("$\\gamma = \tfrac12$, $x \x0crac{a}{b}$, \x08ar x")
    assert len(hits) == 3 and "\\tfrac12" in hits[0] and "\\x0crac" in hits[1] and "\\x08ar" in hits[2]
    assert control_characters("$\\tfrac12$ and a\tTab before a capital, or a tab\t\n") == []


def test_no_markdown_cell_of_any_notebook_has_one():
    notebooks = sorted((ROOT / "notebooks").rglob("*.ipynb"))
    assert len(notebooks) >= 14
    found = {f"{nb.relative_to(ROOT)} cell {i}": hits
             for nb in notebooks
             for i, cell in enumerate(json.loads(nb.read_text())["cells"])
             if cell["cell_type"] == "markdown" and (hits := control_characters("".join(cell["source"])))}
    assert not found, found


def test_no_notebook_generator_has_one():
    generators = sorted((ROOT / "notebooks").rglob("*.py"))
    assert generators
    found = {str(p.relative_to(ROOT)): hits for p in generators if (hits := control_characters(p.read_text()))}
    assert not found, found
