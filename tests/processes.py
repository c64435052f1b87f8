"""Processes the tests start and must never leave running: `run_bounded` and `torchrun` (a support
module: tests/slow/test_distributed.py and tests/integration/test_controller.py use them)."""

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

TIMEOUT = 240  # seconds: a hang (a rank waiting on a collective the other never joins) fails, not blocks


def run_bounded(cmd: list[str], timeout: float = TIMEOUT, **kwargs) -> subprocess.CompletedProcess:
    """`subprocess.run` that cannot block the suite: past TIMEOUT every process it started is killed —
    torchrun *and* its workers, which torchrun starts in sessions of their own, so that neither a plain
    timeout nor killing torchrun's process group reaches them (and a surviving worker would hold the
    output pipes open for ever) — and the test fails with their output."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for process in [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        out, err = proc.communicate()
        pytest.fail(f"hung for {timeout} s: {' '.join(cmd[2:])}\n{err[-2000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def torchrun(*args: str, cwd: Path, nproc: int = 2, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    return run_bounded(cmd, cwd=cwd, env=env)
