"""Early stopping and the adaptive KL controller."""

import math

import pytest

from rlhf_scratch.core.kl_control import AdaptiveKLController, EarlyStopping


def run(stopper, kls, rewards=None):
    """Feed phases until one stops; return the 0-based phase that stopped, or None."""
    rewards = rewards or [0.0] * len(kls)
    for phase, (kl, reward) in enumerate(zip(kls, rewards)):
        if stopper.update(kl, reward):
            return phase
    return None


def test_stops_after_patience_consecutive_high_kl_phases():
    stopper = EarlyStopping(patience=3, kl_threshold=1.0)
    assert run(stopper, [2.0, 2.0, 2.0, 0.5]) == 2, "three bad phases in a row with patience 3 must stop at the third"
    assert "KL" in stopper.reason and "3 consecutive" in stopper.reason


def test_a_good_phase_resets_the_count():
    stopper = EarlyStopping(patience=3, kl_threshold=1.0)
    assert run(stopper, [2.0, 2.0, 0.5, 2.0, 2.0, 1.0, 2.0, 2.0]) is None, "bad phases must be CONSECUTIVE"
    assert stopper.reason is None
    assert stopper.update(2.0, 0.0) is True  # the third in a row after the reset


def test_kl_at_threshold_is_not_bad_but_nan_is():
    assert run(EarlyStopping(patience=1, kl_threshold=1.0), [1.0] * 5) is None
    assert run(EarlyStopping(patience=2, kl_threshold=1.0), [math.nan, math.nan]) == 1


def test_reward_window_rule():
    stopper = EarlyStopping(patience=100, kl_threshold=1.0, reward_threshold=0.8, window_size=3)
    # phase 1 has reward 0.9 but only 2 phases seen; the window [0.7, 0.8, 0.9] averages 0.8 at phase 2
    assert run(stopper, [0.0] * 5, [0.7, 0.9, 0.8, 1.0, 1.0]) == 2
    assert "reward" in stopper.reason

    stopper = EarlyStopping(patience=100, kl_threshold=1.0, reward_threshold=0.8, window_size=3)
    # the window slides: [0.0, 1.0, 1.0] = 0.667, then [1.0, 1.0, 0.5] = 0.833
    assert run(stopper, [0.0] * 5, [0.0, 1.0, 1.0, 0.5, 0.0]) == 3


def test_never_stops_on_reward_without_a_threshold():
    stopper = EarlyStopping(patience=5, kl_threshold=1.0)
    assert run(stopper, [0.1] * 50, [1e9] * 50) is None


def test_adaptive_kl_by_hand():
    ctl = AdaptiveKLController(init_kl_coef=1.0, target=6.0, horizon=100)
    # KL 6.6 is 10% over target: beta *= 1 + 0.1 * 10 / 100
    assert ctl.update(6.6, n_steps=10) == pytest.approx(1.0 * (1 + 0.1 * 10 / 100))
    # KL 5.4 is 10% under: beta *= 1 - 0.1 * 10 / 100
    assert ctl.update(5.4, n_steps=10) == pytest.approx(1.01 * (1 - 0.1 * 10 / 100))
    assert ctl.value == pytest.approx(1.01 * 0.99)


def test_adaptive_kl_error_is_clipped():
    ctl = AdaptiveKLController(init_kl_coef=2.0, target=1.0, horizon=10)
    assert ctl.update(100.0, n_steps=5) == pytest.approx(2.0 * (1 + 0.2 * 5 / 10)), "error clipped at +0.2"
    ctl = AdaptiveKLController(init_kl_coef=2.0, target=1.0, horizon=10)
    assert ctl.update(0.0, n_steps=5) == pytest.approx(2.0 * (1 - 0.2 * 5 / 10)), "error clipped at -0.2"
    assert ctl.update(math.nan, n_steps=5) == pytest.approx(1.8), "a NaN KL leaves beta unchanged"
