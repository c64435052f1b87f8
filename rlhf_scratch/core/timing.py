"""Where a phase's time goes: named parts, summed over a phase and logged as `time/<part>`.

    with timed("generation"):
        completion_ids, completion_mask = generate(...)

The loop calls `take_times()` once per phase; whatever the parts do not cover is `time/other`.
A section opened inside another is counted once, in the inner part: the outer part's clock stops
while the inner one runs (PPO's per-minibatch reference forward inside its learning forward). On a GPU, kernels run
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
    "policy_forward",  # the rollout's scoring pass of the policy (and its extras): log-probs, entropy
    "reference_forward",  # every forward of the frozen reference, rollout or learning phase, and its KL
    "reward",  # decoding the completions and the reward function (or judge)
    "learning_forward",  # the policy's forward with gradient and the objective's terms
    "backward",  # objective.backward()
    "optimizer_step",  # gradient clipping and the optimizer step
    "logging",  # metrics, sample tables, plots, W&B
)

_totals: dict[str, float] = defaultdict(float)
_open: list[list] = []  # the sections open now, innermost last: [part, start of its running stretch]


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


@contextmanager
def timed(part: str):
    """Add the wall time of the `with` block to `part` (one of `PARTS`), less that of any section
    opened inside it (counted in its own part)."""
    _sync()
    now = time.perf_counter()
    if _open:  # pause the enclosing section
        _totals[_open[-1][0]] += now - _open[-1][1]
    _open.append([part, now])
    try:
        yield
    finally:
        _sync()
        now = time.perf_counter()
        _totals[part] += now - _open.pop()[1]
        if _open:  # the enclosing section runs again from now
            _open[-1][1] = now


def take_times() -> dict[str, float]:
    """The seconds spent in each part since the last call (every part, 0 if unused); resets them."""
    times = {part: _totals.get(part, 0.0) for part in PARTS}
    _totals.clear()
    return times
