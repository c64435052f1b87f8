"""The scaffolding every algorithm shares, written once; an algorithm adds its two phases.

    class RLOOTrainer(Trainer):                       # one file under algorithms/
        METRICS = ("reward", "kl", ...)              # what learning_phase returns (TRL's names)

        def rollout_phase(self) -> Rollout:          # sample, score, reward: no gradients
            return self.sample(num_generations=self.args.num_generations)

        def learning_phase(self, rollout) -> dict:   # the algorithm: its advantages and its loss
            advantages = ...
            def objective(rows):                     # one minibatch, MAXIMISED
                seq_logprobs = self.sequence_log_probs(rollout, rows)
                return calc_rloo_objective(...), {"objective/rloo": ...}
            return {**self.ascend(minibatch_rows(...), objective), ...}

`loop.run_training` knows an algorithm only through `contract.TrainerContract` (a Protocol: the
attributes and methods it touches, nothing else). `Trainer` implements the shared part of it: run
setup (seed, threads, device), the policy and the frozen reference, the prompts, the reward, the
optimizer and scheduler, the learning forward (DDP, torch.compile), the rollout's arguments from
the config, and the carrier of the learning phase:

    token_log_probs / sequence_log_probs   log π of a minibatch now, with gradient, through the
                                           learner, at the rollout's temperature, --chunk-logits at a time
    ascend(minibatches, objective)         the minibatch loop: bar, the learning forward's clock and
                                           precision, one guarded optimizer step each, one scheduler step

so a setting of the learning phase is read in one place and no algorithm can miss it. A subclass
holds no scaffolding and the base holds no algorithm math; algorithms never import each other.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm
from transformer_lens import HookedTransformer

from rlhf_scratch.config import CommonArgs
from rlhf_scratch.core.timing import timed
from rlhf_scratch.engine import distributed as dist
from rlhf_scratch.engine.accel import compiled, learning_autocast
from rlhf_scratch.engine.loop import PhaseHook, run_training
from rlhf_scratch.engine.optim import clip_and_step, get_optimizer_and_scheduler
from rlhf_scratch.engine.run_setup import load_policy, make_prompt_iterator, setup_torch
from rlhf_scratch.models.fast_forward import HiddenForward, fast_path_note
from rlhf_scratch.models.policy import Policy, build_policy, reference_of, trainable_lm
from rlhf_scratch.models.static_cache import DecoderCache
from rlhf_scratch.reward.judges import Judge
from rlhf_scratch.reward.tasks import RewardFn, make_reward_fn
from rlhf_scratch.rollout.phase import (
    Rollout,
    make_rollout,
    policy_sequence_log_probs,
    policy_token_log_probs,
    policy_token_terms,
)

Minibatch = TypeVar("Minibatch")
Objective = Callable[[Minibatch], "tuple[Tensor, dict[str, float]] | None"]


class Trainer:
    """The shared scaffolding of every algorithm (see the module docstring). A subclass writes
    `rollout_phase` and `learning_phase`; it may override `build_policy` (by default the registry's `policy` hook),
    `uses_reference` (GRPO at β = 0 loads none) and `extra_state`/`load_extra_state`."""

    METRICS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, args: CommonArgs, reward_fn: RewardFn | None = None, quiet: bool = False):
        args = args.with_local_paths_resolved()  # what config.json records must mean the same files on resume
        self.device = setup_torch(args)
        self.args, self.quiet = args, quiet or not dist.is_main()  # one progress bar: rank 0's
        lm = trainable_lm(load_policy(args.model, self.device), args)  # whole, or frozen with adapters (models.policy)
        self.ref_model: HookedTransformer | None = reference_of(args, lm, self.device) if self.uses_reference() else None
        """The reference: a frozen copy, or the policy's own LM run under `models.policy.as_reference`."""
        self.lm: HookedTransformer = lm
        """The language model being tuned (an algorithm's policy may hold more around it): what samples and what interp reads."""
        self.policy: Policy = self.build_policy(lm)
        self.prompts = make_prompt_iterator(args, lm)
        self.reward_fn = reward_fn or make_reward_fn(args, device=self.device)
        self.judge: Judge | None = None  # Online DPO may set one
        self.optimizer, self.scheduler = get_optimizer_and_scheduler(args, self.policy)
        forward = HiddenForward(lm) if self.policy is lm else self.policy  # the LM's learning forward returns ĥ
        self.learner = compiled(dist.wrap_for_training(forward), args)  # the learning forward (fast path, DDP, compile)
        self.skipped_in_a_row = 0
        self.decoders = DecoderCache()  # sampling's static cache (and CUDA graph), kept between rollouts
        if not self.quiet and (note := fast_path_note(lm, self.device)):
            tqdm.write(f"note: {note}", file=sys.stderr)

    @property
    def chunk_logits(self) -> int:
        """--chunk-logits on this run's device (-1, auto: 2**21 on a CPU, 2**27 on a GPU)."""
        return self.args.logits_per_chunk(self.device)

    # ------------------------------------------------------------------ what a subclass may change
    def build_policy(self, lm: HookedTransformer) -> Policy:
        """The module that is trained and saved: the LM itself, or what the algorithm's registry entry
        builds around it (`models.policy.build_policy`; a run folder is rebuilt the same way)."""
        return build_policy(self.args, lm)

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
            gen_len=args.gen_len, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
            prepend_bos=args.prepend_bos,
            stop_at_eos=args.eos_stops(), missing_eos_penalty=args.missing_eos_penalty,
            chunk_size=args.minibatch_size(), keep_ref_hidden=keep_ref_hidden, chunk_logits=self.chunk_logits,
            kv_cache=args.kv_cache, cuda_graph=args.cuda_graph, decoders=self.decoders,
            policy_precision=self.learning_precision,
        )

    def learning_precision(self):
        """The context the learning forward runs in (bf16 autocast with --bf16, else nothing)."""
        return learning_autocast(self.args, self.device)

    # ------------------------------------------------------------------ the learning phase's carrier
    def token_log_probs(self, rollout: Rollout, rows: Int[Tensor, " rows"]) -> Float[Tensor, "rows gen_len"]:
        """log π(o_t | q, o_<t) of the rollout's `rows` under the policy now, with gradient: through
        the learner (compiled / DDP), at the temperature the rollout was sampled at, `--chunk-logits`
        logits at a time (`rollout.policy_token_log_probs`)."""
        return policy_token_log_probs(self.learner, rollout, rows, chunk_logits=self.chunk_logits)

    def token_log_probs_and_entropy(
        self, rollout: Rollout, rows: Int[Tensor, " rows"]
    ) -> tuple[Float[Tensor, "rows gen_len"], Float[Tensor, "rows gen_len"]]:
        """`token_log_probs` and the entropy H[π] at the same positions, both with gradient, from one
        forward (`rollout.policy_token_terms`): for an entropy bonus in the objective."""
        terms = policy_token_terms(self.learner, rollout, rows, chunk_logits=self.chunk_logits, with_entropy=True)
        return terms.logprobs, terms.entropy

    def sequence_log_probs(self, rollout: Rollout, rows: Int[Tensor, " rows"]) -> Float[Tensor, " rows"]:
        """log π(o | q) of the rollout's `rows` now, with gradient: `token_log_probs` summed over kept tokens."""
        return policy_sequence_log_probs(self.learner, rollout, rows, chunk_logits=self.chunk_logits)

    def ascend(self, minibatches: Iterable[Minibatch], objective: Objective, total: int | None = None) -> dict[str, float]:
        """The minibatch loop of every algorithm's learning phase:

            for each minibatch:   J, stats = objective(minibatch)     (the learning forward: its clock, its precision)
                                  one optimizer step on J             (skipped if J or its gradient is not finite)
            one scheduler step

        `objective` returns None to skip a minibatch (Online DPO: no decided pair anywhere).
        Returns the stats averaged over minibatches (`mean_stats`) and `charts/skipped_steps`."""
        stats: list[dict[str, float]] = []
        skipped = 0
        # a nested bar only on a terminal: written to a file it is a few lines of noise a phase
        bar = tqdm(minibatches, total=total, desc="minibatches", leave=False, disable=self.quiet or not sys.stderr.isatty())
        for minibatch in bar:
            with timed("learning_forward"), self.learning_precision():
                out = objective(minibatch)
            if out is None:
                continue
            J, minibatch_stats = out
            skipped += not self.optimizer_step(J)
            if minibatch_stats:
                stats.append(minibatch_stats)
        self.scheduler.step()
        return {**mean_stats(stats), "charts/skipped_steps": float(skipped)}

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
