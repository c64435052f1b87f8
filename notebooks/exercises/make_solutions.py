"""Writes the solutions notebooks: `python notebooks/exercises/make_solutions.py`.

For every exercise notebook of this folder (`*_exercises.ipynb`, as make_exercises.py writes them),
`solutions/<name>_solutions.ipynb`: the same cells, each stub replaced by its solution written to be read
and followed by the same check call. A solution cell is the source of the exercise's `Reference`
(`rlhf_scratch.course.catalogue`: a `course/solutions*.py` module, plain torch), preceded by what it
needs that the notebook's setup cell does not give: the imports of its module it uses and the
module-level helpers it calls (`site_hook_name` before `residual_patching`, say). Nothing here is
written by hand, so a new exercise notebook gets its solutions by running this file.

Running it again changes nothing: the cells are rebuilt from the same sources, and a cell whose source
is unchanged keeps the outputs and the provenance `python -m rlhf_scratch.course.execute_notebooks`
gave it. tests/integration/test_course_solutions.py checks that every exercise notebook has its
solutions notebook, that each is what this file writes, and that every solution passes its check.
"""

import ast
import importlib
import inspect
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

HERE = Path(__file__).parent
SOLUTIONS = HERE / "solutions"
"""Where the solutions notebooks go: one per exercise notebook, `<name>_solutions.ipynb`."""

KEPT_WHEN_UNCHANGED = ("outputs", "execution_count")
PROVENANCE = "rlhf_scratch"
"""The cell metadata key execute_notebooks writes (the hash of the source its outputs came from)."""


def exercise_notebooks(folder: Path = HERE) -> list[Path]:
    """Every exercise notebook of the folder, in the course's order."""
    return sorted(folder.glob("*_exercises.ipynb"))


def solutions_path(exercise: Path) -> Path:
    return SOLUTIONS / exercise.name.replace("_exercises.ipynb", "_solutions.ipynb")


def bound_names(tree: ast.Module) -> dict[str, ast.stmt]:
    """Each name a module's top-level statements bind (imports, functions, classes, assignments)."""
    names: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update({t.id: node for t in targets if isinstance(t, ast.Name)})
    return names


def used_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def import_line(node: ast.Import | ast.ImportFrom, name: str) -> str:
    """The one import of `node` that binds `name`: `from m import a` of `from m import a, b`."""
    alias = next(a for a in node.names if (a.asname or a.name).split(".")[0] == name)
    as_ = f" as {alias.asname}" if alias.asname else ""
    if isinstance(node, ast.ImportFrom):
        return f"from {'.' * node.level}{node.module or ''} import {alias.name}{as_}"
    return f"import {alias.name}{as_}"


def solution_source(name: str, setup: str) -> str:
    """The cell that replaces `name`'s stub: imports the setup cell lacks, the helpers, the function."""
    from rlhf_scratch.course.catalogue import REFERENCES

    fn = getattr(importlib.import_module(REFERENCES[name].module), name)
    module = inspect.getmodule(fn)  # where it is defined (a package may re-export it)
    module_source = inspect.getsource(module)
    tree, given = ast.parse(module_source), bound_names(ast.parse(setup))
    top = bound_names(tree)
    needed, todo = {fn.__name__}, [top[fn.__name__]]
    while todo:  # the helpers it calls, and theirs
        for used in sorted(used_names(todo.pop()) - needed - given.keys()):
            if used in top:
                needed.add(used)
                if not isinstance(top[used], ast.Import | ast.ImportFrom):
                    todo.append(top[used])
    imports = [import_line(top[n], n) for n in sorted(needed) if isinstance(top[n], ast.Import | ast.ImportFrom)]
    helpers = [n for n in tree.body if not isinstance(n, ast.Import | ast.ImportFrom)
               and n is not top[fn.__name__] and any(top.get(x) is n for x in needed)]
    parts = ["\n".join(sorted(imports, key=lambda line: (line.startswith("from"), line)))] if imports else []
    parts += [ast.get_source_segment(module_source, n, padded=False) if isinstance(n, ast.Assign | ast.AnnAssign)
              else inspect.getsource(getattr(module, n.name)).rstrip() for n in helpers]
    own = inspect.getsource(fn).rstrip()
    if fn.__name__ != name:  # an alias: the cell defines the stub's name
        own = own.replace(f"def {fn.__name__}(", f"def {name}(", 1)
    return "\n\n\n".join([*parts, own])


def defined_in(module: str, name: str) -> str:
    """The module whose file holds `name`'s source (a package may re-export it)."""
    return getattr(importlib.import_module(module), name).__module__


def header(exercise: Path, modules: list[str]) -> str:
    """The paragraph under the title: what this notebook is and where its solutions come from."""
    files = " and ".join(f"`{m.replace('.', '/')}.py`" for m in modules)
    return (f"**Solutions.** This is [`{exercise.name}`](../{exercise.name}) with every stub written out: "
            f"the solution written to be read ({files}), then the same check, which passes. "
            "Write your own first; read a solution once your check passes.")


def build(exercise: Path, previous: nbformat.NotebookNode | None = None) -> nbformat.NotebookNode:
    """The solutions notebook of `exercise`; `previous` (the one on disk) lends the outputs of the
    cells whose source it shares, so that regenerating an executed notebook changes nothing."""
    from rlhf_scratch.course.catalogue import REFERENCES

    nb = nbformat.read(exercise, as_version=4)
    setup = next(c.source for c in nb.cells if c.cell_type == "code" and not c.metadata.get("tags"))
    stubs = {c.id: c.metadata["exercise"] for c in nb.cells if "exercise" in c.metadata.get("tags", [])}
    modules = sorted({defined_in(REFERENCES[name].module, name) for name in stubs.values()})
    cells = []
    for cell in nb.cells:
        if cell.id in stubs:
            name = stubs[cell.id]
            cell = new_code_cell(solution_source(name, setup), id=f"{name}-solution",
                                 metadata={"exercise": name, "tags": ["solution"]})
        elif cell.id == "intro":
            title, _, rest = cell.source.partition("\n\n")
            cell.source = f"{title}\n\n{header(exercise, modules)}\n\n{rest}"
        cells.append(cell)
    nb.cells = cells
    old = {c.id: c for c in previous.cells} if previous else {}
    if previous and "language_info" in previous.metadata:
        nb.metadata["language_info"] = previous.metadata["language_info"]  # what the kernel said when it ran
    for cell in nb.cells:
        before = old.get(cell.id)
        if cell.cell_type == "code" and before is not None and before.source == cell.source:
            for key in KEPT_WHEN_UNCHANGED:
                cell[key] = before[key]
            if PROVENANCE in before.metadata:
                cell.metadata[PROVENANCE] = before.metadata[PROVENANCE]
    nbformat.validate(nb)
    return nb


def text(nb: nbformat.NotebookNode) -> str:
    """The file's text, as `nbformat.write` (and so execute_notebooks) writes it."""
    s = nbformat.writes(nb)
    return s if s.endswith("\n") else s + "\n"


def write(exercise: Path) -> Path:
    path = solutions_path(exercise)
    previous = nbformat.read(path, as_version=4) if path.exists() else None
    path.parent.mkdir(exist_ok=True)
    path.write_text(text(build(exercise, previous)), encoding="utf-8")
    return path


def main() -> None:
    sys.path.insert(0, str(HERE.parents[1]))  # the checkout's package, installed or not
    for exercise in exercise_notebooks():
        print(f"wrote {write(exercise).relative_to(HERE.parent.parent)}")


if __name__ == "__main__":
    main()
