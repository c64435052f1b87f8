"""Planted mistakes of notebook 09 (`checks_hacking.py`): the registered fall of gold, its held-out peak, early
stopping, a reward-model ensemble, the share of the proxy's excess a feature explains. Each function is the
solution with one classic mistake, as a learner writes it.
"""

import torch

from rlhf_scratch.course.planted import Planted


def fall_reversed(curves, peak_phase, final_phase):
    def at(c, phase):
        return next(p["gold"] for p in c if p["phase"] == phase)
    return {s: at(c, final_phase) - at(c, peak_phase) for s, c in curves.items()}

def fall_by_index(curves, peak_phase, final_phase):
    return {s: c[peak_phase]["gold"] - c[final_phase]["gold"] for s, c in curves.items()}

def peak_with_own_seed(curves):
    mean = [sum(c[i]["gold"] for c in curves.values()) / len(curves) for i in range(len(next(iter(curves.values()))))]
    best = max(range(len(mean)), key=mean.__getitem__)
    return {s: c[best]["phase"] for s, c in curves.items()}

def own_peak(curves):
    return {s: max(c, key=lambda p: p["gold"])["phase"] for s, c in curves.items()}

def stop_strict(proxy, se, patience=3):
    for i in range(len(proxy) - patience):
        if max(proxy[i + 1: i + 1 + patience]) < proxy[i] + se:
            return i
    return len(proxy) - 1

def stop_window_short(proxy, se, patience=3):
    for i in range(len(proxy) - patience):
        if max(proxy[i + 1: i + patience]) <= proxy[i] + se:
            return i
    return len(proxy) - 1

def stop_at_decision(proxy, se, patience=3):
    for i in range(len(proxy) - patience):
        if max(proxy[i + 1: i + 1 + patience]) <= proxy[i] + se:
            return i + patience
    return len(proxy) - 1

def stop_at_end(proxy, se, patience=3):
    return len(proxy) - 1

def share_pooled(excess, activation, policy):
    a, e = activation - activation.mean(0), excess - excess.mean()
    slope = (a * e[:, None]).sum(0) / (a**2).sum(0)
    return slope * (activation[policy].mean(0) - activation[~policy].mean(0)) / (excess[policy].mean() - excess[~policy].mean())

def share_policy_only(excess, activation, policy):
    e, a = excess[policy] - excess[policy].mean(), activation[policy] - activation[policy].mean(0)
    var_a = (a**2).sum(0)
    slope = torch.where(var_a > 0, (a * e[:, None]).sum(0) / var_a, torch.zeros_like(var_a))
    return slope * (activation[policy].mean(0) - activation[~policy].mean(0)) / (excess[policy].mean() - excess[~policy].mean())

def share_unguarded(excess, activation, policy):
    """The formula as written, 0/0 left in: NaN for a feature constant within each group."""
    e, a = excess.clone(), activation.clone()
    for group in (policy, ~policy):
        e[group], a[group] = e[group] - excess[group].mean(), a[group] - activation[group].mean(0)
    slope = (a * e[:, None]).sum(0) / (a**2).sum(0)
    return slope * (activation[policy].mean(0) - activation[~policy].mean(0)) / (excess[policy].mean() - excess[~policy].mean())

def ensemble_mean_over_samples(scores):
    return scores.mean(dim=1)  # [models, samples]: the mean over the samples, one number per model


def ensemble_min_as_max(scores):
    return scores.max(dim=0).values


def ensemble_min_as_mean(scores):
    return scores.mean(dim=0)


def fall_of_the_proxy(curves, peak_phase, final_phase):
    def at(c, phase):
        return next(p["proxy"] for p in c if p["phase"] == phase)
    return {s: at(c, peak_phase) - at(c, final_phase) for s, c in curves.items()}


def fall_to_the_last_point(curves, peak_phase, final_phase):
    return {s: next(p["gold"] for p in c if p["phase"] == peak_phase) - c[-1]["gold"] for s, c in curves.items()}


def _others_mean(curves, s, key="gold"):
    others = [c for o, c in curves.items() if o != s]
    return [sum(c[i][key] for c in others) / len(others) for i in range(len(curves[s]))]


def peak_as_an_index(curves):
    return {s: max(range(len(c)), key=_others_mean(curves, s).__getitem__) for s, c in curves.items()}


def peak_at_the_lowest_mean(curves):
    return {s: c[min(range(len(c)), key=_others_mean(curves, s).__getitem__)]["phase"] for s, c in curves.items()}


def stop_without_se(proxy, se, patience=3):
    for i in range(len(proxy) - patience):
        if max(proxy[i + 1: i + 1 + patience]) <= proxy[i]:
            return i
    return len(proxy) - 1


def stop_window_long(proxy, se, patience=3):
    for i in range(len(proxy) - patience - 1):
        if max(proxy[i + 1: i + 2 + patience]) <= proxy[i] + se:
            return i
    return len(proxy) - 1


def stop_last_window_skipped(proxy, se, patience=3):
    for i in range(len(proxy) - patience - 1):  # one short of range(T − m + 1)
        if max(proxy[i + 1: i + 1 + patience]) <= proxy[i] + se:
            return i
    return len(proxy) - 1


def stop_patience_ignored(proxy, se, patience=3):
    for i in range(len(proxy) - 3):
        if max(proxy[i + 1: i + 4]) <= proxy[i] + se:
            return i
    return len(proxy) - 1


def ensemble_mean_summed(scores):
    return scores.sum(dim=0)


def ensemble_mean_first_member(scores):
    return scores[0]


def ensemble_min_over_samples(scores):
    return scores.min(dim=1).values


def _within_slope(excess, activation, policy, groups):
    e, a = torch.zeros_like(excess), torch.zeros_like(activation)
    for group in groups:
        e[group], a[group] = excess[group] - excess[group].mean(), activation[group] - activation[group].mean(0)
    var_a = (a**2).sum(0)
    return torch.where(var_a > 0, (a * e[:, None]).sum(0) / var_a, torch.zeros_like(var_a))


def share_reference_only(excess, activation, policy):
    slope = _within_slope(excess, activation, policy, [~policy])
    return slope * (activation[policy].mean(0) - activation[~policy].mean(0)) / (excess[policy].mean() - excess[~policy].mean())


def share_without_the_slope(excess, activation, policy):
    return (activation[policy].mean(0) - activation[~policy].mean(0)) / (excess[policy].mean() - excess[~policy].mean())


def share_gap_reversed(excess, activation, policy):
    slope = _within_slope(excess, activation, policy, [policy, ~policy])
    return slope * (activation[~policy].mean(0) - activation[policy].mean(0)) / (excess[policy].mean() - excess[~policy].mean())


P = Planted
PLANTED: tuple[Planted, ...] = (
    P("registered_fall", "sign-reversed", fall_reversed, "the sign is reversed"),
    P("registered_fall", "phase-as-index", fall_by_index, "indexed the curve by the phase"),
    P("held_out_peak", "own-seed-in-peak", peak_with_own_seed, "the seed is in its own peak"),
    P("held_out_peak", "own-peak", own_peak, "each seed's OWN peak"),
    P("early_stop_index", "strict", stop_strict, "(≤, not <)"),
    P("early_stop_index", "window-short", stop_window_short, "off by one in m"),
    P("early_stop_index", "at-decision", stop_at_decision, "i* + m, where the rule is DECIDED"),
    P("early_stop_index", "at-end", stop_at_end, "that is the last evaluation, T"),
    P("ensemble_mean", "wrong-axis", ensemble_mean_over_samples, "the wrong axis"),
    P("ensemble_min", "max", ensemble_min_as_max, "the best case (max)"),
    P("ensemble_min", "mean", ensemble_min_as_mean, "that is the mean"),
    P("explained_share", "pooled", share_pooled, "fitted over all samples together"),
    P("explained_share", "policy-only", share_policy_only, "fitted on the POLICY's samples only"),
    P("explained_share", "unguarded", share_unguarded, "the exercise defines β_w = 0 there"),
    P("registered_fall", "proxy-read", fall_of_the_proxy, "you read the proxy: the fall that decides the hack is GOLD's"),
    P("registered_fall", "last-point", fall_to_the_last_point, "final_phase was ignored"),
    P("held_out_peak", "index", peak_as_an_index, "that is the INDEX of the peak"),
    P("held_out_peak", "lowest", peak_at_the_lowest_mean, "you took the lowest mean"),
    P("early_stop_index", "se-ignored", stop_without_se, "s was ignored"),
    P("early_stop_index", "window-long", stop_window_long, "(yours is m + 1 long)"),
    P("early_stop_index", "last-window-skipped", stop_last_window_skipped, "the last full window, i = T − m, was never tried"),
    P("early_stop_index", "patience-ignored", stop_patience_ignored, "patience was ignored"),
    P("ensemble_mean", "sum", ensemble_mean_summed, "that is the sum"),
    P("ensemble_mean", "first-member", ensemble_mean_first_member, "that is the first member alone"),
    P("ensemble_min", "wrong-axis", ensemble_min_over_samples, "the wrong axis"),
    P("explained_share", "reference-only", share_reference_only, "fitted on the REFERENCE's samples only"),
    P("explained_share", "no-slope", share_without_the_slope, "multiply by the within-group slope"),
    P("explained_share", "gap-reversed", share_gap_reversed, "the activation's gap the wrong way round"),
)
"""Notebook 09's planted mistakes (`course.mistakes.Planted`)."""
