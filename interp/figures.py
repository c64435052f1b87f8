"""The interp pages' figure types: layer x head heatmaps, lines and bars over labelled sites, and a
(site, position) heatmap. Each draws one PNG into `out_dir / name` and returns its path.

Every figure is a `matplotlib.figure.Figure` made without pyplot (`rlhf_scratch.pages.html.new_figure`): no
backend is chosen here, so a notebook's own figures keep showing after a report is drawn."""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from rlhf_scratch.pages.html import new_figure, save_figure


def heatmaps(
    panels: list[tuple[str, Tensor]], out_dir: Path, name: str, unit: str,
    diverging: bool = True, own_scale: tuple[int, ...] = (),
) -> Path:
    """One layer x head heatmap per panel, sharing one colour scale except the panels in `own_scale`.

    Diverging colormaps are centred at 0.
    """
    fig, axes = new_figure(1, len(panels), figsize=(3.6 * len(panels) + 0.8, 3.2), squeeze=False)

    def peak(i_s: list[int]) -> float:
        return max([float(panels[i][1].abs().nan_to_num().max()) for i in i_s] + [0.0]) or 1.0

    shared = peak([i for i in range(len(panels)) if i not in own_scale])
    for i, (ax, (title, data)) in enumerate(zip(axes[0], panels)):
        vmax = peak([i]) if i in own_scale else shared
        data = data.detach().cpu().numpy()
        kw = dict(cmap="RdBu", vmin=-vmax, vmax=vmax) if diverging else dict(cmap="viridis", vmin=0, vmax=vmax)
        im = ax.imshow(data, aspect="auto", **kw)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_xticks(range(data.shape[1]))
        ax.set_yticks(range(data.shape[0]))
        fig.colorbar(im, ax=ax, label=unit, shrink=0.85)
    return save_figure(fig, out_dir / name)


def lines(x_labels: list[str], series: dict[str, list[float]], out_dir: Path, name: str, title: str, unit: str) -> Path:
    """One line per series over the labelled x positions, with y = 0 marked."""
    fig, ax = new_figure(figsize=(6.4, 3.4))
    for label, values in series.items():
        ax.plot(range(len(values)), values, marker="o", label=label)
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xticks(range(len(x_labels)), x_labels, rotation=45, fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return save_figure(fig, out_dir / name)


def bars(x_labels: list[str], series: dict[str, list[float]], out_dir: Path, name: str, title: str, unit: str) -> Path:
    """Grouped bars: one bar per series at each labelled x position."""
    fig, ax = new_figure(figsize=(6.8, 3.4))
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series.items()):
        ax.bar([j + i * width for j in range(len(values))], values, width, label=label)
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(x_labels))], x_labels, rotation=45, fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return save_figure(fig, out_dir / name)


def position_heatmap(fraction: Tensor, sites: list[str], str_tokens: list[str], out_dir: Path, name: str) -> Path:
    """Residual patching per (site, position): the fraction of the gap recovered, on a -1..1 scale."""
    fig, ax = new_figure(figsize=(0.5 * len(str_tokens) + 2.5, 0.45 * len(sites) + 1.8))
    im = ax.imshow(fraction.nan_to_num().numpy(), cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
    ax.set_xticks(range(len(str_tokens)), [repr(t)[1:-1] for t in str_tokens], rotation=90, fontsize=7)
    ax.set_yticks(range(len(sites)), sites, fontsize=8)
    ax.set_title("fraction of the logit-diff gap recovered, patching one (site, position)", fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.85)
    return save_figure(fig, out_dir / name)
