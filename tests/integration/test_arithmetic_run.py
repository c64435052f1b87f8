"""The arithmetic task end to end (issue 56): every algorithm trains on it with the shipped model, the
parquet `rlhf data arithmetic` writes trains exactly as the built-in problems do, the validation is in
metrics.jsonl and validation.jsonl (phase 0 the model before training) and leaves the run's samples as
they were, and `rlhf pretrain-arithmetic` builds a model folder the task loads."""

import json

import pytest

from rlhf_scratch.commands.main import main as rlhf
from rlhf_scratch.commands.train import main as train
from rlhf_scratch.engine.loop import without_timings
from rlhf_scratch.engine.runs import read_metrics

SHORT = ["--total-phases", "3", "--batch-size", "8", "--num-minibatches", "2", "--warmup-steps", "1", "--threads", "1",
         "--table-every", "100", "--plot-every", "100"]
VALIDATE = ["--test-freq", "2", "--val-size", "12", "--val-n", "4"]


def validation_lines(run_dir):
    return [json.loads(line) for line in (run_dir / "validation.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("algo, extra", [("grpo", ["--num-generations", "4"]), ("rloo", ["--num-generations", "2"]),
                                         ("ppo", []), ("online_dpo", [])])
def test_every_algorithm_trains_on_arithmetic_and_validates(algo, extra, tmp_path, one_thread):
    run_dir = tmp_path / algo
    assert train(["arithmetic", "--algo", algo, *SHORT, *VALIDATE, *extra, "--run-dir", str(run_dir)]) == 0
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["model"], config["prompts"], config["val_prompts"], config["gen_len"]) == (
        "arithmetic", "arithmetic", "arithmetic:test", 6)
    assert config["rewarded_by"]["reward"] == "task arithmetic"
    metrics = read_metrics(run_dir)
    assert [("eval/pass@1" in m) for m in metrics] == [False, True, True]  # every 2 phases, and after the last
    lines = validation_lines(run_dir)
    assert [line["phase"] for line in lines] == [0, 2, 3]
    assert lines[1] == {"phase": 2, **{k: metrics[1][k] for k in lines[1] if k != "phase"}}  # the same numbers in both files
    for line in lines:
        assert line["eval/problems"] == 12 and line["eval/samples_per_problem"] == 4
        assert 0 <= line["eval/pass@1"] <= line["eval/pass@4"] <= 1
        assert {"eval/pass@1/op=+", "eval/pass@1/op=-", "eval/pass@1/digits=2"} <= set(line)
    assert all(0 <= m["rewards/mean"] <= 1 for m in metrics)
    # TRL's per-function name: the reward is accuracy_reward alone, so its mean is the reward's
    assert all(m["rewards/accuracy_reward/mean"] == pytest.approx(m["rewards/mean"]) for m in metrics)
    assert all("rewards/format_reward/mean" not in m for m in metrics)


def test_the_validation_leaves_the_runs_samples_as_they_were(tmp_path, one_thread):
    """The same run with and without validation: every training number equal (the validation draws from a
    stream of its own), and the validation of the same phase of two runs of a seed equal too."""
    runs = {}
    for name, flags in (("with", VALIDATE), ("without", ["--val-prompts", ""]), ("again", VALIDATE)):
        runs[name] = tmp_path / name
        assert train(["arithmetic", "--algo", "grpo", "--num-generations", "4", *SHORT, *flags, "--run-dir", str(runs[name])]) == 0
    trained = {name: [{k: v for k, v in without_timings(m).items() if not k.startswith("eval/")} for m in read_metrics(d)]
               for name, d in runs.items()}
    assert trained["with"] == trained["without"]
    assert not (runs["without"] / "validation.jsonl").exists()
    assert [without_timings(v) for v in validation_lines(runs["with"])] == [without_timings(v) for v in validation_lines(runs["again"])]


def test_training_on_rlhf_datas_parquet_equals_training_on_the_built_in_problems(tmp_path, capsys, one_thread):
    data = tmp_path / "data"
    assert rlhf(["data", "arithmetic", "--out", str(data)]) == 0
    runs = {}
    for name, prompts in (("built_in", ["--prompts", "arithmetic", "--val-prompts", "arithmetic:test"]),
                          ("parquet", ["--prompts", str(data / "train.parquet"), "--val-prompts", str(data / "test.parquet")])):
        runs[name] = tmp_path / name
        assert train(["arithmetic", "--algo", "grpo", "--num-generations", "4", *SHORT, *VALIDATE, *prompts,
                      "--run-dir", str(runs[name])]) == 0
    assert [without_timings(m) for m in read_metrics(runs["built_in"])] == [without_timings(m) for m in read_metrics(runs["parquet"])]
    assert (runs["built_in"] / "samples.md").read_text() == (runs["parquet"] / "samples.md").read_text()


def test_pretrain_arithmetic_smoke_builds_a_folder_the_task_trains(tmp_path, capsys, one_thread):
    out = tmp_path / "built"
    assert rlhf(["pretrain-arithmetic", "--smoke", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "held-out pass@1" in printed and "stopped at step 6" in printed
    metrics = json.loads((out / "metrics.json").read_text())["metrics"]
    assert metrics["held_out_problems"] == 20 and set(metrics["by_difficulty"]) <= {
        f"digits=2 op={op} carry={c}" for op in "+-" for c in ("yes", "no")}
    assert 0 <= metrics["pass@1"] <= metrics["pass@4"] <= 1
    run_dir = tmp_path / "run"
    assert train(["arithmetic", "--algo", "rloo", "--model", str(out / "arithmetic_lm"), *SHORT, "--val-prompts", "",
                  "--num-generations", "2", "--run-dir", str(run_dir)]) == 0
    assert len(read_metrics(run_dir)) == 3
    capsys.readouterr()
    assert rlhf(["pretrain-arithmetic", "--smoke", "--out", str(out)]) == 2  # not empty: refused, nothing touched
    assert capsys.readouterr().err.strip() == f"error: out: {out} exists and is not empty; choose another --out"
