"""Workers on Ray, and the group that makes N of them one object on the driver (verl's
single_controller/base/worker.py, worker_group.py and ray/base.py, written from scratch).

    pool  = RayResourcePool(process_on_nodes=[2])                      # 2 processes, 1 CPU each
    actor = RayWorkerGroup(pool, RayClassWithInitArgs(ActorRolloutRefWorker, args))
    out   = actor.generate_sequences(prompts)                          # one call: split, run, collect
    fut   = rollout.generate_sequences(prompts)                        # registered blocking=False: a DataProtoFuture,
    out   = fut.get()                                                  #   returned at once; .get() waits, collects in rank order

Colocation (`create_colocated_worker_cls`): several roles built in ONE process per rank, so they
share its device and, where they share weights, one model; `spawn` gives each role its own view:

    cls  = create_colocated_worker_cls({"actor_rollout_ref": RayClassWithInitArgs(ActorRolloutRefWorker, args),
                                        "rm": RayClassWithInitArgs(RewardModelWorker, args)})
    wgs  = RayWorkerGroup(pool, cls).spawn(["actor_rollout_ref", "rm"])
    wgs["rm"].compute_rm_score(batch)                      # → WorkerDict.execute_role("rm", "compute_rm_score", …) on each rank

With more than one rank the group also sets torch.distributed's environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) in each worker, so the package's own data-parallel code
(`rlhf_scratch.engine.distributed`: gloo on CPU, NCCL on GPU, DDP averaging gradients) runs inside the
group exactly as it runs under torchrun. With one rank none is set and nothing changes.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rlhf_scratch.controller.decorator import BLOCKING_ATTR, DISPATCH, MAGIC_ATTR, Dispatch, register


class WorkerError(RuntimeError):
    """A worker failed: its message is one line naming the role, the rank and the cause."""


class Worker:
    """The base of every role: its rank and the group's size (from the environment the group set),
    and the other roles built in the same process (`colocated`, filled by `create_colocated_worker_cls`)."""

    def __init__(self) -> None:
        self.rank = int(os.environ.get("CONTROLLER_RANK", 0))
        self.world_size = int(os.environ.get("CONTROLLER_WORLD_SIZE", 1))
        self.colocated: dict[str, Worker] = {}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self) -> int:
        """This worker's process id (the tests count processes)."""
        return os.getpid()


@dataclass
class RayClassWithInitArgs:
    """A worker class and the arguments to build it with, in each worker process."""

    cls: type
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def __init__(self, cls: type, *args: Any, **kwargs: Any) -> None:
        self.cls, self.args, self.kwargs = cls, args, kwargs


@dataclass
class RayResourcePool:
    """Where a group's processes go: `process_on_nodes[i]` processes on node i (one node here),
    each holding `num_cpus` CPUs and `num_gpus` GPUs, reserved together as one Ray placement group."""

    process_on_nodes: list[int]
    num_cpus: float | int = 1
    num_gpus: float | int = 0
    _pg: Any = None

    @property
    def world_size(self) -> int:
        return sum(self.process_on_nodes)

    def placement_group(self):
        if self._pg is None:
            bundle = {"CPU": self.num_cpus, **({"GPU": self.num_gpus} if self.num_gpus else {})}
            self._pg = placement_group([bundle] * self.world_size, strategy="PACK")
            ray.get(self._pg.ready(), timeout=60)
        return self._pg

    def release(self) -> None:
        if self._pg is not None:
            remove_placement_group(self._pg)
            self._pg = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RoleStartError(RuntimeError):
    """A colocated role's constructor failed: `ROLE: Type: message`."""


def _raised(traceback: str) -> str:
    """The `Type: message` line of a remote traceback (the first line after its last frame), the
    type without its module (`ModelFolderError: …`, not `rlhf_scratch.models.loading.ModelFolderError: …`)."""
    lines = traceback.splitlines()
    frames = [i for i, line in enumerate(lines) if line.lstrip().startswith("File ")]
    after = lines[frames[-1] + 1:] if frames else lines
    line = next((line for line in after if line and not line[0].isspace()), lines[-1] if lines else "")
    return re.sub(r"^[\w.]*\.(\w+): ", r"\1: ", line)


def registered_methods(cls: type) -> dict[str, Dispatch]:
    """Every method of `cls` (and its bases) marked by `register`, with its dispatch mode."""
    return {name: getattr(getattr(cls, name), MAGIC_ATTR) for name in dir(cls)
            if callable(getattr(cls, name, None)) and hasattr(getattr(cls, name), MAGIC_ATTR)}


def gather(role: str, name: str, refs: list[ray.ObjectRef]) -> list[Any]:
    """Each rank's result of call `name`, waited for in rank order; a failure is one WorkerError line
    naming the role, the rank and the cause (the first rank that failed, in rank order)."""
    out = []
    for rank, ref in enumerate(refs):
        try:
            out.append(ray.get(ref))
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if isinstance(e.cause, BaseException) else e
            first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
            raise WorkerError(f"{role} rank {rank}: {name} failed: {type(cause).__name__}: {first}") from None
        except ray.exceptions.RayActorError as e:
            if e.actor_init_failed:
                who, cause = role, _raised(e.error_msg)
                if cause.startswith(f"{RoleStartError.__name__}: "):  # a colocated role: name it
                    who, cause = cause.split(": ", 1)[1].split(": ", 1)
                raise WorkerError(f"{who} rank {rank}: failed to start: {cause}") from None
            raise WorkerError(f"{role} rank {rank}: the worker process died ({name})") from None
    return out


class DataProtoFuture:
    """A group's call that was not waited for (verl's `DataProtoFuture`, a method registered with
    `blocking=False`): one ObjectRef per rank and the mode's collect. `.get()` waits for every rank and
    collects in rank order, raising a rank's failure as the same one-line `WorkerError` a blocking call
    raises; it collects once and keeps the result. `refs[r]` is rank r's raw result in Ray's object
    store, to hand to another call without bringing it to the driver (`ray_trainer.RayPPOTrainer.sync_weights`)."""

    def __init__(self, collect: Callable[[list[Any]], Any], refs: list[ray.ObjectRef], role: str, name: str) -> None:
        self.collect, self.refs, self.role, self.name = collect, refs, role, name
        self._done: list[Any] = []

    def get(self) -> Any:
        if not self._done:
            self._done.append(self.collect(gather(self.role, self.name, self.refs)))
        return self._done[0]


class RayWorkerGroup:
    """N Ray actors of one class (one per bundle of `resource_pool`), seen from the driver as one
    object: each `register`-ed method of the class becomes a method of the group that dispatches,
    runs on every rank, waits, and collects (`decorator.DISPATCH`)."""

    def __init__(self, resource_pool: RayResourcePool, ray_cls_with_init: RayClassWithInitArgs, role: str = "") -> None:
        self.resource_pool, self.role = resource_pool, role or ray_cls_with_init.cls.__name__
        self.world_size, self._cls = resource_pool.world_size, ray_cls_with_init.cls
        self._class_dict = ray_cls_with_init.args[0] if self._cls is WorkerDict else {}
        pg, port = resource_pool.placement_group(), _free_port()
        remote_cls = ray.remote(ray_cls_with_init.cls)
        self.workers = []
        for rank in range(self.world_size):
            env = {"CONTROLLER_RANK": str(rank), "CONTROLLER_WORLD_SIZE": str(self.world_size)}
            if self.world_size > 1:  # torch.distributed's environment, as torchrun sets it
                env |= {"RANK": str(rank), "WORLD_SIZE": str(self.world_size), "LOCAL_RANK": str(rank),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
            self.workers.append(remote_cls.options(
                num_cpus=resource_pool.num_cpus, num_gpus=resource_pool.num_gpus, runtime_env={"env_vars": env},
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=rank),
            ).remote(*ray_cls_with_init.args, **ray_cls_with_init.kwargs))
        self._bind(ray_cls_with_init.cls)
        try:
            self.execute_all("pid")  # wait for every constructor: a failing one is reported here, with its rank
        except WorkerError:
            self.kill()  # the ranks that did start
            raise

    def _bind(self, cls: type, role: str | None = None) -> None:
        """Each registered method of `cls` as a method of this group (of colocated `role`'s, through
        `WorkerDict.execute_role`)."""
        for name, mode in registered_methods(cls).items():
            setattr(self, name, self._group_method(name, mode, role, getattr(getattr(cls, name), BLOCKING_ATTR, True)))

    def _group_method(self, name: str, mode: Dispatch, role: str | None, blocking: bool = True) -> Callable:
        dispatch, collect = DISPATCH[mode]

        def call(*args: Any, **kwargs: Any) -> Any:
            per_rank_args, per_rank_kwargs = dispatch(self.world_size, *args, **kwargs)
            if role is None:
                refs = self.submit_all(name, per_rank_args, per_rank_kwargs)
            else:
                refs = self.submit_all("execute_role", [(role, name, *a) for a in per_rank_args], per_rank_kwargs)
            future = DataProtoFuture(collect, refs, self.role, name)
            return future if not blocking else future.get()

        call.__name__ = name
        return call

    def execute_all(self, name: str, per_rank_args: list[tuple] | None = None,
                    per_rank_kwargs: list[dict] | None = None, label: str = "") -> list[Any]:
        """`name` on every rank (rank r with its own arguments), the results in rank order; a failure
        is one WorkerError line naming the role, the rank and the cause."""
        return gather(self.role, label or name, self.submit_all(name, per_rank_args, per_rank_kwargs))

    def submit_all(self, name: str, per_rank_args: list[tuple] | None = None,
                   per_rank_kwargs: list[dict] | None = None) -> list[ray.ObjectRef]:
        """`name` started on every rank, without waiting: one ObjectRef per rank, in rank order (a
        rank runs its calls in the order they were submitted: a Ray actor is one queue)."""
        per_rank_args = per_rank_args or [()] * self.world_size
        per_rank_kwargs = per_rank_kwargs or [{}] * self.world_size
        return [getattr(w, name).remote(*a, **k) for w, a, k in zip(self.workers, per_rank_args, per_rank_kwargs)]

    def spawn(self, prefix_set: Iterable[str]) -> dict[str, RayWorkerGroup]:
        """One view per colocated role: the same processes, that role's methods under their own names."""
        if self._cls is not WorkerDict:
            raise ValueError(f"spawn: {self.role} is not a colocated group (create_colocated_worker_cls)")
        views = {}
        for role in prefix_set:
            view = object.__new__(RayWorkerGroup)
            view.resource_pool, view.role, view.world_size, view.workers = self.resource_pool, role, self.world_size, self.workers
            view._cls = self._class_dict[role].cls
            view._bind(view._cls, role)
            views[role] = view
        return views

    def kill(self) -> None:
        """End every worker process of the group (and its views)."""
        for w in self.workers:
            ray.kill(w)


class WorkerDict(Worker):
    """Several roles in one process: each role of `class_dict` built in order, role R's method M
    run by `execute_role(R, M, ...)`. A role finds the roles built before it in this process in
    `self.colocated` (the critic reads the actor's trunk there)."""

    def __init__(self, class_dict: dict[str, RayClassWithInitArgs]) -> None:
        super().__init__()
        for role, spec in class_dict.items():
            try:
                worker = spec.cls(*spec.args, **spec.kwargs)
            except Exception as e:  # the driver's one line names the role
                raise RoleStartError(f"{role}: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}") from None
            worker.colocated = self.colocated  # one dict shared by every role of this process
            self.colocated[role] = worker

    def execute_role(self, role: str, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.colocated[role], name)(*args, **kwargs)


def create_colocated_worker_cls(class_dict: dict[str, RayClassWithInitArgs]) -> RayClassWithInitArgs:
    """One worker class that builds every role of `class_dict` in each of its processes
    (`WorkerDict`); `RayWorkerGroup.spawn` then gives each role its own view of the group."""
    return RayClassWithInitArgs(WorkerDict, dict(class_dict))
