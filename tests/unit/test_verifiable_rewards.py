"""The rule rewards (reward/verifiable.py): how an answer is parsed, case by case, and TRL's contract."""

import pytest

from rlhf_scratch.reward.verifiable import accuracy_reward, format_reward, parse_answer
from rlhf_scratch.rollout.reward_call import follows_trl_contract, score_completions


@pytest.mark.parametrize("completion, answer", [
    ("132", "132"),
    (" 132 ", "132"),          # surrounding spaces
    ("\t132\r", "132"),        # other surrounding whitespace
    ("132\n47+85=", "132"),    # the first line only: going on with another problem is fine
    ("-5", "-5"),              # a negative answer
    ("0", "0"),
    ("1320", "1320"),          # a longer number is that number, never its prefix
    ("", None),                # empty
    ("\n132", None),           # the first line is empty
    ("abc", None),             # garbage
    ("132 apples", None),      # more than the number on its line
    ("1 32", None),
    ("081", None),             # a leading zero
    ("81.0", None),            # a decimal point
    ("+81", None),             # a plus sign
    ("-0", None),              # a signed zero
    ("--5", None),
])
def test_parse_answer_case_by_case(completion, answer):
    assert parse_answer(completion) == answer


def test_accuracy_reward_by_hand():
    completions = ["132", "1320", " 132\n", "13", "-5", "", "abc", "081"]
    truths = ["132", "132", "132", "132", "-5", "0", "0", "81"]
    assert accuracy_reward(completions=completions, ground_truth=truths) == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]


def test_each_completion_is_scored_against_its_own_ground_truth():
    # Swapping the pair must change the result: a reward comparing with the wrong row fails here.
    assert accuracy_reward(completions=["12", "21"], ground_truth=["12", "7"]) == [1.0, 0.0]
    assert accuracy_reward(completions=["12", "21"], ground_truth=["7", "12"]) == [0.0, 0.0]
    assert accuracy_reward(completions=["12", "21"], ground_truth=["21", "12"]) == [0.0, 0.0]


def test_ground_truth_as_an_int_and_trls_conversational_completions():
    assert accuracy_reward(completions=["132", "131"], ground_truth=[132, 132]) == [1.0, 0.0]
    conversational = [[{"role": "assistant", "content": "132"}], [{"role": "assistant", "content": "1 32"}]]
    assert accuracy_reward(completions=conversational, ground_truth=["132", "132"]) == [1.0, 0.0]
    assert format_reward(completions=conversational) == [1.0, 0.0]


def test_format_reward_is_the_shape_not_the_truth():
    assert format_reward(completions=["131", "-5", "", "abc", "081", " 7 \nmore"]) == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("truths, message", [
    (["132", "abc"], "ground_truth: 'abc' is not an integer"),
    (["132", "081"], "ground_truth: '081' is not an integer"),
    (["132"], "accuracy_reward: 2 completions and 1 ground_truth"),
])
def test_a_bad_ground_truth_is_one_line(truths, message):
    with pytest.raises(ValueError) as err:
        accuracy_reward(completions=["132", "7"], ground_truth=truths)
    assert str(err.value).startswith(message)


def test_the_package_calls_them_as_trl_does_with_a_column_passed_through():
    assert follows_trl_contract(accuracy_reward) and follows_trl_contract(format_reward)
    rewards = score_completions(accuracy_reward, ["47+85=", "9-6="], ["132", "4"], [[1, 2], [3]],
                                ground_truth=["132", "3"])
    assert rewards.tolist() == [1.0, 0.0]
    assert score_completions(format_reward, ["47+85=", "9-6="], ["132", "x"], [[1, 2], [3]]).tolist() == [1.0, 0.0]
