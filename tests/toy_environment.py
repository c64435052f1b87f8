"""A toy environment that owns its reward (issue 58), registered only while a test runs it: the proof
that `Step.reward` is the episode's score, on both backends, and that an environment's tool counts reach
the run's metrics through the contract alone (`rollout.environment.CountsToolCalls`).

    a model turn that ends at the token "1"      a "call": answered with the token "+", counted
    a call that is the token "1" alone           an "error" too
    every turn                                   Step.reward = −(the model's turns so far)

so an episode's score is −(its model turns): the run's rewards/mean must be −episodes/model_turns/mean, whatever the
task's reward function would have said. Any tokenizer with the characters "1" and "+" can play (the
shipped arithmetic model's, its calculator sibling's).

The controller's workers are processes of their own: they know the toy through the registry's plugin hook
(`registry.PLUGINS_ENV` = PLUGIN, read by each process when its table is first read).
"""

from __future__ import annotations

from pathlib import Path

from rlhf_scratch.config import registry
from rlhf_scratch.rollout.environment import Step

TOY_ENV = "toy_turns"
PLUGIN = f"{Path(__file__).resolve()}:register"


class TurnCounter:
    """One episode: every turn costs −1, every turn ending at `stop_id` is a call answered with `reply_id`."""

    def __init__(self, stop_id: int, reply_id: int) -> None:
        self.stop_id, self.reply_id = stop_id, reply_id
        self.turns = self.calls = self.errors = 0

    def reset(self) -> tuple[int, ...]:
        return ()

    def step(self, turn_ids: tuple[int, ...]) -> Step:
        self.turns += 1
        called = bool(turn_ids) and turn_ids[-1] == self.stop_id
        self.calls += called
        self.errors += called and len(turn_ids) == 1
        return Step(observation=(self.reply_id,) if called else (), reward=-float(self.turns), done=not called)


class TurnCounters:
    """The factory (`rollout.environment.EnvironmentFactory`): "1" ends a turn."""

    def __init__(self, tokenizer) -> None:
        vocab = tokenizer.get_vocab()
        self.stop_ids, self.reply_id = (vocab["1"],), vocab["+"]

    def __call__(self, prompt: str) -> TurnCounter:
        return TurnCounter(self.stop_ids[0], self.reply_id)


def make(args, tokenizer) -> TurnCounters:
    return TurnCounters(tokenizer)


def register() -> None:
    """Add the toy to the registry's environments (nothing if it is there already)."""
    if TOY_ENV not in registry.ENVIRONMENTS:
        registry.register_env(registry.Environment(TOY_ENV, make, description="tests only: the reward is −(turns)"))
