"""Reward functions: text samples in, one scalar per sample out.

Every reward here follows the blog's contract, `(samples: list[str], ...) -> Float[Tensor, " batch"]`,
each sample the prompt followed by its completion. The trainer calls any reward (these, or a
TRL-style `fn(prompts=, completions=, completion_ids=, **kwargs)`) through
`rollout.reward_call.score_completions`, which tells the two contracts apart and checks every reward.

- `reward_fn_char_count`: the blog's first toy reward, the number of periods.
- `reward_fn_sentiment_imdb`: the blog's sentiment reward, a classifier's softmax probability.
- `reward_fn_vader`: a non-learned sentiment reward from the VADER lexicon.
- `normalize_reward`: whitening across the batch, as in the blog.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from jaxtyping import Float
from torch import Tensor

from rlhf_scratch.models.loading import TINY, load_classifier

DIRECTIONS = ("pos", "neg")


def _as_list(samples: list[str] | str) -> list[str]:
    return [samples] if isinstance(samples, str) else list(samples)


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'pos' or 'neg', got {direction!r}")


def reward_fn_char_count(generated_sample: list[str] | str, char: str = ".") -> Float[Tensor, " batch"]:
    """r_i = number of occurrences of `char` in sample i (the blog's "periods" reward)."""
    return torch.tensor([float(s.count(char)) for s in _as_list(generated_sample)])


def normalize_reward(reward: Float[Tensor, " batch"], eps: float = 1e-5) -> Float[Tensor, " batch"]:
    """r_i <- (r_i - mean(r)) / (std(r) + eps), std unbiased (torch default).

    A constant batch gives zeros (0 / eps), never NaN; a batch of one gives zero too.
    """
    if reward.numel() < 2:
        return torch.zeros_like(reward)
    return (reward - reward.mean()) / (reward.std() + eps)


@lru_cache(maxsize=4)
def _cached_classifier(name: str, device: str):
    """The `(classifier, tokenizer)` of `--reward-model name`: a Hugging Face classifier (`tiny`, a
    folder, a Hub id, a reward model's export) or a reward-model run folder."""
    from rlhf_scratch.reward.model import is_reward_model_run, reward_model_classifier

    if is_reward_model_run(name):  # python -m rlhf_scratch.reward_model's run folder
        return reward_model_classifier(name, device)
    return load_classifier(name, device)


@torch.inference_mode()
def classifier_logits(
    samples: list[str], classifier: tuple, batch_size: int = 64, max_length: int = 512
) -> Float[Tensor, "batch n_labels"]:
    """A sequence classifier's logits, batched with padding and truncation, on the classifier's device."""
    model, tokenizer = classifier
    device = next(model.parameters()).device
    max_length = min(max_length, getattr(model.config, "n_positions", None)
                     or getattr(model.config, "max_position_embeddings", None) or max_length)
    probs = []
    for start in range(0, len(samples), batch_size):
        batch = tokenizer(samples[start : start + batch_size], padding=True, truncation=True,
                          max_length=max_length, return_tensors="pt").to(device)
        probs.append(model(**batch).logits.float())  # left on the classifier's device: the caller reads the rewards once
    n_labels = model.config.num_labels
    return torch.cat(probs) if probs else torch.zeros(0, n_labels)


def reward_fn_sentiment_imdb(
    gen_sample: list[str] | str, direction: str = "pos", classifier: tuple | None = None
) -> Float[Tensor, " batch"]:
    """The blog's sentiment reward: r_i = softmax(classifier(sample_i))[label].

    label = 1 (positive) for direction "pos", 0 (negative) for "neg", the label order of
    `lvwerra/distilbert-imdb`. `classifier` is a `(model, tokenizer)` pair from
    `load_classifier`; by default the shipped `tiny` classifier (loaded once, then cached).
    """
    _check_direction(direction)
    classifier = classifier or _cached_classifier(TINY, "cpu")
    logits = classifier_logits(_as_list(gen_sample), classifier)
    if logits.shape[-1] == 1:  # a reward model (python -m rlhf_scratch.reward_model): its scalar is the reward
        return logits[:, 0] if direction == "pos" else -logits[:, 0]
    return logits.softmax(dim=-1)[:, 1 if direction == "pos" else 0]


@lru_cache(maxsize=1)
def _vader():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()


def reward_fn_vader(gen_sample: list[str] | str, direction: str = "pos") -> Float[Tensor, " batch"]:
    """Lexicon sentiment: r_i = (compound_i + 1) / 2 for "pos", 1 - that for "neg".

    `compound` in [-1, 1] is VADER's normalised sum of word valences (with rules for negation,
    intensifiers, "but", punctuation and caps), so r_i lies in [0, 1]. Nothing is learned.
    """
    _check_direction(direction)
    analyzer = _vader()
    compound = torch.tensor(
        [analyzer.polarity_scores(s)["compound"] for s in _as_list(gen_sample)], dtype=torch.float32
    )
    pos = (compound + 1) / 2
    return pos if direction == "pos" else 1 - pos


class SentimentReward:
    """A configured sentiment reward: `SentimentReward("tiny", "pos")(samples) -> rewards`.

    `reward_model` is `"tiny"` (shipped), a local classifier folder, a Hub id, or `"vader"` for
    the lexicon reward. The classifier is loaded once, at construction. `__name__` (e.g.
    'SentimentReward(tiny, pos)') names it in error messages, as a function's name would.
    """

    def __init__(self, reward_model: str = TINY, direction: str = "pos", device: str = "cpu"):
        _check_direction(direction)
        self.reward_model, self.direction = reward_model, direction
        self.__name__ = f"SentimentReward({reward_model}, {direction})"
        self.classifier = None if reward_model == "vader" else _cached_classifier(reward_model, device)

    def __call__(self, samples: list[str] | str) -> Float[Tensor, " batch"]:
        if self.classifier is None:
            return reward_fn_vader(samples, self.direction)
        return reward_fn_sentiment_imdb(samples, self.direction, self.classifier)

    def __repr__(self) -> str:
        return f"SentimentReward(reward_model={self.reward_model!r}, direction={self.direction!r})"
