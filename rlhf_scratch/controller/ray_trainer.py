"""`RayPPOTrainer`: one driver process drives the dataflow by calling worker groups (verl's
trainer/ppo/ray_trainer.py, written from scratch over the package's own pieces).

    for phase in 1..total_phases:
        prompts   = self.prompts.next_batch(...)                            # the driver's data
        batch     = actor_rollout_ref.generate_sequences(prompts)          # timing/gen
        ref       = actor_rollout_ref.compute_ref_log_prob(batch)          # timing/ref: the reference's ĥ_ref
        batch    |= actor_rollout_ref.compute_log_prob(batch, ref)         # timing/old_log_prob: log π_old, log π_ref, KL
        batch    |= critic.compute_values(batch)                           # timing/values (PPO: the value head)
        batch    |= generate_scores(batch)                                 # timing/reward: rm, missing-EOS penalty, judge
        batch    |= compute_advantage(batch)                               # timing/adv, on the driver (Online DPO:
                                                                           #   generate_pairwise_data)
        metrics   = critic.update_critic(batch)    if phase <= critic_warmup # timing/update_critic (PPO)
                    actor_rollout_ref.update_actor(batch)  otherwise        # timing/update_actor
                    (--critic separate: critic.update_critic, then actor_rollout_ref.update_policy)

Each line is one call on the driver; the worker group splits the batch over its ranks, runs the
method on each and collects in order (`decorator.register`). The advantages are the algorithm's
own `compute_advantages` (PPO's one-step or GAE, RLOO's leave-one-out, GRPO's group-relative,
Online DPO's pairs), run on the driver over the whole batch, so the workers only learn. The
metrics are the in-process loop's (`loop.rollout_metrics`, `heldout.heldout_metrics`, the trainer's
learning phase), so a run here and an in-process run at the same seed log the same numbers
(tests/integration/test_controller.py).

Placement: `colocated` — every role in one process per rank (`create_colocated_worker_cls`), the
default; `split` — the reward model in a pool of its own processes, the actor (with its rollout,
its reference and the critic, the value head on its trunk) in another.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import ray
import torch

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
from rlhf_scratch.controller.workers import ActorRolloutRefWorker, CriticWorker, RewardModelWorker, to_rollout
from rlhf_scratch.engine.batch import batch_of
from rlhf_scratch.engine.logger import Metrics
from rlhf_scratch.engine.loop import rollout_metrics
from rlhf_scratch.engine.run_setup import resolve_device
from rlhf_scratch.engine.trainer import Trainer, merge_stats
from rlhf_scratch.reward.heldout import heldout_metrics
from rlhf_scratch.rollout.phase import Rollout, penalised_rewards
from rlhf_scratch.rollout.prompts import PromptIterator
from rlhf_scratch.rollout.rl_dataset import run_prompts


def num_generations(args: CommonArgs) -> int:
    """G, the completions per prompt the algorithm samples, as its trainer class says
    (`Trainer.generations`: PPO 1, Online DPO a pair, RLOO and GRPO `--num-generations`)."""
    return registry.get(args.algo).trainer_class().generations(args)


TIMING = ("gen", "ref", "old_log_prob", "values", "reward", "adv", "update_actor")
"""The dataflow's steps, each logged as timing/<step> (seconds on the driver's clock, the call's
wait included); `values` only where the algorithm has a critic (`timing_steps`), and
`timing/update_critic` instead of `timing/update_actor` in PPO's --critic-warmup phases."""


def uses_critic(args: CommonArgs) -> bool:
    """verl's use_critic: the algorithm's policy has extras (PPO's value head, `registry.Algorithm.policy`)."""
    return registry.get(args.algo).policy is not None


def timing_steps(args: CommonArgs) -> tuple[str, ...]:
    """The timing/<step> names a phase of `args.algo` logs."""
    return tuple(step for step in TIMING if step != "values" or uses_critic(args))


@contextmanager
def _timer(name: str, times: dict[str, float]) -> Iterator[None]:
    start = time.perf_counter()
    yield
    times[f"timing/{name}"] = time.perf_counter() - start


def advantage_estimator(args: CommonArgs) -> Trainer:
    """The algorithm's trainer on the driver, holding its args and nothing else (no model is loaded
    here): its own `compute_advantages` reads only the args and the batch."""
    estimator = object.__new__(registry.get(args.algo).trainer_class())
    estimator.args = args
    return estimator


def compute_advantage(estimator: Trainer, rollout: Rollout) -> torch.Tensor:
    """verl's compute_advantage, on the driver: the trainer's own `compute_advantages` over the whole
    batch (the batch an in-process run gathers first) — PPO's per token, RLOO's and GRPO's per completion."""
    batch = batch_of(rollout)
    estimator.compute_advantages(batch)
    return batch.advantages


def generate_pairwise_data(estimator: Trainer, rollout: Rollout) -> torch.Tensor:
    """Online DPO's step of verl's guide, on the driver: the winner of each pair (consecutive rows) by
    reward or by the judge's verdicts, as +w on the chosen row and −w on the rejected (w = 0 for a
    pair the judge could not decide) — `OnlineDPOTrainer.compute_advantages`, the package's pair
    selection, called as every algorithm's advantages are; the DPO actor reads the pairs back."""
    return compute_advantage(estimator, rollout)


class RayPPOTrainer:
    """The single controller: builds the resource pools and worker groups, then `fit` drives them."""

    def __init__(self, args: CommonArgs, workers: int = 1, placement: str = "colocated") -> None:
        if placement not in PLACEMENTS:
            raise ConfigError(f"placement: must be one of {', '.join(PLACEMENTS)}; got {placement!r}")
        if workers < 1:
            raise ConfigError(f"workers: must be at least 1; got {workers}")
        self.args = args.with_local_paths_resolved()
        self.num_generations = num_generations(args)
        self.use_critic = uses_critic(args)
        self.estimator = advantage_estimator(self.args)
        self.pairwise = self.num_generations == 2 and args.algo == "online_dpo"
        self.prompts = PromptIterator(run_prompts(self.args), args.seed)  # the in-process trainer's prompts (rl_dataset)
        actor = RayClassWithInitArgs(ActorRolloutRefWorker, self.args)
        critic = RayClassWithInitArgs(CriticWorker)
        rm = RayClassWithInitArgs(RewardModelWorker, self.args)
        gpus = int(resolve_device(args.device).startswith("cuda"))  # a GPU per process: Ray hides the GPUs from workers without one
        self.pools = [RayResourcePool(process_on_nodes=[workers], num_gpus=gpus) for _ in range(1 + (placement == "split"))]
        self.groups: list[RayWorkerGroup] = []
        try:
            # the critic is the value head on the actor's trunk: in the actor's process whatever the placement
            roles = {"actor_rollout_ref": actor, "critic": critic, **({"rm": rm} if placement == "colocated" else {})}
            self.groups.append(RayWorkerGroup(self.pools[0], create_colocated_worker_cls(roles)))
            views = self.groups[0].spawn(roles)
            if placement == "split":
                self.groups.append(RayWorkerGroup(self.pools[1], rm, role="rm"))
                views["rm"] = self.groups[1]
            self.actor_rollout_wg, self.critic_wg, self.rm_wg = views["actor_rollout_ref"], views["critic"], views["rm"]
            self.judged = self.actor_rollout_wg.has_judge()[0]
        except BaseException:  # a role that cannot start: end what did start, free every reservation
            self.shutdown()
            raise

    def generate_scores(self, batch: DataProto) -> DataProto:
        """verl's guide's generate_scores, on the driver: the reward model's score of each completion
        (`compute_rm_score`), rewards = scores less the missing-EOS penalty (`rollout.penalised_rewards`,
        as `compute_scores` in process), and the judge's verdict on each pair where the trainer has a judge."""
        batch.union(self.rm_wg.compute_rm_score(batch))
        batch.batch["rewards"] = penalised_rewards(to_rollout(batch), self.args.missing_eos_penalty)
        if self.judged:
            batch.union(self.actor_rollout_wg.judge_pairs(batch))
        return batch

    def step(self, phase: int) -> tuple[Metrics, Rollout]:
        """One phase of the dataflow; its metrics (the in-process loop's names, and timing/*) and rollout."""
        args, times = self.args, {}
        start = time.perf_counter()
        prompts = DataProto(non_tensor_batch={"prompts": self.prompts.next_batch(args.batch_size // self.num_generations)},
                            meta_info={"num_generations": self.num_generations})
        with _timer("gen", times):
            batch = self.actor_rollout_wg.generate_sequences(prompts)
        with _timer("ref", times):
            ref = self.actor_rollout_wg.compute_ref_log_prob(batch)
        with _timer("old_log_prob", times):
            batch.union(self.actor_rollout_wg.compute_log_prob(batch, ref))
        if self.use_critic:
            with _timer("values", times):
                batch.union(self.critic_wg.compute_values(batch))
        with _timer("reward", times):
            batch = self.generate_scores(batch)
        rollout = to_rollout(batch)
        rollout_time = time.perf_counter() - start
        with _timer("adv", times):
            batch.batch["advantages"] = (generate_pairwise_data if self.pairwise else compute_advantage)(self.estimator, rollout)
        if self.use_critic and phase <= getattr(args, "critic_warmup", 0):  # (an algorithm without the field has none)
            with _timer("update_critic", times):  # verl's critic_warmup: only the critic learns
                learned = self.critic_wg.update_critic(batch).meta_info["metrics"]
        elif getattr(args, "critic", "shared") == "separate":  # PPO's separate critic: verl's two updates
            with _timer("update_critic", times):
                learned = self.critic_wg.update_critic(batch).meta_info["metrics"]
            with _timer("update_actor", times):
                learned = merge_stats(learned, self.actor_rollout_wg.update_policy(batch).meta_info["metrics"])
        else:
            with _timer("update_actor", times):  # PPO: the critic too, its loss a term of the one objective
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
