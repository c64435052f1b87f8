"""Stopping the hack (studies/hacking/mitigate.py): the early-stopping rule, gold at a matched d,
the comparison's verdicts and the ensemble's members, against numbers worked by hand."""

import json

import pytest

from rlhf_scratch.studies.hacking.mitigate import (
    BASELINE,
    comparison,
    early_stop_index,
    early_stopping,
    ensemble_spec,
    farthest_common_d,
    gold_at_d,
    load_curves,
    main,
    member_dirs,
    stopped_curves,
)


def test_early_stopping_keeps_the_first_point_the_proxy_then_does_not_beat_by_its_se():
    proxy = [0.0, 0.5, 0.9, 0.95, 0.92, 1.30, 1.31]
    # i = 2: max(0.95, 0.92) = 0.95 <= 0.9 + 0.1; i = 0, 1 rose by more than 0.1 within two evaluations
    assert early_stop_index(proxy, se=0.1, patience=2) == 2
    assert early_stop_index(proxy, se=0.0, patience=2) == 6, "without s every small rise counts: it never stops"
    # m = 3: after i = 2 the proxy reaches 1.30 within three evaluations; i = 4 has only two after it
    assert early_stop_index(proxy, se=0.1, patience=3) == 6, "a point needs m evaluations after it to be judged"


def test_a_rise_of_exactly_se_is_not_a_rise():
    assert early_stop_index([1.0, 1.25, 1.125], se=0.25, patience=2) == 0
    assert early_stop_index([1.0, 1.375, 1.125], se=0.25, patience=2) == 2


def test_bad_rule_settings_are_refused():
    with pytest.raises(ValueError, match="need patience >= 1"):
        early_stop_index([1.0, 2.0], se=0.1, patience=0)


CURVE = [{"phase": 0, "d": 0.0, "gold": 0.2}, {"phase": 3, "d": 1.0, "gold": 1.0}, {"phase": 6, "d": 3.0, "gold": 2.0},
         {"phase": 9, "d": 2.5, "gold": 1.6}, {"phase": 12, "d": 4.0, "gold": 0.4}]


def test_gold_at_d_is_linear_in_d_where_the_run_first_reaches_it():
    assert gold_at_d(CURVE, 2.0) == pytest.approx(1.5)  # 1.0 + (2.0 − 1.0) · (2.0 − 1.0)/(3.0 − 1.0)
    assert gold_at_d(CURVE, 2.75) == pytest.approx(1.875), "the first crossing (1 → 3), not the later 2.5 → 4 (1.4)"
    assert gold_at_d(CURVE, 0.0) == 0.2 and gold_at_d(CURVE, 4.0) == pytest.approx(0.4)
    assert gold_at_d(CURVE, 4.5) is None
    assert farthest_common_d([CURVE, CURVE[:3]]) == 3.0


def _curve(proxy, gold, d=None):
    return [{"phase": 3 * i, "d": (d or range(len(proxy)))[i], "proxy": p, "gold": g} for i, (p, g) in enumerate(zip(proxy, gold))]


def test_early_stopping_over_seeds_pairs_gold_at_the_stop_with_the_end_and_the_peak():
    runs = {1: _curve([0.0, 1.0, 1.02, 1.01, 1.5], [0.0, 2.0, 1.8, 1.0, 0.5]),   # stops at index 1 (phase 3), decided at 9
            2: _curve([0.0, 0.5, 1.0, 1.5, 2.0], [0.0, 1.0, 1.5, 1.2, 1.1])}   # keeps rising: runs to the end
    r = early_stopping(runs, se=0.05, patience=2)
    one, two = r["per_seed"]["1"], r["per_seed"]["2"]
    assert (one["stop_phase"], one["decided_at_phase"], one["gold_stop"], one["stopped"]) == (3, 9, 2, True)
    assert (two["stop_phase"], two["gold_stop"], two["stopped"]) == (12, 1.1, False)
    assert r["stopped_seeds"] == 1
    assert r["stop_minus_final"]["mean"] == pytest.approx((1.5 + 0.0) / 2)
    assert r["peak_minus_stop"]["mean"] == pytest.approx((0.0 + 0.4) / 2)
    # the other seed's peak: seed 1 read at seed 2's argmax (index 2: 1.8), seed 2 at seed 1's (index 1: 1)
    assert r["held_out_peak_minus_stop"]["mean"] == pytest.approx(((1.8 - 2) + (1 - 1.1)) / 2)
    assert [p["phase"] for p in stopped_curves(runs, 0.05, 2)[1]] == [0, 3]


def _final(golds, d_max=4.0):
    return {s: [{"phase": 0, "d": 0.0, "gold": 0.0, "proxy": 0.0}, {"phase": 60, "d": d_max, "gold": g, "proxy": 1.0}]
            for s, g in golds.items()}


def test_the_comparison_pairs_same_seeds_reads_gold_at_d_star_and_says_what_is_not_measured():
    methods = {BASELINE: _final({1: 1.0, 2: 2.0, 3: 1.5}), "penalty": _final({1: 2.0, 2: 2.5, 3: 2.5}, d_max=2.0),
               "later": None, "length-normalised reward": None}
    t = comparison(methods, notes={"length-normalised reward": "n/a for the repetition flaw"})
    assert t["d_star"] == 2.0, "the farthest d every run reached"
    base, penalty = t["by_method"][BASELINE], t["by_method"]["penalty"]
    assert base["gold_at_d_star"]["mean"] == pytest.approx((0.5 + 1.0 + 0.75) / 3)  # halfway along each baseline run
    assert penalty["gold_at_d_star"]["mean"] == pytest.approx(7 / 3)
    # differences 1.0, 0.5, 1.0: mean 5/6, s = √(1/12), half-width t(0.975, 2) · s/√3 = 4.3027 · 0.16667 = 0.7171
    assert penalty["vs_baseline"]["paired"] and penalty["vs_baseline"]["low"] == pytest.approx(5 / 6 - 0.71712, abs=1e-4)
    assert penalty["verdict"].startswith("keeps more gold, decided")
    rows = {r[0]: r for r in t["rows"]}
    assert rows["later"][2] == "to be measured" and rows["length-normalised reward"][2] == "n/a for the repetition flaw"
    cut = comparison({BASELINE: _final({1: 1.0, 2: 2.0, 3: 1.5}), "stopped": _final({1: 1.2, 2: 1.9, 3: 1.6}, d_max=0.5)},
                     cut=("stopped",))
    assert cut["d_star"] == 4.0, "a row cut from the baseline's runs does not pull d* in"
    assert cut["rows"][1][3] == "n/a: the baseline's runs, cut at the stop"
    welch = comparison({BASELINE: _final({1: 1.0, 2: 2.0, 3: 1.5}), "other": _final({7: 1.2, 8: 2.4})})
    assert welch["by_method"]["other"]["verdict"].startswith("not resolved at n = 2 vs 3")
    assert not welch["by_method"]["other"]["vs_baseline"]["paired"]


def test_the_ensembles_members_are_the_proxy_and_its_next_training_seeds(tmp_path):
    (tmp_path / "rm-repetition").mkdir()
    (tmp_path / "rm-repetition" / "config.json").write_text(json.dumps({"algo": "reward_model", "seed": 5}))
    names = [m.name for m in member_dirs(tmp_path, "repetition", 3)]
    assert names == ["rm-repetition", "rm-repetition-seed6", "rm-repetition-seed7"]
    spec = ensemble_spec("min", member_dirs(tmp_path, "repetition", 2))
    assert spec == f"min:{(tmp_path / 'rm-repetition').resolve()},{(tmp_path / 'rm-repetition-seed6').resolve()}"


def test_curves_load_from_a_benchmark_and_from_a_study_folder(tmp_path):
    curve = [{"phase": 0, "d": 0.0, "gold": 0.5, "proxy": 0.1}]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"curves": {"PPO": {"4": curve}}}))
    study = tmp_path / "study"
    study.mkdir()
    (study / "table.json").write_text(json.dumps({"curves": {"ppo": {"repetition": {"22": curve}}}}))
    assert load_curves(bench) == {4: curve} and load_curves(study) == {22: curve}


def test_the_command_refuses_bad_input_in_one_line(tmp_path, capsys):
    out = ["--out", str(tmp_path / "table.json")]
    assert main([*out, "--patience", "0", "--proxy-se", "0.03"]) == 2
    assert capsys.readouterr().err.strip() == "error: patience: must be >= 1; got 0"
    assert main([*out, "--methods", str(tmp_path), "--proxy-se", "0.03"]) == 2
    assert capsys.readouterr().err.strip() == f"error: methods: {tmp_path} is not a hacking study folder (no study.json)"


def test_the_study_takes_a_mitigation_and_keeps_old_plans_unchanged(tmp_path):
    from rlhf_scratch.config import ConfigError
    from rlhf_scratch.studies.hacking.study import HackingArgs

    plain = HackingArgs(out=str(tmp_path / "a"), algos="ppo").validate()
    assert "mitigation" not in plain.plan() and "ensemble_k" not in plain.plan(), "a study made before stays the same plan"
    ens = HackingArgs(out=str(tmp_path / "b"), algos="ppo", mitigation="ensemble-min").validate()
    assert (ens.plan()["mitigation"], ens.plan()["ensemble_k"]) == ("ensemble-min", 3)
    with pytest.raises(ConfigError, match="mitigation: .*ensemble-max"):
        HackingArgs(out=str(tmp_path / "c"), algos="ppo", mitigation="ensemble-max").validate()
    with pytest.raises(ConfigError, match="ensemble_k: must be >= 2; got 1"):
        HackingArgs(out=str(tmp_path / "c"), algos="ppo", mitigation="ensemble-min", ensemble_k=1).validate()


def test_a_study_stopped_before_its_report_is_read_from_its_finished_runs(tmp_path):
    from rlhf_scratch.config import ConfigError

    def point(gold, rep3):
        return {"study/d": 1.5, "study/gold": gold, "study/proxy": 0.25, "study/length": 9.0, "study/word_count": 0.0,
                "study/repeated_3grams": rep3}

    (tmp_path / "study.json").write_text(json.dumps({"rater_penalty": 4.0}))
    for seed, status in ((22, "finished"), (23, "stopped")):
        run = tmp_path / "runs" / f"ppo-s{seed}-repetition4"
        run.mkdir(parents=True)
        (run / "status.json").write_text(json.dumps({"status": status, "phase": 3, "total_phases": 3}))
        (run / "study_start.json").write_text(json.dumps(point(0.5, 0.0)))
        (run / "metrics.jsonl").write_text(json.dumps({"phase": 3, **point(1.25, 0.125)}) + "\n")
    from rlhf_scratch.studies.hacking.mitigate import method_name

    assert method_name(tmp_path) == f"{BASELINE}, {tmp_path.name}", "a β = 0 study must not replace the baseline's row"
    runs = load_curves(tmp_path)
    assert list(runs) == [22], "the stopped run is left out"
    assert [p["gold"] for p in runs[22]] == [0.5, 1.25 - 4 * 0.125]
    (tmp_path / "runs" / "ppo-s22-repetition4" / "status.json").write_text(json.dumps({"status": "stopped"}))
    with pytest.raises(ConfigError, match="holds no finished ppo run against the repetition proxy"):
        load_curves(tmp_path)
