"""Notebook 09's checks (`course/checks_hacking.py`): each passes the course's solution AND the package's own
function; the course's solutions equal the package's functions in `studies.hacking` and `reward.ensemble` (course
may not import studies), and on the recorded curves they give the recorded verdicts' numbers. The classic bugs
each check names are the course's catalogue (`course/mistakes_hacking.py`, planted in
tests/unit/test_course_mistakes.py).
"""

import json

import pytest
import torch
from graded_notebooks import (
    assert_predictions_answered,
    assert_stubs_raise_and_solutions_pass,
    assert_written_by,
    load_generator,
)

from rlhf_scratch.course import catalogue
from rlhf_scratch.course import checks_hacking as C
from rlhf_scratch.course import solutions_hacking as S
from rlhf_scratch.reward import ensemble
from rlhf_scratch.studies.hacking import mitigate, pilot
from rlhf_scratch.studies.hacking.excess import explained_share

# --- the solutions are the package's ------------------------------------------------------------


def test_held_out_peak_is_the_studies_held_out_peaks():
    for curves in (C.hand_curves(), C.recorded_curves()):
        phases = S.held_out_peak(curves)
        gold = pilot.held_out_peaks(curves)
        for s, c in curves.items():
            assert next(p["gold"] for p in c if p["phase"] == phases[s]) == gold[s]


def test_early_stop_index_is_the_studies_on_random_and_recorded_curves():
    gen = torch.Generator().manual_seed(3)
    for _ in range(200):
        n = int(torch.randint(1, 12, (1,), generator=gen))
        proxy = (torch.randint(0, 8, (n,), generator=gen) / 4).tolist()  # quarters: ties happen
        se, m = float(torch.randint(0, 3, (1,), generator=gen)) / 4, int(torch.randint(1, 5, (1,), generator=gen))
        assert S.early_stop_index(proxy, se, patience=m) == mitigate.early_stop_index(proxy, se, m)
    for c in C._eighteen().values():
        proxy = [p["proxy"] for p in c]
        assert S.early_stop_index(proxy, C.PROXY_SE) == mitigate.early_stop_index(proxy, C.PROXY_SE)


def test_the_ensemble_solutions_are_the_reward_packages():
    scores = torch.randn(4, 9, generator=torch.Generator().manual_seed(0))
    assert torch.equal(S.ensemble_mean(scores), ensemble.ensemble_mean(scores))
    assert torch.equal(S.ensemble_min(scores), ensemble.ensemble_min(scores))


def test_explained_share_is_the_studies_share():
    gen = torch.Generator().manual_seed(1)
    e, a = torch.randn(20, generator=gen), torch.randn(20, 5, generator=gen)
    policy = torch.arange(20) % 3 == 0
    a[:, 4] = policy.double()  # constant within each group: share 0
    torch.testing.assert_close(S.explained_share(e, a, policy), explained_share(e, a, policy)["share"])
    assert S.explained_share(e, a, policy)[4] == 0


def test_the_recorded_curves_give_the_recorded_verdicts():
    """The registered fall's mean over the 12 confirm seeds and early stopping's gold(stop) − gold(final)
    over the 18 seeds are the numbers in the benchmarks' JSON."""
    confirm = json.loads(C.CONFIRM.read_text())["result"]["group"]
    fall = S.registered_fall(C.recorded_curves(), C.PEAK_PHASE, C.FINAL_PHASE)
    assert sum(fall.values()) / len(fall) == pytest.approx(confirm["fall_registered"]["mean"], abs=1e-12)
    mitigations = json.loads((C.BENCHMARKS / "hacking_mitigations_2026-11-27.json").read_text())["early_stopping"]
    curves = C._eighteen()
    assert sorted(map(str, curves)) == sorted(mitigations["per_seed"])
    stops = {s: c[S.early_stop_index([p["proxy"] for p in c], C.PROXY_SE)] for s, c in curves.items()}
    assert all(stops[s]["phase"] == mitigations["per_seed"][str(s)]["stop_phase"] for s in curves)
    gain = sum(stops[s]["gold"] - curves[s][-1]["gold"] for s in curves) / len(curves)
    assert gain == pytest.approx(mitigations["stop_minus_final"]["mean"], abs=1e-12)


# --- each check passes the package's functions -------------------------------------------------------


def test_every_hacking_check_passes_the_packages_own_functions(capsys):
    catalogue.CHECKS["early_stop_index"](mitigate.early_stop_index)
    catalogue.CHECKS["ensemble_mean"](ensemble.ensemble_mean)
    catalogue.CHECKS["ensemble_min"](ensemble.ensemble_min)
    catalogue.CHECKS["explained_share"](lambda excess, activation, policy:
                                        explained_share(excess, activation, policy)["share"])
    out = capsys.readouterr().out.splitlines()
    assert out == ["check_early_stop_index: all 6 cases pass", "check_ensemble_mean: all 1 cases pass",
                   "check_ensemble_min: all 1 cases pass", "check_explained_share: all 1 cases pass"]


# --- notebook 09 and its solutions ---------------------------------------------------------------

SCRIPT = "make_09_reward_hacking.py"


@pytest.fixture
def make_09(monkeypatch):
    return load_generator(monkeypatch, SCRIPT)  # as `python notebooks/make_09_reward_hacking.py` runs it


def test_notebook_09_and_its_solutions_are_what_the_generator_writes(make_09):
    assert_written_by(make_09, SCRIPT)


def test_notebook_09_ships_stubs_that_raise_with_the_solutions_signature_and_the_solutions_pass(make_09, capsys):
    """Each stub raises NotImplementedError inside its check (the signature test passed), each solution cell
    is the course's solution and passes; every check in the catalogue's hacking module has one stub."""
    assert_stubs_raise_and_solutions_pass(make_09, C, capsys)


def test_every_prediction_of_notebook_09_is_answered_after_code(make_09):
    assert_predictions_answered(make_09, 2)
