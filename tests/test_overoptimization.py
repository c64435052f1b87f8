"""The over-optimisation study's pieces (rlhf_scratch/studies/overoptimization.py) against numbers
worked out by hand: KL of best-of-n, the exact best-of-n expectation, Gao et al.'s fits and their
peaks; its per-phase evaluation hook; and its command line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rlhf_scratch import registry
from rlhf_scratch.studies.overoptimization import best_of_n_expectation, fit_gao, kl_bon, main


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
                 "--bon-max", "--rm-epochs", "--gen-len", "--batch-size", "--base-lr", "--seed", "--threads", "--jobs",
                 "--report"):
        assert flag in text, f"the documented {flag} is gone"
    assert "(default: 250,1000,4000)" in text and "(default: 30)" in text
    assert main([]) == 2
    assert capsys.readouterr().err.strip() == "error: out: required (the study folder)"


def _fake_evaluation(calls):
    """evaluate_policy's stand-in: records which model it evaluated; 3 prompts × 2 samples."""
    def evaluate(lm, ref, prompts, proxy_fn, gen_len, per_prompt):
        calls.append(lm)
        samples = [{"prompt": p, "completion": f"c{i}", "gold": 0.5, "proxy": 1.0} for p in prompts for i in range(per_prompt)]
        return {"study/gold": 0.5, "study/proxy": 1.0, "study/kl": 0.25, "study/d": 0.5}, samples
    return evaluate


def test_the_evaluation_hook_scores_the_reference_only_when_a_run_starts(tmp_path, monkeypatch, tiny_random_lm):
    """phase 0 (the reference) is evaluated by `start` for a new run and never on resume (a resumed
    run must draw no random numbers the interrupted one did not); every phase after is logged; and
    what is evaluated is the LM inside the policy, PPO's value head or not."""
    from types import SimpleNamespace

    from rlhf_scratch.loop import PhaseHook
    from rlhf_scratch.model import TransformerWithValueHead
    from rlhf_scratch.studies import overoptimization_run as study

    calls = []
    monkeypatch.setattr(study, "evaluate_policy", _fake_evaluation(calls))
    hook = object.__new__(study.HeldOutEvaluation)  # its models are not needed here
    hook.trainer = SimpleNamespace(policy=TransformerWithValueHead(tiny_random_lm), args=SimpleNamespace(gen_len=4))
    hook.prompts, hook.per_prompt, hook.ref, hook.proxy_fn = ["a", "b", "c"], 2, None, None
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


@pytest.mark.slow
def test_a_small_study_runs_end_to_end_and_continues(tmp_path, monkeypatch, capsys):
    """The whole pipeline at toy size, two processes at a time: gold pairs → two proxies →
    best-of-n → an RL run per proxy (each its own process) → table, figure, page. Run again, it
    trains nothing more; `--report` rebuilds the table from the runs."""
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
    assert {"pairs_s", "rm-10_s", "rm-12_s", "bon_s", "rloo-rm10_s", "rloo-rm12_s"} <= set(table["times_s"])
    times = json.loads((out / "times.json").read_text())
    assert set(times) == {"pairs", "rm-10", "rm-12", "bon", "rloo-rm10", "rloo-rm12", "study_wall"}
    assert times["rloo-rm10"]["peak_mib"] > 100 and times["rloo-rm10"]["setting"] == ["rm", 10]
    run = out / "runs" / "rloo-rm10"
    assert [json.loads(x)["phase"] for x in (run / "study_samples.jsonl").read_text().splitlines()] == [0, 1]
    assert "study/gold" in json.loads((run / "metrics.jsonl").read_text())
    assert (out / "overoptimization.png").is_file() and "best-of-n" in (out / "index.html").read_text()
    assert main(argv) == 0, "a finished study runs again without training"
    again = json.loads((out / "times.json").read_text())
    assert {k: v for k, v in again.items() if k != "study_wall"} == {k: v for k, v in times.items() if k != "study_wall"}
    assert main([*argv, "--report"]) == 0
    assert "| RLOO | 10 |" in (out / "table.md").read_text()
    assert main([*argv[:-2], "--jobs", "1", "--rm-pairs", "10"]) == 2, "a different plan"
    assert "holds a different study (rm_pairs 10,12 there, 10 here)" in capsys.readouterr().err
