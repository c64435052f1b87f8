"""`python -m rlhf_scratch.course.execute_notebooks`: executing writes outputs, figures and source
hashes back, a failure leaves the file as it was, and each check finds its problem.

Every notebook here is a small one built in tmp_path; the real ones are only checked (not executed)
by the last test."""

import copy
import os
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from rlhf_scratch.course import execute_notebooks as ex

NOTEBOOK_DIR = Path(__file__).parents[2] / "notebooks"

PLOT = "import matplotlib.pyplot as plt\nplt.figure(figsize=(2, 1)); plt.plot([0, 1]); plt.show()"


def write_notebook(path: Path, *sources: str) -> Path:
    """A notebook at `path`: a markdown cell, then one code cell per source."""
    nb = new_notebook(cells=[new_markdown_cell("# a tiny notebook"), *map(new_code_cell, sources)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """A small notebook executed once by `ex.execute`, from a shell whose matplotlib backend is Agg
    (the kernel must use the inline one all the same), one cell carrying an old run's timings."""
    folder = tmp_path_factory.mktemp("executed")
    here = str(folder.resolve())
    path = write_notebook(folder / "small.ipynb",
                          f"import os\nfrom tqdm.auto import tqdm\n"
                          f"print(os.getcwd() == {here!r}, os.environ.get('OMP_NUM_THREADS'), tqdm(range(2)).disable)",
                          PLOT, "", "x = 6 * 7\nx")
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].metadata["execution"] = {"iopub.status.busy": "2026-11-21T12:04:41.882407Z"}
    nbformat.write(nb, path)
    os.chmod(path, 0o644)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MPLBACKEND", "Agg")
        mp.setenv("OMP_NUM_THREADS", "4")
        ex.execute(path)
    return path


def test_execution_saves_outputs_figures_and_source_hashes(executed):
    """Red if outputs are not written back, the kernel runs elsewhere than the notebook's folder or
    with more than one torch thread or tqdm's bars on, a figure is not an image/png, a hash is missing or wrong, old
    timings survive, or the file's permissions change (a temporary file's 0600)."""
    nb = nbformat.read(executed, as_version=4)
    env_cell, plot_cell, blank, answer = nb.cells[1:]
    printed = "".join(o.get("text", "") for o in env_cell.outputs if o.get("name") == "stdout")
    assert printed == "True 1 True\n", "the kernel runs in the notebook's folder, one thread, no progress bars"
    assert any("image/png" in out.get("data", {}) for out in plot_cell.outputs), \
        f"the figure is not an image/png output (inline backend?): {plot_cell.outputs}"
    assert answer.outputs[0]["data"]["text/plain"] == "42"
    assert [c.execution_count for c in (env_cell, plot_cell, answer)] == [1, 2, 3]
    for cell in (env_cell, plot_cell, answer):
        assert cell.metadata["rlhf_scratch"] == {"source_sha256": ex.source_sha256(cell.source)}
        assert "execution" not in cell.metadata, "per-run timings must not be saved"
    assert "rlhf_scratch" not in blank.metadata and blank.execution_count is None  # nbclient skips a blank cell
    assert (executed.stat().st_mode & 0o777) == 0o644


def test_a_freshly_executed_notebook_passes_every_check(executed, capsys):
    nb = nbformat.read(executed, as_version=4)
    assert ex.stale_cells(nb) == []
    assert ex.unexecuted_cells(nb) == []
    assert ex.plots_without_image(nb) == []
    assert ex.main(["--check", str(executed)]) == 0
    assert "1 notebooks: executed, current, and with their figures" in capsys.readouterr().out


def test_re_executing_an_unchanged_notebook_changes_nothing(executed):
    """The diff a re-run gives is the outputs' change only: no timings, no new ids, same hashes."""
    before = executed.read_bytes()
    ex.execute(executed)
    assert executed.read_bytes() == before


def test_a_failing_cell_leaves_the_file_untouched_and_is_named(tmp_path, capsys):
    """Through the command, two notebooks at once: the good one is saved, the failing one is one
    line naming it and its cell, left byte for byte as it was, and the exit code is 1."""
    good = write_notebook(tmp_path / "good.ipynb", "print('fine')")
    bad = write_notebook(tmp_path / "bad.ipynb", "print('before')", "1 / 0", "print('after')")
    before = bad.read_bytes()
    assert ex.main([str(good), str(bad), "--jobs", "2"]) == 1
    assert bad.read_bytes() == before, "a failed notebook must not be written"
    err_lines = [line for line in capsys.readouterr().err.splitlines() if "failed:" in line]
    assert len(err_lines) == 1, err_lines
    assert f'{bad}: cell 3 ("1 / 0") failed: ZeroDivisionError: division by zero' in err_lines[0], err_lines
    assert nbformat.read(good, as_version=4).cells[1].outputs[0]["text"] == "fine\n"


def test_a_cell_edited_after_execution_is_stale(executed):
    nb = nbformat.read(executed, as_version=4)
    nb.cells[4].source += "  # a comment changes what the reader sees"
    assert ex.stale_cells(nb) == ['cell 5 ("x = 6 * 7")']
    del nb.cells[2].metadata["rlhf_scratch"]  # outputs with no recorded source: stale as well
    assert ex.stale_cells(nb) == ['cell 3 ("import matplotlib.pyplot as plt")', 'cell 5 ("x = 6 * 7")']


def test_a_never_run_cell_is_unexecuted(executed):
    nb = nbformat.read(executed, as_version=4)
    nb.cells.append(new_code_cell("print('added, never run')"))
    nb.cells.append(new_code_cell("  \n"))  # blank: nothing to run, not a problem
    assert ex.unexecuted_cells(nb) == ['cell 6 ("print(\'added, never run\')")']


def test_a_plotting_cell_whose_image_was_stripped_is_caught(executed):
    nb = nbformat.read(executed, as_version=4)
    nb.cells[2].outputs = [o for o in nb.cells[2].outputs if "image/png" not in o.get("data", {})]
    assert ex.plots_without_image(nb) == ['cell 3 ("import matplotlib.pyplot as plt")']
    unplotted = copy.deepcopy(nb)
    unplotted.cells[2].source = "import matplotlib.pyplot as plt"
    assert ex.plots_without_image(unplotted) == [], "importing pyplot draws nothing"


def test_check_reports_one_line_per_problem_and_executes_nothing(executed, tmp_path, capsys):
    nb = nbformat.read(executed, as_version=4)
    nb.cells[2].outputs = []  # image stripped
    nb.cells[4].source = "x = 7 * 6\nx"  # edited after it ran
    nb.cells.append(new_code_cell("print('never run')"))
    path = tmp_path / "broken.ipynb"
    nbformat.write(nb, path)
    before = path.read_bytes()
    assert ex.main(["--check", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all(str(path) in line or "broken.ipynb" in line for line in lines), lines
    assert sum('cell 6 ("print(\'never run\')")' in line for line in lines) == 2  # stale and unexecuted
    assert any('cell 5 ("x = 7 * 6")' in line and "not from this source" in line for line in lines)
    assert any('cell 3 ("import matplotlib' in line and "image/png" in line for line in lines)
    assert path.read_bytes() == before


@pytest.mark.parametrize("source, drawing", [
    ("plt.show()", True),
    ("fig, ax = plt.subplots()\nax.hist(x)", True),
    ("ax.plot(xs, ys)", True),
    ("ax . imshow(m)", True),
    ("display(fig)", True),
    ("display(Image(str(run_dir / 'curves.png')))", True),
    ("%time plt.plot(x)", True),
    ("import matplotlib.pyplot as plt", False),
    ("# plt.show()  (a comment)", False),
    ("print('call plt.show() to see it')", False),
    ("plt.close(fig)", False),
    ("plt.rcParams['figure.dpi'] = 100", False),
    ("display(df)", False),
    ("%matplotlib inline\n!ls", False),
    ("x = plotter(3)", False),
])
def test_the_drawing_rule(source, drawing):
    """`DRAWS` on its code only: pyplot calls, drawing methods, figures and PNGs handed to display;
    not comments, strings, an import, plt.close or rcParams."""
    assert ex.draws(new_code_cell(source)) is drawing


def test_notebook_paths_is_the_suites_discovery_less_excluded(tmp_path, monkeypatch):
    """Red if the command's default set and the suite's differ: same folder, every notebook found
    by `notebooks_in` (subfolders, no checkpoints), less `EXCLUDED`."""
    assert ex.NOTEBOOK_DIR == NOTEBOOK_DIR.resolve()
    for name in ("a.ipynb", "sub/b.ipynb", ".ipynb_checkpoints/a-checkpoint.ipynb"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    assert [p.relative_to(tmp_path).as_posix() for p in ex.notebook_paths(tmp_path)] == ["a.ipynb", "sub/b.ipynb"]
    monkeypatch.setitem(ex.EXCLUDED, "sub/b.ipynb", "a reason")
    assert [p.relative_to(tmp_path).as_posix() for p in ex.notebook_paths(tmp_path)] == ["a.ipynb"]


def test_a_missing_notebook_is_one_line_and_exit_2(tmp_path, capsys):
    assert ex.main([str(tmp_path / "nope.ipynb")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.ipynb" in err[0], err


def test_every_committed_notebook_is_executed_current_and_has_its_figures():
    """The committed notebooks read without running: every code cell executed, from its current
    source (`stale_cells`, `unexecuted_cells`), with its figure saved (`plots_without_image`).
    The fix for any line: `python -m rlhf_scratch.course.execute_notebooks`."""
    paths = ex.notebook_paths(NOTEBOOK_DIR)
    assert paths, f"no notebook under {NOTEBOOK_DIR}"
    lines = [line for path in paths for line in ex.problems(path)]
    assert not lines, "re-execute them: python -m rlhf_scratch.course.execute_notebooks\n" + "\n".join(lines)
