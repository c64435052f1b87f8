"""What ran a benchmark: the commit, read from git when it runs, and whether the tree differed from it.

    python benchmarks/provenance.py        # one line for a log: "commit 94e8425… clean" or "… dirty: 2 paths …"

Every benchmark script in benchmarks/ puts `provenance()` into the JSON it writes, under the key
"provenance", and the shell scripts print this file's line into their logs; a unit test
(tests/unit/test_benchmark_provenance.py) fails on a JSON in benchmarks/ that records no commit.

Why read git at run time, and why say "dirty": the two H200 logs of 2026-11-27
(benchmarks/gpu_2026-11-27_h200/) say `checkout e42f022`, while their file names say 6573376 and
7c2efa5. The device machine runs a copy of the working tree whose .git may lag behind it, so the
commit alone can name older code than the code that ran; the tree's changes against that commit
(`dirty`, `changed`) are what give it away. A result made from a dirty tree is not a result of its
commit, and says so.

A JSON committed before this existed records instead the commit that committed it, from `git log`,
marked `"read": COMMITTED_IN`: when it was committed, not what ran.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_TIME = "git at run time"
COMMITTED_IN = "git log, afterwards: the commit that committed this file (the run recorded none)"
MAX_PATHS = 20
"""The changed paths listed in full; beyond these only their number."""


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                          timeout=30).stdout


def provenance(root: Path | str = ROOT) -> dict:
    """The commit of `root`'s checkout (git's HEAD, full hash) and whether tracked files differ from it.

    {"commit": "<40 hex>", "dirty": bool, "changed": [paths, at most MAX_PATHS], "n_changed": int,
    "read": RUN_TIME}. Untracked files do not count as dirty (as `git describe --dirty`). Without
    git or outside a repository: commit and dirty are None and "error" says why; the run goes on.
    """
    root = Path(root)
    try:
        commit = _git(root, "rev-parse", "HEAD").strip()
        status = _git(root, "status", "--porcelain", "--untracked-files=no").splitlines()
    except (OSError, subprocess.SubprocessError) as err:
        detail = getattr(err, "stderr", None) or str(err)
        return {"commit": None, "dirty": None, "read": RUN_TIME, "error": detail.strip().splitlines()[-1]}
    changed = [line[3:] for line in status if line.strip()]
    return {"commit": commit, "dirty": bool(changed), "changed": changed[:MAX_PATHS], "n_changed": len(changed),
            "read": RUN_TIME}


def describe(record: dict) -> str:
    """One line for a log: the commit, and clean or dirty with the first five changed paths."""
    if record.get("commit") is None:
        return f"commit unknown ({record.get('error', 'no git')})"
    if not record.get("dirty"):
        return f"commit {record['commit']} clean"
    shown = record["changed"][:5]
    more = record["n_changed"] - len(shown)
    listed = ", ".join(shown) + (f", and {more} more" if more > 0 else "")
    return f"commit {record['commit']} dirty: {record['n_changed']} tracked paths changed ({listed})"


if __name__ == "__main__":
    print(describe(provenance(sys.argv[1] if len(sys.argv) > 1 else ROOT)))
