"""A group estimator's exact expected gradient under a 0/1 reward: no Monte-Carlo needed.

With r ∈ {0, 1}, completion i's advantage in its group of G depends on the group only through its own
reward r_i and K, how many of the other G − 1 are right; K ~ Binomial(G − 1, p_x) with p_x = π(right | x),
independent of y_i. So one row's expected term is a sum over completions and over k:

    E[A_i w(y_i) ∇log π(y_i)] = Σ_y π(y|x) Ā(y) ∇log π(y),    Ā(y) = w(y) Σ_k P(K = k) A(r(y), k)

— REINFORCE with the advantage averaged over the rest of the group, exact by enumeration. A(r, k) is the
package's own advantage (`compute_rloo_advantages`, `compute_grpo_advantages`) of the group
[r, 1 × k, 0 × (G − 1 − k)]; w(y) is the loss type's weight of a completion's tokens: 1 (a sequence
surrogate, luspo), 1/|y| (grpo, sapo, GSPO's sequence ratio: a per-completion token mean) or 1/L
(dr_grpo). A batch's objective is a mean over its X·G rows, so E[g] = Σ_y q(y) Ā(y) ∇log π(y) with
q(y) = π(y|x)/X: `exact_group_estimator` is that one-completion estimator, measured exactly like
REINFORCE. (The variance is not: it is the group's, Monte-Carlo.)

With w = 1, Σ_y ∇π(y|x) = 0 turns it into a number per prompt: E[g] = Σ_x c_x ∇J_x, where ∇J_x is
prompt x's part of ∇J and

    c_x = Σ_k P(K = k) (A(1, k) − A(0, k))        (`coefficient`)

    RLOO           A(1, k) − A(0, k) = 1 for every k          c = 1: unbiased
    GRPO, no std   = 1 − 1/G                                  c = (G − 1)/G: the right direction, shrunk
    GRPO, std      = (1 − (k+1)/G)/(σ_{k+1} + ε) + (k/G)/(σ_k + ε), σ_m the group std of m ones
                   c depends on p_x: each prompt's part is scaled differently, so E[g] leaves ∇J's direction

Batch-wide normalisers (bnpo, dapo, cispo, vespo: the batch's tokens; the batch std; PPO's whitening)
couple the prompts and the lengths of the whole batch: not reducible this way, they stay Monte-Carlo.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from rlhf_scratch.algorithms.grpo import compute_grpo_advantages
from rlhf_scratch.algorithms.rloo import compute_rloo_advantages
from rlhf_scratch.microscope.estimators import Estimator, Rows, surrogate_sum

GROUP_ESTIMATORS = {
    "rloo": ("rloo", "sequence"),
    "grpo_adv_none": ("none", "sequence"),
    "grpo_adv_group": ("group", "sequence"),
    "grpo_grpo": ("group", "token_mean"),
    "grpo_sapo": ("group", "token_mean"),
    "gspo": ("group", "token_mean"),
    "grpo_luspo": ("group", "sequence"),
    "grpo_dr_grpo": ("group", "max_len"),
    "dr_grpo_paper": ("none", "max_len"),
}
"""The batch estimators of `estimators.all_estimators` reducible exactly: name -> (advantage, token weight)."""


def advantage_table(advantage: str, G: int) -> Float[Tensor, "2 G"]:
    """A(r, k): the package's advantage of the first completion of the group [r, 1 × k, 0 × (G − 1 − k)],
    for r = 0, 1 and k = 0 … G − 1; `advantage` is "rloo" or GRPO's scale_rewards ("none", "group")."""
    table = torch.zeros(2, G, dtype=torch.float64)
    for r in (0, 1):
        for k in range(G):
            rewards = torch.tensor([float(r)] + [1.0] * k + [0.0] * (G - 1 - k))
            A = (compute_rloo_advantages(rewards, G) if advantage == "rloo"
                 else compute_grpo_advantages(rewards, G, advantage))
            table[r, k] = A[0].item()
    return table


def binomial(n: int, p: float) -> Float[Tensor, " n_plus_1"]:
    """P(K = k), K ~ Binomial(n, p), k = 0 … n."""
    return torch.tensor([math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)], dtype=torch.float64)


def expected_advantages(advantage: str, G: int, p: float) -> Float[Tensor, " 2"]:
    """(Ā(0), Ā(1)): a completion's advantage averaged over the other G − 1, given its own reward 0 or 1."""
    return advantage_table(advantage, G) @ binomial(G - 1, p)


def coefficient(advantage: str, G: int, p: float) -> float:
    """c = Ā(1) − Ā(0): what a sequence surrogate's expected gradient is, times prompt x's ∇J_x."""
    wrong, right = expected_advantages(advantage, G, p).tolist()
    return right - wrong


def token_weight(rows: Rows, weight: str) -> Float[Tensor, " n"]:
    """w(y): 1, 1/|y| (a token mean per completion) or 1/L (dr_grpo's constant)."""
    if weight == "sequence":
        return torch.ones_like(rows.rewards)
    if weight == "token_mean":
        return 1.0 / rows.comps.lengths.to(rows.rewards.dtype)
    return torch.full_like(rows.rewards, 1.0 / rows.knobs.max_len)


def exact_group_estimator(name: str, p_right: tuple[float, ...], G: int) -> Estimator:
    """The one-completion estimator whose exact expectation is the group estimator `name`'s:
    Ā(y) ∇log π(y) (`surrogate_sum`), Ā from the prompt's p_right[x] (π(right | x)) and its reward."""
    advantage, weight = GROUP_ESTIMATORS[name]
    table = torch.stack([expected_advantages(advantage, G, p) for p in p_right]).float()  # [X, 2]

    def fn(rows: Rows) -> Float[Tensor, ""]:
        right = (rows.rewards == 1).long()
        if not bool(((rows.rewards == 0) | (rows.rewards == 1)).all()):
            raise ValueError(f"exact_group_estimator: {name} is exact only under a 0/1 reward")
        return surrogate_sum(rows, table[rows.comps.prompt, right] * token_weight(rows, weight))

    return Estimator(f"{name}_exact", fn, "completion", "J", f"{name}'s expectation, exactly (0/1 reward)")
