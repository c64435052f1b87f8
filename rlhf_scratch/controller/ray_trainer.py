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

**One step of asynchrony** (`max_staleness=1`, `split` only; verl's one-step off-policy recipe, TRL's
max_staleness): pool A holds the actor and the critic, pool B the rollout (`RolloutRefWorker`: a copy
of the policy's weights, no optimizer), the reference and the reward model. In phase n the driver

    batch_n  = the generation submitted in phase n−1 (.get())             timing/gen: the wait for it
    ref, log π_old, scores on pool B with the weights batch_n was drawn with   (the behaviour policy's)
    values on pool A (the critic now), advantages on the driver
    sync_weights: the actor's weights (after update n−1) → pool B           timing/sync
    rollout.generate_sequences(prompts_{n+1})  — not waited for              (weights after update n−1)
    actor.update_actor(batch_n)                — pool B samples meanwhile     timing/update_actor

so phase n's samples carry the weights after update n−2 (`async/weights_version` = max(n − 2, 0))
and the actor, at weights n−1, learns from samples one update old. Which log-probs are which:
log π_old in the ratio (PPO's, GRPO's per token, RLOO's per sequence) is the sampler's, computed by
pool B with the weights that drew the samples, so the ratio is π_θ/π_behaviour and starts at
π_{n−1}/π_{n−2}, not 1; the clip bounds how far the step goes. log π_ref is the reference's (no
policy in it); the full-vocabulary KL logged as rollout/kl_full_vocab is the sampler's against the
reference; PPO's in-loss KL and V(s_t) are the learner's own. Not corrected: the clip is a trust
region, not an importance correction — the microscope's exact expected update at staleness 1 (docs/exact.md,
"Off-policy") is 0.267 away from the learner's gradient for PPO's clip (relative error; cos 0.966),
0.334 for GRPO's token clip, 0.754 for RLOO's clipped sequence ratio, against 0.154 with no
correction at all; and a KL folded into the reward from the recorded log-probs (RLOO's k1) is the
sampler's (error 0.382 against 0.284 recomputed). Online DPO needs no π_old: its loss is a
classification of pairs, valid whoever sampled them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import ray
import torch

from rlhf_scratch.config import CommonArgs, ConfigError, registry
from rlhf_scratch.controller.command import PLACEMENTS, check_staleness
from rlhf_scratch.controller.fate import marking, start_reaper, stop_reaper
from rlhf_scratch.controller.protocol import DataProto
from rlhf_scratch.controller.worker_group import (
    DataProtoFuture,
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_cls,
)
from rlhf_scratch.controller.workers import (
    ActorRolloutRefWorker,
    CriticWorker,
    RewardModelWorker,
    RolloutRefWorker,
    to_rollout,
)
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
`timing/update_critic` instead of `timing/update_actor` in PPO's --critic-warmup phases. Under
--max-staleness 1 also `timing/sync` (the weights into the rollout pool), and `timing/gen` is the
wait for a generation submitted a phase before."""


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

    def __init__(self, args: CommonArgs, workers: int = 1, placement: str = "colocated", max_staleness: int = 0) -> None:
        if placement not in PLACEMENTS:
            raise ConfigError(f"placement: must be one of {', '.join(PLACEMENTS)}; got {placement!r}")
        if workers < 1:
            raise ConfigError(f"workers: must be at least 1; got {workers}")
        if max_staleness not in (0, 1) or (max_staleness and (placement, workers) != ("split", 1)):
            raise ConfigError(f"max_staleness: {max_staleness} needs 0, or 1 with placement split and 1 worker")
        check_staleness(args.algo, max_staleness)
        self.max_staleness = max_staleness
        self.pending: tuple[DataProtoFuture, dict] | None = None  # (the generation in flight, the prompts' position before it)
        self.actor_version = 0  # the actor's updates so far (a critic-warmup phase counts: the phase is the clock)
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
            if placement == "split" and not max_staleness:
                self.groups.append(RayWorkerGroup(self.pools[1], rm, role="rm"))
                views["rm"] = self.groups[1]
            elif placement == "split":  # the rollout pool: rollout, reference, reward model
                pool_b = {"rollout_ref": RayClassWithInitArgs(RolloutRefWorker, self.args), "rm": rm}
                self.groups.append(RayWorkerGroup(self.pools[1], create_colocated_worker_cls(pool_b)))
                views |= self.groups[1].spawn(pool_b)
            self.actor_rollout_wg, self.critic_wg, self.rm_wg = views["actor_rollout_ref"], views["critic"], views["rm"]
            self.rollout_wg = views.get("rollout_ref", self.actor_rollout_wg)
            """Who samples and scores: the actor itself (synchronous), or the rollout pool's copy."""
            self.judged = self.rollout_wg.has_judge()[0]
            if max_staleness:
                self.sync_weights()  # version 0 in both pools, by construction rather than by the seed
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
            batch.union(self.rollout_wg.judge_pairs(batch))
        return batch

    def next_prompts(self) -> DataProto:
        """The driver's next batch_size / G prompts."""
        return DataProto(non_tensor_batch={"prompts": self.prompts.next_batch(self.args.batch_size // self.num_generations)},
                         meta_info={"num_generations": self.num_generations})

    def sync_weights(self) -> int:
        """The actor's weights now (after its latest update) into the rollout pool's copy, through Ray's
        object store (the driver passes rank 0's ObjectRef: the tensors never come to the driver). Returns
        their version, the number of the actor's updates they carry."""
        weights = self.actor_rollout_wg.actor_weights()  # a future: its ObjectRef, not its tensors
        return self.rollout_wg.sync_weights(weights.refs[0], self.actor_version)[0]

    def submit_generation(self) -> None:
        """The next phase's generation, started on the rollout pool and not waited for (`pending`)."""
        position = self.prompts.state_dict()  # a checkpoint taken while it is in flight resumes from here
        self.pending = (self.rollout_wg.generate_sequences(self.next_prompts()), position)

    def generated(self) -> DataProto:
        """This phase's samples: generated now (synchronous), or the generation submitted in the phase
        before (one step of asynchrony; the first phase, or the first after a resume, submits its own)."""
        if not self.max_staleness:
            return self.actor_rollout_wg.generate_sequences(self.next_prompts())
        if self.pending is None:
            self.submit_generation()
        future, self.pending = self.pending[0], None
        return future.get()

    def step(self, phase: int) -> tuple[Metrics, Rollout]:
        """One phase of the dataflow; its metrics (the in-process loop's names, and timing/*) and rollout."""
        args, times = self.args, {}
        start = time.perf_counter()
        with _timer("gen", times):
            batch = self.generated()
        with _timer("ref", times):
            ref = self.rollout_wg.compute_ref_log_prob(batch)
        with _timer("old_log_prob", times):  # log π_old: the weights that drew the samples (the rollout pool's under asynchrony)
            batch.union(self.rollout_wg.compute_log_prob(batch, ref))
        if self.use_critic:
            with _timer("values", times):
                batch.union(self.critic_wg.compute_values(batch))
        with _timer("reward", times):
            batch = self.generate_scores(batch)
        rollout = to_rollout(batch)
        rollout_time = time.perf_counter() - start
        with _timer("adv", times):
            batch.batch["advantages"] = (generate_pairwise_data if self.pairwise else compute_advantage)(self.estimator, rollout)
        if self.max_staleness:  # the rollout pool takes the weights after update n−1 and samples phase n+1 while the actor learns
            with _timer("sync", times):
                self.sync_weights()
            if phase < args.total_phases:
                self.submit_generation()
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
        self.actor_version = phase
        seconds = time.perf_counter() - start
        metrics = {"phase": phase, **rollout_metrics(rollout), **heldout_metrics(rollout, args.direction), **learned,
                   "charts/rollout_time": rollout_time, "charts/phase_time": seconds, **times}
        if self.max_staleness:
            metrics["async/weights_version"] = batch.meta_info["weights_version"]
        metrics["charts/tokens_per_s"] = metrics["completions/total_tokens"] / seconds
        return metrics, rollout

    def fit(self) -> list[Metrics]:
        """Every phase of the run; each phase's metrics."""
        return [self.step(phase)[0] for phase in range(1, self.args.total_phases + 1)]

    def save_checkpoint(self, run_dir, phase: int) -> None:
        """The in-process loop's checkpoint after `phase`, written by the actor's rank 0, with the driver's
        prompt position. Under asynchrony also the rollout pool's weights, their version and its RNG, and
        the position before the prompts of the generation in flight: a resume re-does that generation
        from them, so its lag is still 1 (and its samples the uninterrupted run's)."""
        if not self.max_staleness:
            self.actor_rollout_wg.save_checkpoint(str(run_dir), phase, self.prompts.state_dict())
            return
        in_flight = self.pending is not None
        rollout = self.rollout_wg.rollout_state(in_flight)[0]  # (waits for the generation in flight)
        position = self.pending[1] if in_flight else self.prompts.state_dict()
        self.actor_rollout_wg.save_checkpoint(str(run_dir), phase, position, rollout)

    def load_checkpoint(self, run_dir) -> int:
        """The run's latest checkpoint put back into every actor rank and the driver's prompts (and under
        asynchrony the rollout pool's state; a checkpoint without one gives it the actor's weights); the
        phases it completed."""
        done, prompts_state, rollout = self.actor_rollout_wg.load_checkpoint(str(run_dir))[0]
        self.prompts.load_state_dict(prompts_state)
        self.actor_version, self.pending = done, None
        if self.max_staleness:
            if rollout is not None:
                self.rollout_wg.load_rollout_state(rollout)
            else:
                self.sync_weights()
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
    with marking() if address is None else nullcontext():  # what ray.init starts carries the driver's mark
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
