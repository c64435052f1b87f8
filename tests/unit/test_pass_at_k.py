"""pass@k (reward/pass_at_k.py): Chen et al.'s unbiased estimator against hand-worked combinatorics."""

from fractions import Fraction
from math import comb

import pytest

from rlhf_scratch.reward.pass_at_k import mean_pass_at_k, pass_at_k


def test_by_hand():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4, abs=1e-15)           # c/n for k = 1
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7, abs=1e-15)           # 1 − C(3,2)/C(5,2) = 1 − 3/10
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9, abs=1e-15)           # 1 − C(3,3)/C(5,3) = 1 − 1/10
    assert pass_at_k(5, 2, 4) == 1.0                                     # n − c = 3 < 4: every 4-subset holds a right one
    assert pass_at_k(5, 0, 2) == 0.0                                     # c = 0
    assert pass_at_k(5, 5, 1) == 1.0                                     # c = n
    assert pass_at_k(5, 1, 5) == 1.0 and pass_at_k(5, 0, 5) == 0.0       # k = n: 1 iff any is right


def test_it_is_not_the_plug_in_estimate_and_n_c_are_not_interchangeable():
    assert pass_at_k(5, 2, 2) != pytest.approx(1 - (1 - 2 / 5) ** 2)  # the biased 1 − (1 − c/n)^k is 0.64
    assert pass_at_k(7, 2, 2) == pytest.approx(1 - comb(5, 2) / comb(7, 2))  # 1 − 10/21
    assert pass_at_k(7, 5, 2) == pytest.approx(1 - comb(2, 2) / comb(7, 2))  # 1 − 1/21: c and n − c differ


def test_equals_exact_combinatorics_on_a_grid():
    for n in range(1, 31):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - Fraction(comb(n - c, k), comb(n, k))
                assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12), (n, c, k)


def test_stable_where_the_binomials_overflow_a_float():
    # C(2000, 1000) ≈ 2e600: a float ratio of the two binomials would be inf / inf.
    exact = 1 - Fraction(comb(1990, 1000), comb(2000, 1000))
    assert pass_at_k(2000, 10, 1000) == pytest.approx(float(exact), rel=1e-12)


def test_the_mean_over_problems():
    # per problem: 0.7, 0, 1 (n − c = 0 < 2)
    assert mean_pass_at_k([5, 5, 4], [2, 0, 4], k=2) == pytest.approx((0.7 + 0 + 1) / 3)
    assert mean_pass_at_k(5, [2, 0], k=1) == pytest.approx((0.4 + 0) / 2), "one n for every problem"


@pytest.mark.parametrize("n, c, k, message", [
    (5, 6, 1, "pass_at_k: c (right samples) must be in 0..n=5; got 6"),
    (5, -1, 1, "pass_at_k: c (right samples) must be in 0..n=5; got -1"),
    (5, 2, 0, "pass_at_k: k must be in 1..n=5"),
    (5, 2, 6, "pass_at_k: k must be in 1..n=5"),
])
def test_bad_arguments_are_one_line(n, c, k, message):
    with pytest.raises(ValueError) as err:
        pass_at_k(n, c, k)
    assert str(err.value).startswith(message)


def test_mean_needs_one_count_of_each_per_problem():
    with pytest.raises(ValueError, match="2 sample counts and 3 correct counts"):
        mean_pass_at_k([5, 5], [1, 2, 3], k=1)
    with pytest.raises(ValueError, match="at least one problem"):
        mean_pass_at_k(5, [], k=1)
