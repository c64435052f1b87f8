"""Figures of a training run (matplotlib, written as PNG; imported when the first figure is drawn,
not when a run starts: a run that never plots never pays for it).

A figure here is a `matplotlib.figure.Figure` made without pyplot: training never chooses a
backend, so a notebook that trains a run keeps showing its own figures afterwards."""

from __future__ import annotations

from pathlib import Path


def plot_training_curves(history: list[dict[str, float | int]], run_dir: str | Path, name: str = "curves.png") -> Path:
    """Reward (mean ± std) and KL(π‖π_ref) per phase, side by side, saved in `run_dir`."""
    from matplotlib.figure import Figure

    phases = [m["phase"] for m in history]
    mean = [m["rewards/mean"] for m in history]
    std = [m["rewards/std"] for m in history]
    fig = Figure(figsize=(10, 3.6))
    ax_r, ax_kl = fig.subplots(1, 2)
    ax_r.plot(phases, mean, color="tab:blue")
    ax_r.fill_between(phases, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                      color="tab:blue", alpha=0.2)
    ax_r.set(xlabel="phase", ylabel="reward", title="reward (mean ± std)")
    ax_kl.plot(phases, [m["rollout/kl_full_vocab"] for m in history], color="tab:red")
    ax_kl.set(xlabel="phase", ylabel="nats / token", title="KL(π ‖ π_ref)")
    for ax in (ax_r, ax_kl):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(run_dir) / name
    fig.savefig(path, dpi=110)  # not registered with pyplot: nothing to close
    return path
