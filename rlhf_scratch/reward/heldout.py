"""Held-out scores: judges of every rollout that the policy is never trained on.

The training reward is a *proxy*. Optimise it hard enough and it keeps rising while what it
stands for gets worse (Gao et al. 2022, "Scaling laws for reward model overoptimization"). These
scores are computed each phase from the rollout alone, and logged as `eval/<name>`. When a
proxy curve keeps rising while a held-out curve turns down, that is over-optimisation.

- `eval/vader`: VADER's lexicon sentiment of prompt + completion, toward the run's direction, in
  [0, 1]. It is another judge of the same property. It is not held out when the task is `vader`.
- `eval/ref_logprob_per_token`: the reference model's mean log-prob per kept completion token.
  It says how natural the text still is to the model the run started from (nats; higher is more
  fluent by the reference's lights).
- `eval/repeated_3grams`: the fraction of a completion's token 3-grams that repeat an earlier one
  in the same completion, averaged over completions. "a young, a young, a young" scores high.
"""

from __future__ import annotations

from jaxtyping import Bool, Float, Int
from torch import Tensor

from rlhf_scratch.reward.functions import reward_fn_vader
from rlhf_scratch.rollout.generation import kept_token_ids
from rlhf_scratch.rollout.phase import Rollout

HELDOUT_METRICS = ("eval/vader", "eval/ref_logprob_per_token", "eval/repeated_3grams")


def vader_score(texts: list[str], direction: str = "pos") -> float:
    """mean_i (compound_i + 1) / 2 (or 1 − that for "neg"): VADER's sentiment of each text."""
    return reward_fn_vader(texts, direction=direction).mean().item()


def ref_logprob_per_token(
    ref_logprobs: Float[Tensor, "batch gen_len"], mask: Bool[Tensor, "batch gen_len"]
) -> float:
    """Σ_{kept b,t} log π_ref(o_t | q, o_<t) / #kept: the reference's mean log-prob per completion token."""
    return ref_logprobs[mask].mean().item()


def repeated_ngram_fraction(
    completion_ids: Int[Tensor, "batch gen_len"], mask: Bool[Tensor, "batch gen_len"], n: int = 3
) -> float:
    """mean over completions of (#n-grams − #distinct n-grams) / #n-grams, over each completion's
    kept tokens; a completion shorter than n contributes 0."""
    fractions = []
    for tokens in kept_token_ids(completion_ids, mask):  # one read of the device
        grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
        fractions.append((len(grams) - len(set(grams))) / len(grams) if grams else 0.0)
    return sum(fractions) / len(fractions)


def heldout_metrics(rollout: Rollout, direction: str = "pos") -> dict[str, float]:
    """Every held-out score of a rollout, under its `eval/` name."""
    texts = [p + c for p, c in zip(rollout.prompts, rollout.completions)]
    return {
        "eval/vader": vader_score(texts, direction),
        "eval/ref_logprob_per_token": (ref_logprob_per_token(rollout.ref_logprobs, rollout.completion_mask)
                                       if rollout.ref_logprobs is not None else float("nan")),  # no reference ran
        "eval/repeated_3grams": repeated_ngram_fraction(rollout.completion_ids, rollout.completion_mask),
    }
