"""Tasks: a name on the command line → the reward function the trainer maximises.

A reward function is any callable `(samples: list[str]) -> Tensor[batch]`; pass one directly
to `RLHFTrainer(args, reward_fn=...)` to train on your own reward.
"""

from __future__ import annotations

from functools import partial
from collections.abc import Callable

from jaxtyping import Float
from torch import Tensor

from rlhf_scratch.config import RLHFArgs
from rlhf_scratch.rewards import SentimentReward, reward_fn_char_count, reward_fn_vader

RewardFn = Callable[[list[str]], Float[Tensor, "batch"]]


def make_reward_fn(args: RLHFArgs, device: str = "cpu") -> RewardFn:
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
