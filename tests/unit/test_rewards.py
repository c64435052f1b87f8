"""Reward functions, checked against numbers worked out by hand."""

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import shutil

import pytest
import torch

from rlhf_scratch.models.loading import asset_path, load_classifier
from rlhf_scratch.reward.functions import (
    SentimentReward,
    normalize_reward,
    reward_fn_char_count,
    reward_fn_sentiment_imdb,
    reward_fn_vader,
)

POSITIVE = [
    "A wonderful, moving film with brilliant performances. One of the best movies of the year.",
    "Smart, funny and beautifully made; a delight from start to finish.",
]
NEGATIVE = [
    "A dull, lifeless mess with a terrible script. One of the worst movies of the year.",
    "Boring, stupid and badly made; a chore from start to finish.",
]


def test_char_count_by_hand():
    r = reward_fn_char_count(["a.b.", "", "...", "no periods here"])
    assert r.tolist() == [2.0, 0.0, 3.0, 0.0]
    assert reward_fn_char_count(["wow!!", "ok."], char="!").tolist() == [2.0, 0.0]
    assert reward_fn_char_count("one. two.").tolist() == [2.0], "a single string is a batch of 1"


def test_normalize_reward_by_hand():
    # [1, 2, 3]: mean 2, unbiased std sqrt(((-1)^2 + 0 + 1^2) / 2) = 1  ->  [-1, 0, 1] / (1 + eps)
    out = normalize_reward(torch.tensor([1.0, 2.0, 3.0]), eps=1e-5)
    torch.testing.assert_close(out, torch.tensor([-1.0, 0.0, 1.0]) / (1 + 1e-5))
    # [0, 0, 4]: mean 4/3, std sqrt((16/9 + 16/9 + 64/9) / 2) = sqrt(96/18)
    std = (96 / 18) ** 0.5
    out = normalize_reward(torch.tensor([0.0, 0.0, 4.0]), eps=0.0)
    torch.testing.assert_close(out, torch.tensor([-4 / 3, -4 / 3, 8 / 3]) / std)


def test_normalize_reward_constant_and_single_give_zeros_not_nan():
    for r in (torch.full((5,), 3.7), torch.tensor([2.0])):
        out = normalize_reward(r)
        assert not out.isnan().any(), "constant rewards must not give NaN (std = 0)"
        assert (out == 0).all()


def test_vader_maps_compound_to_unit_interval():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    texts = POSITIVE + NEGATIVE + ["The film is 90 minutes long."]
    compound = torch.tensor([SentimentIntensityAnalyzer().polarity_scores(t)["compound"] for t in texts])
    pos, neg = reward_fn_vader(texts, "pos"), reward_fn_vader(texts, "neg")
    torch.testing.assert_close(pos, (compound + 1) / 2)
    torch.testing.assert_close(neg, 1 - pos)
    assert pos[-1] == 0.5, "a neutral sentence has compound 0 -> reward 0.5"
    assert pos[:2].min() > 0.5 > pos[2:4].max()
    with pytest.raises(ValueError, match="direction"):
        reward_fn_vader(texts, "positive")


def test_shipped_classifier_reward_shape_range_and_order():
    texts = POSITIVE + NEGATIVE
    pos = reward_fn_sentiment_imdb(texts, "pos")
    neg = reward_fn_sentiment_imdb(texts, "neg")
    assert pos.shape == neg.shape == (len(texts),)
    assert ((pos >= 0) & (pos <= 1)).all()
    torch.testing.assert_close(pos + neg, torch.ones(len(texts)))
    assert pos[:2].min() > pos[2:].max(), f"positive texts must outscore negative ones: {pos}"
    assert neg[2:].min() > neg[:2].max(), f"'neg' must prefer the negative texts: {neg}"


def test_one_string_is_scored_as_a_batch_of_one_by_hand():
    """The blog calls `reward_fn_sentiment_imdb("What a great movie!")`: one string is one sample, whose
    reward is softmax(classifier logits)[1] for "pos" and [0] = 1 − p for "neg", the classifier run
    here by hand on that text alone (p = 0.892: a swapped label, 1 − p, shows).

    Red if: the string is iterated as characters, the labels are swapped, "neg" is not 1 − p, or the
    softmax is taken over the batch (a batch of one would give 1.0)."""
    text = "What a great movie!"
    model, tokenizer = load_classifier("tiny")
    with torch.no_grad():
        logits = model(**tokenizer(text, return_tensors="pt")).logits[0]
    p = torch.sigmoid(logits[1] - logits[0])  # softmax over two labels, label 1 = POSITIVE
    assert abs(p.item() - 0.5) > 0.3, f"p = {p.item():.3f}: too close to ½ to tell the labels apart"
    torch.testing.assert_close(reward_fn_sentiment_imdb(text), p[None])
    torch.testing.assert_close(reward_fn_sentiment_imdb(text, "neg"), 1 - p[None])
    torch.testing.assert_close(reward_fn_sentiment_imdb([text, text]), torch.stack([p, p]), msg="a batch of two")


def test_vader_by_hand_from_the_lexicon():
    """VADER's compound = s / sqrt(s² + 15) (rounded to 4 decimals), s the sum of the words' lexicon
    valences: great +3.1, dull −1.7; "but" halves the words before it and multiplies those after by 1.5.

        "A great movie."          s = 3.1                      compound = 3.1 / sqrt(24.61) = 0.6249
        "A great but dull movie." s = 0.5·3.1 − 1.5·1.7 = −1   compound = −1 / sqrt(16) = −0.25

    reward "pos" = (compound + 1) / 2, "neg" = 1 − that. Red if: the map to [0, 1] is wrong (compound
    itself, or (1 − compound) / 2 for "pos"), the directions are swapped, or one string is not a batch of one."""
    great = round(3.1 / math.sqrt(3.1**2 + 15), 4)
    assert great == 0.6249
    texts = ["A great movie.", "A great but dull movie."]
    want_pos = torch.tensor([(great + 1) / 2, (-0.25 + 1) / 2])  # [0.81245, 0.375]
    torch.testing.assert_close(reward_fn_vader(texts, "pos"), want_pos)
    torch.testing.assert_close(reward_fn_vader(texts, "neg"), 1 - want_pos)
    torch.testing.assert_close(reward_fn_vader("A great but dull movie.", "neg"), torch.tensor([0.625]))


def test_local_copy_of_shipped_classifier_scores_identically(tmp_path):
    folder = tmp_path / "my_classifier"
    shutil.copytree(asset_path("tiny_reward"), folder)
    texts = POSITIVE + NEGATIVE
    from_tiny = SentimentReward("tiny", "pos")(texts)
    from_folder = SentimentReward(str(folder), "pos")(texts)
    torch.testing.assert_close(from_tiny, from_folder)


def test_vader_choice_of_sentiment_reward():
    texts = POSITIVE + NEGATIVE
    torch.testing.assert_close(SentimentReward("vader", "neg")(texts), reward_fn_vader(texts, "neg"))


def _save_random_distilbert(folder):
    """A randomly initialised tiny DistilBERT classifier + WordPiece tokenizer, as on the Hub."""
    from transformers import DistilBertConfig, DistilBertForSequenceClassification, DistilBertTokenizerFast

    words = sorted({w.strip(".,;").lower() for t in POSITIVE + NEGATIVE for w in t.split()})
    vocab = folder / "vocab.txt"
    folder.mkdir()
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tokenizer = DistilBertTokenizerFast(vocab_file=str(vocab))
    config = DistilBertConfig(vocab_size=len(tokenizer), dim=32, hidden_dim=64, n_layers=1,
                              n_heads=2, num_labels=2, pad_token_id=0)
    torch.manual_seed(0)
    model = DistilBertForSequenceClassification(config)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return model, tokenizer


def test_local_distilbert_folder_loads_like_the_hub_model(tmp_path):
    folder = tmp_path / "distilbert"
    model, tokenizer = _save_random_distilbert(folder)
    loaded, loaded_tok = load_classifier(str(folder))
    assert type(loaded).__name__ == "DistilBertForSequenceClassification"
    texts = POSITIVE + NEGATIVE[:1]  # odd batch, different lengths -> padding is exercised
    pos = reward_fn_sentiment_imdb(texts, "pos", classifier=(loaded, loaded_tok))
    neg = SentimentReward(str(folder), "neg")(texts)
    # By hand: softmax over the two logits, label 1 for "pos", one text at a time (no padding).
    model.eval()
    with torch.no_grad():
        expected = torch.stack([model(**tokenizer(t, return_tensors="pt")).logits[0].softmax(-1)[1]
                                for t in texts])
    assert pos.shape == (len(texts),) and ((pos >= 0) & (pos <= 1)).all()
    torch.testing.assert_close(pos, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(neg, 1 - expected, atol=1e-5, rtol=1e-5)
