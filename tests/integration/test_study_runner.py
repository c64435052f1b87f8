"""The study runner (rlhf_scratch/studies/runner.py) with no training at all: units and their
names, the plan file and its growing seeds, list flags, the ledger, resumable processes (tiny
`python -c` ones), and what every study's table and figure do with seeds."""

from __future__ import annotations

import json
import sys

import pytest

from rlhf_scratch.config import ConfigError
from rlhf_scratch.studies.runner import (
    Job,
    Ledger,
    Unit,
    by_group,
    csv_list,
    draw_band,
    interval_cell,
    markdown_table,
    open_study,
    over_seeds,
    plan_units,
    run_jobs,
    seed_list,
    study_main,
)


def test_units_are_named_and_grouped_over_their_seeds():
    units = plan_units(["ppo", "rloo"], seeds=[1, 2], settings=[("b", 0.1), ("b", 0.5)])
    assert [u.name for u in units] == ["ppo-s1-b0.1", "ppo-s2-b0.1", "ppo-s1-b0.5", "ppo-s2-b0.5",
                                       "rloo-s1-b0.1", "rloo-s2-b0.1", "rloo-s1-b0.5", "rloo-s2-b0.5"]
    groups = by_group(units)
    assert list(groups) == [("ppo", ("b", 0.1)), ("ppo", ("b", 0.5)), ("rloo", ("b", 0.1)), ("rloo", ("b", 0.5))]
    assert [u.seed for u in groups[("rloo", ("b", 0.5))]] == [1, 2], "a group is one setting over its seeds"
    assert Unit("rloo", setting=("rm", 250)).name == "rloo-rm250" and Unit("ppo", 3).name == "ppo-s3"
    assert Unit("rloo", setting=("rm", 250)).value == 250 and Unit("ppo", 3).value is None


@pytest.mark.parametrize("text, kind, message", [
    ("1,x", int, "seeds: expected a comma-separated list of ints; got '1,x'"),
    (",", int, "seeds: empty list"),
    ("1,,2", int, "seeds: an empty entry in '1,,2'"),
    (",1", int, "seeds: an empty entry in ',1'"),
])
def test_list_flags_are_parsed_or_refused_in_one_line(text, kind, message):
    assert csv_list(" ppo, rloo ,", str, "algos") == ["ppo", "rloo"]
    with pytest.raises(ConfigError) as err:
        csv_list(text, kind, "seeds")
    assert str(err.value) == message


def test_seeds_are_distinct_ints():
    assert seed_list("3, 1,2") == [3, 1, 2]
    with pytest.raises(ConfigError) as err:
        seed_list("1,2,1")
    assert str(err.value) == "seeds: each seed once; got 1,2,1", "a seed twice would count one run twice in every mean"
    with pytest.raises(ConfigError, match="seeds: expected a comma-separated list of ints"):
        seed_list("1,b")


def test_markdown_table():
    assert markdown_table(["run", "reward"], [["ppo-s1", "0.500"], ["rloo-s1", ""]]) == (
        "| run | reward |\n|---|---|\n| ppo-s1 | 0.500 |\n| rloo-s1 |  |")


def test_a_plan_is_kept_and_a_different_plan_is_refused_naming_what_differs(tmp_path):
    out = tmp_path / "study"
    plan = {"algos": ["ppo", "rloo"], "seeds": [1], "phases": 30}
    assert open_study(out, plan, "study.json", "study") == out
    (out / "runs").mkdir()  # the study's own work: the same plan again continues it
    open_study(out, {"seeds": [1], "phases": 30, "algos": ("ppo", "rloo")}, "study.json", "study")
    with pytest.raises(ConfigError) as err:
        open_study(out, {**plan, "algos": ["ppo"], "phases": 40}, "study.json", "study")
    assert str(err.value) == (f"out: {out} holds a different study (algos ppo,rloo there, ppo here; phases 30 there, "
                              "40 here); choose a new --out")
    assert json.loads((out / "study.json").read_text()) == plan, "the refused plan was not written"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(ConfigError, match="exists and is not a study folder"):
        open_study(tmp_path / "mine", plan, "study.json", "study")
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


def test_a_plan_may_grow_its_seeds_and_nothing_else(tmp_path):
    """The same plan with more seeds (the saved ones first) is the same study made larger: the plan
    file is rewritten. Fewer seeds, other seeds, seeds out of order, or more seeds with another change
    are a different plan, refused in one line that says seeds may only grow."""
    out = tmp_path / "study"
    plan = {"algos": ["ppo"], "seeds": [1], "phases": 30}
    open_study(out, plan, "study.json", "study")
    open_study(out, {**plan, "seeds": [1, 2, 3]}, "study.json", "study")
    assert json.loads((out / "study.json").read_text())["seeds"] == [1, 2, 3], "the grown plan is the plan now"
    open_study(out, {**plan, "seeds": [1, 2, 3]}, "study.json", "study")  # the same again: fine
    for seeds, shown in (([1, 2], "1,2"), ([2, 3, 1], "2,3,1"), ([1, 2, 4], "1,2,4")):
        with pytest.raises(ConfigError) as err:
            open_study(out, {**plan, "seeds": seeds}, "study.json", "study")
        assert str(err.value) == (f"out: {out} holds a different study (seeds 1,2,3 there, {shown} here; seeds may "
                                  "only grow, the saved ones first in their order); choose a new --out")
    with pytest.raises(ConfigError) as err:
        open_study(out, {**plan, "seeds": [1, 2, 3, 4], "phases": 40}, "study.json", "study")
    assert str(err.value) == f"out: {out} holds a different study (phases 30 there, 40 here); choose a new --out", \
        "more seeds do not carry another change in, and the message names only what may not change"
    assert json.loads((out / "study.json").read_text()) == {**plan, "seeds": [1, 2, 3]}
    with pytest.raises(ConfigError, match=r"\(algos ppo there, ppo,rloo here\); choose"):
        open_study(out, {**plan, "algos": ["ppo", "rloo"], "seeds": [1, 2, 3]}, "study.json", "study")
    open_study(out, {**plan, "algos": ["ppo", "rloo"], "seeds": [1, 2, 3]}, "study.json", "study", grows=("algos",))
    assert json.loads((out / "study.json").read_text())["algos"] == ["ppo", "rloo"], "`grows` names what may grow"


def _job(name: str, log, fail: bool = False, folder=None) -> Job:
    """A unit whose process appends its name to `log` (and fails with an `error:` line if `fail`);
    with a folder, it marks it finished the way a run folder says so."""
    code = f"open({str(log)!r}, 'a').write({name!r} + '\\n')\n"
    if fail:
        code += "import sys; print('warming up', file=sys.stderr); print('error: boom', file=sys.stderr); " \
                "print('a last line', file=sys.stderr); sys.exit(3)\n"
    if folder is not None:
        code += (f"import os, json; os.makedirs({str(folder)!r}, exist_ok=True)\n"
                 f"open(os.path.join({str(folder)!r}, 'status.json'), 'w').write(json.dumps({{'status': 'finished', 'phase': 1}}))\n")
    return Job(name, lambda: [sys.executable, "-c", code], folder=folder, record={"unit": name})


def test_a_failed_unit_stops_the_study_and_the_next_call_runs_only_what_is_not_done(tmp_path):
    log, ledger_path = tmp_path / "launched.txt", tmp_path / "ledger.json"
    folder = tmp_path / "runs" / "b"
    jobs = [_job("a", log), _job("b", log, fail=True, folder=folder), _job("c", log)]
    with pytest.raises(RuntimeError) as err:
        run_jobs(jobs, Ledger(ledger_path), parallel=1)
    assert str(err.value) == "b failed (exit 3): error: boom", "its last error: line, not its last line"
    assert log.read_text().split() == ["a", "b"], "no unit starts after a failure"
    assert set(json.loads(ledger_path.read_text())) == {"a"}

    jobs[1] = _job("b", log, folder=folder)
    ledger = Ledger(ledger_path)
    run_jobs(jobs, ledger, parallel=2)
    assert sorted(log.read_text().split()[2:]) == ["b", "c"], "a finished unit is not run again"
    assert ledger["b"]["unit"] == "b" and ledger["b"]["wall_s"] > 0 and ledger["b"]["peak_mib"] > 0
    run_jobs(jobs, Ledger(ledger_path), parallel=2)
    assert len(log.read_text().split()) == 4, "all finished: nothing runs"
    (folder / "status.json").write_text(json.dumps({"status": "interrupted", "phase": 0}))
    run_jobs(jobs, Ledger(ledger_path), parallel=2)
    assert log.read_text().split()[4:] == ["b"], "a unit whose folder is not finished runs again"


def test_more_seeds_run_only_the_new_seeds_units(tmp_path):
    """A study of two methods × two seeds, then the same study with a third seed: only the two units
    of seed 3 run; the finished ones keep their ledger entries."""
    out, log = tmp_path / "study", tmp_path / "launched.txt"

    def study(seeds):
        open_study(out, {"algos": ["ppo", "rloo"], "seeds": seeds}, "study.json", "study")
        ledger = Ledger(out / "ledger.json")
        units = plan_units(["ppo", "rloo"], seeds, [("b", 0.1)])
        run_jobs([_job(u.name, log, folder=out / "runs" / u.name) for u in units], ledger, parallel=2)
        return ledger

    first = study([1, 2])
    assert sorted(log.read_text().split()) == ["ppo-s1-b0.1", "ppo-s2-b0.1", "rloo-s1-b0.1", "rloo-s2-b0.1"]
    entries = dict(first.entries)
    second = study([1, 2, 3])
    assert sorted(log.read_text().split()[4:]) == ["ppo-s3-b0.1", "rloo-s3-b0.1"], "only the new seed's units"
    assert {k: second[k] for k in entries} == entries, "the finished units' measurements are kept"
    assert len(second.entries) == 6


def test_over_seeds_groups_each_units_value_by_its_seed():
    units = plan_units(["ppo", "rloo"], [1, 2], [("b", 0.1)])
    values = {"ppo-s1-b0.1": 0.9, "ppo-s2-b0.1": 0.8, "rloo-s1-b0.1": 0.7}  # rloo-s2 not run yet
    assert over_seeds(units, lambda u: values.get(u.name)) == {("ppo", ("b", 0.1)): {1: 0.9, 2: 0.8},
                                                               ("rloo", ("b", 0.1)): {1: 0.7}}


def test_a_table_cell_is_the_mean_and_its_interval_over_seeds():
    """[0.9, 0.8]: mean 0.85, s = 0.0707, t_{0.975, 1} = 12.706, half-width 12.706 · 0.0707/√2 = 0.635."""
    assert interval_cell([0.9, 0.8]) == "0.850 ± 0.635"
    assert interval_cell([0.9]) == "0.900" and interval_cell([]) == ""
    assert interval_cell([1200.0, 1300.0, 1250.0], "{:,.0f}") == "1,250 ± 124"  # s = 50: 4.303 · 50/√3


class _Axes:
    """What `draw_band` draws, recorded: each line's points and each band's edges."""

    def __init__(self):
        self.lines, self.bands = [], []

    def plot(self, x, y, **kw):
        self.lines.append((list(x), list(y), kw))
        return [type("Line", (), {"get_color": lambda self: "C0"})()]

    def fill_between(self, x, low, high, **kw):
        self.bands.append((list(x), list(low), list(high)))


def test_a_curve_over_seeds_is_their_mean_with_its_t_band_and_one_seed_is_its_line():
    """Two seeds, x = phase: y = [0, 1, 2] and [2, 3, 2, 9] (the longer cut to 3 points). Means 1, 2, 2;
    at the first point s = √2, half-width 12.706 · √2/√2 = 12.706; at the last, no spread: 0."""
    ax = _Axes()
    draw_band(ax, [[1, 2, 3], [1, 2, 3, 4]], [[0, 1, 2], [2, 3, 2, 9]], label="PPO")
    (x, y, kw), = ax.lines
    assert x == [1, 2, 3] and y == [1, 2, 2] and kw == {"label": "PPO"}
    (bx, low, high), = ax.bands
    assert bx == x and low[0] == pytest.approx(1 - 12.7062, abs=1e-4) and high[0] == pytest.approx(1 + 12.7062, abs=1e-4)
    assert (low[2], high[2]) == (2, 2), "both seeds agree there: no band"
    ax = _Axes()
    draw_band(ax, [[0.0, 0.5]], [[0.1, 0.2]])
    assert ax.lines[0][1] == [0.1, 0.2] and ax.bands == [], "one seed: its line, no band"


def test_a_seed_with_no_value_at_a_point_is_left_out_of_that_point():
    """Three seeds, y = [1, NaN, 4], [3, NaN, 6], [2, 5, NaN] (a run with no A < 0 completion in a phase logs
    NaN there): point 1 is the mean of three, 2 ± 4.303 · 1/√3; point 2 has one seed, its value and no
    band; point 3 two, 5 ± 12.706 · √2/√2. A NaN in a mean would blank the whole point instead."""
    import math

    ax = _Axes()
    nan = float("nan")
    draw_band(ax, [[1, 2, 3]] * 3, [[1, nan, 4], [3, nan, 6], [2, 5, nan]])
    (_, y, _), = ax.lines
    assert y == [2, 5, 5]
    (_, low, high), = ax.bands
    assert low[0] == pytest.approx(2 - 4.3027 / 3**0.5, abs=1e-4) and high[2] == pytest.approx(5 + 12.7062, abs=1e-4)
    assert math.isnan(low[1]) and math.isnan(high[1]), "one seed at a point: no band there"
    ax = _Axes()
    draw_band(ax, [[1, 2]] * 2, [[1, nan], [3, nan]])
    assert math.isnan(ax.lines[0][1][1]), "a point no seed has is a gap"


def test_the_bar_follows_each_running_units_phase(tmp_path):
    run_dir = tmp_path / "ppo-s1"
    fake_train = ("import json, os, time\n"
                  f"d = {str(run_dir)!r}; os.makedirs(d, exist_ok=True)\n"
                  "for phase in (1, 2, 3):\n"
                  "    open(os.path.join(d, 'status.json'), 'w').write(json.dumps({'status': 'running', 'phase': phase}))\n"
                  "    time.sleep(0.8)\n")
    seen: list[int] = []
    run_jobs([Job("ppo-s1", lambda: [sys.executable, "-c", fake_train], run_dir, steps=3)], Ledger(tmp_path / "l.json"),
             watch=lambda name, steps: seen.append(steps))
    assert seen[-1] == 3 and {1, 2} & set(seen), seen
    assert seen == sorted(seen), "phases only go forward"


def test_a_studys_errors_are_one_line_with_its_exit_code(capsys):
    def fail(exc):
        def run(args):
            raise exc
        return run

    def bad_input():
        raise ConfigError("seeds: empty list")

    assert study_main(bad_input, fail(AssertionError)) == 2
    assert capsys.readouterr().err == "error: seeds: empty list\n"
    assert study_main(lambda: None, fail(RuntimeError("b failed (exit 3): error: boom\nmore"))) == 1
    assert capsys.readouterr().err == "error: b failed (exit 3): error: boom; run the same command again to continue\n"
    assert study_main(lambda: None, fail(ConfigError("features_layer: must be in 0..3; got 7"))) == 2
    assert "again" not in capsys.readouterr().err, "bad input found late is still bad input: nothing to continue"
    assert study_main(lambda: None, fail(KeyboardInterrupt())) == 130
    assert capsys.readouterr().err == "interrupted; run the same command again to continue\n"
    assert study_main(lambda: None, lambda args: None) == 0
