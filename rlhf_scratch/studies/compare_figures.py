"""The comparison's figures (`python -m rlhf_scratch.compare`, `studies.compare`): reward per phase,
the reward–KL frontier and the held-out judges, each group's curve the mean over its seeds with its
95 % band (`runner.draw_band`), and the inside view of each tuned model (`interp.across_runs`).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from rlhf_scratch.pages.html import new_figure, save_figure
from rlhf_scratch.studies.runner import draw_band
from rlhf_scratch.studies.stats import mean_interval


def _band(ax, runs: list[list[dict]], x_key: str, y_key: str, label: str) -> None:
    """A curve over a group's runs (one list of metrics per seed): the mean with its 95 % band."""
    draw_band(ax, [[m[x_key] for m in r] for r in runs], [[m[y_key] for m in r] for r in runs], label=label)


HELDOUT_PANELS = [("rewards/mean", "proxy reward"), ("eval/vader", "held-out: VADER"),
                  ("eval/ref_logprob_per_token", "held-out: reference log-prob / token"),
                  ("eval/repeated_3grams", "held-out: repeated 3-grams")]


def plot_comparison(groups: dict[str, list[list[dict]]], out: Path, last: int) -> list[Path]:
    """reward_vs_phase.png, frontier.png, heldout.png from each group's runs' metrics (one list per
    seed). On the frontier each group's final point (the means of the last `last` phases, the
    study's `compare.LAST`, averaged over the seeds) carries its 95 % intervals on both axes when it
    has two seeds or more."""
    fig, ax = new_figure(figsize=(6.4, 4.0))
    for name, runs in groups.items():
        _band(ax, runs, "phase", "rewards/mean", name)
    ax.set(xlabel="phase", ylabel="proxy reward (training reward)", title="reward per phase")
    ax.grid(alpha=0.3), ax.legend()
    paths = [save_figure(fig, out / "reward_vs_phase.png")]

    fig, ax = new_figure(figsize=(6.4, 4.0))
    for colour, (name, runs) in enumerate(groups.items()):
        for i, r in enumerate(runs):
            ax.plot([x["rollout/kl_full_vocab"] for x in r], [x["rewards/mean"] for x in r], marker=".", alpha=0.6,
                    label=name if i == 0 else None, color=f"C{colour}")
        if len(runs) > 1:
            ikl, ireward = (mean_interval([statistics.mean(x[key] for x in r[-last:]) for r in runs])
                            for key in ("rollout/kl_full_vocab", "rewards/mean"))
            ax.errorbar([ikl.mean], [ireward.mean], xerr=[ikl.half_width], yerr=[ireward.half_width], color=f"C{colour}",
                        marker="s", ms=6, capsize=3, zorder=3)
    ax.set(xlabel="KL(π‖π_ref), nats per token", ylabel="proxy reward", title="the reward–KL frontier (a point per phase)")
    ax.grid(alpha=0.3), ax.legend()
    paths.append(save_figure(fig, out / "frontier.png"))

    fig, axes = new_figure(1, len(HELDOUT_PANELS), figsize=(4.2 * len(HELDOUT_PANELS), 3.6))
    for ax, (key, title) in zip(axes, HELDOUT_PANELS):
        for name, runs in groups.items():
            if key in runs[0][0]:
                _band(ax, runs, "phase", key, name)
        ax.set(xlabel="phase", title=title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    paths.append(save_figure(fig, out / "heldout.png"))
    return paths


def inside_view(run_dirs: dict[str, Path], out: Path) -> tuple[Path, dict]:
    """interp.across_runs on one run per curve (`run_dirs`, by label): residual drift, head DLA change, similarity."""
    from interp.across_runs import change_similarity, inside_changes, plot_inside_changes
    from interp.probes import REVIEW_PROMPTS
    from rlhf_scratch.engine.runs import load_run

    runs = {name: load_run(run_dir) for name, run_dir in run_dirs.items()}
    reference = next(iter(runs.values())).reference
    changes = inside_changes(reference, {name: run.tuned for name, run in runs.items()}, list(REVIEW_PROMPTS))
    sim = change_similarity(changes)
    summary = {"labels": [c.label for c in changes],
               "dla_change_cosine": [[None if v != v else round(v, 3) for v in row] for row in sim.tolist()],
               "logit_diff_change": {c.label: round(c.logit_diff_change, 3) for c in changes},
               "final_drift": {c.label: round(c.drift[-1].item(), 4) for c in changes},
               "head_dla_change": {c.label: [[round(v, 4) for v in row] for row in c.head_dla_change.tolist()] for c in changes}}
    return plot_inside_changes(changes, out / "inside.png"), summary
