"""Notebooks 07 and 08 are written by their generators (notebooks/make_07_exact_gradients.py,
make_08_single_controller.py, over notebooks/notebook_generator.py): the cells on disk must be the
generator's, so that an edit made in the notebook alone, which the next regeneration would lose, is caught."""

import sys

import nbformat
import pytest

from rlhf_scratch.course.execute_notebooks import NOTEBOOK_DIR

GENERATORS = {"make_07_exact_gradients": "07_exact_gradients.ipynb", "make_08_single_controller": "08_single_controller.ipynb"}


@pytest.fixture
def generators(monkeypatch):
    monkeypatch.syspath_prepend(str(NOTEBOOK_DIR))  # as `python notebooks/make_NN_….py` runs them
    for name in (*GENERATORS, "notebook_generator"):
        sys.modules.pop(name, None)
    yield
    for name in (*GENERATORS, "notebook_generator"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("generator", GENERATORS)
def test_the_notebook_on_disk_is_its_generators_output(generator, generators):
    import importlib

    from notebook_generator import build

    module = importlib.import_module(generator)
    assert module.PATH.resolve() == (NOTEBOOK_DIR / GENERATORS[generator]).resolve()
    on_disk, built = nbformat.read(module.PATH, as_version=4), build(module.CELLS)
    assert [(c.id, c.cell_type, c.source) for c in on_disk.cells] == [(c.id, c.cell_type, c.source) for c in built.cells], \
        f"{module.PATH.name} differs from its generator's cells: edit notebooks/{generator}.py and run it"
    assert on_disk.metadata["kernelspec"] == built.metadata["kernelspec"]


def test_every_prediction_has_its_answer_after_the_code_that_shows_it(generators):
    """Predict-then-see: a markdown cell that asks to **Predict** is followed by code, then a <details> answer."""
    import importlib

    for generator in GENERATORS:
        cells = importlib.import_module(generator).CELLS
        asks = [i for i, (kind, _, src) in enumerate(cells) if kind == "md" and "**Predict**" in src]
        assert asks, f"{generator}: no prediction"
        for i in asks:
            answer = next((j for j in range(i + 1, len(cells)) if "<details>" in cells[j][2]), None)
            assert answer is not None, f"{generator}: the prediction in cell {cells[i][1]!r} has no <details> answer"
            assert any(cells[j][0] == "code" for j in range(i + 1, answer)), \
                f"{generator}: the answer to {cells[i][1]!r} comes before any code that shows it"
            assert "**Predict**" not in " ".join(cells[j][2] for j in range(i + 1, answer)), \
                f"{generator}: {cells[i][1]!r} is asked again before it is answered"
