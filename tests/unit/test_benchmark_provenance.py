"""Every benchmark JSON in benchmarks/ names the code that made it (benchmarks/provenance.py, issue 60 item 3).

A result is read against the code that produced it. A JSON written by a benchmark script records
`provenance()` from git at run time (the commit, and whether the tree was dirty); one committed
before that records the commit that committed it, marked as read from `git log` afterwards.
"""

import importlib.util
import json
import re
import subprocess
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


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_provenance_reads_the_commit_and_says_when_the_tree_differs(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git(tmp_path, "add", "a.py")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = git(tmp_path, "rev-parse", "HEAD")
    clean = P.provenance(tmp_path)
    assert clean == {"commit": head, "dirty": False, "changed": [], "n_changed": 0, "read": P.RUN_TIME}
    assert P.describe(clean) == f"commit {head} clean"
    (tmp_path / "untracked.txt").write_text("not code of the commit, not dirty\n")
    assert P.provenance(tmp_path)["dirty"] is False
    (tmp_path / "a.py").write_text("x = 2\n")
    dirty = P.provenance(tmp_path)
    assert (dirty["commit"], dirty["dirty"], dirty["changed"], dirty["n_changed"]) == (head, True, ["a.py"], 1)
    assert P.describe(dirty) == f"commit {head} dirty: 1 tracked paths changed (a.py)"


def test_outside_a_repository_provenance_says_so_and_records_no_commit(tmp_path):
    record = P.provenance(tmp_path)
    assert record["commit"] is None and record["dirty"] is None and record["error"]
    assert P.describe(record).startswith("commit unknown (")
