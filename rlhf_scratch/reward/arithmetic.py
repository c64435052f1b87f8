"""Arithmetic problems with an exact answer: the verifiable task's data (issue 56).

    make_problems(4, seed=1)                               -> 4 distinct problems such as 47+85= / 132
    make_problems(100, seed=1, digits=(1, 2), ops=("+", "-"), carries="forbidden")
    verl_row(problem, "train", 0)                          -> the row as verl's data files hold it

A problem is `a OP b=` with its answer as a string (`Problem.prompt`, `Problem.ground_truth`), no
spaces, no instruction: the text a small model pretrained on such lines continues. Its difficulty is
three fields, recorded on each row so accuracy can be read by difficulty:

- `digits`: both operands have exactly this many digits (uniform over 10^(d−1) … 10^d − 1; one
  digit is 0 … 9);
- `op`: + (sum), - (difference, operands ordered so that a ≥ b: the answer is never negative),
  * (product);
- `carry`: whether written-out column arithmetic needs a carry (a borrow, for −) anywhere
  (`has_carry`). `carries="required"` keeps only problems that need one, `"forbidden"` only those
  that need none, `"any"` both.

Reproducible: everything is drawn from `random.Random(seed)` in one fixed order per draw (digits,
op, a, b), and a draw is rejected (carry rule, or a prompt already drawn) without changing that
order, so the same arguments give the same rows on every machine and Python version the package
supports. The problems of one call are distinct, so the first `n_test` of them are a held-out set
the rest never repeats (`split_problems`; `rlhf data arithmetic` writes both splits).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

OPS = ("+", "-", "*")
CARRIES = ("any", "required", "forbidden")
DIGITS = (2,)
"""The default difficulty: two-digit operands (12,195 distinct sums and differences: a 500-problem test
split and a 5,000-problem train split are drawn alike). Not one digit beside them: only 155 one-digit
problems exist, so a 500-problem test split would hold most of them and the train split almost none, and
the two splits would differ in difficulty. Three digits (--digits 2 3) is a harder task than the shipped
model was trained to (a 2-layer model learns it an order of magnitude slower on a CPU)."""
DEFAULT_OPS = ("+", "-")
MAX_DIGITS = 9
MAX_REJECTED = 10_000
"""Draws rejected in a row (carry rule or a repeat) before the request is called impossible."""
DATA_SOURCE = "arithmetic"
"""verl's `data_source` (which rule scores a row) of these problems."""
ABILITY = "math"
"""verl's `ability` column, as its gsm8k example writes it."""


@dataclass(frozen=True)
class Problem:
    """One problem: `prompt` (`47+85=`), `ground_truth` (`132`) and its difficulty."""

    a: int
    op: str
    b: int
    digits: int
    carry: bool

    @property
    def prompt(self) -> str:
        return f"{self.a}{self.op}{self.b}="

    @property
    def ground_truth(self) -> str:
        return str(solve(self.a, self.op, self.b))


def solve(a: int, op: str, b: int) -> int:
    """a + b, a − b or a · b."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    raise ValueError(f"op: must be one of {' '.join(OPS)}; got {op!r}")


def column_digits(x: int) -> list[int]:
    """The digits of x ≥ 0, least significant first: 470 -> [0, 7, 4]."""
    return [int(d) for d in reversed(str(x))]


def has_carry(a: int, op: str, b: int) -> bool:
    """Whether column arithmetic on a OP b (a, b ≥ 0) carries or borrows anywhere. With aₖ, bₖ the
    k-th digits from the right (0 past the end):

        +   some column has aₖ + bₖ ≥ 10                   (47+85: 7+5 = 12, carries)
        -   some column has aₖ < bₖ  (a ≥ b)                (85-47: 5 < 7, borrows)
        *   some column of the digit convolution has Σ_{i+j=k} aᵢ·bⱼ ≥ 10
                                                            (12*13: [6, 5, 1], none; 12*19: 18, carries)

    The first carry of a problem can only start in such a column (before it nothing carries in),
    so "some column" is exactly "a carry happens"."""
    x, y = column_digits(a), column_digits(b)
    width = max(len(x), len(y))
    x, y = x + [0] * (width - len(x)), y + [0] * (width - len(y))
    if op == "+":
        return any(p + q >= 10 for p, q in zip(x, y))
    if op == "-":
        if a < b:
            raise ValueError(f"has_carry: a subtraction's operands are ordered a >= b; got {a}-{b}")
        return any(p < q for p, q in zip(x, y))
    if op == "*":
        columns = [0] * (2 * width)
        for i, p in enumerate(x):
            for j, q in enumerate(y):
                columns[i + j] += p * q
        return any(c >= 10 for c in columns)
    raise ValueError(f"op: must be one of {' '.join(OPS)}; got {op!r}")


def check_difficulty(digits: Sequence[int], ops: Sequence[str], carries: str) -> None:
    """One ValueError line naming the first bad difficulty field."""
    if not digits or any(isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= MAX_DIGITS for d in digits):
        raise ValueError(f"digits: each must be a whole number 1..{MAX_DIGITS}; got {list(digits)}")
    if not ops or any(op not in OPS for op in ops):
        raise ValueError(f"ops: each must be one of {' '.join(OPS)}; got {list(ops)}")
    for name, values in (("digits", list(digits)), ("ops", list(ops))):
        if len(set(values)) < len(values):  # a repeat would weight the draw: say so, rather than do it silently
            raise ValueError(f"{name}: each at most once (they are drawn uniformly); got {values}")
    if carries not in CARRIES:
        raise ValueError(f"carries: must be one of {', '.join(CARRIES)}; got {carries!r}")


def operand(rng: random.Random, digits: int) -> int:
    """A number of exactly `digits` digits, uniform (one digit: 0..9)."""
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return rng.randint(low, 10**digits - 1)


def draw_problem(rng: random.Random, digits: Sequence[int], ops: Sequence[str]) -> Problem:
    """One problem: its digits, its op, then a and b, in that order (a − b swapped to a ≥ b)."""
    d = rng.choice(list(digits))
    op = rng.choice(list(ops))
    a, b = operand(rng, d), operand(rng, d)
    if op == "-" and a < b:
        a, b = b, a
    return Problem(a, op, b, d, has_carry(a, op, b))


def make_problems(n: int, seed: int, digits: int | Sequence[int] = DIGITS, ops: str | Sequence[str] = DEFAULT_OPS,
                  carries: str = "any") -> list[Problem]:
    """`n` distinct problems drawn from `random.Random(seed)` (see the module docstring): each
    draw's digit count from `digits` and operation from `ops` (uniform), kept when its carry obeys
    `carries` and its prompt is new. A request that cannot be met (1-digit subtraction with a
    required borrow; more problems than exist) is one ValueError line."""
    digits = (digits,) if isinstance(digits, int) else tuple(digits)
    ops = tuple(ops)  # "+-" is ("+", "-")
    check_difficulty(digits, ops, carries)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n: must be a whole number >= 0; got {n!r}")
    rng = random.Random(seed)
    problems: list[Problem] = []
    seen: set[str] = set()
    rejected = 0
    while len(problems) < n:
        problem = draw_problem(rng, digits, ops)
        wanted = carries == "any" or problem.carry == (carries == "required")
        if not wanted or problem.prompt in seen:
            rejected += 1
            if rejected >= MAX_REJECTED:
                raise ValueError(f"n: found {len(problems)} of {n} distinct problems with digits {list(digits)}, "
                                 f"ops {' '.join(ops)}, carries {carries}, then {MAX_REJECTED} draws in a row that "
                                 f"were repeats or had the wrong carry: ask for fewer, or widen the difficulty")
            continue
        rejected = 0
        seen.add(problem.prompt)
        problems.append(problem)
    return problems


def split_problems(problems: list[Problem], n_test: int) -> tuple[list[Problem], list[Problem]]:
    """(train, test): the first `n_test` problems are the test split, the rest the train split
    (distinct problems, so no test prompt is trained on; the test split does not change with the
    train split's size)."""
    return problems[n_test:], problems[:n_test]


def verl_row(problem: Problem, split: str, index: int) -> dict:
    """The row as verl's examples/data_preprocess/gsm8k.py writes one: the prompt as chat messages,
    the rule reward's ground truth (a string, as gsm8k's), and the difficulty in `extra_info`."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": problem.prompt}],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": problem.ground_truth},
        "extra_info": {"split": split, "index": index, "digits": problem.digits, "op": problem.op,
                       "carry": problem.carry},
    }


TRAIN_SIZE, TEST_SIZE, DATA_SEED = 5000, 500, 1
"""The task's own problems (`rlhf data arithmetic`'s defaults, `--prompts arithmetic`): 5,000 train and 500
test problems of `make_problems(5500, seed=1)` at the default difficulty. Fixed, whatever the run's --seed
(which shuffles them): every seed of a study is held out on the same 500 problems."""


def splits_rows(train_size: int = TRAIN_SIZE, test_size: int = TEST_SIZE, seed: int = DATA_SEED,
                digits: int | Sequence[int] = DIGITS, ops: str | Sequence[str] = DEFAULT_OPS,
                carries: str = "any") -> dict[str, list[dict]]:
    """{"train": rows, "test": rows}: `make_problems(train_size + test_size, seed, ...)` split
    (`split_problems`) and written as verl rows (`verl_row`): what `rlhf data arithmetic` writes."""
    train, test = split_problems(make_problems(train_size + test_size, seed, digits=digits, ops=ops, carries=carries),
                                 test_size)
    return {split: [verl_row(p, split, i) for i, p in enumerate(part)] for split, part in (("train", train), ("test", test))}


def task_rows(split: str) -> list[dict]:
    """The `arithmetic` task's own problems of `split` (its registry entry's `data`): `splits_rows()`'s, so
    `--prompts arithmetic` is row for row `--prompts DIR/train.parquet` of `rlhf data arithmetic --out DIR`."""
    return splits_rows()[split]


CALCULATOR_OPS = ("+", "-", "*")
"""The calculator environment's problems (`--env calculator`): 2-digit products, which a model this small cannot do
in its head, beside the sums and differences it can partly do, so that when to call the calculator is a choice."""


def calculator_rows(split: str) -> list[dict]:
    """The calculator environment's own problems of `split` (its registry entry's `data`): `splits_rows(ops="+-*")`'s,
    so `--prompts calculator` is row for row `rlhf data arithmetic --ops '+-*'`'s train.parquet; its test split is the
    one `rlhf pretrain-arithmetic --ops '+-*'` holds out (the calculator sibling never trained on it)."""
    return splits_rows(ops=CALCULATOR_OPS)[split]


__all__ = ["ABILITY", "CALCULATOR_OPS", "calculator_rows", "CARRIES", "DATA_SOURCE", "OPS", "Problem", "check_difficulty", "has_carry", "make_problems",
           "solve", "split_problems", "splits_rows", "task_rows", "verl_row"]
