"""The describer of `find_steps.py`: name a found feature by the surface statistic of text it tracks.

It is applied AFTER the finding, never as a candidate: the feature is found from the model alone
(`find_steps.py`), then its per-sample activation a_i is correlated with every statistic of a fixed,
generic catalogue (`CATALOGUE`, plus the frequency of each of the pooled samples' most common
words), and the best match is named. The catalogue lists what one can count in any text — length,
word length, repeated n-grams, distinct tokens, the most frequent token's share, punctuation,
capitals, digits, a word's frequency — each with a theme (`length`, `repetition`, `punctuation`,
…) that a page or a test can read.

Per statistic s over the n samples, Pearson's r(a, s), and its two-sided p from
t = r √(n − 2) / √(1 − r²) with n − 2 degrees of freedom. The best match is the statistic with the
largest |r| whose p is below α / m (Bonferroni over the m statistics tried); none when no
statistic passes, so a feature that tracks nothing (a shuffled one) is described as nothing.
"""

from __future__ import annotations

import math
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from rlhf_scratch.reward.heldout import repeated_ngram_fraction
from rlhf_scratch.studies.stats import Number, t_sf

ALPHA = 0.05
N_WORDS = 10
"""How many of the pooled samples' most common words get a frequency statistic."""


@dataclass(frozen=True)
class Texts:
    """The samples a describer reads: each completion's text, token ids and kept-token mask."""

    completions: list[str]
    ids: Int[Tensor, "n gen_len"]
    mask: Bool[Tensor, "n gen_len"]


def per_sample_ngram_fraction(ids: Int[Tensor, "n gen_len"], mask: Bool[Tensor, "n gen_len"], n: int = 3) -> list[float]:
    """Each completion's repeated n-gram fraction (`reward.heldout.repeated_ngram_fraction` of its row)."""
    return [repeated_ngram_fraction(ids[i : i + 1], mask[i : i + 1], n) for i in range(ids.shape[0])]


def _words(text: str) -> list[str]:
    return [w.strip(string.punctuation).lower() for w in text.split() if w.strip(string.punctuation)]


def _share(count: int, total: int) -> float:
    return count / total if total else 0.0


def _kept(ids: Tensor, mask: Tensor) -> list[list[int]]:
    return [[t for t, k in zip(row, keep) if k] for row, keep in zip(ids.tolist(), mask.tolist())]


def top_token_share(tokens: Sequence[int]) -> float:
    """max_t count(t) / len: how much of a completion its most frequent token is (0 when empty)."""
    return _share(max(Counter(tokens).values()), len(tokens)) if tokens else 0.0


def distinct_token_ratio(tokens: Sequence[int]) -> float:
    """#distinct tokens / #tokens (1: no token repeats; 0 when empty)."""
    return _share(len(set(tokens)), len(tokens))


def char_share(text: str, chars: str | None) -> float:
    """The share of a text's non-space characters that are in `chars` (None: digits)."""
    body = [c for c in text if not c.isspace()]
    return _share(sum((c.isdigit() if chars is None else c in chars) for c in body), len(body))


CATALOGUE: tuple[tuple[str, str], ...] = (
    ("length (tokens)", "length"),
    ("mean word length (characters)", "word length"),
    ("repeated 2-gram fraction", "repetition"),
    ("repeated 3-gram fraction", "repetition"),
    ("repeated 4-gram fraction", "repetition"),
    ("distinct-token ratio", "repetition"),
    ("most frequent token's share", "repetition"),
    ("punctuation share", "punctuation"),
    ("capitalised-word share", "capitalisation"),
    ("digit share", "digits"),
)
"""(statistic, theme) of the fixed catalogue, in `surface_statistics`' order; word frequencies follow."""


def common_words(texts: Texts, k: int = N_WORDS) -> list[str]:
    """The k most common words (lower case, punctuation stripped) over all the completions."""
    counts = Counter(w for c in texts.completions for w in _words(c))
    return [w for w, _ in counts.most_common(k)]


def surface_statistics(texts: Texts, words: Sequence[str] = ()) -> dict[str, tuple[str, list[float]]]:
    """name -> (theme, one value per sample): the catalogue, then `word 'w' per word` for each of `words`."""
    tokens = _kept(texts.ids, texts.mask)
    words_of = [_words(c) for c in texts.completions]
    columns = [
        [float(len(t)) for t in tokens],
        [_share(sum(len(w) for w in ws), len(ws)) for ws in words_of],
        per_sample_ngram_fraction(texts.ids, texts.mask, 2),
        per_sample_ngram_fraction(texts.ids, texts.mask, 3),
        per_sample_ngram_fraction(texts.ids, texts.mask, 4),
        [distinct_token_ratio(t) for t in tokens],
        [top_token_share(t) for t in tokens],
        [char_share(c, string.punctuation) for c in texts.completions],
        [_share(sum(w[:1].isupper() for w in c.split()), len(c.split())) for c in texts.completions],
        [char_share(c, None) for c in texts.completions],
    ]
    out = {name: (theme, col) for (name, theme), col in zip(CATALOGUE, columns)}
    for w in words:
        out[f"word '{w}' per word"] = (f"word '{w}'", [_share(ws.count(w), len(ws)) for ws in words_of])
    return out


def pearson(a: Sequence[Number], b: Sequence[Number]) -> float:
    """r = Σ (a − ā)(b − b̄) / √(Σ (a − ā)² Σ (b − b̄)²); 0 when either side is constant."""
    x, y = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    x, y = x - x.mean(), y - y.mean()
    den = math.sqrt(float((x * x).sum() * (y * y).sum()))
    return float((x * y).sum()) / den if den > 0 else 0.0


def correlation_p(r: float, n: int) -> float:
    """Two-sided p of Pearson's r over n samples: t = r √(n − 2) / √(1 − r²), n − 2 degrees of freedom."""
    if n < 3:
        return 1.0
    if abs(r) >= 1:
        return 0.0
    return min(1.0, 2 * t_sf(abs(r) * math.sqrt(n - 2) / math.sqrt(1 - r * r), n - 2))


def describe(activation: Sequence[Number], texts: Texts, alpha: float = ALPHA) -> dict:
    """The statistics a feature's per-sample `activation` tracks, best first (module docstring):
    {"best": {name, theme, r, p} or None, "table": every statistic's name, theme, r, p, "threshold": α/m}."""
    stats = surface_statistics(texts, common_words(texts))
    n, threshold = len(activation), alpha / len(stats)
    rows = []
    for name, (theme, values) in stats.items():
        r = pearson(activation, values)
        rows.append({"name": name, "theme": theme, "r": r, "p": correlation_p(r, n)})
    rows.sort(key=lambda row: -abs(row["r"]))
    best = next((row for row in rows if row["p"] < threshold), None)
    return {"best": best, "table": rows, "threshold": threshold, "n": n}


def description(described: dict) -> str:
    """One phrase: "tracks the repeated 3-gram fraction (r = +0.81, repetition)" or "tracks no surface statistic"."""
    best = described["best"]
    if best is None:
        return f"tracks no surface statistic of the catalogue (none with p < {described['threshold']:.1e})"
    return f"tracks the {best['name']} (r = {best['r']:+.2f}; theme: {best['theme']})"
