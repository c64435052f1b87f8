"""The hacking study's pre-registered fall and bands (studies/hacking/bands.py) against numbers worked by hand."""

import pytest

from rlhf_scratch.config import ConfigError
from rlhf_scratch.studies.hacking.bands import at_phase, bands, peak_phases, plot_bands, registered_fall


def run(points):
    """A curve: (phase, d, gold, proxy, rep3) per evaluated point."""
    return [{"phase": p, "d": d, "gold": g, "proxy": x, "repeated_3grams": r} for p, d, g, x, r in points]


# Three seeds, evaluated at phases 0, 6, 12. Gold at p* = 6 and at the end (12):
# seed 1: 2.0 -> 1.5, seed 2: 1.8 -> 1.0, seed 3: 2.4 -> 1.3; falls 0.5, 0.8, 1.1.
SEEDS = {
    1: run([(0, 0.0, 1.0, 0.2, 0.0), (6, 2.0, 2.0, 1.0, 0.00), (12, 4.0, 1.5, 1.6, 0.10)]),
    2: run([(0, 0.0, 2.0, 0.1, 0.0), (6, 3.0, 1.8, 1.1, 0.05), (12, 5.0, 1.0, 1.7, 0.20)]),
    3: run([(0, 0.0, 4.0, 0.3, 0.0), (6, 4.0, 2.4, 0.9, 0.01), (12, 9.0, 1.3, 1.9, 0.30)]),
}


def test_the_registered_fall_is_gold_at_p_star_minus_final_paired_over_seeds():
    # falls 0.5, 0.8, 1.1: mean 0.8, s = 0.3, half = t(0.975, 2) · 0.3 / √3 = 4.302653 · 0.173205 = 0.745241
    fall = registered_fall(SEEDS, 6)
    assert fall.mean == pytest.approx(0.8)
    assert fall.half_width == pytest.approx(0.745241, abs=1e-6)
    assert fall.low == pytest.approx(0.054759, abs=1e-6), "the interval excludes 0 here"
    # read at each seed's own peak instead (phase 0 for seed 3: 4.0 - 1.3 = 2.7) the mean would be higher
    assert registered_fall(SEEDS, 0).mean == pytest.approx((-0.5 + 1.0 + 2.7) / 3)


def test_at_phase_names_the_evaluated_phases_when_p_star_was_not_one():
    assert at_phase(SEEDS[2], 12, "proxy") == 1.7
    with pytest.raises(ValueError, match=r"phase 9 was not evaluated \(evaluated: \[0, 6, 12\]\)"):
        at_phase(SEEDS[1], 9)


def test_bands_are_the_seeds_mean_and_t_interval_at_each_phase_over_mean_d():
    # phase 0 gold 1, 2, 4: mean 7/3, s = √(7/3) = 1.527525, half = 4.302653 · 1.527525 / √3 = 3.794583
    first, _, last = bands(SEEDS, "gold")
    assert (first["phase"], first["d"], first["mean"]) == (0, 0.0, pytest.approx(7 / 3))
    assert first["high"] - first["mean"] == pytest.approx(3.794583, abs=1e-6)
    assert last["d"] == pytest.approx(6.0), "x is the seeds' mean d: (4 + 5 + 9) / 3"
    assert bands({1: SEEDS[1]}, "gold")[0]["low"] is None, "one seed has no band"


def test_bands_refuse_seeds_evaluated_at_different_phases():
    with pytest.raises(ValueError, match="different phases"):
        bands({1: SEEDS[1], 2: SEEDS[2][:2]}, "gold")


def test_peak_phases_parse_and_name_the_bad_item():
    assert peak_phases("ppo:24, grpo:36", ["ppo", "grpo"]) == {"ppo": 24, "grpo": 36}
    assert peak_phases("", ["ppo"]) == {}
    with pytest.raises(ConfigError, match=r"peak_phases: write ALGO:PHASE .*got 'ppo=24'"):
        peak_phases("ppo=24", ["ppo"])
    with pytest.raises(ConfigError, match=r"peak_phases: 'rloo' is not one of --algos \(ppo\)"):
        peak_phases("rloo:24", ["ppo"])


def test_plot_bands_writes_the_figure(tmp_path):
    path = plot_bands({"PPO": SEEDS, "GRPO": {1: SEEDS[1]}}, "repeated_3grams", tmp_path / "b.png", {"PPO": 6})
    assert path.stat().st_size > 5000
    with pytest.raises(ValueError, match="PPO's p\\* = 9 was not evaluated"):
        plot_bands({"PPO": SEEDS}, "repeated_3grams", tmp_path / "c.png", {"PPO": 9})
