"""`check_learning_phase` (rlhf_scratch/course/loop_check.py): it passes the package's own PPO learning
phase (bit for bit) and a correct one written from the blog's functions (within its tolerance), and
fails, naming the cause, on the mistakes a learner makes when writing the loop by hand."""

import numpy as np
import pytest
import torch
from jaxtyping import Float
from torch import Tensor

from rlhf_scratch.algorithms.ppo import RLHFTrainer
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
from rlhf_scratch.course.loop_check import UPDATE_RTOL, LearningPhaseMismatch, check_learning_phase
from rlhf_scratch.reward.functions import normalize_reward
from rlhf_scratch.rollout.generation import attention_mask_or_none


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """The check runs one torch thread (as the suite's workers do)."""


def package_phase(policy, ref_model, rollout, args, optimizer, scheduler):
    """`RLHFTrainer.learning_phase` on the pieces it is handed: a trainer holding exactly them."""
    trainer = object.__new__(RLHFTrainer)
    vars(trainer).update(args=args, policy=policy, learner=policy, lm=policy.base, ref_model=ref_model,
                         optimizer=optimizer, scheduler=scheduler, beta=args.beta, kl_ctl=None, device="cpu",
                         quiet=True, skipped_in_a_row=0)
    return trainer.learning_phase(rollout)


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
    logits, values = policy_logits_and_values(policy, mb.sample_ids, attn, detach=bug != "value head not detached")
    with torch.no_grad():
        ref_logits = ref_model(mb.sample_ids, attention_mask=attn)
    logits_T, ref_T = temperature_scaled(logits[:, gen], temperature), temperature_scaled(ref_logits[:, gen], temperature)
    if bug == "off-by-one span":
        logprobs = logits_T.log_softmax(-1).gather(-1, mb.sample_ids[:, prefix_len:, None]).squeeze(-1)
    else:
        logprobs = get_log_probs(logits, mb.sample_ids, prefix_len, temperature)
    clipped = calc_clipped_sur_obj(logprobs, mb.logprobs, mb.advantages, args.clip_coef, mask=mask)
    value_loss = calc_value_fn_loss(values[:, gen], mb.returns, args.vf_coef, mask=mask)
    entropy = calc_entropy_bonus(logits_T, args.ent_coef, mask=mask)
    if bug == "reversed KL":  # KL(π_ref ‖ π), written out: weighted by the reference's probabilities
        ref_lp, lp = ref_T.log_softmax(-1), logits_T.log_softmax(-1)
        kl = args.beta * (ref_lp.exp() * (ref_lp - lp)).sum(-1)[mask].mean()
    else:
        kl = calc_kl_penalty(logits_T, ref_T, args.beta, mask=mask)
    J = clipped - value_loss + entropy + (kl if bug == "KL penalty added" else -kl)
    return J, {"objective/total": J.item(), "losses/kl_penalty": kl.item(), "losses/value_loss": value_loss.item()}


def hand_written_phase(bug: str | None = None):
    """A learner's learning phase, correct or with one `bug` planted."""

    def learning_phase(policy, ref_model, rollout, args, optimizer, scheduler):
        with torch.no_grad():
            rewards = normalize_reward(rollout.rewards) if args.normalize_reward else rollout.rewards
            advantages = compute_advantages(rollout.values, rewards, rollout.prefix_len, mask=rollout.completion_mask)
        memory = ReplayMemory(rollout.sample_ids, rollout.attention_mask, rollout.completion_mask, rollout.logprobs,
                              advantages, rollout.values, args.num_minibatches, args.batches_per_learning_phase)
        own_rng = torch.Generator().manual_seed(0) if bug == "own generator" else None
        stats = []
        for mb in memory.get_minibatches(own_rng):
            J, mb_stats = objective(policy, ref_model, mb, args, rollout.temperature, bug)
            optimizer.zero_grad()
            (-J if bug == "minimised" else J).backward()
            max_norm = float("inf") if bug == "no grad clip" else args.max_grad_norm
            grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), max_norm)
            if torch.isfinite(J) and torch.isfinite(grad_norm):
                optimizer.step()
            stats.append(mb_stats)
        if bug != "no scheduler step":
            scheduler.step()
        return {k: float(np.mean([s[k] for s in stats])) for k in stats[0]}

    return learning_phase


def test_the_packages_own_learning_phase_passes_bit_for_bit_and_the_rng_is_given_back():
    rng = torch.get_rng_state()
    report = check_learning_phase(package_phase)
    assert set(report.update_errors) == {"trunk", "value head"}
    assert all(e == 0.0 for e in report.update_errors.values()), report
    assert "objective/total" in report.stat_errors and all(e == 0.0 for e in report.stat_errors.values()), report
    assert "bit for bit" in str(report)
    assert torch.equal(torch.get_rng_state(), rng), "the check must give torch's global RNG back as it found it"


def test_a_correct_phase_on_full_logits_passes_within_the_tolerance_but_not_bit_for_bit():
    """Another order of float32 operations (full logits, autograd, a reference forward): the check's
    tolerance must pass it — and the differences are really there, so the tolerance is what passes it."""
    report = check_learning_phase(hand_written_phase())
    assert 0 < max(report.update_errors.values()) <= UPDATE_RTOL / 5, report
    assert report.stat_errors["objective/total"] < 1e-6, report


@pytest.mark.parametrize(("bug", "message"), [
    ("no scheduler step", r"scheduler was not stepped: call scheduler\.step\(\) once per learning phase"),
    ("minimised", r"matches the package's when the objective is MINIMISED"),
    ("KL penalty added", r"matches the package's when the KL penalty is ADDED to J"),
    ("value head not detached", r"the trunk \(base\.\*\) moved differently(.|\n)*value loss's gradients flow into the trunk"),
    ("own generator", r"minibatches were drawn differently(.|\n)*likely cause: the minibatch order"),
    # named from the first minibatch's gradient: only the trunk's differs (the KL), then the planted match
    ("reversed KL", r"before any step, the gradient of J already differs: the trunk's by [0-9.e-]+ \(relative"
                    r"(.|\n)*matches the package's when the KL is the wrong way round"),
    ("off-by-one span", r"the gradient of J already differs: the trunk's by [0-9.e-]+, the value head's"
                        r"(.|\n)*matches the package's when the generated span is off by one"),
    ("no grad clip", r"the gradient of J is the package's: J is right(.|\n)*when the gradient norm is not clipped"),
])
def test_a_planted_bug_fails_with_its_targeted_message(bug, message):
    """Each bug is recognised by the planted mistake it reproduces (or, for the scheduler and the
    minibatch order, by the state it leaves behind), not merely reported as a difference."""
    with pytest.raises(LearningPhaseMismatch, match=message) as failure:
        check_learning_phase(hand_written_phase(bug))
    if bug == "no scheduler step":  # the steps themselves are right: nothing else is reported
        assert str(failure.value).count("\n- ") == 1, failure.value
    if bug == "reversed KL":  # the value head's first gradient is right: the KL is the trunk's alone
        assert "value head's by" not in str(failure.value), failure.value
