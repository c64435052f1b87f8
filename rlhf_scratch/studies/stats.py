"""What a study may say about its runs: a mean over seeds with its 95 % interval and n, a paired
difference, and a verdict that names a winner only when the seeds support it.

    mean_interval([1, 2, 4])            # Interval(mean 2.333, ± 3.795, n 3): x̄ ± t_{0.975, n−1} · s/√n
    difference({1: .9, 2: .8, 3: .85}, {1: .7, 2: .75, 3: .6})   # paired by seed: d_i = a_i − b_i
    verdict({"PPO": {1: .9, ...}, "RLOO": {1: .7, ...}}, "final reward").sentence

**The interval.** For n values x_i (one per seed) with mean x̄ and sample standard deviation
s = √(Σ (x_i − x̄)² / (n − 1)), the 95 % interval of the mean is

    x̄ ± t_{0.975, n−1} · s / √n

with t_{q, ν} Student's t quantile at ν degrees of freedom (ν = 1: 12.71, 2: 4.30, 4: 2.78; the
normal's 1.96 only as n → ∞). It is exact when the seeds' outcomes are normal, and close when
they are roughly so. Why t and not a bootstrap at n = 3–5: a bootstrap resamples the n values it
has, so its percentile interval never reaches past the smallest and largest of them (there are
only 10 distinct resamples of 3 values), and it covers the true mean far less often than it
claims: about 74 % at n = 3 and 83 % at n = 5 for a nominal 95 % (4,000 normal draws each; the
t-interval covered 95 %). The t-interval widens for small n instead, which is the honest answer.
One seed has no spread: its interval is infinite, and a verdict over it is never resolved.

**The paired difference.** Two methods run with the same seeds (the same prompts and the same
sampling seed per pair) are compared seed by seed: d_i = a_i − b_i, then d̄ ± t_{0.975, n−1} · s_d/√n,
and the paired t-test's two-sided p = 2 · P(T_{n−1} > |d̄| / (s_d/√n)). With different seeds on
the two sides the difference is Welch's: ā − b̄ ± t_{0.975, ν} · √(s_a²/n_a + s_b²/n_b), ν by
Welch–Satterthwaite.

**The verdict.** A difference is *resolved* when its interval excludes 0, or when the two
methods' own intervals do not overlap (for paired seeds the second implies the first, since
s_d ≤ s_a + s_b). Otherwise it says so: "not resolved at n = 3 seeds (interval width 0.21)", and
how many seeds it would take at the spread seen (`seeds_needed`): the smallest n with

    (t_{0.975, n−1} + t_{power, n−1}) · s / √n  ≤  |d̄|

where s is the per-seed spread of the difference (s_d paired; √(s_a² + s_b²) with n seeds on each
side otherwise). At power 0.5 (t_{0.5} = 0) that is the n at which the interval would just exclude
0 if the mean and spread stayed as seen — an even chance in a new run; the default power 0.8 is
the usual planning figure (t's in place of the normal z's of the textbook n = ((z_{α/2} + z_β) σ/δ)²).

**t's quantile and CDF** come from scipy.stats.t when scipy is installed (it is not a dependency
of the package), else from `_t_sf` here: the regularized incomplete beta function by its continued
fraction (Numerical Recipes §6.4), P(T > t) = ½ I_{ν/(ν+t²)}(ν/2, ½), and the quantile by bisection.
The two agree to 1e-8 (tests/unit/test_study_stats.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Number = float | int
"""A value (ints are welcome: seeds' results, degrees of freedom)."""
CONFIDENCE = 0.95
POWER = 0.8
MAX_SEEDS = 10_000
"""`seeds_needed` answers None beyond this."""


# --- Student's t ---------------------------------------------------------------------------------


def _scipy_t():
    try:
        from scipy.stats import t
    except ImportError:
        return None
    return t


def t_sf(x: Number, df: Number) -> float:
    """P(T_df > x), the upper tail of Student's t."""
    t = _scipy_t()
    return float(t.sf(x, df)) if t is not None else _t_sf(x, df)


def t_cdf(x: Number, df: Number) -> float:
    """P(T_df ≤ x)."""
    return t_sf(-x, df)


def t_quantile(p: float, df: Number) -> float:
    """t_{p, df}: the x with P(T_df ≤ x) = p (t_{0.975, 2} = 4.303)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p must be in (0, 1); got {p}")
    t = _scipy_t()
    return float(t.ppf(p, df)) if t is not None else _t_quantile(p, df)


def _t_sf(x: Number, df: Number) -> float:
    """P(T_df > x) = ½ I_{df/(df+x²)}(df/2, ½) for x ≥ 0 (and 1 − that for x < 0)."""
    if math.isinf(x):
        return 0.0 if x > 0 else 1.0
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + x * x))
    return tail if x >= 0 else 1.0 - tail


def _t_quantile(p: float, df: Number) -> float:
    """Bisection on `_t_sf`: the quantile is odd about p = ½, so only the upper half is searched."""
    if p < 0.5:
        return -_t_quantile(1.0 - p, df)
    tail = 1.0 - p
    hi = 1.0
    while _t_sf(hi, df) > tail:
        hi *= 2.0
    lo = 0.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if _t_sf(mid, df) > tail:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return (lo + hi) / 2


def _betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function: the continued fraction (Lentz's method),
    on the side of x where it converges fast (Numerical Recipes §6.4)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for aa in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                   -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


# --- a mean over seeds ---------------------------------------------------------------------------


def _num(fmt: str, x: Number, signed: bool = False) -> str:
    """`x` in `fmt` ("{:.3f}"), with its sign when `signed`."""
    return (fmt.replace("{:", "{:+", 1) if signed else fmt).format(x)


def finite_or_none(x: float) -> float | None:
    """x for JSON: None where it is no number (an interval of one seed is infinite, its p NaN)."""
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class Interval:
    """A mean over n seeds and its interval: mean ± half_width (infinite for one seed)."""

    mean: float
    half_width: float
    n: int
    sd: float
    """The seeds' sample standard deviation s (n − 1 in the denominator); NaN for one seed."""
    confidence: float = CONFIDENCE

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    def cell(self, fmt: str = "{:.3f}") -> str:
        """`0.924 ± 0.041` (the half-width in the same format); one seed: just `0.924`."""
        if not math.isfinite(self.half_width):
            return fmt.format(self.mean)
        return f"{fmt.format(self.mean)} ± {fmt.format(self.half_width)}"

    def as_json(self) -> dict:
        """mean, low, high, half_width, n, sd; None where there is no number (one seed)."""
        return {"mean": self.mean, "low": finite_or_none(self.low), "high": finite_or_none(self.high),
                "half_width": finite_or_none(self.half_width), "n": self.n, "sd": finite_or_none(self.sd)}


def mean_interval(values: Sequence[Number], confidence: float = CONFIDENCE) -> Interval:
    """x̄ ± t_{(1+c)/2, n−1} · s/√n over `values` (one per seed); one value: ± ∞."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("mean_interval: no values")
    n, mean = len(xs), math.fsum(xs) / len(xs)
    if n < 2:
        return Interval(mean, math.inf, 1, math.nan, confidence)
    sd = statistics.stdev(xs)
    return Interval(mean, t_quantile((1 + confidence) / 2, n - 1) * sd / math.sqrt(n), n, sd, confidence)


# --- the difference of two methods ---------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """a − b over seeds: its mean and interval, the t-test, and whether that resolves it."""

    a: Interval
    b: Interval
    mean: float
    half_width: float
    """Of the difference's interval (∞ when a side has one seed)."""
    spread: float
    """What one seed's difference scatters by: s_d (paired), √(s_a² + s_b²) (not)."""
    df: float
    t: float
    p: float
    """Two-sided p of the paired (or Welch's) t-test; NaN with one seed."""
    paired: bool

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    @property
    def separate(self) -> bool:
        """The two sides' own intervals do not overlap."""
        return self.a.high < self.b.low or self.b.high < self.a.low

    @property
    def resolved(self) -> bool:
        """The difference's interval excludes 0, or the two sides' intervals separate."""
        return (math.isfinite(self.half_width) and (self.low > 0 or self.high < 0)) or self.separate

    def seeds_needed(self, power: float = POWER) -> int | None:
        """Seeds that would resolve a difference of this size at this spread (`seeds_needed`)."""
        if not (math.isfinite(self.spread) and self.a.n >= 2 and self.b.n >= 2):
            return None
        return seeds_needed(self.mean, self.spread, confidence=self.a.confidence, power=power)


def paired_difference(a: Sequence[Number], b: Sequence[Number], confidence: float = CONFIDENCE) -> Difference:
    """`a` and `b` seed by seed (same order): d_i = a_i − b_i, d̄ ± t_{(1+c)/2, n−1} · s_d/√n, and the
    paired t-test's two-sided p = 2 · P(T_{n−1} > |d̄| / (s_d/√n))."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired_difference: one value per seed on each side; got {len(a)} and {len(b)}")
    diffs = mean_interval([x - y for x, y in zip(a, b)], confidence)
    n = diffs.n
    if n < 2:
        t, p = math.nan, math.nan
    elif diffs.sd == 0:
        t, p = (math.copysign(math.inf, diffs.mean), 0.0) if diffs.mean else (0.0, 1.0)
    else:
        t = diffs.mean / (diffs.sd / math.sqrt(n))
        p = min(1.0, 2 * t_sf(abs(t), n - 1))
    return Difference(mean_interval(a, confidence), mean_interval(b, confidence), diffs.mean, diffs.half_width,
                      diffs.sd, float(n - 1), t, p, paired=True)


def welch_difference(a: Sequence[Number], b: Sequence[Number], confidence: float = CONFIDENCE) -> Difference:
    """ā − b̄ ± t_{(1+c)/2, ν} · √(s_a²/n_a + s_b²/n_b), ν = (s_a²/n_a + s_b²/n_b)² /
    ((s_a²/n_a)²/(n_a−1) + (s_b²/n_b)²/(n_b−1)) (Welch–Satterthwaite): for unpaired seeds."""
    ia, ib = mean_interval(a, confidence), mean_interval(b, confidence)
    mean = ia.mean - ib.mean
    if ia.n < 2 or ib.n < 2:
        return Difference(ia, ib, mean, math.inf, math.nan, math.nan, math.nan, math.nan, paired=False)
    va, vb = ia.sd**2 / ia.n, ib.sd**2 / ib.n
    se = math.sqrt(va + vb)
    spread = math.sqrt(ia.sd**2 + ib.sd**2)
    if se == 0:
        return Difference(ia, ib, mean, 0.0, 0.0, float(ia.n + ib.n - 2), math.copysign(math.inf, mean) if mean else 0.0,
                          0.0 if mean else 1.0, paired=False)
    df = (va + vb) ** 2 / (va**2 / (ia.n - 1) + vb**2 / (ib.n - 1))
    t = mean / se
    return Difference(ia, ib, mean, t_quantile((1 + confidence) / 2, df) * se, spread, df, t,
                      min(1.0, 2 * t_sf(abs(t), df)), paired=False)


def difference(a: Mapping, b: Mapping, confidence: float = CONFIDENCE) -> Difference:
    """a − b from {seed: value} of each: paired when both have the same seeds, else Welch's."""
    if set(a) == set(b):
        seeds = list(a)
        return paired_difference([a[s] for s in seeds], [b[s] for s in seeds], confidence)
    return welch_difference(list(a.values()), list(b.values()), confidence)


def seeds_needed(diff: Number, spread: Number, *, confidence: float = CONFIDENCE, power: float = POWER,
                 max_n: int = MAX_SEEDS) -> int | None:
    """The fewest seeds n ≥ 2 with (t_{(1+c)/2, n−1} + t_{power, n−1}) · spread/√n ≤ |diff|: a true
    difference `diff` with this per-seed `spread` is then resolved with probability about `power`
    (0.5: the interval just excludes 0). None when no difference was seen or more than `max_n`."""
    if diff == 0 or not math.isfinite(spread):
        return None

    def enough(n: int) -> bool:
        t_power = t_quantile(power, n - 1) if power != 0.5 else 0.0
        return (t_quantile((1 + confidence) / 2, n - 1) + t_power) * spread / math.sqrt(n) <= abs(diff)

    if spread == 0 or enough(2):
        return 2
    if not enough(max_n):
        return None
    lo, hi = 2, max_n  # enough(lo) is False, enough(hi) True; the left side shrinks with n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


# --- the verdict ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """A study's finding in one sentence: `best` is named as best only when `resolved`."""

    sentence: str
    resolved: bool
    best: str | None = None
    against: str | None = None
    """The comparison the sentence reports: the runner-up (resolved), or the first unresolved rival."""
    difference: Difference | None = None


def _seeds(n: int | tuple[int, int]) -> str:
    if isinstance(n, tuple):
        return f"n = {n[0]} and {n[1]} seeds" if n[0] != n[1] else _seeds(n[0])
    return f"n = {n} seed" + ("" if n == 1 else "s")


def verdict(groups: Mapping[str, Mapping], what: str, *, fmt: str = "{:.3f}", higher_is_better: bool = True,
            notes: Mapping[str, str] | None = None, confidence: float = CONFIDENCE, power: float = POWER) -> Verdict:
    """Which of `groups` ({name: {seed: value}}) has the highest `what` (lowest if not
    `higher_is_better`), said only when the seeds support it: the leader by mean is called best when
    its difference with every other group is resolved (`Difference.resolved`); otherwise the sentence
    says the ranking is not resolved at n seeds, with the interval's width against the closest
    unresolved rival and the seeds it would take (`seeds_needed`, at `power`). `notes[name]` follows
    a group's number (" at KL 0.36 ± 0.05")."""
    notes = notes or {}
    groups = {name: dict(v) for name, v in groups.items() if v}
    word = "highest" if higher_is_better else "lowest"

    def shown(name: str) -> str:
        return f"{mean_interval(list(groups[name].values()), confidence).cell(fmt)}{notes.get(name, '')}"

    if not groups:
        return Verdict(f"No finished runs: nothing to say about the {what} yet.", False)
    if len(groups) == 1:
        (name, values), = groups.items()
        return Verdict(f"Only {name} was run: its {what} is {shown(name)} over {_seeds(len(values))}; "
                       "there is nothing to rank it against.", False, best=name)
    sign = 1 if higher_is_better else -1
    ranked = sorted(groups, key=lambda name: -sign * statistics.fmean(groups[name].values()))
    best = ranked[0]
    diffs = {other: difference(groups[best], groups[other], confidence) for other in ranked[1:]}
    unresolved = [other for other, d in diffs.items() if not d.resolved]
    if not unresolved:
        second, d = ranked[1], diffs[ranked[1]]
        how = (f"paired over {_seeds(d.a.n)}" if d.paired else f"Welch, {_seeds((d.a.n, d.b.n))}") + f", p = {d.p:.2g}"
        rest = f", and above the other {len(ranked) - 2} as well" if len(ranked) > 2 else ""
        return Verdict(f"{best} reaches the {word} {what}, {shown(best)}: "
                       f"{'above' if higher_is_better else 'below'} {second} ({shown(second)}) by "
                       f"{_num(fmt, d.mean, True)} ({confidence * 100:.0f} % interval {_num(fmt, d.low, True)} to "
                       f"{_num(fmt, d.high, True)}, {how}){rest}.", True, best, second, d)
    rival = unresolved[0]  # the closest by mean among those not resolved
    d = diffs[rival]
    n = d.a.n if d.paired else (d.a.n, d.b.n)
    if not math.isfinite(d.half_width):
        return Verdict(f"Which has the {word} {what} is not resolved at {_seeds(n)} (one seed has no spread, so "
                       f"no interval): {best} {shown(best)}, {rival} {shown(rival)}; run at least 3 seeds "
                       "(--seeds 1,2,3).", False, best, rival, d)
    needed = d.seeds_needed(power)
    if needed is None:
        more = ("the two are equal at these seeds" if d.mean == 0 else
                f"at this spread more than {MAX_SEEDS:,} seeds would be needed to resolve a difference of this size")
    else:
        more = f"at this spread about {needed} seeds would resolve a difference of this size ({power * 100:.0f} % of the time)"
    return Verdict(f"Which has the {word} {what} is not resolved at {_seeds(n)} (interval width "
                   f"{fmt.format(2 * d.half_width)}): {best} {shown(best)} against {rival} {shown(rival)}, a "
                   f"difference of {_num(fmt, d.mean, True)} ({confidence * 100:.0f} % interval {_num(fmt, d.low, True)} "
                   f"to {_num(fmt, d.high, True)}); {more}.", False, best, rival, d)
