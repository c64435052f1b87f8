"""What the tests of a graded notebook (09, 10: stubs to write in the notebook itself, and its solutions) share:
its generator loaded as `python notebooks/make_NN_*.py` runs it, the notebooks on disk equal to what the generator
writes, each stub raising inside its check while each solution passes it, each prediction answered after code.
"""

import importlib.util
from pathlib import Path
from types import ModuleType

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"  # resolved: a sys.path entry may be "tests/integration/.."


def load_generator(monkeypatch: pytest.MonkeyPatch, script: str) -> ModuleType:
    """notebooks/`script` as a module, `notebook_generator` importable beside it as when the script runs."""
    monkeypatch.syspath_prepend(str(NOTEBOOKS))
    spec = importlib.util.spec_from_file_location(Path(script).stem, NOTEBOOKS / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_written_by(generator: ModuleType, script: str) -> None:
    """Each notebook of `generator.NOTEBOOKS` is, cell for cell, what `generator.notebook(solved)` writes."""
    for path, solved in generator.NOTEBOOKS.items():
        on_disk, built = nbformat.read(path, as_version=4), generator.notebook(solved)
        assert [(c.id, c.cell_type, c.source, c.metadata.get("tags")) for c in on_disk.cells] == \
               [(c.id, c.cell_type, c.source, c.metadata.get("tags")) for c in built.cells], \
            f"{path.name}: run python notebooks/{script}"


def assert_stubs_raise_and_solutions_pass(generator: ModuleType, checks: ModuleType, capsys) -> None:
    """Each stub raises NotImplementedError inside its check (the signature test passed), each solution cell
    passes its check with the pass line; every exercise of the `checks` module has one stub."""
    stubs, solved = (nbformat.read(p, as_version=4) for p in generator.NOTEBOOKS)
    setup = next(c for c in stubs.cells if c.id == "setup").source
    names = []
    for nb, raises in ((stubs, True), (solved, False)):
        namespace: dict = {}
        exec(setup.replace("torch.set_num_threads(1)", ""), namespace)
        for cell in nb.cells:
            if "exercise" not in cell.metadata.get("tags", []):
                continue
            name = cell.metadata["exercise"]
            exec(cell.source, namespace)
            after = nb.cells[nb.cells.index(cell) + 1]
            assert after.source == f"check_{name}({name})" and "check" in after.metadata["tags"]
            if raises:
                names.append(name)
                with pytest.raises(NotImplementedError):
                    namespace[f"check_{name}"](namespace[name])
            else:
                namespace[f"check_{name}"](namespace[name])
                assert capsys.readouterr().out.endswith(f"check_{name}: all {len(checks.CASES[name]())} cases pass\n")
    assert sorted(names) == sorted(checks.REFERENCES)


def assert_predictions_answered(generator: ModuleType, count: int) -> None:
    """The solved notebook asks `count` predictions (**Predict**), each answered (<details>) after a code cell."""
    cells = generator.cells(solved=True)
    asks = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and "**Predict**" in c.source]
    assert len(asks) == count
    for i in asks:
        answer = next(j for j in range(i + 1, len(cells)) if "<details>" in cells[j].source)
        assert any(cells[j].cell_type == "code" for j in range(i + 1, answer))
