"""The pieces every HTML page here is made of: the interp report, its features page, the studies'
pages and the microscope's all use these, so a page looks and embeds the same.

- `PAGE_STYLE`, `page(title, body)`   the CSS and the whole-page wrapper (doctype, title, style);
- `esc`, `Html`, `table(rows)`        escaping, text that is already HTML, a table;
- `figure(path, title, caption)`      a PNG embedded in the page (base64), so one file is the page;
- `findings_html`, `bullets`, `figures_html`, `generated_in`   what the report pipelines' pages share:
                                      the findings first, the figures in order, how long it took;
- `new_figure(...)`, `save_figure(fig, path)`  a matplotlib Figure made without pyplot, saved the same way;
- `rounded(x)`                        numbers rounded for a summary JSON (nan, ±inf -> null).

Importing this module imports neither torch nor matplotlib.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

# The CSS of every page.
PAGE_STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}"
              "table{border-collapse:collapse;font-size:90%}"
              "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}"
              "img{max-width:100%;border:1px solid #eee}figure{margin:1.5em 0}figcaption{color:#555;font-size:90%}"
              "pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:80%}")


class Html(str):
    """Text that is already HTML: `esc` (and so `table`) leaves it as it is."""


def esc(text: object) -> str:
    """`text` as HTML text: &, <, >, " and ' escaped; an `Html` string passes through unchanged."""
    return text if isinstance(text, Html) else html.escape(str(text))


def table(rows: Iterable[Sequence[object]], header: Sequence[object] = (), row_headers: bool = True) -> str:
    """A <table>: `header` as one row of <th>; in each row the first cell is a <th> when `row_headers`.

    Every cell is escaped (pass `Html` for cells that are markup already).
    """
    def row(cells: Sequence[object], tags: list[str]) -> str:
        return "<tr>" + "".join(f"<{tag}>{esc(c)}</{tag}>" for tag, c in zip(tags, cells)) + "</tr>"

    first = "th" if row_headers else "td"
    head = row(header, ["th"] * len(header)) if header else ""
    return "<table>" + head + "".join(row(r, [first] + ["td"] * (len(r) - 1)) for r in rows) + "</table>"


def embedded_png(path: Path) -> str:
    """An <img> carrying the PNG itself, base64-encoded: the page needs no files beside it."""
    return f'<img src="data:image/png;base64,{base64.b64encode(Path(path).read_bytes()).decode()}" alt="{esc(Path(path).name)}">'


def figure(path: Path, title: str = "", caption: str = "") -> str:
    """<figure>: an <h3> title (when given), the embedded PNG, a <figcaption> (when given)."""
    head = f"<h3>{esc(title)}</h3>" if title else ""
    tail = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f"<figure>{head}{embedded_png(path)}{tail}</figure>"


def bullets(lines: Iterable[object]) -> str:
    """A <ul>, one escaped <li> per line."""
    return "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>"


def findings_html(lines: Iterable[object]) -> str:
    """A page's findings: <h2>Findings</h2> and its sentences as a list (`bullets`)."""
    return "<h2>Findings</h2>" + bullets(lines)


def figures_html(figures: Iterable[tuple[str, Path, str]]) -> list[str]:
    """Each (title, PNG path, caption) as a `figure`, in order: a pipeline's figures as it collected them."""
    return [figure(path, title, caption) for title, path, caption in figures]


def generated_in(seconds: float) -> str:
    """A page's last line: how long it took to make."""
    return f"<p><small>Generated in {seconds:.1f} s.</small></p>"


def page(title: str, body: Iterable[str]) -> str:
    """A whole page: doctype, charset, `title`, `PAGE_STYLE`, then the `body` parts one per line."""
    head = f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title><style>{PAGE_STYLE}</style></head><body>"
    return "\n".join([head, *body]) + "</body></html>"


# --- figures --------------------------------------------------------------------------------------


def new_figure(nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] = (6.4, 4.0), **subplots_kw):
    """(fig, axes): a `matplotlib.figure.Figure` and its `fig.subplots(nrows, ncols, **subplots_kw)`.

    Made without pyplot, so no backend is chosen and no global state is touched: library code
    draws here and saves with `save_figure`, and a notebook's inline figures keep working after
    it (only a command's entry point may pick a backend). Such a figure is not registered with
    pyplot, so nothing needs closing; to show one in a notebook, `display(fig)` or save and show the PNG."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **subplots_kw)


def save_figure(fig, path: Path, dpi: int = 110, tight_layout: bool = True) -> Path:
    """Lay out and write `path` as a PNG (110 dpi). A `new_figure` needs no closing: nothing else holds it.

    tight_layout=False is for a figure that tight_layout cannot arrange (a colour bar shared by
    several axes): it is cropped to its drawn extent instead."""
    if tight_layout:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi, bbox_inches=None if tight_layout else "tight")
    return Path(path)


# --- numbers --------------------------------------------------------------------------------------


def fmt(x, nd: int = 4) -> str:
    """A number for a table: `nd` decimals, or 3 significant digits when it is small, '—' for None/NaN."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if x != 0 and abs(x) < 10 ** -(nd - 1):
        return f"{x:.2e}"
    return f"{x:.{nd}f}"


def rounded(x, nd: int = 4):
    """`x` ready for a summary JSON: floats rounded to `nd` places (nan and ±inf -> None: JSON has
    neither), tensors as lists; recurses into lists, tuples and dicts."""
    import torch

    if isinstance(x, torch.Tensor):
        x = x.tolist()
    if isinstance(x, float):
        return None if x != x or x in (float("inf"), float("-inf")) else round(x, nd)
    if isinstance(x, (list, tuple)):
        return [rounded(v, nd) for v in x]
    if isinstance(x, dict):
        return {k: rounded(v, nd) for k, v in x.items()}
    return x
