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
) -> list[dict]:
    """`num_pairs` rows: prompts taken in a seeded shuffled order (cycled when there are fewer
    prompts than pairs), two completions of each from `lm`, labelled by `gold` with `label`.
    Every prompt must leave room for `gen_len` tokens in the model's context (a PromptError naming
    the first that does not, from `source`, before anything is sampled)."""
    import torch
    from tqdm.auto import tqdm

    from rlhf_scratch.rollout.generation import decode_completions, generate, prompt_tokens, tokenize_prompts
    from rlhf_scratch.rollout.prompts import PromptError, PromptIterator, check_prompt_lengths

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
            g_a, g_b = g[0::2], g[1::2]
            a_wins = bradley_terry_label(g_a, g_b, label, generator)
            for i, prompt in enumerate(batch):
                a, b = completions[2 * i], completions[2 * i + 1]
                win = bool(a_wins[i])
                rows.append({"prompt": prompt, "chosen": a if win else b, "rejected": b if win else a,
                             "score_chosen": float(g_a[i] if win else g_b[i]),
                             "score_rejected": float(g_b[i] if win else g_a[i])})
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
