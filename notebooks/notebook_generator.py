"""What the notebooks' make_NN_*.py generators share: the cells, written as (kind, id, source) with kind
"md" or "code", become a notebook (stable cell ids, so regenerating changes no diff), which is written
and then executed by `rlhf_scratch.course.execute_notebooks` (the suite's kernel environment, each
cell's source hash recorded), unless the command line says --no-run.

A graded notebook (09, 10) is written twice, the learner's with stubs and its solutions: each exercise is a
function of a course solutions module (`exercise_cells`: the stub is its def line and docstring read from
there, then a raise; the solution cell its source), followed by its check cell, and only the solutions are
executed (`write_graded`).
"""

import ast
import importlib.util
from collections.abc import Callable
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

KERNEL = {"display_name": "Python 3", "language": "python", "name": "python3"}


def _plan():
    """rlhf_scratch/course/plan.py read from this checkout by its path (torch-free; the package need not be installed)."""
    spec = importlib.util.spec_from_file_location(
        "course_plan", Path(__file__).resolve().parents[1] / "rlhf_scratch" / "course" / "plan.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PLAN = _plan()


def build(cells: list[tuple[str, str, str]]) -> nbformat.NotebookNode:
    nb = new_notebook(cells=[new_markdown_cell(src, id=cid) if kind == "md" else new_code_cell(src, id=cid)
                             for kind, cid, src in cells])
    nb.metadata["kernelspec"] = KERNEL
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def write(path, cells: list[tuple[str, str, str]], argv: list[str]) -> None:
    """Write the notebook to `path`, then execute it in place (not with --no-run)."""
    nbformat.write(build(cells), path)
    if "--no-run" not in argv:
        from rlhf_scratch.course.execute_notebooks import execute

        execute(path)
    print(f"wrote {path}")


# --- graded notebooks: stubs to write, and their solutions -----------------------------------------


def solution(source: Path, name: str) -> str:
    """The source of function `name` in the solutions module `source` (read as text: a generator runs
    without the package on the path)."""
    text = source.read_text()
    fn = next(f for f in ast.parse(text).body if isinstance(f, ast.FunctionDef) and f.name == name)
    return ast.get_source_segment(text, fn)


def stub(source: Path, name: str) -> str:
    """The solution's def line(s) and docstring, then a raise."""
    text = solution(source, name)
    fn = ast.parse(text).body[0]
    head = "\n".join(text.splitlines()[: fn.body[0].end_lineno])
    return f'{head}\n    raise NotImplementedError("write {name}")'


def exercise_cells(source: Path, name: str, solved: bool) -> list:
    """The exercise's difficulty and time (`course/plan.py`, a markdown cell, where the plan has it), its cell
    (the stub, or the solution; tag `exercise`) and its check cell (tag `check`)."""
    meta = {"exercise": name, "tags": ["exercise"]}
    plan = [new_markdown_cell(f"`{name}`: {PLAN.plan_line(name)}", id=f"{name}-plan".replace("_", "-"))] \
        if PLAN.plan_line(name) else []
    return plan + [new_code_cell(solution(source, name) if solved else stub(source, name),
                          id=f"{name}-{'solution' if solved else 'stub'}", metadata=meta),
            new_code_cell(f"check_{name}({name})", id=f"check-{name}".replace("_", "-"),
                          metadata={"exercise": name, "tags": ["check"]})]


def graded_notebook(cells: list) -> nbformat.NotebookNode:
    """A notebook of ready-made cells (nbformat's), validated."""
    nb = new_notebook(cells=cells, metadata={"kernelspec": KERNEL, "language_info": {"name": "python"}})
    nbformat.validate(nb)
    return nb


def write_graded(notebooks: dict[Path, bool], notebook: Callable[[bool], nbformat.NotebookNode],
                 argv: list[str]) -> None:
    """Write each notebook (`notebooks`: path -> whether its exercises are solved), then execute the solved
    ones (not with --no-run): the learner's stubs raise, so theirs is not executed."""
    for path, solved in notebooks.items():
        nbformat.write(notebook(solved), path)
        print(f"wrote {path}")
    if "--no-run" not in argv:
        from rlhf_scratch.course.execute_notebooks import execute

        for path, solved in notebooks.items():
            if solved:
                execute(path)
