"""Step 13's open problem, graded exactly by the microscope: an estimator of PPO's gradient with less variance
at the same bias.

The scene (`open_problem_scene`): the microscope's letters environment (EOS and 3 words, completions of at most
4 tokens, 242 of them over two prompts), the sentiment-like reward (σ of the tokens' valences summed: every
token matters), the seeded policy θ with π(first = a | x) = 0.2 and 0.6, as notebook 07 sets it.

The contract is the microscope's (`microscope.estimators`): an estimator maps `Rows` (some completions, the
policy's logits at every position as a leaf, log π and log π_ref of each token, the rewards, the exact value
V(s_t) at each position) to a scalar whose gradient with respect to `rows.logits`, row by row, is each
completion's estimate g(y) of ∇J. One draw is one completion, so the grade is a sum over every completion,
not a sample (`microscope.measure.exact_moments`):

    E[g] = Σ_y q(y) g(y)          bias = ‖E[g] − ∇J‖ / ‖∇J‖          cos = cos(E[g], ∇J)
    variance = (Σ_y q(y) ‖g(y)‖² − ‖E[g]‖²) / ‖∇J‖²                  per completion, in units of ‖∇J‖²

A tool, not an answer: `action_values(rows)`, Q(s_t, a) for every next token a at each position — V of the
longer prefix, or the reward where a ends the completion. The package's entries on the board (`package_board`)
are the microscope's own one-completion estimators, graded the same exact way, and RLOO and GRPO's group mean,
whose batch of G completions a prompt has a closed form (`group_grade`); `benchmarks/open_problem_2026-11-29.json`
records them (`python -m rlhf_scratch.course.open_problem --out FILE` writes it again).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import torch
from jaxtyping import Float
from torch import Tensor

SETTINGS = dict(vocab=4, max_len=4, p_right=(0.2, 0.6), reward="sentiment", seed=0)
"""The scene: notebook 07's environment and policy, under the sentiment-like reward."""
UNBIASED = 1e-4
"""bias below this is 0 to float32 precision (the package's unbiased entries: ~1e-6)."""
TO_BEAT = "ppo_advantage_pg"
"""PPO's estimator with the exact value: the one-step advantage A_t = V(s_{t+1}) − V(s_t) (r at the end),
Σ_t A_t ∇log π(y_t): the clipped surrogate's gradient at ratio 1, without the batch whitening."""


@lru_cache(maxsize=1)
def open_problem_scene():
    """The microscope's `Scene` the estimators are graded in (built once; about 0.05 s)."""
    from rlhf_scratch.microscope.run import scene

    return scene(**SETTINGS)


@lru_cache(maxsize=1)
def _q_table() -> Float[Tensor, "rows vocab"]:
    """Q(p, a) for every prefix row p and next token a (the pad row 0): V(p + a) where p + a is a prefix,
    else the reward of the completion p + a ends (a is EOS, or the last token a completion may have)."""
    sc = open_problem_scene()
    comps, values = sc.env.completions, sc.values
    n, gen = comps.mask.shape
    state, child = comps.idx[:, :-1][comps.mask], comps.idx[:, 1:][comps.mask]  # s_t and s_{t+1} of every action
    action = comps.tokens[:, 1:][comps.mask]
    reward = sc.rewards[:, None].expand(n, gen)[comps.mask]
    q = torch.where(child != sc.env.pad_row, values[child], reward)
    table = torch.zeros(sc.env.num_prefixes + 1, sc.env.vocab)
    table[state, action] = q
    return table


def action_values(rows) -> Float[Tensor, "n gen vocab"]:
    """Q(s_t, a) of the open problem's scene at each position t of each row, for every next token a (0 after the end)."""
    return _q_table()[rows.comps.idx[:, :-1]]


@dataclass(frozen=True)
class Grade:
    """One estimator's exact numbers against ∇J."""

    name: str
    bias: float
    """‖E[g] − ∇J‖ / ‖∇J‖."""
    cos: float | None
    """cos(E[g], ∇J); None where E[g] = 0."""
    along: float
    """E[g]·∇J / ‖∇J‖²: 1 for an unbiased estimator."""
    variance: float
    """E‖g − E[g]‖² per completion / ‖∇J‖²."""
    pad_leak: float
    """The largest |gradient| on positions after a completion's end (not actions: should be 0)."""

    @property
    def unbiased(self) -> bool:
        return self.bias < UNBIASED


def grade(fn: Callable, name: str) -> Grade:
    """The exact `Grade` of the estimator `fn(rows) -> scalar` in the open problem's scene."""
    from rlhf_scratch.microscope.estimators import Estimator

    sc = open_problem_scene()
    e = sc.measure(Estimator(name, fn, "completion", "J", name))
    norm2 = sc.truths["J"].grad.double().pow(2).sum().item()
    return Grade(name, e["rel_error"], e["cos_to_true"], e["norm_ratio_along_true"], e["variance"] / norm2, e["pad_leak"])


def package_estimators() -> dict[str, tuple[Callable, str]]:
    """The package's estimators of ∇J that use one completion a draw (so they are graded exactly), by name."""
    from rlhf_scratch.microscope.estimators import advantage_pg, reinforce, surrogate_sum

    def reinforce_value_baseline(rows):
        return surrogate_sum(rows, rows.rewards - rows.values[:, 0])

    def reinforce_length_normalised(rows):
        return surrogate_sum(rows, rows.rewards / rows.comps.lengths.to(rows.rewards.dtype))

    return {
        "reinforce": (reinforce, "r(y) ∇log π(y), no baseline"),
        "reinforce_value_baseline": (reinforce_value_baseline, "(r(y) − V(x)) ∇log π(y): the prompt's exact value as baseline"),
        TO_BEAT: (advantage_pg("one_step"), "PPO: Σ_t A_t ∇log π(y_t), A_t = V(s_{t+1}) − V(s_t), exact V (the one to beat)"),
        "ppo_gae_advantage_pg": (advantage_pg("gae"), "PPO with GAE(γ = 1, λ = 0.95), exact V"),
        "reinforce_length_normalised": (reinforce_length_normalised, "r(y)/|y| ∇log π(y): a per-token mean (GRPO's weight), biased"),
    }


GROUP_ENTRIES = {
    "rloo": ("RLOO: (r_i − mean of the other G − 1) ∇log π(y_i), G = 8 of each prompt a batch", 1.0),
    "grpo_adv_none": ("GRPO's group mean, no std: (r_i − mean of all G) ∇log π(y_i) = (G − 1)/G · RLOO's", None),
}
"""The group estimators graded exactly (`group_grade`): name -> (about, the advantage's factor on RLOO's;
None: (G − 1)/G)."""


def group_grade(name: str) -> Grade:
    """RLOO's (or GRPO's group mean's) exact `Grade`, per completion: a batch is G completions of each prompt,
    g_B = (1/(X G)) Σ_x h_x with h_x = Σ_i A_i s_i, s = ∇log π(y), A_i = k (r_i − m_{−i}), m_{−i} the mean of
    the other G − 1 rewards of the group (k = 1 for RLOO, (G − 1)/G for GRPO's mean). With c = 1/(G − 1),
    a = E_x[r s], and the draws of a group independent (E[s] = 0):

        E[h_x] = k G a
        E‖h_x‖² = k² (G E[(r − m)² ‖s‖²] + G (G − 1)(1 + c²) ‖a‖²)
        E[(r − m)² ‖s‖²] = E[r² ‖s‖²] − 2 μ E[r ‖s‖²] + (μ² + σ²/(G − 1)) E‖s‖²

    so E[g_B] = k ∇J and Var[g_B] = Σ_x Var[h_x] / (X G)²; times X G (a batch's completions) it is per
    completion, as the other entries. tests/unit/test_open_problem.py checks it against the package's own
    `rloo` estimator, Monte-Carlo over seeded batches (`Scene.measure`)."""
    from rlhf_scratch.microscope.measure import per_unit, rows_for

    sc = open_problem_scene()
    env, comps, G, X = sc.env, sc.env.completions, sc.knobs.num_generations, sc.env.num_prompts
    k = GROUP_ENTRIES[name][1] or (G - 1) / G
    rows = rows_for(comps, sc.theta, sc.theta_ref, sc.rewards, sc.values, sc.knobs)
    (grads,) = torch.autograd.grad(rows.seq_logprobs().sum(), rows.logits)
    S, leak = per_unit(env, comps, grads, torch.arange(len(comps)), len(comps))  # s(y): [n, params]
    pi = (rows.seq_logprobs().detach().double().exp())  # π(y | x)
    r, c, norm2 = sc.rewards.double(), 1.0 / (G - 1), S.pow(2).sum(-1)
    mean, variance = torch.zeros(env.num_params, dtype=torch.float64), 0.0
    for x in range(X):
        w, rx, sx, nx = pi[comps.prompt == x], r[comps.prompt == x], S[comps.prompt == x], norm2[comps.prompt == x]
        mu, sigma2, a = (w * rx).sum(), (w * rx**2).sum() - (w * rx).sum() ** 2, (w * rx) @ sx
        own = (w * rx**2 * nx).sum() - 2 * mu * (w * rx * nx).sum() + (mu**2 + sigma2 / (G - 1)) * (w * nx).sum()
        second = k**2 * (G * own + G * (G - 1) * (1 + c**2) * a.dot(a))
        variance += (second - (k * G) ** 2 * a.dot(a)).item()
        mean += k * a / X
    true = sc.truths["J"].grad.double()
    norm = true.norm().item()
    per_completion = variance / (X * G) ** 2 * (X * G) / norm**2
    return Grade(name, (mean - true).norm().item() / norm, (mean @ true / (mean.norm() * norm)).item(),
                 (mean @ true).item() / norm**2, per_completion, leak)


@lru_cache(maxsize=1)
def package_board() -> tuple[Grade, ...]:
    """Every package entry's exact `Grade`: the one-completion estimators (`grade`) and the group ones (`group_grade`)."""
    return (*(grade(fn, name) for name, (fn, _) in package_estimators().items()), *map(group_grade, GROUP_ENTRIES))


def leaderboard(grades: list[Grade]) -> list[Grade]:
    """Unbiased entries by variance (lowest first), then the biased ones by bias."""
    return sorted(grades, key=lambda g: (not g.unbiased, g.variance if g.unbiased else g.bias))


def verdict(yours: Grade) -> str:
    """What the grade says of the learner's estimator, against PPO's."""
    ppo = next(g for g in package_board() if g.name == TO_BEAT)
    if not yours.unbiased:
        return (f"{yours.name}: biased by {yours.bias:.4g} (‖E[g] − ∇J‖ / ‖∇J‖, exact; its size along ∇J "
                f"{yours.along:.4g}): not an answer — the question keeps PPO's bias, 0")
    if yours.variance < 1e-9:
        return (f"{yours.name}: variance 0: its estimate does not depend on the completion drawn, so it reads ∇J "
                "itself rather than estimating it from a sample: not an estimator")
    change = yours.variance / ppo.variance - 1
    if change < -1e-6:
        best = min(g.variance for g in package_board() if g.unbiased)
        return (f"{yours.name}: unbiased (exact), variance {yours.variance:.4g} against PPO's {ppo.variance:.4g}: "
                f"{-change:.1%} lower: an answer" + ("" if yours.variance >= best else ", and the lowest on the board")
                + ". How low can an estimator from one completion go?")
    return (f"{yours.name}: unbiased (exact), variance {yours.variance:.4g} against PPO's {ppo.variance:.4g} "
            f"({change:+.1%}): not lower yet")


def _check_contract(fn: Callable) -> None:
    """One AssertionError line where `fn` does not return a scalar with a gradient to rows.logits."""
    sc = open_problem_scene()
    from rlhf_scratch.microscope.measure import rows_for

    comps = sc.env.completions[:3]
    rows = rows_for(comps, sc.theta, sc.theta_ref, sc.rewards[:3], sc.values, sc.knobs)
    out = fn(rows)
    if not isinstance(out, Tensor) or out.dim() != 0:
        what = f"a tensor of shape {tuple(out.shape)}" if isinstance(out, Tensor) else type(out).__name__
        raise AssertionError(f"grade_gradient_estimator: return one scalar tensor, Σ over the rows of each "
                             f"completion's objective (its gradient per row is that completion's estimate); got {what}")
    if not out.requires_grad:
        raise AssertionError("grade_gradient_estimator: your objective carries no gradient to rows.logits: build it "
                             "from rows.logprobs (or rows.logits), without .detach() or torch.no_grad()")


def grade_gradient_estimator(fn: Callable, name: str = "yours") -> Grade:
    """Grade `fn(rows) -> scalar` exactly in the open problem's scene: print the board (the package's entries
    and yours, unbiased first by variance) and the verdict against PPO's; return your `Grade`."""
    _check_contract(fn)
    yours = grade(fn, name)
    descriptions = about()
    print(f"{'':2}{'estimator':30s}{'bias':>10s}{'cos':>11s}{'variance':>11s}   (exact, over all "
          f"{len(open_problem_scene().env.completions)} completions; variance per completion / ‖∇J‖²)")
    for g in leaderboard([*package_board(), yours]):
        cos = "—" if g.cos is None else f"{g.cos:.6f}"
        mark = "→ " if g is yours else "  "
        print(f"{mark}{g.name:30s}{g.bias:10.2e}{cos:>11s}{g.variance:11.4g}   {descriptions.get(g.name, '')}".rstrip())
    print(verdict(yours))
    if yours.pad_leak > 0:
        print(f"note: your estimator puts gradient on positions after a completion's end (up to {yours.pad_leak:.3g}); "
              "they are not actions, so a trainer would push on padding (the grade leaves them out)")
    return yours


def about() -> dict[str, str]:
    """Each package entry's one-line description."""
    return {**{n: a for n, (_, a) in package_estimators().items()}, **{n: a for n, (a, _) in GROUP_ENTRIES.items()}}


def record() -> dict:
    """The package's board as benchmarks/open_problem_*.json holds it."""
    return {"settings": {**SETTINGS, "p_right": list(SETTINGS["p_right"])}, "unbiased_below": UNBIASED,
            "to_beat": TO_BEAT, "exact": True,
            "entries": {g.name: {**asdict(g), "about": about()[g.name]} for g in package_board()}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the open problem's package board (exact) as JSON.")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    args = parser.parse_args(argv)
    out = record()
    assert all(math.isfinite(e["variance"]) for e in out["entries"].values())
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
