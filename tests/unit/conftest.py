"""The unit tier's rule, held: a unit test trains no whole run and starts no process (CONTRIBUTING,
"Test"). Every test here runs with the ways to break it replaced by a failure that names the rule:

    a process    subprocess (Popen and all that use it: run, check_output, ...), os.fork / forkpty /
                 posix_spawn / system, multiprocessing's Process.start (a Pool's workers too)
    a run        the phase loop (`engine.loop.run_training` reaches it through `_run_phases`), a
                 reward model's run (`engine.reward_model.train_reward_model`)

A test that needs either belongs in tests/integration. One learning phase on a tiny model, a trainer
built and stepped by hand, the command line parsed and refused: all of that stays a unit test.
"""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

RULE = ("tests/unit trains no whole run and starts no process (CONTRIBUTING.md, 'Test'): {what} here; "
        "move this test to tests/integration")


def _refuse(what: str):
    def refused(*args, **kwargs):
        pytest.fail(RULE.format(what=what), pytrace=False)

    return refused


@contextmanager
def no_process_and_no_run() -> Iterator[None]:
    """Every way to start a process or a training run replaced by a failure that names the rule."""
    from rlhf_scratch.engine import loop, reward_model

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", _refuse("a subprocess was started"))
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
            if hasattr(os, name):
                patch.setattr(os, name, _refuse(f"os.{name} was called"))
        patch.setattr(multiprocessing.process.BaseProcess, "start", _refuse("a multiprocessing process was started"))
        patch.setattr(loop, "_run_phases", _refuse("a training run's phase loop was entered"))
        patch.setattr(reward_model, "train_reward_model", _refuse("a reward model's training run was started"))
        yield


# Around each phase of every test in this folder (and only this folder: pytest calls these hooks of a
# folder's conftest for its own tests), so a module- or session-scoped fixture that a unit test sets up
# is held to the rule too, not only the test's body.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with no_process_and_no_run():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with no_process_and_no_run():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    with no_process_and_no_run():
        return (yield)
