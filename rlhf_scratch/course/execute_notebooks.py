"""Re-execute the course notebooks and save their outputs, so that they can be read without running.

    python -m rlhf_scratch.course.execute_notebooks                 # every notebook the test suite executes
    python -m rlhf_scratch.course.execute_notebooks notebooks/02_rlhf_end_to_end.ipynb --jobs 2
    python -m rlhf_scratch.course.execute_notebooks --check         # nothing executed: exit 1 on any problem

A notebook is executed from top to bottom in a fresh kernel, in its own folder, with the environment
the test suite gives its kernels (offline, one torch thread, matplotlib's inline backend, so every
figure is saved as an `image/png` output), and written back only if no cell failed. A failure is one
line naming the notebook and the cell, and the file is left as it was.

Provenance: each code cell that ran carries the SHA-256 of the source its outputs came from, in
`cell.metadata["rlhf_scratch"]["source_sha256"]`. Those hashes are the contract: `stale_cells`
finds a cell edited after it was executed. Per-run noise (execution timings) is dropped, so that
re-executing an unchanged notebook changes only what its outputs change; `execution_count` stays.

`--check` executes nothing: it runs `stale_cells`, `unexecuted_cells` and `plots_without_image` on
every notebook (what a CI step or a pre-commit hook runs). Needs the `dev` extra (nbformat,
nbclient, ipykernel).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import sys
import tempfile
import tokenize
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro
from tqdm import tqdm

from rlhf_scratch.config import ConfigError
from rlhf_scratch.config.cli import parse_dataclass
from rlhf_scratch.config.command import command

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
"""The course's notebooks (a source checkout: the folder beside the package)."""

EXCLUDED: dict[str, str] = {
    "06_build_the_ppo_loop.ipynb":
        "the learner's three functions are stubs that raise NotImplementedError; its solutions, "
        "solutions/06_build_the_ppo_loop_solutions.ipynb, are executed, and tests/integration/test_course_loop.py "
        "runs its cells with the solutions swapped in",
    "09_reward_hacking.ipynb":
        "the learner's six functions are stubs that raise NotImplementedError; its solutions, "
        "solutions/09_reward_hacking_solutions.ipynb, are executed, and tests/integration/test_course_hacking.py "
        "runs its stubs and solutions against the checks",
    "10_verifiable_rewards.ipynb":
        "the learner's four functions are stubs that raise NotImplementedError; its solutions, "
        "solutions/10_verifiable_rewards_solutions.ipynb, are executed, and tests/integration/test_course_verifiable.py "
        "runs its stubs and solutions against the checks",
    "11_multi_turn_episodes.ipynb":
        "the learner's five functions are stubs that raise NotImplementedError; its solutions, "
        "solutions/11_multi_turn_episodes_solutions.ipynb, are executed, and tests/integration/test_course_episodes.py "
        "runs its stubs and solutions against the checks",
    "exercises/01_ppo_objective_exercises.ipynb":
        "stubs raise NotImplementedError; tests/integration/test_course_checks.py executes it with the solutions",
    "exercises/02_beyond_ppo_exercises.ipynb":
        "stubs raise NotImplementedError; tests/integration/test_course_checks.py executes it with the solutions",
    "exercises/03_components_exercises.ipynb":
        "stubs raise NotImplementedError; tests/integration/test_course_checks.py executes it with the solutions",
    "exercises/04_rollout_exercises.ipynb":
        "stubs raise NotImplementedError; tests/integration/test_course_checks.py executes it with the solutions",
    "exercises/05_interp_exercises.ipynb":
        "stubs raise NotImplementedError; tests/integration/test_course_checks.py executes it with the solutions",
    "exercises/06_capstones_exercises.ipynb":
        "stubs raise NotImplementedError; tests/integration/test_course_checks.py executes it with the solutions",
    "exercises/07_parts_exercises.ipynb":
        "stubs raise NotImplementedError; tests/integration/test_course_checks.py executes it with the solutions",
}
"""Notebooks (path relative to `notebooks/`) the suite does not execute as they are, each with why."""

CELL_TIMEOUT = 1800
"""Seconds one cell may run: the slowest cells train a model (a minute or two on a 2-core CPU);
generous, so that a busy machine is not mistaken for a hang."""

KERNEL_ENV = {
    "HF_HUB_OFFLINE": "1",  # as tests/conftest.py: the outputs never depend on the Hub
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_MODE": "disabled",
    "OMP_NUM_THREADS": "1",  # one torch thread, as the suite's kernels: the same numbers as the tests see
    # No progress bars: a saved notebook keeps every redraw of a bar as an output (notebook 03's
    # comparison kept 76). tqdm (>= 4.66) reads it when imported, so it is set before the kernel starts.
    "TQDM_DISABLE": "1",
    # ipykernel picks the inline backend only when MPLBACKEND is unset; an inherited `Agg` would
    # draw every figure into nothing. The inline backend saves each one as an image/png output.
    "MPLBACKEND": "module://matplotlib_inline.backend_inline",
}
"""Set in every kernel's environment, over whatever the calling shell has."""

PROVENANCE_KEY = "rlhf_scratch"
VOLATILE_CELL_METADATA = ("execution", "ExecuteTime")
"""Per-run timings (nbclient's, and the ExecuteTime extension's): differ on every run, say nothing."""

SKIP_TAG = "skip-execution"
"""nbclient's tag for a code cell it does not run."""


# --- which notebooks -------------------------------------------------------------------------------

def notebooks_in(folder: Path) -> list[Path]:
    """Every `.ipynb` under `folder`, subfolders included, sorted; not in hidden folders (Jupyter's
    `.ipynb_checkpoints/` holds autosaved copies, not notebooks of the project)."""
    found = folder.rglob("*.ipynb")
    return sorted(p for p in found if not any(part.startswith(".") for part in p.relative_to(folder).parts))


def notebook_paths(root: Path = NOTEBOOK_DIR) -> list[Path]:
    """The notebooks the test suite executes: every one under `root` less `EXCLUDED`. Derived, not
    listed, so that a new notebook is executed (and re-executed here) without anyone adding it."""
    return [p for p in notebooks_in(root) if p.relative_to(root).as_posix() not in EXCLUDED]


# --- the checks ------------------------------------------------------------------------------------

def source_sha256(source: str) -> str:
    """The hash a cell's outputs are recorded against: of its source exactly as stored."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def cell_label(nb, index: int) -> str:
    """How a problem names a cell: its position counting every cell from 1 (markdown too, as the
    cells stand in the file) and its first non-blank line, which is what a reader searches for."""
    lines = [line.strip() for line in nb.cells[index].source.splitlines() if line.strip()]
    first = lines[0] if lines else ""
    return f'cell {index + 1} ("{first[:60]}{"…" if len(first) > 60 else ""}")'


def runs(cell) -> bool:
    """Whether executing the notebook runs this cell: a code cell with some source that is not
    tagged `skip-execution` (nbclient skips blank cells and that tag, so they never get outputs)."""
    tags = cell.get("metadata", {}).get("tags", [])
    return cell.cell_type == "code" and bool(cell.source.strip()) and SKIP_TAG not in tags


def _labels(nb, bad: Callable) -> list[str]:
    """`cell_label` of each cell that runs and that `bad(cell)` flags, in order."""
    return [cell_label(nb, i) for i, cell in enumerate(nb.cells) if runs(cell) and bad(cell)]


def stale_cells(nb) -> list[str]:
    """Code cells whose outputs may not come from their source: no recorded hash (never executed by
    this command) or a hash that differs (the source was edited after it ran)."""
    def stale(cell) -> bool:
        recorded = cell.get("metadata", {}).get(PROVENANCE_KEY, {}).get("source_sha256")
        return recorded != source_sha256(cell.source)
    return _labels(nb, stale)


def unexecuted_cells(nb) -> list[str]:
    """Code cells that were never run: no `execution_count` (a reader sees code with no result)."""
    return _labels(nb, lambda cell: cell.get("execution_count") is None)


NON_DRAWING_PYPLOT = ("close", "ioff", "ion", "rc", "rcdefaults", "switch_backend")
DRAWING_METHODS = ("plot", "imshow", "matshow", "bar", "barh", "scatter", "hist", "pcolormesh")
DRAWS = re.compile(
    rf"\bplt\s*\.\s*(?!(?:{'|'.join(NON_DRAWING_PYPLOT)})\b)\w+\s*\("  # a pyplot call: plt.show(), plt.figure(…)
    rf"|\.\s*(?:{'|'.join(DRAWING_METHODS)})\s*\("  # a drawing method: ax.plot(…), ax.imshow(…)
    r"|\bdisplay\s*\(\s*(?:fig\w*|Image\s*\()"  # a figure or an image file shown: display(fig), display(Image(…))
)
"""What makes a code cell a drawing cell, matched on its code with comments and strings removed:
 - a pyplot call `plt.<name>(` (plt.show(), plt.figure(), plt.subplots(), plt.plot(), …), except
   those in `NON_DRAWING_PYPLOT`, which draw nothing;
 - a drawing method `.<name>(` for a name in `DRAWING_METHODS` (Axes: ax.plot, ax.imshow, …);
 - `display(fig…)` or `display(Image(…))`: a figure, or a PNG written by the package, shown.
`import matplotlib.pyplot as plt` alone is not drawing; pyplot under another name is not seen."""


def _python(source: str) -> str:
    """A cell's source as plain Python, near enough for `DRAWS`: `!shell` lines and `%%cell-magic`
    lines dropped, a `%line-magic` reduced to its argument (`%time plt.plot(x)` still draws)."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("!", "%%"))]
    return "\n".join(re.sub(r"^(\s*)%\w+", r"\1", line) for line in lines)


def _code(source: str) -> str:
    """`source` without comments and string literals (a `# plt.show()` or a "see ax.plot(...)" draws
    nothing), its tokens joined by spaces; the source as it is if it does not tokenize."""
    python = _python(source)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(python).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    return " ".join(t.string for t in tokens if t.type not in (tokenize.COMMENT, tokenize.STRING))


def draws(cell) -> bool:
    """Whether the cell's code draws a figure, by the rule in `DRAWS`."""
    return bool(DRAWS.search(_code(cell.source)))


def has_image(cell) -> bool:
    """Whether one of the cell's outputs carries an `image/png` (a figure as saved by the inline backend)."""
    return any("image/png" in out.get("data", {}) for out in cell.get("outputs", []))


def plots_without_image(nb) -> list[str]:
    """Drawing cells (`DRAWS`) with no `image/png` output: the figure a reader should see is missing
    (stripped, or drawn under a non-inline backend)."""
    return _labels(nb, lambda cell: draws(cell) and not has_image(cell))


CHECKS: dict[str, tuple[Callable, str]] = {
    "stale": (stale_cells, "outputs not from this source (edited after it ran, or no recorded hash)"),
    "unexecuted": (unexecuted_cells, "never executed (no execution_count)"),
    "no image": (plots_without_image, "draws a figure but has no image/png output"),
}


def problems(path: Path) -> list[str]:
    """One line per problem of the notebook at `path`, as `--check` prints them."""
    nb = _read(path)
    return [f"{_shown(path)}: {label}: {what}" for check, what in CHECKS.values() for label in check(nb)]


# --- executing -------------------------------------------------------------------------------------

class NotebookFailed(Exception):
    """A notebook that did not run through; its message is the one line naming notebook and cell."""


class NotANotebook(ValueError):
    """A file that cannot be read as a notebook; its message is one line naming the file."""


def _read(path: Path):
    """The notebook at `path` (nbformat 4), or NotANotebook: empty, not JSON, not UTF-8, or JSON that
    is not a notebook each raise something else inside nbformat, and none of them names the file."""
    import nbformat

    try:
        return nbformat.read(path, as_version=4)
    except Exception as e:
        why = str(e).splitlines()[0][:80] if str(e) else ""
        raise NotANotebook(f"{_shown(path)}: not a Jupyter notebook ({type(e).__name__}{': ' if why else ''}{why})") from None


def _shown(path: Path) -> str:
    """A path as a person typed it: relative to the current folder when it is under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def kernel_env() -> dict[str, str]:
    """The calling environment with `KERNEL_ENV` over it."""
    return {**os.environ, **KERNEL_ENV}


def run_cells(nb, cwd: Path, timeout: int = CELL_TIMEOUT) -> None:
    """Execute `nb` in place in a fresh python3 kernel started in `cwd`. Raises `NotebookFailed` naming
    the cell that raised, timed out or killed the kernel (the cell last started)."""
    from nbclient import NotebookClient

    started = {}
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", record_timing=False, resources={"metadata": {"path": str(cwd)}},
        extra_arguments=["--IPKernelApp.log_level=ERROR"],  # not one "running over TCP" warning per notebook
        on_cell_start=lambda cell, cell_index: started.update(index=cell_index),
    )
    try:
        client.execute(env=kernel_env())
    except Exception as e:  # CellExecutionError, CellTimeoutError, DeadKernelError, …
        where = cell_label(nb, started["index"]) if "index" in started else "before the first cell"
        raise NotebookFailed(f"{where} failed: {_one_line(e)}") from e


def _one_line(e: Exception) -> str:
    """The error a cell raised, as `Name: message` (nbclient's own message is the whole traceback)."""
    if getattr(e, "ename", None):
        return f"{e.ename}: {e.evalue}"
    lines = [line for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"


def record_provenance(nb) -> None:
    """Store in each code cell that ran the hash of the source its outputs came from, and drop the
    per-run timings, so that a re-run of an unchanged notebook gives a small diff."""
    for cell in nb.cells:
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
        if runs(cell):
            cell.metadata[PROVENANCE_KEY] = {"source_sha256": source_sha256(cell.source)}


def write_atomically(nb, path: Path) -> None:
    """Write `nb` to `path` through a temporary file beside it: an interrupted write (Ctrl-C) leaves
    the old notebook, never half of the new one. The file keeps its permissions (mkstemp's are 0600)."""
    import nbformat

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            nbformat.write(nb, f)
        os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def execute(path: Path, timeout: int = CELL_TIMEOUT) -> None:
    """Execute the notebook at `path` from top to bottom in its own folder and save its outputs and
    provenance in place. Raises `NotebookFailed` (one line naming notebook and cell), the file untouched."""
    path = Path(path)
    nb = _read(path)
    try:
        run_cells(nb, path.parent.resolve(), timeout)
    except NotebookFailed as e:
        raise NotebookFailed(f"{_shown(path)}: {e}") from e
    record_provenance(nb)
    write_atomically(nb, path)


def execute_all(paths: list[Path], jobs: int = 1, timeout: int = CELL_TIMEOUT) -> list[str]:
    """Execute each notebook, `jobs` at a time (each in a kernel process of its own: threads here only
    wait on them), with a progress bar over notebooks. Returns one line per failed notebook, printed
    as it fails; the others are saved."""
    failures = []
    with ThreadPoolExecutor(max_workers=jobs) as pool, tqdm(total=len(paths), unit="notebook") as bar:
        futures = {pool.submit(execute, path, timeout): path for path in paths}
        for future in as_completed(futures):
            bar.set_postfix_str(futures[future].name)
            try:
                future.result()
            except NotebookFailed as e:
                failures.append(str(e))
                tqdm.write(str(e), file=sys.stderr)
            bar.update()
    return failures


# --- the command -----------------------------------------------------------------------------------

def refusal(paths: list[Path], jobs: int, timeout: int) -> str | None:
    """The one line a bad command line gets (None: none): a missing file, a file that is not a
    notebook (every one read before any runs), --jobs or --timeout below 1."""
    missing = [p for p in paths if not p.is_file()]
    if missing:
        return f"no such notebook: {missing[0]}"
    if jobs < 1:
        return f"--jobs {jobs}: at least 1"
    if timeout < 1:
        return f"--timeout {timeout}: at least 1 (seconds a cell may run)"
    try:
        for path in paths:
            _read(path)
    except NotANotebook as e:
        return str(e)
    return None


@dataclass
class NotebooksArgs:
    """Execute the course's notebooks in place (or check them)."""

    notebooks: Annotated[tuple[Path, ...], tyro.conf.Positional, tyro.conf.arg(metavar="NOTEBOOK ...")] = ()
    """Notebooks to execute (default: every one under notebooks/ the tests execute)."""
    check: bool = False
    """Execute nothing: report stale, unexecuted and image-less drawing cells; exit 1 if any."""
    jobs: Annotated[int, tyro.conf.arg(aliases=("-j",))] = 1
    """Notebooks executed at once."""
    timeout: int = CELL_TIMEOUT
    """Seconds one cell may run."""


def parse(argv: list[str]) -> tuple[NotebooksArgs, list[Path]]:
    """The command line (tyro) and the notebooks, every one read before a kernel starts."""
    opts = parse_dataclass(NotebooksArgs, argv, default=NotebooksArgs(), prog="python -m rlhf_scratch.course.execute_notebooks",
                           description=__doc__.split("\n\n")[0])
    paths = list(opts.notebooks) or notebook_paths()
    if (refused := refusal(paths, opts.jobs, opts.timeout)) is not None:
        raise ConfigError(refused)
    return opts, paths


def run(parsed: tuple[NotebooksArgs, list[Path]]) -> int:
    """Check or execute; 1 if a notebook is stale or a cell failed."""
    opts, paths = parsed
    if opts.check:
        lines = [line for path in paths for line in problems(path)]
        print("\n".join(lines) if lines else f"{len(paths)} notebooks: executed, current, and with their figures")
        return 1 if lines else 0
    return 1 if execute_all(paths, opts.jobs, opts.timeout) else 0


def main(argv: list[str] | None = None) -> int:
    """The command: `command()` owns its one-line errors and exit codes."""
    return command(parse, run, argv)


if __name__ == "__main__":
    sys.exit(main())
