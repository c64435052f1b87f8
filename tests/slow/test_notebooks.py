"""Every notebook executes from top to bottom (on a copy; the committed file is not touched).

The list is not written down: it is every `.ipynb` under `notebooks/`, subfolders included, less
the ones in `EXCLUDED` (each with its reason), so a new notebook is executed without anyone
remembering to add it, and a test fails if one on disk would not be.
"""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from rlhf_scratch.course.execute_notebooks import EXCLUDED, notebook_paths, notebooks_in

NOTEBOOK_DIR = Path(__file__).parents[2] / "notebooks"

NOTEBOOKS = notebook_paths(NOTEBOOK_DIR)  # discovery and EXCLUDED: rlhf_scratch/course/execute_notebooks.py


def _walk(folder: Path) -> set[str]:
    """The `.ipynb` files under `folder` (relative, '/'-separated), found by os.walk rather than
    the glob that `notebooks_in` uses, hidden folders pruned."""
    found = set()
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found |= {(Path(root) / f).relative_to(folder).as_posix() for f in files if f.endswith(".ipynb")}
    return found


def _executed() -> list[Path]:
    """The notebooks `test_notebook_executes` is parametrized over: what the suite will run."""
    (mark,) = [m for m in test_notebook_executes.pytestmark if m.name == "parametrize"]
    return list(mark.args[1])


def test_notebooks_in_finds_subfolders_and_skips_checkpoints(tmp_path):
    """Red if the derivation misses a subfolder's notebook (a `glob("*.ipynb")`), picks up a
    checkpoint copy or a non-notebook, or is unsorted."""
    for name in ("b.ipynb", "a.ipynb", "sub/deeper/c.ipynb", ".ipynb_checkpoints/a-checkpoint.ipynb",
                 "sub/notes.md", "sub/d.ipynb.bak"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    assert [p.relative_to(tmp_path).as_posix() for p in notebooks_in(tmp_path)] == [
        "a.ipynb", "b.ipynb", "sub/deeper/c.ipynb"]


def test_every_notebook_is_executed_or_excluded_with_a_reason():
    """Each notebook on disk under notebooks/ (found by a separate walk) is executed by the suite
    or named in EXCLUDED with a reason; never both, and no exclusion names a missing notebook.

    Red if: a notebook exists that no test executes (a pinned list, a non-recursive glob, a bad
    filter), one is excluded silently (empty reason) or stale, or the folder was not found at all."""
    executed = [p.relative_to(NOTEBOOK_DIR).as_posix() for p in _executed()]
    on_disk = _walk(NOTEBOOK_DIR)
    assert executed, f"the suite executes no notebook: is {NOTEBOOK_DIR} the notebooks folder?"
    assert len(executed) == len(set(executed)), f"a notebook is executed twice: {executed}"
    missing = on_disk - set(executed) - set(EXCLUDED)
    assert not missing, f"notebooks the suite would not execute (execute them, or add them to EXCLUDED with a reason): {sorted(missing)}"
    assert not set(executed) - on_disk, f"executed but not found by the walk: {sorted(set(executed) - on_disk)}"
    for name, reason in EXCLUDED.items():
        assert name in on_disk, f"EXCLUDED names {name}, which is not under {NOTEBOOK_DIR}"
        assert name not in executed, f"{name} is excluded and executed"
        assert reason.strip(), f"{name} is excluded without a stated reason"


@pytest.mark.slow  # whole kernels: the quick loop (-m 'not slow') skips them
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(NOTEBOOK_DIR).with_suffix("").as_posix())
def test_notebook_executes(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the failing cell
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
