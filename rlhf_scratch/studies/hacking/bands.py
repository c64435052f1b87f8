"""Reward hacking over seeds, read at a pre-registered peak and drawn against KL with bands.

**The pre-registered fall.** A run's own highest gold point sits above its curve by its noise, so
"own peak − final" is > 0 even where gold is flat (`pilot.held_out_peaks`). Chosen *before* the
seeds it is tested on (from other seeds' curves), a peak phase p* has no such bias:

    fall_i = g_i(p*) − g_i(T)          per new seed i, T the last phase
    fall   = mean_i fall_i ± t_{0.975, n−1} · s/√n      (`stats.paired_difference`)

**The bands.** The seeds of a study are evaluated at the same phases. At each one: the seeds' mean
d = √KL (the over-optimisation study's distance) on x, and on y the seeds' mean of gold, proxy or
the flaw's measure with its t 95 % interval (`stats.mean_interval`) as a band.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from rlhf_scratch.config import ConfigError


def peak_phases(text: str, algos: Sequence[str]) -> dict[str, int]:
    """`ppo:24,grpo:36` -> {"ppo": 24, "grpo": 36}; every name one of `algos`, every phase >= 1."""
    found: dict[str, int] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        algo, sep, phase = item.partition(":")
        if not sep or not phase.strip().isdigit() or int(phase) < 1:
            raise ConfigError(f"peak_phases: write ALGO:PHASE with PHASE >= 1, comma-separated; got {item!r}")
        if algo.strip() not in algos:
            raise ConfigError(f"peak_phases: {algo.strip()!r} is not one of --algos ({', '.join(algos)})")
        found[algo.strip()] = int(phase)
    return found


def at_phase(curve: Sequence[Mapping], phase: int, key: str = "gold") -> float:
    """The curve's `key` at the evaluated `phase`; a ValueError naming the evaluated phases if it is not one."""
    for point in curve:
        if point["phase"] == phase:
            return point[key]
    raise ValueError(f"phase {phase} was not evaluated (evaluated: {[p['phase'] for p in curve]})")


def registered_fall(by_seed: Mapping[int, Sequence[Mapping]], phase: int):
    """g(p*) − g(final) paired over the seeds (module docstring): a `stats.Difference`."""
    from rlhf_scratch.studies.stats import paired_difference

    seeds = sorted(by_seed)
    return paired_difference([at_phase(by_seed[s], phase) for s in seeds], [by_seed[s][-1]["gold"] for s in seeds])


def bands(by_seed: Mapping[int, Sequence[Mapping]], key: str) -> list[dict]:
    """Per evaluated point: {"phase", "d" (the seeds' mean), "mean", "low", "high"} of `key` over seeds
    (low/high None with one seed). The seeds must share their evaluated phases."""
    from rlhf_scratch.studies.stats import finite_or_none, mean_interval

    curves = [by_seed[s] for s in sorted(by_seed)]
    phases = [p["phase"] for p in curves[0]]
    if any([p["phase"] for p in c] != phases for c in curves):
        raise ValueError("bands: the seeds were evaluated at different phases")
    rows = []
    for i, phase in enumerate(phases):
        ci = mean_interval([c[i][key] for c in curves])
        rows.append({"phase": phase, "d": sum(c[i]["d"] for c in curves) / len(curves), "mean": ci.mean,
                     "low": finite_or_none(ci.low), "high": finite_or_none(ci.high)})
    return rows


def plot_bands(by_algo: Mapping[str, Mapping[int, Sequence[Mapping]]], flaw: str, path: Path,
               peaks: Mapping[str, int] | None = None, title: str = "") -> Path:
    """Gold, proxy and the flaw's measure against d, a line per algorithm (the seeds' mean) with its
    t 95 % band over seeds; a dot at each algorithm's pre-registered peak p* (`peaks`)."""
    from rlhf_scratch.pages.html import new_figure, save_figure

    fig, axes = new_figure(1, 3, figsize=(13.0, 3.8))
    for i, (algo, by_seed) in enumerate(by_algo.items()):
        n = len(by_seed)
        for ax, key in zip(axes, ("gold", "proxy", flaw)):
            rows = bands(by_seed, key)
            d = [r["d"] for r in rows]
            ax.plot(d, [r["mean"] for r in rows], color=f"C{i}", marker=".", label=f"{algo}, n = {n} seed{'s' if n > 1 else ''}")
            if n > 1:
                ax.fill_between(d, [r["low"] for r in rows], [r["high"] for r in rows], color=f"C{i}", alpha=0.2)
            if peaks and algo in peaks:
                star = next((r for r in rows if r["phase"] == peaks[algo]), None)
                if star is None:
                    raise ValueError(f"plot_bands: {algo}'s p* = {peaks[algo]} was not evaluated")
                ax.plot([star["d"]], [star["mean"]], color=f"C{i}", marker="o", markersize=8, markerfacecolor="none")
    for ax, name in zip(axes, ("gold", "proxy", flaw)):
        ax.set(xlabel="d = √KL from the reference (mean over seeds)", title=name)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)
