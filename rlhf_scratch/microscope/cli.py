"""`python -m rlhf_scratch.exact --out DIR [--flag value …]`: the exact-gradient microscope.

Writes DIR/exact.json (one entry per estimator; the off-policy section under "off_policy"),
DIR/exact.md (the tables), DIR/exact.png, DIR/exact_offpolicy.png and DIR/exact.html. A bad flag is
one line on stderr and exit code 2, before torch is imported. `--env arithmetic` measures the same
estimators on one-digit sums under the rule accuracy reward (`microscope.arithmetic`; no off-policy
section, so no exact_offpolicy.png).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

from rlhf_scratch.config import ConfigError
from rlhf_scratch.config.cli import parse_dataclass
from rlhf_scratch.config.command import command

PROG = "python -m rlhf_scratch.exact"
REWARD_NAMES = ("correct", "length", "sentiment")  # env.REWARDS, without importing torch
MAX_COMPLETIONS = 20_000
OUTPUTS = ("exact.json", "exact.md", "exact.png", "exact_offpolicy.png", "exact.html")
ENVS = ("letters", "arithmetic")
ARITHMETIC = {"vocab": 11, "max_len": 3}
"""The arithmetic environment's fixed size (`microscope.arithmetic`: EOS and ten digits, two digits and EOS)."""
ARITHMETIC_REWARDS = ("accuracy", "format")  # env.RULE_REWARDS, without importing torch
OFF_POLICY_FIELDS = ("off_policy_reward", "stale_step", "staleness", "is_clips", "top_p", "off_policy_draws")
"""The off-policy section's settings: the letters environment's only."""


@dataclass
class ExactArgs:
    """Every RLHF gradient estimator of the package against the exact gradient, on a tabular policy
    small enough that every completion can be listed."""

    out: Annotated[str, tyro.conf.arg(help_behavior_hint="(required)")] = ""
    """The folder to write exact.json, exact.md, exact.png, exact_offpolicy.png and exact.html into."""
    env: str = "letters"
    """letters (words a, b, c, …; 'a' first is right) or arithmetic (one-digit sums a+b= drawn with --seed,
    EOS and the digits, at most 2 digits and EOS, the rule accuracy reward; vocab 11 and max_len 3 fixed)."""
    vocab: int = 5
    """Tokens, EOS included (the words are a, b, c, …; 'a' first is the right answer)."""
    max_len: int = 5
    """Longest completion; one that reaches it without EOS is cut there."""
    p_right: tuple[float, ...] = (0.1, 0.5)
    """π(first token = 'a') for each prompt (one number per prompt: a hard one and a medium one);
    arithmetic: π(the whole right answer) for each problem."""
    reward: str = "correct"
    """The main table's reward: correct (right/wrong, blind to length), length (|y| / max_len), sentiment;
    arithmetic: accuracy (the rule; chosen when this is left at correct) or format."""
    num_generations: int = 8
    """G, completions per prompt in a batch (a batch is one group of each prompt)."""
    draws: int = 10_000
    """Monte-Carlo batches per batch estimator (and per policy of the length lesson)."""
    draws_by_reward: int = 2_000
    """Monte-Carlo batches per batch estimator under the two other rewards (the by-reward table)."""
    seed: int = 0
    """Seeds the policy tables and the Monte-Carlo draws."""
    top_k: int = 3
    """k of the top-k sampling entries."""
    temperature: float = 0.7
    """T of the temperature entries."""
    gae_lambda: float = 0.95
    """λ of PPO's GAE entries (γ = 1)."""
    clip: float = 0.2
    """ε of the clipped surrogates (the ratio is 1, so it never binds; cispo's cap is ε itself)."""
    dpo_beta: float = 0.1
    """β of Online DPO."""
    drift: float = 0.5
    """How far π is from π_ref: θ = θ_ref + N(0, drift²) per logit."""
    lesson_p_right: tuple[float, ...] = (0.2, 0.8)
    """The length lesson's policies: π(first = 'a') of every prompt (most wrong, most right)."""
    off_policy_reward: str = "sentiment"
    """The off-policy section's reward (sentiment: every token matters, so a step along ∇J moves every row)."""
    stale_step: float = 0.5
    """The off-policy history: each update is a step of this length along the normalised true gradient."""
    staleness: tuple[int, ...] = (1, 2, 4, 8)
    """How many updates ago the stale samplers are, increasing (the learner is the end of a history of max(staleness) steps)."""
    is_clips: tuple[float, ...] = (1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
    """The C_max of each importance-sampling mode's bias–variance curve, increasing (∞ is always added)."""
    top_p: float = 0.9
    """The top-p of the mismatched sampler (the learner scores with the full softmax)."""
    off_policy_draws: int = 4_000
    """Monte-Carlo batches per group estimator and stale sampler in the off-policy section."""
    threads: int = 1
    """torch threads (1: the measured run time is one core's)."""

    def validate(self) -> ExactArgs:
        """One ConfigError line for the first bad field; the arithmetic environment's fixed values filled in."""
        if not self.out:
            raise ConfigError("out: required (the folder to write exact.json and the rest into)")
        if self.env not in ENVS:
            raise ConfigError(f"env: must be one of {', '.join(ENVS)}; got {self.env!r}")
        if self.env == "arithmetic":
            return dataclasses.replace(self, **self.arithmetic_values()).validate_values()
        return self.validate_values()

    def arithmetic_values(self) -> dict:
        """The fields `--env arithmetic` sets (vocab, max_len, reward), or one ConfigError line for a flag it
        cannot honour: another size, a letters reward, an off-policy setting (that section is the letters')."""
        default = ExactArgs()
        for name, fixed in ARITHMETIC.items():
            if getattr(self, name) not in (getattr(default, name), fixed):
                raise ConfigError(f"{name}: --env arithmetic fixes it at {fixed} (EOS and the ten digits, at most two "
                                  f"digits and EOS); got {getattr(self, name)}")
        reward = "accuracy" if self.reward == default.reward else self.reward
        if reward not in ARITHMETIC_REWARDS:
            raise ConfigError(f"reward: --env arithmetic is scored by {' or '.join(ARITHMETIC_REWARDS)}; got {self.reward!r}")
        for name in OFF_POLICY_FIELDS:
            if getattr(self, name) != getattr(default, name):
                raise ConfigError(f"{name}: the off-policy section is the letters environment's; --env arithmetic "
                                  f"does not run it")
        return {**ARITHMETIC, "reward": reward}

    def validate_values(self) -> ExactArgs:
        """The checks of every field but `env`."""
        for name, low in (("vocab", 3), ("max_len", 1), ("num_generations", 2), ("draws", 2),
                          ("draws_by_reward", 2), ("top_k", 1), ("off_policy_draws", 2),
                          ("threads", 0)):
            if getattr(self, name) < low:
                raise ConfigError(f"{name}: must be >= {low}; got {getattr(self, name)}")
        if self.top_k > self.vocab:
            raise ConfigError(f"top_k: must be <= vocab ({self.vocab}); got {self.top_k}")
        n = len(self.p_right) * (sum((self.vocab - 1) ** k for k in range(self.max_len)) + (self.vocab - 1) ** self.max_len)
        if n > MAX_COMPLETIONS:
            raise ConfigError(f"max_len: {len(self.p_right)} prompts x vocab {self.vocab} x max_len {self.max_len} "
                              f"make {n:,} completions; at most {MAX_COMPLETIONS:,} are listed")
        for name in ("reward", "off_policy_reward")[self.env == "arithmetic":]:
            if getattr(self, name) not in REWARD_NAMES:
                raise ConfigError(f"{name}: must be one of {', '.join(REWARD_NAMES)}; got {getattr(self, name)!r}")
        if not self.staleness or any(k < 1 for k in self.staleness):
            raise ConfigError(f"staleness: each must be >= 1; got {' '.join(map(str, self.staleness)) or 'nothing'}")
        if any(not c > 0 for c in self.is_clips):
            raise ConfigError(f"is_clips: each must be > 0; got {' '.join(map(str, self.is_clips))}")
        if any(c == math.inf for c in self.is_clips):
            raise ConfigError(f"is_clips: each must be finite (∞ is always added); got {' '.join(map(str, self.is_clips))}")
        for name in ("staleness", "is_clips"):  # one row per value, the oldest sampler / the largest C last
            values = getattr(self, name)
            if any(b <= a for a, b in zip(values, values[1:])):
                raise ConfigError(f"{name}: each must be larger than the one before (one row each); "
                                  f"got {' '.join(map(str, values))}")
        if self.off_policy_reward == "length" and self.max_len == 1:
            raise ConfigError("off_policy_reward: length is 1 for every completion at max_len 1 (one token, EOS "
                              "included), so it has no gradient to move the learner along; choose correct or "
                              "sentiment, or --max-len 2 or more")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p: must be in (0, 1]; got {self.top_p}")
        for name in ("p_right", "lesson_p_right"):
            values = getattr(self, name)
            if not values or any(not 0 < p < 1 for p in values):
                raise ConfigError(f"{name}: each must be in (0, 1); got {' '.join(map(str, values)) or 'nothing'}")
        for name in ("temperature", "clip", "dpo_beta", "stale_step"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}: must be > 0; got {getattr(self, name)}")
        if not 0 <= self.gae_lambda <= 1:
            raise ConfigError(f"gae_lambda: must be in [0, 1]; got {self.gae_lambda}")
        if not self.drift >= 0:
            raise ConfigError(f"drift: must be >= 0; got {self.drift}")
        taken = [f for f in OUTPUTS if (Path(self.out) / f).exists()]
        if taken:
            raise ConfigError(f"out: {self.out} already holds {taken[0]}; choose a new folder (nothing was overwritten)")
        if Path(self.out).exists() and not Path(self.out).is_dir():
            raise ConfigError(f"out: {self.out} is a file, not a folder")
        return self


def main(argv: list[str] | None = None) -> int:
    """Parse, validate, measure, write; `command()` owns the one-line error (bad input: exit 2)."""
    return command(parse, run, argv)


def parse(argv: list[str]) -> ExactArgs:
    """ExactArgs from the command line (tyro), validated."""
    return parse_dataclass(ExactArgs, argv, default=ExactArgs(), prog=PROG,
                           description=ExactArgs.__doc__.replace("\n    ", " ")).validate()


def run(args: ExactArgs) -> int:
    """Measure every estimator against the exact gradient; write exact.json and the page. Settings
    whose true gradient is 0 are a ConfigError, found once the exact values are known."""
    import torch

    from rlhf_scratch.microscope.report import write_outputs
    from rlhf_scratch.microscope.run import measure

    if args.threads:
        torch.set_num_threads(args.threads)
    result = measure(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    page = write_outputs(result, out)
    print(f"done: {len(result['estimators'])} estimators in {result['seconds']:.0f} s -> {out / 'exact.json'}, {page}")
    return 0
