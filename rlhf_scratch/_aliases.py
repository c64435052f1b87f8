"""The module paths before the package was laid out in layers, kept as aliases (no files).

`import rlhf_scratch.loop` gives the very module `rlhf_scratch.engine.loop` (the same object, so
a monkeypatch of one is a monkeypatch of the other), and `python -m rlhf_scratch.train` still runs
`rlhf_scratch.commands.train`: a finder on `sys.meta_path` maps the old name to the new one. A
package alias covers what is under it (`rlhf_scratch.exact.cli` is `rlhf_scratch.microscope.cli`).
New code imports the new paths; docs/architecture.md draws the layers.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "registry": "config.registry",
    "cli": "config.cli",
    "objectives": "core.objectives",
    "advantages": "core.advantages",
    "memory": "core.memory",
    "kl_control": "core.kl_control",
    "vocab_terms": "core.vocab_terms",
    "timing": "core.timing",
    "quiet": "core.quiet",
    "plots": "pages.plots",
    "loading": "models.loading",
    "lora": "models.lora",
    "hf_format": "models.hf_format",
    "model_families": "models.families",
    "fast_forward": "models.fast_forward",
    "static_cache": "models.static_cache",
    "model": "algorithms.ppo.policy",  # PPO's policy class, with Policy and language_model as before
    "prompts": "rollout.prompts",
    "corpus": "rollout.corpus",
    "generation": "rollout.generation",
    "heldout": "reward.heldout",
    "loop": "engine.loop",
    "lifecycle": "engine.lifecycle",
    "runs": "engine.runs",
    "checkpoint": "engine.checkpoint",
    "logger": "engine.logger",
    "optim": "engine.optim",
    "distributed": "engine.distributed",
    "accel": "engine.accel",
    "run_setup": "engine.run_setup",
    "trainer": "engine.trainer",
    "contract": "engine.contract",
    "train": "commands.train",
    "pretrain": "commands.pretrain",
    "reward_model": "commands.reward_model",
    "preferences": "commands.preferences",
    "sample": "commands.sample",
    "export": "commands.export",
    "compare": "commands.compare",
    "overoptimization": "commands.overoptimization",
    "exact": "microscope",
    "tiny_preset": "commands.tiny_preset",
}
"""Old name under `rlhf_scratch.` -> its home now."""


def new_name(fullname: str) -> str | None:
    """The module `fullname` now lives at, or None when it was not moved."""
    prefix = "rlhf_scratch."
    if not fullname.startswith(prefix):
        return None
    rest = fullname[len(prefix):]
    head, dot, tail = rest.partition(".")
    if head not in MOVED:
        return None
    return prefix + MOVED[head] + dot + tail


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)  # the real module: sys.modules maps both names to it

    def exec_module(self, module) -> None:
        pass  # already executed under its own name

    def get_code(self, fullname: str):
        """For `python -m OLD`: runpy runs the new module's code as __main__."""
        spec = importlib.util.find_spec(self.target)
        return spec.loader.get_code(self.target)


class AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = new_name(fullname)
        if new is None or new == fullname:
            return None
        real = importlib.util.find_spec(new)
        if real is None:
            return None
        spec = importlib.util.spec_from_loader(  # origin: runpy sets sys.argv[0] and __file__ from it
            fullname, _AliasLoader(new), origin=real.origin, is_package=real.submodule_search_locations is not None)
        spec.has_location = real.has_location
        return spec


def install() -> None:
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(AliasFinder())
