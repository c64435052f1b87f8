"""`RayPPOTrainer`: one driver process drives the dataflow by calling worker groups (verl's
trainer/ppo/ray_trainer.py, written from scratch over the package's own pieces).

    for phase in 1..total_phases:
        prompts   = self.prompts.next_batch(...)                           # the driver's data
        batch     = actor_rollout_ref.generate_sequences(prompts)         # timing/gen
        batch    |= actor_rollout_ref.compute_log_prob(batch)             # timing/ref: log π_old, log π_ref, KL, V
        batch    |= rm.compute_rm_score(batch)                            # timing/reward
        rewards   = scores − missing-EOS penalty                          # on the driver
        batch    |= advantages (PPO: the trainer's own compute_advantages) # timing/adv, on the driver
        metrics   = actor_rollout_ref.update_actor(batch)                  # timing/update_actor

Each line is one call on the driver; the worker group splits the batch over its ranks, runs the
method on each and collects in order (`decorator.register`). The metrics are the in-process
loop's (`loop.rollout_metrics`, `heldout.heldout_metrics`, the trainer's learning phase), so a run
here and an in-process run at the same seed log the same numbers (tests/integration/test_controller.py).

Placement: `colocated` — every role in one process per rank (`create_colocated_worker_cls`), the
default; `split` — the reward model in a pool of its own processes, the actor (with its rollout,
reference and the value head on its trunk) in another.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import ray
import torch

from rlhf_scratch.algorithms.ppo import RLHFTrainer
from rlhf_scratch.config import CommonArgs, ConfigError, registry
from rlhf_scratch.controller.command import PLACEMENTS
from rlhf_scratch.controller.fate import start_reaper, stop_reaper
from rlhf_scratch.controller.protocol import DataProto
from rlhf_scratch.controller.worker_group import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_cls,
)
from rlhf_scratch.controller.workers import ActorRolloutRefWorker, RewardModelWorker, to_rollout
from rlhf_scratch.engine.batch import batch_of
from rlhf_scratch.engine.logger import Metrics
from rlhf_scratch.engine.loop import rollout_metrics
from rlhf_scratch.engine.run_setup import resolve_device
from rlhf_scratch.reward.heldout import heldout_metrics
from rlhf_scratch.rollout.phase import Rollout
from rlhf_scratch.rollout.prompts import PromptIterator, load_prompts


def num_generations(args: CommonArgs) -> int:
    """G, the completions per prompt the algorithm samples, as its trainer class says
    (`Trainer.generations`: PPO 1, Online DPO a pair, RLOO and GRPO `--num-generations`)."""
    return registry.get(args.algo).trainer_class().generations(args)


TIMING = ("gen", "ref", "reward", "adv", "update_actor")
"""The dataflow's steps, each logged as timing/<step> (seconds on the driver's clock, the call's wait included)."""


@contextmanager
def _timer(name: str, times: dict[str, float]) -> Iterator[None]:
    start = time.perf_counter()
    yield
    times[f"timing/{name}"] = time.perf_counter() - start


def ppo_advantages(args: CommonArgs, rollout: Rollout) -> torch.Tensor:
    """PPO's advantages, on the driver: `RLHFTrainer.compute_advantages` itself (it reads only the
    args), over the whole batch — the batch an in-process run gathers first."""
    batch = batch_of(rollout)
    RLHFTrainer.compute_advantages(SimpleNamespace(args=args), batch)
    return batch.advantages


class RayPPOTrainer:
    """The single controller: builds the resource pools and worker groups, then `fit` drives them."""

    def __init__(self, args: CommonArgs, workers: int = 1, placement: str = "colocated") -> None:
        if placement not in PLACEMENTS:
            raise ConfigError(f"placement: must be one of {', '.join(PLACEMENTS)}; got {placement!r}")
        if workers < 1:
            raise ConfigError(f"workers: must be at least 1; got {workers}")
        self.args = args.with_local_paths_resolved()
        self.num_generations = num_generations(args)
        self.prompts = PromptIterator(load_prompts(args.prompts, prefix=args.prefix, seed=args.seed), args.seed)
        actor = RayClassWithInitArgs(ActorRolloutRefWorker, self.args)
        rm = RayClassWithInitArgs(RewardModelWorker, self.args)
        gpus = int(resolve_device(args.device).startswith("cuda"))  # a GPU per process: Ray hides the GPUs from workers without one
        self.pools = [RayResourcePool(process_on_nodes=[workers], num_gpus=gpus) for _ in range(1 + (placement == "split"))]
        self.groups: list[RayWorkerGroup] = []
        try:
            if placement == "colocated":
                colocated = RayWorkerGroup(self.pools[0], create_colocated_worker_cls({"actor_rollout_ref": actor, "rm": rm}))
                self.groups = [colocated]
                roles = colocated.spawn(["actor_rollout_ref", "rm"])
                self.actor_rollout_wg, self.rm_wg = roles["actor_rollout_ref"], roles["rm"]
            else:
                self.groups.append(RayWorkerGroup(self.pools[0], actor, role="actor_rollout_ref"))
                self.groups.append(RayWorkerGroup(self.pools[1], rm, role="rm"))
                self.actor_rollout_wg, self.rm_wg = self.groups
        except BaseException:  # a role that cannot start: end what did start, free every reservation
            self.shutdown()
            raise

    def step(self, phase: int) -> tuple[Metrics, Rollout]:
        """One phase of the dataflow; its metrics (the in-process loop's names, and timing/*) and rollout."""
        args, times = self.args, {}
        start = time.perf_counter()
        prompts = DataProto(non_tensor_batch={"prompts": self.prompts.next_batch(args.batch_size // self.num_generations)},
                            meta_info={"num_generations": self.num_generations})
        with _timer("gen", times):
            batch = self.actor_rollout_wg.generate_sequences(prompts)
        with _timer("ref", times):
            batch.union(self.actor_rollout_wg.compute_log_prob(batch))
        with _timer("reward", times):
            batch.union(self.rm_wg.compute_rm_score(batch))
        rollout = to_rollout(batch)
        if args.missing_eos_penalty:  # make_rollout's rewards: the score less the penalty where no EOS came
            rollout.rewards = rollout.scores - args.missing_eos_penalty * (~rollout.is_terminated).float()
        batch.batch["rewards"] = rollout.rewards
        rollout_time = time.perf_counter() - start
        with _timer("adv", times):
            if args.algo == "ppo":
                batch.batch["advantages"] = ppo_advantages(args, rollout)
        with _timer("update_actor", times):
            learned = self.actor_rollout_wg.update_actor(batch).meta_info["metrics"]
        seconds = time.perf_counter() - start
        metrics = {"phase": phase, **rollout_metrics(rollout), **heldout_metrics(rollout, args.direction), **learned,
                   "charts/rollout_time": rollout_time, "charts/phase_time": seconds, **times}
        metrics["charts/tokens_per_s"] = metrics["completions/total_tokens"] / seconds
        return metrics, rollout

    def fit(self) -> list[Metrics]:
        """Every phase of the run; each phase's metrics."""
        return [self.step(phase)[0] for phase in range(1, self.args.total_phases + 1)]

    def save_checkpoint(self, run_dir, phase: int) -> None:
        """The in-process loop's checkpoint after `phase`, written by the actor's rank 0, with the driver's prompt position."""
        self.actor_rollout_wg.save_checkpoint(str(run_dir), phase, self.prompts.state_dict())

    def load_checkpoint(self, run_dir) -> int:
        """The run's latest checkpoint put back into every actor rank and the driver's prompts; the phases it completed."""
        done, prompts_state = self.actor_rollout_wg.load_checkpoint(str(run_dir))[0]
        self.prompts.load_state_dict(prompts_state)
        return done

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The trained policy's weights (rank 0's: every rank holds the same)."""
        return self.actor_rollout_wg.state_dict()[0]

    def shutdown(self) -> None:
        """End every worker process and free the pools (Ray itself stays up: its owner shuts it down)."""
        for group in self.groups:
            group.kill()
        for pool in self.pools:
            pool.release()


def init_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Join the Ray cluster at `address`, or start a local instance (the embedded default); nothing
    if this process is connected already. Returns whether it connected now (then the caller shuts it down)."""
    if ray.is_initialized():
        return False
    if address is None and not REAPERS:  # the local Ray will be this process's: none of it outlives it (controller/fate.py)
        REAPERS.append(start_reaper())  # (before ray.init: a kill while Ray starts is covered too)
    ray.init(address=address, num_cpus=None if address else num_cpus, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    return True


REAPERS: list = []
"""The reaper of this process's local Ray (kept so it is not collected while it runs)."""


def shutdown_ray() -> None:
    """`ray.shutdown()`, then the reaper ends what of the local Ray is still alive (controller/fate.py)."""
    ray.shutdown()
    while REAPERS:
        stop_reaper(REAPERS.pop())
