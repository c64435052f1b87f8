"""Sample the tuned model beside the reference, with the run's reward and the KL between them.

    python -m rlhf_scratch.sample runs/<run>                              # the run's own prefix
    python -m rlhf_scratch.sample runs/<run> "I expected" "The plot" -n 4
    echo "Two hours of" | python -m rlhf_scratch.sample runs/<run> --temperature 0.7 --top-k 0

For each prompt, `-n` completions of each model, drawn with the same seed and the run's sampling
settings unless a flag overrides them. Each row: the reference's completion and reward, the
tuned model's completion and reward, and the tuned sample's KL to the reference,
Σ_t KL(π(·|s_t) ‖ π_ref(·|s_t)) over its kept tokens (nats), as the training log computes it.
Runs offline on any run folder (PPO, RLOO, Online DPO). An instruct model is prompted through its
chat template as in training (the run's --chat-template, or this one's); the table shows the
prompts as typed and the completions' own text. The flags are parsed before torch is imported, so
`--help` and a bad flag answer at once.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

import tyro
from tabulate import tabulate

from rlhf_scratch.config import ConfigError, check_seed
from rlhf_scratch.config.cli import parse_dataclass
from rlhf_scratch.config.command import command

if TYPE_CHECKING:
    import torch

    from rlhf_scratch.rollout.phase import Rollout


def sample_both(run, prompts: list[str], n: int, gen_len: int, temperature: float, top_k: int,
                stop_at_eos: bool, seed: int) -> tuple[Rollout, Rollout]:
    """`n` completions of each prompt from the reference and from the tuned model (each scored
    against the reference and rewarded with the run's reward), with the same seed."""
    import torch

    from rlhf_scratch.reward.tasks import make_reward_fn
    from rlhf_scratch.rollout.generation import use_chat_template
    from rlhf_scratch.rollout.phase import make_rollout

    reward_fn = make_reward_fn(run.args)
    rollouts = []
    for model in (run.reference, run.tuned):
        use_chat_template(model, run.args.chat_template)  # prompted as in training
        torch.manual_seed(seed)
        rollouts.append(make_rollout(
            model.eval(), run.reference, prompts, reward_fn, num_generations=n, gen_len=gen_len,
            temperature=temperature, top_k=top_k, prepend_bos=run.args.prepend_bos, stop_at_eos=stop_at_eos,
        ))
    return rollouts[0], rollouts[1]


def one_line(text: str) -> str:
    """A completion on one table row: newlines shown as \\n (a raw one would break the row)."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def sequence_kl(rollout: Rollout) -> torch.Tensor:
    """Σ_t KL_t over each sample's kept tokens, nats."""
    import torch

    return torch.where(rollout.completion_mask, rollout.kl, torch.zeros_like(rollout.kl)).sum(-1)


def side_by_side(reference: Rollout, tuned: Rollout) -> str:
    rows = [
        [one_line(prompt), one_line(ref_text), f"{ref_r:.3f}", one_line(text), f"{r:.3f}", f"{kl:.2f}"]
        for prompt, ref_text, ref_r, text, r, kl in zip(
            tuned.prompts, reference.completions, reference.scores.tolist(), tuned.completions,
            tuned.scores.tolist(), sequence_kl(tuned).tolist())
    ]
    return tabulate(rows, headers=["prompt", "reference", "reward", "tuned", "reward", "KL"], tablefmt="github")


PROG = "python -m rlhf_scratch.sample"


@dataclass
class SampleArgs:
    """Reference and tuned completions side by side, with the run's reward and the KL between them."""

    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")] = tyro.MISSING
    """A finished run folder (refused while a process trains it)."""
    prompts: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="PROMPT ...")] = ()
    """Prompts (default: stdin lines if piped, else the run's prefix)."""
    n: Annotated[int, tyro.conf.arg(aliases=("-n",))] = 4
    """Completions per prompt and model."""
    gen_len: int | None = None
    """Tokens per completion (None: the run's)."""
    temperature: float | None = None
    """Sampling temperature (None: the run's)."""
    top_k: int | None = None
    """0 = the whole vocabulary (None: the run's)."""
    stop_at_eos: bool | None = None
    """End completions at EOS: --stop-at-eos / --no-stop-at-eos (None: the run's)."""
    chat_template: Literal["auto", "none"] | None = None
    """auto: prompt through the model's chat template if it has one; none: plain text (None: the run's)."""
    seed: int = 0
    """Seeds both models' draws alike."""


def parse(argv: list[str]) -> SampleArgs:
    """The command line, its own values checked (the run's are checked once it is loaded)."""
    opts = parse_dataclass(SampleArgs, argv, default=None, prog=PROG, description=__doc__.split("\n\n")[0])
    if opts.n < 1:
        raise ConfigError(f"-n: must be >= 1; got {opts.n}")
    check_seed(opts.seed)
    return opts


def main(argv: list[str] | None = None) -> int:
    """The command: `command()` owns its one-line errors and exit codes."""
    return command(parse, run, argv)


def run(opts: SampleArgs) -> int:
    """Load the run, sample both models and print the table."""
    from rlhf_scratch.engine.runs import load_run, reward_shown
    from rlhf_scratch.rollout.generation import prompt_tokens, use_chat_template

    prompts = list(opts.prompts) or ([line.rstrip("\n") for line in sys.stdin if line.strip()] if not sys.stdin.isatty() else [])
    run = load_run(opts.run_dir)
    args = run.args
    prompts = prompts or [args.prefix]
    for name, value in (("gen_len", opts.gen_len), ("temperature", opts.temperature), ("top_k", opts.top_k),
                        ("stop_at_eos", opts.stop_at_eos), ("chat_template", opts.chat_template)):
        if value is not None:
            setattr(args, name, value)
    args.validate()
    use_chat_template(run.tuned, args.chat_template)
    longest = max(len(prompt_tokens(run.tuned, p, args.prepend_bos)) for p in prompts)
    if longest + args.gen_len > run.tuned.cfg.n_ctx:
        raise ConfigError(f"prompts: the longest is {longest} tokens; with gen_len {args.gen_len} it exceeds "
                          f"the context of {run.tuned.cfg.n_ctx} tokens")
    reference, tuned = sample_both(run, prompts, opts.n, args.gen_len, args.temperature, args.top_k,
                                   args.eos_stops(), opts.seed)
    print(reward_shown(run.path, run.args))
    print(side_by_side(reference, tuned))
    print(f"\nmean reward: reference {reference.scores.mean():.3f}, tuned {tuned.scores.mean():.3f}; "
          f"mean KL of a tuned sample to the reference {sequence_kl(tuned).mean():.2f} nats")
    return 0


if __name__ == "__main__":
    sys.exit(main())
