"""`check_learning_phase(fn)`: does your PPO learning phase do what `RLHFTrainer.learning_phase` does?

In notebook 06 you write PPO's learning phase from its pseudocode (the whole loop written out:
notebooks/solutions/06_build_the_ppo_loop_solutions.ipynb). Your function is called as

    stats = fn(policy, ref_model, rollout, args, optimizer, scheduler)

    policy      TransformerWithValueHead   the LM and its value head, trained in place
    ref_model   HookedTransformer          the frozen reference (the KL is measured against it)
    rollout     Rollout                    one phase's samples, log π_old, V_old, rewards (no gradients)
    args        RLHFArgs                   the config: coefficients, epochs, minibatches, β, detach_value_head
    optimizer   AdamW (maximize=True)      two parameter groups: trunk at base_lr, value head at head_lr
    scheduler   LambdaLR                   warmup + decay, to be stepped once per phase

and must run ONE learning phase — advantages, then `batches_per_learning_phase` shuffles of the batch
cut into `num_minibatches` minibatches, one guarded optimizer step per minibatch on
J = L_clip − value_loss + entropy_bonus − β·KL, one scheduler step — and return the phase's
statistics under the package's names (`PPO_METRICS`: at least "objective/total"), each the mean over
minibatches of its value before that minibatch's step.

How the check works:

1. `starting_state`: an `RLHFTrainer` on the tiny preset at a fixed seed with small settings
   (`CHECK_SETTINGS`) runs one whole phase, so that the check starts mid-training (the policy is
   off the reference: a KL penalty and its sign change the gradient; Adam has moments; the
   scheduler is past its first step), and then takes ONE rollout (`check_rollout`) that has what a
   mask or padding bug needs in order to show: 16 prompts of 2 to 9 tokens, left-padded (the
   attention mask is False on some columns of 15 rows), and completions that end with EOS at lengths
   1 to 7 (the pad token after it, the completion mask False: 51 of the 128 completion positions)
   beside four cut at gen_len = 8 without one. On a rollout of equal prompts and full-length
   completions a loop that ignores the completion mask, in J or in the advantages, computes the
   package's numbers exactly, and passed.
2. Your `fn` runs on deep copies of that state, `trainer.learning_phase(rollout)` on the original;
   torch's global RNG is put in the same state before each (the minibatches are shuffled with it:
   `ReplayMemory.get_minibatches`, `memory.minibatch_rows`).
3. Compared afterwards: the scheduler (its step count and learning rates, exactly); the parameter
   updates of each group, trunk and value head, as the relative error
   ‖Δθ_yours − Δθ_package‖ / ‖Δθ_package‖ ≤ `UPDATE_RTOL`; every statistic both return, to
   `STAT_RTOL` / `STAT_ATOL`; and torch's RNG state (the same draws, so the same minibatches).
4. On a mismatch, the first diagnosis is made on the FIRST minibatch, before any optimizer step has
   mixed the errors: the gradient each phase hands its first `optimizer.step()` (`first_gradients`)
   says whether J itself differs, and in which group. Then the package's phase is run again with
   each known mistake planted (`MISTAKES`: the objective minimised, the KL penalty added or the
   wrong way round, the generated span off by one, value-loss gradients into the trunk, the mask
   ignored in J or in the advantages, the value head detached, π_old recomputed, …) and the message names the one
   whose whole update, or whose first gradient, yours matches. Where two mistakes move the
   parameters alike (a detached value head and a value loss left out: the head gets no gradient
   either way), the one whose "objective/total" is also yours is named (`matching_mistake`).

The tolerance. Where your phase does the same operations in the same order (a wrapper around the
trainer's method) everything is equal bit for bit. A phase written from the blog's functions on
full logits is not: the package makes the vocabulary-wide terms a chunk of positions at a time with
a hand-written backward (`vocab_terms.token_terms`) and takes the reference's final residual from
the rollout, so float32 sums are added in another order and the gradients differ at about 1e-6
relative. Adam divides by √v, so a gradient entry near 0 can take a step of a different size: the
updates of a correct full-logits phase differ by 6.0e-5 to 9.2e-5 relative (measured on the check
rollout at seeds 0-3, the most in the trunk), and the statistics by about 1e-8. The planted mistakes
move the update by 1.3e-2 (the entropy bonus left out, at seeds 0, 2 and 3; value-loss gradients
into the trunk, 2.5e-2, at seed 1) to 1.4-1.8 (the farthest at each seed; Adam's moments lost, 1.5, at seed 0).
`UPDATE_RTOL` = 1e-3 sits between the two, more than ten times from each.

Longer than 500 lines because the check and its diagnosis are one job: the planted mistakes
(`MISTAKES`) are phases run through the very state, RNG and comparison the check uses, and the
message that names your mistake is assembled from both: they are read, and changed, together.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import Tensor
from transformer_lens import HookedTransformer

from rlhf_scratch.algorithms.ppo import RLHFTrainer, TransformerWithValueHead
from rlhf_scratch.config import RLHFArgs, make_args
from rlhf_scratch.core.advantages import compute_advantages
from rlhf_scratch.core.memory import ReplayMinibatch
from rlhf_scratch.core.objectives import (
    calc_clipped_sur_obj,
    calc_entropy_bonus,
    calc_kl_penalty,
    calc_value_fn_loss,
    generated_span,
    temperature_scaled,
)
from rlhf_scratch.course.checks import Reference, _case_failed, _check_signature, traced
from rlhf_scratch.engine.optim import get_optimizer_and_scheduler
from rlhf_scratch.reward.functions import normalize_reward
from rlhf_scratch.rollout.generation import attention_mask_or_none, decode_completions, pad_token_id
from rlhf_scratch.rollout.phase import Rollout

LearningPhase = Callable[
    [TransformerWithValueHead, HookedTransformer, Rollout, RLHFArgs, torch.optim.Optimizer,
     torch.optim.lr_scheduler.LRScheduler],
    dict,
]
"""What `check_learning_phase` checks: fn(policy, ref_model, rollout, args, optimizer, scheduler) -> stats."""
REFERENCE = Reference("notebooks/solutions/06_build_the_ppo_loop_solutions.ipynb",
                      "(policy, ref_model, rollout, args, optimizer, scheduler)", by_position=True)
"""How `fn` is called: six arguments by position (named as you like)."""

CHECK_SETTINGS: dict[str, Any] = dict(
    batch_size=16, num_minibatches=2, gen_len=8, batches_per_learning_phase=2,  # 4 optimizer steps a phase
    warmup_steps=0, total_phases=4,  # no warmup: the checked phase trains at a learning rate that is not 0
    base_lr=1e-3,  # ten times the default, so that the first phase moves the policy off the reference
    seed=0, threads=1, device="cpu",
)
"""The trainer the check builds (with the tiny preset's defaults for everything else)."""

CHECK_PROMPTS: tuple[str, ...] = (
    "This movie was really", "I", "The film", "A long and winding story about a", "Honestly", "The actors in this one",
    "What a", "It", "Nobody", "The ending of the film was", "This", "My friends and I", "Well", "The plot",
    "One of the worst", "Why",
)
"""The check rollout's 16 prompts, of 2 to 9 tokens (BOS first): left-padded to the longest, so the
attention mask is False on some columns of most rows and the positions count from each row's first token."""
CHECK_LENGTHS: tuple[int, ...] = (8, 3, 5, 1, 8, 6, 2, 7, 4, 8, 5, 3, 8, 2, 6, 1)
"""Each completion's length in the check rollout: below `gen_len` (8) it ends with EOS, its last kept
token, and the pad token follows it (completion_mask False); 8 is cut at gen_len without EOS. 51 of the
128 completion positions are padding, so a mean over them, or a reward placed at the last column, shows."""

UPDATE_RTOL = 1e-3
"""Most relative difference ‖Δθ_yours − Δθ_package‖ / ‖Δθ_package‖ of a parameter group's update (see the module docstring)."""
GRAD_RTOL = 1e-4
"""Most relative difference ‖g_yours − g_package‖ / ‖g_package‖ of a group's gradient at the FIRST
minibatch, before any step (measured: about 1e-6 for a correct full-logits phase; see `first_gradients`)."""
STAT_RTOL, STAT_ATOL = 1e-4, 1e-6
"""A statistic agrees when |yours − package's| ≤ STAT_ATOL + STAT_RTOL·|package's| (measured: about 1e-8)."""

GROUPS = {"trunk": "base.", "value head": "value_head."}
"""The optimizer's two parameter groups, by the prefix of their parameters' names in the policy."""


class LearningPhaseMismatch(AssertionError):
    """Your learning phase does something the package's does not; the message says what and where."""


@dataclass
class Start:
    """The state both phases start from: the trainer (restored before every run) and its rollout."""

    trainer: RLHFTrainer
    rollout: Rollout
    policy_state: dict[str, Tensor]
    optimizer_state: dict[str, Any]
    scheduler_state: dict[str, Any]
    rng: Tensor


@dataclass
class PhaseResult:
    """What one learning phase left behind."""

    params: dict[str, Tensor]
    stats: dict[str, float]
    scheduler_steps: int
    lrs: list[float]
    rng: Tensor
    first_grads: dict[str, Tensor]  # each parameter's gradient as the first optimizer step saw it ({} if none)


@dataclass
class LoopCheckReport:
    """What a passing check measured: each group's relative update error and each shared statistic's difference."""

    update_errors: dict[str, float]
    stat_errors: dict[str, float]

    def __str__(self) -> str:
        if not any(self.update_errors.values()) and not any(self.stat_errors.values()):
            return ("check_learning_phase passed: the parameters, the scheduler and "
                    f"{', '.join(self.stat_errors)} equal the package's bit for bit")
        groups = ", ".join(f"{g} {e:.1e}" for g, e in self.update_errors.items())
        stats = ", ".join(f"{k} {e:.1e}" for k, e in self.stat_errors.items())
        return (f"check_learning_phase passed: relative update error {groups} (tolerance {UPDATE_RTOL:.0e}); "
                f"|Δ| of {stats}; the scheduler stepped once and the minibatches were drawn alike")


@dataclass(frozen=True)
class Mistake:
    """A plausible bug, planted in the package's phase to recognise it in yours."""

    what: str
    fix: str
    plant: Callable[[RLHFTrainer], AbstractContextManager]


# ------------------------------------------------------------------ the planted mistakes
@contextmanager
def _setting(obj: object, name: str, value: Any) -> Iterator[None]:
    """`obj.name = value` while the phase runs."""
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextmanager
def _minimised(trainer: RLHFTrainer) -> Iterator[None]:
    """AdamW descends J: the same as (−J).backward() with maximize=True."""
    for group in trainer.optimizer.param_groups:
        group["maximize"] = False
    try:
        yield
    finally:
        for group in trainer.optimizer.param_groups:
            group["maximize"] = True


@contextmanager
def _instead(obj: object, method: str, replacement: Callable) -> Iterator[None]:
    """`obj.method` is `replacement` while the phase runs (an instance attribute, deleted after: the
    class's method shows through again)."""
    setattr(obj, method, replacement)
    try:
        yield
    finally:
        delattr(obj, method)


def _no_zero_grad(trainer: RLHFTrainer) -> AbstractContextManager:
    """Gradients accumulate over the phase's minibatches."""
    return _instead(trainer.optimizer, "zero_grad", lambda set_to_none=True: None)


@contextmanager
def _fresh_adam(trainer: RLHFTrainer) -> Iterator[None]:
    """Adam's moments from the earlier phases are lost (a new optimizer)."""
    trainer.optimizer.state.clear()
    yield


def blog_objective(trainer: RLHFTrainer, mb: ReplayMinibatch, temperature: float, reversed_kl: bool = False,
                   shift: int = 0) -> tuple[Tensor, dict[str, float]]:
    """J on one minibatch from the blog's functions on full logits, with a learner's mistake planted
    (the package's own `minibatch_objective` never makes the logits, so it has nowhere to plant these):

    reversed_kl  the penalty is β·KL(π_ref ‖ π): calc_kl_penalty with the two logits swapped
    shift = 1    the generated span is logits[:, prefix_len:] and values[:, prefix_len:], each position
                 paired with the token AT it instead of the one after it
    """
    prefix_len = mb.sample_ids.shape[1] - mb.logprobs.shape[1]
    span = generated_span(prefix_len) if shift == 0 else slice(prefix_len - 1 + shift, mb.sample_ids.shape[1] - 1 + shift)
    mask, attn, args = mb.completion_mask, attention_mask_or_none(mb.attention_mask), trainer.args
    logits, values = trainer.policy(mb.sample_ids, attention_mask=attn)
    with torch.no_grad():
        ref_logits = trainer.ref_model(mb.sample_ids, attention_mask=attn)
    logits_T, ref_T = temperature_scaled(logits[:, span], temperature), temperature_scaled(ref_logits[:, span], temperature)
    logprobs = logits_T.log_softmax(-1).gather(-1, mb.sample_ids[:, prefix_len:, None]).squeeze(-1)
    kl = calc_kl_penalty(ref_T, logits_T, trainer.beta, mask=mask) if reversed_kl else \
        calc_kl_penalty(logits_T, ref_T, trainer.beta, mask=mask)
    J = (calc_clipped_sur_obj(logprobs, mb.logprobs, mb.advantages, args.clip_coef, mask=mask)
         - calc_value_fn_loss(values[:, span], mb.returns, args.vf_coef, mask=mask)
         + calc_entropy_bonus(logits_T, args.ent_coef, mask=mask) - kl)
    return J, {"objective/total": J.item()}


def _blog_objective(trainer: RLHFTrainer, **mistake: Any) -> AbstractContextManager:
    """The phase's minibatch objective replaced by `blog_objective` with `mistake` planted."""
    return _instead(trainer, "minibatch_objective",
                    lambda mb, temperature: blog_objective(trainer, mb, temperature, **mistake))


def _objective_over_padding(trainer: RLHFTrainer) -> AbstractContextManager:
    """Every mean of J (and of its statistics) taken over all gen_len positions: the completion mask all True."""
    objective = trainer.minibatch_objective
    return _instead(trainer, "minibatch_objective", lambda mb, temperature: objective(
        dataclasses.replace(mb, completion_mask=torch.ones_like(mb.completion_mask)), temperature))


def _advantages_without_mask(trainer: RLHFTrainer) -> AbstractContextManager:
    """`compute_advantages` called without the completion mask: each reward lands at the last column
    (gen_len − 1), on the padding of a completion that ended early, and its EOS token's advantage is
    V(s_{t+1}) − V(s_t), a value of the padding, instead of reward − V(s_t)."""
    def compute(batch: Any) -> None:
        args, everyone = trainer.args, batch.everyone
        rewards = normalize_reward(everyone.rewards) if args.normalize_reward else everyone.rewards
        batch.advantages = compute_advantages(everyone.value_span, rewards, 1)

    return _instead(trainer, "compute_advantages", compute)


def _value_head_detached(trainer: RLHFTrainer) -> AbstractContextManager:
    """V(s_t) taken without its gradient (values.detach(), or under torch.no_grad()): the value loss is in
    J, and in its statistics, but the value head never learns."""
    hidden_and_extras = trainer.hidden_and_extras

    def detached(ids: Tensor, attention_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        hidden, values = hidden_and_extras(ids, attention_mask)
        return hidden, values.detach()

    return _instead(trainer, "hidden_and_extras", detached)


def _old_log_probs_recomputed(trainer: RLHFTrainer) -> AbstractContextManager:
    """π_old taken from the policy as it is now (each minibatch's own forward, detached) instead of the
    rollout's log-probs: the ratio is 1 at every step, so the clip never acts and PPO's epochs become plain
    policy-gradient steps; the first minibatch, where π is still π_old, is the package's exactly."""
    objective = trainer.minibatch_objective

    @torch.no_grad()
    def current_log_probs(mb: ReplayMinibatch, temperature: float) -> Tensor:
        prefix_len = mb.sample_ids.shape[1] - mb.logprobs.shape[1]
        logits, _ = trainer.policy(mb.sample_ids, attention_mask=attention_mask_or_none(mb.attention_mask))
        logits_T = temperature_scaled(logits[:, generated_span(prefix_len)], temperature)
        return logits_T.log_softmax(-1).gather(-1, mb.sample_ids[:, prefix_len:, None]).squeeze(-1)

    return _instead(trainer, "minibatch_objective", lambda mb, temperature: objective(
        dataclasses.replace(mb, logprobs=current_log_probs(mb, temperature)), temperature))


MISTAKES: tuple[Mistake, ...] = (
    Mistake("the objective is MINIMISED instead of maximised",
            "ascend J: AdamW(maximize=True) and J.backward() (not (-J).backward(), not maximize=False)", _minimised),
    Mistake("the KL penalty is ADDED to J",
            "J = clipped_surrogate − value_loss + entropy_bonus − kl_penalty: subtract calc_kl_penalty",
            lambda t: _setting(t, "beta", -t.beta)),
    Mistake("the KL is the wrong way round: you penalise KL(π_ref ‖ π)",
            "KL(π ‖ π_ref) = Σ_v π(v) (log π(v) − log π_ref(v)), weighted by the POLICY's probabilities: "
            "calc_kl_penalty(logits, ref_logits, beta), the policy's logits first",
            lambda t: _blog_objective(t, reversed_kl=True)),
    Mistake("the generated span is off by one: logits[:, prefix_len:] (and values[:, prefix_len:]) paired "
            "with tokens[:, prefix_len:]",
            "the logits at position t predict token t+1: the span is logits[:, prefix_len-1:-1] and "
            "values[:, prefix_len-1:-1] (objectives.generated_span(prefix_len)), paired with tokens[:, prefix_len:]",
            lambda t: _blog_objective(t, shift=1)),
    Mistake("the value loss is ADDED to J",
            "subtract calc_value_fn_loss: the value head descends its squared error", lambda t: _setting(t.args, "vf_coef", -t.args.vf_coef)),
    Mistake("the entropy bonus is SUBTRACTED from J",
            "add calc_entropy_bonus", lambda t: _setting(t.args, "ent_coef", -t.args.ent_coef)),
    Mistake("the value loss's gradients flow into the trunk although args.detach_value_head is True",
            "take V(s_t) from the detached final residual: policy(ids) does (TransformerWithValueHead.value_of), "
            "value_head(hidden) on the live residual does not", lambda t: _setting(t.policy, "detach_value_head", False)),
    Mistake("the completion mask is ignored in the objective: J's means run over the padding after EOS too",
            "pass mask=mb.completion_mask to every term (calc_clipped_sur_obj, calc_value_fn_loss, calc_entropy_bonus, "
            "calc_kl_penalty): padding is no action, and it must not enter a mean nor the advantages' normalisation",
            _objective_over_padding),
    Mistake("the completion mask is ignored in the advantages: compute_advantages without mask= puts each reward "
            "at the last column, on the padding of a completion that ended at EOS",
            "compute_advantages(values, rewards, prefix_len, mask=rollout.completion_mask): the episode ends at each "
            "completion's last kept token (its EOS), where the reward arrives",
            _advantages_without_mask),
    Mistake("the value head is detached: V(s_t) carries no gradient (values.detach(), torch.no_grad(), or the "
            "rollout's V_old in the value loss), so the value head never learns",
            "take V(s_t) from this minibatch's forward, with its gradient: policy(ids) returns (logits, values), "
            "and the value loss trains the head (args.detach_value_head stops it at the head, not before)",
            _value_head_detached),
    Mistake("the KL penalty is left out", "subtract calc_kl_penalty(logits, ref_logits, args.beta)",
            lambda t: _setting(t, "beta", 0.0)),
    Mistake("the entropy bonus is left out", "add calc_entropy_bonus(logits, args.ent_coef)",
            lambda t: _setting(t.args, "ent_coef", 0.0)),
    Mistake("the value loss is left out", "subtract calc_value_fn_loss(values, returns, args.vf_coef)",
            lambda t: _setting(t.args, "vf_coef", 0.0)),
    Mistake("the advantages come from the raw rewards", "normalise them first when args.normalize_reward: normalize_reward(rollout.rewards)",
            lambda t: _setting(t.args, "normalize_reward", False)),
    Mistake("the batch is used once (one PPO epoch)",
            "make args.batches_per_learning_phase passes: ReplayMemory(..., args.num_minibatches, args.batches_per_learning_phase)",
            lambda t: _setting(t.args, "batches_per_learning_phase", 1)),
    Mistake("the gradient norm is not clipped",
            "torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm) between backward and step",
            lambda t: _setting(t.args, "max_grad_norm", math.inf)),
    Mistake("the gradients are never zeroed", "optimizer.zero_grad() before each backward", _no_zero_grad),
    Mistake("Adam's moments start from zero", "step the optimizer you were given, not a new one", _fresh_adam),
    Mistake("π_old is recomputed from the policy as it is now: the ratio is 1 at every step, so the clip never acts",
            "π_old is the rollout's log-probs (rollout.logprobs, mb.logprobs), frozen before the learning phase: "
            "r = exp(log π_now − log π_old) moves away from 1 as the epochs step the policy",
            _old_log_probs_recomputed),
)
"""Known mistakes, each reproduced by changing one thing in `RLHFTrainer.learning_phase`'s run."""


# ------------------------------------------------------------------ the starting state and the two runs
@lru_cache(maxsize=1)
def starting_state() -> Start:
    """A trainer one phase into training and its next rollout (built once per process: every run
    restores it first, so the check can be called again without rebuilding)."""
    trainer = RLHFTrainer(make_args("tiny", **CHECK_SETTINGS), quiet=True)
    trainer.learning_phase(trainer.rollout_phase())
    rollout = check_rollout(trainer)
    return Start(trainer, rollout, copy.deepcopy(trainer.policy.state_dict()),
                 copy.deepcopy(trainer.optimizer.state_dict()), copy.deepcopy(trainer.scheduler.state_dict()),
                 torch.get_rng_state())


@torch.no_grad()
def check_rollout(trainer: RLHFTrainer) -> Rollout:
    """One rollout of `CHECK_PROMPTS` (mixed lengths, left-padded), each completion then ended at its
    `CHECK_LENGTHS` entry: EOS as its last kept token, the pad token after it, the completion mask
    False there (what sampling with stop_at_eos leaves, at lengths chosen rather than drawn). Then
    scored and rewarded as the loop does (`dataflow.roll_out`'s steps): log π_old, V_old, the
    reference's ĥ_ref and the rewards are those of the ended completions."""
    rollout = trainer.generate_sequences(list(CHECK_PROMPTS))
    ids, mask, gen_len = rollout.completion_ids.clone(), rollout.completion_mask.clone(), rollout.completion_ids.shape[1]
    eos = rollout.eos_token_id if isinstance(rollout.eos_token_id, int) else rollout.eos_token_id[0]
    for row, length in enumerate(CHECK_LENGTHS):
        mask[row] = torch.arange(gen_len) < length
        if length < gen_len:
            ids[row, length - 1], ids[row, length:] = eos, pad_token_id(trainer.lm)
    rollout.completion_ids, rollout.completion_mask = ids, mask
    rollout.completions = decode_completions(trainer.lm, ids, mask, stop_at_eos=True)
    rollout = trainer.compute_log_prob(rollout, trainer.compute_ref_log_prob(rollout))
    return trainer.compute_scores(rollout)


def reset(start: Start) -> None:
    """Put the trainer and torch's RNG back into the starting state (deep copies: Adam steps in place)."""
    trainer = start.trainer
    trainer.policy.load_state_dict(start.policy_state)
    trainer.policy.zero_grad(set_to_none=True)
    trainer.optimizer.load_state_dict(copy.deepcopy(start.optimizer_state))
    trainer.scheduler.load_state_dict(copy.deepcopy(start.scheduler_state))
    torch.set_rng_state(start.rng)


@contextmanager
def first_gradients(optimizer: torch.optim.Optimizer, policy: torch.nn.Module) -> Iterator[dict[str, Tensor]]:
    """Every parameter's gradient as the phase's first backward leaves it (before the norm clip and
    the first optimizer step): the gradient of J on the first minibatch at the starting parameters.

    This is where a mistake in J shows by itself, in the parameter group it touches. After the first
    step the parameters differ, so every later gradient carries the earlier differences too, Adam's
    √v reshapes each update, and the norm clip scales every group by the same factor: at the end of a
    phase a wrong KL and a wrong span both look like "everything moved differently"."""
    grads: dict[str, Tensor] = {}
    recording = [True]

    def keep(name: str) -> Callable[[Tensor], None]:
        def hook(p: Tensor) -> None:
            if recording[0] and name not in grads:
                grads[name] = p.grad.detach().clone()
        return hook

    def stop(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if recording[0]:
            recording[0] = False
            grads.update({n: torch.zeros_like(p) for n, p in policy.named_parameters() if n not in grads})

    handles = [p.register_post_accumulate_grad_hook(keep(n)) for n, p in policy.named_parameters() if p.requires_grad]
    handles.append(optimizer.register_step_pre_hook(stop))
    try:
        yield grads
    finally:
        for handle in handles:
            handle.remove()


def outcome(policy: torch.nn.Module, optimizer: torch.optim.Optimizer,
            scheduler: torch.optim.lr_scheduler.LRScheduler, stats: dict[str, float],
            first_grads: dict[str, Tensor]) -> PhaseResult:
    """The parameters (copied: the trainer's are restored and trained again), the stats, the scheduler's
    step count and learning rates, torch's RNG state right after a phase, and the first step's gradients."""
    return PhaseResult({n: p.detach().clone() for n, p in policy.named_parameters()}, stats,
                       scheduler.last_epoch, [g["lr"] for g in optimizer.param_groups], torch.get_rng_state(),
                       first_grads)


def run_package(start: Start, mistake: Mistake | None = None) -> PhaseResult:
    """`trainer.learning_phase` from the starting state (with `mistake` planted, if any)."""
    reset(start)
    trainer = start.trainer
    with mistake.plant(trainer) if mistake else nullcontext(), first_gradients(trainer.optimizer, trainer.policy) as grads:
        stats = trainer.learning_phase(copy.deepcopy(start.rollout))
    return outcome(trainer.policy, trainer.optimizer, trainer.scheduler, stats, grads)


def run_learner(start: Start, fn: LearningPhase) -> PhaseResult:
    """`fn` on deep copies of the starting state: policy, reference, rollout, args, optimizer and scheduler."""
    reset(start)
    trainer = start.trainer
    policy, ref_model = copy.deepcopy(trainer.policy), copy.deepcopy(trainer.ref_model)
    optimizer, scheduler = get_optimizer_and_scheduler(trainer.args, policy)
    optimizer.load_state_dict(copy.deepcopy(start.optimizer_state))
    scheduler.load_state_dict(copy.deepcopy(start.scheduler_state))
    torch.set_rng_state(start.rng)
    learner = traced(fn)
    try:
        with first_gradients(optimizer, policy) as grads:
            stats = learner(policy, ref_model, copy.deepcopy(start.rollout), copy.deepcopy(trainer.args), optimizer,
                            scheduler)
    except Exception as e:
        if isinstance(e, NotImplementedError):  # the stub, not written yet
            raise
        raise LearningPhaseMismatch(str(_case_failed("learning_phase", "check_learning_phase failed", e,
                                                     learner.trace, lambda: None))) from e
    if not isinstance(stats, dict):
        raise LearningPhaseMismatch(f"your learning phase returned {type(stats).__name__}; return a dict of its "
                                    "statistics, e.g. {'objective/total': mean J over the minibatches, ...}")
    not_numbers = {k: v for k, v in stats.items() if not _number(v)}
    if not_numbers:
        k, v = next(iter(not_numbers.items()))
        raise LearningPhaseMismatch(f"your learning phase's stats[{k!r}] is {type(v).__name__} {str(v)[:40]!r}: each "
                                    "statistic is one number (a float, or a tensor of one element)")
    return outcome(policy, optimizer, scheduler, {k: float(v) for k, v in stats.items()}, grads)


def _number(v: Any) -> bool:
    """A statistic `float()` reads: a real number, or a tensor or array of one element."""
    if isinstance(v, (Tensor, np.ndarray)):
        return v.numel() == 1 if isinstance(v, Tensor) else v.size == 1
    return isinstance(v, (int, float)) and not isinstance(v, bool) or isinstance(v, np.number)


# ------------------------------------------------------------------ comparing
def update_errors(before: dict[str, Tensor], mine: dict[str, Tensor], theirs: dict[str, Tensor]) -> dict[str, float]:
    """Per parameter group: ‖Δθ_mine − Δθ_theirs‖ / ‖Δθ_theirs‖ (= ‖θ_mine − θ_theirs‖ / ‖Δθ_theirs‖)."""
    errors = {}
    for group, prefix in GROUPS.items():
        names = [n for n in before if n.startswith(prefix)]
        apart = math.sqrt(sum((mine[n] - theirs[n]).double().pow(2).sum().item() for n in names))
        moved = math.sqrt(sum((theirs[n] - before[n]).double().pow(2).sum().item() for n in names))
        errors[group] = apart / moved if moved else (0.0 if apart == 0 else math.inf)
    return errors


def most_different(mine: dict[str, Tensor], theirs: dict[str, Tensor], prefix: str) -> str:
    """The tensor of a group that holds the largest part of the difference ‖θ_mine − θ_theirs‖."""
    return max((n for n in theirs if n.startswith(prefix)), key=lambda n: (mine[n] - theirs[n]).norm().item())


def moved(before: dict[str, Tensor], after: dict[str, Tensor]) -> bool:
    return any(not torch.equal(before[n], after[n]) for n in before)


def scheduler_problems(mine: PhaseResult, theirs: PhaseResult, start: Start) -> list[str]:
    """One scheduler step per phase, after the minibatches: compare the step count and the learning rates."""
    steps = mine.scheduler_steps - start.scheduler_state["last_epoch"]
    if steps == 1 and mine.lrs == theirs.lrs:
        return []
    if steps == 0:
        return ["the scheduler was not stepped: call scheduler.step() once per learning phase, after the "
                "minibatches (the learning rate then warms up and decays by phase)"]
    if steps > 1:
        return [f"the scheduler was stepped {steps} times in one phase: step it ONCE per learning phase, after "
                "the last minibatch, not once per minibatch or epoch"]
    return [f"the learning rates after the phase are {mine.lrs}, the package's {theirs.lrs}: leave the "
            "optimizer's learning rates to the scheduler"]


def rng_problems(mine: PhaseResult, theirs: PhaseResult) -> list[str]:
    """The minibatches are drawn from torch's global RNG: the same draws leave it in the same state."""
    if torch.equal(mine.rng, theirs.rng):
        return []
    return ["torch's global RNG is not where the package's phase leaves it, so your minibatches were drawn "
            "differently: draw them with ReplayMemory(...).get_minibatches() (one torch.randperm of the batch "
            "per epoch, from the global RNG, cut into args.num_minibatches) and draw nothing else"]


def gradient_errors(mine: dict[str, Tensor], theirs: dict[str, Tensor]) -> dict[str, float]:
    """Per parameter group: ‖g_mine − g_theirs‖ / ‖g_theirs‖ of the first step's gradients."""
    return update_errors({n: torch.zeros_like(g) for n, g in theirs.items()}, mine, theirs)


def parameter_problems(start: Start, fn_result: PhaseResult, theirs: PhaseResult, errors: dict[str, float]) -> list[str]:
    """Which groups moved differently; whether J already differs at the first minibatch (its gradient,
    before any step); and the planted mistake that reproduces yours, if one does."""
    before = {n: start.policy_state[n] for n in theirs.params}
    if not moved(before, fn_result.params):
        return ["no parameter moved: call optimizer.step() after each minibatch's backward (and check the "
                "objective has a gradient: no torch.no_grad() around the forward)"]
    lines = []
    for group, prefix in GROUPS.items():
        if errors[group] > UPDATE_RTOL:
            name = most_different(fn_result.params, theirs.params, prefix)
            lines.append(f"the {group} ({prefix}*) moved differently: relative update error {errors[group]:.2g} "
                         f"(tolerance {UPDATE_RTOL:.0e}), the most in {name}")
    first = gradient_errors(fn_result.first_grads, theirs.first_grads) if fn_result.first_grads else None
    j_differs = first is not None and max(first.values()) > GRAD_RTOL
    if j_differs:
        differ = ", ".join(f"the {g}'s by {e:.2g}" for g, e in first.items() if e > GRAD_RTOL)
        lines.append(f"at the first minibatch, before any step, the gradient of J already differs: {differ} "
                     f"(relative; tolerance {GRAD_RTOL:.0e}), so J itself is computed differently")
    elif first is not None:
        lines.append("at the first minibatch, before any step, the gradient of J is the package's: J is right, "
                     "what differs comes with the steps")
    match = matching_mistake(start, fn_result, before, theirs.first_grads)
    if match is not None:
        lines.append(f"likely cause: your phase matches the package's when {match.what}. Fix: {match.fix}")
    elif not torch.equal(fn_result.rng, theirs.rng):
        lines.append("likely cause: the minibatch order (above): other minibatches make every step differ; "
                     "fix it first, then run the check again")
    elif j_differs:
        lines.append(f"likely causes: {likely_causes(first)}")
    else:
        lines.append("likely causes: the step itself: optimizer.zero_grad() / J.backward() / "
                     "clip_grad_norm_(policy.parameters(), args.max_grad_norm) / optimizer.step() once per "
                     "minibatch, the optimizer you were given, args.batches_per_learning_phase epochs")
    return lines


def matching_mistake(start: Start, fn_result: PhaseResult, before: dict[str, Tensor],
                     package_grads: dict[str, Tensor]) -> Mistake | None:
    """The planted mistake (the likeliest first) that reproduces yours: its whole update is yours within
    `UPDATE_RTOL`, or — for a mistake in J itself — its first step's gradient is yours within `GRAD_RTOL`
    (one minibatch at the starting parameters, where nothing else mixes in).

    Two mistakes can move the parameters alike and differ only in J's value: a detached value head and
    a value loss left out both leave the head without a gradient (and, with `detach_value_head`, the
    trunk's gradient is the same), but the first still subtracts the value loss from J. So the first
    mistake whose steps match AND whose "objective/total" is yours is named; failing that, the first
    whose steps match."""
    steps_only = None
    for mistake in MISTAKES:
        planted = run_package(start, mistake)
        same_update = max(update_errors(before, fn_result.params, planted.params).values()) <= UPDATE_RTOL
        same_first_gradient = (
            bool(fn_result.first_grads) and max(gradient_errors(planted.first_grads, package_grads).values()) > GRAD_RTOL
            and max(gradient_errors(fn_result.first_grads, planted.first_grads).values()) <= GRAD_RTOL)
        if not (same_update or same_first_gradient):
            continue
        if same_objective(fn_result.stats, planted.stats):
            return mistake
        steps_only = steps_only or mistake
    return steps_only


def same_objective(mine: dict[str, float], theirs: dict[str, float]) -> bool:
    """Whether both phases report the same mean J ("objective/total"), within the statistics' tolerance."""
    if "objective/total" not in mine or "objective/total" not in theirs:
        return False
    return abs(mine["objective/total"] - theirs["objective/total"]) <= STAT_ATOL + STAT_RTOL * abs(theirs["objective/total"])


def likely_causes(errors: dict[str, float]) -> str:
    """What to look at, from which group's first gradient differs."""
    trunk, head = (errors[g] > GRAD_RTOL for g in GROUPS)
    if trunk and not head:
        return ("the terms only the trunk feels: the log-probs (the generated span logits[:, prefix_len-1:-1], "
                "the rollout's temperature), the KL to the reference, the entropy, value gradients into the trunk")
    if head and not trunk:
        return ("the value loss: its coefficient, V(s_t) on the generated span values[:, prefix_len-1:-1], the "
                "returns (advantages + the rollout's values: memory.returns)")
    return ("more than one term of J: the advantages (compute_advantages on normalised rewards), the combination "
            "J = L_clip − value_loss + entropy_bonus − kl_penalty, the span shared by the logits and the values")


def stat_errors(mine: dict[str, float], theirs: dict[str, float]) -> dict[str, float]:
    """|yours − package's| of every statistic both return."""
    return {k: abs(mine[k] - theirs[k]) for k in theirs if k in mine}


def stat_problems(mine: dict[str, float], theirs: dict[str, float], steps_agree: bool) -> list[str]:
    """Every shared statistic must agree; "objective/total" must be there."""
    if "objective/total" not in mine:
        return ["your stats have no 'objective/total': return the mean over minibatches of J (taken before each "
                "step), so that the check can compare it"]
    wrong = [k for k, e in stat_errors(mine, theirs).items() if e > STAT_ATOL + STAT_RTOL * abs(theirs[k])]
    lines = [f"stats[{k!r}] is {mine[k]:.6g}, the package's {theirs[k]:.6g}" for k in wrong]
    if wrong and steps_agree:
        lines.append("the steps agree, so these numbers are computed or averaged differently: the mean over the "
                     "phase's minibatches of each minibatch's value, taken before its step, coefficients applied")
    return lines


# ------------------------------------------------------------------ the check
def check_learning_phase(fn: LearningPhase) -> LoopCheckReport:
    """Run `fn` and `RLHFTrainer.learning_phase` from the same state and compare them (module
    docstring); raise `LearningPhaseMismatch` naming what differs and its likely cause, or return
    the measured differences. One torch thread; the caller's RNGs (torch's, numpy's, Python's: the
    trainer's setup seeds them) and thread count are given back as they were."""
    _check_signature("learning_phase", fn, REFERENCE)  # None, 42, a function of two arguments: named before the trainer is built
    threads, rngs = torch.get_num_threads(), (torch.get_rng_state(), np.random.get_state(), random.getstate())
    torch.set_num_threads(1)
    try:
        with torch.enable_grad():
            return compare(starting_state(), fn)
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(rngs[0])
        np.random.set_state(rngs[1])
        random.setstate(rngs[2])


def compare(start: Start, fn: LearningPhase) -> LoopCheckReport:
    """The learner's phase against the package's: scheduler, RNG, parameters, statistics."""
    mine = run_learner(start, fn)
    theirs = run_package(start)
    errors = update_errors({n: start.policy_state[n] for n in theirs.params}, mine.params, theirs.params)
    steps_agree = max(errors.values()) <= UPDATE_RTOL
    problems = scheduler_problems(mine, theirs, start) + rng_problems(mine, theirs)
    if not steps_agree:
        problems += parameter_problems(start, mine, theirs, errors)
    problems += stat_problems(mine.stats, theirs.stats, steps_agree)
    if problems:
        raise LearningPhaseMismatch("your learning phase differs from RLHFTrainer.learning_phase:\n- " + "\n- ".join(problems))
    return LoopCheckReport(errors, stat_errors(mine.stats, theirs.stats))
