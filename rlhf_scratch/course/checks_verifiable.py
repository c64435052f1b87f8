"""The checks of notebook 10, RL with verifiable rewards: the answer parsed, the rule rewards, pass@k.

Built as `checks.py` is (read its docstring): each `check_<name>(fn)` runs cases worked out by hand and
names the classic mistake by the numbers it produced. A reward's cases give each completion as a
number the judge compares: `parse_answer`'s answer as the number it writes (nan for None, no answer),
a reward function's list of floats as it is. The answers are the package's rules
(`reward.verifiable.parse_answer`, `accuracy_reward`, `format_reward`; `reward.pass_at_k.pass_at_k`),
which tests/integration/test_course_verifiable.py runs through every check.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from rlhf_scratch.course.checks import Case, Mistake, Reference, _describe, _run

SOLUTIONS = "rlhf_scratch.course.solutions_verifiable"
REFERENCES: dict[str, Reference] = {
    "parse_answer": Reference(SOLUTIONS, "(completion)"),
    "accuracy_reward": Reference(SOLUTIONS, "(completions, ground_truth, **kwargs)"),
    "format_reward": Reference(SOLUTIONS, "(completions, **kwargs)"),
    "pass_at_k": Reference(SOLUTIONS, "(n, c, k)"),
}
"""The solution of each exercise (written to be read; the package's own is named in its check)."""

NAN = math.nan
RULE = "re.fullmatch(r'0|-?[1-9][0-9]*', line)"


# --- parse_answer -------------------------------------------------------------------------------


def _answers(fn: Callable, completions: Sequence[str]) -> Tensor:
    """fn's answer to each completion as a number (nan for None), or the one line that says why a return
    cannot be an answer's text."""
    values = []
    for text in completions:
        out = fn(text)
        if out is None:
            values.append(NAN)
            continue
        if not isinstance(out, str):
            raise AssertionError(f"parse_answer({text!r}) returned {_describe(out)}: return the answer as TEXT ('132'), "
                                 "which the reward compares with the ground truth's text, or None for no answer")
        if out != out.strip():
            raise AssertionError(f"parse_answer({text!r}) returned {out!r}: strip the whitespace around the line, "
                                 "so that the answer's text is the ground truth's ('132')")
        try:
            values.append(float(out))
        except ValueError:
            raise AssertionError(f"parse_answer({text!r}) returned {out!r}, which is not an integer: return None when "
                                 f"the first line is not an integer, the WHOLE line ({RULE}: not re.match or "
                                 "re.search, which find one at its start or anywhere)") from None
    return torch.tensor(values, dtype=torch.float64)


def _parse_case(name: str, completions: list[str], expected: list[float], mistakes: tuple[Mistake, ...]) -> Case:
    shown = ", ".join(repr(c) for c in completions)
    return Case(f"{name}: {shown} (each answer as a number, nan for None)",
                lambda fn: _answers(fn, completions), expected, mistakes)


NO_MINUS = "'-5' is an answer: an integer keeps its minus sign (the rule is 0 | -?[1-9][0-9]*)"
NO_ZERO = ("'0' is an answer (47-47=0): the rule is 0 OR -?[1-9][0-9]*, and [1-9][0-9]* alone refuses a lone 0")
NOT_STRIPPED = ("strip the line: ' 132', '132 ' and a tab around 47 are answers (line.strip()); the model may "
                "write a space before its answer")
ONE_END = "strip BOTH ends of the line (strip(), not lstrip() or rstrip())"
SPACES_ONLY = "strip() with no argument: a tab is whitespace too (strip(' ') leaves '\\t47')"
INNER_SPACE = ("only the whitespace AROUND the line goes: '1 32' is not 132 (strip(), not removing every space "
               "or joining the line's words)")
WHOLE_TEXT = ("read the FIRST line only, the text before the first '\\n': '132\\n47+85=' answers 132 (the model "
              "went on with another problem, but it answered first)")
STRIP_FIRST = ("take the first line, THEN strip it: in '\\n132' the first line is empty, so it gives no answer "
               "(completion.split('\\n', 1)[0].strip(), not completion.strip().split('\\n')[0])")
LAST_LINE = "the FIRST line is the answer, not the last"
INT_PARSE = ("int() is too lenient for an answer: it reads '081', '+81', '-0' and '00'; an answer is an integer "
             f"written one way only: {RULE}")
FLOAT_PARSE = ("float() reads '81.0' (and '081', '+81', '-0'): an answer is a whole integer written one way "
               f"only: {RULE}")
LEADING_ZERO = ("'081', '-0' and '00' are not answers: no leading zero and no sign on zero (isdigit() and "
                f"-?[0-9]+ accept them; the rule is {RULE})")
PREFIX = (f"the WHOLE line must be the integer ({RULE}): re.match and re.search find one at the line's start "
          "or anywhere in it, so '132 apples' and '12-' gave a number")


def _parse_answer_cases() -> list[Case]:
    return [
        _parse_case("integers written one way", ["132", "-5", "0", "1320", "abc"],
                    [132.0, -5.0, 0.0, 1320.0, NAN],
                    (Mistake([132.0, NAN, 0.0, 1320.0, NAN], NO_MINUS),
                     Mistake([132.0, -5.0, NAN, 1320.0, NAN], NO_ZERO))),
        _parse_case("whitespace around the line", [" 132", "132 ", "\t47 ", "   ", "1 32"],
                    [132.0, 132.0, 47.0, NAN, NAN],
                    (Mistake([NAN] * 5, NOT_STRIPPED),
                     Mistake([132.0, NAN, NAN, NAN, NAN], ONE_END),   # lstrip(): '132 ' keeps its space
                     Mistake([NAN, 132.0, NAN, NAN, NAN], ONE_END),   # rstrip()
                     Mistake([132.0, 132.0, NAN, NAN, NAN], SPACES_ONLY),
                     Mistake([132.0, 132.0, 47.0, NAN, 132.0], INNER_SPACE),
                     Mistake([132.0, 132.0, 47.0, NAN, 1.0], PREFIX))),  # re.match or re.search finds '1' in '1 32'
        # the first lines: '132', '5', '' and 'abc'
        _parse_case("the first line is the answer", ["132\n47+85=", "5\n81", "\n132", "abc\n5"],
                    [132.0, 5.0, NAN, NAN],
                    (Mistake([NAN, NAN, 132.0, NAN], WHOLE_TEXT),   # the whole text, stripped: only '\n132' is one
                     Mistake([132.0, 5.0, 132.0, NAN], STRIP_FIRST),
                     Mistake([NAN, 81.0, 132.0, 5.0], LAST_LINE))),
        _parse_case("not an integer written one way", ["081", "81.0", "+81", "-0", "00", "132 apples", "12-", ""],
                    [NAN] * 8,
                    (Mistake([81.0, NAN, 81.0, 0.0, 0.0, NAN, NAN, NAN], INT_PARSE),
                     Mistake([81.0, 81.0, 81.0, 0.0, 0.0, NAN, NAN, NAN], FLOAT_PARSE),
                     Mistake([81.0, NAN, NAN, 0.0, 0.0, NAN, NAN, NAN], LEADING_ZERO),
                     # the match's text: re.match finds '0' in '081', '81' in '81.0', nothing in '+81' or '-0';
                     # re.search also finds '81' in '+81' and '0' in '-0'
                     Mistake([0.0, 81.0, NAN, NAN, 0.0, 132.0, 12.0, NAN], PREFIX),
                     Mistake([0.0, 81.0, 81.0, 0.0, 0.0, 132.0, 12.0, NAN], PREFIX))),
    ]


def check_parse_answer(fn: Callable) -> None:
    """Check `parse_answer(completion) -> str | None`: the integer a completion answers, as text, or None
    (the package's: `rlhf_scratch.reward.verifiable.parse_answer`; the solution:
    `rlhf_scratch.course.solutions_verifiable.parse_answer`).

    Recognises: '-5' or '0' refused; the line not stripped, stripped at one end, of spaces only, or of its
    inner spaces too; the whole text, stripped before the first line is taken, the last line; int() or
    float() or a leading zero accepting '081', '81.0', '+81', '-0'; a prefix or a search for the whole line.
    """
    _run("parse_answer", fn, _parse_answer_cases(), REFERENCES["parse_answer"])


# --- accuracy_reward, format_reward -------------------------------------------------------------


def _rewards(out: Any, n: int) -> Tensor:
    """A reward function's return as a float64 tensor of its n rewards, or the one line that says why the
    package's reward contract (TRL's) would refuse it."""
    if isinstance(out, Tensor) or type(out).__module__ == "numpy":
        out = out.tolist() if getattr(out, "ndim", 0) == 1 else out
    if not isinstance(out, (list, tuple)):
        raise AssertionError(f"return one reward per completion, a list of {n} floats; got {_describe(out)}")
    if len(out) != n:
        raise AssertionError(f"return one reward per completion: {len(out)} rewards for {n} completions")
    for i, value in enumerate(out):
        if value is None:
            raise AssertionError(f"reward {i} is None (TRL's 'no reward', which the package never trains on): "
                                 "a wrong or missing answer is 0.0")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise AssertionError(f"reward {i} is {value!r}: a reward is a number, 1.0 or 0.0 (the reward contract "
                                 "refuses True/False)")
    return torch.tensor([float(v) for v in out], dtype=torch.float64)


def _reward_case(name: str, completions: list[str], expected: list[float], mistakes: tuple[Mistake, ...],
                 **columns: list) -> Case:
    def run(fn: Callable) -> Tensor:  # as TRL and the package's rollout call it: by keyword, with every column
        n = len(completions)
        return _rewards(fn(prompts=["47+85="] * n, completions=list(completions), completion_ids=[[1, 2, 3]] * n,
                           **{k: list(v) for k, v in columns.items()}), n)

    return Case(f"{name}: completions {', '.join(repr(c) for c in completions)}", run, expected, mistakes)


CONTAINS = ("the whole answer is compared: '1320' and '132 apples' contain '132' (or start with it) but do not "
            "answer 132; compare parse_answer(c) == truth, not `truth in c` or c.startswith(truth)")
NOT_PARSED = ("read the answer with parse_answer first: ' 132\\n47+85=' answers 132 on its first line, which "
              "comparing the text itself misses")
INVERTED = "the rewards are the wrong way round: 1.0 for the RIGHT answer, 0.0 otherwise"
FORMAT_FOR_ACCURACY = ("that is the format reward (any answer at all scores 1.0): accuracy needs the answer to "
                       "EQUAL the row's ground truth ('13' is an answer, not 132)")
FIRST_TRUTH = ("each completion has its OWN ground truth (the row it came from): zip(completions, ground_truth); "
               "you compared every completion with the first")
NUMBER_TRUTH = ("the ground truth came as a number (132, not '132'), as a dataset's column may hold it: the "
                "answer is text, so compare it with str(truth) (or both as int, once parse_answer said it is one)")
INT_OF_TEXT = ("'07' is no answer (a leading zero), however int('07') == 7: read the answer with parse_answer, "
               "then compare")


def _accuracy_reward_cases() -> list[Case]:
    return [
        _reward_case("every ground truth '132'", ["132", "1320", " 132\n47+85=", "081", "13", "132 apples"],
                     [1.0, 0.0, 1.0, 0.0, 0.0, 0.0],
                     (Mistake([1.0, 1.0, 1.0, 0.0, 0.0, 1.0], CONTAINS),    # truth in c
                      Mistake([1.0, 1.0, 0.0, 0.0, 0.0, 1.0], CONTAINS),    # c.startswith(truth)
                      Mistake([1.0, 0.0, 0.0, 0.0, 0.0, 0.0], NOT_PARSED),  # c == truth, or c.strip() == truth
                      Mistake([0.0, 1.0, 0.0, 1.0, 1.0, 1.0], INVERTED),
                      Mistake([1.0, 1.0, 1.0, 0.0, 1.0, 0.0], FORMAT_FOR_ACCURACY)),
                     ground_truth=["132"] * 6),
        _reward_case("each its own ground truth '5', '23', '94', '96'", ["5", "23", "94", "95"],
                     [1.0, 1.0, 1.0, 0.0],
                     (Mistake([1.0, 0.0, 0.0, 0.0], FIRST_TRUTH),
                      Mistake([0.0, 0.0, 0.0, 1.0], INVERTED)),
                     ground_truth=["5", "23", "94", "96"]),
        _reward_case("the ground truths as numbers 132, 7, 7", ["132", "7", "07"],
                     [1.0, 1.0, 0.0],
                     (Mistake([0.0, 0.0, 0.0], NUMBER_TRUTH),
                      Mistake([1.0, 1.0, 1.0], INT_OF_TEXT)),
                     ground_truth=[132, 7, 7]),
    ]


def check_accuracy_reward(fn: Callable) -> None:
    """Check `accuracy_reward(completions, ground_truth, **kwargs) -> list[float]`: 1.0 where a completion's
    answer is its row's ground truth, called by keyword as TRL calls a reward function (the package's:
    `rlhf_scratch.reward.verifiable.accuracy_reward`; the solution: `course.solutions_verifiable`).

    Recognises: the truth found inside the text or at its start, the text compared unparsed, the rewards
    inverted, the format reward for accuracy, every completion against the first truth, a number's truth
    compared with text, int() of the text.
    """
    _run("accuracy_reward", fn, _accuracy_reward_cases(), REFERENCES["accuracy_reward"])


NOT_AN_ANSWER_CHECK = ("'081' and '-0' are not answers (a leading zero, a sign on zero): the format check is "
                       "parse_answer(c) is not None, not isdigit()")
ANY_TEXT = "any text is not an answer: 'a lot' scores 0.0; the format check is parse_answer(c) is not None"
FORMAT_INVERTED = "the rewards are the wrong way round: 1.0 when the completion GIVES an answer (right or wrong)"


def _format_reward_cases() -> list[Case]:
    return [
        _reward_case("answers right or wrong, and none", ["132", "131", " 7\n", "081", "a lot", "1320", "-0"],
                     [1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0],
                     (Mistake([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0], NOT_AN_ANSWER_CHECK),  # c.strip().lstrip('-').isdigit()
                      Mistake([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0], NOT_AN_ANSWER_CHECK),  # c.strip().isdigit()
                      Mistake([1.0] * 7, ANY_TEXT),
                      Mistake([0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0], FORMAT_INVERTED))),
    ]


def check_format_reward(fn: Callable) -> None:
    """Check `format_reward(completions, **kwargs) -> list[float]`: 1.0 where a completion gives an answer at
    all, right or wrong (the package's: `rlhf_scratch.reward.verifiable.format_reward`).

    Recognises: isdigit() for the format check, any text as an answer, the rewards inverted.
    """
    _run("format_reward", fn, _format_reward_cases(), REFERENCES["format_reward"])


# --- pass_at_k ----------------------------------------------------------------------------------


def _pass_at(fn: Callable, triples: Sequence[tuple[int, int, int]]) -> Tensor:
    return torch.tensor([float(fn(n, c, k)) for n, c, k in triples], dtype=torch.float64)


def _pass_case(name: str, triples: list[tuple[int, int, int]], expected: list[float], mistakes: tuple[Mistake, ...],
               **kw: Any) -> Case:
    shown = ", ".join(f"({n}, {c}, {k})" for n, c, k in triples)
    return Case(f"{name}: (n, c, k) = {shown}", lambda fn: _pass_at(fn, triples), expected, mistakes, **kw)


BIASED = ("that is the plug-in 1 − (1 − c/n)^k, biased LOW: it draws the k samples WITH replacement from a success "
          "rate c/n. Draw k of your n samples WITHOUT replacement: 1 − C(n − c, k) / C(n, k)")
ALL_WRONG = "that is C(n − c, k) / C(n, k), the chance that all k are WRONG: pass@k is 1 minus it"
PASS_AT_1 = "k was ignored: c/n is pass@1; pass@k is 1 − C(n − c, k) / C(n, k)"
ALL_RIGHT = ("C(c, k) / C(n, k) is the chance that all k are RIGHT; pass@k needs at least one right: "
             "1 − C(n − c, k) / C(n, k), one minus the chance that all k are wrong")
LINEAR = "k·c/n (capped at 1) counts a right sample twice when two are drawn: 1 − C(n − c, k) / C(n, k)"
ONE_TOO_MANY = ("off by one in the combination: C(n − c − 1, k) (or the product Π(1 − k/i) from i = n − c, one "
                "factor too many): the n − c wrong samples are C(n − c, k) ways to draw k, and the product runs "
                "over i = n − c + 1 … n, c factors")
ONE_TOO_FEW = ("off by one in the combination: C(n − c + 1, k) (or the product from i = n − c + 2, one factor too "
               "few): the n − c wrong samples are C(n − c, k) ways to draw k")
RANGE_STOP = ("off by one in the combination: C(n − 1, k) for C(n, k), or the product Π(1 − k/i) stopped at "
              "i = n − 1: range(n − c + 1, n + 1) (range stops before its end) gives the c factors i = n − c + 1 … n")
N_PLUS_ONE = "off by one in the combination: C(n + 1, k) for C(n, k); the k are drawn from the n samples"
K_MINUS_ONE = "off by one in the combination: k − 1 for k; the subsets drawn have k samples, C(n − c, k) / C(n, k)"
LESS_THAN_K = ("when n − c < k every k-subset holds a right sample: pass@k is 1 there (C(n − c, k) = 0), not 0")
OVERFLOW = ("not finite for n = 2000: C(2000, 1000) ≈ 2e600 overflows a float; use math.comb (exact integers, and "
            "Python divides two of them exactly) or the product Π_{i = n−c+1}^{n} (1 − k/i)")


def _pass_at_k_cases() -> list[Case]:
    return [
        # 1 − C(3,2)/C(5,2) = 1 − 3/10;  1 − C(7,4)/C(10,4) = 1 − 35/210 = 5/6;  1 − C(7,3)/C(8,3) = 1 − 35/56 = 3/8
        _pass_case("three problems", [(5, 2, 2), (10, 3, 4), (8, 1, 3)], [0.7, 5 / 6, 3 / 8],
                   (Mistake([16 / 25, 0.7599, 169 / 512], BIASED),              # 1 − (3/5)², 1 − 0.7⁴, 1 − (7/8)³
                    Mistake([0.3, 1 / 6, 5 / 8], ALL_WRONG),
                    Mistake([0.4, 0.3, 1 / 8], PASS_AT_1),
                    Mistake([0.1, 0.0, 0.0], ALL_RIGHT),                       # C(2,2)/C(5,2); C(3,4) = C(1,3) = 0
                    Mistake([0.9, 1.0, 1.0], ALL_RIGHT),                       # 1 − C(c, k)/C(n, k)
                    Mistake([0.8, 1.0, 3 / 8], LINEAR),
                    Mistake([0.9, 13 / 14, 9 / 14], ONE_TOO_MANY),             # 1 − 1/10, 1 − 15/210, 1 − 20/56
                    Mistake([0.4, 2 / 3, 0.0], ONE_TOO_FEW),                   # 1 − 6/10, 1 − 70/210, 1 − 56/56
                    Mistake([0.5, 13 / 18, 0.0], RANGE_STOP),                  # 1 − 3/6, 1 − 35/126, 1 − 35/35
                    Mistake([0.8, 59 / 66, 7 / 12], N_PLUS_ONE),               # 1 − 3/15, 1 − 35/330, 1 − 35/84
                    Mistake([0.4, 17 / 24, 0.25], K_MINUS_ONE))),              # 1 − 3/5, 1 − 35/120, 1 − 21/28
        # c = 0: 0;  c = n: 1;  n − c = 1 < k = 2: 1;  k = n: 1;  n = 1
        _pass_case("the edges", [(5, 0, 2), (5, 5, 2), (5, 4, 2), (4, 1, 4), (1, 1, 1), (1, 0, 1)],
                   [0.0, 1.0, 1.0, 1.0, 1.0, 0.0],
                   (Mistake([0.0, 1.0, 24 / 25, 175 / 256, 1.0, 0.0], BIASED),  # 1 − (1/5)², 1 − (3/4)⁴
                    Mistake([0.0, 0.0, 0.0, 0.0, 0.0, 0.0], LESS_THAN_K),
                    Mistake([1.0, 0.0, 0.0, 0.0, 0.0, 1.0], ALL_WRONG))),
        # 1 − (998/1998)(999/1999)(1000/2000) = 1 − 499/3998 = 3499/3998;  1 − C(99,50)/C(100,50) = 1 − 50/100
        _pass_case("many samples", [(2000, 3, 1000), (100, 1, 50)], [3499 / 3998, 0.5],
                   (Mistake([1 - (1 - 3 / 2000) ** 1000, 1 - 0.99**50], BIASED),  # 0.777121, 0.394994
                    Mistake([499 / 3998, 0.5], ALL_WRONG)),
                   if_not_finite=OVERFLOW),
    ]


def check_pass_at_k(fn: Callable) -> None:
    """Check `pass_at_k(n, c, k) -> float`: the unbiased 1 − C(n − c, k)/C(n, k) of Chen et al. 2021 (the
    package's: `rlhf_scratch.reward.pass_at_k.pass_at_k`, also `rlhf_scratch.pass_at_k`).

    Recognises: the biased plug-in 1 − (1 − c/n)^k; the chance all k are wrong, or all right; c/n; k·c/n;
    the combination off by one (C(n − c ± 1, k), C(n ± 1, k), k − 1, a product with a factor too many or
    too few); 0 where n − c < k; an overflow at n = 2000.
    """
    _run("pass_at_k", fn, _pass_at_k_cases(), REFERENCES["pass_at_k"])


CASES: dict[str, Callable[[], list[Case]]] = {
    "parse_answer": _parse_answer_cases,
    "accuracy_reward": _accuracy_reward_cases,
    "format_reward": _format_reward_cases,
    "pass_at_k": _pass_at_k_cases,
}
"""Each exercise's cases, by function name."""
