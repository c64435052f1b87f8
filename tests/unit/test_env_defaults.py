"""An environment's defaults (issue 58): `--env calculator` brings the sibling model that can call, the
problems where a call pays (2-digit products beside sums and differences) and an episode's budget, applied
over the task's defaults and under the command line's flags, in `parse_args` and `make_args` alike."""

import pytest

from rlhf_scratch.commands.arithmetic_lm import ArithmeticLMArgs, held_out
from rlhf_scratch.commands.main import main as rlhf
from rlhf_scratch.config import default_values, make_args, registry
from rlhf_scratch.engine.run_args import flag_given, parse_args
from rlhf_scratch.rollout.prompts import PromptError, load_prompt_table


def fields(args, names=("model", "prompts", "val_prompts", "gen_len", "total_phases", "algo")):
    return tuple(getattr(args, n) for n in names)


def test_the_calculator_brings_its_model_problems_and_budget_over_the_tasks_defaults():
    args, _ = parse_args(["arithmetic", "--env", "calculator"])
    # model, prompts, val_prompts and gen_len the environment's; total_phases and algo still the task's
    assert fields(args) == ("arithmetic_calc", "calculator", "calculator:test", 20, 1000, "grpo")
    plain, _ = parse_args(["arithmetic"])
    assert fields(plain) == ("arithmetic", "arithmetic", "arithmetic:test", 6, 1000, "grpo")
    assert fields(make_args(algo="grpo", task="arithmetic", env="calculator")) == fields(args)
    assert fields(parse_args(["--env=calculator", "--task", "arithmetic"])[0]) == fields(args)


def test_the_users_flags_win_over_the_environments_defaults():
    args, _ = parse_args(["arithmetic", "--env", "calculator", "--model", "arithmetic", "--gen-len", "12"])
    assert fields(args) == ("arithmetic", "calculator", "calculator:test", 12, 1000, "grpo")
    args = make_args(algo="rloo", task="arithmetic", env="calculator", val_prompts="arithmetic:test")
    assert (args.model, args.val_prompts) == ("arithmetic_calc", "arithmetic:test")


def test_an_environments_default_given_per_algorithm_is_that_algorithms_only():
    registry.register_env(registry.Environment("probe", "rlhf_scratch.reward.calculator:make_calculator",
                                               defaults=dict(top_k={"rloo": 5}, gen_len=7)))
    try:
        rloo, grpo = (default_values("tiny", "arithmetic", "probe", make_args(algo=a).__class__) for a in ("rloo", "grpo"))
        assert (rloo["top_k"], rloo["gen_len"]) == (5, 7)
        assert grpo["top_k"] == 0 and grpo["gen_len"] == 7  # the task's top_k 0: the env gives grpo none
        assert default_values("tiny", "arithmetic", "", make_args(algo="grpo").__class__)["gen_len"] == 6
    finally:
        registry.unregister_env("probe")


def test_flag_given_reads_the_last_value_in_either_spelling():
    assert flag_given(["--env", "a", "--x", "1", "--env=b"], "--env") == "b"
    assert flag_given(["--env"], "--env") == "" and flag_given([], "--env") == ""


def test_the_calculators_problems_hold_products_and_its_test_split_is_the_siblings_held_out_set(tmp_path, capsys):
    test, train = load_prompt_table("calculator:test"), load_prompt_table("calculator")
    assert (len(test.rows), len(train.rows)) == (500, 5000)
    ops = [c["extra_info"]["op"] for c in test.columns]
    assert {op: ops.count(op) for op in "+-*"} == {"+": 156, "-": 158, "*": 186}
    sibling = held_out(ArithmeticLMArgs(ops="+-*"))  # what `rlhf pretrain-arithmetic --calculator P --ops '+-*'` holds out
    assert [r[0]["content"] for r in test.rows] == [p.prompt for p in sibling]
    assert [c["ground_truth"] for c in test.columns] == [p.ground_truth for p in sibling]
    assert rlhf(["data", "arithmetic", "--ops", "+-*", "--out", str(tmp_path)]) == 0  # row for row rlhf data's files
    written = load_prompt_table(str(tmp_path / "test.parquet"))
    assert written.rows == test.rows and written.columns == test.columns
    with pytest.raises(PromptError, match=r"^prompts: calculator:dev: environment calculator has the splits train, test$"):
        load_prompt_table("calculator:dev")


def test_arithmetic_calc_names_the_shipped_sibling_the_benchmark_built():
    import hashlib
    import json
    from pathlib import Path

    from rlhf_scratch.models.loading import asset_path, load_tokenizer

    assert {t: load_tokenizer("arithmetic_calc").get_vocab()[t] for t in ("<calc>", "</calc>", "?")} == {
        "<calc>": 15, "</calc>": 16, "?": 17}
    assert "<calc>" not in load_tokenizer("arithmetic").get_vocab()  # the shipped one is unchanged
    record = json.loads((Path(__file__).parents[2] / "benchmarks/arithmetic_calc_lm_2026-11-29.json").read_text())
    shipped = hashlib.sha256((asset_path("arithmetic_calc_lm") / "model.safetensors").read_bytes()).hexdigest()
    assert record["model_sha256"]["built"] == shipped and record["args"]["calculator"] == 0.25
