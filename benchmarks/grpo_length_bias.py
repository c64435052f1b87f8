"""The length-bias lesson of docs/grpo.md: GRPO's loss_type grpo vs dr_grpo vs dapo, and RLOO, at
equal generated tokens (same prompts, batch, G, phases, seed), on review openings that end at EOS.

    python benchmarks/grpo_length_bias.py run grpo runs/lb-grpo          # one run (also dr_grpo, dapo, rloo)
    python benchmarks/grpo_length_bias.py plot runs/lb-grpo runs/lb-dr_grpo runs/lb-dapo runs/lb-rloo

Every run: tiny preset, task sentiment, --prompts rt, batch 64 = 8 prompts × G 8, β = 0 (the
reference is run only to measure the KL), top_k 0. GRPO logs completions/mean_length_neg_adv and
_pos_adv itself; for RLOO this script adds them from RLOO's own (leave-one-out) advantages.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

SETTINGS = dict(task="sentiment", prompts="rt", total_phases=40, batch_size=64, num_generations=8, top_k=0,
                beta=0.0, seed=1, threads=1, save_every=10)


def run(variant: str, run_dir: str) -> None:
    from rlhf_scratch.config import make_args

    if variant == "rloo":
        trainer = rloo_with_lengths()(make_args("tiny", "rloo", run_dir=run_dir, **SETTINGS))
    else:
        from rlhf_scratch.algorithms.grpo import GRPOTrainer

        trainer = GRPOTrainer(make_args("tiny", "grpo", run_dir=run_dir, loss_type=variant, measure_kl=True, **SETTINGS))
    trainer.train(Path(run_dir))


def rloo_with_lengths() -> type:
    """RLOOTrainer that also logs GRPO's completions/mean_length_neg_adv and _pos_adv, from RLOO's own
    leave-one-out advantages (of the KL-shaped rewards, as RLOO's learning phase computes them)."""
    from rlhf_scratch.algorithms.grpo import mean_length_by_advantage_sign
    from rlhf_scratch.algorithms.rloo import RLOOTrainer, compute_kl_shaped_rewards, compute_rloo_advantages

    class RLOOWithLengths(RLOOTrainer):  # a subclass, not a patched method: the loop checks what it logs
        METRICS = (*RLOOTrainer.METRICS, "completions/mean_length_neg_adv", "completions/mean_length_pos_adv")

        def learning_phase(self, rollout):
            args = self.args
            shaped = compute_kl_shaped_rewards(rollout.rewards, rollout.logprobs, rollout.ref_logprobs,
                                               rollout.completion_mask, args.beta)
            advantages = compute_rloo_advantages(shaped, args.num_generations)
            return {**super().learning_phase(rollout), **mean_length_by_advantage_sign(rollout.lengths, advantages)}

    return RLOOWithLengths


def smooth(xs: list[float], k: int = 5) -> list[float]:
    """Trailing mean over the last k finite values (a phase's batch is 8 prompts: noisy)."""
    out = []
    for i in range(len(xs)):
        window = [x for x in xs[max(0, i - k + 1) : i + 1] if not math.isnan(x)]
        out.append(sum(window) / len(window) if window else float("nan"))
    return out


def plot(run_dirs: list[str], out: str = "docs/figures/grpo_length_bias.png") -> None:
    from interp.pages import new_figure, save_figure

    panels = [("rewards/mean", "reward (sentiment)"), ("rollout/kl_full_vocab", "KL(π‖π_ref), nats / token"),
              ("completions/mean_length", "mean completion length, tokens"),
              ("completions/mean_length_neg_adv", "length of completions with A < 0"),
              ("completions/mean_length_pos_adv", "length of completions with A > 0"),
              ("length_gap", "length(A < 0) − length(A > 0)")]
    fig, axes = new_figure(2, 3, figsize=(14.0, 7.0))
    for run_dir in run_dirs:
        metrics = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
        config = json.loads((Path(run_dir) / "config.json").read_text())
        label = f"GRPO loss_type={config['loss_type']}" if config["algo"] == "grpo" else "RLOO"
        for m in metrics:
            m["length_gap"] = m["completions/mean_length_neg_adv"] - m["completions/mean_length_pos_adv"]
        phases = [m["phase"] for m in metrics]
        for ax, (key, title) in zip(axes.flat, panels):
            ax.plot(phases, smooth([m[key] for m in metrics]), label=label)
            ax.set(title=title, xlabel="phase")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("tiny preset, --prompts rt (EOS ends completions), batch 64 = 8 prompts × 8, β = 0; "
                 "trailing 5-phase means", fontsize=10)
    save_figure(fig, Path(out))
    print(f"wrote {out}")


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    else:
        plot(sys.argv[2:])
