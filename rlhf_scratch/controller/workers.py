"""The roles, over the package's own pieces (verl's fsdp_workers.py, in the package's terms).

    ActorRolloutRefWorker   the policy (the blog's value head on its trunk), its frozen reference,
                            its optimizer: one trainer of the package built in the worker process
        generate_sequences    generation.tokenize_prompts → generation.generate → decode_completions
        compute_log_prob      rollout.score_tokens: log π_old, entropy, log π_ref, the per-token KL
                              and V(s_t) in one pass, as the in-process rollout scores them
        update_actor          the trainer's own learning phase, on the advantages the driver computed
        save_checkpoint / load_checkpoint   the in-process loop's checkpoint (loop.capture_state / restore_state)
    RewardModelWorker       compute_rm_score: the task's reward (the classifier or a Bradley–Terry
                            run) through rollout.reward_call.score_completions

Each method takes and returns a `DataProto`; a `Rollout` is rebuilt from it where the package's
functions want one (`to_rollout` / `from_rollout`: the same fields under the same names).
Nothing here is a formula: every number comes from the function the in-process trainer calls.
"""

from __future__ import annotations

import contextlib
from dataclasses import fields
from pathlib import Path

import torch

from rlhf_scratch.config import CommonArgs, registry
from rlhf_scratch.controller.decorator import Dispatch, register
from rlhf_scratch.controller.protocol import DataProto
from rlhf_scratch.controller.worker_group import Worker
from rlhf_scratch.core.timing import take_times
from rlhf_scratch.engine.checkpoint import load_latest_checkpoint, save_checkpoint
from rlhf_scratch.engine.loop import capture_state, restore_state
from rlhf_scratch.engine.run_setup import resolve_device
from rlhf_scratch.engine.runs import save_run_policy
from rlhf_scratch.reward.tasks import make_reward_fn, score_completions
from rlhf_scratch.rollout.generation import decode_completions, eos_token_ids, generate, tokenize_prompts
from rlhf_scratch.rollout.phase import Rollout, score_tokens

META_FIELDS = ("num_generations", "eos_token_id", "temperature")
"""The Rollout fields that are one value per batch: they travel in meta_info."""


def from_rollout(rollout: Rollout) -> DataProto:
    """A Rollout as a DataProto: its tensors as columns, prompts and completions as non-tensor columns."""
    values = {f.name: getattr(rollout, f.name) for f in fields(rollout)}
    return DataProto(
        {k: v for k, v in values.items() if isinstance(v, torch.Tensor)},
        {k: values[k] for k in ("prompts", "completions")},
        {k: values[k] for k in META_FIELDS},
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

    def __init__(self, args: CommonArgs) -> None:
        super().__init__()
        self.trainer = registry.get(args.algo).trainer_class()(args, reward_fn=_no_reward, quiet=True)
        self.args = self.trainer.args

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @torch.no_grad()
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """G completions of each prompt (`meta_info["num_generations"]`), as `make_rollout` samples them."""
        args, lm, G = self.args, self.trainer.lm, prompts.meta_info["num_generations"]
        group_prompts = [p for p in prompts.non_tensor_batch["prompts"] for _ in range(G)]
        prompt_ids, prompt_mask = tokenize_prompts(lm, group_prompts, args.prepend_bos)
        completion_ids, completion_mask = generate(
            lm, prompt_ids, prompt_mask, args.gen_len, args.temperature, args.top_k, args.eos_stops(),
            kv_cache=args.kv_cache, cuda_graph=args.cuda_graph, top_p=args.top_p, decoders=self.trainer.decoders)
        completions = decode_completions(lm, completion_ids.cpu(), completion_mask.cpu(), args.eos_stops())
        return DataProto(
            {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "completion_mask": completion_mask,
             "attention_mask": torch.cat([prompt_mask, torch.ones_like(completion_mask)], dim=1)},
            {"prompts": group_prompts, "completions": completions},
            {"num_generations": G, "eos_token_id": eos_token_ids(lm), "temperature": args.temperature},
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, batch: DataProto) -> DataProto:
        """log π_old and the entropy of each completion token; with the reference (colocated in this
        process) log π_ref and the full-vocabulary KL from the same pass, and V(s_t) from the value
        head on the same trunk — `rollout.score_tokens`, called as `make_rollout` calls it (with
        `meta_info["keep_ref_hidden"]`, PPO's --cache-ref-logprobs, also the reference's ĥ)."""
        t = self.trainer
        sample_ids = torch.cat([batch.batch["prompt_ids"], batch.batch["completion_ids"]], dim=1)
        scored = score_tokens(t.policy, t.ref_model, sample_ids, batch.batch["attention_mask"],
                              batch.batch["prompt_ids"].shape[1], self.args.minibatch_size(), batch.meta_info["keep_ref_hidden"],
                              self.args.temperature, t.learning_precision, t.chunk_logits)
        return DataProto(scored)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, batch: DataProto) -> DataProto:
        """The trainer's learning phase on this rank's rows. PPO's advantages come from the driver
        (`batch.batch["advantages"]`): the trainer's `rollout_advantages` returns them instead of
        computing its own. Returns the phase's metrics and the learning rate it sampled with."""
        lr = self.trainer.optimizer.param_groups[0]["lr"]
        rollout = to_rollout(batch)
        advantages = batch.batch.get("advantages")
        with _given_advantages(self.trainer, advantages) if advantages is not None else contextlib.nullcontext():
            stats = self.trainer.learning_phase(rollout)
        take_times()  # the worker's timing sections are reported by the driver's clock, not summed here
        return DataProto(meta_info={"metrics": {**stats, "charts/learning_rate": lr}})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, run_dir: str, phase: int, prompts_state: dict) -> None:
        """The in-process loop's checkpoint after `phase` (`loop.capture_state`: weights, optimizer,
        scheduler, the algorithm's state, every rank's RNG), with the driver's position in the prompts;
        rank 0 writes it (`checkpoint.save_checkpoint`)."""
        self.trainer.prompts.load_state_dict(prompts_state)  # the driver draws the prompts: its position is the run's
        state = capture_state(self.trainer, phase, None)  # (every rank takes part: the RNG states are gathered)
        if self.rank == 0:
            save_checkpoint(Path(run_dir), phase, state, self.args.keep_checkpoints)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, run_dir: str) -> tuple[int, dict]:
        """The run's latest checkpoint put back (`loop.restore_state`, this rank's RNG); the phases it
        completed and the prompts' position, for the driver."""
        done = restore_state(self.trainer, load_latest_checkpoint(Path(run_dir), lambda text: None), None)
        return done, self.trainer.prompts.state_dict()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_policy(self, run_dir: str) -> None:
        """Rank 0 writes the tuned policy into the run folder, as the in-process loop does (`runs.save_run_policy`)."""
        if self.rank == 0:
            save_run_policy(Path(run_dir), self.trainer.policy)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The policy's weights (with PPO's value head), on the CPU."""
        return {k: v.detach().cpu().clone() for k, v in self.trainer.policy.state_dict().items()}


@contextlib.contextmanager
def _given_advantages(trainer, advantages: torch.Tensor):
    """Within: `trainer.rollout_advantages(rollout)` returns the driver's `advantages`."""
    trainer.rollout_advantages = lambda rollout: advantages
    try:
        yield
    finally:
        del trainer.rollout_advantages


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
        ids, mask = batch.batch["completion_ids"].cpu(), batch.batch["completion_mask"].cpu()
        scores = score_completions(self.reward_fn, batch.non_tensor_batch["prompts"], batch.non_tensor_batch["completions"],
                                   [row[keep].tolist() for row, keep in zip(ids, mask)])
        return DataProto({"scores": scores.to(batch.batch["completion_ids"].device)})
