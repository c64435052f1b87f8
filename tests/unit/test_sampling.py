"""The draw written out (`draw_categorical`, the exponential race) is `torch.multinomial`'s draw for
draw: the same tokens and the same generator state after, for every restriction of the sampler.
A draw that took argmin, forgot to divide by the race, drew Exp(1) in another shape or order, or
drew a second time would sample other tokens or leave the generator elsewhere."""

import pytest
import torch

from rlhf_scratch.rollout.sampling import draw_categorical, multinomial_draw, sample_next_token


def test_the_exponential_race_draws_torch_multinomials_tokens_under_one_seed():
    probs = torch.tensor([[0.7, 0.0, 0.2, 0.1], [0.05, 0.05, 0.0, 0.9], [0.25, 0.25, 0.25, 0.25]])
    for seed in range(20):
        ours, theirs = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        drawn = draw_categorical(probs, ours)
        assert torch.equal(drawn, torch.multinomial(probs, 1, generator=theirs).squeeze(-1)), f"seed {seed}"
        assert torch.equal(ours.get_state(), theirs.get_state()), "the race must use the random numbers multinomial uses"
        assert (probs[torch.arange(3), drawn] > 0).all(), "a token of probability 0 was drawn"


def test_the_exponential_race_has_the_categorical_frequencies():
    """P(token = i) = p_i: 40,000 draws of an asymmetric distribution within 4 standard errors."""
    probs = torch.tensor([0.6, 0.3, 0.1, 0.0]).expand(40_000, 4)
    counts = torch.bincount(draw_categorical(probs, torch.Generator().manual_seed(1)), minlength=4).double() / 40_000
    p = probs[0].double()
    assert ((counts - p).abs() <= 4 * (p * (1 - p) / 40_000).sqrt() + 1e-12).all(), counts.tolist()


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.9, 7, 0.6)])
def test_sample_next_token_draws_the_same_tokens_with_either_draw(temperature, top_k, top_p):
    logits = torch.randn(16, 50, generator=torch.Generator().manual_seed(3)) * 3
    out = []
    for draw in (multinomial_draw, draw_categorical):
        torch.manual_seed(11)
        out.append([sample_next_token(logits, temperature, top_k, top_p, draw=draw) for _ in range(4)])
    for step, (a, b) in enumerate(zip(*out)):
        assert torch.equal(a, b), f"draw {step}: {a.tolist()} vs {b.tolist()}"
    assert len({tuple(t.tolist()) for t in out[0]}) > 1, "the four draws should differ (the seed moved on)"
