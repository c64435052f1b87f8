"""The checks of notebook 09, reward hacking: the fall decided, early stopping, the ensemble, the excess explained.

Built as `checks.py` is (read its docstring): each `check_<name>(fn)` runs cases and names the classic
mistake by the number it produced. Each check has hand-made cases (the answer worked out in a comment)
and, where the exercise reads curves, the recorded ones: the 12 PPO seeds of
benchmarks/hacking_confirm_2026-11-27.json (and for early stopping the 6 of
benchmarks/hacking_decided_2026-11-27.json beside them, the 18 seeds of the mitigation table). There
the answer is the course's solution (`solutions_hacking`), which tests/unit/test_checks_hacking.py
checks equal to the package's functions in `studies.hacking` and `reward.ensemble` (course does not
import studies: tests/unit/test_layers.py), and each mistake is the solution with the mistake in it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import torch
from torch import Tensor

from rlhf_scratch.course.checks import Case, Mistake, Reference, _run, _t

SOLUTIONS = "rlhf_scratch.course.solutions_hacking"
REFERENCES: dict[str, Reference] = {
    "registered_fall": Reference(SOLUTIONS, "(curves, peak_phase, final_phase)"),
    "held_out_peak": Reference(SOLUTIONS, "(curves)"),
    "early_stop_index": Reference(SOLUTIONS, "(proxy, se, patience=3)"),
    "ensemble_mean": Reference(SOLUTIONS, "(scores)"),
    "ensemble_min": Reference(SOLUTIONS, "(scores)"),
    "explained_share": Reference(SOLUTIONS, "(excess, activation, policy)"),
}
"""The solution of each exercise (written to be read; the package's own is named in its docstring)."""

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
CONFIRM = BENCHMARKS / "hacking_confirm_2026-11-27.json"
"""The second pre-registered test: PPO against the repetition-blind proxy, seeds 10-21, peak phase 24, final 60."""
DECIDED = BENCHMARKS / "hacking_decided_2026-11-27.json"
"""The first: seeds 4-9 (PPO; its GRPO curves are not read here)."""
PEAK_PHASE, FINAL_PHASE = 24, 60
PROXY_SE = 0.0276
"""s of the early-stopping rule: the proxy's standard error on the reference (benchmarks/hacking_mitigations_2026-11-27.json)."""


def recorded_curves(path: Path = CONFIRM, algo: str = "PPO") -> dict[int, list[dict]]:
    """{seed: curve} of one recorded study, seeds as ints, in seed order."""
    curves = json.loads(path.read_text())["curves"][algo]
    return {int(s): curves[s] for s in sorted(curves, key=int)}


@lru_cache(maxsize=1)
def _confirm() -> dict[int, list[dict]]:
    return recorded_curves(CONFIRM)


@lru_cache(maxsize=1)
def _eighteen() -> dict[int, list[dict]]:
    return {**recorded_curves(DECIDED), **recorded_curves(CONFIRM)}


def _copy(curves: dict[int, list[dict]]) -> dict[int, list[dict]]:
    """Fresh dicts, so that a learner's edit of a point cannot leak into the next case."""
    return {s: [dict(p) for p in c] for s, c in curves.items()}


def _by_seed(out: dict, seeds) -> Tensor:
    """A {seed: number} answer as a tensor in seed order."""
    if not isinstance(out, dict):
        raise AssertionError(f"return a dict {{seed: number}}, one entry per seed of `curves`; got {type(out).__name__}")
    return torch.tensor([float(out[s]) for s in seeds], dtype=torch.float64)


# three seeds evaluated every 2 phases (phase ≠ index); every number a sum of halves and quarters
HAND = {1: [0.0, 2.0, 1.0, 0.5, -0.5], 2: [0.5, 1.0, 3.0, 1.0, 0.25], 3: [0.0, 1.5, 1.0, 2.5, 1.0]}
HAND_PROXY = [0.0, 0.5, 1.0, 1.5, 2.0]


def hand_curves() -> dict[int, list[dict]]:
    return {s: [{"phase": 2 * i, "d": float(i), "gold": g, "proxy": HAND_PROXY[i]} for i, g in enumerate(gold)]
            for s, gold in HAND.items()}


# --- registered_fall ---------------------------------------------------------------------------

REVERSED = "the sign is reversed: the fall is gold at the PEAK minus gold at the END (> 0 when gold fell)"
PROXY_READ = "you read the proxy: the fall that decides the hack is GOLD's (the proxy keeps rising)"


def _fall(curves: dict, peak: int, final: int, key: str = "gold", sign: float = 1.0) -> list[float]:
    def at(c: list[dict], phase: int) -> float:
        return next(p[key] for p in c if p["phase"] == phase)

    return [sign * (at(c, peak) - at(c, final)) for c in curves.values()]


def _registered_fall_cases() -> list[Case]:
    hand, conf = hand_curves(), _confirm()
    # g(2) − g(4) per seed: 2 − 1 = 1;  1 − 3 = −2;  1.5 − 1 = 0.5
    return [
        Case("three seeds by hand, peak phase 2, final phase 4 (evaluated every 2 phases)",
             lambda fn: _by_seed(fn(_copy(hand), 2, 4), hand), [1.0, -2.0, 0.5],
             (Mistake([1.5, 2.75, 0.0], "you indexed the curve by the phase (curve[2], curve[4]): the points are "
                                        "every 2 phases, so find the point whose p['phase'] is the phase"),
              Mistake([2.5, 0.75, 0.5], "final_phase was ignored: you took the curve's LAST point (phase 8)"),
              Mistake([-1.0, 2.0, -0.5], REVERSED),
              Mistake([-0.5, -0.5, -0.5], PROXY_READ))),
        Case(f"the 12 recorded PPO seeds (benchmarks/{CONFIRM.name}), peak phase {PEAK_PHASE}, final {FINAL_PHASE}",
             lambda fn: _by_seed(fn(_copy(conf), PEAK_PHASE, FINAL_PHASE), conf),
             _fall(conf, PEAK_PHASE, FINAL_PHASE),
             (Mistake(_fall(conf, PEAK_PHASE, FINAL_PHASE, sign=-1.0), REVERSED),
              Mistake(_fall(conf, PEAK_PHASE, FINAL_PHASE, key="proxy"), PROXY_READ))),
    ]


def check_registered_fall(fn: Callable) -> None:
    """Check `registered_fall(curves, peak_phase, final_phase) -> {seed: g(p*) − g(final)}` (the solution:
    `rlhf_scratch.course.solutions_hacking`; the package's: `studies.hacking.pilot.summarise`'s registered fall).

    Recognises: the curve indexed by the phase, the last point for the final phase, the sign, the proxy read.
    """
    _run("registered_fall", fn, _registered_fall_cases(), REFERENCES["registered_fall"])


# --- held_out_peak -----------------------------------------------------------------------------

OWN_INCLUDED = ("the seed is in its own peak: take the mean gold of the OTHER seeds only, so that this seed's noise "
                "cannot pick its own peak (its highest noisy point sits above its curve)")
OWN_ONLY = "that is each seed's OWN peak, picked by its own noise: use the other seeds' mean gold"


def _peaks(curves: dict, others: str = "others", pick: Callable = max, key: str = "gold") -> list[float]:
    """Each seed's phase where the mean of `others` ("others", "all", "own") of `key` is picked by `pick`."""
    out = []
    for s, c in curves.items():
        group = {"others": [v for o, v in curves.items() if o != s], "all": list(curves.values()), "own": [c]}[others]
        mean = [sum(g[i][key] for g in group) / len(group) for i in range(len(c))]
        out.append(float(c[pick(range(len(c)), key=mean.__getitem__)]["phase"]))
    return out


def _held_out_peak_cases() -> list[Case]:
    hand, conf = hand_curves(), _confirm()
    # the other seeds' mean gold: seed 1 (2, 3): [0.25, 1.25, 2, 1.75, 0.625] → index 2, phase 4;
    # seed 2 (1, 3): [0, 1.75, 1, 1.5, 0.25] → phase 2;  seed 3 (1, 2): [0.25, 1.5, 2, 0.75, −0.125] → phase 4
    return [
        Case("three seeds by hand, evaluated every 2 phases",
             lambda fn: _by_seed(fn(_copy(hand)), hand), [4.0, 2.0, 4.0],
             (Mistake([4.0, 4.0, 4.0], OWN_INCLUDED),  # all three: [1/6, 1.5, 5/3, 4/3, 0.25] → phase 4
              Mistake([2.0, 4.0, 6.0], OWN_ONLY),
              Mistake([2.0, 1.0, 2.0], "that is the INDEX of the peak: return the point's p['phase']"),
              Mistake([0.0, 0.0, 8.0], "you took the lowest mean: the peak is where the others' mean gold is HIGHEST"),
              Mistake([8.0, 8.0, 8.0], "you read the proxy, which keeps rising: the peak is gold's"))),
        Case(f"the 12 recorded PPO seeds (benchmarks/{CONFIRM.name})",
             lambda fn: _by_seed(fn(_copy(conf)), conf), _peaks(conf),
             (Mistake(_peaks(conf, "all"), OWN_INCLUDED), Mistake(_peaks(conf, "own"), OWN_ONLY))),
    ]


def check_held_out_peak(fn: Callable) -> None:
    """Check `held_out_peak(curves) -> {seed: phase}`: the phase where the other seeds' mean gold peaks
    (the package's, which returns gold there: `studies.hacking.pilot.held_out_peaks`).

    Recognises: the seed in its own peak, each seed's own peak, the index for the phase, the minimum, the proxy.
    """
    _run("held_out_peak", fn, _held_out_peak_cases(), REFERENCES["held_out_peak"])


# --- early_stop_index --------------------------------------------------------------------------

STRICT = ("a rise of exactly s does not count: the rule stops when max(r_{i+1} … r_{i+m}) ≤ r_i + s (≤, not <); "
          "here the window's max equals r_i + s")
NO_SE = "s was ignored: a rise within the proxy's standard error s is noise, so it does not count as a rise"
AT_DECISION = ("that is i* + m, where the rule is DECIDED: the checkpoint kept is i*, the evaluation the m "
               "after it did not beat")
AT_END = "that is the last evaluation, T: the rule stops at the FIRST i whose next m evaluations do not rise by more than s"
M_SHORT = "off by one in m: the window is the m = patience evaluations AFTER i, proxy[i + 1 : i + 1 + m] (yours is m − 1 long)"
M_LONG = "off by one in m: the window is the m = patience evaluations AFTER i, proxy[i + 1 : i + 1 + m] (yours is m + 1 long)"


def _stop(proxy: list[float], se: float, m: int = 3, strict: bool = False, last_window: int = 0,
          decided: bool = False) -> float:
    """The rule, or with a mistake: `strict` <, `last_window` +1 lets windows shorter than m at the end in,
    −1 never tries the last full one, `decided` returns i* + m."""
    last = len(proxy) - 1
    for i in range(max(last - m + 1 + last_window, 0)):
        top = max(proxy[i + 1: i + 1 + m])
        if top < proxy[i] + se if strict else top <= proxy[i] + se:
            return float(min(i + m, last) if decided else i)
    return float(last)


def _stop_all(curves: dict, se: float = PROXY_SE, **mistake) -> list[float]:
    return [_stop([p["proxy"] for p in c], se, **mistake) for c in curves.values()]


def _early_stop_cases() -> list[Case]:
    a = [0.0, 1.0, 2.0, 2.25, 2.5, 2.5, 2.25, 2.0]
    b = [1.0, 0.5, 0.75, 2.0, 1.5, 1.25, 1.0, 2.5, 3.0]
    c = [0.0, 1.0, 2.0, 3.0, 3.0, 3.0, 3.0]
    d = [0.0, 1.0, 2.0, 3.0, 4.0, 4.0, 4.0]
    eighteen = _eighteen()

    def one(proxy: list[float], se: float, **kw):
        return lambda fn: torch.tensor(float(fn(list(proxy), se, **kw)), dtype=torch.float64)

    return [
        # s = 0.5, m = 3: i = 0, 1 rise (2.25 > 0.5, 2.5 > 1.5); i = 2: max(2.25, 2.5, 2.5) = 2.5 ≤ 2 + 0.5 → 2
        Case("s = 0.5, m = 3: a rise of exactly s after i = 2", one(a, 0.5), 2.0,
             (Mistake(3.0, STRICT),  # i = 3: 2.5 < 2.75
              Mistake(4.0, NO_SE),  # s = 0: i = 4, max(2.5, 2.25, 2) ≤ 2.5
              Mistake(5.0, AT_DECISION), Mistake(7.0, AT_END))),
        # s = 0, m = 3: i = 0: max(0.5, 0.75, 2) > 1; i = 1, 2 rise to 2; i = 3: max(1.5, 1.25, 1) ≤ 2 → 3
        Case("s = 0, m = 3: the window's length", one(b, 0.0), 3.0,
             (Mistake(0.0, M_SHORT),  # m = 2: max(0.5, 0.75) ≤ 1 at i = 0
              Mistake(8.0, M_LONG),  # m = 4: i = 3 sees the 2.5; i = 4 sees 3; none qualifies, T = 8
              Mistake(6.0, AT_DECISION))),
        # s = 0, m = 3, T = 6: i = 3 = T − m is the last full window: max(3, 3, 3) ≤ 3 → 3
        Case("s = 0, m = 3: the last full window, i = T − m", one(c, 0.0), 3.0,
             (Mistake(6.0, "the last full window, i = T − m, was never tried: i runs over range(T − m + 1)"),)),
        # s = 0, m = 3, T = 6: rising to i = 4; i = 4 has only 2 evaluations after it, so none qualifies: T = 6
        Case("s = 0, m = 3: too few evaluations left after i = 4", one(d, 0.0), 6.0,
             (Mistake(4.0, "a window shorter than m was let in at the end (i = 4 sees only 2 evaluations): i + m ≤ T"),)),
        Case("patience = 2 given by keyword", one(b, 0.0, patience=2), 0.0, (Mistake(3.0, "patience was ignored (m = 3 used)"),)),
        Case(f"the 18 recorded PPO seeds' held-out proxy, s = {PROXY_SE}, m = 3 (the mitigation table's rule)",
             lambda fn: torch.tensor([float(fn([p["proxy"] for p in cv], PROXY_SE)) for cv in eighteen.values()],
                                     dtype=torch.float64),
             _stop_all(eighteen),
             (Mistake(_stop_all(eighteen, m=2), M_SHORT), Mistake(_stop_all(eighteen, m=4), M_LONG),
              Mistake(_stop_all(eighteen, se=0.0), NO_SE), Mistake(_stop_all(eighteen, decided=True), AT_DECISION)),
             atol=0.0, rtol=0.0),
    ]


def check_early_stop_index(fn: Callable) -> None:
    """Check `early_stop_index(proxy, se, patience=3) -> int`: the first i with i + m ≤ T and
    max(r_{i+1} … r_{i+m}) ≤ r_i + s, else T (the package's: `studies.hacking.mitigate.early_stop_index`).

    Recognises: < for ≤, s ignored, i* + m returned, T returned, m off by one, the last window skipped,
    short windows at the end, patience ignored.
    """
    _run("early_stop_index", fn, _early_stop_cases(), REFERENCES["early_stop_index"])


# --- ensemble_mean, ensemble_min ---------------------------------------------------------------

# k = 3 members (rows) × 4 samples: sample 3 has the highest mean and the second-lowest worst case
SCORES = [[2.0, 1.0, 0.5, -1.0],
          [2.5, 1.5, 0.0, 3.0],
          [-1.5, 1.25, 1.0, 4.0]]
WRONG_AXIS = "reduced over the wrong axis: scores is [k members, batch]; reduce over the members, dim=0"


def _ensemble_mean_cases() -> list[Case]:
    return [
        Case("k = 3 members × 4 samples", lambda fn: fn(_t(SCORES)),
             [1.0, 1.25, 0.5, 2.0],  # column means: 3/3, 3.75/3, 1.5/3, 6/3
             (Mistake([0.625, 1.75, 1.1875], WRONG_AXIS),  # row means: 2.5/4, 7/4, 4.75/4
              Mistake([3.0, 3.75, 1.5, 6.0], "that is the sum: the ensemble's reward is the MEAN of the k members"),
              Mistake([2.0, 1.0, 0.5, -1.0], "that is the first member alone: average all k"))),
    ]


def _ensemble_min_cases() -> list[Case]:
    return [
        Case("k = 3 members × 4 samples", lambda fn: fn(_t(SCORES)),
             [-1.5, 1.0, 0.0, -1.0],  # column minima
             (Mistake([-1.0, 0.0, -1.5], WRONG_AXIS),  # row minima
              Mistake([2.5, 1.5, 1.0, 4.0], "that is the best case (max): the worst case is the LOWEST member's score"),
              Mistake([1.0, 1.25, 0.5, 2.0], "that is the mean: the worst case is the minimum over members"))),
    ]


def check_ensemble_mean(fn: Callable) -> None:
    """Check `ensemble_mean(scores [k, batch]) -> [batch]` (the package's: `rlhf_scratch.reward.ensemble.ensemble_mean`).

    Recognises: the wrong axis, the sum, the first member alone.
    """
    _run("ensemble_mean", fn, _ensemble_mean_cases(), REFERENCES["ensemble_mean"])


def check_ensemble_min(fn: Callable) -> None:
    """Check `ensemble_min(scores [k, batch]) -> [batch]`, Coste et al.'s worst case (the package's:
    `rlhf_scratch.reward.ensemble.ensemble_min`).

    Recognises: the wrong axis, the max, the mean. (torch's `.min(dim)` returns values AND indices: return `.values`.)
    """
    _run("ensemble_min", fn, _ensemble_min_cases(), REFERENCES["ensemble_min"])


# --- explained_share ---------------------------------------------------------------------------

# three reference samples (policy False), then three of the policy; three features (columns)
EXCESS = [-1.0, 0.0, 1.0, 2.0, 3.0, 7.0]
ACTIVATION = [[0.0, 1.0, 2.0], [1.0, 1.0, 0.0], [2.0, 1.0, 1.0],
              [3.0, 2.0, 6.0], [4.0, 2.0, 4.0], [5.0, 2.0, 5.0]]
POLICY = [False, False, False, True, True, True]


def _pooled_share(e: Tensor, a: Tensor, policy: Tensor) -> Tensor:
    """The mistake: the slope fitted over all samples together."""
    a_c, e_c = a - a.mean(0), e - e.mean()
    slope = (a_c * e_c[:, None]).sum(0) / (a_c**2).sum(0)
    return slope * (a[policy].mean(0) - a[~policy].mean(0)) / (e[policy].mean() - e[~policy].mean())


def _one_group_share(e: Tensor, a: Tensor, policy: Tensor, group: Tensor) -> Tensor:
    """The mistake: the slope fitted on one group's samples alone (β_w = 0 where a is constant there)."""
    a_c, e_c = a[group] - a[group].mean(0), e[group] - e[group].mean()
    var_a = (a_c**2).sum(0)
    slope = torch.where(var_a > 0, (a_c * e_c[:, None]).sum(0) / var_a.clamp_min(1e-300), torch.zeros_like(var_a))
    return slope * (a[policy].mean(0) - a[~policy].mean(0)) / (e[policy].mean() - e[~policy].mean())


ZERO_WITHIN = ("NaN or inf where the answer is finite: feature 1 is constant within each group, so Σ_g Σ_i (a_i − ā_g)² "
               "= 0 and β_w is 0/0; the exercise defines β_w = 0 there (no variation inside a group, no slope: the "
               "feature explains none of the excess), e.g. torch.where(var_a > 0, cov / var_a, 0)")


def _explained_share_cases() -> list[Case]:
    e, a, p = torch.tensor(EXCESS, dtype=torch.float64), torch.tensor(ACTIVATION, dtype=torch.float64), torch.tensor(POLICY)
    gap_a = a[p].mean(0) - a[~p].mean(0)  # [3, 1, 4]
    # within: e centred [−1, 0, 1 | −2, −1, 3] (ē₀ = 0, ē₁ = 4: gap 4)
    # feature 0: a centred [−1, 0, 1 | −1, 0, 1]: Σ a e = 2 + 5 = 7, Σ a² = 4 → β = 7/4, share = 7/4 · 3/4 = 21/16
    # feature 1: constant within each group → β = 0, share 0 (it only separates the groups)
    # feature 2: a centred [1, −1, 0 | 1, −1, 0]: Σ a e = −1 − 1 = −2, Σ a² = 4 → β = −1/2, share = −1/2 · 4/4 = −1/2
    # the policy's samples alone (e centred [−2, −1, 3]): feature 0 a centred [−1, 0, 1]: Σ a e = 2 + 3 = 5, Σ a² = 2
    #   → β = 5/2, share 15/8; feature 2 a centred [1, −1, 0]: Σ a e = −2 + 1 = −1, Σ a² = 2 → β = −1/2, share −1/2;
    #   the reference's alone (e centred [−1, 0, 1]): β = 2/2 = 1 (share 3/4) and −1/2: [3/4, 0, −1/2]
    return [
        Case("6 samples (3 reference, 3 policy) × 3 features",
             lambda fn: fn(_t(EXCESS), _t(ACTIVATION), torch.tensor(POLICY)), [21 / 16, 0.0, -0.5],
             (Mistake(_pooled_share(e, a, p).tolist(),
                      "the slope was fitted over all samples together: fit it WITHIN each group (centre a and e on their "
                      "group's means), or a feature that merely tells policy from reference explains everything "
                      "(feature 1 here, constant within each group)"),
              Mistake((gap_a / 4).tolist(), "that is (ā₁ − ā₀) / (ē₁ − ē₀) alone: multiply by the within-group slope β_w, "
                                            "how much e moves per unit of a"),
              Mistake([21 / 4, 0.0, -2.0], "the division by the excess's gap ē₁ − ē₀ is missing: the share is a fraction of it"),
              Mistake([-21 / 16, 0.0, 0.5], "the activation's gap the wrong way round: ā₁ − ā₀ is policy minus reference"),
              Mistake(_one_group_share(e, a, p, p).tolist(),
                      "the slope was fitted on the POLICY's samples only: fit it within BOTH groups, each centred on "
                      "its own means and the sums taken over all samples (β_w = Σ_g Σ_i ... / Σ_g Σ_i ...); one "
                      "group alone is half the evidence, and its own slope"),
              Mistake(_one_group_share(e, a, p, ~p).tolist(),
                      "the slope was fitted on the REFERENCE's samples only: fit it within BOTH groups, each centred "
                      "on its own means and the sums taken over all samples")),
             if_not_finite=ZERO_WITHIN),
    ]


def check_explained_share(fn: Callable) -> None:
    """Check `explained_share(excess, activation, policy) -> [features]`: β_w (ā₁ − ā₀) / (ē₁ − ē₀) with the
    within-group slope (the package's, with r² and the gaps: `studies.hacking.find.explained_share`).

    Recognises: the pooled slope, a slope fitted on the policy's (or the reference's) samples only, the gap ratio
    without the slope, no division by the excess's gap, the gap's sign; NaN for the 0/0 of a feature constant
    within each group (β_w = 0 there, as the exercise says).
    """
    _run("explained_share", fn, _explained_share_cases(), REFERENCES["explained_share"])


CASES: dict[str, Callable[[], list[Case]]] = {
    "registered_fall": _registered_fall_cases,
    "held_out_peak": _held_out_peak_cases,
    "early_stop_index": _early_stop_cases,
    "ensemble_mean": _ensemble_mean_cases,
    "ensemble_min": _ensemble_min_cases,
    "explained_share": _explained_share_cases,
}
"""Each exercise's cases, by function name."""
