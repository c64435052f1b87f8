"""The unit tier's rule holds itself (tests/unit/conftest.py): each way to start a process or a training
run, tried here, fails the test with one line naming the rule."""

import multiprocessing
import os
import subprocess
import sys

import pytest

from rlhf_scratch.engine import loop, reward_model

RULE = "tests/unit trains no whole run and starts no process"


@pytest.mark.parametrize("start", [
    lambda: subprocess.run([sys.executable, "-c", "pass"]),
    lambda: subprocess.Popen(["true"]),
    lambda: os.system("true"),
    lambda: os.fork(),
    lambda: multiprocessing.get_context("spawn").Process(target=print).start(),
    lambda: loop._run_phases(None, None, True, False, ()),  # what run_training (and Trainer.train) run
    lambda: reward_model.train_reward_model(None),
], ids=["subprocess.run", "Popen", "os.system", "os.fork", "multiprocessing", "the phase loop", "a reward model's run"])
def test_a_process_or_a_run_in_a_unit_test_fails_naming_the_rule(start):
    with pytest.raises(pytest.fail.Exception, match=RULE):
        start()
