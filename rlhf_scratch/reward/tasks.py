"""Tasks: a name on the command line → the reward function the trainer maximises, and the one
place any reward function is called.

A reward function follows either contract (see `RewardFn`); `score_completions` tells them apart,
calls the function its way, and checks what came back. Pass one directly to any trainer
(`RLHFTrainer(args, reward_fn=...)`).
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

from rlhf_scratch.config import CommonArgs
from rlhf_scratch.loading import weights_digest
from rlhf_scratch.reward.functions import SentimentReward, reward_fn_char_count, reward_fn_vader

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


def _named_partial(func: Callable, **kwargs: Any) -> partial:
    """`partial(func, **kwargs)` with a readable `__name__`, e.g. 'reward_fn_vader(direction=pos)'."""
    fn = partial(func, **kwargs)
    fn.__name__ = f"{func.__name__}({', '.join(f'{k}={v}' for k, v in kwargs.items())})"
    return fn


def make_reward_fn(args: CommonArgs, device: str = "cpu") -> RewardFn:
    """The reward of `args.task`, a blog-style callable `(samples) -> Tensor[batch]`:

    - `sentiment`: the classifier `args.reward_model`'s softmax probability of `args.direction`
      (the blog's `reward_fn_sentiment_imdb`);
    - `vader`: VADER's compound score mapped to [0, 1] toward `args.direction`;
    - `periods`: the number of '.' in the sample (the blog's first toy reward);
    - `first_token`: 1 if the first generated token is one of `FIRST_TOKENS`, else 0
      (`reward_fn_first_token`: right/wrong and blind to length, the GRPO length study's reward).
    """
    if args.task == "sentiment":
        fn = SentimentReward(args.reward_model, direction=args.direction, device=device)
    elif args.task == "vader":
        fn = _named_partial(reward_fn_vader, direction=args.direction)
    elif args.task == "periods":
        fn = _named_partial(reward_fn_char_count, char=".")
    elif args.task == "first_token":
        fn = partial(reward_fn_first_token, right_ids=first_token_ids(args.model))
        fn.__name__ = "reward_fn_first_token"
    else:
        raise ValueError(f"task: unknown task {args.task!r}")
    fn.made_for = _task_key(args)  # so `rewarded_by` recognises the task's own reward
    return fn


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
    from rlhf_scratch.loading import load_tokenizer

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
        if digest is not None:
            record["reward_model_sha256"] = digest
    return record




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


def check_rewards(out: Any, name: str, n: int) -> Float[Tensor, " batch"]:
    """`out` as a float32 CPU tensor of shape [n], or one line naming `name` and the first bad
    completion: wrong length or shape, a non-number, None, NaN or ±inf."""
    where = f"reward function {name!r}"
    ndim = getattr(out, "ndim", None)
    if ndim is not None and ndim != 1:  # tensors and numpy arrays: one reward per completion
        shape = tuple(getattr(out, "shape", ()))
        raise RewardFunctionError(f"{where} returned a {ndim}-D {type(out).__name__} of shape {shape}, "
                                  f"not one reward per completion (shape ({n},))")
    values = out.detach().cpu().tolist() if isinstance(out, Tensor) else out
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
