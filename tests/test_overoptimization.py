"""The over-optimisation study's pieces against numbers worked out by hand: KL of best-of-n,
the exact best-of-n expectation, Gao et al.'s fits and their peaks, and its command line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlhf_scratch.overoptimization import best_of_n_expectation, fit_gao, kl_bon, main


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
    (["--algos", "ppo,sft"], "error: algos: unknown method 'sft'; choose from ppo, rloo, grpo, online_dpo, bon"),
    (["--rm-pairs", "250,x"], "error: rm_pairs: expected a comma-separated list; got '250,x'"),
    (["--bon-max", "100"], "error: bon_max: must be a power of 2 >= 2; got 100"),
    (["--total-phases", "0"], "error: total_phases: must be >= 1; got 0"),
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


def test_a_best_of_n_curve_falling_from_the_start_peaks_at_the_reference():
    d = np.linspace(0.2, 2.0, 10)
    fit = fit_gao(list(d), list(d * (-0.3 - 0.1 * d)), "bon")
    assert fit["alpha"] == pytest.approx(-0.3) and (fit["d_star"], fit["R_star"]) == (0.0, 0.0)


@pytest.mark.slow
def test_a_small_study_runs_end_to_end_and_continues(tmp_path, monkeypatch, capsys):
    """The whole pipeline at toy size, two processes at a time: gold pairs → two proxies →
    best-of-n → an RL run per proxy (each its own process) → table, figure, page. Run again, it
    trains nothing more; `--report` rebuilds the table from the runs."""
    import json

    monkeypatch.setenv("WANDB_MODE", "disabled")
    out = tmp_path / "study"
    argv = ["--out", str(out), "--rm-pairs", "10,12", "--algos", "rloo,bon", "--total-phases", "1", "--test-pairs", "4",
            "--eval-prompts", "2", "--eval-per-prompt", "1", "--bon-max", "2", "--rm-epochs", "1", "--gen-len", "4",
            "--batch-size", "8", "--jobs", "2"]
    assert main(argv) == 0
    table = json.loads((out / "table.json").read_text())
    assert [(r["method"], r["rm_pairs"]) for r in table["rows"]] == [("rloo", 10), ("rloo", 12), ("bon", 10), ("bon", 12)]
    rloo = table["curves"]["rloo"]["10"]
    assert len(rloo["d"]) == 2 and rloo["d"][0] == 0.0, "phase 0 is the reference itself (d = 0), then one phase"
    assert table["curves"]["bon"]["12"]["d"] == pytest.approx([0.0, math.sqrt(kl_bon(2))])
    times = json.loads((out / "times.json").read_text())
    assert {"pairs_s", "rm-10_s", "rm-12_s", "bon_s", "rloo-rm10_s", "rloo-rm12_s", "study_wall_s"} <= set(times)
    assert (out / "overoptimization.png").is_file() and "best-of-n" in (out / "index.html").read_text()
    assert main(argv) == 0, "a finished study runs again without training"
    again = json.loads((out / "times.json").read_text())
    assert {k: v for k, v in again.items() if k != "study_wall_s"} == {k: v for k, v in times.items() if k != "study_wall_s"}
    assert main([*argv, "--report"]) == 0
    assert "| RLOO | 10 |" in (out / "table.md").read_text()
