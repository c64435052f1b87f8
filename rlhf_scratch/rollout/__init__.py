"""rollout: prompts (and the review corpus they come from), sampling (`generation`), and the
rollout phase itself (`phase.make_rollout`: generate, score by the reward-call contract, the
policy's and the reference's log-probs). Imports `models`, `core`, `config`.

`rlhf_scratch.rollout` was the rollout module before the layers; its names (`make_rollout`,
`Rollout`, `policy_token_log_probs` …) still read from here, imported from `phase` on first use
(a folder and a module cannot share the name, so the alias finder cannot serve this one).
"""

import importlib
import pkgutil

_MODULES = {info.name for info in pkgutil.iter_modules(__path__)}


def __getattr__(name: str):
    if name.startswith("__") or name in _MODULES:  # a module of this folder: the import system loads it
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    phase = importlib.import_module("rlhf_scratch.rollout.phase")
    if not hasattr(phase, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(phase, name)
