"""Where a phase's time goes: named parts, summed over a phase and logged as `time/<part>`.

    with timed("generation"):
        completion_ids, completion_mask = generate(...)

The loop calls `take_times()` once per phase; whatever the parts do not cover is `time/other`.
Parts never nest (a section inside another would be counted twice). On a GPU, kernels run
asynchronously: a section synchronises the device at its start and end so the time lands in the
part that launched the work (a few syncs per minibatch; the `.item()` calls of the logging
already sync about as often).
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import torch

PARTS = (
    "generation",  # sampling the completions (KV-cached decoding)
    "policy_forward",  # the rollout's scoring pass of the policy (and value head): log-probs, entropy
    "reference_forward",  # every forward of the frozen reference, rollout or learning phase, and its KL
    "reward",  # decoding the completions and the reward function (or judge)
    "learning_forward",  # the policy's forward with gradient and the objective's terms
    "backward",  # objective.backward()
    "optimizer_step",  # gradient clipping and the optimizer step
    "logging",  # metrics, sample tables, plots, W&B
)

_totals: dict[str, float] = defaultdict(float)


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


@contextmanager
def timed(part: str):
    """Add the wall time of the `with` block to `part` (one of `PARTS`)."""
    _sync()
    start = time.perf_counter()
    try:
        yield
    finally:
        _sync()
        _totals[part] += time.perf_counter() - start


def take_times() -> dict[str, float]:
    """The seconds spent in each part since the last call (every part, 0 if unused); resets them."""
    times = {part: _totals.get(part, 0.0) for part in PARTS}
    _totals.clear()
    return times
