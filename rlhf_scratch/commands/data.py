"""`rlhf data arithmetic --out DIR`: a task's problems as verl prepares data, DIR/train.parquet and
DIR/test.parquet (the problems are `rlhf_scratch.reward.arithmetic`'s; see its docstring).

    rlhf data arithmetic --out data/arith
    rlhf data arithmetic --out data/arith3 --digits 3 --ops '+-*' --carries required --train-size 20000

One row per problem, in verl's columns (examples/data_preprocess/gsm8k.py):

    data_source    "arithmetic"                           which rule scores the row
    prompt         [{"role": "user", "content": "47+85="}]  chat messages (`--prompts FILE.parquet` reads this column)
    ability        "math"
    reward_model   {"style": "rule", "ground_truth": "132"}
    extra_info     {"split": "train", "index": 0, "digits": 2, "op": "+", "carry": true}

The problems are `make_problems(train_size + test_size, seed, ...)`: the first `test_size` are the
test split, the rest the train split, so the two share no problem and the test split stays the same
whatever the train size. A bad flag, an --out that exists and is not an empty folder, or a
difficulty that cannot give that many distinct problems is one line, exit 2, nothing written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

from rlhf_scratch.config import ConfigError, check_seed
from rlhf_scratch.config.cli import parse_dataclass
from rlhf_scratch.config.command import command
from rlhf_scratch.reward.arithmetic import (
    CARRIES,
    DATA_SEED,
    DEFAULT_OPS,
    DIGITS,
    TEST_SIZE,
    TRAIN_SIZE,
    check_difficulty,
)

PROG = "rlhf data"
DATASETS = ("arithmetic",)
SPLITS = ("train", "test")


@dataclass
class DataArgs:
    """A task's problems as verl's data files: DIR/train.parquet and DIR/test.parquet."""

    dataset: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="DATASET")] = tyro.MISSING
    """What to write: arithmetic."""
    out: str = tyro.MISSING
    """New folder for train.parquet and test.parquet (one that exists must be empty)."""
    train_size: int = TRAIN_SIZE
    """Problems in the train split."""
    test_size: int = TEST_SIZE
    """Problems in the test split (the held-out ones: none is in the train split)."""
    seed: int = DATA_SEED
    """Seeds the problems: the same flags write the same files."""
    digits: tuple[int, ...] = DIGITS
    """Digits of each operand; several (--digits 1 2 3) are drawn uniformly."""
    ops: str = "".join(DEFAULT_OPS)
    """The operations, each drawn uniformly: any of + - * written together, e.g. '+-*'."""
    carries: str = "any"
    """required: only problems whose column arithmetic carries (or borrows); forbidden: only those
    that never do; any: both."""


def parse(argv: list[str]) -> DataArgs:
    """The command line, checked (`check_options`)."""
    args = parse_dataclass(DataArgs, argv, default=None, prog=PROG, description=DataArgs.__doc__)
    check_options(args)
    return args


def check_options(args: DataArgs) -> None:
    """One ConfigError line for the first bad option; nothing is written before they all pass."""
    if args.dataset not in DATASETS:
        raise ConfigError(f"dataset: must be one of {', '.join(DATASETS)}; got {args.dataset!r}")
    for name in ("train_size", "test_size"):
        if getattr(args, name) < 1:
            raise ConfigError(f"{name}: must be >= 1; got {getattr(args, name)}")
    check_seed(args.seed)
    if args.carries not in CARRIES:  # (check_difficulty says it too; here first, before the digits' range)
        raise ConfigError(f"carries: must be one of {', '.join(CARRIES)}; got {args.carries!r}")
    check_difficulty(args.digits, tuple(args.ops), args.carries)
    out = Path(args.out).expanduser()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"out: {out} is a file; name a new folder (nothing was written)")
    if out.is_dir() and any(out.iterdir()):
        raise ConfigError(f"out: {out} exists and is not empty; name a new folder (nothing was written)")


def verl_schema():
    """The parquet schema of a row (`reward.arithmetic.verl_row`), written out so every file has the
    same column types whatever its rows hold."""
    import pyarrow as pa

    return pa.schema([
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("extra_info", pa.struct([("split", pa.string()), ("index", pa.int64()), ("digits", pa.int64()),
                                  ("op", pa.string()), ("carry", pa.bool_())])),
    ])


def arithmetic_splits(args: DataArgs) -> dict[str, list[dict]]:
    """{"train": rows, "test": rows}: the problems of `args`, split, as verl rows."""
    from rlhf_scratch.reward.arithmetic import splits_rows

    try:
        return splits_rows(args.train_size, args.test_size, args.seed, digits=args.digits, ops=args.ops, carries=args.carries)
    except ValueError as e:  # "n: found 0 of 5500 ...": on the command line, n is the two flags' sum
        message = str(e)
        raise ConfigError("train_size + test_size" + message[1:] if message.startswith("n: ") else message) from None


def write_splits(splits: dict[str, list[dict]], out: Path) -> None:
    """DIR/<split>.parquet for each split: each written beside its name first, then renamed, so a
    failure leaves no half-written file under the final name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        part = out / f".{split}.parquet.partial"
        pq.write_table(pa.Table.from_pylist(rows, schema=verl_schema()), part)
        os.replace(part, out / f"{split}.parquet")


def run(args: DataArgs) -> int:
    """Make the problems (a request that cannot be met stops here, before any file), write them."""
    splits = arithmetic_splits(args)
    out = Path(args.out).expanduser()
    write_splits(splits, out)
    print(f"wrote {out / 'train.parquet'} ({len(splits['train'])} rows) and {out / 'test.parquet'} "
          f"({len(splits['test'])} rows): {args.dataset}, digits {' '.join(map(str, args.digits))}, "
          f"ops {args.ops}, carries {args.carries}, seed {args.seed}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command: `command()` owns its one-line errors and exit codes."""
    return command(parse, run, argv)
