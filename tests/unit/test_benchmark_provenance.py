"""Every benchmark JSON in benchmarks/ names the code that made it (benchmarks/provenance.py, issue 60 item 3).

A result is read against the code that produced it. A JSON written by a benchmark script records
`provenance()` from git at run time (the commit, and whether the tree was dirty); one committed
before that records the commit that committed it, marked as read from `git log` afterwards.
"""

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
SPEC = importlib.util.spec_from_file_location("provenance", BENCHMARKS / "provenance.py")
P = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(P)
FULL_HASH = re.compile(r"[0-9a-f]{40}")
JSONS = sorted(BENCHMARKS.rglob("*.json"))


def test_there_are_benchmark_jsons_to_check():
    assert len(JSONS) >= 40, [p.name for p in JSONS]


@pytest.mark.parametrize("path", JSONS, ids=lambda p: str(p.relative_to(BENCHMARKS)))
def test_a_benchmark_json_records_the_commit_that_made_it(path):
    data = json.loads(path.read_text())
    where = path.relative_to(ROOT)
    assert isinstance(data, dict) and isinstance(data.get("provenance"), dict), (
        f"{where} records no commit: write benchmarks/provenance.py's provenance() into it under 'provenance'")
    record = data["provenance"]
    assert isinstance(record.get("commit"), str) and FULL_HASH.fullmatch(record["commit"]), (
        f"{where}: provenance.commit is {record.get('commit')!r}, not a full commit hash")
    assert record.get("read") in (P.RUN_TIME, P.COMMITTED_IN), f"{where}: provenance.read says {record.get('read')!r}"
    if record["read"] == P.RUN_TIME:
        assert isinstance(record.get("dirty"), bool), f"{where}: read at run time but says nothing of a dirty tree"
