"""Notebook 10's checks (`course/checks_verifiable.py`): each passes the course's solution AND the package's own
function, and fails, naming the mistake, on a planted classic bug written out as a learner would; the course's
solutions equal the package's `reward.verifiable` and `reward.pass_at_k`.

Fast (seconds): here beside the other test_course_*.py files because test_course_checks.py looks here for
every check's planted bug.
"""

import random
import re
from math import comb, prod

import pytest
from graded_notebooks import (
    assert_predictions_answered,
    assert_stubs_raise_and_solutions_pass,
    assert_written_by,
    load_generator,
)

from rlhf_scratch.course import catalogue
from rlhf_scratch.course import checks_verifiable as C
from rlhf_scratch.course import solutions_verifiable as S
from rlhf_scratch.reward import pass_at_k as package_pass_at_k
from rlhf_scratch.reward import verifiable


def fails_with(name: str, bug, phrase: str) -> str:
    with pytest.raises(AssertionError) as err:
        catalogue.CHECKS[name](bug)
    assert phrase in str(err.value), f"check_{name} on {bug.__name__} said:\n{err.value}\nexpected {phrase!r}"
    return str(err.value)


# --- the solutions are the package's ------------------------------------------------------------

TEXTS = ["132", "-5", "0", "1320", " 132 ", "\t47\n", "132\n47+85=", "\n132", "081", "81.0", "+81", "-0", "00",
         "1 32", "132 apples", "12-", "", "abc", "  \n", "-12\nx", "7 \n 8"]


def test_parse_answer_and_the_rewards_are_the_packages():
    truths = ["132", "-5", "0", "132", "132", "47", "132", "132", "81", "81", "81", "0", "0", "132", "132", "12",
              "0", "0", "0", "-12", "7"]
    for text in TEXTS:
        assert S.parse_answer(text) == verifiable.parse_answer(text), text
    assert S.accuracy_reward(TEXTS, truths) == verifiable.accuracy_reward(completions=TEXTS, ground_truth=truths)
    assert S.accuracy_reward(TEXTS, [int(t) for t in truths]) == verifiable.accuracy_reward(
        completions=TEXTS, ground_truth=[int(t) for t in truths])
    assert S.format_reward(TEXTS) == verifiable.format_reward(completions=TEXTS)


def test_pass_at_k_is_the_packages_on_every_small_case():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert S.pass_at_k(n, c, k) == pytest.approx(package_pass_at_k.pass_at_k(n, c, k), abs=1e-12)
    assert S.pass_at_k(2000, 3, 1000) == pytest.approx(package_pass_at_k.pass_at_k(2000, 3, 1000), rel=1e-12)


def test_every_verifiable_check_passes_the_packages_own_functions(capsys):
    catalogue.CHECKS["parse_answer"](verifiable.parse_answer)
    catalogue.CHECKS["accuracy_reward"](lambda completions, ground_truth, **kwargs: verifiable.accuracy_reward(
        completions=completions, ground_truth=ground_truth, **kwargs))
    catalogue.CHECKS["format_reward"](lambda completions, **kwargs: verifiable.format_reward(
        completions=completions, **kwargs))
    catalogue.CHECKS["pass_at_k"](package_pass_at_k.pass_at_k)
    assert capsys.readouterr().out.splitlines() == [
        "check_parse_answer: all 4 cases pass", "check_accuracy_reward: all 3 cases pass",
        "check_format_reward: all 1 cases pass", "check_pass_at_k: all 3 cases pass"]


# --- parse_answer: each mistake as a learner writes it -------------------------------------------

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


def test_parse_answer_names_int_float_leading_zeros_and_a_prefix():
    fails_with("parse_answer", parse_int, "int() is too lenient")
    fails_with("parse_answer", parse_float, "float() reads '81.0'")
    fails_with("parse_answer", parse_isdigit, "no leading zero and no sign on zero")
    fails_with("parse_answer", parse_re_match, "the WHOLE line must be the integer")
    fails_with("parse_answer", parse_re_search, "the WHOLE line must be the integer")
    message = fails_with("parse_answer", parse_line_if_match, "which is not an integer")
    assert "parse_answer('1 32') returned '1 32'" in message and "case 2/4" in message


def parse_no_minus(completion):
    line = first_line(completion)
    return line if re.fullmatch(r"0|[1-9][0-9]*", line) else None


def parse_no_zero(completion):
    line = first_line(completion)
    return line if re.fullmatch(r"-?[1-9][0-9]*", line) else None


def test_parse_answer_names_the_minus_sign_and_zero():
    fails_with("parse_answer", parse_no_minus, "'-5' is an answer")
    fails_with("parse_answer", parse_no_zero, "'0' is an answer")


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


def test_parse_answer_names_what_whitespace_does():
    """' 132' rejected (no strip), one end only, spaces but not tabs, the inner space removed too; and the
    answer returned with its spaces."""
    fails_with("parse_answer", unstripped, "strip the line: ' 132'")
    fails_with("parse_answer", lstripped, "strip BOTH ends")
    fails_with("parse_answer", spaces_stripped, "a tab is whitespace too")
    fails_with("parse_answer", every_space_removed, "'1 32' is not 132")
    fails_with("parse_answer", unstripped_returned, "returned ' 132': strip the whitespace")


def whole_text(completion):
    line = completion.strip()
    return line if RULE.fullmatch(line) else None


def stripped_then_split(completion):
    line = completion.strip().split("\n")[0]
    return line if RULE.fullmatch(line) else None


def last_line(completion):
    line = completion.split("\n")[-1].strip()
    return line if RULE.fullmatch(line) else None


def test_parse_answer_names_the_first_line_mistakes():
    """'132\\n47+85=' rejected (the whole text), '\\n132' accepted (stripped first), the last line read."""
    fails_with("parse_answer", whole_text, "read the FIRST line only")
    fails_with("parse_answer", stripped_then_split, "take the first line, THEN strip it")
    fails_with("parse_answer", last_line, "the FIRST line is the answer, not the last")


def parse_as_int(completion):
    line = first_line(completion)
    return int(line) if RULE.fullmatch(line) else None


def test_parse_answer_asks_for_text():
    fails_with("parse_answer", parse_as_int, "returned an int 132: return the answer as TEXT")


# --- the rewards ----------------------------------------------------------------------------------


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


def test_accuracy_reward_names_each_mistake():
    fails_with("accuracy_reward", acc_contains, "'1320' and '132 apples' contain '132'")
    fails_with("accuracy_reward", acc_startswith, "'1320' and '132 apples' contain '132'")
    fails_with("accuracy_reward", acc_unparsed, "read the answer with parse_answer first")
    fails_with("accuracy_reward", acc_format, "that is the format reward")
    fails_with("accuracy_reward", acc_inverted, "the rewards are the wrong way round")
    fails_with("accuracy_reward", acc_first_truth, "each completion has its OWN ground truth")
    fails_with("accuracy_reward", acc_no_str, "the ground truth came as a number")
    fails_with("accuracy_reward", acc_int_of_text, "'07' is no answer")
    fails_with("accuracy_reward", acc_mean, "return one reward per completion, a list of 6 floats; got a float")
    fails_with("accuracy_reward", acc_bools, "a reward is a number, 1.0 or 0.0")
    fails_with("accuracy_reward", acc_none_for_wrong, "a wrong or missing answer is 0.0")


def acc_without_kwargs(completions, ground_truth):
    return S.accuracy_reward(completions, ground_truth)


def test_accuracy_reward_without_kwargs_is_named_before_anything_runs():
    fails_with("accuracy_reward", acc_without_kwargs, "must have the signature of rlhf_scratch.course.solutions_verifiable."
                                                      "accuracy_reward(completions, ground_truth, **kwargs)")


def format_isdigit(completions, **kwargs):
    return [1.0 if c.strip().lstrip("-").isdigit() else 0.0 for c in completions]


def format_any_text(completions, **kwargs):
    return [1.0 if c else 0.0 for c in completions]


def format_inverted(completions, **kwargs):
    return [1.0 if S.parse_answer(c) is None else 0.0 for c in completions]


def test_format_reward_names_isdigit_any_text_and_the_inversion():
    fails_with("format_reward", format_isdigit, "'081' and '-0' are not answers")
    fails_with("format_reward", format_any_text, "any text is not an answer")
    fails_with("format_reward", format_inverted, "the rewards are the wrong way round")


# --- pass_at_k --------------------------------------------------------------------------------------


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


def test_pass_at_k_names_the_biased_estimator_and_the_wrong_event():
    message = fails_with("pass_at_k", pass_biased, "1 − (1 − c/n)^k, biased LOW")
    assert "case 1/3" in message and "got      [0.64, 0.7599, 0.330078]" in message
    fails_with("pass_at_k", pass_all_wrong, "the chance that all k are WRONG")
    fails_with("pass_at_k", pass_one, "k was ignored")
    fails_with("pass_at_k", pass_all_right, "the chance that all k are RIGHT")
    fails_with("pass_at_k", pass_linear, "counts a right sample twice")


def test_pass_at_k_names_each_off_by_one_in_the_combination():
    fails_with("pass_at_k", pass_wrong_minus_one, "C(n − c − 1, k)")
    fails_with("pass_at_k", pass_product_from_n_minus_c, "one factor too many")
    fails_with("pass_at_k", pass_wrong_plus_one, "C(n − c + 1, k)")
    fails_with("pass_at_k", pass_range_stop, "range stops before its end")
    fails_with("pass_at_k", pass_n_plus_one, "C(n + 1, k) for C(n, k)")
    fails_with("pass_at_k", pass_k_minus_one, "k − 1 for k")


def test_pass_at_k_names_zero_where_every_subset_holds_a_right_one_and_the_overflow():
    assert "case 2/3" in fails_with("pass_at_k", pass_zero_when_short, "pass@k is 1 there")
    assert "case 3/3" in fails_with("pass_at_k", pass_float_binomials, "C(2000, 1000) ≈ 2e600 overflows a float")


def test_the_float_binomial_learner_is_right_where_it_is_finite():
    """The planted overflow is only that: below n = 1000 it is the solution (so case 3 names nothing else)."""
    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(1, 60)
        c, k = rng.randint(0, n), rng.randint(1, n)
        assert pass_float_binomials(n, c, k) == pytest.approx(S.pass_at_k(n, c, k), abs=1e-9)


# --- notebook 10 and its solutions -----------------------------------------------------------------

SCRIPT = "make_10_verifiable_rewards.py"


@pytest.fixture
def make_10(monkeypatch):
    return load_generator(monkeypatch, SCRIPT)  # as `python notebooks/make_10_verifiable_rewards.py` runs it


def test_notebook_10_and_its_solutions_are_what_the_generator_writes(make_10):
    assert_written_by(make_10, SCRIPT)


def test_notebook_10_ships_stubs_that_raise_with_the_solutions_signature_and_the_solutions_pass(make_10, capsys):
    """Each stub raises NotImplementedError inside its check (the signature test passed), each solution cell
    is the course's solution and passes; every check of checks_verifiable has one stub."""
    assert_stubs_raise_and_solutions_pass(make_10, C, capsys)


def test_every_prediction_of_notebook_10_is_answered_after_code(make_10):
    assert_predictions_answered(make_10, 2)
