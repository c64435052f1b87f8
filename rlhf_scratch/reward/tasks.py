"""Tasks: a name on the command line → the reward function the trainer maximises, and the one
place any reward function is called.

A reward function follows either contract (see `RewardFn`); `score_completions` tells them apart,
calls the function its way, and checks what came back. Pass one directly to any trainer
(`RLHFTrainer(args, reward_fn=...)`).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from functools import partial
from typing import Any

from rlhf_scratch.config import CommonArgs, registry
from rlhf_scratch.models.loading import weights_digest
from rlhf_scratch.reward.ensemble import is_ensemble, parse_ensemble
from rlhf_scratch.reward.functions import SentimentReward, reward_fn_char_count, reward_fn_vader
from rlhf_scratch.rollout.reward_call import (  # noqa: F401  (the contract, read from here too)
    RewardFn,
    RewardFunctionError,
    check_rewards,
    follows_trl_contract,
    reward_fn_name,
    score_completions,
)


def _named_partial(func: Callable, **kwargs: Any) -> partial:
    """`partial(func, **kwargs)` with a readable `__name__`, e.g. 'reward_fn_vader(direction=pos)'."""
    fn = partial(func, **kwargs)
    fn.__name__ = f"{func.__name__}({', '.join(f'{k}={v}' for k, v in kwargs.items())})"
    return fn


def make_reward_fn(args: CommonArgs, device: str = "cpu") -> RewardFn:
    """The reward of `args.task`, as its entry in the task table makes it (`config.registry.TASKS`):

    - `sentiment`: the classifier `args.reward_model`'s softmax probability of `args.direction`
      (the blog's `reward_fn_sentiment_imdb`; a reward-model run: its scalar; `min:A,B,C` or
      `mean:A,B,C`: an ensemble's, `reward.ensemble`);
    - `vader`: VADER's compound score mapped to [0, 1] toward `args.direction`;
    - `periods`: the number of '.' in the sample (the blog's first toy reward);
    - `first_token`: 1 if the first generated token is one of `FIRST_TOKENS`, else 0
      (`reward_fn_first_token`: right/wrong and blind to length, the GRPO length study's reward).
    """
    fn = registry.get_task(args.task).reward_factory()(args, device)
    fn.made_for = _task_key(args)  # so `rewarded_by` recognises the task's own reward
    return fn


def sentiment_reward(args: CommonArgs, device: str = "cpu") -> RewardFn:
    """Task sentiment: the classifier (or reward-model run) `args.reward_model` toward `args.direction`;
    or an ensemble of reward-model runs, `--reward-model min:A,B,C` (`reward.ensemble`)."""
    from rlhf_scratch.reward.ensemble import RewardEnsemble, is_ensemble

    if is_ensemble(args.reward_model):
        return RewardEnsemble(args.reward_model, direction=args.direction, device=device)
    return SentimentReward(args.reward_model, direction=args.direction, device=device)


def vader_reward(args: CommonArgs, device: str = "cpu") -> RewardFn:
    """Task vader: VADER's compound score toward `args.direction`, in [0, 1]."""
    return _named_partial(reward_fn_vader, direction=args.direction)


def periods_reward(args: CommonArgs, device: str = "cpu") -> RewardFn:
    """Task periods: the number of '.' in the sample."""
    return _named_partial(reward_fn_char_count, char=".")


def first_token_reward(args: CommonArgs, device: str = "cpu") -> RewardFn:
    """Task first_token: right iff the first generated token is one of `FIRST_TOKENS` in `args.model`'s tokenizer."""
    fn = partial(reward_fn_first_token, right_ids=first_token_ids(args.model))
    fn.__name__ = "reward_fn_first_token"
    return fn


def arithmetic_reward(args: CommonArgs, device: str = "cpu") -> RewardFn:
    """Task arithmetic: TRL's `accuracy_reward` against each prompt's `ground_truth` column (1 right, 0
    not), plus --format-weight times `format_reward` (1 for an integer answer, right or wrong) when it is
    not 0, as TRL weighs its reward functions (`reward_weights`); its parts: `arithmetic_reward_funcs`."""
    from rlhf_scratch.reward.verifiable import accuracy_reward, weighted_rewards

    if not args.format_weight:
        return accuracy_reward
    return weighted_rewards(format_weight=args.format_weight)


def arithmetic_reward_funcs(args: CommonArgs) -> list[tuple[str, RewardFn]]:
    """The arithmetic reward's parts, TRL's `reward_funcs` by name: accuracy_reward, and format_reward
    when --format-weight is not 0 (each logged as rewards/<name>/mean and /std every phase)."""
    from rlhf_scratch.reward.verifiable import accuracy_reward, format_reward

    return [("accuracy_reward", accuracy_reward)] + ([("format_reward", format_reward)] if args.format_weight else [])


FIRST_TOKENS = (",", ".", " not", " a", " so", " the", " is", " be", " really", " as")
"""The right first tokens of task `first_token`. Chosen on the tiny LM after the blog's prefix "This
movie was really" (1,024 samples of 64 tokens, seed 1): together about a fifth of the first tokens
(so a group of 8 is usually mixed at the start), and the completions they begin are about as long as
the others (24 tokens against 25): the task starts with no length in its reward, and none in its
right answers either."""


def reward_fn_first_token(*, completion_ids: list[list[int]], right_ids: frozenset[int], **kwargs: Any) -> list[float]:
    """r(y) = 1[y_1 ∈ S]: 1 if the completion's first generated token is in the set `right_ids`, else 0.

    A verifiable right/wrong reward decided by the first token alone: every later token, EOS
    included, is free, so E[r] does not depend on how long a completion goes on and the true
    gradient ∇J has no component that changes length after the first token. Whatever length does
    after it is the estimator's doing (docs/grpo.md, "The length lesson"; the microscope's `correct`
    reward is the same rule on a 5-token vocabulary). TRL's contract; an empty completion scores 0."""
    return [1.0 if ids and ids[0] in right_ids else 0.0 for ids in completion_ids]


def first_token_ids(model: str, tokens: tuple[str, ...] = FIRST_TOKENS) -> frozenset[int]:
    """The ids of `tokens` in `model`'s tokenizer; each must be exactly one token there (a ValueError
    of one line naming the first that is not)."""
    from rlhf_scratch.models.loading import load_tokenizer

    tokenizer = load_tokenizer(model)
    ids = []
    for text in tokens:
        encoded = tokenizer.encode(text, add_special_tokens=False)
        if len(encoded) != 1:
            raise ValueError(f"task: first_token needs {text!r} to be one token of {model}'s tokenizer; it is {len(encoded)}")
        ids.append(encoded[0])
    return frozenset(ids)


def _task_key(args: CommonArgs) -> tuple:
    return (args.task, args.direction, args.reward_model)


def qualified_name(fn: Callable) -> str:
    """`module.qualname` of a function, or of a callable instance's class (a partial: its function's)."""
    if isinstance(fn, partial):
        return qualified_name(fn.func)
    target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isclass(fn) else type(fn)
    return f"{getattr(target, '__module__', None) or '?'}.{getattr(target, '__qualname__', type(fn).__name__)}"


def rewarded_by(args: CommonArgs, reward_fn: RewardFn | None, judge: Callable | None = None) -> dict:
    """What scores a run's samples, as its config.json records it: `task <name>` for the task's
    own reward (`make_reward_fn(args)`, which `--resume` rebuilds from the config), else
    `python <module>.<qualname>` of the callable (which only Python can pass again); a judge the
    same way (`judge <name>` for `make_judge(args.judge, ...)`), or None."""
    if reward_fn is None or getattr(reward_fn, "made_for", None) == _task_key(args):
        reward = f"task {args.task}"
    else:
        reward = f"python {qualified_name(reward_fn)}"
    if judge is None:
        judged = None
    elif getattr(judge, "made_for", None) == (getattr(args, "judge", None), args.direction):
        judged = f"judge {args.judge}"
    else:
        judged = f"python {qualified_name(judge)}"
    record = {"reward": reward, "judge": judged}
    if reward == "task sentiment":  # a local classifier or reward model: which weights, exactly
        digest = weights_digest(args.reward_model) if args.reward_model != "tiny" else None
        if digest is None and is_ensemble(args.reward_model):  # each member's, in the spec's order
            members = [weights_digest(m) or "no weights" for m in parse_ensemble(args.reward_model).members]
            digest = hashlib.sha256("\n".join(members).encode()).hexdigest()
        if digest is not None:
            record["reward_model_sha256"] = digest
    return record
