"""The command line: flags for every field, and one-line errors."""

import dataclasses
import subprocess
import sys

from rlhf_scratch.config import RLHFArgs
from rlhf_scratch.train import build_parser, main


def _run(*argv):
    return subprocess.run([sys.executable, "-m", "rlhf_scratch.train", *argv], capture_output=True, text=True, timeout=120)


def test_help_lists_every_field_with_its_default():
    text = build_parser().format_help()
    for f in dataclasses.fields(RLHFArgs):
        if f.name != "task":
            assert "--" + f.name.replace("_", "-") in text, f"--help is missing --{f.name}"
    assert "the KL(π‖π_ref) penalty" in text and "(default: 0.1)" in text  # kl_coef
    assert "--no-prepend-bos" in text


def test_bad_value_exits_2_with_one_line_naming_the_field():
    proc = _run("sentiment", "--kl-coef", "-1")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: kl_coef: must be a finite number >= 0; got -1.0"


def test_unknown_task_and_preset(capsys):
    assert main(["poetry"]) == 2
    assert capsys.readouterr().err.strip() == "error: task: must be one of sentiment, vader, periods; got 'poetry'"
    assert main(["sentiment", "--preset", "gpt5"]) == 2
    assert capsys.readouterr().err.strip() == "error: preset: must be one of tiny, gpt2; got 'gpt5'"


def test_batch_not_divisible(capsys):
    assert main(["sentiment", "--batch-size", "30", "--num-minibatches", "4"]) == 2
    assert "batch_size: must be divisible by num_minibatches" in capsys.readouterr().err


def test_algo_flag_builds_that_algorithms_parser(capsys):
    text = build_parser("rloo").format_help()
    assert "--num-generations" in text and "--epsilon-high" in text and "--kl-coef" not in text
    assert main(["sentiment", "--algo", "rloo", "--kl-coef", "1"]) == 2
    assert capsys.readouterr().err.strip() == "error: unrecognized arguments: --kl-coef 1"
    assert main(["sentiment", "--algo", "sac"]) == 2
    assert capsys.readouterr().err.strip() == "error: algo: must be one of ppo, rloo, online_dpo; got 'sac'"
