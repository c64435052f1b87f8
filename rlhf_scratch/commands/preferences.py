"""`python -m rlhf_scratch.preferences`: write preference pairs labelled by a gold reward
(the library is `rlhf_scratch.reward.preferences`; see its docstring for the labels and the format).

    python -m rlhf_scratch.preferences --out pairs.jsonl --num-pairs 1000
    python -m rlhf_scratch.preferences --out pairs.jsonl --num-pairs 1000 --gold vader --label argmax
    python -m rlhf_scratch.preferences --out pairs.jsonl --num-pairs 200 --prompts prefix
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from rlhf_scratch.config import PROMPT_PREFIX, ConfigError, check_seed
from rlhf_scratch.reward.preferences import GOLDS, LABELS, make_preference_pairs, write_pairs


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m rlhf_scratch.preferences", description="Preference pairs labelled by a gold reward: the \"human feedback\" of RLHF, simulated.",
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
    check_seed(opts.seed)
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

    from rlhf_scratch.models.loading import HubUnreachableError, load_lm
    from rlhf_scratch.rollout.prompts import load_prompts

    try:
        if opts.threads:
            torch.set_num_threads(opts.threads)
        prompts = load_prompts(opts.prompts, prefix=opts.prefix, seed=opts.seed)
        lm = load_lm(opts.model).eval()
        rows = make_preference_pairs(
            lm, prompts, opts.num_pairs, gold=opts.gold, label=opts.label, seed=opts.seed, gen_len=opts.gen_len,
            temperature=opts.temperature, top_k=opts.top_k, stop_at_eos=opts.prompts != PROMPT_PREFIX,
            batch_size=opts.batch_size, source=opts.prompts)
        write_pairs(rows, opts.out)
    except (ValueError, OSError, HubUnreachableError) as e:  # PromptError, ModelFolderError, ...
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    agree = sum(r["score_chosen"] >= r["score_rejected"] for r in rows) / len(rows)
    print(f"wrote {len(rows)} pairs to {opts.out} (chosen has the higher gold score in {agree:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
