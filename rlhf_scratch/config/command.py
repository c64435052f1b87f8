"""One wrapper for every command: it runs the command and owns its one-line error and exit code.

    def main(argv=None) -> int:
        return command(parse, run, argv)     # parse(argv) -> args (tyro: cli.parse_dataclass); run(args)

What a user sees, whichever command it is:

    exit 0    done (`--help` too)
    exit 2    `error: FIELD: rule` — a bad flag or value, or a file or folder a flag names that is
              refused (a `ConfigError` or any `ValueError`: the package's input errors, PromptError,
              ModelFolderError, PairsError, RewardFunctionError, RunFolderError …, all derive from it)
    exit 1    `error: …` — a failure the package foresees while it works: an error class the package
              defines (HubUnreachableError, CorpusUnavailableError, WorkerError …) or an OSError
    exit 130  `interrupted` — Ctrl-C that reached the command (a run's own Ctrl-C, which writes a
              checkpoint first, is the run's TrainingStopped, with its own code)

Always one line on stderr, no traceback; an error's `__notes__` (what to do next) follow it on rank 0.
Anything else is a bug and keeps its traceback. This module imports no torch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TypeVar

from rlhf_scratch.config import ConfigError

A = TypeVar("A")

PACKAGES = ("rlhf_scratch", "interp")
"""An error class defined in these is one the package raises on purpose (a known failure)."""

USAGE, FAILED, INTERRUPTED = 2, 1, 130


def command(parse: Callable[[list[str]], A], run: Callable[[A], int | None],
            argv: list[str] | None = None) -> int:
    """`run(parse(argv))`'s exit code (None counts as 0), every error as one line on stderr.
    `argv` None: the process's own (`sys.argv[1:]`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return run(parse(argv)) or 0
    except SystemExit as e:  # --help (0)
        return e.code if isinstance(e.code, int) else 0
    except KeyboardInterrupt as e:  # (its message, if any, says how to continue: a study's)
        print("interrupted" + (f"; {e}" if str(e) else ""), file=sys.stderr)
        return INTERRUPTED
    except Exception as e:
        code = exit_code(e)
        if code is None:
            raise
        say(e)
        return code


def exit_code(err: BaseException) -> int | None:
    """The exit code of a known error, None for one that is a bug."""
    if isinstance(err, ValueError):  # ConfigError and every input error of the package
        return USAGE
    if isinstance(err, OSError) or any(c.__module__.split(".")[0] in PACKAGES for c in type(err).__mro__):
        return FAILED
    return None


def say(err: BaseException) -> None:
    """`error: <the first line>`, then the error's notes (rank 0 only under torchrun)."""
    print(f"error: {first_line(err)}", file=sys.stderr)
    if os.environ.get("RANK", "0") == "0":
        for note in getattr(err, "__notes__", []):
            print(note, file=sys.stderr)


def first_line(err: BaseException) -> str:
    """The error's first line (tyro's rejection of an `int | None` flag runs to several), or its
    class's name when it has no message."""
    return str(err).splitlines()[0] if str(err).strip() else type(err).__name__


__all__ = ["FAILED", "INTERRUPTED", "USAGE", "ConfigError", "command", "exit_code", "first_line", "say"]
