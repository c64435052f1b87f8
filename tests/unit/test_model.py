"""The value head and sampling."""

import torch

from rlhf_scratch.algorithms.ppo import TransformerWithValueHead


def test_values_are_the_head_applied_to_the_cached_final_residual(tiny_random_lm):
    policy = TransformerWithValueHead(tiny_random_lm)
    ids = torch.randint(0, 50, (3, 7))
    logits, values = policy(ids)
    ref_logits, cache = tiny_random_lm.run_with_cache(ids)
    expected = policy.value_head(cache["ln_final.hook_normalized"]).squeeze(-1)
    assert logits.shape == (3, 7, 50) and values.shape == (3, 7)
    torch.testing.assert_close(values, expected)
    torch.testing.assert_close(logits, ref_logits, msg="the value head hook must not change the logits")


def test_value_head_architecture(tiny_random_lm):
    head = TransformerWithValueHead(tiny_random_lm).value_head
    assert [type(m).__name__ for m in head] == ["Linear", "ReLU", "Linear"]
    assert (head[0].in_features, head[0].out_features, head[2].out_features) == (16, 64, 1)


def test_detach_flag_controls_whether_value_loss_reaches_the_trunk(tiny_random_lm):
    ids = torch.randint(0, 50, (2, 5))
    for detach, reaches_trunk in [(True, False), (False, True)]:
        policy = TransformerWithValueHead(tiny_random_lm, detach_value_head=detach)
        policy.zero_grad()
        _, values = policy(ids)
        values.pow(2).mean().backward()
        trunk_grad = tiny_random_lm.blocks[0].attn.W_Q.grad
        has_grad = trunk_grad is not None and trunk_grad.abs().sum() > 0
        assert has_grad == reaches_trunk, f"detach_value_head={detach}: trunk grad present = {has_grad}"
        assert policy.value_head[0].weight.grad.abs().sum() > 0
        tiny_random_lm.zero_grad(set_to_none=True)
