"""The arithmetic task's problems (reward/arithmetic.py): exact rows for a seed, carries by hand,
the difficulty obeyed, and the requests that cannot be met refused in one line."""

import pytest

from rlhf_scratch.reward.arithmetic import (
    Problem,
    has_carry,
    make_problems,
    solve,
    split_problems,
    verl_row,
)


def rows(problems):
    return [(p.prompt, p.ground_truth, p.digits, p.op, p.carry) for p in problems]


def test_the_rows_of_a_seed_are_fixed():
    # Checked by hand: 60+93 carries in the tens (6+9=15), 74+37 in the units (4+7=11), 6+6=12 carries.
    assert rows(make_problems(5, seed=7, digits=(1, 2))) == [
        ("60+93=", "153", 2, "+", True),
        ("8+1=", "9", 1, "+", False),
        ("74+37=", "111", 2, "+", True),
        ("6+6=", "12", 1, "+", True),
        ("1+8=", "9", 1, "+", False),
    ]
    assert rows(make_problems(4, seed=3, digits=(2, 3), ops="+-*", carries="required")) == [
        ("79*26=", "2054", 2, "*", True),
        ("585*740=", "432900", 3, "*", True),
        ("339*296=", "100344", 3, "*", True),
        ("956*662=", "632872", 3, "*", True),
    ]
    assert [p.prompt for p in make_problems(4, seed=3, digits=2, ops="+", carries="forbidden")] == [
        "87+11=", "13+44=", "56+22=", "21+54="]


def test_the_same_arguments_give_the_same_rows_and_another_seed_others():
    assert make_problems(50, seed=11) == make_problems(50, seed=11)
    assert make_problems(50, seed=11) != make_problems(50, seed=12)
    assert make_problems(20, seed=11) == make_problems(50, seed=11)[:20], "a longer request starts with the shorter"


@pytest.mark.parametrize("a, op, b, carry", [
    (47, "+", 85, True),     # 7+5 = 12
    (12, "+", 34, False),    # 2+4, 1+3
    (91, "+", 18, True),     # units 1+8 = 9, tens 9+1 = 10: a carry out of the top column counts
    (85, "-", 47, True),     # 5 < 7: borrow
    (87, "-", 45, False),    # 7 >= 5, 8 >= 4
    (80, "-", 8, True),      # 0 < 8, the shorter operand padded with 0
    (12, "*", 13, False),    # digit convolution [2·3, 1·3 + 2·1, 1·1] = [6, 5, 1]
    (12, "*", 19, True),     # 2·9 = 18
    (13, "*", 14, True),     # [12, 7, 1]: the units column carries
    (111, "*", 111, False),  # [1, 2, 3, 2, 1] = 12321
    (24, "*", 21, True),     # [4, 2 + 8 = 10, 2]: a column sum, not one product, carries
])
def test_has_carry_by_hand(a, op, b, carry):
    assert has_carry(a, op, b) is carry


def test_has_carry_agrees_with_carrying_column_by_column():
    """Written-out addition and subtraction, carrying as a pupil does: a carry happens iff has_carry."""
    def carries_by_columns(a, op, b):
        carry, happened = 0, False
        while a or b:
            column = a % 10 + b % 10 + carry if op == "+" else a % 10 - b % 10 - carry
            carry = int(column >= 10) if op == "+" else int(column < 0)
            happened |= bool(carry)
            a, b = a // 10, b // 10
        return happened

    for a in range(0, 200, 7):
        for b in range(0, 200, 3):
            assert has_carry(a, "+", b) == carries_by_columns(a, "+", b), (a, b)
            if a >= b:
                assert has_carry(a, "-", b) == carries_by_columns(a, "-", b), (a, b)


def test_difficulty_is_obeyed():
    problems = make_problems(300, seed=5, digits=(1, 3), ops=("-", "*"), carries="forbidden")
    assert {p.digits for p in problems} == {1, 3} and {p.op for p in problems} == {"-", "*"}
    for p in problems:
        low = 0 if p.digits == 1 else 10 ** (p.digits - 1)
        assert low <= p.a < 10**p.digits and low <= p.b < 10**p.digits, p
        assert p.carry is False and has_carry(p.a, p.op, p.b) is False
        assert int(p.ground_truth) == solve(p.a, p.op, p.b) >= 0, "a subtraction is ordered a >= b"
    assert all(p.carry for p in make_problems(100, seed=5, digits=2, ops="-", carries="required"))


def test_problems_are_distinct_and_the_splits_share_none():
    problems = make_problems(100, seed=2, digits=1, ops="+")  # every one-digit sum, once
    assert len({p.prompt for p in problems}) == 100
    train, test = split_problems(make_problems(30, seed=2), 10)
    assert len(train) == 20 and len(test) == 10 and not {p.prompt for p in train} & {p.prompt for p in test}
    assert split_problems(make_problems(50, seed=2), 10)[1] == test, "the test split does not move with the train size"


def test_solve_and_the_prompt():
    p = Problem(47, "+", 85, 2, True)
    assert (p.prompt, p.ground_truth) == ("47+85=", "132")
    assert (solve(85, "-", 47), solve(12, "*", 34)) == (38, 408)


def test_the_verl_row():
    row = verl_row(Problem(85, "-", 47, 2, True), "test", 3)
    assert row == {
        "data_source": "arithmetic",
        "prompt": [{"role": "user", "content": "85-47="}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "38"},
        "extra_info": {"split": "test", "index": 3, "digits": 2, "op": "-", "carry": True},
    }


@pytest.mark.parametrize("kwargs, message", [
    (dict(n=-1, seed=1), "n: must be a whole number >= 0; got -1"),
    (dict(n=3, seed=1, digits=0), "digits: each must be a whole number 1..9; got [0]"),
    (dict(n=3, seed=1, digits=()), "digits: each must be a whole number 1..9; got []"),
    (dict(n=3, seed=1, ops="/"), "ops: each must be one of + - *; got ['/']"),
    (dict(n=3, seed=1, digits=(2, 2)), "digits: each at most once (they are drawn uniformly); got [2, 2]"),
    (dict(n=3, seed=1, carries="some"), "carries: must be one of any, required, forbidden; got 'some'"),
    (dict(n=3, seed=1, digits=1, ops="-", carries="required"), "n: found 0 of 3 distinct problems"),  # never borrows
    (dict(n=101, seed=1, digits=1, ops="+"), "n: found 100 of 101 distinct problems"),  # only 100 exist
])
def test_a_request_that_cannot_be_met_is_one_line(kwargs, message):
    with pytest.raises(ValueError) as err:
        make_problems(**kwargs)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
