"""`rlhf`: one front door for every command (as TRL's `trl`), installed by pyproject's [project.scripts].

    rlhf train sentiment --algo rloo          # = python -m rlhf_scratch.train sentiment --algo rloo
    rlhf compare sentiment --seeds 1,2,3
    rlhf --help                               # the commands, one line each
    rlhf train --help                         # a command's own flags

Each sub-command runs the `main(argv)` of the module its `python -m` path runs, with the same flags,
the same one-line errors and exit codes (`config.command`). The module is imported only when its
command is asked for, so `rlhf --help` and a misspelt command answer at once.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    # name: (the module whose main(argv) runs it, one line for `rlhf --help`)
    "train": ("rlhf_scratch.commands.train", "RLHF toward a task's reward: PPO, RLOO, Online DPO, GRPO (--algo)"),
    "sample": ("rlhf_scratch.commands.sample", "a run's tuned completions beside the reference's, with reward and KL"),
    "export": ("rlhf_scratch.commands.export", "a run as a Hugging Face model folder (policy or reward model)"),
    "compare": ("rlhf_scratch.commands.compare", "the algorithms side by side over seeds: frontier, judges, inside view"),
    "data": ("rlhf_scratch.commands.data", "a task's problems as verl's data files: train.parquet, test.parquet"),
    "preferences": ("rlhf_scratch.commands.preferences", "preference pairs labelled by a gold reward"),
    "reward-model": ("rlhf_scratch.commands.reward_model", "a Bradley-Terry reward model trained on preference pairs"),
    "overoptimization": ("rlhf_scratch.commands.overoptimization", "the Gao et al. reward over-optimisation study"),
    "hacking": ("rlhf_scratch.studies.hacking.__main__", "RL against flawed proxies over seeds: does gold fall as proxy rises?"),
    "hacking-pilot": ("rlhf_scratch.studies.hacking.pilot", "flawed raters' proxies, and whether RL hacks them (issue 46)"),
    "hacking-bon": ("rlhf_scratch.studies.hacking.bon", "best-of-n against a flawed proxy, exactly, over sampling seeds"),
    "hacking-mitigate": ("rlhf_scratch.studies.hacking.mitigate", "early stopping, KL penalty, ensembles against the hack: the table"),
    "hacking-find": ("rlhf_scratch.studies.hacking.find", "find the hack from the model: the proxy-gold gap decomposed, a causal check"),
    "pass-at-k": ("rlhf_scratch.studies.rlvr", "does RL add what the base model lacks? pass@k of base and GRPO-tuned, over seeds"),
    "calculator-study": ("rlhf_scratch.studies.calculator", "does the tool help RL? held-out accuracy with the calculator against without, over seeds"),
    "length": ("rlhf_scratch.studies.length", "GRPO's length bias on a right/wrong task, over seeds"),
    "features-seeds": ("rlhf_scratch.studies.features_seeds", "the features view's claims over seeds, replicated or not"),
    "report": ("interp.report", "the interpretability report of a run: logits, residual, heads, neurons"),
    "features": ("interp.features", "sparse-autoencoder features of what RLHF changed"),
    "exact": ("rlhf_scratch.microscope.cli", "every gradient estimator against the exact gradient (the microscope)"),
    "families": ("rlhf_scratch.models.families", "a random-init Hugging Face folder of a model family"),
    "pretrain": ("rlhf_scratch.commands.pretrain", "rebuild the offline tiny preset from scratch"),
    "pretrain-arithmetic": ("rlhf_scratch.commands.arithmetic_lm", "build the arithmetic task's model from scratch, stopped partly right"),
    "notebooks": ("rlhf_scratch.course.execute_notebooks", "execute (or --check) the course's notebooks"),
}


def usage() -> str:
    """`rlhf --help`: the commands, one line each."""
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {line}" for name, (_, line) in COMMANDS.items()]
    return "\n".join(["usage: rlhf COMMAND [ARGS ...]   (rlhf COMMAND --help: its flags)", "",
                      "RLHF from scratch: every command of rlhf_scratch behind one door.", "", "commands:", *lines])


def main(argv: list[str] | None = None) -> int:
    """Run `rlhf COMMAND ARGS...`: the command's own main(ARGS), its exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(usage())
        return 0
    if not argv or argv[0] not in COMMANDS:
        got = f"unknown command {argv[0]!r}" if argv else "a command is required"
        print(f"error: {got}; one of {', '.join(COMMANDS)} (rlhf --help)", file=sys.stderr)
        return 2
    module, _ = COMMANDS[argv[0]]
    return importlib.import_module(module).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
