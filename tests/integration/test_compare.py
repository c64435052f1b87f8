"""`python -m rlhf_scratch.compare` (rlhf_scratch/studies/compare.py) and `interp.across_runs`."""

import json
import re

import pytest
import torch

from interp.across_runs import (
    InsideChange,
    chance_jaccard,
    change_similarity,
    cosine_matrix,
    feature_overlap,
    inside_changes,
    jaccard_matrix,
    shared_top_features,
    top_k_features,
)
from interp.toy import perturb_head, toy_model, toy_tokenizer
from rlhf_scratch.studies.compare import (
    CompareArgs,
    compare_args,
    comparison_verdict,
    group_stats,
    label,
    main,
    results_table,
)
from rlhf_scratch.studies.runner import Unit, markdown_table

SMALL = ["--", "--batch-size", "8", "--gen-len", "6", "--num-minibatches", "2"]


def change(label, values):
    return InsideChange(label, ["s"], torch.zeros(1), torch.tensor(values, dtype=torch.float32).view(1, -1), 0.0)


def test_change_similarity_by_hand():
    sim = change_similarity([change("a", [1, 0]), change("b", [0, 2]), change("c", [-3, 0]), change("z", [0, 0])])
    assert sim[0, 0].item() == pytest.approx(1.0) and sim[0, 1].item() == pytest.approx(0.0)
    assert sim[0, 2].item() == pytest.approx(-1.0), "opposite changes: −1, whatever their size"
    assert torch.isnan(sim[3]).all(), "a model that changed nothing has no direction"


def test_a_run_compared_with_itself_is_1():
    ref = toy_model(seed=0, tokenizer=toy_tokenizer())
    tuned = perturb_head(ref, 1, 2, scale=3.0)
    changes = inside_changes(ref, {"x": tuned, "same x": tuned}, ["This movie was really", "The plot"])
    sim = change_similarity(changes)
    assert sim[0, 1].item() == pytest.approx(1.0, abs=1e-6)
    assert changes[0].drift[0].item() == pytest.approx(0.0, abs=1e-6), "the embeddings did not change"


# Three runs' feature-change vectors Δa over six SAE features, worked by hand below. Every pair has a
# different cosine and a different top-3 overlap, so a swapped pair or an off-by-one k fails.
A = [3.0, -2.0, 0.0, 1.0, 0.0, 0.0]    # top-3 by |Δa|: {0, 1, 3}
B = [0.0, -4.0, 0.0, 0.5, -1.0, 0.0]   # top-3: {1, 4, 3}
C = [-1.0, 0.0, 0.3, 0.0, 0.0, 2.0]    # top-3: {5, 0, 2}
CHANGES = torch.tensor([A, B, C])


def test_feature_change_cosines_by_hand():
    # |A|² = 9 + 4 + 1 = 14, |B|² = 16 + 0.25 + 1 = 17.25, |C|² = 1 + 0.09 + 4 = 5.09
    # A·B = (−2)(−4) + (1)(0.5) = 8.5;  A·C = (3)(−1) = −3;  B·C = 0
    expected = torch.tensor([[1.0, 8.5 / (14 * 17.25) ** 0.5, -3 / (14 * 5.09) ** 0.5],
                             [8.5 / (14 * 17.25) ** 0.5, 1.0, 0.0],
                             [-3 / (14 * 5.09) ** 0.5, 0.0, 1.0]])  # 0.547, −0.355, 0
    torch.testing.assert_close(cosine_matrix(CHANGES), expected, atol=1e-6, rtol=0)
    sim = cosine_matrix(torch.tensor([A, [0.0] * 6]))
    assert torch.isnan(sim[1]).all() and torch.isnan(sim[:, 1]).all(), "a run that changed nothing has no direction"


def test_top_k_sets_rank_by_size_not_sign_and_their_jaccard_by_hand():
    assert top_k_features(CHANGES, 3).tolist() == [[0, 1, 3], [1, 4, 3], [5, 0, 2]]
    # k = 3: A∩B = {1, 3}, A∪B = {0, 1, 3, 4} -> 2/4;  A∩C = {0}, A∪C = {0, 1, 2, 3, 5} -> 1/5;  B∩C = {} -> 0
    torch.testing.assert_close(jaccard_matrix(CHANGES, 3), torch.tensor([[1.0, 0.5, 0.2], [0.5, 1.0, 0.0], [0.2, 0.0, 1.0]]))
    # k = 4 (ties at 0: the lower index first): A {0, 1, 3, 2}, B {1, 4, 3, 0} -> 3/5, not k = 3's 2/4
    assert jaccard_matrix(CHANGES, 4)[0, 1].item() == pytest.approx(0.6)
    # opposite changes are the same top set (Jaccard 1) but cosine −1: the two measures answer different questions
    flipped = torch.tensor([A, [-v for v in A]])
    assert jaccard_matrix(flipped, 3)[0, 1].item() == 1.0 and cosine_matrix(flipped)[0, 1].item() == pytest.approx(-1.0)


def test_features_in_several_top_lists_by_hand():
    # top-3 sets {0, 1, 3}, {1, 4, 3}, {5, 0, 2}: features 0, 1 and 3 are in two each;
    # mean |Δa| over the runs: F1 (2 + 4 + 0) / 3 = 2, F0 (3 + 0 + 1) / 3 = 4/3, F3 (1 + 0.5 + 0) / 3 = 0.5
    assert shared_top_features(CHANGES, 3) == [(1, 2), (0, 2), (3, 2)]
    assert shared_top_features(CHANGES, 1) == [], "top-1: 0, 1 and 5, all different"


def test_chance_jaccard_by_hand():
    # n = 4, k = 2: the overlap I is 0, 1, 2 with probabilities 1/6, 4/6, 1/6; J = I / (4 − I) = 0, 1/3, 1
    assert chance_jaccard(2, 4) == pytest.approx(4 / 6 * 1 / 3 + 1 / 6 * 1)  # 7/18
    assert chance_jaccard(1, 3) == pytest.approx(1 / 3), "one pick each: equal with probability 1/3"
    assert chance_jaccard(5, 5) == 1.0, "k = n: both sets are everything"
    with pytest.raises(ValueError, match="0 < k <= n"):
        chance_jaccard(6, 5)


def test_feature_overlap_drops_a_k_beyond_the_live_features():
    alive = torch.tensor([True, True, True, True, False, True])  # 5 live features
    overlap = feature_overlap(["a", "b", "c"], CHANGES, alive, ks=(3, 6))
    assert list(overlap.jaccard) == [3] and overlap.n_alive == 5
    assert overlap.chance[3] == pytest.approx(chance_jaccard(3, 5))
    assert overlap.cosine[0, 2].item() == pytest.approx(-3 / (14 * 5.09) ** 0.5)


def test_plan_and_names():
    units = CompareArgs(task="sentiment", algos="ppo,rloo", seeds="0,1", kl_coefs="0.1").units()
    assert [u.name for u in units] == ["ppo-s0-b0.1", "ppo-s1-b0.1", "rloo-s0-b0.1", "rloo-s1-b0.1"]
    assert [label(u) for u in units[1:3]] == ["PPO β=0.1", "RLOO β=0.1"], "seeds share a curve, algorithms do not"
    assert Unit("online_dpo", 3).name == "online_dpo-s3" and label(Unit("online_dpo", 3)) == "Online DPO"


def test_the_default_algorithms_and_each_runs_command_come_from_the_registry(tmp_path):
    from rlhf_scratch.config import registry
    from rlhf_scratch.studies.compare import train_command

    assert CompareArgs(task="sentiment").algo_names() == [a for a in registry.names() if registry.get(a).compared_by_default]
    cmd = train_command(Unit("grpo", 2, ("b", 0.25)), "sentiment", tmp_path / "run", ["--total-phases", "3"])
    assert cmd[3:] == ["sentiment", "--algo", "grpo", "--seed", "2", "--run-dir", str(tmp_path / "run"),
                       "--total-phases", "3", *registry.get("grpo").study_flags, "--beta", "0.25"]
    assert "--measure-kl" in cmd, "GRPO's study flag: its β = 0 runs would log no KL"
    assert "--beta" not in train_command(Unit("ppo", 1), "vader", tmp_path / "run", []), "unswept: the algorithm's own β"


def test_a_top_k_sweep_is_a_setting_of_every_run(tmp_path):
    """--top-ks is a setting like --kl-coefs: a run per (algorithm, top-k, seed), `k` in its name, `--top-k`
    in its command, `top-k=` in its label; one sweep at a time, and a plan without it stays the plan it was."""
    from rlhf_scratch.studies.compare import train_command

    args = CompareArgs(task="sentiment", algos="ppo", seeds="1,2", top_ks="0,10")
    units = args.units()
    assert [u.name for u in units] == ["ppo-s1-k0", "ppo-s2-k0", "ppo-s1-k10", "ppo-s2-k10"]
    assert [label(u) for u in units[1:3]] == ["PPO top-k=0", "PPO top-k=10"]
    assert train_command(units[2], "sentiment", tmp_path / "r", [])[-2:] == ["--top-k", "10"]
    assert args.plan()["top_ks"] == [0, 10] and "top_ks" not in CompareArgs(task="sentiment").plan()


def test_the_kl_verdict_names_the_lowest_kl_only_when_resolved():
    from rlhf_scratch.studies.compare import kl_verdict

    v = kl_verdict(RESULTS, UNITS)  # RLOO's KL 0.03, 0.04, 0.05 against PPO's 0.30, 0.36, 0.33
    assert v.resolved and v.best == "RLOO" and v.sentence.startswith("RLOO reaches the lowest KL (last 10 of 10 phases), "
                                                                     "0.040 ± 0.025: below PPO (0.330 ± 0.075) by -0.290")


@pytest.mark.parametrize("argv, message", [
    (["sentiment", "--algos", "ppo,sac"], "algos: unknown sac"),
    (["sentiment", "--top-ks", "0,-1"], "top_ks: must be >= 0"),
    (["sentiment", "--top-ks", "0,10", "--kl-coefs", "0.1"], "top_ks: one sweep at a time"),
    (["sentiment", "--kl-coefs", "0.1,x"], "kl_coefs: expected a comma-separated list"),
    (["sentiment", "--seeds", ""], "seeds: empty list"),
    (["sentiment", "--seeds", "1,2,1"], "seeds: each seed once; got 1,2,1"),
])
def test_bad_input_is_one_line(argv, message, tmp_path, capsys):
    assert main([*argv, "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {message}")
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("flags, message", [
    (["--features-d-sae", "0"], "features_d_sae: must be >= 1"),
    (["--features-layer", "-1"], "features_layer: must be >= 0"),
    (["--features-d-sae", "8"], "features_d_sae: must be >= the SAE's k = 16"),
    (["--features-eval-batches", "0"], "features_eval_batches: must be >= 1"),
    (["--features-dictionary", "gated"], "features_dictionary: unknown gated; choose from batchtopk, matryoshka_batchtopk"),
    (["--features-cc-k", "2000"], "features_cc_k: must be in (0, features_cc_latents = 1024]; got 2000"),
    (["--features-cc-latents", "0"], "features_cc_latents: must be >= 1"),
])
def test_bad_features_flags_are_one_line_before_any_run(flags, message, tmp_path, capsys):
    assert main(["sentiment", "--features", *flags, "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {message}"), err
    assert not (tmp_path / "c").exists()


def test_features_crosscoder_without_features_is_one_line(tmp_path, capsys):
    assert main(["sentiment", "--features-crosscoder", "--out", str(tmp_path / "c")]) == 2
    assert capsys.readouterr().err.strip() == "error: features_crosscoder: needs --features"


def test_the_dictionary_and_crosscoder_flags_reach_each_runs_features_command(tmp_path):
    """What compare hands `python -m interp.features` for each run, parsed by that command's own parser
    (its features.json then records them: sae.settings.architecture, crosscoder.settings — pinned in
    test_interp_features' end-to-end test)."""
    from interp.features import parse_args
    from rlhf_scratch.studies.compare_features import run_pages_argv

    args = compare_args(["sentiment", "--features", "--features-dictionary", "standard", "--features-crosscoder",
                         "--features-cc-latents", "32", "--features-cc-k", "4", "--features-cc-tokens", "4096",
                         "--features-d-sae", "64", "--features-tokens", "4096", "--features-layer", "1",
                         "--features-top", "3", "--features-eval-batches", "2", "--threads", "2"])
    for run in (tmp_path / "runs" / "ppo-s1", tmp_path):  # the command checks it is given a run folder
        run.mkdir(parents=True, exist_ok=True)
        (run / "config.json").write_text("{}")
    got = parse_args(run_pages_argv(args, tmp_path / "runs" / "ppo-s1"))
    assert got.run_dir == str(tmp_path / "runs" / "ppo-s1")
    assert (got.dictionary, got.crosscoder, got.cc_latents, got.cc_k, got.cc_tokens) == ("standard", True, 32, 4, 4096)
    assert (got.d_sae, got.training_tokens, got.layer, got.top_n, got.eval_batches, got.threads) == (64, 4096, 1, 3, 2, 2)
    assert got.cache_dir is None, "the comparison's SAE cache: each run's page loads the view's SAE"
    default = parse_args(run_pages_argv(compare_args(["sentiment", "--features"]), tmp_path))
    assert (default.dictionary, default.crosscoder, default.layer) == ("batchtopk", False, None)


def test_a_runs_failed_features_page_is_one_line_naming_the_run(monkeypatch, tmp_path):
    from interp import features
    from rlhf_scratch.config import ConfigError
    from rlhf_scratch.studies.compare_features import run_pages

    calls = []
    monkeypatch.setattr(features, "main", lambda argv: calls.append(argv) or 2)
    args = compare_args(["sentiment", "--features", "--features-crosscoder"])
    with pytest.raises(ConfigError, match=r"^features_crosscoder: the features page of rloo-s1 failed \(its error above\)$"):
        run_pages(args, {"rloo-s1": tmp_path / "rloo-s1", "ppo-s1": tmp_path / "ppo-s1"})
    assert len(calls) == 1 and "--crosscoder" in calls[0], "stops at the first failed run"


def test_features_without_sae_lens_names_the_extra(monkeypatch, tmp_path, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "sae_lens", None)  # import sae_lens -> ImportError
    assert main(["sentiment", "--features", "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "[sae]" in err


def test_an_existing_folder_is_never_taken_over(tmp_path, capsys):
    (tmp_path / "mine.txt").write_text("keep")
    assert main(["sentiment", "--out", str(tmp_path)]) == 2
    assert "not a comparison folder" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


@pytest.mark.slow
def test_comparison_writes_every_file_and_does_not_redo_finished_runs(tmp_path, capsys, monkeypatch):
    """Then the same command with --features adds the SAE-features view (a small SAE, cached in
    tmp_path) to the finished comparison without retraining a run."""
    from interp import features

    monkeypatch.setattr(features, "default_cache_root", lambda: tmp_path / "saes")
    out = tmp_path / "cmp"
    argv = ["sentiment", "--algos", "ppo,rloo", "--total-phases", "2", "--out", str(out), *SMALL]
    assert main(argv) == 0
    for name in ("reward_vs_phase.png", "frontier.png", "heldout.png", "inside.png", "table.md", "table.json",
                 "index.html", "compare.json", "results.json"):
        assert (out / name).is_file(), name
    table = json.loads((out / "table.json").read_text())
    assert set(table["runs"]) == {"ppo-s1", "rloo-s1"}
    row = table["runs"]["ppo-s1"]
    assert row["peak_mib"] > 100 and row["wall_s"] > 0 and "eval/vader_final" in row
    assert table["inside"]["dla_change_cosine"][0][0] == pytest.approx(1.0)
    html = (out / "index.html").read_text()
    assert html.count("data:image/png;base64,") == 4 and "Last samples" in html
    metrics = out / "runs" / "ppo-s1" / "metrics.jsonl"
    before = (metrics.stat().st_mtime_ns, (out / "results.json").read_text())
    # again, with the features view: both runs finished, nothing is retrained
    small_sae = ["--features", "--features-d-sae", "64", "--features-tokens", "4096", "--features-eval-batches", "1",
                 "--features-layer", "1", "--features-top", "5"]
    cut = argv.index("--")
    capsys.readouterr()
    assert main([*argv[:cut], *small_sae, *argv[cut:]]) == 0
    assert (metrics.stat().st_mtime_ns, (out / "results.json").read_text()) == before
    assert "trained and cached" in capsys.readouterr().err
    f = json.loads((out / "table.json").read_text())["features"]
    assert f["labels"] == ["ppo-s1", "rloo-s1"] and f["site"] == "blocks.1.hook_resid_post" and f["dictionary"] == "batchtopk"
    assert f["cosine"][0][0] == pytest.approx(1.0) and f["jaccard"]["10"][1][1] == 1.0
    assert len(f["top"]["rloo-s1"]) == 5 and set(f["chance_jaccard"]) <= {"10", "50"}
    html = (out / "index.html").read_text()
    assert "Do the algorithms move the same features?" in html and html.count("data:image/png;base64,") == 5
    assert main([*argv[:cut], *small_sae, "--features-layer", "7", *argv[cut:]]) == 2, "a layer the model lacks"
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: features_layer: must be in 0..3; got 7") and "again" not in err[-1]
    changed = [a if a != "ppo,rloo" else "ppo" for a in argv]
    assert main(changed) == 2, "a different plan in the same folder is refused"
    assert "holds a different comparison (algos ppo,rloo there, ppo here)" in capsys.readouterr().err


def test_table_shows_held_out_scores_from_phase_1_to_the_end():
    row = {"reward_start": 0.5, "reward_final": 0.91, "kl_final": 0.25, "eval/vader_start": 0.6, "eval/vader_final": 0.55,
           "wall_s": 12.4, "peak_mib": 1234.5, "tokens_per_s": 100.0}
    table = markdown_table(*results_table({"ppo-s1": {"phases": 5, "averaged": 5, **row}}, [Unit("ppo", 1)])).splitlines()
    assert table[0].startswith("| run | n | reward, phase 1 | reward, last 5 of 5 phases | KL, last 5 of 5 phases | "
                               "VADER (held out) |"), "says what was averaged: a 5-phase run has no last 10"
    assert table[2] == "| PPO | 1 | 0.500 | 0.910 | 0.250 | 0.600 → 0.550 |  |  | 12 | 1,234 | 100 |", \
        "one seed: its values, no ±"


def _row(reward_final: float, kl_final: float, vader_final: float = 0.7) -> dict:
    return {"phases": 10, "averaged": 10, "reward_start": 0.5, "reward_final": reward_final, "kl_final": kl_final,
            "eval/vader_start": 0.6, "eval/vader_final": vader_final, "wall_s": 100.0, "peak_mib": 900.0,
            "tokens_per_s": 1000.0}


# Two algorithms × three seeds. PPO's final reward 0.90, 0.92, 0.91 (0.910 ± 4.303 · 0.01/√3 = ± 0.025);
# RLOO's 0.80, 0.85, 0.83 (s = 0.0252: ± 0.063); per seed PPO − RLOO = 0.10, 0.07, 0.08: +0.083 ± 0.038.
RESULTS = {"ppo-s1": _row(0.90, 0.30), "ppo-s2": _row(0.92, 0.36), "ppo-s3": _row(0.91, 0.33),
           "rloo-s1": _row(0.80, 0.03, 0.8), "rloo-s2": _row(0.85, 0.04, 0.8), "rloo-s3": _row(0.83, 0.05, 0.8)}
UNITS = CompareArgs(task="sentiment", algos="ppo,rloo", seeds="1,2,3").units()


def test_a_table_row_is_an_algorithm_over_its_seeds_with_mean_interval_and_n():
    header, rows = results_table(RESULTS, UNITS)
    assert header[:4] == ["run", "n", "reward, phase 1", "reward, last 10 of 10 phases"]
    assert [r[:5] for r in rows] == [["PPO", "3", "0.500 ± 0.000", "0.910 ± 0.025", "0.330 ± 0.075"],
                                     ["RLOO", "3", "0.500 ± 0.000", "0.827 ± 0.063", "0.040 ± 0.025"]]
    assert rows[1][5] == "0.600 → 0.800 ± 0.000", "held out: the start's mean → the final's mean ± interval"
    groups = group_stats(RESULTS, UNITS)
    assert groups["PPO"]["n"] == 3 and groups["PPO"]["seeds"] == [1, 2, 3]
    ppo = groups["PPO"]["reward_final"]
    assert ppo["mean"] == pytest.approx(0.91) and ppo["half_width"] == pytest.approx(4.3027 * 0.01 / 3**0.5, abs=1e-4)
    assert ppo["values"] == [0.90, 0.92, 0.91] and ppo["low"] < 0.91 < ppo["high"]
    partial = results_table({k: v for k, v in RESULTS.items() if k != "rloo-s3"}, UNITS)[1]
    assert partial[1][1] == "2", "n counts the seeds that finished"


def test_the_verdict_names_the_algorithm_with_the_higher_reward_and_its_kl_only_when_resolved():
    v = comparison_verdict(RESULTS, UNITS)
    assert v.resolved and v.best == "PPO"
    assert v.sentence.startswith("PPO reaches the highest proxy reward (last 10 of 10 phases), 0.910 ± 0.025 at KL "
                                 "0.330 ± 0.075: above RLOO (0.827 ± 0.063 at KL 0.040 ± 0.025) by +0.083")
    noisy = {**RESULTS, "ppo-s2": _row(0.82, 0.36)}  # PPO − RLOO: 0.10, −0.03, 0.08
    v = comparison_verdict(noisy, UNITS)
    assert not v.resolved and "is not resolved at n = 3 seeds (interval width 0.348)" in v.sentence
    one_seed = {k: v for k, v in RESULTS.items() if k.endswith("s1")}
    assert "not resolved at n = 1 seed" in comparison_verdict(one_seed, UNITS).sentence


def test_quick_is_tiny_and_the_flags_given_still_win():
    args = compare_args(["sentiment", "--quick", "--seeds", "1,2"])
    assert (args.total_phases, args.interp, args.seed_list()) == (3, False, [1, 2])
    assert args.run_flags()[4:] == ["--batch-size", "8", "--gen-len", "6", "--num-minibatches", "2", "--warmup-steps", "1"]
    args = compare_args(["sentiment", "--quick", "--total-phases", "5", "--interp", "--", "--gen-len", "9"])
    assert args.total_phases == 5 and args.interp
    assert args.run_flags()[-2:] == ["--gen-len", "9"], "after the quick flags: train takes the last --gen-len"
    assert compare_args(["sentiment"]).total_phases == 100, "the default stays the full comparison"


@pytest.mark.slow
def test_an_interrupted_comparison_continues_the_interrupted_run(tmp_path, monkeypatch):
    """Ctrl-C reaches the training run after its first phase; the same command again resumes that run
    from its checkpoint (`train --resume`): the phases already done are kept, not retrained."""
    import signal
    import subprocess
    import threading
    import time

    from rlhf_scratch.engine.runs import read_status
    from rlhf_scratch.studies import runner

    out = tmp_path / "cmp"
    argv = ["sentiment", "--algos", "rloo", "--total-phases", "12", "--no-interp", "--out", str(out), *SMALL]
    metrics = out / "runs" / "rloo-s1" / "metrics.jsonl"
    real_popen, commands = subprocess.Popen, []

    def popen_then_ctrl_c(cmd, **kwargs):
        commands.append(cmd)
        proc = real_popen(cmd, **kwargs)
        if len(commands) > 1:
            return proc

        def after_first_phase():
            while proc.poll() is None and not (metrics.is_file() and metrics.read_text().count("\n") >= 1):
                time.sleep(0.01)
            proc.send_signal(signal.SIGINT)

        threading.Thread(target=after_first_phase, daemon=True).start()
        return proc

    monkeypatch.setattr(runner.subprocess, "Popen", popen_then_ctrl_c)
    assert main(argv) == 1, "the interrupted run stops the comparison, which says how to continue"
    status = read_status(out / "runs" / "rloo-s1")
    assert status["status"] == "interrupted" and 1 <= status["phase"] < 12
    done = metrics.read_text().splitlines()
    assert main(argv) == 0
    assert commands[0][3:5] == ["sentiment", "--algo"] and commands[1][3:] == ["--resume", str(out / "runs" / "rloo-s1")]
    lines = metrics.read_text().splitlines()
    assert lines[: len(done)] == done, "the phases done before Ctrl-C are kept"
    assert [json.loads(line)["phase"] for line in lines] == list(range(1, 13))
    assert read_status(out / "runs" / "rloo-s1")["status"] == "finished"
    assert "rloo-s1" in json.loads((out / "results.json").read_text())


def test_help_shows_every_flag_with_its_default(capsys):
    assert main(["--help"]) == 0
    text = re.sub(r",\s+", ",", " ".join(capsys.readouterr().out.replace("│", " ").split()))  # boxes and wraps folded
    for default in ("(default: 100)", "(default: 1)", "(default: ppo,rloo,online_dpo)", "(default: 1024)"):
        assert default in text, default
    for flag in ("--algos", "--seeds", "--kl-coefs", "--top-ks", "--total-phases", "--prompts", "--threads", "--jobs", "--out",
                 "--no-interp", "--quick", "--features", "--features-layer", "--features-d-sae", "--features-tokens",
                 "--features-eval-batches", "--features-top", "--features-dictionary", "--features-crosscoder",
                 "--features-cc-latents", "--features-cc-k", "--features-cc-tokens"):
        assert flag in text, f"the documented {flag} is gone"


def test_flags_after_the_double_dash_go_to_every_run_and_into_the_plan():
    from rlhf_scratch.studies.runner import parse_study

    args = parse_study(CompareArgs, ["vader", "--prompts", "rt", "--total-phases", "7"], prog="p", description="",
                       default=CompareArgs(task="", train_flags=("--gen-len", "40")))
    assert args.run_flags() == ["--total-phases", "7", "--threads", "1", "--prompts", "rt", "--gen-len", "40"]
    assert args.plan() == {"task": "vader", "algos": ["ppo", "rloo", "online_dpo"], "seeds": [1], "kl_coefs": None,
                           "train_flags": args.run_flags()}
    assert args.interp and not parse_study(CompareArgs, ["vader", "--no-interp"], prog="p", description="",
                                           default=CompareArgs(task="")).interp


def test_grpo_is_compared_with_its_kl_measured(tmp_path):
    """GRPO's default β = 0 logs a NaN KL; a comparison runs it with --measure-kl, so it has a frontier point."""
    import math

    out = tmp_path / "cmp"
    argv = ["sentiment", "--algos", "grpo", "--total-phases", "2", "--no-interp", "--out", str(out), *SMALL]
    assert main(argv) == 0
    assert json.loads((out / "runs" / "grpo-s1" / "config.json").read_text())["measure_kl"] is True
    row = json.loads((out / "table.json").read_text())["runs"]["grpo-s1"]
    assert math.isfinite(row["kl_final"]), "no KL: the run was not given --measure-kl"
    assert "<h1>GRPO</h1>" in (out / "index.html").read_text()


@pytest.mark.slow
def test_the_quick_top_k_study_reports_reward_and_kl_over_seeds(tmp_path):
    """The top-k lesson as a quick comparison: PPO at top-k 0 and 10 over two seeds, each run sampling
    with its own k, a row each with n = 2, and the page opening with the reward and the KL verdicts."""
    out = tmp_path / "topk"
    assert main(["sentiment", "--quick", "--algos", "ppo", "--top-ks", "0,10", "--seeds", "1,2", "--out", str(out)]) == 0
    data = json.loads((out / "table.json").read_text())
    assert sorted(data["runs"]) == ["ppo-s1-k0", "ppo-s1-k10", "ppo-s2-k0", "ppo-s2-k10"]
    assert json.loads((out / "runs" / "ppo-s2-k0" / "config.json").read_text())["top_k"] == 0
    assert json.loads((out / "runs" / "ppo-s2-k10" / "config.json").read_text())["top_k"] == 10
    for name in ("PPO top-k=0", "PPO top-k=10"):
        group = data["groups"][name]
        assert group["n"] == 2 and {"mean", "low", "high"} <= set(group["reward_final"]) | set(group["kl_final"])
    html = (out / "index.html").read_text()
    assert html.index(data["verdict"][:30]) < html.index(data["verdict_kl"][:30]) < html.index("<table>")
    assert "KL" in data["verdict_kl"] and "| PPO top-k=10 | 2 |" in (out / "table.md").read_text()


@pytest.mark.slow
def test_a_quick_comparison_over_seeds_grows_by_a_seed_without_retraining(tmp_path):
    """--quick over two seeds: the table has a row per algorithm with n = 2 and intervals, the page
    opens with the verdict. The same command with --seeds 1,2,3 trains only the two seed-3 runs."""
    out = tmp_path / "cmp"
    argv = ["sentiment", "--quick", "--algos", "rloo,grpo", "--out", str(out)]
    assert main([*argv, "--seeds", "1,2"]) == 0
    before = json.loads((out / "results.json").read_text())
    assert sorted(before) == ["grpo-s1", "grpo-s2", "rloo-s1", "rloo-s2"]
    table = (out / "table.md").read_text()
    assert "| run | n |" in table and "| RLOO | 2 |" in table and " ± " in table
    data = json.loads((out / "table.json").read_text())
    assert data["groups"]["GRPO"]["n"] == 2 and {"mean", "low", "high", "n"} <= set(data["groups"]["GRPO"]["kl_final"])
    html = (out / "index.html").read_text()
    assert data["verdict"].startswith(("Which has the highest proxy reward", "RLOO reaches", "GRPO reaches"))
    assert html.index(data["verdict"][:40]) < html.index("<table>"), "the page opens with its verdict"
    assert main([*argv, "--seeds", "1,2,3"]) == 0
    after = json.loads((out / "results.json").read_text())
    assert sorted(after) == sorted([*before, "grpo-s3", "rloo-s3"])
    assert {k: after[k] for k in before} == before, "the finished runs were not trained again"
    assert json.loads((out / "compare.json").read_text())["seeds"] == [1, 2, 3]
    assert json.loads((out / "table.json").read_text())["groups"]["RLOO"]["n"] == 3
    assert main([*argv, "--seeds", "1,2"]) == 2, "fewer seeds: a different plan"
