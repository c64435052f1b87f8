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

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rlhf_scratch.config import PROMPT_PREFIX, ConfigError

if TYPE_CHECKING:  # torch is imported when used, so a bad flag is answered at once
    import torch
    from torch import Tensor

GOLDS = ("tiny", "vader")
LABELS = ("bt", "argmax")


def gold_scores(texts: list[str], gold: str = "tiny", classifier: tuple | None = None) -> Tensor:
    """g(text) for every text: `vader` -> VADER's compound score; else the classifier `gold`
    (or the loaded `classifier` pair): logit₁ − logit₀ for two labels, the scalar for one."""
    import torch

    from rlhf_scratch.rewards import _cached_classifier, _vader, classifier_logits

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
) -> list[dict]:
    """`num_pairs` rows: prompts taken in a seeded shuffled order (cycled when there are fewer
    prompts than pairs), two completions of each from `lm`, labelled by `gold` with `label`."""
    import torch
    from tqdm.auto import tqdm

    from rlhf_scratch.generation import decode_completions, generate, tokenize_prompts
    from rlhf_scratch.prompts import PromptIterator

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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m rlhf_scratch.preferences", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="new .jsonl file to write (an existing file is refused)")
    p.add_argument("--num-pairs", type=int, required=True, help="how many pairs")
    p.add_argument("--gold", default="tiny", help="gold reward: tiny (classifier log-odds), vader, or a classifier folder")
    p.add_argument("--prompts", default="rt", help="rt (review openings), prefix (--prefix), or a .txt/.jsonl file")
    p.add_argument("--prefix", default="This movie was really", help="the prompt of --prompts prefix")
    p.add_argument("--label", default="bt", help="bt: P(a≻b)=σ(g(a)−g(b)) (noisy); argmax: the better one")
    p.add_argument("--seed", type=int, default=1, help="seeds the prompt order, the samples and the bt draws")
    p.add_argument("--model", default="tiny", help="the reference LM that writes the completions")
    p.add_argument("--gen-len", type=int, default=20, help="new tokens per completion (the most)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--top-k", type=int, default=0, help="sample from the top-k tokens only (0 = all)")
    p.add_argument("--batch-size", type=int, default=64, help="prompts per generation batch")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    return p


def check_options(opts: argparse.Namespace) -> None:
    """One ConfigError line for the first bad option."""
    if opts.num_pairs < 1:
        raise ConfigError(f"num_pairs: must be >= 1; got {opts.num_pairs}")
    if opts.label not in LABELS:
        raise ConfigError(f"label: must be one of {', '.join(LABELS)}; got {opts.label!r}")
    if opts.gold not in GOLDS and not Path(opts.gold).expanduser().is_dir():
        raise ConfigError(f"gold: must be one of {', '.join(GOLDS)} or a classifier folder; got {opts.gold!r}")
    for name in ("gen_len", "batch_size"):
        if getattr(opts, name) < 1:
            raise ConfigError(f"{name}: must be >= 1; got {getattr(opts, name)}")
    if opts.top_k < 0 or opts.threads < 0:
        raise ConfigError(f"{'top_k' if opts.top_k < 0 else 'threads'}: must be >= 0")
    if not (math.isfinite(opts.temperature) and opts.temperature > 0):
        raise ConfigError(f"temperature: must be > 0; got {opts.temperature}")
    out = Path(opts.out)
    if out.exists():
        raise ConfigError(f"out: {out} exists; choose a new file (nothing was overwritten)")
    if out.suffix != ".jsonl":
        raise ConfigError(f"out: {out} must end in .jsonl")


def main(argv: list[str] | None = None) -> int:
    try:
        opts = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
        check_options(opts)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return int(e.code or 0)

    import torch

    from rlhf_scratch.loading import HubUnreachableError, load_lm
    from rlhf_scratch.prompts import load_prompts

    try:
        if opts.threads:
            torch.set_num_threads(opts.threads)
        prompts = load_prompts(opts.prompts, prefix=opts.prefix, seed=opts.seed)
        lm = load_lm(opts.model).eval()
        rows = make_preference_pairs(
            lm, prompts, opts.num_pairs, gold=opts.gold, label=opts.label, seed=opts.seed, gen_len=opts.gen_len,
            temperature=opts.temperature, top_k=opts.top_k, stop_at_eos=opts.prompts != PROMPT_PREFIX,
            batch_size=opts.batch_size)
        write_pairs(rows, opts.out)
    except (ValueError, OSError, HubUnreachableError) as e:  # PromptError, ModelFolderError, ...
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    agree = sum(r["score_chosen"] >= r["score_rejected"] for r in rows) / len(rows)
    print(f"wrote {len(rows)} pairs to {opts.out} (chosen has the higher gold score in {agree:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
