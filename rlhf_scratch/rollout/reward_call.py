"""The reward-call contract: the one place any reward function is called, by the rollout.

A reward function follows either contract (see `RewardFn`); `score_completions` tells them apart,
calls the function its way, and checks what came back. Which function a task name means is the
reward layer's (`reward.tasks.make_reward_fn`).
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

RewardFn = Callable[..., Any]
"""A reward function, under either of two contracts:

- the blog's: `fn(samples: list[str]) -> Tensor[batch]`, `samples[i] = prompts[i] + completions[i]`
  (`reward_fn_sentiment_imdb`, `reward_fn_vader`, `reward_fn_char_count`, a `partial` of one,
  a `SentimentReward`);
- TRL's custom-reward contract: `fn(prompts=..., completions=..., completion_ids=..., **columns)
  -> list[float]` (or a tuple, numpy array or tensor), so a TRL user's reward works unchanged.
  A function is TRL-style when it takes a `completions` keyword or `**kwargs`.

Either way: one finite number per completion. None (TRL's "no reward"), NaN and ±inf are errors.
"""


class RewardFunctionError(ValueError):
    """A reward function returned something we must not train on (one line naming it)."""


def reward_fn_name(fn: RewardFn) -> str:
    """A readable name for messages: `fn.__name__` if it has one (functions, our partials,
    `SentimentReward`), else a partial's function's, else the class's."""
    name = getattr(fn, "__name__", None)
    if isinstance(name, str):
        return name
    if isinstance(fn, partial):
        return reward_fn_name(fn.func)
    return type(fn).__name__


def follows_trl_contract(fn: RewardFn) -> bool:
    """Whether `fn` takes the keyword `completions=` (or **kwargs), as TRL's rewards do.

    `inspect.signature` sees through partials (bound arguments removed) and reads a callable
    instance's `__call__` (without `self`), so both are judged by what they really accept.
    """
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature: call it the blog's way
        return False
    by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return (("completions" in params and params["completions"].kind in by_keyword)
            or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()))


def _short(value: Any, limit: int = 60) -> str:
    """repr(value) on one line, cut to `limit` characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def environment_scores(scores: Float[Tensor, " batch"], env_rewards: Float[Tensor, " batch"] | None) -> Float[Tensor, " batch"]:
    """Each episode's score: its environment's reward where the environment owns one (a number in
    `env_rewards`: `Step.reward`, TRL's environment-owned rewards; `rollout.environment`), else the reward
    function's `scores` (`rollout.phase.compute_scores` calls it, in process and in the controller's reward worker).

        scores [0.5, 1.0, 0.0],  env_rewards [NaN, −2.0, 3.0]  ->  [0.5, −2.0, 3.0]"""
    if env_rewards is None:
        return scores
    return torch.where(env_rewards.isnan(), scores, env_rewards.to(scores.dtype))


def check_rewards(out: Any, name: str, n: int) -> Float[Tensor, " batch"]:
    """`out` as a float32 CPU tensor of shape [n], or one line naming `name` and the first bad
    completion: wrong length or shape, a non-number, None, NaN or ±inf."""
    where = f"reward function {name!r}"
    ndim = getattr(out, "ndim", None)
    if ndim is not None and ndim != 1:  # tensors and numpy arrays: one reward per completion
        shape = tuple(getattr(out, "shape", ()))
        raise RewardFunctionError(f"{where} returned a {ndim}-D {type(out).__name__} of shape {shape}, "
                                  f"not one reward per completion (shape ({n},))")
    values = out.detach().tolist() if isinstance(out, Tensor) else out  # one read, from any device
    values = values.tolist() if hasattr(values, "tolist") else values  # numpy arrays
    if not isinstance(values, (list, tuple)):
        got = "None" if out is None else f"a {type(out).__name__}"
        raise RewardFunctionError(f"{where} returned {got}, not a list of {n} rewards")
    if len(values) != n:
        raise RewardFunctionError(f"{where} returned {len(values)} rewards for {n} completions")
    rewards = []
    for i, v in enumerate(values):
        if getattr(v, "ndim", None) == 0 and hasattr(v, "item"):  # numpy scalars, 0-d tensors
            v = v.item()
        if v is None:
            raise RewardFunctionError(f"{where} returned None for completion {i}")
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise RewardFunctionError(f"{where}: reward {i} is {_short(v)}, not a number")
        if not math.isfinite(v):
            raise RewardFunctionError(f"{where} returned {float(v)} for completion {i}")
        rewards.append(float(v))
    return torch.tensor(rewards, dtype=torch.float32).reshape(n)


def score_completions(
    reward_fn: RewardFn,
    prompts: list[str],
    completions: list[str],
    completion_ids: list[list[int]],
    **kwargs: Any,
) -> Float[Tensor, " batch"]:
    """Call `reward_fn` by its contract and check what it returned; float32 rewards on the CPU.

    TRL's contract gets `prompts`, `completions`, `completion_ids` and `kwargs` (dataset columns)
    as keywords; the blog's gets `[prompt + completion, ...]`. Wrong length, a non-number, None,
    NaN or ±inf stops the run with one line naming the function and the first bad completion —
    never trained on.
    """
    if not len(prompts) == len(completions) == len(completion_ids):
        raise ValueError(f"score_completions: {len(prompts)} prompts, {len(completions)} completions and "
                         f"{len(completion_ids)} completion_ids; need one of each per sample")
    name = reward_fn_name(reward_fn)
    if follows_trl_contract(reward_fn):
        call = dict(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        try:
            inspect.signature(reward_fn).bind(**call)
        except TypeError as err:
            raise RewardFunctionError(f"reward function {name!r} cannot be called as TRL calls it ({err}); "
                                      "give it **kwargs") from None
        out = reward_fn(**call)
    else:
        out = reward_fn([p + c for p, c in zip(prompts, completions)])
    return check_rewards(out, name, len(completions))


def reward_func_metrics(reward_funcs: list[tuple[str, RewardFn]], prompts: list[str], completions: list[str],
                        completion_ids: list[list[int]], **columns: Any) -> dict[str, float]:
    """TRL's per-function reward metrics: each of a reward's parts (TRL's `reward_funcs`, named) called as
    `score_completions` calls a reward, `rewards/<name>/mean` and `rewards/<name>/std` (TRL's names; the
    std with n − 1, as torch's) over the completions given."""
    metrics = {}
    for name, fn in reward_funcs:
        scores = score_completions(fn, prompts, completions, completion_ids, **columns)
        metrics[f"rewards/{name}/mean"] = scores.mean().item()
        metrics[f"rewards/{name}/std"] = scores.std().item() if len(scores) > 1 else 0.0
    return metrics
