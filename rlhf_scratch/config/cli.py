"""Command lines from dataclasses, built by tyro (CleanRL's choice): every field is a flag, the
docstring under it is the flag's help, its default is shown.

    args = parse_dataclass(RLOOArgs, ["--beta", "0.1"], default=RLOOArgs(), prog="...")

What we add to tyro is the package's error contract: a bad command line is ONE line on stderr
(`error: argument --kl-coef: invalid float value: 'abc'`) and exit code 2, never a box or a
traceback. tyro reports a rejected command line through its parse-error hook
(`tyro._errors.on_parse_error`, pinned with tyro's version in pyproject.toml); the hook here turns
each kind of rejection into a `ConfigError` with one line, which the command prints. Unknown
flags come back from tyro as a list and are reported the way argparse words them.

This module imports no torch: a command answers a bad flag at once.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

import tyro
from tyro import _errors as tyro_errors

from rlhf_scratch.config import ConfigError

T = TypeVar("T")


def flag_of(name: str) -> str:
    """The flag of a dataclass field: `kl_coef` -> `--kl-coef`."""
    return "--" + name.replace("_", "-")


def _value_after(flag: str, argv: list[str]) -> str | None:
    """The token given for `flag` (`--flag VALUE` or `--flag=VALUE`), the last one if repeated."""
    value = None
    for i, token in enumerate(argv):
        if token == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif token.startswith(flag + "="):
            value = token[len(flag) + 1 :]
    return value


def one_line_error(event: tyro_errors.ParseErrorEvent, argv: list[str]) -> str:
    """The one line a rejected command line gets, worded as argparse words it."""
    argument = getattr(event, "argument", None)
    flag = _shown(argument.lowered) if argument is not None else None
    if isinstance(event, tyro_errors.InstantiationFailure) and argument is not None:
        kind = getattr(argument.field.type_stripped, "__name__", "")
        value = _value_after(flag, argv)
        if kind in ("int", "float") and value is not None:
            return f"argument {flag}: invalid {kind} value: {value!r}"
        return f"argument {flag}: {event.message}"
    if isinstance(event, tyro_errors.InvalidChoice):
        return f"argument {flag}: invalid choice: {event.value!r} (choose from {', '.join(event.choices)})"
    if isinstance(event, tyro_errors.BadValue) and event.reason == "too_few_values" and not flag.startswith("-"):
        return f"the following arguments are required: {flag}"  # a positional left out (beside an unknown flag)
    if isinstance(event, tyro_errors.BadValue):
        return f"argument {flag}: expected one value" if event.reason == "too_few_values" else \
            f"argument {flag}: takes no value; got {event.offending_value!r}"
    if isinstance(event, tyro_errors.UnrecognizedArgs):
        return "unrecognized arguments: " + " ".join(event.tokens)
    if isinstance(event, tyro_errors.MissingArgs):
        return "the following arguments are required: " + ", ".join(
            _shown(a.arg.lowered) for a in event.missing_arguments)
    return f"invalid command line ({type(event).__name__})"


def _shown(lowered) -> str:
    """An argument as its usage line shows it: a flag by its flag, a positional by its metavar."""
    name = lowered.name_or_flags[0]
    return name if name.startswith("-") or not lowered.metavar else lowered.metavar


def parse_dataclass(cls: type[T], argv: list[str], *, default: T | None, prog: str, description: str,
                    aliases: dict[str, str] | None = None) -> T:
    """`cls` from `argv` over `default` (fields not given keep default's values; None: the class's
    defaults, where a field whose default is `tyro.MISSING` must be given: a required flag or positional,
    never an instance holding MISSING, which a type-checked `__init__` would refuse). Raises
    `ConfigError` with one line for anything tyro rejects or does not know; `--help` prints the
    help and raises SystemExit(0). The result is not validated: that is the caller's next step.
    `aliases` maps another spelling of a flag to its field's (`{"--kl-coef": "--beta"}`)."""
    aliases = aliases or {}
    used = {aliases[t.partition("=")[0]]: t.partition("=")[0] for t in argv if t.partition("=")[0] in aliases}
    argv = _spell_tri_states(cls, [_alias(token, aliases) for token in argv])

    def reject(event: tyro_errors.ParseErrorEvent) -> None:
        message = one_line_error(event, argv)
        for flag, typed in used.items():  # name the flag as the user spelled it
            message = message.replace(f"argument {flag}:", f"argument {typed}:")
        raise ConfigError(message)

    with tyro_errors.on_parse_error(reject):
        value, unknown = tyro.cli(cls, args=argv, prog=prog, description=description, return_unknown_args=True,
                                  **({} if default is None else {"default": default}))
    if unknown:
        raise ConfigError("unrecognized arguments: " + " ".join(unknown))
    return value


def split_flags(cls: type[T], argv: list[str], *, default: T, prog: str, description: str = "") -> tuple[T, list[str]]:
    """The flags of `cls`'s fields taken out of `argv` and parsed by tyro (`parse_dataclass`), and the
    rest of `argv` for the next parser: a command's flags that decide how the rest is read
    (`train`'s --algo, --resume and --preset pick the algorithm's dataclass and its defaults)."""
    names = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    mine, rest, i = [], [], 0
    while i < len(argv):
        flag = argv[i].partition("=")[0]
        name = flag.removeprefix("--").removeprefix("no-").replace("-", "_") if flag.startswith("--") else ""
        if name not in names:
            rest.append(argv[i])
        elif "=" in argv[i] or _is_bool(names[name]) or i + 1 == len(argv):
            mine.append(argv[i])
        else:
            mine += argv[i:i + 2]
            i += 1
        i += 1
    return parse_dataclass(cls, mine, default=default, prog=prog, description=description), rest


def _is_bool(f: dataclasses.Field) -> bool:
    return f.type in ("bool", bool)


def _is_tri_state(f: dataclasses.Field) -> bool:
    return f.type in ("bool | None", bool | None)


def _spell_tri_states(cls: type, argv: list[str]) -> list[str]:
    """A `bool | None` field (None: "decide later") given as `--x` / `--no-x`, argparse's
    BooleanOptionalAction spelling, becomes tyro's `--x True` / `--x False`."""
    if not dataclasses.is_dataclass(cls):
        return argv
    flags = {}
    for f in dataclasses.fields(cls):
        if _is_tri_state(f):
            flags[flag_of(f.name)] = flag_of(f.name) + "=True"
            flags["--no-" + flag_of(f.name)[2:]] = flag_of(f.name) + "=False"
    return [flags.get(token, token) for token in argv]


def _alias(token: str, aliases: dict[str, str]) -> str:
    """`token` with an aliased flag spelled as its field's (`--kl-coef=0.5` -> `--beta=0.5`)."""
    flag, eq, value = token.partition("=")
    return aliases[flag] + eq + value if flag in aliases else token


def given_fields(value: object, default: object) -> dict[str, object]:
    """The fields of `value` that differ from `default` (what the command line changed)."""
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)  # type: ignore[arg-type]
            if getattr(value, f.name) != getattr(default, f.name)}
