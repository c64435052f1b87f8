"""`rlhf data arithmetic --out DIR` (commands/data.py): verl's columns and types, exact rows, the round
trip through the reader `--prompts FILE.parquet` uses, and every bad input one line with nothing written."""

import pyarrow.parquet as pq
import pytest

from rlhf_scratch.commands.main import main
from rlhf_scratch.reward.arithmetic import make_problems
from rlhf_scratch.reward.verifiable import accuracy_reward
from rlhf_scratch.rollout.prompts import load_prompt_rows

SMALL = ["--train-size", "4", "--test-size", "2", "--seed", "1", "--digits", "1", "2"]


def row(split, index, prompt, truth, digits, op, carry):
    return {"data_source": "arithmetic", "prompt": [{"role": "user", "content": prompt}], "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": {"split": split, "index": index, "digits": digits, "op": op, "carry": carry}}


@pytest.fixture
def written(tmp_path, capsys):
    out = tmp_path / "arith"
    assert main(["data", "arithmetic", "--out", str(out), *SMALL]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out / 'train.parquet'} (4 rows) and {out / 'test.parquet'} (2 rows)")
    return out


def test_the_files_have_verls_columns_and_types(written):
    assert sorted(p.name for p in written.iterdir()) == ["test.parquet", "train.parquet"]
    for split in ("train", "test"):
        schema = pq.read_schema(written / f"{split}.parquet")
        assert [(f.name, str(f.type)) for f in schema] == [
            ("data_source", "string"),
            ("prompt", "list<element: struct<role: string, content: string>>"),
            ("ability", "string"),
            ("reward_model", "struct<style: string, ground_truth: string>"),
            ("extra_info", "struct<split: string, index: int64, digits: int64, op: string, carry: bool>"),
        ]


def test_the_rows_exactly_the_test_split_first(written):
    # make_problems(6, seed=1, digits=(1, 2)): 4+1, 93-70 | 22+72, 9-6, 4-3, 0-0 (checked by hand: 93-70 and 22+72 carry nowhere)
    assert pq.read_table(written / "test.parquet").to_pylist() == [
        row("test", 0, "4+1=", "5", 1, "+", False),
        row("test", 1, "93-70=", "23", 2, "-", False),
    ]
    assert pq.read_table(written / "train.parquet").to_pylist() == [
        row("train", 0, "22+72=", "94", 2, "+", False),
        row("train", 1, "9-6=", "3", 1, "-", False),
        row("train", 2, "4-3=", "1", 1, "-", False),
        row("train", 3, "0-0=", "0", 1, "-", False),
    ]


def test_round_trip_through_the_prompt_reader_and_the_reward(written):
    problems = make_problems(6, seed=1, digits=(1, 2))[2:]
    rows = load_prompt_rows(str(written / "train.parquet"))  # what `--prompts DIR/train.parquet` reads
    assert rows == [[{"role": "user", "content": p.prompt}] for p in problems]
    truths = [r["ground_truth"] for r in pq.read_table(written / "train.parquet").column("reward_model").to_pylist()]
    assert truths == [p.ground_truth for p in problems]
    assert accuracy_reward(completions=truths, ground_truth=truths) == [1.0] * 4
    assert accuracy_reward(completions=truths[::-1], ground_truth=truths) == [0.0] * 4


def test_same_flags_same_files_and_an_empty_folder_is_taken(written, tmp_path, capsys):
    again = tmp_path / "again"
    again.mkdir()
    assert main(["data", "arithmetic", "--out", str(again), *SMALL]) == 0
    for split in ("train", "test"):
        assert pq.read_table(again / f"{split}.parquet").equals(pq.read_table(written / f"{split}.parquet"))
    other = tmp_path / "other"
    assert main(["data", "arithmetic", "--out", str(other), *SMALL[:4], "--seed", "2"]) == 0
    assert not pq.read_table(other / "train.parquet").equals(pq.read_table(written / "train.parquet"))


def test_the_difficulty_flags_reach_the_rows(tmp_path):
    out = tmp_path / "hard"
    assert main(["data", "arithmetic", "--out", str(out), "--digits", "3", "--ops", "*", "--carries", "required",
                 "--train-size", "5", "--test-size", "5"]) == 0
    infos = pq.read_table(out / "train.parquet").column("extra_info").to_pylist()
    assert {(i["digits"], i["op"], i["carry"]) for i in infos} == {(3, "*", True)}


@pytest.mark.parametrize("argv, message", [
    (["arithmetic", "--train-size", "-1"], "error: train_size: must be >= 1; got -1"),
    (["arithmetic", "--test-size", "0"], "error: test_size: must be >= 1; got 0"),
    (["arithmetic", "--ops", "+/"], "error: ops: each must be one of + - *; got ['+', '/']"),
    (["arithmetic", "--ops", "++"], "error: ops: each at most once"),
    (["arithmetic", "--digits", "0"], "error: digits: each must be a whole number 1..9; got [0]"),
    (["arithmetic", "--carries", "some"], "error: carries: must be one of any, required, forbidden; got 'some'"),
    (["arithmetic", "--seed", "-3"], "error: seed: must be >= 0; got -3"),
    (["arithmetic", "--digits", "1", "--ops", "+", "--train-size", "100"],  # only 100 one-digit sums exist
     "error: train_size + test_size: found 100 of 600 distinct problems"),
    (["arithmetic", "--digits", "1", "--ops", "-", "--carries", "required"],  # one-digit a - b, a >= b, never borrows
     "error: train_size + test_size: found 0 of 5500 distinct problems"),
    (["gsm8k"], "error: dataset: must be one of arithmetic; got 'gsm8k'"),
    (["arithmetic", "--train-size", "x"], "error: argument --train-size: invalid int value: 'x'"),
])
def test_a_bad_flag_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    assert main(["data", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err
    assert not out.exists()


@pytest.mark.parametrize("kind", ["a non-empty folder", "a file"])
def test_an_existing_out_is_refused_and_left_as_it_was(tmp_path, capsys, kind):
    out = tmp_path / "out"
    if kind == "a file":
        out.write_text("mine")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    assert main(["data", "arithmetic", "--out", str(out), *SMALL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: out: {out} ") and "nothing was written" in err[0], err
    if kind == "a file":
        assert out.read_text() == "mine"
    else:
        assert [p.name for p in out.iterdir()] == ["notes.txt"]
