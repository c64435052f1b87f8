"""`@register(dispatch_mode=...)`: how one call on the driver becomes one call per rank (verl's
single_controller/base/decorator.py, written from scratch).

    class ActorRolloutRefWorker(Worker):
        @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
        def generate_sequences(self, prompts: DataProto) -> DataProto: ...

    actor_wg.generate_sequences(prompts)    # on the driver: one call
      = collect(ray.get([w.generate_sequences.remote(piece) for w, piece in zip(workers, dispatch(prompts))]))

The dispatch mode is declared once, beside the method; the worker group reads it when it binds
the method (`worker_group.RayWorkerGroup`), so no call site re-codes the split:

    ONE_TO_ALL        every rank gets the same arguments; the results come back as a list, one per rank
    ALL_TO_ALL        each argument is already a list with one entry per rank; results as a list
    DP_COMPUTE_PROTO  every DataProto argument is cut into world_size contiguous chunks (rank r gets
                      chunk r); the ranks' DataProto results are concatenated back in rank order, and
                      their meta_info["metrics"] averaged over ranks (each rank's are already means)

`blocking` (verl's word, default True): the group's call waits for every rank and returns the
collected result. With `blocking=False` it returns at once a `worker_group.DataProtoFuture`, whose
`.get()` waits and collects in rank order (a rank's failure surfaces there, as the same one-line
`WorkerError`): the driver goes on while the ranks work (the rollout pool's `generate_sequences`
under `--max-staleness 1`, ray_trainer.py).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

from rlhf_scratch.controller.protocol import DataProto

MAGIC_ATTR = "_controller_dispatch"
"""The attribute `register` puts on a method: its dispatch mode. `RayWorkerGroup` binds every method that has it."""
BLOCKING_ATTR = "_controller_blocking"
"""The attribute `register` puts beside it: whether the group's call waits (False: it returns a future)."""


class Dispatch(Enum):
    ONE_TO_ALL = "one_to_all"
    ALL_TO_ALL = "all_to_all"
    DP_COMPUTE_PROTO = "dp_compute_proto"


def register(dispatch_mode: Dispatch = Dispatch.ALL_TO_ALL, blocking: bool = True) -> Callable:
    """Mark a worker method as callable on the whole group, split as `dispatch_mode` says; with
    `blocking=False` the group's call returns a future (`DataProtoFuture`) instead of waiting."""
    if not isinstance(dispatch_mode, Dispatch):
        raise TypeError(f"register: dispatch_mode must be a Dispatch, got {dispatch_mode!r}")

    def mark(method: Callable) -> Callable:
        setattr(method, MAGIC_ATTR, dispatch_mode)
        setattr(method, BLOCKING_ATTR, blocking)
        return method

    return mark


def dispatch_one_to_all(world_size: int, *args: Any, **kwargs: Any) -> tuple[list[tuple], list[dict]]:
    return [args] * world_size, [kwargs] * world_size


def dispatch_all_to_all(world_size: int, *args: Any, **kwargs: Any) -> tuple[list[tuple], list[dict]]:
    for name, value in [*enumerate(args), *kwargs.items()]:
        if not isinstance(value, (list, tuple)) or len(value) != world_size:
            raise ValueError(f"ALL_TO_ALL: argument {name} must be a list of one entry per rank ({world_size})")
    return ([tuple(a[r] for a in args) for r in range(world_size)],
            [{k: v[r] for k, v in kwargs.items()} for r in range(world_size)])


def dispatch_dp_compute_proto(world_size: int, *args: Any, **kwargs: Any) -> tuple[list[tuple], list[dict]]:
    """Each DataProto argument cut into world_size chunks (other arguments go to every rank as they are),
    each chunk without the left padding only the other ranks' rows needed (`DataProto.trim_left_pad`)."""
    def split(value: Any) -> list:
        if not isinstance(value, DataProto):
            return [value] * world_size
        return [chunk.trim_left_pad() for chunk in value.chunk(world_size)]  # each rank's own padding back

    args_split = [split(a) for a in args]
    kwargs_split = {k: split(v) for k, v in kwargs.items()}
    return ([tuple(a[r] for a in args_split) for r in range(world_size)],
            [{k: v[r] for k, v in kwargs_split.items()} for r in range(world_size)])


def collect_all(outputs: list[Any]) -> list[Any]:
    return outputs


def collect_dp_compute_proto(outputs: list[DataProto]) -> DataProto:
    """The ranks' batches in rank order; meta_info["metrics"] averaged over the ranks that report it."""
    for r, out in enumerate(outputs):
        if not isinstance(out, DataProto):
            raise ValueError(f"DP_COMPUTE_PROTO: rank {r} returned {type(out).__name__}, not a DataProto")
    merged = DataProto.concat(outputs)
    every = [o.meta_info["metrics"] for o in outputs if "metrics" in o.meta_info]
    if every:
        keys = dict.fromkeys(k for m in every for k in m)
        merged.meta_info["metrics"] = {k: sum(m[k] for m in every if k in m) / sum(k in m for m in every) for k in keys}
    return merged


DISPATCH = {
    Dispatch.ONE_TO_ALL: (dispatch_one_to_all, collect_all),
    Dispatch.ALL_TO_ALL: (dispatch_all_to_all, collect_all),
    Dispatch.DP_COMPUTE_PROTO: (dispatch_dp_compute_proto, collect_dp_compute_proto),
}
"""Each mode's (dispatch, collect) pair."""
