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
    assert train(["arithmetic", *SHORT, "--env", "calculator", "--max-turns", "3", "--run-dir", str(runs["calculator"])]) == 0
    config = json.loads((runs["calculator"] / "config.json").read_text())
    assert (config["env"], config["max_turns"]) == ("calculator", 3)
    plain, episodes = ([without_timings(m) for m in read_metrics(runs[name])] for name in ("plain", "calculator"))
    assert len(plain) == 2 and "eval/pass@1" in plain[-1]
    record = [{k: m.pop(k) for k in list(m) if k.startswith(("num_turns/", "tools/", "episodes/"))} for m in episodes]
    assert episodes == plain  # and the episodes' record says each was one turn, with no call
    assert all(r["num_turns/max"] == 1 and r["tools/call_frequency"] == 0 and r["episodes/env_tokens"] == 0 for r in record)


def test_a_sibling_with_call_demonstrations_builds_and_trains_with_the_calculator(tmp_path, one_thread):
    out = tmp_path / "sibling"
    assert rlhf(["pretrain-arithmetic", "--smoke", "--calculator", "0.5", "--ops", "+-*", "--out", str(out)]) == 0
    tokenizer = AutoTokenizer.from_pretrained(out / "arithmetic_lm")
    assert {"<calc>", "</calc>", "?"} <= set(tokenizer.get_vocab())
    assert json.loads((out / "metrics.json").read_text())["args"]["calculator"] == 0.5
    run_dir = tmp_path / "run"
    assert train(["arithmetic", "--model", str(out / "arithmetic_lm"), "--env", "calculator", "--gen-len", "20",
                  *SHORT[:12], "--val-prompts", "", "--run-dir", str(run_dir)]) == 0
    assert len(read_metrics(run_dir)) == 2
