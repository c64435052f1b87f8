"""Ray's processes share the driver's fate: a driver killed with SIGKILL leaves none behind.

`ray.init()` in the driver starts a local Ray (GCS, raylet, their agents, the workers) as the
driver's descendants. Most of them go when the driver goes, but Ray 2.60's two per-node agents
(`ray::DashboardAgent`, `ray::RuntimeEnvAgent`) outlive a SIGKILLed driver: they notice that their
raylet is gone, then wait on the dead GCS to report it, and stay (measured: still running 60 s after
the kill, tests/kill_sweep.py's train-controller case). A reaper started beside the driver fixes that:

    reaper   every POLL_S: note the driver's descendants that are Ray's (their command line says so;
             with their start time: a reused pid is not ours)
             the driver is gone, or the driver ended Ray itself (`shutdown_ray`: SIGTERM to the reaper):
             SIGKILL every noted process still alive, then exit

It runs only where the driver started the local Ray itself (not on a cluster it joined) and where
/proc lists processes (Linux); elsewhere Ray's own clean-up is all there is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 0.2
PROC = Path("/proc")
RAY_MARKS = ("ray::", "/ray/")
"""A process is Ray's when its command line holds one of these (`ray::IDLE`, `…/site-packages/ray/…/raylet`)."""


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of `pid`, from /proc/PID/stat; None if it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid ... (starttime is field 22)
    return int(fields[1]), int(fields[19])


def descendants(pid: int) -> dict[int, int]:
    """Every live descendant of `pid`: {pid: start time}."""
    parent_of: dict[int, tuple[int, int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parent_of[int(entry.name)] = stat
    found: dict[int, int] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, start) in parent_of.items():
            if ppid == parent and child not in found:
                found[child] = start
                frontier.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def reap(driver: int, marks: tuple[str, ...] = RAY_MARKS, poll_s: float = POLL_S) -> list[int]:
    """Watch `driver`, noting its descendants whose command line holds one of `marks`; once the
    driver is gone (or this process gets SIGTERM), SIGKILL those noted still alive with the start
    time they were seen with. Returns the pids killed."""
    me = os.getpid()
    seen: dict[int, int] = {}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    while _stat(driver) is not None and not stop:
        for pid, start in descendants(driver).items():
            if pid != me and pid not in seen and any(mark in _cmdline(pid) for mark in marks):
                seen[pid] = start
        time.sleep(poll_s)
    killed = []
    for pid, start in seen.items():
        stat = _stat(pid)
        if stat is not None and stat[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
    return killed


def start_reaper(driver: int | None = None, marks: tuple[str, ...] = RAY_MARKS) -> subprocess.Popen | None:
    """Start the reaper of `driver` (this process by default) as a process of its own; None where
    /proc is missing."""
    if not (PROC / str(os.getpid()) / "stat").is_file():
        return None
    driver = os.getpid() if driver is None else driver
    return subprocess.Popen([sys.executable, "-m", "rlhf_scratch.controller.fate", str(driver), *marks],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_reaper(reaper: subprocess.Popen | None, timeout_s: float = 10.0) -> None:
    """After the driver ended Ray itself: the reaper kills what of Ray is still alive, and exits."""
    if reaper is not None and reaper.poll() is None:
        reaper.terminate()
        reaper.wait(timeout=timeout_s)


if __name__ == "__main__":
    reap(int(sys.argv[1]), tuple(sys.argv[2:]) or RAY_MARKS)
