"""Command line: train a Bradley–Terry reward model on preference pairs.

    python -m rlhf_scratch.preferences --out pairs.jsonl --num-pairs 1000
    python -m rlhf_scratch.reward_model --pairs pairs.jsonl --run-dir runs/rm
    python -m rlhf_scratch.reward_model --resume runs/rm                 # after Ctrl-C
    python -m rlhf_scratch.reward_model --pairs pairs.jsonl --run-dir runs/rm --export-to rm_hf/
    python -m rlhf_scratch.train sentiment --reward-model runs/rm        # RLHF against it (or rm_hf/)

The model, loss and run folder are in `reward_modeling.py`; every field of `RewardModelArgs` is a
flag. A bad flag, file or folder is one line and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlhf_scratch.config import ConfigError


class _PreScan(argparse.ArgumentParser):
    def error(self, message: str):
        raise ConfigError(message)


PROG = "python -m rlhf_scratch.reward_model"
EXTRA = "Also: --resume RUN_DIR (continue an interrupted run), --export-to OUT (then write a GPT2ForSequenceClassification folder)."


def main(argv: list[str] | None = None) -> int:
    from rlhf_scratch.config.cli import given_fields, parse_dataclass
    from rlhf_scratch.engine.runs import start_over_hint, stopped_before_config
    from rlhf_scratch.reward.model import KIND, RewardModelArgs

    argv = sys.argv[1:] if argv is None else argv
    try:
        pre = _PreScan(add_help=False)
        pre.add_argument("--resume", default=None)
        pre.add_argument("--export-to", default=None)
        known, rest = pre.parse_known_args(argv)
        resume, export_to = known.resume, known.export_to
        parsed = parse_dataclass(RewardModelArgs, rest, default=RewardModelArgs(), prog=PROG,
                                 description=__doc__.split("\n\n")[0] + " " + EXTRA)
        opts = given_fields(parsed, RewardModelArgs())
        if resume is not None:
            config = Path(resume) / "config.json"
            if not config.is_file():
                if stopped_before_config(resume):
                    raise ConfigError(f"resume: {resume}: {start_over_hint(resume, 'it wrote config.json')}")
                raise ConfigError(f"resume: {resume} is not a reward-model run folder (no config.json)")
            saved = json.loads(config.read_text())
            if saved.pop("algo", None) != KIND:
                raise ConfigError(f"resume: {resume} is not a reward-model run folder")
            args = RewardModelArgs(**saved)
            args.run_dir = resume
            for name in ("threads", "device", "quiet"):
                if opts.get(name) is not None:
                    setattr(args, name, opts[name])
        else:
            args = parsed
        args.validate()
        if export_to is not None:
            out = Path(export_to)
            if out.exists() and (not out.is_dir() or any(out.iterdir())):
                raise ConfigError(f"export_to: {out} exists and is not an empty folder; choose a new one")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return int(e.code or 0)

    from rlhf_scratch.engine.lifecycle import TrainingStopped
    from rlhf_scratch.engine.reward_model import train_reward_model
    from rlhf_scratch.models.loading import HubUnreachableError

    try:
        run_dir = train_reward_model(args, resume=resume is not None)
        if export_to is not None:
            from rlhf_scratch.commands.export import export_reward_model

            export_reward_model(run_dir, export_to)
            print(f"exported {run_dir} -> {export_to}  (AutoModelForSequenceClassification.from_pretrained)")
    except (ValueError, OSError, HubUnreachableError) as e:  # ConfigError, PairsError, RunFolderError, ...
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    except TrainingStopped as e:  # Ctrl-C or SIGTERM: the step finished, a checkpoint was written
        print(e, file=sys.stderr)  # ends with the resume command
        return e.exit_code
    print(f"done: {run_dir}\n"
          f"  train against it:  python -m rlhf_scratch.train sentiment --reward-model {run_dir}\n"
          f"  export it:         python -m rlhf_scratch.export {run_dir} OUT_DIR")
    return 0


if __name__ == "__main__":
    sys.exit(main())
