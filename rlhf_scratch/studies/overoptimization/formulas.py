"""The over-optimisation study's formulas, each checked by hand in tests/integration/test_overoptimization.py:
best-of-n's KL and its exact expectation over n-subsets, Gao et al.'s functional forms fitted by
least squares (and when such a fit may be reported), a curve read at a given d, and the standard
error of one evaluation's gold. Pure Python (numpy for the fit): no torch, no files.

    kl_bon(n)                          KL(best-of-n ‖ reference) = log n − (n − 1)/n
    best_of_n_expectation(p, v, n)     E[v of the proxy's best of n], exact over the n-subsets
    fit_gao(ds, rs, "bon" | "rl")      R_bon(d) = d(α − βd),  R_RL(d) = d(α − β log d), and the peak
    unsupported_fit(fit, ds)           why a fit must not be reported (too few points, a peak beyond the data)
    at_d(ds, ys, d)                    a curve read where it first reaches d
    gold_standard_error(gold, K)       one evaluation's standard error, its prompts held fixed
"""

from __future__ import annotations

import math
import statistics


def kl_bon(n: int) -> float:
    """KL(best-of-n ‖ reference) = log n − (n − 1)/n (Stiennon et al. 2020; an upper bound, tight
    for continuous rewards)."""
    return math.log(n) - (n - 1) / n


def best_of_n_expectation(proxy: list[float], values: list[float], n: int) -> float:
    """E[value of the proxy's best among n draws without replacement from N samples], exactly:
    with samples sorted by proxy ascending, sample i (1-based) is the best of a random n-subset
    with probability C(i−1, n−1) / C(N, n)."""
    N = len(proxy)
    if not 1 <= n <= N:
        raise ValueError(f"best_of_n_expectation: n must be in 1..{N}; got {n}")
    order = sorted(range(N), key=lambda j: proxy[j])
    log_total = math.lgamma(N + 1) - math.lgamma(n + 1) - math.lgamma(N - n + 1)
    out = 0.0
    for rank, j in enumerate(order, start=1):
        if rank >= n:
            log_c = math.lgamma(rank) - math.lgamma(n) - math.lgamma(rank - n + 1)
            out += values[j] * math.exp(log_c - log_total)
    return out


def fit_gao(ds: list[float], rs: list[float], form: str) -> dict[str, float] | None:
    """Least-squares α, β of R_bon(d) = d(α − βd) (`form="bon"`) or R_RL(d) = d(α − β log d)
    (`form="rl"`) through the points (d, R) with d > 0, and the peak d*, R* (inf when β ≤ 0:
    no peak within the fit; 0 for a best-of-n curve that only falls). None with fewer than 2 points."""
    import numpy as np

    pts = [(d, r) for d, r in zip(ds, rs) if d > 1e-6 and math.isfinite(r)]
    if len(pts) < 2:
        return None
    d = np.array([p[0] for p in pts])
    r = np.array([p[1] for p in pts])
    X = np.stack([d, -d * d], 1) if form == "bon" else np.stack([d, -d * np.log(d)], 1)
    (alpha, beta), *_ = np.linalg.lstsq(X, r, rcond=None)
    if beta <= 0:
        d_star, r_star = math.inf, math.inf
    elif form == "bon" and alpha <= 0:  # falling from the start: the peak is the reference itself
        d_star, r_star = 0.0, 0.0
    elif form == "bon":
        d_star, r_star = alpha / (2 * beta), alpha**2 / (4 * beta)
    else:
        d_star = math.exp(min(alpha / beta - 1, 50.0))
        r_star = beta * d_star
    return {"alpha": float(alpha), "beta": float(beta), "d_star": float(d_star), "R_star": float(r_star)}


def at_d(ds: list[float], ys: list[float], d: float) -> float | None:
    """y where a curve first reaches d: linear between the two points around it (the first point if
    it starts there); None if it never does."""
    for i, x in enumerate(ds):
        if x >= d:
            if i == 0:
                return ys[0]
            return ys[i - 1] + (ys[i] - ys[i - 1]) * (d - ds[i - 1]) / (x - ds[i - 1])
    return None


MIN_FIT_POINTS = 6
"""Fewest (d, gold) points a two-parameter Gao fit is reported from."""
PEAK_REACH = 1.5
"""A fitted peak is reported only within this factor of the largest d measured: beyond it the curve
has not turned, and the fit is extrapolating (4 points within ±1 once gave R* = 162)."""


def unsupported_fit(fit: dict, ds: list[float]) -> str | None:
    """Why a Gao fit must not be reported, or None: too few points, or a peak outside the data."""
    points = sum(d > 1e-6 for d in ds)
    if not fit or points < MIN_FIT_POINTS:
        return f"not enough points ({points} < {MIN_FIT_POINTS})"
    if math.isfinite(fit["d_star"]) and fit["d_star"] > PEAK_REACH * max(ds):
        return f"peak outside the data (d* {fit['d_star']:.2f} > {PEAK_REACH} × largest d {max(ds):.2f})"
    return None


def gold_standard_error(gold: list[float], per_prompt: int) -> float:
    """The standard error of the mean gold of one evaluation, prompts held fixed: the held-out prompts
    are the same at every phase, for every run and method, so the mean over *these* prompts is what a
    point estimates and only the draws within a prompt are noise. With P prompts of K samples each
    (consecutive in `gold`) and s_p² the sample variance of prompt p's K golds,

        s.e. = √(Σ_p s_p² / K) / P           (K ≥ 2;  K = 1: s/√N over all N samples, prompts included)

    A point's 95 % interval is ± 1.96 s.e. (N is in the thousands)."""
    if per_prompt < 2:
        return statistics.stdev(gold) / math.sqrt(len(gold)) if len(gold) > 1 else math.nan
    groups = [gold[i : i + per_prompt] for i in range(0, len(gold), per_prompt)]
    return math.sqrt(sum(statistics.variance(g) for g in groups) / per_prompt) / len(groups)
