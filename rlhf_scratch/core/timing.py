"""Where a phase's time goes: named parts, summed over a phase and logged as `time/<part>`.

    with timed("generation"):
        completion_ids, completion_mask = generate(...)

The loop calls `take_times()` once per phase; whatever the parts do not cover is `time/other`.
A section opened inside another is counted once, in the inner part: the outer part's clock stops
while the inner one runs (PPO's per-minibatch reference forward inside its learning forward).

On a GPU kernels run asynchronously, so a part's clock measures the launches, and the work lands in
whichever part next waits on the device. A true split by part needs each section to synchronise the
device at its start and end: a host sync per section, several a minibatch (docs/speed.md, "Host
reads"), so it is done only when a profile is asked for: `profile(True)`, or `RLHF_SCRATCH_PROFILE=1`
in the environment (the benchmarks that report parts on a GPU, `bench_trl.py` and `gpu_speed.py`, set
it). Without it a run waits on the device only where it reads numbers, and its phase time
(`charts/phase_time`, read after the phase's one read of its metrics) is the same either way.
"""

from __future__ import annotations

import os
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


_profile = os.environ.get("RLHF_SCRATCH_PROFILE", "") not in ("", "0")


def profile(on: bool = True) -> None:
    """Synchronise the device at each section's start and end (on), so each part holds its own GPU
    work; or not (off, the default unless RLHF_SCRATCH_PROFILE=1): no host sync from the clocks."""
    global _profile
    _profile = on


def _sync() -> None:
    """Wait for the device, where a profile was asked for (`profile`) and a GPU is in use."""
    if _profile and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


@contextmanager
def timed(part: str):
    """Add the wall time of the `with` block to `part` (one of `PARTS`), less that of any section
    opened inside it (counted in its own part). With `profile` on, the device is synchronised at both ends."""
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
