"""Issue 58, items 5 and 6: an episode's record — the environment's own reward, its turns, its tool calls
and errors, the tokens of each author — carried in the rollout (`episodes.episode_columns`), scored
(`phase.compute_scores`: the environment's reward where it owns one), and logged (`episodes.episode_metrics`:
verl's num_turns, TRL's tools/call_frequency and tools/failure_frequency, the reward by number of calls).
Every number here is worked by hand."""

import math

import pytest
import torch

from rlhf_scratch.commands.arithmetic_lm import build_tokenizer
from rlhf_scratch.engine.batch import batch_of, gather_batch
from rlhf_scratch.reward.calculator import CalculatorFactory
from rlhf_scratch.rollout.environment import CountsToolCalls, Step, tool_counts
from rlhf_scratch.rollout.episodes import Episode, assemble_completions, episode_columns, episode_metrics, take_turn
from rlhf_scratch.rollout.groups import concat_rollouts, take_groups
from rlhf_scratch.rollout.phase import Rollout, compute_scores
from rlhf_scratch.rollout.reward_call import environment_scores
from rlhf_scratch.rollout.rl_dataset import Prompt

SIBLING = build_tokenizer(calculator=True)  # <calc> 15, </calc> 16, ? 17; EOS 0
EOS = 0


def episode(segments, turns, counts, reward=None):
    e = Episode(turns=turns, done=True, reward=reward, tool_counts=counts)
    for ids, by_model in segments:
        e.add(ids, by_model)
    return e


# Four episodes with asymmetric numbers: the model's and the environment's tokens, turns, calls and errors all differ,
# so swapping any two of them, or averaging errors per episode instead of per call, gives another number.
EPISODES = [
    episode([((5, 6, 16), True), ((7, 8), False), ((9, EOS), True)], turns=2, counts=(1, 0), reward=None),
    episode([((9, EOS), True)], turns=1, counts=(0, 0), reward=None),
    episode([((16,), True), ((17,), False), ((16,), True), ((7, 8), False), ((EOS,), True)], turns=3, counts=(2, 1), reward=-0.5),
    episode([((5, 5, EOS), True)], turns=1, counts=(0, 0), reward=None),
]


def rollout_of(episodes, rewards, gen_len=9, prompts=None):
    ids, mask = assemble_completions(episodes, gen_len, pad=EOS)
    n = len(episodes)
    return Rollout(prompt_ids=torch.ones(n, 2, dtype=torch.long), completion_ids=ids, completion_mask=mask,
                   attention_mask=torch.ones(n, 2 + gen_len, dtype=torch.bool), rewards=torch.tensor(rewards),
                   scores=torch.tensor(rewards), prompts=prompts or [f"p{i // 2}" for i in range(n)], completions=["x"] * n,
                   num_generations=2, eos_token_id=EOS, **episode_columns(episodes))


def test_episode_columns_are_each_episodes_record():
    columns = episode_columns(EPISODES)
    assert columns["num_turns"].tolist() == [2, 1, 3, 1]
    assert columns["tool_calls"].tolist() == [1, 0, 2, 0] and columns["tool_errors"].tolist() == [0, 0, 1, 0]
    assert columns["env_tokens"].tolist() == [2, 0, 3, 0]
    rewards = columns["env_rewards"].tolist()
    assert math.isnan(rewards[0]) and math.isnan(rewards[1]) and rewards[2] == -0.5 and math.isnan(rewards[3])
    uncounted = episode_columns([*EPISODES[:3], episode([((5, EOS), True)], 1, None)])
    assert uncounted["tool_calls"] is None and uncounted["tool_errors"] is None, "one environment does not count: no counts"


def test_episode_metrics_by_hand():
    """turns [2, 1, 3, 1]; calls [1, 0, 2, 0], errors [0, 0, 1, 0]; rewards [1, 0, −0.5, 0.5];
    model tokens [5, 2, 3, 3], environment tokens [2, 0, 3, 0]."""
    metrics = episode_metrics(rollout_of(EPISODES, [1.0, 0.0, -0.5, 0.5]))
    assert metrics == pytest.approx({
        "episodes/model_turns/min": 1.0, "episodes/model_turns/max": 3.0, "episodes/model_turns/mean": 7 / 4,
        "tools/call_frequency": 3 / 4,              # calls per episode (not episodes with a call: 2/4)
        "tools/failure_frequency": 1 / 3,           # errors per call (not per episode: 1/4)
        "tools/reward_by_calls/0": (0.0 + 0.5) / 2, "tools/reward_by_calls/1": 1.0, "tools/reward_by_calls/2+": -0.5,
        "episodes/model_tokens": 13 / 4,            # what is trained
        "episodes/env_tokens": 5 / 4,               # what is not
    })


def test_episode_metrics_without_calls_without_counts_and_without_an_environment():
    one_turn = [episode([((5, EOS), True)], 1, (0, 0)), episode([((6, 7, EOS), True)], 1, (0, 0))]
    metrics = episode_metrics(rollout_of(one_turn, [0.25, 0.75]))
    assert metrics["tools/failure_frequency"] == 0.0 and metrics["tools/call_frequency"] == 0.0  # no call: no failure
    assert metrics["tools/reward_by_calls/0"] == 0.5
    assert math.isnan(metrics["tools/reward_by_calls/1"]) and math.isnan(metrics["tools/reward_by_calls/2+"])
    uncounted = [episode([((5, EOS), True)], 1, None), episode([((6, EOS), True)], 1, None)]
    assert not any(k.startswith("tools/") for k in episode_metrics(rollout_of(uncounted, [0.0, 1.0])))
    plain = rollout_of(one_turn, [0.0, 1.0])
    plain.num_turns = None
    assert episode_metrics(plain) == {}


class Validating:
    """A trainer's `generate_sequences` for `dataflow.validate`: prompt "a" gives EPISODES[0:2], "b" EPISODES[2:4]."""

    def generate_sequences(self, prompts, validate):
        assert validate["n"] == 2
        rows = [e for p in prompts for e in EPISODES[2 * "ab".index(p): 2 * "ab".index(p) + 2]]
        return rollout_of(rows, [0.0] * len(rows), prompts=[p for p in prompts for _ in range(2)])


def test_a_validation_keeps_each_samples_record_and_logs_the_held_out_episodes():
    """`dataflow.validate` (one prompt a call here) keeps the record in prompt order; the held-out metrics are the
    training phase's under eval/, by hand as above, without the reward by calls (a task's evaluation gives no per-sample reward)."""
    from rlhf_scratch.engine.dataflow import validate
    from rlhf_scratch.rollout.episodes import held_out_episode_metrics

    samples = validate(Validating(), ["b", "a"], n=2, key="k", rows_per_call=2)
    assert samples["prompts"] == ["b", "b", "a", "a"] and samples["lengths"] == [3, 3, 5, 2]
    assert samples["episodes"] == {"num_turns": [3, 1, 2, 1], "tool_calls": [2, 0, 1, 0], "tool_errors": [1, 0, 0, 0],
                                   "env_tokens": [3, 0, 2, 0]}
    assert held_out_episode_metrics(samples["episodes"], samples["lengths"]) == pytest.approx({
        "eval/episodes/model_turns/min": 1.0, "eval/episodes/model_turns/max": 3.0, "eval/episodes/model_turns/mean": 7 / 4,
        "eval/tools/call_frequency": 3 / 4, "eval/tools/failure_frequency": 1 / 3,
        "eval/episodes/model_tokens": 13 / 4, "eval/episodes/env_tokens": 5 / 4})


def test_the_record_travels_with_the_rollout_through_groups_and_the_gather():
    """DAPO's kept groups (`take_groups`, `concat_rollouts`) and the batch's gather keep every row's record in order."""
    full = rollout_of(EPISODES, [1.0, 0.0, -0.5, 0.5])
    full.scores = full.rewards = None  # (groups are taken before the log-probs; the record is there already)
    swapped = take_groups(full, [1, 0])
    assert swapped.num_turns.tolist() == [3, 1, 2, 1] and swapped.tool_errors.tolist() == [1, 0, 0, 0]
    assert swapped.env_rewards[0].item() == -0.5 and swapped.env_tokens.tolist() == [3, 0, 2, 0]
    both = concat_rollouts([swapped, full])
    assert both.tool_calls.tolist() == [2, 0, 1, 0, 1, 0, 2, 0]
    scored = rollout_of(EPISODES, [1.0, 0.0, -0.5, 0.5])
    scored.logprobs, scored.entropy = torch.zeros(4, 9), torch.zeros(4, 9)  # (a gathered batch has its log-probs)
    for everyone in (gather_batch(scored).everyone, batch_of(scored).everyone):
        assert everyone.num_turns.tolist() == [2, 1, 3, 1] and everyone.env_tokens.tolist() == [2, 0, 3, 0]
        assert everyone.tool_calls.tolist() == [1, 0, 2, 0] and everyone.tool_errors.tolist() == [0, 0, 1, 0]


def test_the_record_crosses_the_controllers_batch():
    """`from_rollout` / `to_rollout`: what the worker group sends and gets back (its DataProto) holds the record."""
    from rlhf_scratch.controller.workers import from_rollout, to_rollout

    rollout = rollout_of(EPISODES, [1.0, 0.0, -0.5, 0.5])
    back = to_rollout(from_rollout(rollout, pad_id=EOS))
    for name in ("num_turns", "tool_calls", "tool_errors", "env_tokens"):
        assert torch.equal(getattr(back, name), getattr(rollout, name)), name
    assert torch.equal(back.env_rewards.isnan(), rollout.env_rewards.isnan()) and back.env_rewards[2].item() == -0.5


def test_environment_scores_take_the_environments_reward_where_it_gives_one():
    nan = float("nan")
    got = environment_scores(torch.tensor([0.5, 1.0, 0.0]), torch.tensor([nan, -2.0, 3.0]))
    assert got.tolist() == [0.5, -2.0, 3.0]
    assert environment_scores(torch.tensor([0.5, 1.0]), None).tolist() == [0.5, 1.0]


def test_compute_scores_asks_the_task_only_for_the_episodes_the_environment_did_not_score():
    """Mixed: the task's reward scores all and the environment's replaces it where given, then the missing-EOS penalty
    (episode 2 has no EOS: its segments end at the reply); owned by every episode: the task's reward is not called."""
    calls = []

    def task_reward(completions, **kwargs):
        calls.append(len(completions))
        return [0.25, 0.5, 0.75, 1.0]

    mixed = [*EPISODES[:2], episode([((16,), True), ((17,), False)], turns=1, counts=(1, 1), reward=4.0), EPISODES[3]]
    scored = compute_scores(rollout_of(mixed, [0.0] * 4), task_reward, missing_eos_penalty=1.0)
    assert calls == [4] and scored.scores.tolist() == [0.25, 0.5, 4.0, 1.0]
    assert scored.rewards.tolist() == [0.25, 0.5, 3.0, 1.0]

    def never(completions, **kwargs):
        raise AssertionError("the environment owns every episode's reward: the task's reward is not asked")

    owned = [episode([((5, EOS), True)], 1, (0, 0), reward=-1.0), episode([((6, EOS), True)], 2, (1, 0), reward=-2.0)]
    assert compute_scores(rollout_of(owned, [0.0, 0.0]), never).scores.tolist() == [-1.0, -2.0]


class Counting:
    """An environment with the optional counts (`CountsToolCalls`): every turn is a call, every second one an error."""

    def __init__(self):
        self.calls = self.errors = 0

    def reset(self):
        return ()

    def step(self, turn_ids):
        self.calls += 1
        self.errors += self.calls % 2 == 0
        return Step(observation=(7,))


class Silent:
    """An environment without them."""

    def reset(self):
        return ()

    def step(self, turn_ids):
        return Step(observation=(7,))


def test_take_turn_reads_the_counts_of_an_environment_that_keeps_them():
    counting, silent = Counting(), Silent()
    assert isinstance(counting, CountsToolCalls) and not isinstance(silent, CountsToolCalls)
    assert tool_counts(silent) is None
    kept, unkept = Episode(), Episode()
    for _ in range(3):
        take_turn(kept, counting, (5, 16), (EOS,), gen_len=30, max_turns=4)
        take_turn(unkept, silent, (5, 16), (EOS,), gen_len=30, max_turns=4)
    assert kept.tool_counts == (3, 1) and unkept.tool_counts is None
    calculator, episode_ = CalculatorFactory(SIBLING)(Prompt("4*5=")), Episode()
    take_turn(episode_, calculator, tuple(SIBLING.encode("<calc>4*5</calc>", add_special_tokens=False)), (EOS,), 30, 4)
    take_turn(episode_, calculator, tuple(SIBLING.encode("<calc>4*</calc>", add_special_tokens=False)), (EOS,), 30, 4)
    assert episode_.tool_counts == (2, 1), "the calculator counts its calls and its errors"
