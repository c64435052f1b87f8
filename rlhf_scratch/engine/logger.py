"""What a run shows and writes while it trains, for every algorithm: one line per phase on the
console, `metrics.jsonl`, the blog's sample tables (`samples.md`), `curves.png`, and W&B.

Trainers never touch files or W&B: they return metrics and a `Rollout`, the loop hands both here.
"""

from __future__ import annotations

import os
from pathlib import Path

from tabulate import tabulate
from tqdm.auto import tqdm

from rlhf_scratch.config import CommonArgs
from rlhf_scratch.engine.runs import SAMPLES_FILE, append_metrics, cut_metrics
from rlhf_scratch.pages.plots import plot_training_curves
from rlhf_scratch.rollout.phase import Rollout

Metrics = dict[str, float | int]


def sample_table(rollout: Rollout, n: int = 5) -> str:
    """The blog's table of a rollout: reward, the reference's log-prob of the completion, sample."""
    if rollout.ref_logprobs is None:  # no reference forward ran (GRPO at β = 0)
        ref_logprob = [float("nan")] * len(rollout)
    else:
        ref_logprob = rollout.ref_logprobs.masked_fill(~rollout.completion_mask, 0.0).sum(-1).tolist()
    rows = [
        [f"{reward:.3f}", f"{ref_lp:.2f}", repr(text)]
        for reward, ref_lp, text in zip(rollout.rewards[:n].tolist(), ref_logprob[:n], rollout.texts[:n])
    ]
    return tabulate(rows, headers=["reward", "ref logprob", "sample"], tablefmt="github")


class RunLogger:
    """Writes one run's metrics, sample tables and curves into its run folder (and W&B)."""

    def __init__(self, run_dir: Path, args: CommonArgs, quiet: bool = False):
        self.run_dir, self.args, self.quiet = run_dir, args, quiet
        self.history: list[Metrics] = []
        self._summary = ""
        self._wandb = self._init_wandb() if args.wandb else None

    def resume_at(self, phase: int) -> None:
        """Continue a run after `phase`: drop anything logged for later phases (written after the
        checkpoint, before the interruption) so no phase is duplicated or missing."""
        self.history = cut_metrics(self.run_dir, phase)
        samples_path = self.run_dir / SAMPLES_FILE
        if samples_path.is_file():
            sections = samples_path.read_text().split("## phase ")
            keep = [sec for sec in sections[1:] if int(sec.split("\n", 1)[0]) <= phase]
            samples_path.write_text(sections[0] + "".join("## phase " + sec for sec in keep))

    def log_phase(self, metrics: Metrics) -> None:
        """Append one phase's metrics everywhere; its one-line summary is printed with the next table."""
        self.history.append(metrics)
        append_metrics(self.run_dir, metrics)
        if self._wandb is not None:
            self._wandb.log(metrics, step=int(metrics["phase"]))
        self._summary = (  # printed with the next sample table: the bar shows every phase
            f"phase {int(metrics['phase']):>3}/{self.args.total_phases} | reward "
            f"{metrics['rewards/mean']:.3f} ± {metrics['rewards/std']:.3f} | kl {metrics['rollout/kl_full_vocab']:.4f} | "
            f"entropy {metrics['rollout/entropy_full_vocab']:.3f} | length {metrics['completions/mean_length']:.1f} | "
            f"{metrics['charts/phase_time']:.1f}s"
        )

    def log_samples(self, phase: int, rollout: Rollout, force: bool = False) -> None:
        """The sample table (every `table_every`) and the curves (every `plot_every`), each also at
        the first phase and when forced (the last)."""
        if force or phase == 1 or phase % self.args.plot_every == 0:
            plot_training_curves(self.history, self.run_dir)
        if not (force or phase == 1 or phase % self.args.table_every == 0):
            return
        table = sample_table(rollout)
        self.say(f"{self._summary}\nphase {phase} samples\n{table}\n")
        with open(self.run_dir / SAMPLES_FILE, "a") as f:
            f.write(f"## phase {phase}\n\n{table}\n\n")

    def finish(self) -> None:
        if self.history:
            plot_training_curves(self.history, self.run_dir)
        if self._wandb is not None:
            self._wandb.finish()

    def say(self, text: str) -> None:
        if not self.quiet:
            tqdm.write(text)

    def _init_wandb(self):
        import wandb

        kwargs = dict(project=self.args.wandb_project, config=self.args.to_dict(), dir=str(self.run_dir),
                      name=self.run_dir.name)
        try:
            return wandb.init(**kwargs, mode=os.environ.get("WANDB_MODE") or "online",
                              settings=wandb.Settings(init_timeout=30))
        except Exception as e:  # no network or no login: keep the log locally
            self.say(f"wandb: online init failed ({type(e).__name__}); logging offline in {self.run_dir}")
            return wandb.init(**kwargs, mode="offline")
