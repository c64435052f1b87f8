"""The roles, over the package's own pieces (verl's fsdp_workers.py, in the package's terms).

    ActorRolloutRefWorker   the policy (the blog's value head on its trunk), its frozen reference,
                            its optimizer: one trainer of the package built in the worker process,
                            whose role methods of the same names each call runs
        generate_sequences    trainer.generate_sequences
        compute_ref_log_prob  trainer.compute_ref_log_prob: the reference's forward, ĥ_ref
        compute_log_prob      trainer.compute_log_prob(ref_hidden=ĥ_ref): log π_old, entropy, and from ĥ_ref
                              beside the policy's ĥ log π_ref and the full-vocabulary KL; V(s_t) from the
                              same forward (the critic is in this process), so the loop skips compute_values
        judge_pairs           trainer.judge_pairs (Online DPO's judge, if it has one): verdicts for the driver
        update_actor          trainer.update_actor on the advantages the driver sent: it only learns
        progress_state / weights_state / load_state_dict   the trainer's, for the loop's checkpoints
        after                 what the driver keeps of the trainer between calls: the learning rate, the
                              steps taken, skipped steps (also returned by every update, with the
                              progress state after update_actor: no extra call per phase)
        actor_weights         the policy's trainable weights (`models.policy.saved_state`), not waited
                              for (blocking=False): the driver hands the ObjectRef to the rollout pool
    RolloutRefWorker        --max-staleness 1's rollout pool: the same trainer built in a process of its
                            own, its optimizer dropped (it never learns); the same generate_sequences
                            (registered blocking=False: the driver goes on while it samples),
                            compute_ref_log_prob, compute_log_prob (log π_old = the behaviour policy's,
                            the weights it sampled with) and judge_pairs; sync_weights loads the actor's
                            weights; rollout_state / load_rollout_state carry it through a checkpoint
    CriticWorker            compute_values: trainer.compute_values, V(s_t) from the blog's value head on
                            the actor's trunk (colocated: it reads the actor of its own process); called
                            only where the values did not come with log π_old (--max-staleness 1: the rollout
                            pool's weights are the sampler's, V is the critic's now)
        update_critic         trainer.update_critic: the value loss alone, in PPO's --critic-warmup phases;
                              with --critic separate every phase, on the trainer's own critic model
                              (the trainer decides; the loop calls it every phase of an algorithm with a critic)
    RewardModelWorker       compute_rm_score: the task's reward (the classifier or a Bradley–Terry
                            run) through rollout.phase.compute_scores, the function trainer.compute_scores calls

Each method takes and returns a `DataProto`; a `Rollout` is rebuilt from it where the package's
functions want one (`to_rollout` / `from_rollout`: the same fields under the same names).
Nothing here is a formula: every number comes from the function the in-process trainer calls.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import torch

from rlhf_scratch.config import CommonArgs, registry
from rlhf_scratch.controller.decorator import Dispatch, register
from rlhf_scratch.controller.protocol import LEFT_PAD, LEFT_PAD_MASK, DataProto
from rlhf_scratch.controller.worker_group import Worker
from rlhf_scratch.core.host import read_once
from rlhf_scratch.core.timing import take_times
from rlhf_scratch.engine import distributed as dist
from rlhf_scratch.engine.batch import gather_batch
from rlhf_scratch.engine.checkpoint import rng_state, set_rng_state
from rlhf_scratch.engine.run_setup import resolve_device
from rlhf_scratch.engine.runs import on_cpu, save_run_policy
from rlhf_scratch.models.policy import load_saved_state, saved_state
from rlhf_scratch.reward.tasks import make_reward_fn, rewarded_by
from rlhf_scratch.rollout.generation import pad_token_id
from rlhf_scratch.rollout.phase import Rollout, compute_scores

META_FIELDS = ("num_generations", "eos_token_id", "temperature")
"""The Rollout fields that are one value per batch: they travel in meta_info."""


def left_padded(pad_id: int) -> dict:
    """The meta_info that names the left-padded columns of a rollout (`protocol.LEFT_PAD`): the
    prompt and the whole-sequence columns, whose width is the rank's longest prompt plus gen_len."""
    return {LEFT_PAD: {"prompt_ids": pad_id, "attention_mask": False, "values": 0.0}, LEFT_PAD_MASK: "attention_mask"}


def from_rollout(rollout: Rollout, pad_id: int = 0) -> DataProto:
    """A Rollout as a DataProto: its tensors as columns, prompts and completions as non-tensor columns.
    The prompt and the whole-sequence columns are named as left-padded (`protocol.LEFT_PAD`): each rank
    pads its prompts to its own longest, and the driver's `concat` pads them to the widest rank's."""
    values = {f.name: getattr(rollout, f.name) for f in fields(rollout)}
    return DataProto(
        {k: v for k, v in values.items() if isinstance(v, torch.Tensor)},
        {k: values[k] for k in ("prompts", "completions")},
        {**{k: values[k] for k in META_FIELDS}, **left_padded(pad_id)},
    )


def to_rollout(batch: DataProto) -> Rollout:
    """The Rollout a DataProto holds (columns it lacks, such as values without a value head, are None)."""
    names = {f.name for f in fields(Rollout)}
    given = {**{k: v for k, v in batch.batch.items() if k in names},
             **{k: v for k, v in batch.non_tensor_batch.items() if k in names},
             **{k: batch.meta_info[k] for k in META_FIELDS}}
    optional = {"ref_logprobs": None, "kl": None, "rewards": batch.batch.get("scores")}
    return Rollout(**{**optional, **given})


def _no_reward(*args, **kwargs):
    raise RuntimeError("the actor computes no reward: RewardModelWorker.compute_rm_score does")


class ActorRolloutRefWorker(Worker):
    """The policy, its reference and its optimizer: `registry.get(args.algo)`'s trainer, built in
    this process exactly as the in-process run builds it (same seed, same order of random draws)."""

    VALUES_WITH_LOG_PROBS = True
    """The critic (the value head on this trunk, or --critic separate's model, held by this trainer) lives
    in this process, so V(s_t) comes from the log-probs' own forward, as in process: one trunk forward
    and one call fewer a phase than verl's separate `compute_values`, the same numbers."""

    def __init__(self, args: CommonArgs) -> None:
        super().__init__()
        self.trainer = registry.get(args.algo).trainer_class()(args, reward_fn=_no_reward, quiet=True)
        self.args = self.trainer.args

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @torch.no_grad()
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """G completions of each prompt (the trainer's G: `meta_info["num_generations"]` says the same), or a
        validation's n (`meta_info["validate"]`: `Trainer.generate_sequences`)."""
        validate = prompts.meta_info.get("validate")
        if validate is not None:  # each rank draws its share of the call: a stream of its own (rank 0's is the whole call's in process)
            validate = {**validate, "seed": (int(validate["seed"]) + 7919 * self.rank) % 2**63}
        return from_rollout(self.trainer.generate_sequences(list(prompts.non_tensor_batch["prompts"]), validate=validate),
                            pad_token_id(self.trainer.lm))

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @torch.no_grad()
    def compute_ref_log_prob(self, batch: DataProto) -> DataProto:
        """The reference's forward (`trainer.compute_ref_log_prob`): ĥ_ref at every position that
        predicts a completion token, for `compute_log_prob` to unembed beside the policy's (the
        full-vocabulary KL needs both distributions at once); no column without a reference."""
        ref_hidden = self.trainer.compute_ref_log_prob(to_rollout(batch))
        return DataProto() if ref_hidden is None else DataProto({"ref_hidden": ref_hidden})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @torch.no_grad()
    def compute_log_prob(self, batch: DataProto, ref: DataProto) -> DataProto:
        """The trainer's `compute_log_prob` with the reference's ĥ_ref from `ref` (`compute_ref_log_prob`'s):
        log π_old and the entropy of each completion token, log π_ref and the full-vocabulary KL (PPO's
        --cache-ref-logprobs: ĥ_ref and its logsumexp kept for the learning phase), and where
        `VALUES_WITH_LOG_PROBS` V(s_t) from the same trunk forward, as in process (the loop then skips
        `compute_values`)."""
        scored = self.trainer.compute_log_prob(to_rollout(batch), ref_hidden=ref.batch.get("ref_hidden"),
                                               with_values=self.VALUES_WITH_LOG_PROBS)
        columns = ("logprobs", "entropy", "ref_logprobs", "kl", "ref_hidden", "ref_lse", "values")
        out = DataProto({k: getattr(scored, k) for k in columns if getattr(scored, k) is not None})
        if scored.values is not None:  # a whole-sequence column: left-padded, as the rollout's
            out.meta_info.update(left_padded(pad_token_id(self.trainer.lm)))
        return out

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rewarded_by(self) -> dict:
        """What scores this run (`reward.tasks.rewarded_by`): the task's reward (the reward model worker
        builds it from the args) and the trainer's judge, if it asks one (Online DPO with --judge)."""
        return rewarded_by(self.args, None, self.trainer.judge)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @torch.no_grad()
    def judge_pairs(self, batch: DataProto) -> DataProto:
        """The trainer's judge's verdict on each pair of this rank's rows (`trainer.judge_pairs`)."""
        return DataProto({"verdicts": self.trainer.judge_pairs(to_rollout(batch)).verdicts})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, batch: DataProto) -> DataProto:
        """The trainer's `update_actor` on this rank's rows with the advantages the driver computed
        (`batch.batch["advantages"]`: the algorithm's own `compute_advantages`, run there): the actor
        only learns. Returns the phase's metrics and, the phase's last call, the trainer's progress
        state with `after`'s numbers (the driver's checkpoint needs no call of its own)."""
        return update_on_rank(self.trainer, self.trainer.update_actor, batch, with_progress=True)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def after(self) -> dict:
        """What the driver keeps of the trainer between calls (`after_update`)."""
        return after_update(self.trainer)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def progress_state(self) -> dict:
        """The trainer's `progress_state()` (every rank's RNG gathered: every rank calls it)."""
        return self.trainer.progress_state()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def weights_state(self) -> dict | None:
        """The trainer's `weights_state()` on the CPU, from rank 0 (the other ranks hold the same and send nothing)."""
        return on_cpu(self.trainer.weights_state()) if self.rank == 0 else None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_state_dict(self, state: dict) -> dict:
        """A checkpoint put back (`trainer.load_state_dict`: this rank's RNG among every rank's); `after`'s numbers."""
        self.trainer.load_state_dict(state)
        return after_update(self.trainer)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_policy(self, run_dir: str) -> None:
        """Rank 0 writes the tuned policy into the run folder, as the in-process loop does (`runs.save_run_policy`)."""
        if self.rank == 0:
            save_run_policy(Path(run_dir), self.trainer.policy)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The policy's weights (with PPO's value head), on the CPU."""
        return {k: v.detach().cpu().clone() for k, v in self.trainer.policy.state_dict().items()}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def actor_weights(self) -> dict[str, torch.Tensor]:
        """What the rollout pool needs of the policy now (`models.policy.saved_state`: every weight, or an
        adapted LM's adapters and extras), on the CPU; the call returns a future whose `refs[0]` the
        driver passes to `RolloutRefWorker.sync_weights` (the weights go through Ray's object store)."""
        return on_cpu(saved_state(self.trainer.policy))  # (Ray copies it into the object store as the call returns)


class RolloutRefWorker(Worker):
    """--max-staleness 1's rollout pool (verl's one-step off-policy recipe: rollout and reference on
    devices of their own): the algorithm's trainer, built in this process exactly as the actor's is
    (same seed, same order of random draws), that never learns (its optimizer dropped). It samples with
    a copy of the policy's weights, synced from the actor by the driver (`sync_weights`, version = the
    number of the actor's updates they carry), and scores with them: the log π_old it returns is the
    behaviour policy's, the one the samples were drawn from, and the algorithm's ratio is taken against it."""

    VALUES_WITH_LOG_PROBS = False
    """Its weights are the sampler's, a version old: V(s_t) is the critic's now (`CriticWorker.compute_values`)."""

    def __init__(self, args: CommonArgs) -> None:
        super().__init__()
        self.trainer = registry.get(args.algo).trainer_class()(args, reward_fn=_no_reward, quiet=True)
        self.trainer.optimizer = self.trainer.scheduler = None  # it only samples and scores
        self.args, self.version = self.trainer.args, 0
        self.rng_before = rng_state()  # this process's RNG before its latest generation (a checkpoint's)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    @torch.no_grad()
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """`ActorRolloutRefWorker.generate_sequences` with this pool's weights; the driver gets a future."""
        self.rng_before = rng_state()
        out = ActorRolloutRefWorker.generate_sequences(self, prompts)
        out.meta_info["weights_version"] = self.version
        return out

    compute_ref_log_prob = ActorRolloutRefWorker.compute_ref_log_prob  # the same code, this process's reference
    compute_log_prob = ActorRolloutRefWorker.compute_log_prob  # the same code, the behaviour weights: log π_old
    rewarded_by = ActorRolloutRefWorker.rewarded_by
    judge_pairs = ActorRolloutRefWorker.judge_pairs

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sync_weights(self, weights: dict, version: int) -> int:
        """Load the actor's weights (`ActorRolloutRefWorker.actor_weights`; Ray resolves the ObjectRef
        the driver passed) into this pool's copy; they carry `version` updates. Returns the version."""
        load_saved_state(self.trainer.policy, weights)
        self.version = version
        return version

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rollout_state(self, in_flight: bool) -> dict:
        """What a checkpoint keeps of this pool to resume its stream: its weights and their version, and
        the RNG its next generation must start from — the one before its latest generation when that
        generation is in flight (the resumed run re-does it), else the RNG now."""
        weights = on_cpu(saved_state(self.trainer.policy))
        return {"weights": weights, "version": self.version, "rng": self.rng_before if in_flight else rng_state()}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_rollout_state(self, state: dict) -> int:
        """Put back `rollout_state`'s dict; the version of the weights."""
        self.sync_weights(state["weights"], state["version"])
        set_rng_state(state["rng"])
        return self.version


def update_on_rank(trainer, update, batch: DataProto, with_progress: bool = False) -> DataProto:
    """`update` (the trainer's update_actor or update_critic) on this rank's rows with the advantages
    the driver computed; the phase's metrics, and `after_update`'s numbers (with the progress state).
    The batch is the one a torchrun process learns on: this rank's rollout, every rank's columns
    gathered inside the group (`batch.gather_batch`: GRPO's token count and per-step clip counts, PPO's
    KL for its β, and the advantages, are over the whole batch), the advantages put back in rank order."""
    learning = gather_batch(to_rollout(batch))
    learning.advantages = dist.all_gather(batch.batch["advantages"])
    stats = read_once(update(learning))[0]  # numbers, not device tensors, to the driver
    take_times()  # the worker's timing sections are reported by the driver's clock, not summed here
    return DataProto(meta_info={"metrics": stats, "after": after_update(trainer, with_progress)})


def after_update(trainer, with_progress: bool = False) -> dict:
    """What the driver keeps of a worker's trainer: its learning rate for the next step, the steps every
    optimizer and schedule has taken (`steps_taken`: the loop's test of whether the weights moved),
    the skipped steps in a row, and with `with_progress` its `progress_state()` (a collective: every rank)."""
    after = {"lr": trainer.learning_rate(), "steps": trainer.steps_taken(), "skipped_in_a_row": trainer.skipped_in_a_row}
    if with_progress:
        after["progress"] = trainer.progress_state()
    return after


class CriticWorker(Worker):
    """verl's critic: here the blog's value head on the actor's own trunk, so it is colocated with
    `ActorRolloutRefWorker` and reads that actor's trainer (`self.colocated`) rather than holding a model.
    With PPO's --critic separate the critic is a model of its own, held by that trainer too (`trainer.critic`,
    saved in its checkpoints), so the role stays colocated and calls the same two methods."""

    ACTOR = "actor_rollout_ref"

    @property
    def trainer(self):
        if self.ACTOR not in self.colocated:
            raise RuntimeError(f"critic: the value head is on the actor's trunk; colocate it with {self.ACTOR!r}")
        return self.colocated[self.ACTOR].trainer

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @torch.no_grad()
    def compute_values(self, batch: DataProto) -> DataProto:
        """V(s_t) at every position (`trainer.compute_values`: the value head on a forward of the trunk)."""
        values = self.trainer.compute_values(to_rollout(batch))
        return DataProto() if values is None else DataProto({"values": values}, meta_info=left_padded(pad_token_id(self.trainer.lm)))

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_critic(self, batch: DataProto) -> DataProto:
        """Only the critic learns (`trainer.update_critic`: the value loss alone), in a critic_warmup phase;
        after it the critic learns inside `update_actor`, a term of PPO's one objective — or, with a
        separate critic, here every phase, before the actor's `update_actor`."""
        return update_on_rank(self.trainer, self.trainer.update_critic, batch)


class RewardModelWorker(Worker):
    """The task's reward (`reward.tasks.make_reward_fn`: the sentiment classifier, a Bradley–Terry
    run, VADER …), built without touching this process's random state (a colocated actor samples
    from it)."""

    def __init__(self, args: CommonArgs) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            self.reward_fn = make_reward_fn(args.with_local_paths_resolved(), device=resolve_device(args.device))

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_rm_score(self, batch: DataProto) -> DataProto:
        """The reward function's score of each completion (both of the package's reward contracts)."""
        scored = compute_scores(to_rollout(batch), self.reward_fn)  # the driver subtracts the missing-EOS penalty
        return DataProto({"scores": scored.scores})
