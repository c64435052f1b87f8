"""The environment contract of a multi-turn episode (issue 58), as small as verl's AgentLoop and TRL's
environments: made from one prompt row, it may open with an observation, then answers each of the
model's turns.

    env = make(prompt)                     one per completion; `prompt` is a `rl_dataset.Prompt`: its row's
                                           columns (the arithmetic task's ground_truth) are `prompt.columns`
    env.reset()          -> ids            the first observation's token ids, appended after the prompt
                                           (() for none: the model speaks first)
    env.step(turn_ids)   -> Step           the model's turn, its token ids EXACTLY as sampled (never
                                           decoded and encoded again), ending at a stop token, EOS,
                                           or the token budget; Step says what comes next:
        Step.observation                   token ids appended after the turn (the tool's reply)
        Step.reward                        the episode's reward when the environment owns one, else None
        Step.done                          whether the episode is over

Token in, token out: the environment reads ids and writes ids. It may decode the turn to read it (the
calculator does), but what the episode records, and what is trained on, is the ids the model sampled
(`episodes.Episode`); the observation is appended as the ids the environment returned, and the model
continues from those ids, never from a re-tokenised text (the bug of verl#3960, trl#5145, minimind#850).

`stop_ids` are the tokens that end a model turn besides EOS (the calculator's `</calc>`): generation
stops a row there and hands its turn to the environment. An environment whose stop tokens the
tokenizer lacks has none, and each episode is one turn: the single-turn rollout, token for token.

Optional: an environment that calls tools may count them, `calls` and `errors` (the calls answered with
an error) as attributes of the episode's environment (`CountsToolCalls`; the calculator does). The
episode reads them after each turn (`tool_counts`), and the run logs TRL's tools/call_frequency and
tools/failure_frequency from them (`episodes.episode_metrics`); an environment without them logs none.

An environment is registered as a task is (`config.registry.register_env`): a "module:function"
`make(args, tokenizer) -> factory`, where `factory(prompt) -> Environment` and `factory.stop_ids` are the
stop tokens of the run (`EnvironmentFactory`). `--env NAME` chooses one; episodes run up to `--max-turns`
model turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Step:
    """What an environment answers to one model turn."""

    observation: tuple[int, ...] = ()
    """Token ids appended after the turn (the tool's reply; () for none)."""
    reward: float | None = None
    """The episode's reward when the environment owns one (a game's score); None: the task's reward
    function scores the episode."""
    done: bool = False
    """Whether the episode is over (after this turn, nothing more is sampled)."""


@runtime_checkable
class Environment(Protocol):
    """One episode's environment (see the module docstring): everything the rollout calls."""

    def reset(self) -> tuple[int, ...]:
        """The first observation's token ids, put after the prompt before the model's first turn; () for none."""
        ...

    def step(self, turn_ids: tuple[int, ...]) -> Step:
        """The model's turn, its token ids exactly as sampled; what follows it."""
        ...


@runtime_checkable
class CountsToolCalls(Protocol):
    """The optional part of the contract: an environment that counts its episode's tool calls."""

    calls: int
    """Tool calls so far in this episode."""
    errors: int
    """Of them, the ones answered with an error (malformed, failed, over a limit)."""


def tool_counts(env: Environment) -> tuple[int, int] | None:
    """(calls, errors) so far of an environment that counts them (`CountsToolCalls`), else None."""
    return (int(env.calls), int(env.errors)) if isinstance(env, CountsToolCalls) else None


@runtime_checkable
class EnvironmentFactory(Protocol):
    """What a registered environment's `make(args, tokenizer)` returns: one environment per prompt row,
    and the tokens that end a model turn besides EOS."""

    stop_ids: tuple[int, ...]

    def __call__(self, prompt: str) -> Environment:
        ...


def make_environment_factory(args, tokenizer) -> EnvironmentFactory | None:
    """The run's environment factory (`--env NAME`, the registry's entry), or None without `--env`."""
    if not args.env:
        return None
    from rlhf_scratch.config import registry

    return registry.get_env(args.env).factory()(args, tokenizer)
