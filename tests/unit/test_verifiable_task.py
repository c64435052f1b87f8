"""The arithmetic task's plumbing (issue 56): each prompt's columns ride with it to the reward (`Prompt`,
`prompt_columns`, `compute_scores`), verl's `reward_model.ground_truth` and GSM8K's `#### answer` read as
`ground_truth`, the task's own problems equal to `rlhf data arithmetic`'s files row for row, the task's
defaults under the flags, and the validation's metrics against numbers worked out by hand."""

import json
import pickle

import pyarrow.parquet as pq
import pytest
import torch

from rlhf_scratch.commands.main import main as rlhf
from rlhf_scratch.config import ConfigError, make_args
from rlhf_scratch.engine.run_args import parse_args
from rlhf_scratch.reward.verifiable import weighted_rewards
from rlhf_scratch.reward.verifiable_eval import verifiable_metrics
from rlhf_scratch.rollout.phase import Rollout, compute_scores
from rlhf_scratch.rollout.prompts import PromptError, load_prompt_table, reward_columns
from rlhf_scratch.rollout.rl_dataset import Prompt, TokenizedPrompt, prompt_columns


def test_a_prompt_keeps_its_columns_through_a_pickle():
    prompt = Prompt("47+85=", {"ground_truth": "132", "extra_info": {"digits": 2}})
    again = pickle.loads(pickle.dumps(prompt))
    assert type(again) is Prompt and again == "47+85=" and again.columns == {"ground_truth": "132", "extra_info": {"digits": 2}}
    cut = pickle.loads(pickle.dumps(TokenizedPrompt("85-47=", [0, 9, 6], {"ground_truth": "38"})))
    assert type(cut) is TokenizedPrompt and cut.ids == (0, 9, 6) and cut.columns == {"ground_truth": "38"}


def test_prompt_columns_are_the_columns_every_prompt_has_one_entry_each():
    prompts = [Prompt("a", {"ground_truth": "1", "only_here": 5}), Prompt("b", {"ground_truth": "22"}),
               TokenizedPrompt("c", [1], {"ground_truth": "333"})]
    assert prompt_columns(prompts) == {"ground_truth": ["1", "22", "333"]}
    assert prompt_columns(["plain", Prompt("b", {"ground_truth": "2"})]) == {}  # a plain string carries none
    assert prompt_columns([]) == {}


def test_verls_ground_truth_is_read_as_the_ground_truth_column():
    row = {"prompt": "x", "reward_model": {"style": "rule", "ground_truth": "132"}, "extra_info": {"index": 3}}
    assert reward_columns(row, "prompt") == {"reward_model": {"style": "rule", "ground_truth": "132"},
                                             "extra_info": {"index": 3}, "ground_truth": "132"}
    own = {"prompt": "x", "ground_truth": "7", "reward_model": {"ground_truth": "132"}}
    assert reward_columns(own, "prompt")["ground_truth"] == "7"  # a column of that name wins


def test_compute_scores_gives_each_completion_its_own_prompts_ground_truth():
    seen = {}

    def reward(*, completions, ground_truth, **kwargs):
        seen.update(kwargs, ground_truth=ground_truth)
        return [float(c == t) for c, t in zip(completions, ground_truth)]

    prompts = [Prompt("1+1=", {"ground_truth": "2", "ability": "math"})] * 2 + [Prompt("9-5=", {"ground_truth": "4", "ability": "math"})] * 2
    rollout = Rollout(prompt_ids=torch.zeros(4, 2, dtype=torch.long), completion_ids=torch.ones(4, 1, dtype=torch.long),
                      attention_mask=torch.ones(4, 3, dtype=torch.bool), completion_mask=torch.ones(4, 1, dtype=torch.bool),
                      prompts=prompts, completions=["2", "3", "4", "2"], num_generations=2, eos_token_id=0)
    assert compute_scores(rollout, reward).scores.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert seen == {"ground_truth": ["2", "2", "4", "4"], "ability": ["math"] * 4, "prompts": ["1+1="] * 2 + ["9-5="] * 2,
                    "completion_ids": [[1]] * 4}


def test_gsm8k_rows_are_read_as_question_and_the_answer_after_the_marker(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
        {"question": "How many grams in 1.234 kg?", "answer": "1000 * 1.234 = 1234\n#### 1,234"},
    ]) + "\n")
    table = load_prompt_table(str(path))
    assert table.rows == ["Tom has 3 apples and buys 4. How many?", "How many grams in 1.234 kg?"]
    assert [c["ground_truth"] for c in table.columns] == ["7", "1234"]
    pq.write_table(__import__("pyarrow").Table.from_pylist([{"question": "q", "answer": "no marker"}]), tmp_path / "g.parquet")
    with pytest.raises(PromptError, match=r'^prompts: .*g.parquet row 1: a GSM8K row needs .*"#### ANSWER"$'):
        load_prompt_table(str(tmp_path / "g.parquet"))


def test_the_tasks_own_problems_are_rlhf_datas_files_row_for_row(tmp_path, capsys):
    out = tmp_path / "arith"
    assert rlhf(["data", "arithmetic", "--out", str(out)]) == 0
    for source, split in (("arithmetic", "train"), ("arithmetic:test", "test")):
        built_in, written = load_prompt_table(source), load_prompt_table(str(out / f"{split}.parquet"))
        assert built_in.rows == written.rows and built_in.columns == written.columns
    assert len(load_prompt_table("arithmetic").rows) == 5000 and len(load_prompt_table("arithmetic:test").rows) == 500
    first = load_prompt_table("arithmetic:test")
    assert first.columns[0]["ground_truth"] == str(eval(first.rows[0][0]["content"].rstrip("=")))
    with pytest.raises(PromptError, match=r"^prompts: arithmetic:dev: task arithmetic has the splits train, test$"):
        load_prompt_table("arithmetic:dev")


def test_the_task_brings_its_defaults_and_the_flags_win():
    args, _ = parse_args(["arithmetic", "--algo", "grpo"])
    assert (args.model, args.prompts, args.val_prompts, args.gen_len, args.stop_at_eos, args.top_k) == (
        "arithmetic", "arithmetic", "arithmetic:test", 6, True, 0)
    args, _ = parse_args(["--gen-len", "9", "--task", "arithmetic", "--val-prompts", ""])
    assert (args.gen_len, args.val_prompts, args.model) == (9, "", "arithmetic")
    assert make_args(algo="rloo", task="arithmetic").model == "arithmetic"
    sentiment, _ = parse_args(["sentiment"])
    assert (sentiment.model, sentiment.prompts, sentiment.val_prompts) == ("tiny", "prefix", "")


@pytest.mark.parametrize("argv, line", [
    (["sentiment", "--format-weight", "0.1"], "format_weight: is the arithmetic task's (its format reward); got 0.1 with task sentiment"),
    (["vader", "--val-prompts", "arithmetic:test"], "val_prompts: task vader has no evaluation of its own to validate with; got 'arithmetic:test'"),
    (["arithmetic", "--val-n", "0"], "val_n: must be >= 1; got 0"),
    (["arithmetic", "--val-size", "-1"], "val_size: must be >= 0 (0 = every held-out prompt); got -1"),
])
def test_bad_validation_flags_are_one_line(argv, line):
    with pytest.raises(ConfigError) as err:
        parse_args(argv)
    assert str(err.value) == line


def test_the_format_weight_adds_its_share_for_any_integer_answer():
    fn = weighted_rewards(0.25)
    assert fn(completions=["12", "13", "x", "012"], ground_truth=["12"] * 4) == [1.25, 0.25, 0.0, 0.0]
    assert fn.__name__ == "accuracy_reward+0.25*format_reward"


def test_trls_per_function_reward_metrics_by_hand():
    from rlhf_scratch.reward.tasks import arithmetic_reward_funcs
    from rlhf_scratch.rollout.reward_call import reward_func_metrics

    parts = arithmetic_reward_funcs(make_args(algo="grpo", task="arithmetic", format_weight=0.5))
    assert [name for name, _ in parts] == ["accuracy_reward", "format_reward"]
    metrics = reward_func_metrics(parts, ["1+1="] * 4, ["2", "3", "x", "2"], [[1]] * 4, ground_truth=["2"] * 4)
    # accuracy 1 0 0 1: mean 0.5, std (n - 1) sqrt(1/3); format 1 1 0 1: mean 0.75, std 0.5
    assert metrics == pytest.approx({"rewards/accuracy_reward/mean": 0.5, "rewards/accuracy_reward/std": (1 / 3) ** 0.5,
                                     "rewards/format_reward/mean": 0.75, "rewards/format_reward/std": 0.5})
    assert [n for n, _ in arithmetic_reward_funcs(make_args(algo="grpo", task="arithmetic"))] == ["accuracy_reward"]


def test_the_rule_judge_prefers_the_right_answer_and_abstains_on_a_tie():
    from rlhf_scratch.reward.judges import make_judge

    judge = make_judge("rule", "pos")
    prompts = [Prompt("5+7=", {"ground_truth": "12"})] * 4
    # right vs wrong, wrong vs right, both right, both wrong (a malformed "012" is wrong)
    assert judge(prompts, [("12", "13"), ("012", "12"), ("12", " 12"), ("1", "x")]) == [0, 1, -1, -1]
    with pytest.raises(ValueError, match="every prompt needs its ground_truth column"):
        judge(["5+7="], [("12", "13")])
    assert make_args(algo="online_dpo", task="arithmetic").judge == "rule"
    with pytest.raises(ConfigError, match="^judge: rule judges a verifiable task's answers .*; got task vader$"):
        make_args(algo="online_dpo", task="vader", judge="rule")


def test_validation_metrics_by_hand():
    # two problems, n = 4: 12 right 3 times (c = 3), 40 never (c = 0); digits 2 and 3, + and -
    a = Prompt("5+7=", {"ground_truth": "12", "extra_info": {"digits": 2, "op": "+", "carry": True}})
    b = Prompt("100-60=", {"ground_truth": "40", "extra_info": {"digits": 3, "op": "-", "carry": False}})
    metrics = verifiable_metrics(prompts=[a] * 4 + [b] * 4, completions=["12", "12", "13", "12", "41", "040", "x", ""],
                                 lengths=[3, 3, 3, 3, 3, 4, 2, 1], num_generations=4)
    assert metrics == pytest.approx({
        "eval/problems": 2, "eval/samples_per_problem": 4,
        "eval/pass@1": (3 / 4 + 0) / 2, "eval/pass@4": (1 + 0) / 2,
        "eval/format_rate": 5 / 8,  # 12 12 13 12 41 are integers; 040, x and "" are not
        "eval/mean_length": 22 / 8,
        "eval/pass@1/digits=2": 0.75, "eval/pass@1/digits=3": 0.0, "eval/pass@1/op=+": 0.75, "eval/pass@1/op=-": 0.0,
        "eval/pass@1/carry=yes": 0.75, "eval/pass@1/carry=no": 0.0,
    })
    with pytest.raises(ValueError, match="carry no ground_truth column"):
        verifiable_metrics(prompts=["5+7="] * 2, completions=["12", "1"], lengths=[1, 1], num_generations=2)
