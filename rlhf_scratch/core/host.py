"""Reading numbers off the device once: a phase's metrics kept as 0-dim tensors while it runs, and
brought into Python by one read at its end (`read_once`).

Each `.item()`, `float()` or `bool()` of a tensor on a GPU makes the host wait until the device has
finished everything queued before it (a host sync). A phase that reads each minibatch's statistics
as it goes waits on the device dozens of times; one that keeps them on the device waits once.
`benchmarks/host_reads.py` counts the reads of a phase; docs/speed.md ("Host reads") has the count.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping

import torch
from torch import Tensor

Stats = dict[str, float | Tensor]
"""A phase's statistics under their metric names: numbers, or 0-dim tensors not read yet (`read_once`)."""


def read_once(*groups: Mapping) -> list[dict]:
    """Each of `groups` as a dict whose 0-dim tensor values are Python floats, from ONE read of the device:

        read_once({"a": tensor(0.25), "n": 3}, {"b": tensor(7)})  ->  [{"a": 0.25, "n": 3}, {"b": 7.0}]

    The tensors are stacked as float64 and brought over by one `.tolist()`. float64 holds every float32,
    bfloat16 and integer below 2**53 exactly, so each value is the float `.item()` gives (7.0 for an
    integer tensor, 1.0 / 0.0 for a bool). Values that are not tensors are left as they are."""
    out = [dict(group) for group in groups]
    where = [(group, key) for group in out for key, value in group.items() if isinstance(value, Tensor)]
    if not where:
        return out
    device = where[0][0][where[0][1]].device
    stacked = torch.stack([group[key].detach().reshape(()).to(device, torch.float64) for group, key in where])
    for (group, key), value in zip(where, stacked.tolist()):
        group[key] = value
    return out


_SEEN: dict[tuple[str, int], tuple[weakref.ref, int, bool]] = {}
"""(question, id of the tensor) -> (a weak reference to it, its version, the answer): `read_per_version`'s
memory, keyed by identity (a tensor's == is elementwise, so it cannot key a WeakKeyDictionary); an
entry goes when its tensor does."""


def read_per_version(tensor: Tensor, name: str, read: Callable[[Tensor], bool]) -> bool:
    """`read(tensor)`, a question about a tensor's values that costs a read of the device, asked once per
    version of that tensor object and remembered under `name`: a frozen reference's b_U once a run, a
    rollout's attention mask once a phase. Any in-place change (an optimizer step, `load_state_dict`)
    moves the tensor's `_version`, and the question is asked again. A tensor made under `inference_mode`
    has no version: asked every time."""
    if tensor.is_inference():
        return read(tensor)
    key = (name, id(tensor))
    seen = _SEEN.get(key)
    if seen is None or seen[0]() is not tensor or seen[1] != tensor._version:
        seen = (weakref.ref(tensor, lambda _, key=key: _SEEN.pop(key, None)), tensor._version, read(tensor))
        _SEEN[key] = seen
    return seen[2]
