"""Solutions of notebook 10 (RL with verifiable rewards), written to be read: plain Python.

- `parse_answer`: the integer a completion answers, as text, or None (the format check): its first
  line, stripped, must be an integer written one way only, 0 | -?[1-9][0-9]* (the package's:
  `reward.verifiable.parse_answer`).
- `accuracy_reward`, `format_reward`: TRL's reward-function contract, one float per completion (the
  package's: `reward.verifiable.accuracy_reward`, `format_reward`).
- `pass_at_k`: the unbiased estimator of Chen et al. 2021, 1 − C(n − c, k)/C(n, k) (the package's:
  `reward.pass_at_k.pass_at_k`, which computes the ratio as a product).

tests/integration/test_course_verifiable.py checks that each equals the package's. Each solution cell of
notebook 10 is a function's source here (notebooks/make_10_verifiable_rewards.py), so a function body
imports what it needs itself.
"""

from __future__ import annotations


def parse_answer(completion):
    """The integer `completion` answers, as text ("132"), or None when it gives no answer: its FIRST line
    (the text before the first "\\n"), stripped of surrounding whitespace, must be 0 or -?[1-9][0-9]*
    (no leading zero, no "+", no "-0", no decimal point, nothing else on the line)."""
    import re

    line = completion.split("\n", 1)[0].strip()
    return line if re.fullmatch(r"0|-?[1-9][0-9]*", line) else None


def accuracy_reward(completions, ground_truth, **kwargs):
    """1.0 for each completion whose answer (`parse_answer`) is its OWN row's ground truth, 0.0 otherwise
    (wrong, missing or malformed). TRL calls it by keyword with prompts=, completion_ids= and the other
    columns too: **kwargs takes them. A ground truth may come as text ("132") or as a number (132)."""
    return [1.0 if parse_answer(c) == str(t) else 0.0 for c, t in zip(completions, ground_truth)]


def format_reward(completions, **kwargs):
    """1.0 for each completion that gives an answer at all (`parse_answer` is not None), right or wrong."""
    return [0.0 if parse_answer(c) is None else 1.0 for c in completions]


def pass_at_k(n, c, k):
    """pass@k = 1 − C(n − c, k) / C(n, k): with c right among n samples of a problem, the chance that k of
    them drawn WITHOUT replacement hold at least one right one (0 ≤ c ≤ n, 1 ≤ k ≤ n)."""
    from math import comb

    return 1.0 - comb(n - c, k) / comb(n, k)  # comb(n − c, k) = 0 when n − c < k: every k-subset holds a right one
