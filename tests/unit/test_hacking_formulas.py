"""The hacking pilot's formulas (studies/hacking/formulas.py) against numbers worked out by hand."""

import math

import pytest

from rlhf_scratch.studies.hacking import gold_fall, wilson_interval


def test_wilson_interval_of_8_in_10_by_hand():
    # z² = 3.8416, 1 + z²/n = 1.38416; centre = (0.8 + 0.19208) / 1.38416 = 0.716738
    # half = 1.96 / 1.38416 · √(0.016 + 0.009604) = 0.226581 -> 0.490157 .. 0.943319
    p, low, high = wilson_interval(8, 10)
    assert p == 0.8
    assert (low, high) == (pytest.approx(0.490157, abs=1e-5), pytest.approx(0.943319, abs=1e-5))
    wald = 1.96 * math.sqrt(0.8 * 0.2 / 10)
    assert high < 0.8 + wald, "Wilson's interval is pulled toward 1/2, not centred on p̂ as Wald's is"


def test_wilson_interval_of_none_stays_inside_0_1():
    # p̂ = 0: centre = half = (z²/2n) / (1 + z²/n) -> 0 .. z²/n / (1 + z²/n) = 0.38416 / 1.38416 = 0.277540
    p, low, high = wilson_interval(0, 10)
    assert (p, low) == (0.0, 0.0) and high == pytest.approx(0.277540, abs=1e-6)
    assert wilson_interval(10, 10)[2] == 1.0


def test_wilson_interval_refuses_impossible_counts():
    with pytest.raises(ValueError, match="successes <= n"):
        wilson_interval(11, 10)


def test_gold_fall_is_peak_minus_final():
    assert gold_fall([0.0, 0.5, 1.2, 0.7]) == pytest.approx(0.5)
    assert gold_fall([0.0, 0.3, 0.9]) == 0.0, "a curve still rising at its end has not fallen"


def test_a_held_out_peak_is_read_where_the_other_seeds_peak():
    from rlhf_scratch.studies.hacking.pilot import held_out_peaks, summarise

    golds = {1: [0.0, 1.0, 0.5], 2: [0.0, 0.8, 0.9], 3: [0.0, 1.2, 0.4]}
    runs = {s: [{"gold": g, "proxy": float(i), "d": float(i), "length": 16.0} for i, g in enumerate(c)]
            for s, c in golds.items()}
    # seed 2: the others' mean gold is 0, 1.1, 0.45 -> their peak is phase 1, where seed 2 has 0.8
    # (its own highest point, 0.9, is its last: own peak − final = 0, held-out peak − final = −0.1)
    assert held_out_peaks(runs) == {1: 1.0, 2: 0.8, 3: 1.2}
    summary = summarise({"length": runs})["length"]
    # own falls 0.5, 0, 0.8 -> mean 0.4333; held-out falls 0.5, −0.1, 0.8 -> mean 0.4
    assert summary["fall"]["mean"] == pytest.approx(1.3 / 3) and summary["fall"]["n"] == 3
    assert summary["fall_held_out_peak"]["mean"] == pytest.approx(0.4)
    assert summary["proxy_rise"]["mean"] == 2.0 and summary["per_seed"]["2"]["fall"] == 0.0
