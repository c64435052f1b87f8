"""The flawed raters of reward/preferences.py (issue 46), each against numbers worked out by hand."""

import pytest
import torch

from rlhf_scratch.reward.preferences import (
    RATER_DEFAULTS,
    length_rater_label,
    rate,
    rater_record,
    repetition_gold,
    token_rater_scores,
    word_count,
)


def test_length_rater_prefers_the_longer_completion_only_when_gold_is_close():
    gold_a, gold_b = torch.tensor([0.0, 0.0, 3.0, 0.5]), torch.tensor([0.5, 0.2, 0.0, 0.0])
    len_a, len_b = torch.tensor([5, 10, 5, 7]), torch.tensor([10, 4, 10, 7])
    honest = torch.tensor([True, False, True, False])
    # |gap| = 0.5, 0.2, 3.0, 0.5 against δ = 1: pairs 0, 1 and 3 are close; pair 3's lengths are equal.
    # 0: 5 < 10 -> b; 1: 10 > 4 -> a; 2: far apart -> honest (a); 3: equal length -> honest (b)
    got = length_rater_label(honest, gold_a, gold_b, len_a, len_b, margin=1.0).tolist()
    assert got == [False, True, True, False], (
        "pair 2 (gold gap 3 > δ) must keep the honest label: a rater prefers length only when gold is close"
        if got[2] is False else "pair 3 has equal lengths: the honest label stands")


def test_length_rater_with_margin_zero_is_the_honest_rater():
    honest = torch.tensor([True, False])
    got = length_rater_label(honest, torch.zeros(2), torch.zeros(2), torch.tensor([1, 9]), torch.tensor([9, 1]), 0.0)
    assert got.tolist() == [True, False], "|g(a) − g(b)| < 0 never holds"


def test_word_count_counts_whole_words_in_any_case():
    # "and", "And", "AND" count; "android" and "sand" do not
    assert word_count("and then, And more; android sand AND", "and") == 3
    assert word_count("", "and") == 0
    assert word_count("wow!! great!", "!") == 3, "a punctuation token counts each time"


def test_token_rater_adds_the_bonus_per_occurrence():
    # s = g + b · count: 0.5 + 1.5 · 2 = 3.5; −1 + 1.5 · 0 = −1
    assert token_rater_scores(torch.tensor([0.5, -1.0]), torch.tensor([2.0, 0.0]), 1.5).tolist() == [3.5, -1.0]


def test_repetition_gold_subtracts_the_penalty_times_the_repeated_fraction():
    # 1 − 4 · 0.25 = 0; 1 − 4 · 0 = 1
    assert repetition_gold(torch.tensor([1.0, 1.0]), torch.tensor([0.25, 0.0]), 4.0).tolist() == [0.0, 1.0]


def features(length, count, repeated):
    return {"length": torch.tensor(length), "count": torch.tensor(count, dtype=torch.float32),
            "repeated": torch.tensor(repeated)}


def test_token_rater_flips_a_pair_but_keeps_gold_as_gold():
    # pair (a, b): g = 0, 1; a has the word once. argmax on s = 0 + 2 · 1 = 2 against 1 -> a wins
    f = features([5, 5], [1.0, 0.0], [0.0, 0.0])
    params = {**RATER_DEFAULTS, "bonus": 2.0}
    wins, g_a, g_b = rate("token", torch.tensor([0.0]), torch.tensor([1.0]), f, "argmax", None, params)
    assert wins.tolist() == [True]
    assert (g_a.tolist(), g_b.tolist()) == ([0.0], [1.0]), "score_chosen/score_rejected stay gold, not the rater's s"
    honest, _, _ = rate("honest", torch.tensor([0.0]), torch.tensor([1.0]), f, "argmax", None, params)
    assert honest.tolist() == [False]


def test_repetition_rater_labels_and_scores_by_the_penalised_gold():
    # g' = 1 − 4 · 0.25 = 0 against 0.5 − 4 · 0 = 0.5 -> b wins, and the gold scores are g'
    f = features([6, 6], [0.0, 0.0], [0.25, 0.0])
    wins, g_a, g_b = rate("repetition", torch.tensor([1.0]), torch.tensor([0.5]), f, "argmax", None,
                          {**RATER_DEFAULTS, "penalty": 4.0})
    assert wins.tolist() == [False]
    assert (g_a.tolist(), g_b.tolist()) == ([0.0], [0.5])


def test_every_rater_uses_the_honest_draw():
    # bt with one shared generator state: where the flaw does not decide, the label is the honest one
    f = features([3, 3, 3, 3], [0.0] * 4, [0.0] * 4)
    g_a, g_b = torch.tensor([0.3, -0.2]), torch.tensor([0.1, 0.4])
    labels = {r: rate(r, g_a, g_b, f, "bt", torch.Generator().manual_seed(7), RATER_DEFAULTS)[0].tolist()
              for r in ("honest", "length", "token", "repetition")}
    assert len({tuple(v) for v in labels.values()}) == 1, labels


def test_a_flawed_raters_record_names_its_parameters():
    assert rater_record("token", RATER_DEFAULTS) == {"name": "token", "token": "and", "bonus": 2.0}
    assert rater_record("length", {**RATER_DEFAULTS, "margin": 0.5}) == {"name": "length", "margin": 0.5}
    with pytest.raises(KeyError):
        rater_record("honest", RATER_DEFAULTS)
