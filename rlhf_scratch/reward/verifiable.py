"""Rule rewards: an answer checked against its ground truth, written as TRL writes reward functions.

    accuracy_reward(completions=["132", "131"], ground_truth=["132", "132"])   -> [1.0, 0.0]
    format_reward(completions=["132", "a lot"])                                 -> [1.0, 0.0]

TRL's contract (`trl/rewards/*.py`, and the package's `rollout.reward_call`): keyword arguments
`prompts`, `completions`, `completion_ids` and a dataset's own columns by name (keyword-only here:
TRL and `score_completions` call by keyword), `**kwargs` for the rest, one float per completion back. The names keep TRL's meaning: `accuracy_reward` is 1.0 for a
right answer and 0.0 otherwise, and a trainer logs each function's mean under its `__name__`
(`rewards/accuracy_reward/mean`). Two differences from TRL 1.16's `accuracy_reward`, both because
the answer here is an integer, not LaTeX: the ground truth's column is `ground_truth` (verl's name,
`reward_model.ground_truth`; TRL's math reward calls it `solution`), and it is compared as an
integer's text, not with math_verify. A ground truth that is not an integer is an error (TRL skips
it with None, which the package's contract refuses: never trained on).

How the answer is read from a completion (`parse_answer`), exactly:

    the completion's first line        the text before the first "\\n" (the rollout already cut the
                                       completion at EOS, which is not in its text)
    stripped of surrounding whitespace " 132 " reads 132
    must be a whole integer, written   -?[1-9][0-9]* or 0: "132" and "-5" are answers; "081", "81.0",
    one way only                       "+81", "-0", "1 32", "132 apples", "" and "abc" are not

So "1320" is not "132" (the whole line is compared, not a prefix), and "132\\n47+85=" is 132 (a model
that goes on with another problem on the next line has still answered).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

INTEGER = re.compile(r"0|-?[1-9][0-9]*")
"""An integer written one way only: no leading zero, no sign on zero, no '+', no decimal point."""


def completion_text(completion: str | list[dict[str, str]]) -> str:
    """A completion's text: the string itself, or (TRL's conversational format) its first
    message's `content`."""
    return completion if isinstance(completion, str) else completion[0]["content"]


def parse_answer(completion: str | list[dict[str, str]]) -> str | None:
    """The integer a completion answers, as text (see the module docstring), or None when its
    first line, stripped, is not an integer written one way only."""
    line = completion_text(completion).split("\n", 1)[0].strip()
    return line if INTEGER.fullmatch(line) else None


def canonical_ground_truth(truth: str | int) -> str:
    """A ground truth (a string such as "132", as verl stores it, or an int) as `parse_answer`
    writes its answers; one ValueError line when it is not an integer."""
    text = str(truth).strip() if not isinstance(truth, bool) else ""
    if not INTEGER.fullmatch(text):
        raise ValueError(f"ground_truth: {truth!r} is not an integer written as -?[1-9][0-9]* or 0")
    return text


def accuracy_reward(*, prompts: list[Any] | None = None, completions: list[Any],
                    completion_ids: list[list[int]] | None = None, ground_truth: list[str | int],
                    **kwargs: Any) -> list[float]:
    """r(y) = 1[parse_answer(y) = ground truth] for each completion y and its own ground truth:
    1.0 for the right answer, 0.0 for a wrong, missing or malformed one (`parse_answer`). The
    prompts and token ids are not read; `ground_truth` is the column of the same name, one per
    completion (a ValueError when the counts differ or one is not an integer)."""
    if len(ground_truth) != len(completions):
        raise ValueError(f"accuracy_reward: {len(completions)} completions and {len(ground_truth)} ground_truth; "
                         f"need one ground truth per completion")
    truths = [canonical_ground_truth(t) for t in ground_truth]
    return [1.0 if parse_answer(c) == t else 0.0 for c, t in zip(completions, truths)]


def format_reward(*, prompts: list[Any] | None = None, completions: list[Any],
                  completion_ids: list[list[int]] | None = None, **kwargs: Any) -> list[float]:
    """r(y) = 1[parse_answer(y) is not None]: 1.0 when the completion's first line is an integer
    (right or wrong), 0.0 otherwise. The shape of an answer, not its truth: TRL's format rewards
    (`think_format_reward`) check a completion's form the same way."""
    return [0.0 if parse_answer(c) is None else 1.0 for c in completions]


def weighted_rewards(format_weight: float) -> Callable[..., list[float]]:
    """r = accuracy_reward + format_weight · format_reward, one TRL-style reward function: TRL's
    `reward_weights` ([1, format_weight]) over the two, summed per completion. Its name says its weights."""

    def accuracy_and_format(*, completions: list[Any], ground_truth: list[str | int], **kwargs: Any) -> list[float]:
        accuracy = accuracy_reward(completions=completions, ground_truth=ground_truth)
        shape = format_reward(completions=completions)
        return [a + format_weight * f for a, f in zip(accuracy, shape)]

    accuracy_and_format.__name__ = f"accuracy_reward+{format_weight:g}*format_reward"
    return accuracy_and_format


__all__ = ["INTEGER", "accuracy_reward", "canonical_ground_truth", "completion_text", "format_reward", "parse_answer", "weighted_rewards"]
