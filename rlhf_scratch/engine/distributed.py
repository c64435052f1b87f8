"""Data parallelism with `torchrun`: the one module that talks to `torch.distributed`.

    torchrun --standalone --nproc-per-node N -m rlhf_scratch.train sentiment [--algo ...]

Each of the N processes (ranks) samples its own share of the global batch — whole prompt groups
for RLOO, whole pairs for Online DPO — scores it and computes its loss; `DistributedDataParallel`
averages the gradients, so every rank takes the same optimizer step and the weights stay equal.
Statistics that span the batch (reward normalisation, every logged mean) are computed from the
gathered batch, so a logged number means what it means in a single process. Rank 0 alone writes
the run folder, the checkpoints and W&B.

Without torchrun (no RANK in the environment) nothing here creates a process group, and every
function is the identity on one process: `python -m rlhf_scratch.train` is unchanged.
Backend: NCCL when the run is on CUDA, Gloo on CPU; multi-node launch is torchrun's (docs/distributed.md).
"""

from __future__ import annotations

import os
import time
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

T = TypeVar("T")


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init(device: str) -> str:
    """Join the process group torchrun set up (once); return the device this rank runs on
    (`cuda:LOCAL_RANK` for a CUDA run, else `device`)."""
    if not launched_by_torchrun():
        return device
    cuda = device.startswith("cuda")
    if cuda:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
        torch.cuda.set_device(device)
    if not dist.is_initialized():  # NCCL: bound to this rank's GPU, so its collectives never guess the device
        dist.init_process_group(backend="nccl" if cuda else "gloo", device_id=torch.device(device) if cuda else None)
    return device


def destroy(finished: bool = True) -> None:
    """Leave the process group; `finished=False` when this rank stops on an error, whatever the others do.

    Why it waits first: Gloo's worker threads free a finished collective's work, which holds Python
    tensors and so needs the GIL, a moment after the collective returns. If that moment falls after
    the process group's destructor has started — it joins those threads while holding the GIL — the
    process deadlocks at exit (seen in about one 2-process run in two). Waiting releases the GIL so
    the threads finish first: in a barrier when every rank got here normally (the other ranks may
    otherwise be anywhere, and a barrier could wait for ever), then in a short sleep, which also lets
    them free the barrier's own work (a 2-process Online DPO run still hung at exit once, under a
    loaded CI, with the barrier alone)."""
    if dist.is_initialized():
        if finished:
            dist.barrier()
        time.sleep(0.2)
        dist.destroy_process_group()


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def is_main() -> bool:
    """Rank 0: the one process that prints and writes files."""
    return rank() == 0


def shard(items: list[T], num_ranks: int | None = None, this_rank: int | None = None) -> list[T]:
    """This rank's contiguous share of `items` (len divisible by the world size): rank r of W gets
    items[r·n/W : (r+1)·n/W]. Sharding prompts before they are repeated G times keeps every
    prompt's group (RLOO's G completions, DPO's pair) on one rank."""
    num_ranks = world_size() if num_ranks is None else num_ranks
    this_rank = rank() if this_rank is None else this_rank
    if len(items) % num_ranks:
        raise ValueError(f"cannot split {len(items)} items evenly over {num_ranks} ranks")
    n = len(items) // num_ranks
    return items[this_rank * n : (this_rank + 1) * n]


def all_gather(x: Tensor) -> Tensor:
    """Every rank's `x` (same shape on each) concatenated along dim 0, in rank order."""
    if world_size() == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts)


def local_rows(x: Tensor) -> Tensor:
    """This rank's rows of a gathered tensor (the inverse of `all_gather`)."""
    n = x.shape[0] // world_size()
    return x[rank() * n : (rank() + 1) * n]


def mean_over_ranks(stats: dict[str, float]) -> dict[str, float]:
    """Each value averaged over the ranks that logged it (a trainer's per-minibatch means: every
    rank runs as many minibatches, so this is the mean over all of them)."""
    if world_size() == 1:
        return stats
    every = gather_objects(stats)
    keys = dict.fromkeys(k for s in every for k in s)  # first-seen order, as one process logs them
    return {k: sum(s[k] for s in every if k in s) / sum(k in s for s in every) for k in keys}


def any_rank(flag: bool) -> bool:
    """True on every rank if it is True on any (e.g. a stop signal that reached one process)."""
    if world_size() == 1:
        return flag
    value = torch.tensor([int(flag)], device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's `obj` (picklable), in rank order, on every rank."""
    if world_size() == 1:
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def wrap_for_training(module: torch.nn.Module) -> torch.nn.Module:
    """`DistributedDataParallel(module)` in a distributed run (gradients averaged over ranks in
    backward; parameters broadcast from rank 0 at construction), else `module` itself."""
    if world_size() == 1:
        return module
    from torch.nn.parallel import DistributedDataParallel

    device = next(module.parameters()).device
    return DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)
