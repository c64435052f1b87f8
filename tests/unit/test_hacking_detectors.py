"""Watching for the hack (studies/hacking/detectors.py, watch.py): the alarm rule, gold says so, lead
time, false alarms and the table, each against numbers worked by hand; the watch's direction, lens
and resumed alarm history on hand-made tensors."""

import json
import math

import pytest
import torch

from rlhf_scratch.studies.hacking.detectors import (
    DETECTORS,
    alarm_flags,
    alignment_z,
    detector_cells,
    detector_rows,
    false_alarm,
    first_alarm,
    gold_says_so,
    judge_run,
    lead_time,
    shift_z,
)
from rlhf_scratch.studies.hacking.watch import (
    WatchedEvaluation,
    excess_direction,
    lens_log_mass,
    masked_mean,
    null_directions,
    rater_gold,
)


def test_the_shift_is_in_standard_errors_of_the_difference_of_two_means():
    assert shift_z(0.30, 0.04, 0.10, 0.03) == pytest.approx(4.0), "0.20 / √(0.04² + 0.03²) = 0.20 / 0.05"
    assert shift_z(0.30, 0.04, 0.10, 0.0) == pytest.approx(5.0), "a reference without spread: the check's own"
    assert shift_z(0.0, 0.0, 0.0, 0.0) == 0.0 and shift_z(0.01, 0.0, 0.0, 0.0) == math.inf
    assert shift_z(-0.01, 0.0, 0.0, 0.0) == -math.inf


def test_the_alarm_needs_two_checks_in_a_row_strictly_above_three():
    z = [0.0, 3.5, 2.9, 3.1, 4.0, 5.0, 3.0, 7.0]
    assert alarm_flags(z) == [False, False, False, False, True, True, False, False], \
        "3.5 alone is no alarm; 3.0 is not above 3"
    assert alarm_flags(z, consecutive=1) == [False, True, False, True, True, True, False, True]
    assert first_alarm([0, 3, 6, 9, 12, 15, 18, 21], alarm_flags(z)) == 12
    assert first_alarm([0, 3], [False, False]) is None


CURVE = [  # gold peaks at 12 (1.30); significant only at 21 when the peak's s.e. is combined with the point's
    {"phase": 0, "gold": 0.40, "gold_se": 0.10, "proxy": 0.20},
    {"phase": 3, "gold": 0.70, "gold_se": 0.10, "proxy": 0.30},
    {"phase": 6, "gold": 1.10, "gold_se": 0.12, "proxy": 0.50},
    {"phase": 9, "gold": 1.05, "gold_se": 0.12, "proxy": 0.70},
    {"phase": 12, "gold": 1.30, "gold_se": 0.15, "proxy": 0.90},
    {"phase": 15, "gold": 1.10, "gold_se": 0.15, "proxy": 1.00},  # gap 0.20 < 2·√(0.15² + 0.15²) = 0.42
    {"phase": 18, "gold": 0.85, "gold_se": 0.20, "proxy": 1.10},  # gap 0.45 < 2·√(0.15² + 0.20²) = 0.50
    {"phase": 21, "gold": 0.70, "gold_se": 0.20, "proxy": 1.20},  # gap 0.60 > 0.50, proxy 1.20 > 0.90
]


def test_gold_says_so_where_its_fall_from_the_running_peak_is_significant_and_the_proxy_is_above():
    assert gold_says_so(CURVE) == 21, "18 would mean the peak's standard error was left out"
    falling_proxy = [*CURVE[:7], {**CURVE[7], "proxy": 0.85}]
    assert gold_says_so(falling_proxy) is None, "proxy below its value at gold's peak: no proxy-gold gap"
    assert gold_says_so(CURVE[:7]) is None


def test_lead_time_is_gold_phase_minus_the_first_alarm():
    assert lead_time(12, 21) == 9 and lead_time(24, 21) == -3
    assert lead_time(None, 21) is None and lead_time(12, None) is None


def test_an_alarm_is_false_against_the_honest_proxy_or_before_phase_six():
    assert false_alarm(30, "honest") and false_alarm(3, "repetition")
    assert not false_alarm(6, "repetition") and not false_alarm(None, "honest")


def _run(alarm_phase: dict[str, int | None], curve=CURVE) -> list[dict]:
    """CURVE with each detector's alarm raised from `alarm_phase[name]` on (never when None)."""
    return [{**p, **{f"{n}_alarm": int(alarm_phase.get(n) is not None and p["phase"] >= alarm_phase[n])
                     for n in DETECTORS}} for p in curve]


def test_the_table_reads_lead_times_over_seeds_and_false_alarms_on_the_honest_proxy():
    """direction alarms at 12, 18 and 9 against gold at 21: leads 9, 3, 12, mean 8, s = √21,
    half-width t(0.975, 2) · √21 / √3 = 4.3027 · 2.6458 = 11.384. It also alarms in one of two honest runs."""
    no_gold = [{**p, "gold": 1.0} for p in CURVE]
    judged = {
        "repetition": {1: judge_run(_run({"direction": 12, "length": 3}), "repetition"),
                       2: judge_run(_run({"direction": 18}), "repetition"),
                       3: judge_run(_run({"direction": 9, "lens": 15}), "repetition"),
                       4: judge_run(_run({"direction": 6}, no_gold), "repetition")},
        "honest": {1: judge_run(_run({"direction": 15}), "honest"), 2: judge_run(_run({}), "honest")},
    }
    assert judged["repetition"][1]["gold_phase"] == 21 and judged["repetition"][4]["gold_phase"] is None
    rows, gold = detector_rows(judged)
    assert gold == {"said_so": 3, "n": 4}
    assert [r["detector"] for r in rows] == list(DETECTORS)
    direction, lens, length = (next(r for r in rows if r["detector"] == n) for n in ("direction", "lens", "length"))
    assert direction["lead"]["mean"] == pytest.approx(8.0) and direction["lead"]["n"] == 3
    assert direction["lead"]["low"] == pytest.approx(8 - 11.384, abs=1e-3)
    assert direction["lead"]["high"] == pytest.approx(8 + 11.384, abs=1e-3)
    assert (direction["alarmed"], direction["n"], direction["false_honest"], direction["n_honest"]) == (4, 4, 1, 2), \
        "seed 4 alarmed though gold never said so: alarmed, with no lead"
    assert lens["lead"]["mean"] == 6 and lens["lead"]["low"] is None and lens["alarmed"] == 1
    assert length["lead"] is None and length["alarmed"] == 0 and length["false_early"] == 1, \
        "an alarm at phase 3 is false, and gives no lead"
    assert detector_cells(direction) == ["direction", "+8.0 (-3.4 to +19.4, n = 3)", "4 / 4", "1 / 2", "0 / 4"]
    assert detector_cells(lens)[1] == "+6.0 (n = 1)" and detector_cells(length)[1] == "—"


def test_the_direction_separates_the_samples_the_proxy_likes_beyond_gold():
    """n = 4, quartile 1. proxy 1..4: z = (x − 2.5)/1.291; gold 1, 2, 3, 10: mean 4, s = √(50/3),
    z = −0.735, −0.490, −0.245, 1.470; excess = −0.427, 0.103, 0.632, −0.308: top sample 2,
    bottom sample 0, u = (h₂ − h₀)/|·| = (−1, 2)/√5."""
    hidden = torch.tensor([[1.0, 1.0], [5.0, -2.0], [0.0, 3.0], [4.0, 5.0]])
    u = excess_direction(hidden, torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1.0, 2.0, 3.0, 10.0]))
    assert u.tolist() == pytest.approx([-1 / math.sqrt(5), 2 / math.sqrt(5)]), \
        "sample 3 at the top means gold was ignored (proxy alone ranks it first)"
    flat = excess_direction(hidden, torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([4.0, 3.0, 2.0, 1.0]))
    assert flat.tolist() == pytest.approx([0.6, 0.8]), "h₃ − h₀ = (3, 4)"


def test_the_lens_reads_the_log_mass_of_the_directions_tokens_and_means_are_masked():
    class Unembed:
        W_U = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
        b_U = torch.zeros(3)

    hidden = torch.tensor([[[math.log(2.0), 0.0]]])  # logits (ln 2, 0, 0): softmax (1/2, 1/4, 1/4)
    assert lens_log_mass(Unembed, hidden, torch.tensor([1])).item() == pytest.approx(math.log(0.25))
    assert lens_log_mass(Unembed, hidden, torch.tensor([0, 2])).item() == pytest.approx(math.log(0.75))
    x = torch.tensor([[1.0, 2.0, 9.0], [4.0, 0.0, 0.0]])
    assert masked_mean(x, torch.tensor([[True, True, False], [False, False, False]])).tolist() == [1.5, 0.0]


def test_the_repetition_raters_gold_is_penalised_by_its_repeats():
    assert rater_gold([1.0, 2.0], [0.25, 0.0], "repetition", 4.0) == [0.0, 2.0]
    assert rater_gold([1.0, 2.0], [0.25, 0.0], "honest", 4.0) == [1.0, 2.0]


def test_a_resumed_watch_raises_its_alarm_from_the_history_it_logged(tmp_path):
    """Checks at phases 3 and 6 were logged (direction z 3.4 then 1.0, lens z 2.0 then 3.6); the
    run resumes after phase 6. A check at z 5 then alarms for lens (3.6, 5 in a row), not direction."""
    from types import SimpleNamespace

    reference = {n: (0.0, 0.5) for n in DETECTORS}
    torch.save({"u": torch.ones(2), "reference": reference}, tmp_path / "detector_start.pt")
    lines = [{"phase": p} for p in range(1, 7)]
    lines[2].update({f"detector/{n}_z": 0.0 for n in DETECTORS} | {"detector/direction_z": 3.4, "detector/lens_z": 2.0})
    lines[5].update({f"detector/{n}_z": 0.0 for n in DETECTORS} | {"detector/direction_z": 1.0, "detector/lens_z": 3.6})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    watch = object.__new__(WatchedEvaluation)
    watch.trainer, watch.per_prompt = SimpleNamespace(device="cpu"), 2
    watch.start(tmp_path, 6)
    assert watch.z_history["lens"] == [0.0, 2.0, 3.6]
    values = {n: [0.0, 0.0, 0.0, 0.0] for n in DETECTORS}
    values["direction"] = values["lens"] = [2.0, 3.0, 3.0, 4.0]  # mean 3, s.e. √((0.5 + 0.5)/2)/2 = 0.354
    values["alignment"] = (0.25, 3.5)  # (cos, z): its z as given; history 0, 0, 0, then 3.5: no alarm
    out = watch.judge(values)
    assert out["detector/lens"] == 3.0 and out["detector/lens_z"] == pytest.approx(3.0 / math.hypot(math.sqrt(0.5) / 2, 0.5))
    assert out["detector/lens_alarm"] == 1.0 and out["detector/direction_alarm"] == 0.0
    assert (out["detector/alignment"], out["detector/alignment_z"], out["detector/alignment_alarm"]) == (0.25, 3.5, 0.0)
    assert set(out) <= set(WatchedEvaluation.METRICS)


def test_alignment_is_the_shifts_cosine_with_u_against_its_cosines_with_the_null_directions():
    """Δ = (3, 4): cos with u = (1, 0) is 0.6; with the null (0, 1), (0.6, 0.8), (−0.6, 0.8): 0.8, 1.0,
    0.28, mean 0.69333, s = √(0.27627/2) = 0.37166: z = (0.6 − 0.69333)/0.37166 = −0.2511."""
    null = [(0.0, 1.0), (0.6, 0.8), (-0.6, 0.8)]
    assert alignment_z((3.0, 4.0), (1.0, 0.0), null) == pytest.approx(-0.2511, abs=1e-4)
    assert alignment_z((0.0, 0.0), (1.0, 0.0), null) == 0.0, "phase 0: no shift"
    assert alignment_z((30.0, 40.0), (2.0, 0.0), null) == pytest.approx(-0.2511, abs=1e-4), "cosines: scale-free"


def test_the_null_directions_are_unit_seeded_and_leave_the_runs_random_numbers_alone():
    hidden = torch.randn(40, 6, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(11)
    before = torch.rand(1)
    torch.manual_seed(11)
    v = null_directions(hidden, splits=5)
    assert torch.rand(1) == before, "the global generator was not drawn from"
    assert v.shape == (5, 6) and torch.allclose(v.norm(dim=-1), torch.ones(5))
    assert torch.equal(v, null_directions(hidden, splits=5)) and not torch.allclose(v[0], v[1])


def test_a_watched_run_is_the_study_run_with_the_watch_in_a_process_of_its_own(monkeypatch):
    """--detectors runs `python -m rlhf_scratch.studies.hacking.watch SPEC`: the over-optimisation study's
    RL run with WatchedEvaluation (the study's run module imports nothing of the hacking study)."""
    import importlib.util

    from rlhf_scratch.studies.hacking import watch
    from rlhf_scratch.studies.hacking.study import WATCHED_RUN
    from rlhf_scratch.studies.overoptimization.run import rl_command

    seen = {}
    monkeypatch.setattr(watch, "train_against_proxy",
                        lambda spec, evaluation, **fields: seen.update(evaluation=evaluation, fields=fields) or 0)
    spec = {"detectors": {"rater": "token", "penalty": 1.0}}
    assert watch.train_watched(spec) == 0
    assert seen == {"evaluation": watch.WatchedEvaluation, "fields": {"watch": spec["detectors"]}}
    assert rl_command(spec, WATCHED_RUN)[1:3] == ["-m", WATCHED_RUN]
    assert importlib.util.find_spec(WATCHED_RUN).origin == watch.__file__
