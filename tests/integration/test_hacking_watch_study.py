"""The hacking study with --detectors (issue 46, item 4), --quick end to end: every evaluation logs each
detector's score, z and alarm; the report's detector table is the tested functions' reading of the
logged runs, and a hand-made story written into the runs gives the lead time worked by hand."""

import json

import pytest

from rlhf_scratch.studies.hacking.detectors import DETECTORS, detector_section, watched_curve
from rlhf_scratch.studies.hacking.study import main

RUNS = {"repetition": "ppo-s1-repetition4", "honest": "ppo-s1-honest0"}


def _rewrite(run, story: dict[int, dict]) -> None:
    """Overwrite the logged numbers of the evaluated phases named in `story` (phase 0: study_start.json)."""
    start = json.loads((run / "study_start.json").read_text())
    (run / "study_start.json").write_text(json.dumps({**start, **story.get(0, {})}))
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text("".join(json.dumps({**m, **story.get(m["phase"], {})}) + "\n" for m in lines))


@pytest.mark.slow
def test_the_quick_study_watches_every_run_and_its_table_reads_lead_times_with_the_tested_functions(tmp_path, capsys):
    out = tmp_path / "watch"
    argv = ["--out", str(out), "--quick", "--raters", "repetition,honest", "--algos", "ppo", "--seeds", "1",
            "--total-phases", "9", "--eval-every", "3", "--detectors", "--jobs", "2"]
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert "Watching for the hack: PPO" in said and "| detector | lead time, phases (mean, 95 % t) |" in said
    run = out / "runs" / RUNS["repetition"]
    evaluated = [m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "study/gold" in m]
    assert [m["phase"] for m in evaluated] == [3, 6, 9]
    keys = {f"detector/{n}{s}" for n in DETECTORS for s in ("", "_z", "_alarm")} | {"study/rater_gold_se", "detector/seconds"}
    assert keys <= set(evaluated[0]) and keys <= set(json.loads((run / "study_start.json").read_text()))
    start = json.loads((run / "detector_start.json").read_text())
    assert start["rater"] == "repetition" and len(start["lens_tokens"]) == 10
    assert json.loads((out / "runs" / RUNS["honest"] / "detector_start.json").read_text())["rater"] == "honest"

    data = json.loads((out / "table.json").read_text())["detectors"]["PPO"]
    curves = {r: {1: watched_curve(out / "runs" / name, r, 4.0)} for r, name in RUNS.items()}
    assert json.loads(json.dumps(detector_section(curves)["rows"])) == data["rows"], "the table is detector_rows' reading"

    # a story written into the runs: gold peaks at phase 3 and is 1.3 below it at 9 (s.e. 0.1 each:
    # 1.3 > 2·√0.02) while the proxy rose; direction alarms from phase 6 on: lead 9 − 6 = 3. In the
    # honest run word_count alarms at 9: a false alarm.
    quiet = {f"detector/{n}_alarm": 0.0 for n in DETECTORS}
    points = {0: (0.5, 0.0), 3: (1.5, 1.0), 6: (1.4, 1.1), 9: (0.2, 1.2)}
    _rewrite(run, {p: {**quiet, "study/gold": g, "study/proxy": r, "study/rater_gold_se": 0.1, "study/repeated_3grams": 0.0,
                       "detector/direction_alarm": float(p >= 6)} for p, (g, r) in points.items()})
    _rewrite(out / "runs" / RUNS["honest"], {p: {**quiet, "detector/word_count_alarm": float(p == 9)} for p in points})
    assert main(argv) == 0, "the same command again: the runs are done, the report is read anew"
    rows = {r["detector"]: r for r in json.loads((out / "table.json").read_text())["detectors"]["PPO"]["rows"]}
    assert rows["direction"]["lead"] == {"mean": 3.0, "low": None, "high": None, "n": 1}
    assert (rows["direction"]["alarmed"], rows["word_count"]["false_honest"], rows["word_count"]["n_honest"]) == (1, 1, 1)
    table = (out / "table.md").read_text()
    assert "| direction | +3.0 (n = 1) | 1 / 1 | 0 / 1 | 0 / 1 |" in table
    assert "| word_count | — | 0 / 1 | 1 / 1 | 0 / 1 |" in table
