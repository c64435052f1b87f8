"""`train arithmetic --env calculator` end to end (issue 58). The shipped model's character tokenizer has no
`<calc>` token, so it cannot call: every episode is one turn, and the run must equal the run without an
environment number for number — the episode path (turn by turn, segments assembled into the rollout)
changes nothing where nothing is called."""

import json

from transformers import AutoTokenizer

from rlhf_scratch.commands.main import main as rlhf
from rlhf_scratch.commands.train import main as train
from rlhf_scratch.engine.loop import without_timings
from rlhf_scratch.engine.runs import read_metrics

SHORT = ["--total-phases", "2", "--batch-size", "8", "--num-minibatches", "2", "--warmup-steps", "1", "--threads", "1",
         "--table-every", "100", "--plot-every", "100", "--test-freq", "2", "--val-size", "8", "--val-n", "2"]


def test_the_calculator_on_the_shipped_model_trains_as_the_single_turn_run(tmp_path, one_thread):
    runs = {name: tmp_path / name for name in ("plain", "calculator")}
    assert train(["arithmetic", *SHORT, "--run-dir", str(runs["plain"])]) == 0
    shipped = ["--model", "arithmetic", "--prompts", "arithmetic", "--val-prompts", "arithmetic:test", "--gen-len", "6"]  # not the env's defaults
    assert train(["arithmetic", *SHORT, "--env", "calculator", *shipped, "--max-turns", "3", "--run-dir", str(runs["calculator"])]) == 0
    config = json.loads((runs["calculator"] / "config.json").read_text())
    assert (config["env"], config["max_turns"]) == ("calculator", 3)
    plain, episodes = ([without_timings(m) for m in read_metrics(runs[name])] for name in ("plain", "calculator"))
    assert len(plain) == 2 and "eval/pass@1" in plain[-1]
    record = [{k: m.pop(k) for k in list(m) if k.removeprefix("eval/").startswith(("episodes/model_turns/", "tools/", "episodes/"))}
              for m in episodes]
    assert episodes == plain  # and the episodes' record says each was one turn, with no call (the validation's too)
    assert all(r["episodes/model_turns/max"] == 1 and r["tools/call_frequency"] == 0 and r["episodes/env_tokens"] == 0 for r in record)
    assert record[-1]["eval/episodes/model_turns/max"] == 1 and record[-1]["eval/tools/call_frequency"] == 0


def test_a_sibling_with_call_demonstrations_builds_and_trains_with_the_calculator(tmp_path, one_thread):
    out = tmp_path / "sibling"
    assert rlhf(["pretrain-arithmetic", "--smoke", "--calculator", "0.5", "--ops", "+-*", "--out", str(out)]) == 0
    tokenizer = AutoTokenizer.from_pretrained(out / "arithmetic_lm")
    assert {"<calc>", "</calc>", "?"} <= set(tokenizer.get_vocab())
    built = json.loads((out / "metrics.json").read_text())
    assert built["args"]["calculator"] == 0.5
    report = built["metrics"]["calculator"]  # with and without the calculator, by op, and how often it called
    assert report["with_calculator"]["pass@1"] == built["metrics"]["pass@1"]  # the report's samples, read both ways
    assert set(report["without_calculator"]["by_op"]) == set(report["call_rate_by_op"]) <= {"+", "-", "*"}
    assert 0 <= report["call_rate"] <= 1
    run_dir = tmp_path / "run"
    assert train(["arithmetic", "--model", str(out / "arithmetic_lm"), "--env", "calculator", "--gen-len", "20",
                  *SHORT[:12], "--val-prompts", "", "--run-dir", str(run_dir)]) == 0
    assert len(read_metrics(run_dir)) == 2


def test_train_arithmetic_env_calculator_trains_the_shipped_sibling_and_validates_episodes(tmp_path, one_thread):
    """`--env calculator` alone brings the sibling, the problems with products and an episode's budget; its
    validation samples episodes the calculator answers: the products it cannot do in its head are solved there,
    and not in the same validation without --env (the same model, problems and budget: calls go unanswered)."""
    runs = {name: tmp_path / name for name in ("tool", "no_tool")}
    short = [*SHORT[:12], "--total-phases", "1", "--test-freq", "1", "--val-size", "60", "--val-n", "2"]
    assert train(["arithmetic", "--env", "calculator", *short, "--run-dir", str(runs["tool"])]) == 0
    assert train(["arithmetic", "--model", "arithmetic_calc", "--prompts", "calculator", "--val-prompts", "calculator:test",
                  "--gen-len", "20", *short, "--run-dir", str(runs["no_tool"])]) == 0
    config = json.loads((runs["tool"] / "config.json").read_text())
    assert (config["model"], config["prompts"], config["val_prompts"], config["gen_len"], config["env"]) == (
        "arithmetic_calc", "calculator", "calculator:test", 20, "calculator")
    before = {name: json.loads((d / "validation.jsonl").read_text().splitlines()[0]) for name, d in runs.items()}
    assert before["tool"]["phase"] == 0 and before["tool"]["eval/problems"] == 60
    assert before["tool"]["eval/pass@1/op=*"] >= 0.15 > before["no_tool"]["eval/pass@1/op=*"]
