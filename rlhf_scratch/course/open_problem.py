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
are the microscope's own estimators, each computed the same exact way; `benchmarks/open_problem_2026-11-29.json`
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


@lru_cache(maxsize=1)
def package_board() -> tuple[Grade, ...]:
    """Every package entry's exact `Grade`."""
    return tuple(grade(fn, name) for name, (fn, _) in package_estimators().items())


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
    about = {n: a for n, (_, a) in package_estimators().items()}
    print(f"{'':2}{'estimator':30s}{'bias':>10s}{'cos':>11s}{'variance':>11s}   (exact, over all "
          f"{len(open_problem_scene().env.completions)} completions; variance per completion / ‖∇J‖²)")
    for g in leaderboard([*package_board(), yours]):
        cos = "—" if g.cos is None else f"{g.cos:.6f}"
        mark = "→ " if g is yours else "  "
        print(f"{mark}{g.name:30s}{g.bias:10.2e}{cos:>11s}{g.variance:11.4g}   {about.get(g.name, '')}".rstrip())
    print(verdict(yours))
    if yours.pad_leak > 0:
        print(f"note: your estimator puts gradient on positions after a completion's end (up to {yours.pad_leak:.3g}); "
              "they are not actions, so a trainer would push on padding (the grade leaves them out)")
    return yours


def record() -> dict:
    """The package's board as benchmarks/open_problem_*.json holds it."""
    return {"settings": {**SETTINGS, "p_right": list(SETTINGS["p_right"])}, "unbiased_below": UNBIASED,
            "to_beat": TO_BEAT, "exact": True,
            "entries": {g.name: {**asdict(g), "about": package_estimators()[g.name][1]} for g in package_board()}}


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
