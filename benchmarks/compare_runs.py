"""Put finished run folders side by side: one figure (reward vs phase, reward vs KL) and a table.

    python benchmarks/compare_runs.py runs/ppo runs/rloo runs/dpo --labels PPO,RLOO,"Online DPO" \
        --out docs/figures/algos.png [--wall 303,250,260 --peak-mib 900,800,800]

The table (markdown, printed) gives the reward of phase 1, the mean reward and per-token
KL(π‖π_ref) of the last 10 phases, the mean completion length of the last 10 phases, and — when
given, e.g. measured with `/usr/bin/time -v` around each run — wall time and peak memory.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from rlhf_scratch.engine.runs import load_args, read_metrics
from rlhf_scratch.pages.html import new_figure, save_figure

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling provenance.py
from provenance import describe, provenance  # noqa: E402


def default_label(run: str) -> str:
    """The folder name (runs/<task>-<direction>-<algo>-<time>), led by the algorithm for an older
    folder whose name does not carry it."""
    name, algo = Path(run).name, load_args(run).algo
    return name if f"-{algo}-" in name else f"{algo} {name}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--labels", default=None)
    parser.add_argument("--out", required=True)
    parser.add_argument("--wall", default=None, help="comma-separated wall seconds, one per run")
    parser.add_argument("--peak-mib", default=None, help="comma-separated peak RSS in MiB, one per run")
    parser.add_argument("--title", default="")
    opts = parser.parse_args()
    labels = opts.labels.split(",") if opts.labels else [default_label(r) for r in opts.runs]
    walls = opts.wall.split(",") if opts.wall else [""] * len(opts.runs)
    peaks = opts.peak_mib.split(",") if opts.peak_mib else [""] * len(opts.runs)

    fig, (ax_r, ax_f) = new_figure(1, 2, figsize=(11.0, 4.0))  # a Figure of its own: no backend, no pyplot
    rows, lengths = [], []
    for run, label, wall, peak in zip(opts.runs, labels, walls, peaks):
        m = read_metrics(run)
        lengths.append(len(m))
        phases = [x["phase"] for x in m]
        reward = [x["rewards/mean"] for x in m]
        kl = [x["rollout/kl_full_vocab"] for x in m]
        ax_r.plot(phases, reward, label=label)
        ax_f.plot(kl, reward, marker=".", linestyle="-", alpha=0.7, label=label)
        last = m[-10:]
        rows.append([label, f"{reward[0]:.3f}", f"{statistics.mean(x['rewards/mean'] for x in last):.3f}",
                     f"{statistics.mean(x['rollout/kl_full_vocab'] for x in last):.3f}",
                     f"{statistics.mean(x['completions/mean_length'] for x in last):.1f}",
                     f"{statistics.median(x['charts/phase_time'] for x in m):.2f}",
                     f"{float(wall):.0f} s" if wall else "", f"{float(peak):,.0f} MiB" if peak else ""])
    ax_r.set(xlabel="phase", ylabel="mean reward", title="reward per phase")
    ax_f.set(xlabel="KL(π‖π_ref), nats / token", ylabel="mean reward", title="reward vs KL (each point a phase)")
    for ax in (ax_r, ax_f):
        ax.grid(alpha=0.3)
        ax.legend()
    if opts.title:
        fig.suptitle(opts.title)
    save_figure(fig, Path(opts.out))
    spans = {(min(10, n), n) for n in lengths}
    last = f"last {spans.pop()[0]} of {lengths[0]}" if len(spans) == 1 else "last 10 (fewer in shorter runs)"
    header = ["run", "reward, phase 1", f"reward, {last}", f"KL, {last}", f"length, {last}",
              "median phase s", "wall", "peak RSS"]
    print(f"drawn at {describe(provenance())} (the figure's checkout, not necessarily the runs')")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
