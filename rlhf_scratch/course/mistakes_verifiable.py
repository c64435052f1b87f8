"""Planted mistakes of notebook 10 (`checks_verifiable.py`): the answer parsed, the rule rewards, the unbiased
pass@k. Each function is the solution with one classic mistake, as a learner writes it.
"""

import re
from math import comb, prod

from rlhf_scratch.course import solutions_verifiable as S
from rlhf_scratch.course.planted import Planted

RULE = re.compile(r"0|-?[1-9][0-9]*")
def first_line(text):
    return text.split("\n", 1)[0].strip()

def parse_int(completion):
    try:
        return str(int(first_line(completion)))
    except ValueError:
        return None

def parse_float(completion):
    try:
        return str(int(float(first_line(completion))))
    except ValueError:
        return None

def parse_isdigit(completion):
    line = first_line(completion)
    return line if line.lstrip("-").isdigit() else None

def parse_re_match(completion):
    m = RULE.match(first_line(completion))
    return m.group() if m else None

def parse_re_search(completion):
    m = RULE.search(first_line(completion))
    return m.group() if m else None

def parse_line_if_match(completion):
    line = first_line(completion)
    return line if RULE.match(line) else None

def parse_no_minus(completion):
    line = first_line(completion)
    return line if re.fullmatch(r"0|[1-9][0-9]*", line) else None

def parse_no_zero(completion):
    line = first_line(completion)
    return line if re.fullmatch(r"-?[1-9][0-9]*", line) else None

def unstripped(completion):
    line = completion.split("\n", 1)[0]
    return line if RULE.fullmatch(line) else None

def lstripped(completion):
    line = completion.split("\n", 1)[0].lstrip()
    return line if RULE.fullmatch(line) else None

def spaces_stripped(completion):
    line = completion.split("\n", 1)[0].strip(" ")
    return line if RULE.fullmatch(line) else None

def every_space_removed(completion):
    line = "".join(completion.split("\n", 1)[0].split())
    return line if RULE.fullmatch(line) else None

def unstripped_returned(completion):
    line = completion.split("\n", 1)[0]
    return line if RULE.fullmatch(line.strip()) else None

def whole_text(completion):
    line = completion.strip()
    return line if RULE.fullmatch(line) else None

def stripped_then_split(completion):
    line = completion.strip().split("\n")[0]
    return line if RULE.fullmatch(line) else None

def last_line(completion):
    line = completion.split("\n")[-1].strip()
    return line if RULE.fullmatch(line) else None

def parse_as_int(completion):
    line = first_line(completion)
    return int(line) if RULE.fullmatch(line) else None

def acc_contains(completions, ground_truth, **kwargs):
    return [1.0 if t in c else 0.0 for c, t in zip(completions, ground_truth)]

def acc_startswith(completions, ground_truth, **kwargs):
    return [1.0 if c.startswith(t) else 0.0 for c, t in zip(completions, ground_truth)]

def acc_unparsed(completions, ground_truth, **kwargs):
    return [1.0 if c.strip() == t else 0.0 for c, t in zip(completions, ground_truth)]

def acc_format(completions, ground_truth, **kwargs):
    return S.format_reward(completions)

def acc_first_truth(completions, ground_truth, **kwargs):
    return [1.0 if S.parse_answer(c) == ground_truth[0] else 0.0 for c in completions]

def acc_no_str(completions, ground_truth, **kwargs):
    return [1.0 if S.parse_answer(c) == t else 0.0 for c, t in zip(completions, ground_truth)]

def acc_int_of_text(completions, ground_truth, **kwargs):
    def as_int(c):
        try:
            return int(c.split("\n")[0])
        except ValueError:
            return None
    return [1.0 if as_int(c) == int(t) else 0.0 for c, t in zip(completions, ground_truth)]

def acc_inverted(completions, ground_truth, **kwargs):
    return [0.0 if S.parse_answer(c) == str(t) else 1.0 for c, t in zip(completions, ground_truth)]

def acc_mean(completions, ground_truth, **kwargs):
    return sum(S.accuracy_reward(completions, ground_truth)) / len(completions)

def acc_bools(completions, ground_truth, **kwargs):
    return [S.parse_answer(c) == str(t) for c, t in zip(completions, ground_truth)]

def acc_none_for_wrong(completions, ground_truth, **kwargs):
    return [1.0 if S.parse_answer(c) == str(t) else None for c, t in zip(completions, ground_truth)]

def acc_without_kwargs(completions, ground_truth):
    return S.accuracy_reward(completions, ground_truth)

def format_isdigit(completions, **kwargs):
    return [1.0 if c.strip().lstrip("-").isdigit() else 0.0 for c in completions]

def format_any_text(completions, **kwargs):
    return [1.0 if c else 0.0 for c in completions]

def format_inverted(completions, **kwargs):
    return [1.0 if S.parse_answer(c) is None else 0.0 for c in completions]

def pass_biased(n, c, k):
    return 1 - (1 - c / n) ** k

def pass_all_wrong(n, c, k):
    return comb(n - c, k) / comb(n, k)

def pass_one(n, c, k):
    return c / n

def pass_all_right(n, c, k):
    return comb(c, k) / comb(n, k)

def pass_linear(n, c, k):
    return min(1.0, k * c / n)

def pass_wrong_minus_one(n, c, k):
    return 1 - comb(n - c - 1, k) / comb(n, k) if n > c else 1.0

def pass_product_from_n_minus_c(n, c, k):
    return 1 - prod(1 - k / i for i in range(n - c, n + 1)) if n > c else 1.0

def pass_wrong_plus_one(n, c, k):
    return 1 - comb(n - c + 1, k) / comb(n, k)

def pass_range_stop(n, c, k):
    return 1 - prod(1 - k / i for i in range(n - c + 1, n))

def pass_n_plus_one(n, c, k):
    return 1 - comb(n - c, k) / comb(n + 1, k)

def pass_k_minus_one(n, c, k):
    return 1 - comb(n - c, k - 1) / comb(n, k - 1)

def pass_zero_when_short(n, c, k):
    if n - c < k:
        return 0.0
    return 1 - comb(n - c, k) / comb(n, k)

def pass_float_binomials(n, c, k):
    def binom(a, b):  # C(a, b) built up in floating point: inf once it passes 1.8e308
        out = 1.0
        for i in range(b):
            out *= (a - i) / (i + 1)
        return out
    return 1 - binom(n - c, k) / binom(n, k)


P = Planted
PLANTED: tuple[Planted, ...] = (
    P("parse_answer", "int", parse_int, "int() is too lenient"),
    P("parse_answer", "float", parse_float, "float() reads '81.0'"),
    P("parse_answer", "isdigit", parse_isdigit, "no leading zero and no sign on zero"),
    P("parse_answer", "re-match", parse_re_match, "the WHOLE line must be the integer"),
    P("parse_answer", "re-search", parse_re_search, "the WHOLE line must be the integer"),
    P("parse_answer", "line-if-match", parse_line_if_match, "which is not an integer",
      also=("parse_answer('1 32') returned '1 32'", "case 2/4")),
    P("parse_answer", "no-minus", parse_no_minus, "'-5' is an answer"),
    P("parse_answer", "no-zero", parse_no_zero, "'0' is an answer"),
    P("parse_answer", "unstripped", unstripped, "strip the line: ' 132'"),
    P("parse_answer", "lstripped", lstripped, "strip BOTH ends"),
    P("parse_answer", "spaces-stripped", spaces_stripped, "a tab is whitespace too"),
    P("parse_answer", "every-space-removed", every_space_removed, "'1 32' is not 132"),
    P("parse_answer", "unstripped-returned", unstripped_returned, "returned ' 132': strip the whitespace"),
    P("parse_answer", "whole-text", whole_text, "read the FIRST line only"),
    P("parse_answer", "stripped-then-split", stripped_then_split, "take the first line, THEN strip it"),
    P("parse_answer", "last-line", last_line, "the FIRST line is the answer, not the last"),
    P("parse_answer", "as-int", parse_as_int, "returned an int 132: return the answer as TEXT"),
    P("accuracy_reward", "contains", acc_contains, "'1320' and '132 apples' contain '132'"),
    P("accuracy_reward", "startswith", acc_startswith, "'1320' and '132 apples' contain '132'"),
    P("accuracy_reward", "unparsed", acc_unparsed, "read the answer with parse_answer first"),
    P("accuracy_reward", "format", acc_format, "that is the format reward"),
    P("accuracy_reward", "inverted", acc_inverted, "the rewards are the wrong way round"),
    P("accuracy_reward", "first-truth", acc_first_truth, "each completion has its OWN ground truth"),
    P("accuracy_reward", "no-str", acc_no_str, "the ground truth came as a number"),
    P("accuracy_reward", "int-of-text", acc_int_of_text, "'07' is no answer"),
    P("accuracy_reward", "mean", acc_mean, "return one reward per completion, a list of 6 floats; got a float"),
    P("accuracy_reward", "bools", acc_bools, "a reward is a number, 1.0 or 0.0"),
    P("accuracy_reward", "none-for-wrong", acc_none_for_wrong, "a wrong or missing answer is 0.0"),
    P("accuracy_reward", "without-kwargs", acc_without_kwargs, "must have the signature of rlhf_scratch.course.solutions_verifiable.accuracy_reward(completions, ground_truth, "
      "**kwargs)"),
    P("format_reward", "isdigit", format_isdigit, "'081' and '-0' are not answers"),
    P("format_reward", "any-text", format_any_text, "any text is not an answer"),
    P("format_reward", "inverted", format_inverted, "the rewards are the wrong way round"),
    P("pass_at_k", "biased", pass_biased, "1 − (1 − c/n)^k, biased LOW",
      also=("case 1/3", "got      [0.64, 0.7599, 0.330078]")),
    P("pass_at_k", "all-wrong", pass_all_wrong, "the chance that all k are WRONG"),
    P("pass_at_k", "one", pass_one, "k was ignored"),
    P("pass_at_k", "all-right", pass_all_right, "the chance that all k are RIGHT"),
    P("pass_at_k", "linear", pass_linear, "counts a right sample twice"),
    P("pass_at_k", "wrong-minus-one", pass_wrong_minus_one, "C(n − c − 1, k)"),
    P("pass_at_k", "product-from-n-minus-c", pass_product_from_n_minus_c, "one factor too many"),
    P("pass_at_k", "wrong-plus-one", pass_wrong_plus_one, "C(n − c + 1, k)"),
    P("pass_at_k", "range-stop", pass_range_stop, "range stops before its end"),
    P("pass_at_k", "n-plus-one", pass_n_plus_one, "C(n + 1, k) for C(n, k)"),
    P("pass_at_k", "k-minus-one", pass_k_minus_one, "k − 1 for k"),
    P("pass_at_k", "zero-when-short", pass_zero_when_short, "pass@k is 1 there", also=("case 2/3",)),
    P("pass_at_k", "float-binomials", pass_float_binomials, "C(2000, 1000) ≈ 2e600 overflows a float", also=("case 3/3",)),
)
"""Notebook 10's planted mistakes (`course.mistakes.Planted`)."""
