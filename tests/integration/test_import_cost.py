"""What an import costs, seen from a fresh interpreter: the config and the command line import no torch
(each test starts a fresh interpreter)."""

import subprocess
import sys


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
