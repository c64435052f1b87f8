"""Command line: `python -m rlhf_scratch.train TASK [--field value …]`.

    python -m rlhf_scratch.train sentiment                  # tiny preset, offline, minutes on a CPU
    python -m rlhf_scratch.train sentiment --direction neg
    python -m rlhf_scratch.train sentiment --preset gpt2    # the blog's GPT-2 + distilbert-imdb
    python -m rlhf_scratch.train periods --total-phases 30

Every RLHFArgs field is a flag (`--kl-coef 1.0`, `--no-prepend-bos`, …); `--help` lists them with
their defaults. A bad value stops the run at start with one line naming the field.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import sys
import textwrap

from rlhf_scratch.config import PRESETS, TASKS, RLHFArgs, make_args


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each dataclass field, by field name."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())  # type: ignore[union-attr]
    return docs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m rlhf_scratch.train",
        description="PPO RLHF of a language model toward a reward (the blog's trainer).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog=f"Presets: {', '.join(PRESETS)}; the gpt2 preset overrides: "
        + ", ".join(f"{k}={v}" for k, v in PRESETS["gpt2"].items()),
    )
    parser.add_argument("task", help=f"reward to maximise: {', '.join(TASKS)}")
    docs = field_docs(RLHFArgs)
    for f in dataclasses.fields(RLHFArgs):
        if f.name == "task":
            continue
        flag = "--" + f.name.replace("_", "-")
        kwargs: dict = dict(default=None, help=docs.get(f.name, ""), dest=f.name)
        kwargs["help"] += f" (default: {f.default})"
        if f.type in ("bool", bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
        else:
            kind = {"int": int, "float": float, "float | None": float}.get(str(f.type), str)
            parser.add_argument(flag, type=kind, **kwargs)
    # ArgumentDefaultsHelpFormatter would print "None" for every flag: defaults are in the help text
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def main(argv: list[str] | None = None) -> int:
    opts = vars(build_parser().parse_args(argv))
    preset = opts.pop("preset") or "tiny"
    from rlhf_scratch.loading import HubUnreachableError
    from rlhf_scratch.trainer import RLHFTrainer

    try:
        args = make_args(preset, **opts)

        trainer = RLHFTrainer(args)  # loads the models: a bad name or an unreachable Hub fails here
        run_dir = trainer.start_run()  # a run folder that would overwrite another fails here
    except (ValueError, HubUnreachableError) as e:  # ConfigError, RunFolderError, no Hub: one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    trainer.train()
    print(f"done: {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
