"""What an import costs, seen from a fresh interpreter: the config and the command line import no torch
(each test starts a fresh interpreter)."""

import subprocess
import sys

import pytest

from rlhf_scratch.commands.main import COMMANDS

ANSWERS_BEFORE_TORCH = (
    "train", "sample", "export", "compare", "data", "preferences", "overoptimization", "hacking", "hacking-pilot",
    "hacking-bon", "hacking-mitigate", "hacking-find", "length", "features-seeds", "report", "features", "exact",
    "families", "pretrain", "pretrain-arithmetic", "pass-at-k", "calculator-study", "notebooks", "reward-model",
)
"""The commands whose `--help` and bad flags are answered before torch (or transformers) is imported: a
fraction of a second instead of the 6-15 s an import of torch takes on the 2-core machine."""


def test_importing_the_config_does_not_import_torch():
    """A bad flag must be answered before the heavy imports (torch, transformers)."""
    code = "import sys, rlhf_scratch.config, rlhf_scratch.commands.train; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_rollout_package_gives_its_modules_names_without_torch():
    """`rlhf_scratch.rollout` (a folder) gives `make_rollout` and `Rollout` from its `phase` module, and
    importing its torch-free submodules imports no torch."""
    from rlhf_scratch.rollout import Rollout, make_rollout, phase

    assert (make_rollout, Rollout) == (phase.make_rollout, phase.Rollout)
    code = "import sys; from rlhf_scratch.rollout import corpus, prompts; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_command_listed_is_one():
    assert set(ANSWERS_BEFORE_TORCH) <= set(COMMANDS), set(ANSWERS_BEFORE_TORCH) - set(COMMANDS)


@pytest.mark.parametrize("name", ANSWERS_BEFORE_TORCH)
def test_a_command_answers_help_and_a_bad_flag_before_importing_torch(name):
    """`rlhf NAME --help` (exit 0) and `rlhf NAME --no-such-flag` (exit 2), then: is torch imported?"""
    code = ("import contextlib, io, sys\n"
            "from rlhf_scratch.commands.main import main\n"
            "for argv, code in (['--help'], 0), (['--no-such-flag'], 2):\n"
            "    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):\n"
            f"        assert main([{name!r}, *argv]) == code, argv\n"
            "    heavy = sorted({'torch', 'transformers'} & set(sys.modules))\n"
            "    print(argv[0], ','.join(heavy) or '-')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["--help", "-", "--no-such-flag", "-"], (
        f"rlhf {name}: imported before it answered (flag, modules): {out.stdout.split()}")
