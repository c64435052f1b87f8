"""`RayPPOTrainer`: the single controller. One driver process runs the phase loop — the engine's own,
`engine.loop.run_training`, the one every in-process run runs — and each role the loop calls is
forwarded to a worker group (verl's trainer/ppo/ray_trainer.py, written from scratch over the
package's own pieces). `fit` is that loop with this backend:

    the loop (engine/loop.py, engine/dataflow.py)      here                                         timing/<step>
    prompts  = next_prompts()                           the driver's PromptIterator
    rollout  = generate_sequences(prompts)              actor_rollout_ref.generate_sequences        gen
    ĥ_ref    = compute_ref_log_prob(rollout)            actor_rollout_ref.compute_ref_log_prob      ref
    rollout  = compute_log_prob(rollout, ĥ_ref)         actor_rollout_ref.compute_log_prob          old_log_prob
    V        = compute_values(rollout)                  critic.compute_values, where V did not come  values
                                                          with log π_old (--max-staleness 1)
    rollout  = compute_scores(rollout)                  rm.compute_rm_score, the missing-EOS        reward
                                                          penalty, actor_rollout_ref.judge_pairs
    compute_advantages(batch)                           on the driver: the algorithm's own method   adv
    update_critic(batch)                                critic.update_critic                        update_critic
    update_actor(batch)                                 actor_rollout_ref.update_actor              update_actor

Each line is one call on the driver; the worker group splits the batch over its ranks, runs the
method on each and collects in order (`decorator.register`). The worker runs the in-process trainer's
method of the same name, so the numbers are the in-process run's (tests/integration/test_controller.py),
and what the algorithm does in a phase (PPO's --critic-warmup, its separate critic) is the trainer's
decision, made in the worker, not here. The loop's checkpoints, early stopping, hooks, status and
signals are the loop's: this class only hands it the state (`progress_state`, `weights_state`,
`load_state_dict`) and the step count.

Placement: `colocated` — every role in one process per rank (`create_colocated_worker_cls`), the
default; `split` — the reward model in a pool of its own processes, the actor (with its rollout,
its reference and the critic, the value head on its trunk) in another.

**One step of asynchrony** (`max_staleness=1`, `split` only; verl's one-step off-policy recipe, TRL's
max_staleness): pool A holds the actor and the critic, pool B the rollout (`RolloutRefWorker`: a copy
of the policy's weights, no optimizer), the reference and the reward model. In phase n

    batch_n  = the generation submitted in phase n−1 (.get())             timing/gen: the wait for it
    ref, log π_old, scores on pool B with the weights batch_n was drawn with   (the behaviour policy's)
    values on pool A (the critic now), advantages on the driver
    sync_weights: the actor's weights (after update n−1) → pool B           (before the phase's first update)
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

import dataclasses
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import ray
import torch

from rlhf_scratch.config import CommonArgs, ConfigError, registry
from rlhf_scratch.controller.fate import marking, start_reaper, stop_reaper
from rlhf_scratch.controller.options import PLACEMENTS, ControllerArgs, check_staleness, controller_record
from rlhf_scratch.controller.protocol import LEFT_PAD, DataProto
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
    from_rollout,
    to_rollout,
)
from rlhf_scratch.engine.batch import Batch, batch_of
from rlhf_scratch.engine.dataflow import STEPS
from rlhf_scratch.engine.loop import PhaseHook, run_training
from rlhf_scratch.engine.run_setup import resolve_device
from rlhf_scratch.engine.trainer import Trainer
from rlhf_scratch.rollout.phase import OverlongBuffer, Rollout, penalised_rewards
from rlhf_scratch.rollout.prompts import PromptIterator
from rlhf_scratch.rollout.rl_dataset import run_prompts


def num_generations(args: CommonArgs) -> int:
    """G, the completions per prompt the algorithm samples, as its trainer class says
    (`Trainer.generations`: PPO 1, Online DPO a pair, RLOO and GRPO `--num-generations`)."""
    return registry.get(args.algo).trainer_class().generations(args)


TIMING = STEPS
"""The dataflow's steps, each logged as timing/<step> (`engine.dataflow.STEPS`: the loop's clocks)."""


def uses_critic(args: CommonArgs) -> bool:
    """verl's use_critic: the algorithm's registry entry has a critic (`registry.Algorithm.has_critic`)."""
    return registry.get(args.algo).has_critic


def timing_steps(args: CommonArgs, max_staleness: int = 0) -> tuple[str, ...]:
    """The timing/<step> names a phase of `args.algo` on Ray logs: `update_critic` with a critic (a warmup
    phase of PPO logs update_actor too: the call is made, and learns nothing), `values` only under
    --max-staleness 1 (synchronous, V comes with log π_old from the actor's own forward)."""
    critic = uses_critic(args)
    return tuple(step for step in STEPS
                 if (step != "update_critic" or critic) and (step != "values" or (critic and max_staleness)))


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
    selection, called as every algorithm's advantages are (`compute_advantage`)."""
    return compute_advantage(estimator, rollout)


class RayPPOTrainer:
    """The single controller: builds the resource pools and worker groups; the engine's loop drives
    them (`fit`). Meets `engine.contract.TrainerContract`, as an in-process trainer does."""

    def __init__(self, args: CommonArgs, workers: int = 1, placement: str = "colocated", max_staleness: int = 0,
                 quiet: bool = False) -> None:
        if placement not in PLACEMENTS:
            raise ConfigError(f"placement: must be one of {', '.join(PLACEMENTS)}; got {placement!r}")
        if workers < 1:
            raise ConfigError(f"workers: must be at least 1; got {workers}")
        if max_staleness not in (0, 1) or (max_staleness and (placement, workers) != ("split", 1)):
            raise ConfigError(f"max_staleness: {max_staleness} needs 0, or 1 with placement split and 1 worker")
        check_staleness(args.algo, max_staleness, args.filters_groups())
        self.args = args.with_local_paths_resolved()
        self.device, self.quiet = resolve_device(args.device), quiet
        self.controller = controller_record(ControllerArgs("ray", workers, placement, max_staleness))
        """How this run is placed, recorded in its config.json (`--resume` places it the same way)."""
        self.max_staleness = max_staleness
        self.pending: tuple[DataProtoFuture, list[str], dict] | None = None
        """The generation in flight: its future, its prompts, and the prompts' position before them."""
        self.actor_version = 0  # the actor's updates so far (a critic-warmup phase counts: the phase is the clock)
        self.num_generations = num_generations(args)
        trainer_class = registry.get(self.args.algo).trainer_class()
        self.METRICS = tuple(trainer_class.METRICS) + (("async/weights_version",) if max_staleness else ())
        self.estimator = advantage_estimator(self.args)
        self.prompts = PromptIterator(run_prompts(self.args), args.seed)  # the in-process trainer's prompts (rl_dataset)
        self.pad_id: int | None = None  # the tokenizer's, read off the first generation
        self.weights_version = 0  # of the samples of the latest generation (async/weights_version)
        self.pool_moves = 0  # changes of the rollout pool's weights or stream since construction (steps_taken)
        self.synced_this_phase = False
        self.drawn_from: dict = {}  # the prompts' position before the latest draw
        self._after: dict[str, Any] = {}  # what the actor last reported: lr, steps taken, skipped steps (and after update_actor its progress state)
        actor = RayClassWithInitArgs(ActorRolloutRefWorker, self.args)
        critic = RayClassWithInitArgs(CriticWorker)
        rm = RayClassWithInitArgs(RewardModelWorker, self.args)
        gpus = int(self.device.startswith("cuda"))  # a GPU per process: Ray hides the GPUs from workers without one
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
            self.record = self.rollout_wg.rewarded_by()[0]
            self.judged = self.record["judge"] is not None
            self._after = self.actor_rollout_wg.after()[0]
            if max_staleness:
                self.sync_weights()  # version 0 in both pools, by construction rather than by the seed
        except BaseException:  # a role that cannot start: end what did start, free every reservation
            self.shutdown()
            raise

    # ------------------------------------------------------------------ the run: the engine's loop
    def fit(self, run_dir: str | Path | None = None, resume: bool = False, hooks: Sequence[PhaseHook] = ()) -> Path:
        """Every phase of the run through the engine's one loop (`loop.run_training`), this object its
        backend: a new run folder (or `run_dir`), or with `resume` the run in `run_dir` continued from its
        latest checkpoint. Returns the folder."""
        return run_training(self, None if run_dir is None else Path(run_dir), self.quiet, resume, hooks,
                            controller=self.controller)

    # ------------------------------------------------------------------ the roles, forwarded
    def next_prompts(self) -> list[str]:
        """The phase's batch_size / G prompts: the driver's next ones, or, under asynchrony, those of
        the generation submitted a phase before (drawn then)."""
        if self.pending is not None:
            return self.pending[1]
        self.drawn_from = self.prompts.state_dict()  # the position before them (a generation in flight resumes from it)
        return self.prompts.next_batch(self.args.batch_size // self.num_generations)

    def _prompts_proto(self, prompts: list[str], validate: dict | None = None) -> DataProto:
        """The prompts for `generate_sequences`: the run's G, or a validation's n and its request."""
        if validate is None:
            return DataProto(non_tensor_batch={"prompts": prompts}, meta_info={"num_generations": self.num_generations})
        return DataProto(non_tensor_batch={"prompts": prompts}, meta_info={"num_generations": int(validate["n"]), "validate": validate})

    def _proto(self, rollout: Rollout) -> DataProto:
        return from_rollout(rollout, self.pad_id)

    def generate_sequences(self, prompts: list[str], validate: dict | None = None) -> Rollout:
        """G completions of each prompt: the actor's (synchronous), or under asynchrony the generation
        submitted a phase before (its wait), or one submitted now if none is in flight. A validation's
        (`validate`: `Trainer.generate_sequences`) is the actor's, the weights just learned, always synchronous."""
        if validate is not None:
            return to_rollout(self.actor_rollout_wg.generate_sequences(self._prompts_proto(prompts, validate)))
        if not self.max_staleness:
            out = self.actor_rollout_wg.generate_sequences(self._prompts_proto(prompts))
        else:
            if self.pending is None or self.pending[1] is not prompts:  # the first phase, or the first after a resume
                self.submit_generation(prompts, self.drawn_from)
            future, self.pending = self.pending[0], None
            self.pool_moves += 1  # the stream moved on: a checkpoint of the last phase would re-do this generation
            out = future.get()
            self.weights_version = out.meta_info["weights_version"]
        self.pad_id = out.meta_info[LEFT_PAD]["prompt_ids"]
        return to_rollout(out)

    def compute_ref_log_prob(self, rollout: Rollout) -> torch.Tensor | None:
        """The reference's ĥ_ref (`ActorRolloutRefWorker.compute_ref_log_prob`); None without a reference."""
        return self.rollout_wg.compute_ref_log_prob(self._proto(rollout)).batch.get("ref_hidden")

    def compute_log_prob(self, rollout: Rollout, ref_hidden: torch.Tensor | None = None) -> Rollout:
        """log π_old (the weights that drew the samples: the rollout pool's under asynchrony), the entropy,
        log π_ref and the KL from ĥ_ref (`ActorRolloutRefWorker.compute_log_prob`); no values (`compute_values`)."""
        ref = DataProto() if ref_hidden is None else DataProto({"ref_hidden": ref_hidden})
        scored = self.rollout_wg.compute_log_prob(self._proto(rollout), ref)
        return dataclasses.replace(rollout, **scored.batch)

    def compute_values(self, rollout: Rollout) -> torch.Tensor | None:
        """V(s_t) from the critic (`CriticWorker.compute_values`)."""
        return self.critic_wg.compute_values(self._proto(rollout)).batch.get("values")

    def compute_scores(self, rollout: Rollout) -> Rollout:
        """verl's guide's generate_scores: the reward model's score of each completion (`compute_rm_score`),
        rewards = scores less the missing-EOS penalty and the soft overlong punishment (`rollout.penalised_rewards`,
        as `compute_scores` in process), and the judge's verdict on each pair where the trainer has a judge."""
        proto = self._proto(rollout)
        rollout.scores = self.rm_wg.compute_rm_score(proto).batch["scores"]
        rollout.rewards = penalised_rewards(rollout, self.args.missing_eos_penalty, OverlongBuffer.of(self.args))
        if self.judged:  # (the judge reads the texts, not the rewards: the same batch)
            rollout.verdicts = self.rollout_wg.judge_pairs(proto).batch["verdicts"]
        return rollout

    def compute_advantages(self, batch: Batch) -> None:
        """verl's compute_advantage, on the driver: the algorithm's own `compute_advantages` over the whole
        batch (`advantage_estimator`: its trainer class holding the args alone)."""
        self.estimator.compute_advantages(batch)

    def _learning_batch(self, batch: Batch) -> DataProto:
        proto = self._proto(batch.rollout)
        proto.batch["advantages"] = batch.advantages
        return proto

    def _before_learning(self) -> None:
        """Under asynchrony, before the phase's first update: the actor's weights (after update n−1)
        into the rollout pool, and the next phase's generation submitted (not waited for)."""
        if not self.max_staleness or self.synced_this_phase:
            return
        self.synced_this_phase = True
        self.sync_weights()
        if self.actor_version + 1 < self.args.total_phases:
            prompts = self.next_prompts()
            self.submit_generation(prompts, self.drawn_from)

    def update_critic(self, batch: Batch) -> dict[str, float]:
        """The critic's update (`CriticWorker.update_critic`: the trainer's `update_critic`)."""
        self._before_learning()
        return self._learned(self.critic_wg.update_critic, batch)

    def update_actor(self, batch: Batch) -> dict[str, float]:
        """The actor's update (`ActorRolloutRefWorker.update_actor`: the trainer's `update_actor`), with
        the advantages the driver computed; under asynchrony the rollout pool samples meanwhile."""
        self._before_learning()
        stats = self._learned(self.actor_rollout_wg.update_actor, batch)
        self.actor_version += 1
        self.synced_this_phase = False
        if self.max_staleness:
            stats["async/weights_version"] = self.weights_version
        return stats

    def _learned(self, update, batch: Batch) -> dict[str, float]:
        self._after = {}  # while the update runs, the steps taken are unknown
        out = update(self._learning_batch(batch))
        self._after = out.meta_info["after"]
        return out.meta_info["metrics"]

    # ------------------------------------------------------------------ what the loop records
    @property
    def skipped_in_a_row(self) -> int:
        return self._after.get("skipped_in_a_row", 0)

    def learning_rate(self) -> float:
        return self._after["lr"]

    def rewarded_by(self) -> dict:
        """The workers' record (`reward.tasks.rewarded_by`): the task's reward, and their judge if any."""
        return self.record

    def save_policy(self, run_dir: Path) -> None:
        """Rank 0 of the actor writes the tuned policy into the run folder (`runs.save_run_policy`)."""
        self.actor_rollout_wg.save_policy(str(run_dir))

    # ------------------------------------------------------------------ the state
    def progress_state(self) -> dict[str, Any]:
        """The actor's `progress_state` (reported with its last update, or asked), with the driver's
        position in the prompts — under asynchrony the position before the generation in flight,
        which a resume re-does."""
        progress = self._after.get("progress")
        if progress is None:
            progress = self.actor_rollout_wg.progress_state()[0]
        position = self.pending[2] if self.pending is not None else self.prompts.state_dict()
        return {**progress, "prompts": position}

    def weights_state(self) -> dict[str, Any]:
        """The actor's `weights_state` (rank 0's, on the CPU); under asynchrony also the rollout pool's
        weights, their version and the RNG its next generation starts from (`RolloutRefWorker.rollout_state`)."""
        state = self.actor_rollout_wg.weights_state()[0]
        if self.max_staleness:
            state["rollout"] = self.rollout_wg.rollout_state(self.pending is not None)[0]  # (waits for the generation in flight)
        return state

    def steps_taken(self) -> int | None:
        """The actor's steps (every optimizer and schedule of its trainer), as reported after its last
        update (None while one runs or after one failed), plus the rollout pool's moves."""
        steps = self._after.get("steps")
        return None if steps is None else steps + self.pool_moves

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A checkpoint put back into every actor rank (and under asynchrony the rollout pool: a
        checkpoint without its state gives it the actor's weights) and the driver's prompts."""
        self._after = self.actor_rollout_wg.load_state_dict(state)[0]
        self.prompts.load_state_dict(state["prompts"])
        self.actor_version, self.pending, self.synced_this_phase = int(state["phase"]), None, False
        if self.max_staleness:
            if state.get("rollout") is not None:
                self.rollout_wg.load_rollout_state(state["rollout"])
            else:
                self.sync_weights()

    # ------------------------------------------------------------------ asynchrony
    def sync_weights(self) -> int:
        """The actor's weights now (after its latest update) into the rollout pool's copy, through Ray's
        object store (the driver passes rank 0's ObjectRef: the tensors never come to the driver). Returns
        their version, the number of the actor's updates they carry."""
        weights = self.actor_rollout_wg.actor_weights()  # a future: its ObjectRef, not its tensors
        self.pool_moves += 1
        return self.rollout_wg.sync_weights(weights.refs[0], self.actor_version)[0]

    def submit_generation(self, prompts: list[str], position: dict) -> None:
        """A generation of `prompts` started on the rollout pool and not waited for (`pending`), with
        `position`, the prompts' position before them (a checkpoint taken while it is in flight resumes there)."""
        self.pending = (self.rollout_wg.generate_sequences(self._prompts_proto(prompts)), prompts, position)

    # ------------------------------------------------------------------ tests and notebooks
    def policy_state_dict(self) -> dict[str, torch.Tensor]:
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
