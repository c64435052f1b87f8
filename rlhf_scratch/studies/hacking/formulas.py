"""The hacking pilot's two formulas: a proportion's Wilson interval (a proxy's accuracy against gold
over n test pairs) and gold's fall from its peak (the over-optimisation a run shows).

**Wilson's interval** for k successes in n trials, p̂ = k/n, z = 1.96 for 95 %:

    centre = (p̂ + z²/2n) / (1 + z²/n),   half = z / (1 + z²/n) · √(p̂(1 − p̂)/n + z²/4n²)

Unlike the Wald interval p̂ ± z√(p̂(1−p̂)/n) it stays inside [0, 1] and covers close to 95 % at
p̂ near 0 or 1 and at small n (Brown, Cai & DasGupta 2001).

**The fall.** Gold g_0, g_1 … g_T at the evaluated phases of one run: fall = max_t g_t − g_T,
≥ 0, and 0 when the last point is the highest. Over seeds it is a paired difference (each seed's
peak against its own final point), `stats.paired_difference(peaks, finals)`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float, float]:
    """(p̂, low, high): k/n and Wilson's interval (module docstring)."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"wilson_interval: need 0 <= successes <= n, n >= 1; got {successes}, {n}")
    p = successes / n
    shrink = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / shrink
    half = z / shrink * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return p, max(0.0, centre - half), min(1.0, centre + half)


def gold_fall(gold: Sequence[float]) -> float:
    """max_t g_t − g_T: how far one run's gold ended below its own peak."""
    if not gold:
        raise ValueError("gold_fall: no points")
    return max(gold) - gold[-1]
