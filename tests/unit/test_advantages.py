"""Advantage estimates: the blog's one-step estimate by hand, GAE against a plain Python loop."""

import pytest
import torch

from rlhf_scratch.core.advantages import _check_mask, compute_advantages, compute_gae_advantages

# batch 2, seq_len 4, prefix_len 2 -> gen_len 2. The generated tokens 2 and 3 are chosen in
# states s_1 and s_2; values[:, 0] (prefix state) and values[:, 3] (after the last token) are unused.
VALUES = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, -1.0, 5.0, 2.0]])
REWARDS = torch.tensor([10.0, -3.0])
PREFIX_LEN = 2


def test_one_step_advantages_by_hand():
    # row 0: A_1 = V(s_2) - V(s_1) = 3 - 2 = 1;  A_2 = reward - V(s_2) = 10 - 3 = 7
    # row 1: A_1 = 5 - (-1) = 6;                 A_2 = -3 - 5 = -8
    expected = torch.tensor([[1.0, 7.0], [6.0, -8.0]])
    out = compute_advantages(VALUES, REWARDS, PREFIX_LEN)
    assert out.shape == (2, 2), "one advantage per generated token: gen_len = seq_len - prefix_len"
    assert torch.equal(out, expected), (
        f"got {out.tolist()}, expected {expected.tolist()}: A_t = V(s_t+1) - V(s_t), with the reward "
        "in place of V after the last generated token"
    )


def test_one_step_ignores_prefix_state_and_final_value():
    values = VALUES.clone()
    values[:, 0] = 100.0  # V(s_0): no generated token is chosen in s_0 (prefix_len = 2)
    values[:, -1] = -100.0  # the value after the last token: the reward replaces it
    assert torch.equal(compute_advantages(values, REWARDS, PREFIX_LEN), compute_advantages(VALUES, REWARDS, PREFIX_LEN))


def gae_reference(values: list[float], reward: float, prefix_len: int, gamma: float, lam: float) -> list[float]:
    """GAE for one sample, written as the textbook double sum."""
    v = values[prefix_len - 1 : -1]
    n = len(v)
    next_v = v[1:] + [0.0]
    r = [0.0] * (n - 1) + [reward]
    deltas = [r[t] + gamma * next_v[t] - v[t] for t in range(n)]
    return [sum((gamma * lam) ** k * deltas[t + k] for k in range(n - t)) for t in range(n)]


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.5), (0.99, 1.0)])
def test_gae_matches_python_loop(gamma, lam):
    gen = torch.Generator().manual_seed(1)
    values = torch.randn(3, 9, generator=gen, dtype=torch.float64)
    rewards = torch.randn(3, generator=gen, dtype=torch.float64)
    prefix_len = 3
    out = compute_gae_advantages(values, rewards, prefix_len, gamma, lam)
    for b in range(3):
        expected = gae_reference(values[b].tolist(), rewards[b].item(), prefix_len, gamma, lam)
        assert out[b].tolist() == pytest.approx(expected), f"sample {b} differs from the textbook GAE"


def test_gae_lambda0_gamma1_is_one_step():
    out = compute_gae_advantages(VALUES, REWARDS, PREFIX_LEN, gamma=1.0, gae_lambda=0.0)
    assert torch.allclose(out, compute_advantages(VALUES, REWARDS, PREFIX_LEN)), (
        "with gamma=1, lambda=0 GAE is the one-step estimate delta_t = V(s_t+1) - V(s_t) (reward at the end)"
    )


def test_gae_lambda1_gamma1_is_monte_carlo():
    # the deltas telescope: A_t = reward - V(s_t); row 0: [10 - 2, 10 - 3], row 1: [-3 + 1, -3 - 5]
    out = compute_gae_advantages(VALUES, REWARDS, PREFIX_LEN, gamma=1.0, gae_lambda=1.0)
    assert torch.allclose(out, torch.tensor([[8.0, 7.0], [-2.0, -8.0]]))


def test_bad_prefix_len():
    with pytest.raises(ValueError, match="prefix_len"):
        compute_advantages(VALUES, REWARDS, prefix_len=0)


# --- masks: the episode ends at each sample's last kept token ----------------------------------
def test_one_step_advantages_with_a_mask_by_hand():
    # seq_len 5, prefix_len 2: V(s_1..s_3) are the states of the 3 generated actions
    values = torch.tensor([[0.0, 1.0, 2.0, 4.0, 9.0], [0.0, 1.0, 3.0, 9.0, 9.0]])
    rewards = torch.tensor([10.0, 20.0])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    adv = compute_advantages(values, rewards, 2, mask=mask)
    # row 0 (all kept): [V2−V1, V3−V2, r−V3] = [1, 2, 6]
    # row 1 (ends at t=1): [V2−V1, r−V2, 0] = [2, 17, 0]  — the reward lands at the last kept token
    assert adv.tolist() == [[1.0, 2.0, 6.0], [2.0, 17.0, 0.0]]
    assert torch.equal(compute_advantages(values, rewards, 2, mask=torch.ones(2, 3, dtype=torch.bool)),
                       compute_advantages(values, rewards, 2))


def test_gae_with_a_mask_by_hand():
    values = torch.tensor([[0.0, 1.0, 3.0, 9.0, 9.0]])
    rewards = torch.tensor([5.0])
    mask = torch.tensor([[True, True, False]])
    # kept steps t=0,1: δ0 = 0 + γV(s_2) − V(s_1) = 3 − 1 = 2; δ1 = r + 0 − V(s_2) = 5 − 3 = 2
    # A1 = δ1 = 2; A0 = δ0 + γλ A1 = 2 + 0.5·2 = 3; masked t=2 → 0 (nothing flows back from it)
    adv = compute_gae_advantages(values, rewards, 2, gamma=1.0, gae_lambda=0.5, mask=mask)
    assert adv.tolist() == [[3.0, 2.0, 0.0]]


def test_one_step_equals_gae_lambda_zero_under_a_mask():
    torch.manual_seed(0)
    values, rewards = torch.randn(4, 7), torch.randn(4)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)
    torch.testing.assert_close(compute_advantages(values, rewards, 2, mask=mask),
                               compute_gae_advantages(values, rewards, 2, 1.0, 0.0, mask=mask))


def test_mask_errors():
    values, rewards = torch.zeros(1, 5), torch.zeros(1)
    # a mask with a hole is a multi-turn episode's (the environment's tokens): allowed, tests/unit/test_episode_masks.py
    with pytest.raises((ValueError, TypeError)):
        compute_gae_advantages(values, rewards, 2, 1.0, 0.9, mask=torch.ones(1, 4, dtype=torch.bool))


# seq_len 5, prefix_len 2 → gen_len 3; the generated actions are taken in s_1, s_2, s_3.
# Row 1 ends at EOS at t = 1: its reward arrives there and t = 2 (state s_3) is padding.
M_VALUES = torch.tensor([[0.0, 1.0, 2.0, 4.0, 9.0], [0.0, 1.0, 4.0, 9.0, 9.0]])
M_REWARDS = torch.tensor([10.0, 20.0])
M_MASK = torch.tensor([[True, True, True], [True, True, False]])


def test_gae_with_a_mask_two_samples_by_hand():
    # gamma = lambda = 0.5, so gamma·lambda = 0.25
    # row 0 (all kept): δ0 = 0.5·V2 − V1 = 1 − 1 = 0; δ1 = 0.5·V3 − V2 = 2 − 2 = 0; δ2 = r − V3 = 10 − 4 = 6
    #                   A2 = 6, A1 = 0 + 0.25·6 = 1.5, A0 = 0 + 0.25·1.5 = 0.375
    # row 1 (ends t=1): δ0 = 0.5·V2 − V1 = 2 − 1 = 1; δ1 = r + 0.5·0 − V2 = 20 − 4 = 16  (no state after EOS)
    #                   A1 = 16, A0 = 1 + 0.25·16 = 5, A2 = 0 (padding)
    out = compute_gae_advantages(M_VALUES, M_REWARDS, 2, gamma=0.5, gae_lambda=0.5, mask=M_MASK)
    expected = torch.tensor([[0.375, 1.5, 6.0], [5.0, 16.0, 0.0]])
    assert torch.equal(out, expected), (
        f"got {out.tolist()}, expected {expected.tolist()}: the reward arrives at the last KEPT token, "
        "V after it is 0, and padding gets 0"
    )
    unmasked = compute_gae_advantages(M_VALUES, M_REWARDS, 2, gamma=0.5, gae_lambda=0.5)
    assert not torch.equal(unmasked[1], expected[1]), "the test data must tell a masked row from an unmasked one"


def test_values_after_the_last_kept_token_do_not_matter():
    # V(s_3) of row 1 is the state after its EOS; values[:, 4] is after the last token of all rows
    garbage = M_VALUES.clone()
    garbage[1, 3:] = 1e6
    for estimate in (lambda v: compute_advantages(v, M_REWARDS, 2, mask=M_MASK),
                     lambda v: compute_gae_advantages(v, M_REWARDS, 2, 0.9, 0.8, mask=M_MASK)):
        assert torch.equal(estimate(garbage), estimate(M_VALUES)), "a value after EOS leaked into the advantages"


def test_a_sample_that_keeps_nothing_gets_zeros():
    mask = torch.tensor([[True, True, True], [False, False, False]])
    assert compute_advantages(M_VALUES, M_REWARDS, 2, mask=mask)[1].tolist() == [0.0, 0.0, 0.0]
    assert compute_gae_advantages(M_VALUES, M_REWARDS, 2, 1.0, 0.9, mask=mask)[1].tolist() == [0.0, 0.0, 0.0]


def test_all_true_mask_is_exactly_no_mask_for_advantages():
    gen = torch.Generator().manual_seed(2)
    values, rewards = torch.randn(4, 9, generator=gen), torch.randn(4, generator=gen)
    ones = torch.ones(4, 6, dtype=torch.bool)
    assert torch.equal(compute_advantages(values, rewards, 3, mask=ones), compute_advantages(values, rewards, 3))
    assert torch.equal(compute_gae_advantages(values, rewards, 3, 0.95, 0.9, mask=ones),
                       compute_gae_advantages(values, rewards, 3, 0.95, 0.9))


def test_gae_under_a_mask_matches_the_python_loop_on_each_kept_prefix():
    # a sample that stops after n tokens is the unmasked episode of its first n tokens, then zeros
    gen = torch.Generator().manual_seed(3)
    values, rewards = torch.randn(3, 8, generator=gen, dtype=torch.float64), torch.randn(3, generator=gen, dtype=torch.float64)
    kept = [6, 2, 4]  # gen_len 6 with prefix_len 2
    mask = torch.arange(6)[None, :] < torch.tensor(kept)[:, None]
    out = compute_gae_advantages(values, rewards, 2, 0.9, 0.7, mask=mask)
    for b, n in enumerate(kept):
        episode = values[b, : 2 + n].tolist()  # prefix + n tokens; its last value is never used
        expected = gae_reference(episode, rewards[b].item(), 2, 0.9, 0.7) + [0.0] * (6 - n)
        assert out[b].tolist() == pytest.approx(expected), f"sample {b} (keeps {n}) differs from its truncated episode"


def test_mask_value_errors():
    values, rewards = torch.zeros(1, 5), torch.zeros(1)  # gen_len 3
    for estimate in (lambda m: compute_advantages(values, rewards, 2, mask=m),
                     lambda m: compute_gae_advantages(values, rewards, 2, 1.0, 0.9, mask=m)):
        with pytest.raises(ValueError, match=r"mask has shape \(1, 4\), expected"):
            estimate(torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):  # called directly: under pytest jaxtyping rejects it first
        _check_mask(torch.ones(1, 3, dtype=torch.long), (1, 3))
