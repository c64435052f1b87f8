"""Tasks: a name on the command line → the reward function the trainer maximises, and the one
place any reward function is called.

A reward function follows either contract:
- the blog's: `fn(samples: list[str]) -> Tensor[batch]`, each sample the prompt followed by its
  completion (`reward_fn_sentiment_imdb`, `reward_fn_vader`, `reward_fn_char_count`);
- TRL's custom-reward contract: `fn(prompts=..., completions=..., completion_ids=..., **kwargs)
  -> list[float]` (or a tensor / array), so a TRL user's reward works here unchanged.
Pass one directly to any trainer (`RLHFTrainer(args, reward_fn=...)`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from rlhf_scratch.config import CommonArgs
from rlhf_scratch.rewards import SentimentReward, reward_fn_char_count, reward_fn_vader

RewardFn = Callable[..., Any]


class RewardFunctionError(ValueError):
    """A reward function returned something we must not train on (one line naming it)."""


def make_reward_fn(args: CommonArgs, device: str = "cpu") -> RewardFn:
    """The reward of `args.task`:

    - `sentiment`: the classifier `args.reward_model`'s softmax probability of `args.direction`
      (the blog's `reward_fn_sentiment_imdb`);
    - `vader`: VADER's compound score mapped to [0, 1] toward `args.direction`;
    - `periods`: the number of '.' in the sample (the blog's first toy reward).
    """
    if args.task == "sentiment":
        return SentimentReward(args.reward_model, direction=args.direction, device=device)
    if args.task == "vader":
        return partial(reward_fn_vader, direction=args.direction)
    if args.task == "periods":
        return partial(reward_fn_char_count, char=".")
    raise ValueError(f"task: unknown task {args.task!r}")


def reward_fn_name(fn: RewardFn) -> str:
    """A readable name for messages: the function's, a partial's function's, or the class's."""
    while isinstance(fn, partial):
        fn = fn.func
    return getattr(fn, "__name__", None) or type(fn).__name__


def follows_trl_contract(fn: RewardFn) -> bool:
    """Whether `fn` takes keyword arguments `completions=` (or **kwargs), as TRL's rewards do."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature: call it the blog's way
        return False
    return "completions" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def score_completions(
    reward_fn: RewardFn,
    prompts: list[str],
    completions: list[str],
    completion_ids: list[list[int]],
    **kwargs: Any,
) -> Float[Tensor, "batch"]:
    """Call `reward_fn` by its contract and check what it returned; float32 rewards on the CPU.

    TRL's contract gets `prompts`, `completions`, `completion_ids` and `kwargs` as keywords; the
    blog's gets `[prompt + completion, ...]`. Wrong length, a non-number, None, NaN or ±inf stops
    the run with one line naming the function and the first bad completion — never trained on.
    """
    name = reward_fn_name(reward_fn)
    if follows_trl_contract(reward_fn):
        out = reward_fn(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
    else:
        out = reward_fn([p + c for p, c in zip(prompts, completions)])
    values = out.detach().cpu().tolist() if isinstance(out, Tensor) else out
    values = values.tolist() if hasattr(values, "tolist") else values  # numpy arrays
    if isinstance(values, (int, float)) or not hasattr(values, "__len__"):
        raise RewardFunctionError(f"reward function {name!r} returned {type(out).__name__}, not one reward per completion")
    if len(values) != len(completions):
        raise RewardFunctionError(
            f"reward function {name!r} returned {len(values)} rewards for {len(completions)} completions")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise RewardFunctionError(f"reward function {name!r}: reward {i} is {v!r}, not a number")
        if not math.isfinite(v):
            raise RewardFunctionError(f"reward function {name!r} returned {v} for completion {i}")
    return torch.tensor(values, dtype=torch.float32)
