"""The lesson table of docs/results.md: every lesson says how it was measured.

A row's status is "exact" (the microscope: no sampling noise), or carries its n ("n = 3"), or says
"one seed". A row over seeds gives its interval (a ± half-width, a "(low to high)" interval, or a
bound "≤" from zero counts); every row gives a number. The checker is first shown two rows the table
once had — a blank number and "3 of 3 PPO seeds" without n or interval — and must refuse both.
"""

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results.md"
HEADING = "## Every lesson and its status"
N = re.compile(r"\bn = (\d+)")
INTERVAL = re.compile(r"±|\([−+-]?\d[\d.,]*\s*(?:%\s*)?to [−+-]?\d[\d.,]*|≤")


def lesson_rows(text: str) -> list[list[str]]:
    """The table's body rows under HEADING, each as its stripped cells."""
    lines = text.split(HEADING, 1)[1].splitlines()
    table = []
    for line in lines:
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in table[2:]]


def faults(row: list[str]) -> list[str]:
    """What a row lacks: n or "one seed" or "exact" in its status, a number, an interval over seeds."""
    lesson, status, number = row[0], row[1], row[2]
    found = []
    seeds = [int(n) for n in N.findall(status)]
    if not (status.startswith("exact") or seeds or "one seed" in status):
        found.append(f"{lesson!r}: status {status!r} has no n = …, no 'one seed', and is not exact")
    if not number:
        found.append(f"{lesson!r}: no number")
    if seeds and max(seeds) >= 2 and "one seed" not in status and not INTERVAL.search(number):
        found.append(f"{lesson!r}: n = {max(seeds)} but no interval in {number!r}")
    if any(n < 2 for n in seeds) and ("decided" in status or "not resolved" in status):
        found.append(f"{lesson!r}: a verdict over fewer than 2 seeds")
    return found


def test_the_checker_refuses_rows_the_table_once_had():
    old_gae = ["GAE vs the one-step advantage in training", "one seed", "", "[below](#gae)"]
    old_crosscoder = ["The crosscoder finds no tuned-only or reference-only latent",
                      "replicates, 3 of 3 PPO seeds, and in one run each of RLOO, GRPO, Online DPO",
                      "0 of 1,024 in every run", "[features.md](features.md)"]
    no_interval = ["RLOO ends below PPO", "decided, n = 3", "0.714 against 0.930", "[below](#x)"]
    assert faults(old_gae) == ["'GAE vs the one-step advantage in training': no number"]
    assert len(faults(old_crosscoder)) == 1 and "no n = …" in faults(old_crosscoder)[0]
    assert faults(no_interval) == ["'RLOO ends below PPO': n = 3 but no interval in '0.714 against 0.930'"]
    assert faults(["a", "decided, n = 3", "+0.163 (+0.102 to +0.224)", ""]) == []
    assert faults(["a", "decided, n = 3", "12 % ± 9 %", ""]) == []
    assert faults(["a", "exact", "cos 0.924", ""]) == []


def test_every_lesson_in_the_table_carries_n_and_an_interval_or_says_one_seed():
    rows = lesson_rows(RESULTS.read_text(encoding="utf-8"))
    assert len(rows) >= 20, f"the lesson table has {len(rows)} rows: is {HEADING!r} still the heading?"
    problems = [problem for row in rows for problem in faults(row)]
    assert not problems, "\n".join(problems)
