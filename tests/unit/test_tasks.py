"""The task table (config/registry.py): every TASK is a registered entry, and a new one is one function
and one register_task — validation, the reward and the run's record all follow it."""

import pytest

from rlhf_scratch.config import ConfigError, make_args, registry
from rlhf_scratch.reward.tasks import make_reward_fn, rewarded_by


def exclamations_reward(args, device="cpu"):
    """A toy task: 2 points a '!' minus 1 a '?' (asymmetric, so a swapped count shows)."""
    return lambda samples: [2.0 * s.count("!") - s.count("?") for s in samples]


@pytest.fixture
def exclaims():
    task = registry.register_task(registry.Task("exclaims", exclamations_reward, scored_by="counting '!'"))
    yield task
    registry.unregister_task("exclaims")


def test_the_builtin_tasks_are_the_table_in_order():
    from rlhf_scratch.config import SCORED_BY, TASKS

    assert TASKS == ("sentiment", "vader", "periods", "first_token", "arithmetic")
    assert SCORED_BY == {"vader": "VADER", "periods": "counting periods", "first_token": "its first token",
                         "arithmetic": "its answer, checked by a rule"}
    assert registry.get_task("sentiment").reads_reward_model and not registry.get_task("periods").reads_reward_model


def test_a_registered_task_is_validated_rewarded_and_recorded(exclaims):
    args = make_args("tiny", task="exclaims")
    args.validate()
    fn = make_reward_fn(args)
    assert fn(["wow!!", "why?", "!?!"]) == [4.0, -1.0, 3.0]
    assert rewarded_by(args, fn) == {"reward": "task exclaims", "judge": None}


def test_an_unknown_task_names_the_registered_ones(exclaims):
    with pytest.raises(ConfigError, match="task: must be one of sentiment, vader, periods, first_token, arithmetic, exclaims; got 'nope'"):
        make_args("tiny", task="nope").validate()


def test_a_task_that_reads_no_reward_model_refuses_one(exclaims):
    with pytest.raises(ConfigError, match="task exclaims is scored by counting '!': drop --reward-model"):
        make_args("tiny", task="exclaims", reward_model="some/classifier").validate()


def test_a_task_name_is_registered_once():
    with pytest.raises(ValueError, match="a task named 'vader' is registered already"):
        registry.register_task(registry.Task("vader", exclamations_reward))
