"""`RLHFTrainer`: PPO on a language model, reading like the blog.

    for phase in range(total_phases):                 # the engine's phase (loop.py), verl's names
        batch = generate_sequences → compute_log_prob (log π_old, log π_ref, V from the shared trunk)
                → compute_scores                      # no gradients
        compute_advantages(batch)                     # on the whole batch
        update_critic(batch)                          # only in --critic-warmup phases, or every phase with --critic separate
        update_actor(batch)                           # critic and actor in one step: epochs of minibatch ascent on J
                                                      # (--critic separate: the actor alone; a warmup phase: nothing)

The objective maximised on each minibatch (`compute_rlhf_objective`) is

    J = L_clip(θ) − ½·c_vf·(V − R)² + c_ent·H[π] − β·KL(π ‖ π_ref)

with the KL to the frozen reference model as an explicit term (not folded into the reward),
every mean over the completion tokens the policy chose (padding after EOS masked out).

With `--critic separate` (verl's default) V comes from a second model, a copy of the initial LM with
its own value head and AdamW (`self.critic`): the rollout reads its values, `update_critic` descends
the value loss on it alone, and J loses its value term — neither model gets a gradient from the
other's loss.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from rlhf_scratch.algorithms.ppo.args import RLHFArgs
from rlhf_scratch.algorithms.ppo.objective import compute_rlhf_objective
from rlhf_scratch.algorithms.ppo.policy import TransformerWithValueHead, build_critic
from rlhf_scratch.config import ConfigError
from rlhf_scratch.core.advantages import compute_advantages, compute_gae_advantages
from rlhf_scratch.core.host import Stats
from rlhf_scratch.core.kl_control import AdaptiveKLController
from rlhf_scratch.core.memory import ReplayMemory, ReplayMinibatch
from rlhf_scratch.core.objectives import (
    calc_approx_kl,
    calc_clip_fraction,
    calc_value_fn_loss,
    explained_variance,
    generated_span,
)
from rlhf_scratch.core.timing import timed
from rlhf_scratch.core.vocab_terms import unembedding
from rlhf_scratch.engine import distributed as dist
from rlhf_scratch.engine.accel import compiled
from rlhf_scratch.engine.batch import Batch, batch_of
from rlhf_scratch.engine.optim import Learner, get_optimizer_and_scheduler
from rlhf_scratch.engine.trainer import Trainer
from rlhf_scratch.models.fast_forward import final_hidden
from rlhf_scratch.models.policy import as_reference, load_saved_state, saved_state
from rlhf_scratch.reward.functions import normalize_reward
from rlhf_scratch.reward.tasks import RewardFn
from rlhf_scratch.rollout.generation import attention_mask_or_none
from rlhf_scratch.rollout.phase import Rollout, policy_values

# Logged by PPO's learning phase each phase, besides loop.SHARED_METRICS (CleanRL's names).
PPO_METRICS = (
    "objective/beta",  # β used this phase (the blog's kl_coef)
    "objective/total",  # J, mean over minibatches
    "losses/clipped_surrogate",  # L_clip, mean over minibatches
    "losses/value_loss",  # ½·c_vf·MSE, mean over minibatches
    "losses/entropy_bonus",  # c_ent·H, mean over minibatches
    "losses/kl_penalty",  # β·KL, mean over minibatches
    "losses/clipfrac",  # fraction of ratios outside [1-ε, 1+ε]
    "losses/approx_kl",  # k3 estimate of KL(π_old‖π) over the learning phase
    "losses/explained_variance",  # of the returns by the rollout values
    "charts/skipped_steps",  # optimizer steps skipped this phase for a non-finite objective or gradient
)



class RLHFTrainer(Trainer):
    """PPO RLHF of `args.model` toward the reward of `args.task` (or `reward_fn`)."""

    METRICS = PPO_METRICS
    args: RLHFArgs
    critic_alone: bool = False
    """This phase's `update_critic` was a warmup phase's: only the critic learns, `update_actor` does nothing."""

    def __init__(self, args: RLHFArgs, reward_fn: RewardFn | None = None, quiet: bool = False):
        super().__init__(args, reward_fn, quiet)
        self.beta = args.beta  # this phase's β (moved by the adaptive controller when it is on)
        self.kl_ctl = AdaptiveKLController(args.beta, args.target_kl, args.kl_horizon) if args.adaptive_kl else None
        self.check_ranks(args, dist.world_size())
        self.critic: TransformerWithValueHead | None = None
        """verl's separate critic (--critic separate): a copy of the initial LM with a value head; None when shared."""
        if args.critic == "separate":
            self.critic = build_critic(self.lm)
            self.critic_optimizer, self.critic_scheduler = get_optimizer_and_scheduler(args, self.critic, args.critic_trunk_lr())
            self.critic_learner = compiled(self.critic, args)  # its learning forward, as the policy's (--compile)

    @staticmethod
    def check_ranks(args: RLHFArgs, ranks: int) -> None:
        """What PPO does not run on several ranks yet, one ConfigError line each (asked before anything
        starts: by the trainer, and by the controller before Ray does)."""
        if ranks > 1 and args.critic_warmup:  # DDP all-reduces every parameter's gradient; the trunk would have none
            raise ConfigError("critic_warmup: not yet in a distributed run (DDP needs every parameter's gradient); use one process")
        if ranks > 1 and args.critic == "separate":
            raise ConfigError("critic: separate is not yet built for a distributed run; use one process or --critic shared")

    policy: TransformerWithValueHead
    """The LM with the blog's value head (built by the registry's `policy` hook, `ppo/policy.py`); the
    LM alone with --critic separate."""

    @property
    def model(self) -> TransformerWithValueHead:
        """The blog's name for the policy with its value head."""
        return self.policy

    # ------------------------------------------------------------------ the roles
    def keeps_ref_hidden(self) -> bool:
        """With --cache-ref-logprobs (and the full-vocabulary KL) the rollout keeps ĥ_ref for the learning phase."""
        return self.args.cache_ref_logprobs and self.args.kl_estimator == "full"

    def compute_log_prob(self, rollout: Rollout, ref_hidden: Tensor | None = None, with_values: bool = True) -> Rollout:
        """The trainer's `compute_log_prob`; with a separate critic its values are the critic's
        (`compute_values`), a forward of its own."""
        scored = super().compute_log_prob(rollout, ref_hidden=ref_hidden, with_values=with_values)
        if with_values and self.critic is not None:
            scored.values = self.compute_values(scored)
        return scored

    def compute_values(self, rollout: Rollout) -> Tensor | None:
        """V(s_t) at every position: the value head on the policy's trunk, or the separate critic's
        (`rollout.policy_values`, in the same chunks and precision either way)."""
        if self.critic is None:
            return super().compute_values(rollout)
        return policy_values(self.critic, rollout, self.args.minibatch_size(), self.learning_precision)

    @torch.no_grad()
    def compute_advantages(self, batch: Batch) -> None:
        """Per-token advantages of every process's rows, from the values and the (normalised: over
        the whole batch) rewards."""
        args, everyone = self.args, batch.everyone
        rewards = normalize_reward(everyone.rewards) if args.normalize_reward else everyone.rewards
        if args.advantage == "gae":  # value_span starts at the last prompt position: prefix_len 1
            batch.advantages = compute_gae_advantages(everyone.value_span, rewards, 1, args.gamma, args.gae_lambda,
                                                      mask=everyone.completion_mask)
        else:
            batch.advantages = compute_advantages(everyone.value_span, rewards, 1, mask=everyone.completion_mask)

    def rollout_advantages(self, rollout: Rollout) -> Float[Tensor, "batch gen_len"]:
        """Per-token advantages of `rollout`'s rows alone (`compute_advantages` on a batch of it)."""
        batch = batch_of(rollout)
        self.compute_advantages(batch)
        return batch.advantages

    def minibatch_objective(self, mb: ReplayMinibatch, temperature: float) -> tuple[Tensor, Stats]:
        """J on one minibatch: policy forward to ĥ (and values), the reference's ĥ_ref (kept by the
        rollout, or one float32 reference forward; none for `--kl-estimator k2`), the terms at the
        sampling `temperature`."""
        mask, ref_hidden = attention_mask_or_none(mb.attention_mask, of=mb.whole_attention_mask), mb.ref_hidden
        if ref_hidden is None and self.args.kl_estimator == "full":  # not kept: a float32 reference forward per minibatch
            with (timed("reference_forward"), torch.no_grad(), torch.autocast(torch.device(self.device).type, enabled=False),
                  as_reference(self.ref_model)):
                prefix_len = mb.sample_ids.shape[1] - mb.logprobs.shape[1]
                ref_hidden = final_hidden(self.ref_model, mb.sample_ids, mask)[:, generated_span(prefix_len)]
        if self.critic is None:
            hidden, values = self.hidden_and_extras(mb.sample_ids, mask)  # the carrier's learning forward
        else:  # the LM alone: J has no value term
            hidden, values = self.learner(mb.sample_ids, attention_mask=mask), None
        total, terms = compute_rlhf_objective(hidden, values, ref_hidden, mb, self.args, self.beta, temperature,
                                              unembedding(self.lm), unembedding(self.ref_model),
                                              chunk_logits=self.chunk_logits)
        logprobs = terms.pop("logprobs")
        stats = {"objective/total": total.detach(), **{f"losses/{k}": v.detach() for k, v in terms.items()},  # read once a phase
                 "losses/clipfrac": calc_clip_fraction(logprobs, mb.logprobs, self.args.clip_coef, mask=mb.completion_mask),
                 "losses/approx_kl": calc_approx_kl(logprobs, mb.logprobs, mask=mb.completion_mask)}
        return total, stats

    def update_actor(self, batch: Batch) -> Stats:
        """Critic and actor in one step (the value head shares the trunk): gradient ascent on J over
        every minibatch of every PPO epoch of this process's rows; one scheduler step. With a separate
        critic the actor alone, J without its value term (the critic learned in `update_critic`). In the
        first `critic_warmup` phases nothing: `update_critic`, called first (`dataflow.learn`), learned alone."""
        if self.critic_alone:
            self.critic_alone = False
            return {}
        if self.warming_up_critic:  # called without update_critic first: the warmup phase's learning is the critic's
            stats, self.critic_alone = self.update_critic(batch), False
            return stats
        return self.update_policy(batch)

    def update_policy(self, batch: Batch) -> Stats:
        """The ascent on J of `update_actor`: with the shared value head critic and actor together; with
        a separate critic the actor alone (J without its value term; the critic's metrics are `update_critic`'s)."""
        args, rollout = self.args, batch.rollout
        memory = self.replay_memory(batch)
        learned = self.ascend(memory.get_minibatches(), lambda mb: self.minibatch_objective(mb, rollout.temperature),
                              total=len(memory))
        stats = {**learned, "objective/beta": self.beta}  # the β this phase trained with
        if self.critic is None:
            stats["losses/explained_variance"] = self.values_explained(rollout, memory)
        if self.kl_ctl is not None:  # β for the next phase, from this rollout's KL
            kl = batch.everyone.kl[batch.everyone.completion_mask].mean().item()
            self.beta = self.kl_ctl.update(kl, args.batch_size)
        return stats

    @property
    def warming_up_critic(self) -> bool:
        """Whether this phase is one of the first `critic_warmup` (the scheduler steps once a
        learning phase, so its count is the phases learned, and a resumed run knows it too)."""
        return self.scheduler.last_epoch < self.args.critic_warmup

    def update_critic(self, batch: Batch) -> Stats:
        """Only the critic learns (verl's update_critic in its critic_warmup phases): descent on the
        value loss ½·c_vf·(V − R)², J's critic term alone, over the same minibatches and epochs; the
        policy's weights do not move (with --detach-value-head, the default, only the head's gradient
        is not zero), β stays. One scheduler step, as every phase.

        With a separate critic (--critic separate) this is its learning every phase: the same descent on
        its own weights, AdamW and schedule; in a warmup phase the policy's schedule steps too (the
        phase passes for the actor, as it does with the shared head). With the shared head after its
        warmup, nothing: the critic learns inside J (`update_actor`)."""
        warming = self.warming_up_critic  # decided before any step of this phase
        self.critic_alone = warming  # (set first: never left over from an earlier phase)
        if self.critic is None and not warming:
            return {}
        memory = self.replay_memory(batch)
        critic = None if self.critic is None else Learner(self.critic, self.critic_optimizer, self.critic_scheduler)
        learned = self.ascend(memory.get_minibatches(), self.critic_objective, total=len(memory), learner=critic)
        if critic is not None and warming:
            with warnings.catch_warnings():  # the actor takes no optimizer step in a warmup phase, knowingly
                warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step\\(\\)` before", category=UserWarning)
                self.scheduler.step()
        return {**learned, "objective/beta": self.beta,
                "losses/explained_variance": self.values_explained(batch.rollout, memory)}

    def critic_objective(self, mb: ReplayMinibatch) -> tuple[Tensor, Stats]:
        """−value_loss on one minibatch (`calc_value_fn_loss`, the term `compute_rlhf_objective` subtracts),
        V from the shared value head or from the separate critic's forward."""
        mask = attention_mask_or_none(mb.attention_mask, of=mb.whole_attention_mask)
        if self.critic is None:
            _, values = self.hidden_and_extras(mb.sample_ids, mask)
        else:
            _, values = self.critic_learner(mb.sample_ids, attention_mask=mask, return_hidden=True)
        gen = generated_span(mb.sample_ids.shape[1] - mb.logprobs.shape[1])
        value_loss = calc_value_fn_loss(values[:, gen], mb.returns, self.args.vf_coef, mask=mb.completion_mask)
        return -value_loss, {"losses/value_loss": value_loss.detach()}

    def replay_memory(self, batch: Batch) -> ReplayMemory:
        """This process's rows of the phase as PPO's minibatches (returns = advantages + old values)."""
        args, rollout = self.args, batch.rollout
        return ReplayMemory(
            rollout.sample_ids, rollout.attention_mask, rollout.completion_mask, rollout.logprobs,
            batch.local_advantages, rollout.values, args.num_minibatches, args.batches_per_learning_phase,
            ref_hidden=rollout.ref_hidden, ref_lse=rollout.ref_lse,
            ref_logprobs=rollout.ref_logprobs if args.kl_estimator == "k2" else None,
        )

    def values_explained(self, rollout: Rollout, memory: ReplayMemory) -> Tensor:
        """How much of the returns' variance the rollout's values explain (losses/explained_variance)."""
        return explained_variance(rollout.values[:, generated_span(rollout.prefix_len)], memory.returns,
                                  mask=rollout.completion_mask)

    def weights_state(self) -> dict[str, Any]:
        """The trainer's weights, optimizer and schedule, and a separate critic's (its weights, AdamW, schedule)."""
        state = super().weights_state()
        if self.critic is not None:
            state.update(critic=saved_state(self.critic), critic_optimizer=self.critic_optimizer.state_dict(),
                         critic_scheduler=self.critic_scheduler.state_dict())
        return state

    def schedulers(self) -> list:
        """The policy's schedule, and a separate critic's."""
        return super().schedulers() + ([] if self.critic is None else [self.critic_scheduler])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.critic is not None:
            load_saved_state(self.critic, state["critic"])
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])
            self.critic_scheduler.load_state_dict(state["critic_scheduler"])

    def extra_state(self) -> dict:
        """PPO's state besides weights and optimizer, for checkpoints: β and its controller."""
        return {"beta": self.beta, "kl_ctl": vars(self.kl_ctl).copy() if self.kl_ctl else None}

    def load_extra_state(self, state: dict) -> None:
        self.beta = state["beta"] if "beta" in state else state["kl_coef"]  # (checkpoints before the rename)
        if self.kl_ctl is not None and state["kl_ctl"] is not None:
            vars(self.kl_ctl).update(state["kl_ctl"])
