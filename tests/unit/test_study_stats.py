"""Means, intervals, paired differences and verdicts over seeds (rlhf_scratch/studies/stats.py)
against numbers worked out by hand, and Student's t from scipy and from the package's own fallback
against closed forms."""

from __future__ import annotations

import math

import pytest

from rlhf_scratch.studies import stats
from rlhf_scratch.studies.stats import (
    difference,
    mean_interval,
    paired_difference,
    seeds_needed,
    t_cdf,
    t_quantile,
    verdict,
    welch_difference,
)


def test_mean_interval_of_three_seeds_by_hand():
    """[1, 2, 4]: x̄ = 7/3 = 2.333; deviations −4/3, −1/3, 5/3, squares 16/9 + 1/9 + 25/9 = 42/9,
    s² = (42/9)/2 = 7/3, s = 1.528; t_{0.975, 2} = 0.95/√(2 · 0.975 · 0.025) = 4.303 (ν = 2 has a
    closed form); s/√3 = 0.882; half-width 4.303 × 0.882 = 3.795.

    Red with the normal's 1.96 for t (half-width 1.729), s with n in the denominator (1.247: 3.098),
    or s/n for s/√n (2.191)."""
    iv = mean_interval([1, 2, 4])
    assert iv.mean == pytest.approx(2.3333, abs=1e-4) and iv.n == 3
    assert iv.sd == pytest.approx(1.5275, abs=1e-4)
    assert t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-4)
    assert iv.half_width == pytest.approx(3.7946, abs=1e-4)
    assert (iv.low, iv.high) == (pytest.approx(2.3333 - 3.7946, abs=1e-4), pytest.approx(2.3333 + 3.7946, abs=1e-4))
    assert iv.cell() == "2.333 ± 3.795" and iv.cell("{:.1f}") == "2.3 ± 3.8"


def test_one_seed_has_a_mean_and_no_interval():
    iv = mean_interval([0.9])
    assert iv.mean == 0.9 and iv.n == 1 and math.isinf(iv.half_width) and math.isnan(iv.sd)
    assert iv.cell() == "0.900", "one seed: its value, no ± to mislead"
    assert iv.as_json() == {"mean": 0.9, "low": None, "high": None, "half_width": None, "n": 1, "sd": None}
    with pytest.raises(ValueError, match="no values"):
        mean_interval([])


@pytest.mark.parametrize("path", ["installed", "fallback"])
def test_t_quantile_and_cdf_against_closed_forms(path, monkeypatch):
    """ν = 1 is Cauchy: F(x) = ½ + atan(x)/π, t_p = tan(π(p − ½)) (t_{0.975, 1} = 12.706).
    ν = 2: F(x) = ½ + x / (2√(x² + 2)), t_p = (2p − 1)/√(2p(1 − p)). Large ν tends to the normal's
    1.960. The fallback (regularized incomplete beta by continued fraction, bisection) must give
    the same as scipy."""
    if path == "fallback":
        monkeypatch.setattr(stats, "_scipy_t", lambda: None)
    elif stats._scipy_t() is None:
        pytest.skip("scipy is not installed")
    for p in (0.6, 0.9, 0.975, 0.995):
        assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9)
        assert t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-9)
        assert t_quantile(1 - p, 2) == pytest.approx(-t_quantile(p, 2), rel=1e-12), "odd about ½"
    for x in (-7.0, -0.5, 0.0, 1.3, 3.4641, 40.0):
        assert t_cdf(x, 1) == pytest.approx(0.5 + math.atan(x) / math.pi, rel=1e-9, abs=1e-12)
        assert t_cdf(x, 2) == pytest.approx(0.5 + x / (2 * math.sqrt(x * x + 2)), rel=1e-9, abs=1e-12)
    assert t_quantile(0.975, 4) == pytest.approx(2.7764, abs=1e-4)
    assert t_quantile(0.975, 10**6) == pytest.approx(1.95996, abs=1e-4)
    assert stats.t_sf(3.4641, 2) == pytest.approx(1 - t_cdf(3.4641, 2), rel=1e-9)


def test_the_fallback_agrees_with_scipy_everywhere_we_use_it():
    scipy_t = pytest.importorskip("scipy.stats").t
    for df in (1, 2, 3, 4, 7.5, 29, 200):
        for p in (0.5, 0.8, 0.975, 0.9995):
            assert stats._t_quantile(p, df) == pytest.approx(scipy_t.ppf(p, df), rel=1e-9, abs=1e-12)
        for x in (-3.0, 0.2, 2.0, 12.0, 80.0):
            assert stats._t_sf(x, df) == pytest.approx(scipy_t.sf(x, df), rel=1e-8)


def test_paired_difference_and_its_p_value_by_hand():
    """a = [3, 4, 5], b = [2, 2, 2]: d = [1, 2, 3], d̄ = 2, s_d = 1, t = 2 / (1/√3) = 3.464 at ν = 2;
    two-sided p = 2 (1 − F(3.464)) = 1 − 3.464/√(3.464² + 2) = 1 − 3.464/3.742 = 0.0742 (one-sided:
    0.0371). Interval 2 ± 4.303/√3 = 2 ± 2.484: it holds 0, so not resolved — though every seed
    favoured a."""
    d = paired_difference([3, 4, 5], [2, 2, 2])
    assert d.paired and d.mean == 2.0 and d.spread == pytest.approx(1.0) and d.df == 2
    assert d.t == pytest.approx(3.4641, abs=1e-4)
    assert d.p == pytest.approx(0.07418, abs=1e-5), "two-sided"
    assert d.half_width == pytest.approx(2.4841, abs=1e-4) and d.low == pytest.approx(-0.4841, abs=1e-4)
    assert not d.resolved and not d.separate
    assert paired_difference([3, 4, 6, 7], [2, 2, 2, 2]).resolved  # d = 1,2,4,5: 3 ± 3.182·1.826/2 = 3 ± 2.905


def test_pairing_removes_the_spread_the_seeds_share_and_pairs_by_seed_not_position():
    """Seed 3 is good for both methods, seed 1 bad for both: each seed's difference is exactly 1.
    Paired, that is resolved (p = 0); unpaired (Welch), the seed-to-seed spread of 10 swamps it.
    The dicts list the seeds in different orders: pairing by position would give 10 − 29, …"""
    a, b = {1: 10.0, 2: 20.0, 3: 30.0}, {3: 29.0, 1: 9.0, 2: 19.0}
    d = difference(a, b)
    assert d.paired and d.mean == pytest.approx(1.0) and d.half_width == pytest.approx(0.0) and d.p == 0.0
    assert d.resolved
    w = welch_difference(list(a.values()), list(b.values()))
    assert not w.paired and not w.resolved and w.mean == pytest.approx(1.0)
    assert not difference(a, {1: 9.0, 2: 19.0, 4: 29.0}).paired, "other seeds: Welch's"


def test_welch_difference_by_hand():
    """a = [1, 2, 3] (s = 1), b = [2, 4, 6] (s = 2): s_a²/3 + s_b²/3 = 1/3 + 4/3 = 5/3, se = 1.291;
    ν = (5/3)² / ((1/3)²/2 + (4/3)²/2) = (25/9) / (17/18) = 50/17 = 2.941."""
    w = welch_difference([1, 2, 3], [2, 4, 6])
    assert w.mean == -2.0 and w.df == pytest.approx(50 / 17)
    assert w.half_width == pytest.approx(t_quantile(0.975, 50 / 17) * math.sqrt(5 / 3))
    assert w.t == pytest.approx(-2 / math.sqrt(5 / 3)) and w.spread == pytest.approx(math.sqrt(5))


def test_seeds_needed_by_hand():
    """A difference of 1 with per-seed spread 2, at power ½ (the interval just excludes 0): the
    smallest n with t_{0.975, n−1} · 2/√n ≤ 1. n = 17: 2.120 · 2/4.123 = 1.028 > 1; n = 18:
    2.110 · 2/4.243 = 0.995 ≤ 1, so 18. The normal's (1.96 · 2)² = 15.4 would say 16. At power 0.8,
    t_{0.8, n−1} is added: n = 34 (the normal's ((1.96 + 0.84) · 2)² = 31.4)."""
    assert seeds_needed(1.0, 2.0, power=0.5) == 18
    assert seeds_needed(-1.0, 2.0, power=0.5) == 18, "the size of the difference, not its sign"
    n = seeds_needed(1.0, 2.0)
    assert n == 34
    left = [(t_quantile(0.975, k - 1) + t_quantile(0.8, k - 1)) * 2 / math.sqrt(k) for k in (n - 1, n)]
    assert left[0] > 1.0 >= left[1], "the fewest seeds that are enough"
    assert seeds_needed(0.0, 1.0) is None and seeds_needed(1.0, 0.0) == 2
    assert seeds_needed(1e-6, 1.0) is None, f"more than {stats.MAX_SEEDS:,} seeds"


# A: three seeds each. PPO − RLOO per seed: 0.1, 0.07, 0.08 -> 0.083 ± 0.038 (resolved, p = 0.011).
RESOLVED = {"PPO": {1: 0.90, 2: 0.92, 3: 0.91}, "RLOO": {1: 0.80, 2: 0.85, 3: 0.83}}
# PPO − RLOO per seed: 0.1, −0.03, 0.08: d̄ = 0.05, s_d = √((0.05² + 0.08² + 0.03²)/2) = 0.07,
# half-width 4.303 · 0.07/√3 = 0.174, width 0.348: not resolved.
UNRESOLVED = {"PPO": {1: 0.90, 2: 0.82, 3: 0.91}, "RLOO": {1: 0.80, 2: 0.85, 3: 0.83}}


def test_a_verdict_names_the_best_only_when_the_seeds_resolve_it():
    v = verdict(RESOLVED, "final reward", notes={"PPO": " at KL 0.30", "RLOO": " at KL 0.03"})
    assert v.resolved and v.best == "PPO" and v.against == "RLOO"
    assert v.sentence == ("PPO reaches the highest final reward, 0.910 ± 0.025 at KL 0.30: above RLOO "
                          "(0.827 ± 0.063 at KL 0.03) by +0.083 (95 % interval +0.045 to +0.121, paired over "
                          "n = 3 seeds, p = 0.011).")
    v = verdict(UNRESOLVED, "final reward")
    assert not v.resolved and v.best == "PPO"
    assert v.sentence.startswith("Which has the highest final reward is not resolved at n = 3 seeds "
                                 "(interval width 0.348): PPO 0.877 ± 0.123 against RLOO 0.827 ± 0.063")
    assert f"about {seeds_needed(0.05, 0.07)} seeds would resolve a difference of this size" in v.sentence
    assert "reaches" not in v.sentence


def test_the_leader_must_beat_every_other_not_only_the_runner_up():
    """A beats B on every seed by exactly 0.1 (resolved), but C, further behind on average, is all
    over the place: A − C = 1, −0.9, 0.55 is not resolved, so A is not called best."""
    groups = {"A": {1: 1.0, 2: 1.1, 3: 1.05}, "B": {1: 0.9, 2: 1.0, 3: 0.95}, "C": {1: 0.0, 2: 2.0, 3: 0.5}}
    v = verdict(groups, "reward")
    assert not v.resolved and v.best == "A" and v.against == "C"
    v = verdict({k: groups[k] for k in "AB"}, "reward")
    assert v.resolved and v.best == "A"


def test_a_verdict_over_one_seed_or_one_method_says_what_it_cannot_say():
    v = verdict({"PPO": {1: 0.95}, "RLOO": {1: 0.10}}, "final reward")
    assert not v.resolved, "a huge gap over one seed is still one seed"
    assert "not resolved at n = 1 seed (one seed has no spread, so no interval)" in v.sentence
    assert "--seeds 1,2,3" in v.sentence
    v = verdict({"PPO": {1: 0.9, 2: 0.8}}, "final reward")
    assert not v.resolved and v.sentence.startswith("Only PPO was run") and "n = 2 seeds" in v.sentence
    assert not verdict({"PPO": {}}, "final reward").resolved


def test_lower_is_better_and_unpaired_seeds_resolve_by_separate_intervals():
    """Different seeds on the two sides: Welch. A = 1.05 ± 0.124, B = 0.15 ± 0.635: the intervals
    (0.93–1.17 and −0.49–0.78) do not overlap."""
    a, b = {1: 1.0, 2: 1.1, 3: 1.05}, {4: 0.1, 5: 0.2}
    v = verdict({"A": a, "B": b}, "loss", higher_is_better=False)
    assert v.resolved and v.best == "B" and "reaches the lowest loss" in v.sentence and "below A" in v.sentence
    assert "Welch, n = 2 and 3 seeds" in v.sentence
    assert difference(a, b).separate
