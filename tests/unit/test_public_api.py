"""`from rlhf_scratch import ...`: the names a user of the blog (and of TRL) reaches for."""

import subprocess
import sys

import rlhf_scratch

BLOG_NAMES = [
    "RLHFTrainer", "RLHFArgs", "get_samples", "get_log_probs", "compute_advantages", "calc_kl_penalty",
    "calc_entropy_bonus", "calc_value_fn_loss", "calc_clipped_sur_obj", "ReplayMemory", "ReplayMinibatch",
    "TransformerWithValueHead", "EarlyStopping", "AdaptiveKLController", "normalize_reward", "load_lm",
    "load_classifier", "load_run",
]
SIBLING_NAMES = ["RLOOTrainer", "compute_rloo_advantages", "OnlineDPOTrainer", "calc_dpo_loss", "Rollout", "make_rollout"]
USE_NAMES = ["to_hf_gpt2", "sample_both", "heldout_metrics"]


def test_every_public_name_imports_from_the_top_level():
    for name in BLOG_NAMES + SIBLING_NAMES + USE_NAMES:
        assert name in rlhf_scratch.__all__, f"{name} missing from rlhf_scratch.__all__"
        assert getattr(rlhf_scratch, name) is not None
    for name in rlhf_scratch.__all__:
        module = rlhf_scratch._EXPORTS[name]
        assert getattr(rlhf_scratch, name) is getattr(__import__(f"rlhf_scratch.{module}", fromlist=[name]), name)
    from rlhf_scratch import RLHFTrainer, calc_clipped_sur_obj  # noqa: F401  (the form users write)


def test_importing_the_config_does_not_import_torch():
    """A bad flag must be answered before the heavy imports (torch, transformers)."""
    code = "import sys, rlhf_scratch.config, rlhf_scratch.commands.train; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_module_paths_before_the_layers_are_the_same_modules():
    """`import rlhf_scratch.loop` is `rlhf_scratch.engine.loop` itself (a monkeypatch of one patches
    the other), for every moved module; `rlhf_scratch.rollout` (now a folder) still gives the old
    module's names without importing torch for its own submodules."""
    import importlib

    from rlhf_scratch import _aliases

    for old, new in _aliases.MOVED.items():
        assert importlib.import_module(f"rlhf_scratch.{old}") is importlib.import_module(f"rlhf_scratch.{new}"), old
    from rlhf_scratch.rollout import Rollout, make_rollout, phase

    assert (make_rollout, Rollout) == (phase.make_rollout, phase.Rollout)
    code = "import sys; from rlhf_scratch.rollout import corpus, prompts; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
