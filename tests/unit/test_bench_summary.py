"""benchmarks/bench_trl.py: the summary's arithmetic on hand numbers, who is compared with whom, and
the TRL side's reward being our reward (the benchmark's "equal work")."""

import importlib.util
import statistics
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_trl.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_trl", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker_result(bench, round_times, *, peak_mib, flops, first_round, wall_s, rss):
    """One worker's output as the parent keeps it: every part of a round is round_s / 9."""
    rounds = [{"round_s": t, **{p: t / 9 for p in bench.PARTS}} for t in round_times]
    return {"rounds": rounds, "flops": flops, "peak_mib": peak_mib,
            "marks": {"imports": 1.0, "trainer_init": 2.0, "first_round": first_round, "train_end": wall_s - 0.5},
            "process": {"wall_s": wall_s, "peak_rss_mib": rss, "rounds_run": 6}}


def test_paired_ratios_divide_repeat_by_repeat_then_take_min_and_median(bench):
    # ratios 0.5, 0.75, 1.0 — not min(values) / min(baseline) = 2/4, nor the ratio of medians 3/4
    assert bench.paired_ratios([2.0, 3.0, 5.0], [4.0, 4.0, 5.0]) == {"min": 0.5, "median": 0.75}
    with pytest.raises(ValueError, match="2 values against 1"):
        bench.paired_ratios([1.0, 2.0], [1.0])


def test_startup_parts_cut_the_process_wall_at_its_marks(bench):
    marks = {"imports": 3.0, "trainer_init": 4.5, "first_round": 5.0, "train_end": 17.0}
    parts = bench.startup_parts(marks, wall_s=18.25)
    assert parts == {"imports": 3.0, "trainer_init": 1.5, "to_first_round": 0.5, "startup": 5.0,
                     "training": 12.0, "after_training": 1.25}
    # the pieces add up to the wall: nothing counted twice, nothing dropped
    assert parts["startup"] + parts["training"] + parts["after_training"] == 18.25


def test_every_ours_system_is_paired_with_a_trl_trainer(bench):
    assert set(bench.PAIRS) == set(bench.OURS)
    assert set(bench.PAIRS.values()) <= set(bench.TRL)
    assert bench.PAIRS["ours-grpo"] == "trl-grpo"  # GRPO is compared with GRPO, not with RLOO
    assert set(bench.HELP_COMMANDS) <= set(bench.SYSTEMS)


def test_summary_on_hand_numbers(bench):
    results = {
        # two repeats each; ours' worker medians 2.0 and 1.5, TRL's 4.0 and 2.0
        "ours-grpo": [worker_result(bench, [1.0, 2.0, 3.0], peak_mib=800, flops=3e9, first_round=2.5, wall_s=9.0, rss=900),
                      worker_result(bench, [1.5, 1.5], peak_mib=820, flops=3e9, first_round=3.0, wall_s=10.0, rss=1000)],
        "trl-grpo": [worker_result(bench, [4.0], peak_mib=1000, flops=2e9, first_round=5.0, wall_s=18.0, rss=1200),
                     worker_result(bench, [2.0, 2.0], peak_mib=1000, flops=2e9, first_round=3.0, wall_s=10.0, rss=1000)],
        "ours-rloo": [worker_result(bench, [1.0], peak_mib=700, flops=None, first_round=2.0, wall_s=8.0, rss=700)] * 2,
    }
    peak = 1e10
    s = bench.summarise(results, peak)
    ours = s["ours-grpo"]
    assert ours["compared_with"] == "trl-grpo"
    assert ours["round_s"] == {"min": 1.5, "median": 1.75}
    assert ours["round_ratio"] == {"min": 0.5, "median": 0.625}  # 2.0/4.0 and 1.5/2.0
    assert ours["parts_s"]["generation"] == pytest.approx(statistics.median([2.0 / 9, 1.5 / 9]))
    assert ours["tokens_per_s"] == pytest.approx(64 * 30 / 1.75)
    assert ours["memory_ratio"] == pytest.approx(810 / 1000)
    assert ours["gflop_per_round"] == pytest.approx(3.0)
    assert ours["utilisation"] == pytest.approx(3e9 / 1.75 / peak)

    proc = ours["process"]
    assert proc["wall_s"] == {"min": 9.0, "median": 9.5}
    assert proc["wall_ratio"] == {"min": 0.5, "median": 0.75}  # 9/18 and 10/10
    assert proc["startup_s"] == {"min": 2.5, "median": 2.75}
    assert proc["startup_ratio"] == {"min": 0.5, "median": 0.75}  # 2.5/5 and 3/3
    assert proc["rss_ratio"] == pytest.approx(950 / 1100)
    assert proc["parts_s"]["training"] == pytest.approx(statistics.median([9.0 - 0.5 - 2.5, 10.0 - 0.5 - 3.0]))

    # TRL's own column is the baseline; a system whose baseline was not run has no ratio, not a wrong one
    assert s["trl-grpo"]["compared_with"] is None and s["trl-grpo"]["round_ratio"] is None
    assert s["ours-rloo"]["compared_with"] is None  # trl-rloo was not among the systems
    assert s["ours-rloo"]["round_ratio"] is None and s["ours-rloo"]["process"]["wall_ratio"] is None
    assert s["ours-rloo"]["gflop_per_round"] is None  # no FLOP-counted round (--whole)


def test_whole_runs_exactly_n_rounds_one_of_them_warm_up(bench):
    opts = bench.parse_options(["--whole", "6", "--warmup", "3", "--rounds", "9"])
    assert (opts.warmup, opts.rounds, opts.flops) == (1, 5, False)
    assert bench.parse_options([]).flops  # the default run still counts FLOPs
    with pytest.raises(SystemExit):
        bench.parse_options(["--whole", "1"])


def test_trl_side_reward_is_our_sentiment_reward(bench):
    """The TRL worker builds the tiny classifier's reward from transformers alone (no TransformerLens
    import on TRL's side); it must score exactly as rewards.SentimentReward("tiny") does."""
    from rlhf_scratch.models.loading import TINY_LM_DIR, TINY_REWARD_DIR, asset_path
    from rlhf_scratch.reward.functions import SentimentReward

    assert bench.asset_folder("tiny_reward") == asset_path(TINY_REWARD_DIR)
    assert bench.asset_folder("tiny_lm") == asset_path(TINY_LM_DIR)
    prompts = ["This movie was really"] * 3
    completions = [" good and fun.", " awful, boring and far too long", ""]
    theirs = bench.tiny_sentiment_reward("cpu")(prompts=prompts, completions=completions)
    ours = SentimentReward("tiny", "pos")([p + c for p, c in zip(prompts, completions)]).tolist()
    assert theirs == pytest.approx(ours, abs=1e-6)
