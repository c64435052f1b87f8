"""PPO's --critic separate (verl's critic): a second model that learns the value loss alone, and a
policy whose objective has no value term — each kept out of the other's gradient, exactly."""

import copy

import pytest
import torch

from rlhf_scratch.algorithms.ppo import RLHFTrainer
from rlhf_scratch.config import ConfigError, make_args
from rlhf_scratch.core.objectives import generated_span, masked_mean
from rlhf_scratch.engine.batch import gather_batch
from rlhf_scratch.rollout.generation import attention_mask_or_none

WEIGHT_DECAY = 0.01  # torch's AdamW default: the package's optimizer passes none


def trainer_for(**overrides):
    values = dict(total_phases=3, batch_size=8, num_minibatches=2, batches_per_learning_phase=1, gen_len=6,
                  warmup_steps=0, base_lr=1e-3, seed=7, critic="separate", critic_lr=3e-4)
    return RLHFTrainer(make_args("tiny", **{**values, **overrides}), quiet=True)


def phase_batch(trainer):
    batch = gather_batch(trainer.rollout_phase())
    trainer.compute_advantages(batch)
    return batch


def grads(module):
    return {name: p.grad for name, p in module.named_parameters()}


def clear(*modules):
    for module in modules:
        for p in module.parameters():
            p.grad = None


def test_the_policy_and_the_separate_critic_get_no_gradient_from_each_others_loss(one_thread):
    trainer = trainer_for()
    assert trainer.policy is trainer.lm and trainer.critic.base is not trainer.lm, "the critic must be a copy"
    batch = phase_batch(trainer)
    mb = next(iter(trainer.replay_memory(batch).get_minibatches()))
    J, stats = trainer.minibatch_objective(mb, batch.rollout.temperature)
    assert "losses/value_loss" not in stats, "J of a separate critic has no value term"
    J.backward()
    assert all(g is None for g in grads(trainer.critic).values()), "the policy's terms reached the critic"
    assert any(g is not None and g.abs().sum() > 0 for g in grads(trainer.lm).values())
    clear(trainer.lm, trainer.critic)
    neg_value_loss, _ = trainer.critic_objective(mb)
    neg_value_loss.backward()
    assert all(g is None for g in grads(trainer.lm).values()), "the value loss reached the policy"
    critic_grads = grads(trainer.critic)
    assert critic_grads["base.embed.W_E"].abs().sum() > 0, "the critic's trunk learns too (nothing detached)"
    assert critic_grads["value_head.2.bias"].abs().sum() > 0

    # the check can fail: the blog's shared head with --no-detach-value-head sends the value loss into the policy
    shared = trainer_for(critic="shared", detach_value_head=False)
    mb = next(iter(shared.replay_memory(phase_batch(shared)).get_minibatches()))
    shared.critic_objective(mb)[0].backward()
    assert grads(shared.lm)["embed.W_E"].abs().sum() > 0


def test_one_critic_step_is_adamw_on_the_value_loss_worked_by_hand(one_thread):
    """One minibatch, one epoch, no clipping: the head's output bias b gets ∂(−½·c_vf·mean (V − R)²)/∂b
    = −c_vf·mean_kept (V − R), and AdamW's first step moves every weight by
    p ← p·(1 − lr·wd) + lr·g / (|g| + ε) — the head at --head-lr, the trunk at --critic-lr; the policy
    stays exactly, its schedule does not step."""
    trainer = trainer_for(num_minibatches=1, max_grad_norm=1e6, head_lr=2e-3)
    batch = phase_batch(trainer)
    critic_before = copy.deepcopy(trainer.critic)
    policy_before = {k: v.clone() for k, v in trainer.lm.state_dict().items()}
    seen = []
    learn_value = trainer.critic_objective
    trainer.critic_objective = lambda mb: (seen.append(mb), learn_value(mb))[1]
    stats = trainer.update_critic(batch)
    (mb,) = seen

    mask = mb.completion_mask
    gen = generated_span(mb.sample_ids.shape[1] - mb.logprobs.shape[1])
    with torch.no_grad():
        values = critic_before(mb.sample_ids, attention_mask=attention_mask_or_none(mb.attention_mask), return_hidden=True)[1][:, gen]
    bias = trainer.critic.value_head[2].bias
    by_hand = -trainer.args.vf_coef * masked_mean(values - mb.returns, mask)
    assert bias.grad.item() == pytest.approx(by_hand.item(), rel=1e-5)
    assert stats["losses/value_loss"] == pytest.approx(0.5 * trainer.args.vf_coef * masked_mean((values - mb.returns) ** 2, mask).item(),
                                                       rel=1e-6)

    def adamw_first_step(before, grad, lr):
        return before * (1 - lr * WEIGHT_DECAY) + lr * grad / (grad.abs() + 1e-8)

    after = dict(trainer.critic.named_parameters())
    for name, lr in (("value_head.2.bias", 2e-3), ("value_head.0.weight", 2e-3), ("base.embed.W_E", 3e-4),
                     ("base.blocks.0.attn.W_Q", 3e-4)):
        expected = adamw_first_step(dict(critic_before.named_parameters())[name].detach(), after[name].grad, lr)
        assert torch.allclose(after[name].detach(), expected, rtol=1e-6, atol=1e-9), f"{name}: not AdamW at lr {lr}"
    assert all(torch.equal(v, policy_before[k]) for k, v in trainer.lm.state_dict().items()), "the policy moved"
    assert (trainer.scheduler.last_epoch, trainer.critic_scheduler.last_epoch) == (0, 1)


def test_a_separate_critic_phase_is_update_critic_then_the_actor_alone(one_thread):
    """A phase with a separate critic (the loop's `dataflow.learn`: update_critic, then update_actor):
    the critic's value loss and explained variance, the actor's J without its value term, both
    schedules stepped once; with --critic-warmup 1 the first phase moves the critic alone (update_actor
    learns nothing) and still steps the policy's schedule (the warmup is counted by it)."""
    trainer = trainer_for(critic_warmup=1)
    policy_before = {k: v.clone() for k, v in trainer.lm.state_dict().items()}
    batch = phase_batch(trainer)
    warm = trainer.update_critic(batch)
    assert trainer.update_actor(batch) == {}
    assert "losses/clipped_surrogate" not in warm and warm["losses/value_loss"] > 0
    assert all(torch.equal(v, policy_before[k]) for k, v in trainer.lm.state_dict().items())
    assert (trainer.scheduler.last_epoch, trainer.critic_scheduler.last_epoch) == (1, 1)
    batch = phase_batch(trainer)
    critic = trainer.update_critic(batch)
    assert (trainer.scheduler.last_epoch, trainer.critic_scheduler.last_epoch) == (1, 2)
    actor = trainer.update_actor(batch)
    assert set(critic) == {"losses/value_loss", "losses/explained_variance", "objective/beta", "charts/skipped_steps"}
    assert "losses/value_loss" not in actor, "the actor's J has no value term"
    stats = {**critic, **actor}
    assert {"losses/value_loss", "losses/explained_variance", "losses/clipped_surrogate", "objective/total"} <= set(stats)
    assert stats["objective/total"] == pytest.approx(stats["losses/clipped_surrogate"] + stats["losses/entropy_bonus"]
                                                     - stats["losses/kl_penalty"], rel=1e-6)
    assert (trainer.scheduler.last_epoch, trainer.critic_scheduler.last_epoch) == (2, 2)
    assert not all(torch.equal(v, policy_before[k]) for k, v in trainer.lm.state_dict().items())


def test_critic_flags_are_checked_in_one_line():
    with pytest.raises(ConfigError, match="^critic: must be one of shared, separate; got 'both'$"):
        make_args("tiny", critic="both")
    with pytest.raises(ConfigError, match="^critic: separate is not built with --lora-rank"):
        make_args("tiny", critic="separate", lora_rank=4)
    with pytest.raises(ConfigError, match="^critic_lr: must be >= 0 \\(or unset: --base-lr\\); got -0.1$"):
        make_args("tiny", critic="separate", critic_lr=-0.1)
