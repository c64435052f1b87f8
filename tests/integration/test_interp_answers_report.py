"""interp.report on an arithmetic run (issue 56, item 8): a tiny run trained here, the report on its held-out
problems, its numbers well-formed and checked against the model's own outputs and greedy decoding."""

import json

import pytest
import torch

from interp import answers
from interp.report import main as report
from rlhf_scratch.commands.train import main as train

pytestmark = pytest.mark.usefixtures("one_thread")

N = 40  # held-out problems the report reads


@pytest.fixture(scope="module")
def reported(tmp_path_factory, one_thread):
    run_dir = tmp_path_factory.mktemp("arith") / "run"
    assert train(["arithmetic", "--total-phases", "3", "--batch-size", "8", "--num-generations", "4",
                  "--val-prompts", "", "--threads", "1", "--table-every", "100", "--plot-every", "100",
                  "--run-dir", str(run_dir)]) == 0
    assert report([str(run_dir), "--n-problems", str(N)]) == 0
    return run_dir, json.loads((run_dir / "interp" / "summary.json").read_text())


def test_the_report_reads_the_run_s_held_out_problems_and_says_its_n(reported):
    run_dir, s = reported
    assert s["kind"] == "answers" and s["source"] == "held-out problems (arithmetic:test)"
    assert s["answers"]["n_problems"] == N and s["examples"][0] == "42+25=", "the test split's first problem"
    assert s["headline"][0].startswith(f"{N} held-out problems (arithmetic:test); one GRPO run (seed 1, 3 phases): one seed")
    html = (run_dir / "interp" / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 7, "every figure embedded"
    for png in ("answer_logit_lens.png", "operand_attention.png", "column_attention.png", "head_weight_change.png",
                "answer_patching_layers.png", "answer_heads.png", "answer_neuron_dla.png"):
        assert (run_dir / "interp" / png).stat().st_size > 1000, png


def test_the_arithmetic_sections_are_well_formed(reported):
    _, s = reported
    groups = s["answers"]["by_group"]
    assert groups["all"]["n"] == N and groups["op=+"]["n"] + groups["op=-"]["n"] == N
    assert groups["carry=no"]["n"] + groups["carry=yes"]["n"] == N
    for g in groups.values():
        for key in ("pass1_reference", "pass1_tuned", "greedy_reference", "greedy_tuned"):
            assert 0 <= g[key] <= 1, (key, g)
    lens = s["answer_lens"]
    assert lens["sites"] == ["0_pre", "1_pre", "final_post"] and lens["slots"][-1] == "EOS"
    assert lens["count"][0] == N and lens["count"][-1] == N, "every answer has a units digit and an EOS"
    for model in ("reference", "tuned"):
        assert all(0 <= x <= 1 for row in lens[model]["top1"] for x in row)
        assert [sum(col) for col in zip(*lens[model]["first_top"])] == lens["count"], "each position counted once"
        assert lens[model]["final_matches_model"] <= 1e-5, "the lens at the last site is the model's output"
    att = s["operand_attention"]
    for model in ("reference", "tuned"):
        for op_row, col_row in zip(att[f"operand_{model}"], att[f"column_{model}"]):
            assert all(0 <= c <= o + 1e-4 <= 1 + 2e-4 for o, c in zip(op_row, col_row)), "the column is inside the operands"
    patch = s["answer_patching"]
    assert patch["reference"] == pytest.approx(s["answers"]["mean_logprob_reference"], abs=2e-4)
    assert patch["tuned"] == pytest.approx(s["answers"]["mean_logprob_tuned"], abs=2e-4)
    assert len(patch["head_fraction"]) == 2 and len(patch["head_fraction"][0]) == 4


@torch.no_grad()
def test_greedy_right_is_what_greedy_decoding_writes(reported):
    """The report's greedy accuracy is exact: decode each problem token by token, argmax until EOS, and compare."""
    from rlhf_scratch.engine.runs import load_run
    from rlhf_scratch.rollout.rl_dataset import run_prompts

    run_dir, s = reported
    run = load_run(run_dir)
    prompts = run_prompts(run.args, tokenizer=run.reference.tokenizer, say=None, source="arithmetic:test")[:N]
    truths = [p.columns["ground_truth"] for p in prompts]
    for name, model in (("reference", run.reference), ("tuned", run.tuned)):
        decoded = []
        for p in prompts:
            ids = model.to_tokens(str(p))[0].tolist()
            for _ in range(6):  # the task's gen_len
                ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
                if ids[-1] == model.tokenizer.eos_token_id:
                    break
            decoded.append(ids[len(str(p)) + 1:])
        right = [d == model.to_tokens(t, prepend_bos=False)[0].tolist() + [0] for d, t in zip(decoded, truths)]
        assert sum(right) / N == pytest.approx(s["answers"]["by_group"]["all"][f"greedy_{name}"], abs=1e-4), name
        batch = answers.answer_batch(model, [str(p) for p in prompts], truths)
        assert answers.greedy_right(model(batch.tokens), batch).tolist() == right
