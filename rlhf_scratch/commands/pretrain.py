"""`python -m rlhf_scratch.pretrain` (= `rlhf pretrain`): rebuild the offline tiny preset from scratch.

    python -m rlhf_scratch.pretrain                   # writes ./tiny_preset/{tiny_lm,tiny_reward}
    python -m rlhf_scratch.pretrain --install         # ... and copies both into rlhf_scratch/assets
    python -m rlhf_scratch.pretrain --smoke           # seconds: a few hundred snippets, tiny sizes

Its stages are in `tiny_preset/build.py`, its settings in `tiny_preset/args.py`. The flags and the
output folders are checked before torch is imported, so `--help` and a bad flag answer at once.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from rlhf_scratch.commands.tiny_preset.args import PretrainArgs, check_outputs
from rlhf_scratch.config.cli import given_fields, parse_dataclass
from rlhf_scratch.config.command import command

DESCRIPTION = "Build the offline `tiny` preset from scratch: tokenizer, base LM and reward classifier."


@dataclass
class PretrainCommand(PretrainArgs):
    smoke: bool = False
    """tiny sizes (PretrainArgs.smoke); finishes in seconds. Flags given beside it still win."""


def parse_args(argv=None) -> PretrainArgs:
    """PretrainArgs from the command line (tyro: every field a flag, its docstring the help)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    cmd = parse_dataclass(PretrainCommand, argv, default=PretrainCommand(), prog="python -m rlhf_scratch.pretrain",
                          description=DESCRIPTION)
    given = given_fields(cmd, PretrainCommand())
    smoke = given.pop("smoke", False)
    return PretrainArgs.smoke(**given) if smoke else PretrainArgs(**given)


def main(argv=None) -> int:
    """The command: `command()` owns its one-line errors and exit codes (a bad flag or output folder: 2)."""
    return command(parse_checked, run, argv)


def parse_checked(argv: list[str]) -> PretrainArgs:
    """The command line, its output folders checked before anything trains."""
    args = parse_args(argv)
    check_outputs(args)
    return args


def run(args: PretrainArgs) -> int:
    """Pretrain the tiny preset (its metrics are in the folder it writes)."""
    from rlhf_scratch.commands.tiny_preset.build import pretrain

    pretrain(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
