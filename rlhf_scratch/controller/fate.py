"""Ray's processes share the driver's fate: a driver killed with SIGKILL leaves none behind.

`ray.init()` in the driver starts a local Ray (GCS, raylet, their agents, the workers) as the
driver's descendants. Most of them go when the driver goes, but Ray 2.60's two per-node agents
(`ray::DashboardAgent`, `ray::RuntimeEnvAgent`) outlive a SIGKILLed driver: they notice that their
raylet is gone, then wait on the dead GCS to report it, and stay (measured: still running 60 s after
the kill, tests/kill_sweep.py's train-controller case). A reaper started beside the driver fixes that:

    driver   while `ray.init` starts Ray's processes: MARK_ENV=<driver pid>:<its start time> in the
             environment, so GCS, raylet and every worker the raylet later forks inherit it
    reaper   every POLL_S: note the driver's descendants that are Ray's (their command line says so;
             with their start time: a reused pid is not ours)
             the driver is gone, or the driver ended Ray itself (`shutdown_ray`: SIGTERM to the reaper):
             round after round, SIGKILL the noted processes still alive, every process carrying the
             mark, and their descendants, until two rounds in a row find none; then exit

The mark covers what a poll cannot see: a worker forked in the last POLL_S before the kill, whose
parent died with the driver and left it an orphan outside the driver's tree (CI, 2026-11-27: one
process of the killed controller run still alive 5 s after the kill, once in 9 kills).

It runs only where the driver started the local Ray itself (not on a cluster it joined) and where
/proc lists processes (Linux); elsewhere Ray's own clean-up is all there is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

POLL_S = 0.2
GIVE_UP_S = 30.0
"""The reaper's rounds end after this long even if a killed process still shows (it exits regardless)."""
PROC = Path("/proc")
MARK_ENV = "RLHF_SCRATCH_RAY_OF"
"""Set in the environment of Ray's processes: `<driver pid>:<driver start time>` (`marking`)."""
RAY_MARKS = ("ray::", "/ray/")
"""A process is Ray's when its command line holds one of these (`ray::IDLE`, `…/site-packages/ray/…/raylet`)."""


def _fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after "pid (comm) ": state, ppid, … (starttime is the 20th); None if it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of `pid`; None if it is gone."""
    fields = _fields(pid)
    return None if fields is None else (int(fields[1]), int(fields[19]))


def _table() -> dict[int, tuple[int, int]]:
    """Every live process: {pid: (parent pid, start time)}, one read of /proc."""
    return {int(e.name): stat for e in PROC.iterdir() if e.name.isdigit() and (stat := _stat(int(e.name))) is not None}


def descendants(pid: int, table: dict[int, tuple[int, int]] | None = None) -> dict[int, int]:
    """Every live descendant of `pid`: {pid: start time} (from `table`, else a fresh read of /proc)."""
    parent_of = _table() if table is None else table
    found: dict[int, int] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, start) in parent_of.items():
            if ppid == parent and child not in found:
                found[child] = start
                frontier.append(child)
    return found


def mark_of(driver: int) -> str:
    """The value of MARK_ENV that names `driver` (its pid and start time: a reused pid differs)."""
    stat = _stat(driver)
    return f"{driver}:{stat[1] if stat else 0}"


@contextmanager
def marking(driver: int | None = None):
    """MARK_ENV in this process's environment for the block's duration (around `ray.init`: what it
    starts inherits it; later children of the driver do not), then the environment as before."""
    before = os.environ.get(MARK_ENV)
    os.environ[MARK_ENV] = mark_of(os.getpid() if driver is None else driver)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(MARK_ENV, None)
        else:
            os.environ[MARK_ENV] = before


def carrying(mark: str) -> dict[int, int]:
    """Every live process whose environment holds MARK_ENV=`mark`: {pid: start time}."""
    needle = f"{MARK_ENV}={mark}".encode()
    found = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and (stat := _stat(int(entry.name))) is not None:
            found[int(entry.name)] = stat[1]
    return found


def _cmdline(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def reap(driver: int, marks: tuple[str, ...] = RAY_MARKS, poll_s: float = POLL_S, mark: str | None = None) -> list[int]:
    """Watch `driver`, noting its descendants whose command line holds one of `marks`; once the
    driver is gone (or this process gets SIGTERM), kill the noted, the processes carrying `mark`
    (MARK_ENV's value; None: none) and their descendants, in rounds until two in a row find none.
    Returns the pids killed."""
    me = os.getpid()
    seen: dict[int, int] = {}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    while _stat(driver) is not None and not stop:
        for pid, start in descendants(driver).items():
            if pid != me and pid not in seen and any(mark in _cmdline(pid) for mark in marks):
                seen[pid] = start
        time.sleep(poll_s)
    killed: list[int] = []
    quiet, deadline = 0, time.monotonic() + GIVE_UP_S
    while quiet < 2 and time.monotonic() < deadline:  # (a process stuck in the kernel may outlive a SIGKILL a while)
        targets = {pid: start for pid, start in seen.items() if (stat := _stat(pid)) is not None and stat[1] == start}
        if mark is not None:
            targets |= carrying(mark)
        table = _table()
        for pid in list(targets):
            targets |= descendants(pid, table)
        targets.pop(me, None)
        alive = {pid: start for pid, start in targets.items() if not _zombie_or_gone(pid, start)}
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
        quiet = 0 if alive else quiet + 1
        time.sleep(poll_s / 4)
    return sorted(set(killed))


def _zombie_or_gone(pid: int, start: int) -> bool:
    """Whether `pid` is no longer the live process that started at `start` (gone, reused, or a zombie
    that only its parent's wait will clear)."""
    fields = _fields(pid)
    return fields is None or fields[0] == "Z" or int(fields[19]) != start


def start_reaper(driver: int | None = None, marks: tuple[str, ...] = RAY_MARKS) -> subprocess.Popen | None:
    """Start the reaper of `driver` (this process by default) as a process of its own, watching for
    `mark_of(driver)` too (set it with `marking`); None where /proc is missing."""
    if not (PROC / str(os.getpid()) / "stat").is_file():
        return None
    driver = os.getpid() if driver is None else driver
    return subprocess.Popen([sys.executable, "-m", "rlhf_scratch.controller.fate", str(driver), mark_of(driver), *marks],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_reaper(reaper: subprocess.Popen | None, timeout_s: float = GIVE_UP_S + 10) -> None:
    """After the driver ended Ray itself: the reaper kills what of Ray is still alive, and exits
    (its rounds end within GIVE_UP_S; a reaper still running after `timeout_s` is killed itself)."""
    if reaper is not None and reaper.poll() is None:
        reaper.terminate()
        try:
            reaper.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            reaper.kill()
            reaper.wait()


if __name__ == "__main__":
    reap(int(sys.argv[1]), tuple(sys.argv[3:]) or RAY_MARKS, mark=sys.argv[2])
