"""The trainer contract: what the phase loop needs from an algorithm, and the scaffolding that
every algorithm shares, written once.

    class RLOOTrainer(Trainer):                       # one file under algorithms/
        METRICS = ("reward", "kl", ...)              # what learning_phase logs (TRL's names)

        def rollout_phase(self) -> Rollout:          # sample, score, reward: no gradients
            return self.sample(num_generations=self.args.num_generations)

        def learning_phase(self, rollout) -> dict:   # the algorithm: its advantages and its loss
            for rows in minibatch_rows(len(rollout), self.args.num_minibatches, self.args.num_iterations):
                objective = ...                      # MAXIMISED
                self.optimizer_step(objective)
            self.scheduler.step()
            return {...}

`loop.run_training` knows an algorithm only through `contract.TrainerContract` (a Protocol: the
attributes and methods it touches, nothing else). `Trainer` implements the shared part of it: run setup
(seed, threads, device), the policy and the frozen reference, the prompts, the reward, the
optimizer and scheduler, the learning forward (DDP, torch.compile), the rollout's arguments from
the config, the optimizer step with its non-finite guard, and checkpoint state beyond the
weights. A subclass holds no scaffolding and the base holds no algorithm math; algorithms never
import each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor
from transformer_lens import HookedTransformer

from rlhf_scratch import distributed as dist
from rlhf_scratch.accel import compiled, learning_autocast
from rlhf_scratch.config import CommonArgs
from rlhf_scratch.loop import PhaseHook, run_training
from rlhf_scratch.optim import clip_and_step, get_optimizer_and_scheduler
from rlhf_scratch.reward.judges import Judge
from rlhf_scratch.reward.tasks import RewardFn, make_reward_fn
from rlhf_scratch.rollout import Rollout, make_rollout
from rlhf_scratch.run_setup import load_policy, load_reference, make_prompt_iterator, setup_torch
from rlhf_scratch.timing import timed


class Trainer:
    """The shared scaffolding of every algorithm (see the module docstring). A subclass writes
    `rollout_phase` and `learning_phase`; it may override `build_policy` (PPO adds its value head),
    `uses_reference` (GRPO at β = 0 loads none) and `extra_state`/`load_extra_state`."""

    METRICS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, args: CommonArgs, reward_fn: RewardFn | None = None, quiet: bool = False):
        self.device = setup_torch(args)
        self.args, self.quiet = args, quiet or not dist.is_main()  # one progress bar: rank 0's
        lm = load_policy(args.model, self.device)
        self.ref_model: HookedTransformer | None = load_reference(args.model, self.device) if self.uses_reference() else None
        self.policy = self.build_policy(lm)
        self.prompts = make_prompt_iterator(args, lm)
        self.reward_fn = reward_fn or make_reward_fn(args, device=self.device)
        self.judge: Judge | None = None  # Online DPO may set one
        self.optimizer, self.scheduler = get_optimizer_and_scheduler(args, self.policy)
        self.learner = compiled(dist.wrap_for_training(self.policy), args)  # the learning forward (DDP, compile)
        self.skipped_in_a_row = 0

    # ------------------------------------------------------------------ what a subclass may change
    def build_policy(self, lm: HookedTransformer) -> torch.nn.Module:
        """The module that is trained and saved: the LM itself, unless the algorithm adds a head."""
        return lm

    def uses_reference(self) -> bool:
        """Whether a frozen reference copy of the model is loaded and run in every rollout."""
        return True

    def extra_state(self) -> dict[str, Any]:
        """The algorithm's state besides weights, optimizer, scheduler and RNG, for checkpoints."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Put back what `extra_state` returned."""

    def rollout_phase(self) -> Rollout:
        raise NotImplementedError(f"{type(self).__name__} must define rollout_phase")

    def learning_phase(self, rollout: Rollout) -> dict[str, float]:
        raise NotImplementedError(f"{type(self).__name__} must define learning_phase")

    # ------------------------------------------------------------------ shared pieces
    @torch.no_grad()
    def sample(self, num_generations: int, keep_ref_hidden: bool = False) -> Rollout:
        """This phase's rollout: batch_size / num_generations prompts (this rank's share), G
        completions of each, scored by the policy (and the reference) at the sampling
        temperature, in the learning phase's precision, and rewarded."""
        args = self.args
        prompts = dist.shard(self.prompts.next_batch(args.batch_size // num_generations))
        return make_rollout(
            self.policy, self.ref_model, prompts, self.reward_fn, num_generations=num_generations,
            gen_len=args.gen_len, temperature=args.temperature, top_k=args.top_k, prepend_bos=args.prepend_bos,
            stop_at_eos=args.eos_stops(), missing_eos_penalty=args.missing_eos_penalty,
            chunk_size=args.minibatch_size(), keep_ref_hidden=keep_ref_hidden, chunk_logits=args.chunk_logits,
            kv_cache=args.kv_cache, cuda_graph=args.cuda_graph,
            policy_precision=self.learning_precision,
        )

    def learning_precision(self):
        """The context the learning forward runs in (bf16 autocast with --bf16, else nothing)."""
        return learning_autocast(self.args, self.device)

    def optimizer_step(self, objective: Tensor) -> bool:
        """One ascent step on `objective` (MAXIMISED): zero the gradients, backward, clip the
        gradient norm, step — or skip the step when the objective or the gradient norm is not
        finite (the gradients stay on the parameters until the next step, for inspection). Returns whether
        it stepped; counts skipped steps in a row (the loop stops at max_skipped_steps)."""
        self.optimizer.zero_grad()
        with timed("backward"):
            objective.backward()
        with timed("optimizer_step"):
            stepped = clip_and_step(self.optimizer, self.policy, objective, self.args.max_grad_norm)
        self.skipped_in_a_row = 0 if stepped else self.skipped_in_a_row + 1
        return stepped

    def train(self, run_dir: str | Path | None = None, resume: bool = False, hooks: Sequence[PhaseHook] = ()) -> Path:
        """Run every phase (`loop.run_training`): a new run folder (or `run_dir`), or with
        `resume=True` continue the run in `run_dir` from its latest checkpoint. `hooks` run after
        every phase and log beside it (`loop.PhaseHook`). Returns the folder."""
        return run_training(self, None if run_dir is None else Path(run_dir), self.quiet, resume, hooks)


def mean_stats(stats: list[dict[str, float]]) -> dict[str, float]:
    """The per-minibatch statistics of a phase averaged key by key (empty: no step was taken)."""
    return {k: float(np.mean([s[k] for s in stats])) for k in stats[0]} if stats else {}
