"""Held-out scores, each by hand on a hand-built rollout."""

import pytest
import torch
from test_logger import one_sample_rollout

from rlhf_scratch.reward.heldout import heldout_metrics, ref_logprob_per_token, repeated_ngram_fraction, vader_score


def test_repeated_ngrams_by_hand():
    ids = torch.tensor([[1, 2, 3, 1, 2, 3, 9], [4, 5, 6, 7, 8, 0, 0]])
    mask = torch.tensor([[True] * 7, [True] * 5 + [False] * 2])
    # row 0: 3-grams 123 231 312 123 239 -> 5 grams, 4 distinct -> 1/5; row 1 (kept 45678): 3 grams, all distinct -> 0
    assert repeated_ngram_fraction(ids, mask) == pytest.approx((1 / 5 + 0) / 2)
    no_mask = torch.ones_like(mask)
    # row 1 unmasked: 456 567 678 780 800 -> distinct; row 0 as before
    assert repeated_ngram_fraction(ids, no_mask) == pytest.approx(1 / 10)
    assert repeated_ngram_fraction(torch.tensor([[1, 1]]), torch.tensor([[True, True]])) == 0.0, "shorter than n"


def test_ref_logprob_per_token_counts_kept_tokens_only():
    lp = torch.tensor([[-1.0, -3.0], [-2.0, -100.0]])
    mask = torch.tensor([[True, True], [True, False]])
    assert ref_logprob_per_token(lp, mask) == pytest.approx(-2.0), "(−1 − 3 − 2) / 3; the padded −100 is no token"


def test_vader_by_direction():
    assert vader_score(["great, wonderful"], "pos") > 0.8 and vader_score(["great, wonderful"], "neg") < 0.2
    assert vader_score(["the"], "pos") == pytest.approx(0.5), "no lexicon word: compound 0 -> 0.5"


def test_heldout_metrics_of_a_rollout_reads_prompt_plus_completion():
    rollout = one_sample_rollout()  # prompt "p", completion " good", ref log-probs [-1, -2]
    metrics = heldout_metrics(rollout, "pos")
    assert set(metrics) == {"eval/vader", "eval/ref_logprob_per_token", "eval/repeated_3grams"}
    assert metrics["eval/ref_logprob_per_token"] == pytest.approx(-1.5)
    assert metrics["eval/vader"] == pytest.approx(vader_score(["p good"]))
    assert metrics["eval/repeated_3grams"] == 0.0
