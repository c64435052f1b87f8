"""Solutions of notebook 09 (reward hacking), written to be read: plain Python and torch.

- `registered_fall`, `held_out_peak`: the fall of gold from a pre-registered peak, and a peak that a
  seed's own noise did not pick (the package's: `studies.hacking.pilot.held_out_peaks`, which returns
  gold at that phase).
- `early_stop_index`: stop at the first evaluation after which the held-out proxy does not rise by
  more than s for m evaluations (the package's: `studies.hacking.mitigate.early_stop_index`).
- `ensemble_mean`, `ensemble_min`: a reward-model ensemble's mean and worst case over its k members
  (Coste et al. 2023; the package's: `reward.ensemble`).
- `explained_share`: the share of the proxy's excess over gold that one feature explains, its slope
  fitted within the reference's and the policy's samples (the package's, with r² and the gaps:
  `studies.hacking.find.explained_share`).

`course` is below `studies` (tests/unit/test_layers.py), so the studies' functions are not imported
here: tests/unit/test_checks_hacking.py checks that each solution equals the package's.
Each solution cell of notebook 09 is a function's source here (notebooks/make_09_reward_hacking.py), so
nothing in a function body needs an import beyond torch. A curve is one run's evaluated points, in order: [{"phase", "d", "gold", "proxy", ...}, ...];
`curves` maps each seed to its curve.
"""

from __future__ import annotations

import torch


def registered_fall(curves, peak_phase, final_phase):
    """{seed: g(peak_phase) − g(final_phase)}: gold at the pre-registered peak less gold at the end,
    each read at the point whose "phase" is that phase (> 0 when gold fell)."""
    def gold_at(curve, phase):
        return next(p["gold"] for p in curve if p["phase"] == phase)

    return {s: gold_at(c, peak_phase) - gold_at(c, final_phase) for s, c in curves.items()}


def held_out_peak(curves):
    """{seed: the phase where the OTHER seeds' mean gold is highest} (the seeds evaluated at the same phases)."""
    peaks = {}
    for s, curve in curves.items():
        others = [c for o, c in curves.items() if o != s]
        mean = [sum(c[i]["gold"] for c in others) / len(others) for i in range(len(curve))]
        best = max(range(len(curve)), key=lambda i: mean[i])  # the first index on a tie
        peaks[s] = curve[best]["phase"]
    return peaks


def early_stop_index(proxy, se, patience=3):
    """i*: the first i with i + m ≤ T and max(r_{i+1} … r_{i+m}) ≤ r_i + s; T (the last index) when none."""
    last = len(proxy) - 1
    for i in range(last - patience + 1):  # i + m ≤ T: a full window of m evaluations after i
        if max(proxy[i + 1: i + 1 + patience]) <= proxy[i] + se:
            return i
    return last


def ensemble_mean(scores):
    """R(x) = (1/k) Σ_j r_j(x): scores is [k members, batch], one reward per sample back."""
    return scores.mean(dim=0)


def ensemble_min(scores):
    """R(x) = min_j r_j(x): the worst case over the k members (Coste et al.'s WCO)."""
    return scores.min(dim=0).values


def explained_share(excess, activation, policy):
    """share_f = β_w (ā₁ − ā₀) / (ē₁ − ē₀) per feature f (a column of `activation`), with the slope
    β_w = Σ (a − ā_g)(e − ē_g) / Σ (a − ā_g)² fitted WITHIN each group g (policy = True: group 1); β_w = 0
    for a column constant within each group (0/0: no variation inside a group, no slope)."""
    e, a = excess.double(), activation.double()
    e_within, a_within = e.clone(), a.clone()
    for group in (policy, ~policy):
        e_within[group] -= e[group].mean()
        a_within[group] -= a[group].mean(0)
    var_a = (a_within**2).sum(0)
    slope = torch.where(var_a > 0, (a_within * e_within[:, None]).sum(0) / var_a.clamp_min(1e-300),
                        torch.zeros_like(var_a))
    gap_a = a[policy].mean(0) - a[~policy].mean(0)
    return slope * gap_a / (e[policy].mean() - e[~policy].mean())
