"""The one-digit arithmetic environment: a verifiable reward small enough to list (issue 56, item 7).

    prompts      X one-digit sums `a+b=` (`reward.arithmetic.make_problems(X, seed, digits=1, ops="+")`),
                 one per prompt; each answer is 0 … 18
    vocabulary   EOS (id 0) and the ten digits 0 … 9 (ids 1 … 10): V = 11
    completion   at most 3 tokens, laid out as `env.make_environment` lays them: "", "d" or "dd" ended
                 by EOS, or three digits cut at 3 — 1 + 10 + 100 + 1,000 = 1,111 per prompt, so every
                 answer 0 … 18 fits with its EOS ("14" + EOS is the longest)
    reward       the package's rule: `reward.verifiable.accuracy_reward` on the decoded text (EOS not in
                 it, as the rollout decodes) against the prompt's ground truth. Exactly one completion of
                 each prompt earns 1: "14" + EOS; not "014" (a leading zero is not an answer), not "140"
                 (cut: the whole line is compared), not "" (`answer_rows` checks it is one)
    policy       the microscope's table of logits, one row per prompt and digit prefix (2 prompts: 222
                 rows × 11 = 2,442 parameters): θ_ref ~ N(0, 1), θ = θ_ref + N(0, 0.5²) (`random_tables`),
                 then each prompt's right answer set to probability p_right[x] (`set_p_answer`)

So J(θ) = E_x π(right answer | x), and every estimator the microscope measures reads it as it reads
the letters environment (`run.measure` with `--env arithmetic`).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from jaxtyping import Float
from torch import Tensor

from rlhf_scratch.microscope.env import Environment, make_environment, random_tables
from rlhf_scratch.reward.arithmetic import Problem, make_problems

DIGITS = "0123456789"
VOCAB = 1 + len(DIGITS)
"""EOS and the ten digits."""
MAX_LEN = 3
"""Two digits and EOS: the longest answer of a one-digit sum (18) with its end."""


def one_digit_sums(n: int, seed: int) -> list[Problem]:
    """n distinct one-digit sums, as the task draws them (`make_problems`, digits 1, op +)."""
    return make_problems(n, seed, digits=1, ops="+")


def make_arithmetic_environment(problems: list[Problem]) -> Environment:
    """Every completion of every problem (V = 11, at most 3 tokens), its text the digits, each prompt's
    ground truth the problem's answer."""
    env = make_environment(VOCAB, MAX_LEN, len(problems))
    return dataclasses.replace(env, words=DIGITS, ground_truth=tuple(p.ground_truth for p in problems),
                               prompt_text=tuple(p.prompt for p in problems))


def answer_rows(env: Environment) -> list[int]:
    """The row of each prompt's one right completion (the accuracy reward's 1); a ValueError if a prompt
    has none or several (the rule, or the layout, would then not be what this environment says)."""
    right = env.right()
    rows = []
    for x in range(env.num_prompts):
        found = (right & (env.completions.prompt == x)).nonzero().flatten().tolist()
        if len(found) != 1:
            raise ValueError(f"answer_rows: prompt {x} ({env.prompt_text[x]}) has {len(found)} right completions, not 1")
        rows.extend(found)
    return rows


def set_p_answer(env: Environment, theta: Float[Tensor, "prefixes vocab"], p_right: tuple[float, ...]) -> Float[Tensor, "prefixes vocab"]:
    """θ with each prompt's right answer (k tokens, EOS included) made probability p_right[x]: at each
    prefix on its path the next right token's logit is moved so that its probability is p^(1/k),
    z = log(q / (1 − q)) + logsumexp of the row's other logits (`env.set_p_right`'s rule, on every row of
    the path). Nothing off the path changes."""
    theta = theta.clone()
    row_of = {p: i for i, p in enumerate(env.prefixes)}
    comps = env.completions
    for x, row in enumerate(answer_rows(env)):
        path = comps.tokens[row, 1 : int(comps.lengths[row]) + 1].tolist()
        q = p_right[x] ** (1 / len(path))
        for t, token in enumerate(path):
            r = row_of[(x, *path[:t])]
            others = torch.cat([theta[r, :token], theta[r, token + 1 :]])
            theta[r, token] = math.log(q / (1 - q)) + others.logsumexp(0)
    return theta


def arithmetic_policies(
    env: Environment, seed: int, p_right: tuple[float, ...], drift: float = 0.5
) -> tuple[Float[Tensor, "prefixes vocab"], Float[Tensor, "prefixes vocab"]]:
    """(θ, θ_ref): the seeded random tables (as the letters environment's), then π(right answer | x) =
    p_right[x] (`set_p_answer`). π ≠ π_ref, so the KL terms have gradients."""
    theta, theta_ref = random_tables(env, seed, drift=drift)
    return set_p_answer(env, theta, p_right), theta_ref
