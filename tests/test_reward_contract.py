"""Reward functions under either contract (the blog's, TRL's), and bad rewards stopped in one line."""

from functools import partial

import numpy as np
import pytest
import torch

from rlhf_scratch.rewards import SentimentReward, reward_fn_vader
from rlhf_scratch.tasks import RewardFunctionError, follows_trl_contract, score_completions

PROMPTS, COMPLETIONS, IDS = ["A ", "B "], ["good", "bad"], [[1, 2], [3]]


def test_trl_style_gets_keywords_and_may_return_list_array_or_tensor():
    seen = {}

    def trl_reward(prompts, completions, completion_ids, **kwargs):
        seen.update(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        return [float(len(c)) for c in completions]

    out = score_completions(trl_reward, PROMPTS, COMPLETIONS, IDS, label=[1, 0])
    assert seen == {"prompts": PROMPTS, "completions": COMPLETIONS, "completion_ids": IDS, "label": [1, 0]}
    assert out.dtype == torch.float32 and out.tolist() == [4.0, 3.0]
    for ret in (np.array([1.0, 2.0]), torch.tensor([1.0, 2.0]), (1, 2)):
        assert score_completions(lambda completions, **kw: ret, PROMPTS, COMPLETIONS, IDS).tolist() == [1.0, 2.0]


def test_blog_style_gets_prompt_plus_completion():
    seen = []
    score_completions(lambda texts: seen.extend(texts) or torch.zeros(len(texts)), PROMPTS, COMPLETIONS, IDS)
    assert seen == ["A good", "B bad"]
    assert not follows_trl_contract(partial(reward_fn_vader, direction="pos"))
    assert not follows_trl_contract(SentimentReward("tiny", "pos"))


@pytest.mark.parametrize(
    "returned, message",
    [
        ([1.0], "reward function 'bad_fn' returned 1 rewards for 2 completions"),
        ([1.0, "abc"], "reward function 'bad_fn': reward 1 is 'abc', not a number"),
        ([None, 1.0], "reward function 'bad_fn': reward 0 is None, not a number"),
        ([1.0, float("nan")], "reward function 'bad_fn' returned nan for completion 1"),
        ([float("inf"), 1.0], "reward function 'bad_fn' returned inf for completion 0"),
        ([1.0, float("-inf")], "reward function 'bad_fn' returned -inf for completion 1"),
        (torch.zeros(2, 2), "reward function 'bad_fn': reward 0 is [0.0, 0.0], not a number"),
    ],
)
def test_bad_rewards_stop_with_one_line(returned, message):
    def bad_fn(prompts, completions, **kwargs):
        return returned

    with pytest.raises(RewardFunctionError) as err:
        score_completions(bad_fn, PROMPTS, COMPLETIONS, IDS)
    assert str(err.value) == message


def short_reward(texts, n=2):
    return [0.0] * n


def test_a_partial_and_a_class_are_named_readably():
    with pytest.raises(RewardFunctionError, match="^reward function 'short_reward' returned 2 rewards for 3 completions$"):
        score_completions(partial(short_reward, n=2), ["a"] * 3, ["b"] * 3, [[1]] * 3)

    class MyReward:
        def __call__(self, texts):
            return [float("nan")] * len(texts)

    with pytest.raises(RewardFunctionError, match="^reward function 'MyReward' returned nan for completion 0$"):
        score_completions(MyReward(), ["a"], ["b"], [[1]])
