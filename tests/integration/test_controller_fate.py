"""controller/fate.py: what a driver started shares its fate — killed with SIGKILL, it leaves no
descendant behind (Ray 2.60's agents outlived it), and a process that merely reuses a pid is spared."""

import os
import signal
import subprocess
import sys
import time

from rlhf_scratch.controller.fate import _stat, descendants, start_reaper

DRIVER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def wait_until(predicate, timeout_s: float = 10.0) -> bool:
    end = time.time() + timeout_s
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_a_sigkilled_drivers_descendants_are_killed_by_its_reaper():
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True)
    child = int(driver.stdout.readline())
    assert wait_until(lambda: len(descendants(driver.pid)) == 2), "the driver's child and grandchild"
    family = set(descendants(driver.pid))
    assert child in family
    reaper = start_reaper(driver.pid, marks=("sleep(60)",))
    time.sleep(1.0)  # the reaper has seen them
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    assert wait_until(lambda: all(_stat(pid) is None or _zombie(pid) for pid in family), 5.0), "no descendant left"
    assert reaper.wait(timeout=5) == 0, "the reaper exits once its work is done"


def test_descendants_is_the_whole_subtree_and_nothing_else():
    outsider = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        mine = descendants(os.getpid())
        assert outsider.pid in mine, "a child of this process"
        assert os.getppid() not in mine and os.getpid() not in mine, "never the root or its parent"
        assert mine[outsider.pid] == _stat(outsider.pid)[1], "with its start time (a reused pid differs)"
    finally:
        outsider.kill()
        outsider.wait()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_stopping_the_reaper_kills_what_it_noted_and_only_that():
    """`shutdown_ray`'s path: the driver lives on and stops its reaper; the reaper kills the marked
    descendants still alive (Ray's leftovers) and spares an unmarked child."""
    marked = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(61)"])
    unmarked = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(62)"])
    try:
        reaper = start_reaper(marks=("sleep(61)",))
        time.sleep(1.0)
        from rlhf_scratch.controller.fate import stop_reaper

        stop_reaper(reaper)
        assert reaper.returncode == 0
        assert marked.wait(timeout=5) == -signal.SIGKILL
        assert unmarked.poll() is None, "not Ray's: left alone"
    finally:
        for proc in (marked, unmarked):
            proc.kill()
            proc.wait()
