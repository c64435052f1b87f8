"""What the notebooks' make_NN_*.py generators share: the cells, written as (kind, id, source) with kind
"md" or "code", become a notebook (stable cell ids, so regenerating changes no diff), which is written
and then executed by `rlhf_scratch.course.execute_notebooks` (the suite's kernel environment, each
cell's source hash recorded), unless the command line says --no-run.
"""

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

KERNEL = {"display_name": "Python 3", "language": "python", "name": "python3"}


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
