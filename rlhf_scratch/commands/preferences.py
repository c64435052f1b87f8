"""`python -m rlhf_scratch.preferences`: write preference pairs labelled by a gold reward
(the library is `rlhf_scratch.reward.preferences`; see its docstring for the labels and the format).

    python -m rlhf_scratch.preferences --out pairs.jsonl --num-pairs 1000
    python -m rlhf_scratch.preferences --out pairs.jsonl --num-pairs 1000 --gold vader --label argmax
    python -m rlhf_scratch.preferences --out pairs.jsonl --num-pairs 200 --prompts prefix
    python -m rlhf_scratch.preferences --out pairs.jsonl --num-pairs 1000 --rater length --rater-margin 1.0
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import tyro

from rlhf_scratch.config import PROMPT_PREFIX, ConfigError, check_seed
from rlhf_scratch.config.cli import parse_dataclass
from rlhf_scratch.config.command import command
from rlhf_scratch.reward.preferences import (
    GOLDS,
    LABELS,
    RATER_DEFAULTS,
    RATERS,
    check_rater_params,
    make_preference_pairs,
    write_pairs,
)

PROG = "python -m rlhf_scratch.preferences"


@dataclass
class PreferencesArgs:
    """Preference pairs labelled by a gold reward: the "human feedback" of RLHF, simulated."""

    out: str = tyro.MISSING
    """New .jsonl file to write (an existing file is refused)."""
    num_pairs: int = tyro.MISSING
    """How many pairs."""
    gold: str = "tiny"
    """Gold reward: tiny (classifier log-odds), vader, or a classifier folder."""
    prompts: str = "rt"
    """rt (review openings), prefix (--prefix), or a .txt/.jsonl file."""
    prefix: str = "This movie was really"
    """The prompt of --prompts prefix."""
    label: str = "bt"
    """bt: P(a≻b)=σ(g(a)−g(b)) (noisy); argmax: the better one."""
    rater: str = "honest"
    """honest (labels by gold), or a flawed rater: length (the longer one when gold is close), token
    (likes --rater-token), repetition (gold penalises repeated 3-grams). Formulas: reward/preferences.py."""
    rater_margin: float = RATER_DEFAULTS["margin"]
    """length: δ, the gold gap |g(a) − g(b)| under which the longer completion wins."""
    rater_token: str = RATER_DEFAULTS["token"]
    """token: the word the raters like (counted as a whole word)."""
    rater_bonus: float = RATER_DEFAULTS["bonus"]
    """token: b, what each occurrence of the word adds to the rater's score g + b · count."""
    rater_penalty: float = RATER_DEFAULTS["penalty"]
    """repetition: c, gold is g − c · (repeated 3-gram fraction)."""
    seed: int = 1
    """Seeds the prompt order, the samples and the bt draws."""
    model: str = "tiny"
    """The reference LM that writes the completions."""
    gen_len: int = 20
    """New tokens per completion (the most)."""
    temperature: float = 1.0
    """Sampling temperature."""
    top_k: int = 0
    """Sample from the top-k tokens only (0 = all)."""
    batch_size: int = 64
    """Prompts per generation batch."""
    threads: int = 1
    """Torch CPU threads."""


def parse(argv: list[str]) -> PreferencesArgs:
    """The command line, checked (`check_options`)."""
    opts = parse_dataclass(PreferencesArgs, argv, default=None, prog=PROG,
                           description=PreferencesArgs.__doc__)
    check_options(opts)
    return opts


def check_options(opts: PreferencesArgs) -> None:
    """One ConfigError line for the first bad option."""
    if opts.num_pairs < 1:
        raise ConfigError(f"num_pairs: must be >= 1; got {opts.num_pairs}")
    if opts.label not in LABELS:
        raise ConfigError(f"label: must be one of {', '.join(LABELS)}; got {opts.label!r}")
    if opts.rater not in RATERS:
        raise ConfigError(f"rater: must be one of {', '.join(RATERS)}; got {opts.rater!r}")
    check_rater_params(rater_params(opts), [opts.rater])
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


def rater_params(opts: PreferencesArgs) -> dict:
    """The --rater-* flags as `make_preference_pairs` takes them."""
    return {"margin": opts.rater_margin, "token": opts.rater_token, "bonus": opts.rater_bonus,
            "penalty": opts.rater_penalty}


def main(argv: list[str] | None = None) -> int:
    """The command: `command()` owns its one-line errors and exit codes."""
    return command(parse, run, argv)


def run(opts: PreferencesArgs) -> int:
    """Sample the pairs from the reference, label them by the gold reward, write them."""
    import torch

    from rlhf_scratch.models.loading import load_lm
    from rlhf_scratch.rollout.prompts import load_prompts

    if opts.threads:
        torch.set_num_threads(opts.threads)
    prompts = load_prompts(opts.prompts, prefix=opts.prefix, seed=opts.seed)
    lm = load_lm(opts.model).eval()
    rows = make_preference_pairs(
        lm, prompts, opts.num_pairs, gold=opts.gold, label=opts.label, seed=opts.seed, gen_len=opts.gen_len,
        temperature=opts.temperature, top_k=opts.top_k, stop_at_eos=opts.prompts != PROMPT_PREFIX,
        batch_size=opts.batch_size, source=opts.prompts, rater=opts.rater,
        rater_params={**rater_params(opts), "token": opts.rater_token.strip()})
    write_pairs(rows, opts.out)
    agree = sum(r["score_chosen"] >= r["score_rejected"] for r in rows) / len(rows)
    rater = "" if opts.rater == "honest" else f"; rater {opts.rater}"
    print(f"wrote {len(rows)} pairs to {opts.out} (chosen has the higher gold score in {agree:.0%}{rater})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
