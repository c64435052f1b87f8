"""Best-of-n against a flawed proxy (issue 46, item 2): how far the proxy's own pick of n reference
samples goes toward the flaw, exactly, over sampling seeds.

    python -m rlhf_scratch.studies.hacking.bon --proxies hack45/ --rater repetition --seeds 1,2,3 --out bon.json
    python -m rlhf_scratch.studies.hacking.bon --proxies q/ --rater repetition --seeds 1,2 --n-max 8 --eval-prompts 4 --out q.json

Per seed: `n_max` completions of each held-out prompt (OUT/eval.txt of the proxies' folder) sampled
from the reference (temperature 1, whole vocabulary, stop at EOS, as the RL runs' held-out hook
samples), each scored by the proxy, by gold (g′ = g − c·rep₃ for the repetition rater, as
`pilot.curve`), and by the flaw's own measures (rep₃, length). For n = 1, 2, 4 … n_max the expected
value of the proxy's pick is computed exactly over the n-subsets (`best_of_n_expectation`), at
d = √KL(best-of-n ‖ reference) (`kl_bon`), averaged over prompts. Over the seeds: each point's mean
and t interval, and gold's change from n = 1 to n_max paired over seeds (`stats.paired_difference`).

Best-of-n leaves the reference's support alone: it can only pick a repeated completion that the
reference wrote. So it shows how much of the hack is within reach at d ≤ √KL(n_max) without RL.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from rlhf_scratch.config import ConfigError
from rlhf_scratch.config.cli import parse_dataclass
from rlhf_scratch.config.command import command
from rlhf_scratch.reward.preferences import RATERS
from rlhf_scratch.studies.runner import check_at_least, seed_list

PROG = "python -m rlhf_scratch.studies.hacking.bon"


@dataclass
class BonArgs:
    """Best-of-n against a flawed proxy, over sampling seeds."""

    proxies: str
    """A pilot's or the hacking study's folder: eval.txt and rm-<rater>/ (`--proxies` of the study)."""
    out: str
    """The JSON to write (refused if it exists: nothing is overwritten)."""
    rater: str = "repetition"
    """Which proxy: rm-<rater>/ in --proxies (honest, length, token, repetition)."""
    seeds: str = "1,2,3"
    """Comma-separated sampling seeds."""
    n_max: int = 256
    """The largest n (a power of 2): samples per prompt."""
    eval_prompts: int = 64
    """The first this many prompts of eval.txt."""
    gen_len: int = 16
    """Tokens per completion (the most); the RL runs' --gen-len."""
    rater_penalty: float = 4.0
    """c in g′ = g − c·rep₃ (repetition rater only; the study's --rater-penalty)."""
    threads: int = 1
    """Torch threads."""

    def validate(self) -> BonArgs:
        """One ConfigError line for the first bad field, before anything is sampled or written."""
        if self.rater not in RATERS:
            raise ConfigError(f"rater: must be one of {', '.join(RATERS)}; got {self.rater!r}")
        if self.n_max < 1 or self.n_max & (self.n_max - 1):
            raise ConfigError(f"n_max: must be a power of 2; got {self.n_max}")
        check_at_least(self, ("eval_prompts", "gen_len", "threads"))
        if not (math.isfinite(self.rater_penalty) and self.rater_penalty >= 0):
            raise ConfigError(f"rater_penalty: must be finite and >= 0; got {self.rater_penalty}")
        seed_list(self.seeds)
        held = Path(self.proxies) / "eval.txt"
        if not held.is_file():
            raise ConfigError(f"proxies: {self.proxies} holds no eval.txt (a pilot's or the hacking study's OUT)")
        if not (Path(self.proxies) / f"rm-{self.rater}" / "reward_model.pt").is_file():
            raise ConfigError(f"proxies: {self.proxies} holds no rm-{self.rater}/reward_model.pt")
        out = Path(self.out)
        if out.exists():
            raise ConfigError(f"out: {self.out} exists (nothing is overwritten)")
        if not out.parent.is_dir():
            raise ConfigError(f"out: {out.parent} is no folder")
        if self.eval_prompts > len(self.prompts()):
            raise ConfigError(f"eval_prompts: {self.eval_prompts}, but {held} holds {len(self.prompts())} prompts")
        from rlhf_scratch.models.loading import load_lm  # the reference's context (`reference_samples`)
        from rlhf_scratch.rollout.prompts import PromptError, check_context

        try:
            check_context(load_lm("tiny"), self.prompts(), self.gen_len, str(held))
        except PromptError as e:
            raise ConfigError(str(e)) from None
        return self

    def prompts(self) -> list[str]:
        """The first --eval-prompts prompts of the proxies' eval.txt."""
        return (Path(self.proxies) / "eval.txt").read_text().splitlines()[: self.eval_prompts]


def pick_expectations(proxy: list[list[float]], values: dict[str, list[list[float]]], ns: list[int]) -> dict[str, list[float]]:
    """For each measure in `values` and each n in `ns`: the mean over prompts of E[the measure of the
    proxy's best of n] (`best_of_n_expectation`, exact over the n-subsets of each prompt's samples);
    also the proxy's own, under "proxy"."""
    from rlhf_scratch.studies.overoptimization.formulas import best_of_n_expectation

    out = {}
    for name, table in {"proxy": proxy, **values}.items():
        out[name] = [sum(best_of_n_expectation(p, v, n) for p, v in zip(proxy, table)) / len(proxy) for n in ns]
    return out


def sample_and_score(args: BonArgs, prompts: list[str], seed: int) -> tuple[list[list[float]], dict[str, list[list[float]]]]:
    """`n_max` reference samples per prompt (drawn with `seed`): the proxy's score of each, and its gold
    (g′ for the repetition rater), rep₃ and length, each as [prompt][sample]."""
    from rlhf_scratch.reward.model import load_reward_model_run
    from rlhf_scratch.reward.preferences import gold_scores
    from rlhf_scratch.studies.hacking.describe import per_sample_ngram_fraction
    from rlhf_scratch.studies.overoptimization.study import reference_samples

    texts, rep3, length = [], [], []
    for group, comp, cmask in reference_samples(prompts, args.n_max, args.gen_len, seed, f"best-of-n samples, seed {seed}"):
        texts.append(group)
        rep3.append(per_sample_ngram_fraction(comp, cmask, 3))
        length.append(cmask.sum(-1).float().tolist())
    flat = [t for group in texts for t in group]
    proxy = load_reward_model_run(Path(args.proxies) / f"rm-{args.rater}").score_texts(flat).view(len(prompts), -1).tolist()
    gold = gold_scores(flat).view(len(prompts), -1).tolist()
    penalty = args.rater_penalty if args.rater == "repetition" else 0.0
    gold = [[g - penalty * r for g, r in zip(gs, rs)] for gs, rs in zip(gold, rep3)]
    return proxy, {"gold": gold, "repeated_3grams": rep3, "length": length}


def summarise(per_seed: dict[int, dict[str, list[float]]], ns: list[int]) -> dict:
    """Over seeds: each measure's mean and t interval at every n; gold's change from n = 1 to n_max,
    paired over seeds."""
    from rlhf_scratch.studies.hacking.pilot import interval
    from rlhf_scratch.studies.stats import finite_or_none, mean_interval, paired_difference

    seeds = sorted(per_seed)

    def point(values: list[float]) -> dict:
        i = mean_interval(values)
        return {"mean": i.mean, "low": finite_or_none(i.low), "high": finite_or_none(i.high), "n": i.n}

    points = {name: [point([per_seed[s][name][i] for s in seeds]) for i in range(len(ns))] for name in per_seed[seeds[0]]}
    change = paired_difference([per_seed[s]["gold"][-1] for s in seeds], [per_seed[s]["gold"][0] for s in seeds])
    return {"points": points, "gold_change_1_to_n_max": interval(change)}


def run_bon(args: BonArgs) -> dict:
    """Every seed, then the summary; the JSON is written to --out."""
    import torch

    from rlhf_scratch.studies.overoptimization.formulas import kl_bon

    torch.set_num_threads(args.threads)
    prompts = args.prompts()
    ns = [2**k for k in range(int(math.log2(args.n_max)) + 1)]
    per_seed = {}
    for seed in seed_list(args.seeds):
        proxy, values = sample_and_score(args, prompts, seed)
        per_seed[seed] = pick_expectations(proxy, values, ns)
    result = {"settings": args.__dict__, "n": ns, "kl": [kl_bon(n) for n in ns], "d": [math.sqrt(kl_bon(n)) for n in ns],
              "per_seed": per_seed, **(summarise(per_seed, ns) if len(per_seed) > 1 else {})}
    Path(args.out).write_text(json.dumps(result, indent=1, default=float) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    def body(args: BonArgs) -> int:
        result = run_bon(args)
        for i, n in enumerate(result["n"]):
            cells = "  ".join(f"{k} {sum(s[k][i] for s in result['per_seed'].values()) / len(result['per_seed']):+.3f}"
                              for k in ("proxy", "gold", "repeated_3grams", "length"))
            print(f"n {n:>4}  d {result['d'][i]:.2f}  {cells}")
        if "gold_change_1_to_n_max" in result:
            c = result["gold_change_1_to_n_max"]
            print(f"gold from n = 1 to n = {args.n_max}: {c['mean']:+.3f} ({c['low']:+.3f} to {c['high']:+.3f}), n = {c['n']} seeds")
        print(f"wrote {args.out}")
        return 0

    return command(lambda a: parse_dataclass(BonArgs, a, default=None, prog=PROG, description=BonArgs.__doc__).validate(), body, argv)


if __name__ == "__main__":
    sys.exit(main())
