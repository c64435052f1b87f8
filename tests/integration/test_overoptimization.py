"""The over-optimisation study's pieces (rlhf_scratch/studies/overoptimization/) against numbers
worked out by hand: KL of best-of-n, the exact best-of-n expectation, Gao et al.'s fits and their
peaks, the gold at matched KL and the table over seeds; its per-phase evaluation hook; its command
line (seeds, --quick); and the quick study end to end, then grown by a seed."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rlhf_scratch.config import registry
from rlhf_scratch.studies.overoptimization.formulas import at_d, best_of_n_expectation, fit_gao, kl_bon
from rlhf_scratch.studies.overoptimization.report import (
    kl_sweep_rows,
    kl_sweep_verdicts,
    make_table,
    matched_d,
    study_verdicts,
    table_cells,
)
from rlhf_scratch.studies.overoptimization.study import main, study_args


def test_kl_of_best_of_n_is_log_n_minus_n_minus_one_over_n():
    assert kl_bon(1) == 0.0
    assert kl_bon(2) == pytest.approx(math.log(2) - 0.5)  # 0.19315
    assert kl_bon(4) == pytest.approx(1.3862943611198906 - 0.75)
    assert kl_bon(256) == pytest.approx(math.log(256) - 255 / 256)


def test_best_of_n_expectation_averages_every_n_subset_picked_by_the_proxy():
    proxy = [3.0, 1.0, 2.0]
    gold = [5.0, 100.0, 7.0]  # the proxy's favourite is gold's worst: a flipped ranking would give 100s
    assert best_of_n_expectation(proxy, gold, 1) == pytest.approx((5 + 100 + 7) / 3)
    # subsets {0,1} -> 5, {0,2} -> 5, {1,2} -> 7 (the proxy picks 2 over 1)
    assert best_of_n_expectation(proxy, gold, 2) == pytest.approx(17 / 3)
    assert best_of_n_expectation(proxy, gold, 3) == pytest.approx(5.0)
    assert best_of_n_expectation(proxy, proxy, 2) == pytest.approx((3 + 3 + 2) / 3)
    with pytest.raises(ValueError, match="n must be in 1..3"):
        best_of_n_expectation(proxy, gold, 4)


def test_fit_recovers_best_of_n_form_and_its_peak():
    d = np.linspace(0.2, 2.5, 12)
    fit = fit_gao(list(d), list(d * (1.0 - 0.5 * d)), "bon")
    assert (fit["alpha"], fit["beta"]) == (pytest.approx(1.0), pytest.approx(0.5))
    assert fit["d_star"] == pytest.approx(1.0)  # α / 2β
    assert fit["R_star"] == pytest.approx(0.5)  # α² / 4β


def test_fit_recovers_rl_form_and_its_peak():
    d = np.linspace(0.1, 6.0, 15)
    fit = fit_gao([0.0, *d], [0.0, *(d * (1.0 - 0.5 * np.log(d)))], "rl")  # d = 0 is skipped (log)
    assert (fit["alpha"], fit["beta"]) == (pytest.approx(1.0), pytest.approx(0.5))
    assert fit["d_star"] == pytest.approx(math.e)  # exp(α/β − 1)
    assert fit["R_star"] == pytest.approx(0.5 * math.e)  # β d*
    assert fit_gao([0.0, 1.0], [0.0, 0.3], "rl") is None  # one usable point


def test_a_rising_curve_has_no_peak_within_the_fit():
    d = np.linspace(0.2, 2.0, 10)
    fit = fit_gao(list(d), list(d * (1.0 + 0.2 * d)), "bon")  # β = −0.2
    assert fit["beta"] == pytest.approx(-0.2) and fit["d_star"] == math.inf


@pytest.mark.parametrize("argv, message", [
    (["--algos", "ppo,sft"], f"error: algos: unknown sft; choose from {', '.join(registry.names())}, bon"),
    (["--rm-pairs", "250,x"], "error: rm_pairs: expected a comma-separated list of ints; got '250,x'"),
    (["--rm-pairs", "250,9"], "error: rm_pairs: each size must be >= 10; got 9"),
    (["--bon-max", "100"], "error: bon_max: must be a power of 2 >= 2; got 100"),
    (["--total-phases", "0"], "error: total_phases: must be >= 1; got 0"),
    (["--seeds", "1,2,1"], "error: seeds: each seed once; got 1,2,1"),
    (["--seed", "x"], "error: seeds: expected a comma-separated list of ints; got 'x'"),
    (["--eval-every", "0"], "error: eval_every: must be >= 1; got 0"),
    (["--kl-sweep", "0.1,0.3"], "error: kl_sweep: must hold 0 (the early-stopping curve the others are read against); "
                                "got 0.1,0.3"),
    (["--kl-sweep", "0,-0.1"], "error: kl_sweep: each β once, finite and >= 0; got 0,-0.1"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv, message, tmp_path, capsys):
    assert main(["--out", str(tmp_path / "s"), *argv]) == 2
    assert capsys.readouterr().err.strip() == message
    assert not (tmp_path / "s").exists()


def test_a_folder_that_is_not_this_study_is_refused(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "notes.txt").write_text("mine")
    assert main(["--out", str(tmp_path / "s")]) == 2
    assert "is not a study folder" in capsys.readouterr().err


def test_every_documented_flag_is_there_and_out_is_required(capsys):
    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    for flag in ("--out", "--rm-pairs", "--algos", "--total-phases", "--test-pairs", "--eval-prompts", "--eval-per-prompt",
                 "--eval-every", "--bon-max", "--rm-epochs", "--gen-len", "--batch-size", "--base-lr", "--kl-sweep",
                 "--seeds", "--threads", "--jobs", "--report", "--quick"):
        assert flag in text, f"the documented {flag} is gone"
    compact = text.replace(" ", "")  # the help wraps a long default over lines
    assert "(default:1000,4000)" in compact and "(default:20)" in compact and "(default:0,0.03,0.3)" in compact
    assert main([]) == 2
    assert capsys.readouterr().err.strip() == "error: out: required (the study folder)"


def test_seed_is_one_seed_seeds_are_many_and_quick_is_tiny(tmp_path):
    """`--seed 3` keeps working as `--seeds 3`; each RL run is a unit per seed (`rloo-s2-rm250`), and
    the first seed is the data's (split, pairs, proxies); --quick starts from tiny settings that the
    flags given still override, and the default stays the study that decides."""
    out = ["--out", str(tmp_path / "s")]
    assert study_args([*out, "--seed", "3"]).seed_list() == [3]
    args = study_args([*out, "--seeds", "2,1", "--algos", "rloo,bon", "--rm-pairs", "250", "--kl-sweep", "none"])
    assert [u.name for u in args.rl_units()] == ["rloo-s2-rm250", "rloo-s1-rm250"] and args.data_seed == 2
    swept = study_args([*out, "--seeds", "1,2", "--algos", "rloo", "--rm-pairs", "250,500", "--kl-sweep", "0,0.5"])
    assert [u.name for u in swept.rl_units()][4:] == ["ppo-s1-b0", "ppo-s2-b0", "ppo-s1-b0.5", "ppo-s2-b0.5"]
    assert args.plan()["seeds"] == [2, 1] and "seed" not in args.plan() and "quick" not in args.plan()
    quick = study_args([*out, "--quick", "--total-phases", "3"])
    assert (quick.rm_pairs, quick.algos, quick.bon_max, quick.total_phases) == ("10", "rloo,bon", 4, 3)
    assert study_args(out).plan()["rm_pairs"] == [1000, 4000] and study_args(out).total_phases == 20
    assert study_args(out).plan()["kl_sweep"] == [0.0, 0.03, 0.3] and study_args(out).eval_per_prompt * 128 == 2048


def test_gold_at_a_d_is_read_where_the_curve_first_reaches_it():
    ds, gold = [0.0, 0.5, 0.3, 1.0, 1.2], [0.0, 0.2, 9.0, 0.1, 5.0]
    assert at_d(ds, gold, 0.0) == 0.0
    assert at_d(ds, gold, 0.5) == 0.2
    assert at_d(ds, gold, 0.8) == pytest.approx(9.0 + (0.1 - 9.0) * (0.8 - 0.3) / (1.0 - 0.3)), \
        "between the two points around d (0.3 → 1.0), the first time it gets there"  # 2.643
    assert at_d(ds, gold, 2.0) is None


# Two seeds each of RLOO and best-of-n against one proxy. The largest d both RLOO runs and both
# best-of-n curves reach: min(1.0, 0.8, 1.07, 1.07) = 0.8. Gold there: RLOO s1 between (0.5, 0.2) and
# (1.0, 0.1): 0.2 − 0.1 · 0.3/0.5 = 0.14; RLOO s2 exactly 0.4 (at d 0.8); best-of-n 0.2 and 0.3.
CURVES = {
    "rloo": {"10": {"1": {"d": [0.0, 0.5, 1.0], "gold": [0.0, 0.2, 0.1], "proxy": [0.0, 0.5, 1.0]},
                    "2": {"d": [0.0, 0.4, 0.8], "gold": [0.0, 0.3, 0.4], "proxy": [0.0, 0.4, 0.9]}}},
    "bon": {"10": {"1": {"d": [0.0, 0.44, 0.8, 1.07], "gold": [0.0, 0.1, 0.2, 0.25], "proxy": [0.0, 0.3, 0.6, 0.8]},
                   "2": {"d": [0.0, 0.44, 0.8, 1.07], "gold": [0.0, 0.15, 0.3, 0.35], "proxy": [0.0, 0.3, 0.5, 0.7]}}},
}


def test_the_table_is_a_row_per_method_and_proxy_over_its_seeds():
    """RLOO's gold at matched d: [0.14, 0.4], mean 0.27, s = 0.26/√2 = 0.1838, half-width
    12.706 · 0.1838/√2 = 1.652 (t at ν = 1). Peaks: 0.2 at d 0.5 and 0.4 at d 0.8; final gold 0.1, 0.4."""
    assert matched_d(CURVES, 10) == 0.8
    rows = make_table(CURVES, {"10": 0.75}, [10], ["rloo", "bon"])
    rloo, bon = rows
    assert (rloo["method"], rloo["seeds"], rloo["n"], rloo["matched_d"]) == ("rloo", [1, 2], 2, 0.8)
    assert rloo["gold_at_matched_d"]["values"] == pytest.approx([0.14, 0.4])
    assert rloo["gold_at_matched_d"]["mean"] == pytest.approx(0.27)
    assert rloo["gold_at_matched_d"]["half_width"] == pytest.approx(12.7062 * 0.26 / 2, abs=1e-4)
    assert rloo["peak_gold"]["values"] == [0.2, 0.4] and rloo["peak_d"]["values"] == [0.5, 0.8]
    assert rloo["final_gold"]["values"] == [0.1, 0.4] and bon["gold_at_matched_d"]["values"] == [0.2, 0.3]
    header, cells = table_cells(rows)
    assert header[:7] == ["method", "RM pairs", "RM acc. vs gold", "n", "gold Δ at matched d", "gold Δ at RL-matched d",
                          "peak gold Δ (at d)"]
    assert cells[0][:7] == ["RLOO", "10", "0.750", "2", "0.270 ± 1.652 (d 0.80)", "0.270 ± 1.652 (d 0.80)",
                            "0.300 ± 1.271 (0.65)"]
    (sentence,) = study_verdicts(rows, [10])
    assert sentence.startswith("Which has the highest gold gain at matched KL (d = 0.80) against the 10-pair proxy "
                               "is not resolved at n = 2 seeds"), sentence
    assert "best-of-n 0.250 ± 0.635 against RLOO 0.270 ± 1.652" not in sentence, "the leader by mean comes first"
    assert "RLOO 0.270 ± 1.652 against best-of-n 0.250 ± 0.635" in sentence


def test_the_rl_algorithms_are_ranked_again_where_they_all_went_past_best_of_n():
    """Best-of-n stops at d 1.07; every RL run reached d 2 (RLOO seed 1 and PPO seed 2 end there). At d 2:
    RLOO 0.3 and 0.6 − 0.4/1.4 = 0.3143; PPO 0.9 + 0.3 · 0.5/1.5 = 1.0 and 1.0. PPO − RLOO paired: 0.7 and
    0.6857, interval clear of 0, so PPO is named; best-of-n has no value there and is left out."""
    curves = {
        "rloo": {"10": {"1": {"d": [0.0, 1.0, 2.0], "gold": [0.0, 0.5, 0.3], "proxy": [0.0, 1.0, 2.0]},
                        "2": {"d": [0.0, 1.0, 2.4], "gold": [0.0, 0.6, 0.2], "proxy": [0.0, 1.0, 2.0]}}},
        "ppo": {"10": {"1": {"d": [0.0, 1.5, 3.0], "gold": [0.0, 0.9, 1.2], "proxy": [0.0, 1.0, 2.0]},
                       "2": {"d": [0.0, 1.0, 2.0], "gold": [0.0, 0.8, 1.0], "proxy": [0.0, 1.0, 2.0]}}},
        "bon": CURVES["bon"],
    }
    rows = make_table(curves, {"10": 0.75}, [10], ["rloo", "ppo", "bon"])
    rloo, ppo, bon = rows
    assert rloo["rl_matched_d"] == 2.0 and rloo["matched_d"] == 1.07
    assert rloo["gold_at_rl_matched_d"]["values"] == pytest.approx([0.3, 0.6 - 0.4 / 1.4])
    assert ppo["gold_at_rl_matched_d"]["values"] == pytest.approx([1.0, 1.0]) and bon["gold_at_rl_matched_d"] is None
    first, second = study_verdicts(rows, [10])
    assert "matched KL (d = 1.07)" in first
    assert second.startswith("PPO reaches the highest gold gain among the RL algorithms at matched KL (d = 2.00, the "
                             "largest every RL run reached) against the 10-pair proxy"), second
    assert table_cells(rows)[1][2][5] == "—", "best-of-n has no RL-matched cell"


def test_gold_standard_error_holds_the_prompts_fixed():
    """[1, 3 | 0, 4], K = 2: within-prompt variances 2 and 8, s.e. = √((2 + 8)/2)/2 = √5/2; one sample a
    prompt: s/√N over all four, s = √(10/3)."""
    from rlhf_scratch.studies.overoptimization.formulas import gold_standard_error

    assert gold_standard_error([1.0, 3.0, 0.0, 4.0], 2) == pytest.approx(math.sqrt(5) / 2)
    assert gold_standard_error([1.0, 3.0, 0.0, 4.0], 1) == pytest.approx(math.sqrt(10 / 3) / 2)
    assert gold_standard_error([1.0, 0.0, 3.0, 4.0], 2) == pytest.approx(math.sqrt((0.5 + 0.5) / 2) / 2), \
        "grouped by consecutive samples, not pooled"


def test_the_hook_evaluates_every_nth_phase_and_the_last():
    from types import SimpleNamespace

    from rlhf_scratch.studies.overoptimization.run import HeldOutEvaluation

    hook = object.__new__(HeldOutEvaluation)
    hook.every, hook.trainer = 4, SimpleNamespace(args=SimpleNamespace(total_phases=10))
    assert [p for p in range(11) if hook.evaluates(p)] == [0, 4, 8, 10]


SWEEP = {
    "0": {"1": {"d": [0.0, 1.0, 2.0], "gold": [0.0, 0.4, 0.2]}, "2": {"d": [0.0, 1.0, 2.0], "gold": [0.0, 0.6, 0.0]}},
    "0.3": {"1": {"d": [0.0, 1.5], "gold": [0.0, 0.5]}, "2": {"d": [0.0, 0.5], "gold": [0.0, 0.15]}},
    "1": {"1": {"d": [0.0, 3.0], "gold": [0.0, 0.9]}, "2": {"d": [0.0, 1.0], "gold": [0.0, 0.7]}},
}


def test_each_penalised_run_is_read_against_the_unpenalised_run_stopped_at_its_kl():
    """β = 0.3: seed 1 ends at d 1.5, gold 0.5; β = 0 of seed 1 first reaches 1.5 between (1, 0.4) and
    (2, 0.2): 0.3, gap +0.2. Seed 2 ends at d 0.5, gold 0.15; β = 0 there: 0.3, gap −0.15. Mean +0.025,
    s_d = 0.35/√2, half-width 12.706 · 0.35/2 = 2.224. β = 1: seed 1 goes past β = 0's reach (d 3 > 2),
    so only seed 2 pairs: 0.7 − 0.6 = +0.1, one seed, no interval."""
    slow, fast = kl_sweep_rows(SWEEP)
    assert slow["beta"] == 0.3 and slow["stopped_gold"] == pytest.approx([0.3, 0.3])
    assert slow["gap"]["mean"] == pytest.approx(0.025)
    assert slow["gap"]["half_width"] == pytest.approx(12.7062 * 0.35 / 2, abs=1e-3) and not slow["gap"]["resolved"]
    assert slow["final_d"]["values"] == [1.5, 0.5] and slow["final_gold"]["mean"] == pytest.approx(0.325)
    assert fast["paired_seeds"] == [2] and fast["beyond_beta0"] == [1]
    assert fast["gap"]["mean"] == pytest.approx(0.1) and fast["gap"]["half_width"] is None
    one, two = kl_sweep_verdicts([slow, fast], 250)
    assert one.startswith("PPO with β = 0.3 against the 250-pair proxy ends at d = 1.00, gold +0.325: "
                          "not distinguishable from the β = 0 run stopped at the same KL, gap +0.025 (95 % interval "
                          "-2.199 to +2.249, n = 2 seeds"), one
    assert one.endswith(": not resolved, whether the penalty did better or worse than stopping early.") and \
        "Gao" not in one, "an interval of ± 2.2 says nothing more: not that the penalty acts like early stopping"
    assert "gap +0.100 (n = 1 seed)" in two


def test_a_sweep_of_beta_zero_alone_draws_its_curve_and_no_table(tmp_path):
    """`--kl-sweep 0` (PPO further in KL, no penalty): the section has the figure, no verdict, no table."""
    from rlhf_scratch.studies.overoptimization.report import sweep_section

    zero = {"0": {s: {**c, "proxy": [0.0, 0.5, 1.0]} for s, c in SWEEP["0"].items()}}
    html = "".join(sweep_section(zero, [], [], 1000, tmp_path))
    assert "KL penalty or early stopping" in html and "<table>" not in html and (tmp_path / "kl_sweep.png").is_file()
    assert sweep_section({}, [], [], 1000, tmp_path) == []


def _fake_evaluation(calls):
    """evaluate_policy's stand-in: records which model it evaluated; 3 prompts × 2 samples."""
    def evaluate(lm, ref, prompts, proxy_fn, gen_len, per_prompt, word="and"):
        calls.append(lm)
        samples = [{"prompt": p, "completion": f"c{i}", "gold": 0.5, "proxy": 1.0} for p in prompts for i in range(per_prompt)]
        return {"study/gold": 0.5, "study/proxy": 1.0, "study/kl": 0.25, "study/d": 0.5}, samples
    return evaluate


def test_the_evaluation_hook_scores_the_reference_only_when_a_run_starts(tmp_path, monkeypatch, tiny_random_lm):
    """phase 0 (the reference) is evaluated by `start` for a new run and never on resume (a resumed
    run must draw no random numbers the interrupted one did not); every phase after is logged; and
    what is evaluated is the LM inside the policy, PPO's value head or not."""
    from types import SimpleNamespace

    from rlhf_scratch.algorithms.ppo import TransformerWithValueHead
    from rlhf_scratch.engine.loop import PhaseHook
    from rlhf_scratch.studies.overoptimization import run as study

    calls = []
    monkeypatch.setattr(study, "evaluate_policy", _fake_evaluation(calls))
    hook = object.__new__(study.HeldOutEvaluation)  # its models are not needed here
    hook.trainer = SimpleNamespace(policy=TransformerWithValueHead(tiny_random_lm), args=SimpleNamespace(gen_len=4))
    hook.prompts, hook.per_prompt, hook.ref, hook.proxy_fn, hook.every = ["a", "b", "c"], 2, None, None, 1
    assert isinstance(hook, PhaseHook)
    hook.start(tmp_path, 5)
    assert calls == [] and not (tmp_path / study.START_FILE).exists(), "a resumed run: no phase 0"
    hook.start(tmp_path, 0)
    assert calls == [tiny_random_lm], "the value head's trunk, not the wrapper"
    assert json.loads((tmp_path / study.START_FILE).read_text())["study/d"] == 0.5
    metrics = hook.after_phase(tmp_path, 1)
    assert set(metrics) <= set(study.HeldOutEvaluation.METRICS) and len(calls) == 2
    lines = [json.loads(x) for x in (tmp_path / study.SAMPLES_FILE).read_text().splitlines()]
    assert [x["phase"] for x in lines] == [0, 1]
    assert [s["prompt"] for s in lines[1]["samples"]] == ["a", "b", "c"], "one sample per prompt"


def test_a_best_of_n_curve_falling_from_the_start_peaks_at_the_reference():
    d = np.linspace(0.2, 2.0, 10)
    fit = fit_gao(list(d), list(d * (-0.3 - 0.1 * d)), "bon")
    assert fit["alpha"] == pytest.approx(-0.3) and (fit["d_star"], fit["R_star"]) == (0.0, 0.0)


QUICK_ARGV = ["--quick", "--jobs", "1"]  # one process at a time: the suite runs two tests at once


@pytest.fixture(scope="module")
def quick_study(tmp_path_factory):
    """`--quick --seeds 1,2`, run once for the tests below: gold pairs → one 10-pair proxy → best-of-n
    per seed → an RLOO run per seed (two processes at a time) → table, figure, page."""
    out = tmp_path_factory.mktemp("quick") / "study"
    assert main([*QUICK_ARGV, "--seeds", "1,2", "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_the_quick_study_runs_end_to_end_with_seeds_intervals_and_a_verdict(quick_study, capsys):
    out = quick_study
    table = json.loads((out / "table.json").read_text())
    assert [(r["method"], r["rm_pairs"], r["seeds"], r["n"]) for r in table["rows"]] == [("rloo", 10, [1, 2], 2),
                                                                                         ("bon", 10, [1, 2], 2)]
    for key in ("gold_at_matched_d", "peak_gold", "final_gold", "final_proxy", "final_d"):
        assert {"mean", "low", "high", "half_width", "n", "values"} <= set(table["rows"][0][key]), key
        assert len(table["rows"][0][key]["values"]) == 2
    rloo = table["curves"]["rloo"]["10"]
    assert sorted(rloo) == ["1", "2"] and rloo["1"]["d"][0] == 0.0 and len(rloo["1"]["d"]) == 3, \
        "phase 0 is the reference itself (d = 0), then 2 phases, per seed"
    assert rloo["1"]["gold"] != rloo["2"]["gold"], "the seeds are different runs"
    assert table["curves"]["bon"]["10"]["2"]["d"] == pytest.approx([0.0, math.sqrt(kl_bon(2)), math.sqrt(kl_bon(4))])
    md = (out / "table.md").read_text()
    assert md.startswith("| method | RM pairs | RM acc. vs gold | n | gold Δ at matched d |")
    assert "| RLOO | 10 |" in md and "| 2 |" in md and " ± " in md and "95 % Student-t interval" in md
    (verdict,) = table["verdicts"]
    assert "gold gain at matched KL" in verdict and "10-pair proxy" in verdict
    html = (out / "index.html").read_text()
    assert html.index(verdict[:40]) < html.index("<table>"), "the page opens with its verdict"
    assert "best-of-n" in html and (out / "overoptimization.png").is_file()
    times = json.loads((out / "times.json").read_text())
    assert {"pairs", "rm-10", "bon-s1", "bon-s2", "rloo-s1-rm10", "rloo-s2-rm10", "ppo-s1-b0", "ppo-s2-b0",
            "ppo-s1-b1", "ppo-s2-b1", "study_wall"} == set(times)
    sweep = table["kl_sweep"]
    assert sweep["proxy"] == 10 and sorted(sweep["curves"]) == ["0", "1"] and [r["beta"] for r in sweep["rows"]] == [1.0]
    assert len(sweep["verdicts"]) == 1 and sweep["verdicts"][0].startswith("PPO with β = 1 against the 10-pair proxy")
    assert json.loads((out / "runs" / "ppo-s2-b1" / "config.json").read_text())["beta"] == 1.0
    assert (out / "kl_sweep.png").is_file() and "KL penalty or early stopping" in html
    assert 0 < table["evaluation_precision"]["max"] < 10 and table["evaluation_precision"]["points"] == 12
    assert times["rloo-s2-rm10"]["seed"] == 2 and times["rloo-s2-rm10"]["setting"] == ["rm", 10]
    assert json.loads((out / "runs" / "rloo-s2-rm10" / "config.json").read_text())["seed"] == 2
    run = out / "runs" / "rloo-s1-rm10"
    assert [json.loads(x)["phase"] for x in (run / "study_samples.jsonl").read_text().splitlines()] == [0, 1, 2]
    assert "study/gold" in json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    capsys.readouterr()
    assert main([*QUICK_ARGV, "--seeds", "1,2", "--out", str(out), "--report"]) == 0
    assert capsys.readouterr().out.startswith(verdict), "the command prints the verdict first"
    assert main([*QUICK_ARGV, "--seeds", "1", "--out", str(out)]) == 2, "fewer seeds: a different plan"
    assert "seeds may only grow" in capsys.readouterr().err
    assert main([*QUICK_ARGV, "--seeds", "1,2", "--rm-pairs", "12", "--out", str(out)]) == 2
    assert "holds a different study (rm_pairs 10 there, 12 here)" in capsys.readouterr().err


@pytest.mark.slow
def test_more_seeds_continue_the_quick_study_and_train_only_the_new_seed(quick_study):
    """The same command with --seeds 1,2,3: best-of-n and RLOO for seed 3 only; the pairs and the proxy
    (the first seed's) and every finished unit are kept as they were."""
    out = quick_study
    before = json.loads((out / "times.json").read_text())
    pairs = (out / "pairs.jsonl").read_text()
    assert main([*QUICK_ARGV, "--seeds", "1,2,3", "--out", str(out)]) == 0
    after = json.loads((out / "times.json").read_text())
    assert set(after) - set(before) == {"bon-s3", "rloo-s3-rm10", "ppo-s3-b0", "ppo-s3-b1"}
    assert {k: after[k] for k in before if k != "study_wall"} == {k: v for k, v in before.items() if k != "study_wall"}
    assert (out / "pairs.jsonl").read_text() == pairs
    rows = json.loads((out / "table.json").read_text())["rows"]
    assert [r["n"] for r in rows] == [3, 3] and json.loads((out / "study.json").read_text())["seeds"] == [1, 2, 3]
