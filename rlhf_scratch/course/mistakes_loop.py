"""Planted mistakes of notebook 06's learning phase (`loop_check.check_learning_phase`): a learner's PPO
learning phase written from the blog's functions on full logits (`hand_written_phase`), correct or with one
classic loop bug planted — the objective minimised, the KL added or the wrong way round, the span off by one,
the completion mask ignored in J or in the advantages, the value head detached or feeding the trunk, the
minibatches drawn from another generator, the scheduler not stepped or stepped per minibatch, π_old
recomputed from the current policy, ...
Its correct form passes the check within its tolerance (tests/integration/test_course_loop.py).
"""

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from rlhf_scratch.core.advantages import compute_advantages
from rlhf_scratch.core.memory import ReplayMemory, ReplayMinibatch
from rlhf_scratch.core.objectives import (
    calc_clipped_sur_obj,
    calc_entropy_bonus,
    calc_kl_penalty,
    calc_value_fn_loss,
    generated_span,
    get_log_probs,
    temperature_scaled,
)
from rlhf_scratch.course.planted import Planted
from rlhf_scratch.reward.functions import normalize_reward
from rlhf_scratch.rollout.generation import attention_mask_or_none


def policy_logits_and_values(policy, ids, attn, detach: bool) -> tuple[Float[Tensor, "b s v"], Float[Tensor, "b s"]]:
    """π's logits and V(s_t); `detach=False` is the planted bug: the value head on the live residual."""
    if detach:
        return policy(ids, attention_mask=attn)
    hidden, _ = policy(ids, attention_mask=attn, return_hidden=True)
    return policy.base.unembed(hidden), policy.value_head(hidden).squeeze(-1)


def objective(policy, ref_model, mb: ReplayMinibatch, args, temperature: float, bug: str | None):
    """J on one minibatch from the blog's functions on full logits (a reference forward per minibatch)."""
    prefix_len = mb.sample_ids.shape[1] - mb.logprobs.shape[1]
    gen, mask, attn = generated_span(prefix_len), mb.completion_mask, attention_mask_or_none(mb.attention_mask)
    if bug == "off-by-one span":  # one slice for everything, each position paired with the token AT it
        gen = slice(prefix_len, None)
    if bug == "mask ignored in the objective":  # mask=None in every term: the means run over the padding too
        mask = None
    logits, values = policy_logits_and_values(policy, mb.sample_ids, attn, detach=bug != "value head not detached")
    if bug == "value head detached":  # V(s_t) without its gradient: the head never learns
        values = values.detach()
    with torch.no_grad():
        ref_logits = ref_model(mb.sample_ids, attention_mask=attn)
    logits_T, ref_T = temperature_scaled(logits[:, gen], temperature), temperature_scaled(ref_logits[:, gen], temperature)
    if bug == "off-by-one span":
        logprobs = logits_T.log_softmax(-1).gather(-1, mb.sample_ids[:, prefix_len:, None]).squeeze(-1)
    else:
        logprobs = get_log_probs(logits, mb.sample_ids, prefix_len, temperature)
    old_logprobs = logprobs.detach() if bug == "old log-probs recomputed" else mb.logprobs  # π_old from this π
    clipped = calc_clipped_sur_obj(logprobs, old_logprobs, mb.advantages, args.clip_coef, mask=mask)
    value_loss = calc_value_fn_loss(values[:, gen], mb.returns, args.vf_coef, mask=mask)
    entropy = calc_entropy_bonus(logits_T, args.ent_coef, mask=mask)
    if bug == "reversed KL":  # KL(π_ref ‖ π), written out: weighted by the reference's probabilities
        ref_lp, lp = ref_T.log_softmax(-1), logits_T.log_softmax(-1)
        kl = args.beta * (ref_lp.exp() * (ref_lp - lp)).sum(-1)[mask].mean()
    else:
        kl = calc_kl_penalty(logits_T, ref_T, args.beta, mask=mask)
    if bug == "value loss left out":
        value_loss = torch.zeros(())
    if bug == "KL penalty left out":
        kl = torch.zeros(())
    if bug == "entropy bonus left out":
        entropy = torch.zeros(())
    if bug == "value loss added":
        value_loss = -value_loss
    if bug == "entropy bonus subtracted":
        entropy = -entropy
    J = clipped - value_loss + entropy + (kl if bug == "KL penalty added" else -kl)
    return J, {"objective/total": J.item(), "losses/kl_penalty": kl.item(), "losses/value_loss": value_loss.item()}


def hand_written_phase(bug: str | None = None):
    """A learner's learning phase, correct or with one `bug` planted."""

    def learning_phase(policy, ref_model, rollout, args, optimizer, scheduler):
        with torch.no_grad():
            normalise = args.normalize_reward and bug != "raw rewards"
            rewards = normalize_reward(rollout.rewards) if normalise else rollout.rewards
            mask = None if bug == "mask ignored in the advantages" else rollout.completion_mask
            advantages = compute_advantages(rollout.values, rewards, rollout.prefix_len, mask=mask)
        memory = ReplayMemory(rollout.sample_ids, rollout.attention_mask, rollout.completion_mask, rollout.logprobs,
                              advantages, rollout.values, args.num_minibatches,
                              1 if bug == "one epoch" else args.batches_per_learning_phase)
        own_rng = torch.Generator().manual_seed(0) if bug == "own generator" else None
        stats = []
        for mb in memory.get_minibatches(own_rng):
            J, mb_stats = objective(policy, ref_model, mb, args, rollout.temperature, bug)
            if bug != "no zero_grad":
                optimizer.zero_grad()
            (-J if bug == "minimised" else J).backward()
            max_norm = float("inf") if bug == "no grad clip" else args.max_grad_norm
            grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), max_norm)
            if torch.isfinite(J) and torch.isfinite(grad_norm):
                optimizer.step()
            stats.append(mb_stats)
            if bug == "scheduler stepped per minibatch":
                scheduler.step()
        if bug not in ("no scheduler step", "scheduler stepped per minibatch"):
            scheduler.step()
        return {k: float(np.mean([s[k] for s in stats])) for k in stats[0]}

    return learning_phase


P = Planted
PLANTED: tuple[Planted, ...] = tuple(
    P("learning_phase", bug.replace(" ", "-"), hand_written_phase(bug), named, also, not_said)
    for bug, named, also, not_said in (
        ("no scheduler step", "the scheduler was not stepped: call scheduler.step() once per learning phase", (),
         ("moved differently",)),  # the steps themselves are right: nothing else is reported
        ("scheduler stepped per minibatch", "stepped 4 times in one phase: step it ONCE per learning phase", (), ()),
        ("minimised", "matches the package's when the objective is MINIMISED", (), ()),
        ("KL penalty added", "matches the package's when the KL penalty is ADDED to J", (), ()),
        ("value head not detached", "when the value loss's gradients flow into the trunk",
         ("the trunk (base.*) moved differently",), ()),
        ("own generator", "minibatches were drawn differently", ("likely cause: the minibatch order",), ()),
        # named from the first minibatch's gradient: only the trunk's differs (the KL), then the planted match
        ("reversed KL", "matches the package's when the KL is the wrong way round",
         ("before any step, the gradient of J already differs: the trunk's by",), ("value head's by",)),
        ("off-by-one span", "matches the package's when the generated span is off by one",
         ("the gradient of J already differs: the trunk's by", "the value head's by"), ()),
        ("no grad clip", "when the gradient norm is not clipped", ("the gradient of J is the package's: J is right",), ()),
        # the check rollout ends completions at EOS (padding after it) and left-pads prompts of mixed lengths
        ("mask ignored in the objective", "matches the package's when the completion mask is ignored in the objective",
         (), ()),
        ("mask ignored in the advantages",
         "matches the package's when the completion mask is ignored in the advantages", (), ()),
        # the same steps (the head gets no gradient either way), told apart by J: a detached V still costs its loss
        ("value head detached", "matches the package's when the value head is detached",
         ("the value head (value_head.*) moved differently",), ()),
        ("value loss left out", "matches the package's when the value loss is left out", (), ()),
        ("KL penalty left out", "matches the package's when the KL penalty is left out", (), ()),
        ("entropy bonus left out", "matches the package's when the entropy bonus is left out", (), ()),
        ("value loss added", "matches the package's when the value loss is ADDED to J", (), ()),
        ("entropy bonus subtracted", "matches the package's when the entropy bonus is SUBTRACTED from J", (), ()),
        ("raw rewards", "matches the package's when the advantages come from the raw rewards", (), ()),
        ("one epoch", "matches the package's when the batch is used once (one PPO epoch)", (), ()),
        ("no zero_grad", "matches the package's when the gradients are never zeroed", (), ()),
        ("old log-probs recomputed", "matches the package's when π_old is recomputed from the policy as it is now",
         ("the gradient of J is the package's",), ()),
    ))
"""Notebook 06's learning-phase mistakes (`course.mistakes.Planted`), the ten the course review planted among them."""
