"""The command line: flags for every field, and one-line errors."""

import dataclasses

from rlhf_scratch.commands.train import main
from rlhf_scratch.config import RLHFArgs, registry


def help_text(capsys, *argv) -> str:
    """`--help` of the train command, box characters and line breaks folded into single spaces."""
    assert main([*argv, "--help"]) == 0
    return " ".join(capsys.readouterr().out.replace("│", " ").split())


def test_help_lists_every_field_with_its_default(capsys):
    text = help_text(capsys)
    for f in dataclasses.fields(RLHFArgs):
        if f.name != "task":
            assert "--" + f.name.replace("_", "-") in text, f"--help is missing --{f.name}"
    assert "the KL(π‖π_ref) penalty" in text and "(default: 0.1)" in text  # kl_coef
    assert "--no-prepend-bos" in text


def test_unknown_task_and_preset(capsys):
    assert main(["poetry"]) == 2
    assert capsys.readouterr().err.strip() == "error: task: must be one of sentiment, vader, periods, first_token, arithmetic; got 'poetry'"
    assert main(["sentiment", "--preset", "gpt5"]) == 2
    assert capsys.readouterr().err.strip() == "error: preset: must be one of tiny, gpt2; got 'gpt5'"


def test_batch_not_divisible(capsys):
    assert main(["sentiment", "--batch-size", "30", "--num-minibatches", "4"]) == 2
    assert "batch_size: must be divisible by num_minibatches" in capsys.readouterr().err


def test_algo_flag_builds_that_algorithms_parser(capsys):
    text = help_text(capsys, "--algo", "rloo")
    assert "--num-generations" in text and "--epsilon-high" in text and "--kl-coef" not in text
    assert main(["sentiment", "--algo", "rloo", "--kl-coef", "1"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: unrecognized arguments: --kl-coef 1 (--kl-coef is --algo ppo's name for --beta; here: --beta)")
    assert main(["sentiment", "--algo", "rloo", "--kl-coeff", "1"]) == 2  # nobody's flag: no hint
    assert capsys.readouterr().err.strip() == "error: unrecognized arguments: --kl-coeff 1"
    assert main(["sentiment", "--algo", "sac"]) == 2
    assert capsys.readouterr().err.strip() == f"error: algo: must be one of {', '.join(registry.names())}; got 'sac'"


def test_task_is_the_first_bare_word_wherever_it_stands(capsys):
    from rlhf_scratch.commands.train import parse_args

    args, resume = parse_args(["--kl-coef", "0.3", "vader", "--no-prepend-bos", "--algo", "ppo"])
    assert (args.task, args.beta, args.prepend_bos, resume) == ("vader", 0.3, False, None)
    args, _ = parse_args(["periods", "--stop-at-eos", "--top-k", "3"])
    assert (args.task, args.stop_at_eos, args.top_k) == ("periods", True, 3)
    args, _ = parse_args(["periods", "--no-stop-at-eos"])
    assert args.stop_at_eos is False
    assert parse_args(["periods"])[0].stop_at_eos is None  # not given: the per-source default


def test_preset_fills_fields_the_command_line_does_not_give():
    from rlhf_scratch.commands.train import parse_args

    args, _ = parse_args(["sentiment", "--preset", "gpt2", "--batch-size", "64"])
    assert (args.beta, args.base_lr, args.batch_size, args.model) == (2.5, 2e-5, 64, "gpt2")


def test_a_flag_of_another_algorithm_names_it(capsys):
    assert main(["sentiment", "--algo", "rloo", "--judge", "vader"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: unrecognized arguments: --judge vader (--judge is an option of --algo online_dpo, not of rloo)")


def test_a_table_now_and_then_by_default():
    from rlhf_scratch.config import make_args

    assert make_args("tiny").table_every == 10, "not every phase: the bar with reward and KL shows each phase"
