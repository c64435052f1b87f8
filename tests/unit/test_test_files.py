"""The three test tiers are folders without `__init__.py`, so pytest imports each test file by its
basename: two files of one name in two tiers make the whole suite stop at collection ("import file
mismatch"), which a run of one file never shows."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_files_share_a_basename():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert names["test_test_files.py"] == 1 and len(names) > 50
    assert not [n for n, count in names.items() if count > 1]
