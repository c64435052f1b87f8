"""benchmarks/provenance.py against real git repositories, made here (the committed JSONs are read in
tests/unit/test_benchmark_provenance.py)."""

import importlib.util
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("provenance", ROOT / "benchmarks" / "provenance.py")
P = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(P)


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
