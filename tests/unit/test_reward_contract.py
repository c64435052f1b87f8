"""Reward functions under either contract (the blog's, TRL's), and bad rewards stopped in one line."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from functools import partial

import numpy as np
import pytest
import torch

from rlhf_scratch.config import make_args
from rlhf_scratch.reward.functions import SentimentReward, reward_fn_char_count, reward_fn_vader
from rlhf_scratch.reward.tasks import (
    RewardFunctionError,
    follows_trl_contract,
    make_reward_fn,
    reward_fn_name,
    score_completions,
)

PROMPTS, COMPLETIONS, IDS = ["A ", "B "], ["good", "bad"], [[1, 2], [3]]


# --- which contract, and what each gets ----------------------------------------------------------


def test_trl_style_with_only_kwargs_receives_every_keyword():
    seen = {}

    def trl_reward(**kwargs):
        seen.update(kwargs)
        return [1.0, 2.0]

    score_completions(trl_reward, PROMPTS, COMPLETIONS, IDS, label=[1, 0], source=["x", "y"])
    assert seen == {"prompts": PROMPTS, "completions": COMPLETIONS, "completion_ids": IDS,
                    "label": [1, 0], "source": ["x", "y"]}, "TRL passes dataset columns through as kwargs"


def test_trl_style_named_parameters_get_prompts_completions_and_ids_apart():
    seen = {}

    def trl_reward(prompts, completions, completion_ids, **kwargs):
        seen.update(prompts=prompts, completions=completions, completion_ids=completion_ids, rest=kwargs)
        return [float(len(c)) for c in completions]

    out = score_completions(trl_reward, PROMPTS, COMPLETIONS, IDS, label=[1, 0])
    assert seen == {"prompts": ["A ", "B "], "completions": ["good", "bad"], "completion_ids": [[1, 2], [3]],
                    "rest": {"label": [1, 0]}}
    assert out.tolist() == [4.0, 3.0], "len('good') = 4, len('bad') = 3: completions alone, no prompt"


@pytest.mark.parametrize(
    "returned",
    [[1.5, -2.0], (1.5, -2.0), np.array([1.5, -2.0]), np.array([1.5, -2.0], dtype=np.float32),
     torch.tensor([1.5, -2.0], dtype=torch.float64), torch.tensor([1.5, -2.0], requires_grad=True),
     [np.float32(1.5), torch.tensor(-2.0)]],
    ids=["list", "tuple", "numpy64", "numpy32", "tensor64", "tensor_grad", "scalars"],
)
def test_trl_style_returns_list_tuple_array_or_tensor_as_float32_cpu_batch(returned):
    out = score_completions(lambda completions, **kw: returned, PROMPTS, COMPLETIONS, IDS)
    assert out.dtype == torch.float32 and out.shape == (2,) and out.device.type == "cpu"
    assert not out.requires_grad
    assert out.tolist() == [1.5, -2.0]


def test_blog_style_gets_prompt_followed_by_completion():
    seen = []

    def blog_reward(samples):
        seen.extend(samples)
        return torch.tensor([float(len(s)) for s in samples])

    out = score_completions(blog_reward, PROMPTS, COMPLETIONS, IDS, label=[1, 0])
    assert seen == ["A good", "B bad"], "the blog's reward saw the whole sample: prompt + completion"
    assert out.dtype == torch.float32 and out.tolist() == [6.0, 5.0]


def test_the_blogs_rewards_through_partials_are_blog_style_and_score_the_whole_sample():
    periods = partial(reward_fn_char_count, char=".")
    assert not follows_trl_contract(periods), "a partial of a blog reward must not be called TRL's way"
    # "Hi." + " Bye.." has 3 periods; "No" + " dots" none: the prompt's periods count too.
    out = score_completions(periods, ["Hi.", "No"], [" Bye..", " dots"], [[1], [2]])
    assert out.tolist() == [3.0, 0.0]
    vader = partial(reward_fn_vader, direction="neg")
    assert not follows_trl_contract(vader)
    texts = ["A wonderful film.", "A terrible film."]
    torch.testing.assert_close(score_completions(vader, ["A "] * 2, ["wonderful film.", "terrible film."], [[1]] * 2),
                               reward_fn_vader(texts, "neg"))


def test_sentiment_reward_instance_is_blog_style_via_its_call():
    reward = SentimentReward("tiny", "pos")  # the shipped classifier, offline
    assert not follows_trl_contract(reward), "SentimentReward.__call__(samples) is the blog's contract"
    out = score_completions(reward, ["The film was "] * 2, ["wonderful.", "awful."], [[1], [2]])
    torch.testing.assert_close(out, reward(["The film was wonderful.", "The film was awful."]))
    assert out.dtype == torch.float32 and out.shape == (2,)


def test_partials_and_instances_of_trl_functions_are_trl_style():
    def scaled(prompts, completions, scale, **kwargs):
        return [scale * len(c) for c in completions]

    class Judge:
        def __call__(self, completions, **kwargs):
            return [1.0] * len(completions)

    assert follows_trl_contract(partial(scaled, scale=2.0))
    assert follows_trl_contract(Judge())
    assert score_completions(partial(scaled, scale=2.0), PROMPTS, COMPLETIONS, IDS).tolist() == [8.0, 6.0]
    assert not follows_trl_contract(len), "a builtin without a signature is called the blog's way"


def test_make_reward_fn_still_returns_blog_style_callables():
    texts = ["Great. Fine.", "Bad"]
    for task, direction in [("sentiment", "pos"), ("vader", "neg"), ("periods", "pos")]:
        fn = make_reward_fn(make_args(task=task, direction=direction))
        assert not follows_trl_contract(fn), f"task {task}: must stay blog-style"
    torch.testing.assert_close(make_reward_fn(make_args(task="vader", direction="neg"))(texts),
                               reward_fn_vader(texts, "neg"))
    assert make_reward_fn(make_args(task="periods"))(texts).tolist() == [2.0, 0.0]


# --- readable names ------------------------------------------------------------------------------


def short_reward(texts, n=2):
    return [0.0] * n


def test_names_of_functions_partials_classes_and_ours():
    class MyReward:
        def __call__(self, texts):
            return [0.0] * len(texts)

    assert reward_fn_name(short_reward) == "short_reward"
    assert reward_fn_name(partial(partial(short_reward), n=3)) == "short_reward", "a partial names its function"
    assert reward_fn_name(MyReward()) == "MyReward", "an instance is named by its class, not its address"
    assert reward_fn_name(SentimentReward("vader", "neg")) == "SentimentReward(vader, neg)"
    assert reward_fn_name(make_reward_fn(make_args(task="vader", direction="neg"))) == "reward_fn_vader(direction=neg)"
    assert reward_fn_name(make_reward_fn(make_args(task="periods"))) == "reward_fn_char_count(char=.)"
    assert reward_fn_name(make_reward_fn(make_args(task="sentiment"))) == "SentimentReward(tiny, pos)"


def test_a_partial_and_a_class_are_named_in_the_error():
    with pytest.raises(RewardFunctionError) as err:
        score_completions(partial(short_reward, n=2), ["a"] * 3, ["b"] * 3, [[1]] * 3)
    assert str(err.value) == "reward function 'short_reward' returned 2 rewards for 3 completions"

    class MyReward:
        def __call__(self, texts):
            return [float("nan")] * len(texts)

    with pytest.raises(RewardFunctionError, match=r"^reward function 'MyReward' returned nan for completion 0$"):
        score_completions(MyReward(), ["a"], ["b"], [[1]])


# --- bad rewards: one line, naming the function and the first bad completion ----------------------


@pytest.mark.parametrize(
    "returned, message",
    [
        ([1.0], "reward function 'bad_fn' returned 1 rewards for 2 completions"),
        ([1.0, 2.0, 3.0], "reward function 'bad_fn' returned 3 rewards for 2 completions"),
        ([1.0, "abc"], "reward function 'bad_fn': reward 1 is 'abc', not a number"),
        ([True, 1.0], "reward function 'bad_fn': reward 0 is True, not a number"),
        ([[1.0], [2.0]], "reward function 'bad_fn': reward 0 is [1.0], not a number"),
        ([1.0, None], "reward function 'bad_fn' returned None for completion 1"),
        ([1.0, float("nan")], "reward function 'bad_fn' returned nan for completion 1"),
        ([float("inf"), 1.0], "reward function 'bad_fn' returned inf for completion 0"),
        ([1.0, float("-inf")], "reward function 'bad_fn' returned -inf for completion 1"),
        (np.array([1.0, np.nan]), "reward function 'bad_fn' returned nan for completion 1"),
        (torch.tensor([1.0, float("nan")]), "reward function 'bad_fn' returned nan for completion 1"),
        (torch.zeros(2, 2), "reward function 'bad_fn' returned a 2-D Tensor of shape (2, 2), "
                            "not one reward per completion (shape (2,))"),
        (torch.zeros(2, 1), "reward function 'bad_fn' returned a 2-D Tensor of shape (2, 1), "
                            "not one reward per completion (shape (2,))"),
        (np.zeros((2, 1)), "reward function 'bad_fn' returned a 2-D ndarray of shape (2, 1), "
                           "not one reward per completion (shape (2,))"),
        (torch.tensor(1.0), "reward function 'bad_fn' returned a 0-D Tensor of shape (), "
                            "not one reward per completion (shape (2,))"),
        (1.0, "reward function 'bad_fn' returned a float, not a list of 2 rewards"),
        ("12", "reward function 'bad_fn' returned a str, not a list of 2 rewards"),
        (None, "reward function 'bad_fn' returned None, not a list of 2 rewards"),
    ],
    ids=["short", "long", "string", "bool", "nested", "None", "nan", "inf", "-inf", "numpy_nan", "tensor_nan",
         "2d", "column", "numpy_column", "0d", "scalar", "str", "no_return"],
)
def test_bad_rewards_stop_with_one_line(returned, message):
    def bad_fn(prompts, completions, **kwargs):
        return returned

    with pytest.raises(RewardFunctionError) as err:
        score_completions(bad_fn, PROMPTS, COMPLETIONS, IDS)
    assert str(err.value) == message
    assert "\n" not in str(err.value)


def test_a_blog_style_reward_is_checked_too():
    def blog_nan(samples):
        return torch.tensor([0.5, float("nan"), 0.5])

    with pytest.raises(RewardFunctionError, match=r"^reward function 'blog_nan' returned nan for completion 1$"):
        score_completions(blog_nan, ["a"] * 3, ["b"] * 3, [[1]] * 3)


def test_a_long_non_number_is_cut_to_one_short_line():
    def chatty(completions, **kwargs):
        return [0.0, "line one\nline two " + "x" * 200]

    with pytest.raises(RewardFunctionError) as err:
        score_completions(chatty, PROMPTS, COMPLETIONS, IDS)
    # repr cut to 60 characters: "'line one\\nline two " is 20, then 37 x's, then "..."
    cut = "'line one\\nline two " + "x" * 37 + "..."
    assert str(err.value) == f"reward function 'chatty': reward 1 is {cut}, not a number"


def test_a_trl_style_function_that_cannot_take_trls_keywords_is_told_to_add_kwargs():
    def only_completions(completions):
        return [0.0] * len(completions)

    with pytest.raises(RewardFunctionError) as err:
        score_completions(only_completions, PROMPTS, COMPLETIONS, IDS)
    assert str(err.value) == ("reward function 'only_completions' cannot be called as TRL calls it "
                              "(got an unexpected keyword argument 'prompts'); give it **kwargs")


def test_mismatched_prompts_and_completions_are_the_callers_error():
    with pytest.raises(ValueError, match=r"^score_completions: 2 prompts, 1 completions and 2 completion_ids; "):
        score_completions(lambda texts: [0.0] * len(texts), PROMPTS, ["good"], IDS)


def test_an_empty_batch_gives_an_empty_float32_tensor():
    out = score_completions(lambda completions, **kw: [], [], [], [])
    assert out.dtype == torch.float32 and out.shape == (0,)
