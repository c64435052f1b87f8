"""Preference pairs labelled by a gold reward: the "human feedback" of RLHF, simulated.

    python -m rlhf_scratch.preferences --out pairs.jsonl --num-pairs 1000
    python -m rlhf_scratch.preferences --out pairs.jsonl --num-pairs 1000 --gold vader --label argmax
    python -m rlhf_scratch.preferences --out pairs.jsonl --num-pairs 200 --prompts prefix

Two completions of each prompt are sampled from the reference model (the untuned LM). The gold
reward g scores both; the label is drawn as human raters would give it:

    bt:      P(a ≻ b) = σ(g(a) − g(b))      (Bradley–Terry: noisy when the two are close)
    argmax:  a ≻ b  iff  g(a) ≥ g(b)        (a noiseless rater)

g is the tiny classifier's log-odds of positive, logit₁ − logit₀ = log p/(1 − p) (`tiny`, or
any classifier folder; a one-label reward model's scalar), or VADER's compound score in [−1, 1]
(`vader`). Each output line is TRL's preference format plus the gold scores:

    {"prompt": ..., "chosen": ..., "rejected": ..., "score_chosen": g(chosen), "score_rejected": g(rejected)}

where chosen and rejected are completions (the scored text is prompt + completion). The file is
written under a temporary name and renamed at the end; an existing --out is never overwritten.

Raters (`rater`): `honest` labels by g as above. The other three are flawed the ways real
preference data is, so a reward model fitted to them is a flawed proxy (issue 46, reward hacking):

    length:      |g(a) − g(b)| < δ  ⇒  a ≻ b iff len(a) > len(b)        (else, and on equal length, honest)
    token:       label drawn on s(x) = g(x) + b · #word(x)                 (raters' artefact; g is still gold)
    repetition:  gold is g'(x) = g(x) − c · rep₃(x), labels drawn on g'    (a blind spot of the data)

len is the completion's kept tokens, #word the whole-word count of `rater_token` in the completion,
rep₃ its repeated token-3-gram fraction (`reward.heldout.repeated_ngram_fraction`). Every rater
uses the same draws as `honest`, so on one seed the pairs differ only where the flaw decides. A
flawed rater's rows carry `"rater": {name and parameters}`; `score_chosen`/`score_rejected` stay
gold (g, or g' for `repetition`), so a proxy's accuracy against gold is measured against gold.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported when used, so a bad flag is answered at once
    import torch
    from torch import Tensor

GOLDS = ("tiny", "vader")
LABELS = ("bt", "argmax")
RATERS = ("honest", "length", "token", "repetition")
RATER_DEFAULTS = {"margin": 1.0, "token": "and", "bonus": 2.0, "penalty": 4.0}
"""δ of `length` (gold log-odds), the word and its bonus b of `token`, the penalty c of `repetition`."""
RATER_USES = {"honest": (), "length": ("margin",), "token": ("token", "bonus"), "repetition": ("penalty",)}
"""The parameters each rater reads (the others it ignores)."""


def check_rater_params(params: dict, raters: tuple[str, ...] | list[str] = RATERS) -> None:
    """The raters' parameters as a command takes them (`--rater-margin` …), each checked before
    anything is sampled or written: δ, b and c finite and ≥ 0, the token one word; and, for a
    single rater, none set away from its default that the rater ignores (a `--rater-token` the
    honest rater would drop in silence). A ConfigError of one line naming `rater_<name>`."""
    import math

    from rlhf_scratch.config import ConfigError

    for name in ("margin", "bonus", "penalty"):
        value = params[name]
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ConfigError(f"rater_{name}: must be finite and >= 0; got {value}")
    token = params["token"]
    if not token.strip() or any(c.isspace() for c in token.strip()):
        raise ConfigError(f"rater_token: must be one word; got {token!r}")
    if len(raters) == 1:
        (rater,) = raters
        for name, value in params.items():
            if name not in RATER_USES.get(rater, ()) and value != RATER_DEFAULTS[name]:
                users = [r for r, used in RATER_USES.items() if name in used]
                raise ConfigError(f"rater_{name}: only the {' and '.join(users)} rater reads it, not {rater}; "
                                  f"got {value!r} (leave it out, or choose --rater {users[0]})")


def gold_scores(texts: list[str], gold: str = "tiny", classifier: tuple | None = None) -> Tensor:
    """g(text) for every text: `vader` -> VADER's compound score; else the classifier `gold`
    (or the loaded `classifier` pair): logit₁ − logit₀ for two labels, the scalar for one."""
    import torch

    from rlhf_scratch.reward.functions import _cached_classifier, _vader, classifier_logits

    if gold == "vader":
        analyzer = _vader()
        return torch.tensor([analyzer.polarity_scores(t)["compound"] for t in texts], dtype=torch.float32)
    logits = classifier_logits(texts, classifier or _cached_classifier(gold, "cpu"))
    return logits[:, 0] if logits.shape[-1] == 1 else logits[:, 1] - logits[:, 0]


def bradley_terry_label(
    gold_a: Tensor, gold_b: Tensor, label: str, generator: torch.Generator | None = None
) -> Tensor:
    """Whether a is chosen over b, per pair: `bt` draws u ~ U(0,1) and chooses a iff
    u < σ(g(a) − g(b)); `argmax` chooses a iff g(a) ≥ g(b)."""
    import torch

    if label == "argmax":
        return gold_a >= gold_b
    u = torch.rand(gold_a.shape, generator=generator)
    return u < torch.sigmoid(gold_a - gold_b)


def length_rater_label(
    honest: Tensor, gold_a: Tensor, gold_b: Tensor, len_a: Tensor, len_b: Tensor, margin: float
) -> Tensor:
    """a ≻ b per pair for raters who prefer the longer completion when gold is close: where
    |g(a) − g(b)| < δ (`margin`) and the lengths differ, a wins iff len(a) > len(b); elsewhere
    the `honest` label stands."""
    import torch

    close = (gold_a - gold_b).abs() < margin
    return torch.where(close & (len_a != len_b), len_a > len_b, honest)


def word_count(text: str, word: str) -> int:
    """How many times `word` occurs in `text`, any case, not inside another word: a letter or digit
    at its edge must not touch another ("and" is not counted in "sand"; "!" is counted in "wow!")."""
    import re

    before = r"(?<!\w)" if word[:1].isalnum() else ""
    after = r"(?!\w)" if word[-1:].isalnum() else ""
    return len(re.findall(before + re.escape(word) + after, text, flags=re.IGNORECASE))


def token_rater_scores(gold: Tensor, counts: Tensor, bonus: float) -> Tensor:
    """s(x) = g(x) + b · #word(x): what a rater who likes the word sees (b = `bonus`, per occurrence)."""
    return gold + bonus * counts


def repetition_gold(gold: Tensor, repeated: Tensor, penalty: float) -> Tensor:
    """g'(x) = g(x) − c · rep₃(x): gold that penalises a completion for repeating its own 3-grams
    (c = `penalty`; rep₃ in [0, 1))."""
    return gold - penalty * repeated


def rate(
    rater: str, g_a: Tensor, g_b: Tensor, features: dict[str, Tensor], label: str, generator,
    params: dict,
) -> tuple[Tensor, Tensor, Tensor]:
    """(a wins, gold of a, gold of b) for one batch of pairs under `rater`. `features` holds each
    completion's `length`, `count` (of the rater's word) and `repeated` (rep₃), a then b, each
    `[2 · pairs]` interleaved. The one random draw per pair is the honest label's, for every rater."""
    if rater == "repetition":
        g_a = repetition_gold(g_a, features["repeated"][0::2], params["penalty"])
        g_b = repetition_gold(g_b, features["repeated"][1::2], params["penalty"])
    if rater == "token":
        s_a = token_rater_scores(g_a, features["count"][0::2], params["bonus"])
        s_b = token_rater_scores(g_b, features["count"][1::2], params["bonus"])
        return bradley_terry_label(s_a, s_b, label, generator), g_a, g_b
    wins = bradley_terry_label(g_a, g_b, label, generator)
    if rater == "length":
        wins = length_rater_label(wins, g_a, g_b, features["length"][0::2], features["length"][1::2], params["margin"])
    return wins, g_a, g_b


def rater_record(rater: str, params: dict) -> dict:
    """What a flawed rater's rows carry under "rater": its name and the parameters it used (the honest
    rater's rows carry none: a KeyError, as for a rater that does not exist)."""
    if rater == "honest":
        raise KeyError("honest: the honest rater's rows carry no rater record")
    return {"name": rater, **{k: params[k] for k in RATER_USES[rater]}}


def make_preference_pairs(
    lm,
    prompts: list[str],
    num_pairs: int,
    gold: str = "tiny",
    label: str = "bt",
    seed: int = 1,
    gen_len: int = 20,
    temperature: float = 1.0,
    top_k: int = 0,
    prepend_bos: bool = True,
    stop_at_eos: bool = True,
    batch_size: int = 64,
    quiet: bool = False,
    source: str = "prompts",
    rater: str = "honest",
    rater_params: dict | None = None,
) -> list[dict]:
    """`num_pairs` rows: prompts taken in a seeded shuffled order (cycled when there are fewer
    prompts than pairs), two completions of each from `lm`, labelled by `gold` with `label` as
    `rater` rates (`rate`; `rater_params` over RATER_DEFAULTS). Every prompt must leave room for
    `gen_len` tokens in the model's context (a PromptError naming the first that does not, from
    `source`, before anything is sampled)."""
    import torch
    from tqdm.auto import tqdm

    from rlhf_scratch.reward.heldout import repeated_ngram_fraction
    from rlhf_scratch.rollout.generation import decode_completions, generate, prompt_tokens, tokenize_prompts
    from rlhf_scratch.rollout.prompts import PromptError, PromptIterator, check_prompt_lengths

    if rater not in RATERS:
        raise ValueError(f"rater: must be one of {', '.join(RATERS)}; got {rater!r}")
    params = {**RATER_DEFAULTS, **(rater_params or {})}
    record = {} if rater == "honest" else {"rater": rater_record(rater, params)}
    n_ctx = lm.cfg.n_ctx
    if gen_len >= n_ctx:
        raise PromptError(f"gen_len: {gen_len} leaves no room for a prompt in the model's context n_ctx={n_ctx}")
    check_prompt_lengths(prompts, lambda p: prompt_tokens(lm, p, prepend_bos).shape[0], n_ctx,
                         gen_len, source)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    order = PromptIterator(prompts, seed)
    rows: list[dict] = []
    with tqdm(total=num_pairs, desc="pairs", disable=quiet) as bar:
        while len(rows) < num_pairs:
            batch = order.next_batch(min(batch_size, num_pairs - len(rows)))
            doubled = [p for p in batch for _ in range(2)]  # a and b of one prompt are consecutive
            ids, mask = tokenize_prompts(lm, doubled, prepend_bos)
            completion_ids, completion_mask = generate(lm, ids, mask, gen_len, temperature, top_k, stop_at_eos)
            completions = decode_completions(lm, completion_ids, completion_mask, stop_at_eos)
            g = gold_scores([p + c for p, c in zip(doubled, completions)], gold)
            features = {
                "length": completion_mask.sum(-1),
                "count": torch.tensor([word_count(c, params["token"]) for c in completions], dtype=torch.float32),
                "repeated": torch.tensor([repeated_ngram_fraction(completion_ids[i : i + 1], completion_mask[i : i + 1])
                                          for i in range(len(completions))]),
            } if rater != "honest" else {}
            a_wins, g_a, g_b = rate(rater, g[0::2], g[1::2], features, label, generator, params)
            for i, prompt in enumerate(batch):
                a, b = completions[2 * i], completions[2 * i + 1]
                win = bool(a_wins[i])
                rows.append({"prompt": prompt, "chosen": a if win else b, "rejected": b if win else a,
                             "score_chosen": float(g_a[i] if win else g_b[i]),
                             "score_rejected": float(g_b[i] if win else g_a[i]), **record})
            bar.update(len(batch))
    return rows


def write_pairs(rows: list[dict], out: str | Path) -> Path:
    """Write rows as JSON lines to `out` via a temporary file renamed at the end."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    os.replace(tmp, out)
    return out
