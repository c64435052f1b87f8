"""The solutions notebooks (notebooks/exercises/solutions/, written by notebooks/exercises/make_solutions.py):
one per exercise notebook, each what the generator writes, and every solution in them passes the same
check as the package's function. The cells are executed here, not the notebooks: the setup cell and
the solution cells, then the catalogue's check on each function (a few seconds; the capstones' cells
that train after their check are left out).

Also: exercises 01 and 02's solutions written to be read (course/solutions_formulas.py) give the
package's numbers on random inputs, and the package's own functions still pass their checks.
"""

import importlib.util
from pathlib import Path

import nbformat
import pytest
import torch

from rlhf_scratch.course import catalogue, solutions_formulas

EXERCISES = Path(__file__).parents[2] / "notebooks" / "exercises"


def _generator():
    spec = importlib.util.spec_from_file_location("make_solutions", EXERCISES / "make_solutions.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    return generator


GENERATOR = _generator()
EXERCISE_NOTEBOOKS = GENERATOR.exercise_notebooks()


def _tagged(nb, tag):
    return [c for c in nb.cells if c.cell_type == "code" and tag in c.metadata.get("tags", [])]


def test_every_exercise_notebook_has_its_solutions_notebook_and_no_other():
    assert len(EXERCISE_NOTEBOOKS) >= 5, EXERCISE_NOTEBOOKS  # 01 .. 05 at least
    expected = sorted(GENERATOR.solutions_path(p).name for p in EXERCISE_NOTEBOOKS)
    on_disk = sorted(p.name for p in GENERATOR.SOLUTIONS.glob("*.ipynb"))
    assert on_disk == expected, "run python notebooks/exercises/make_solutions.py"


@pytest.mark.parametrize("exercise", EXERCISE_NOTEBOOKS, ids=lambda p: p.stem)
def test_running_the_generator_again_changes_no_byte(exercise):
    """The notebook on disk is what make_solutions.py writes from the exercise notebook and the
    solutions modules, outputs (if executed) kept: regenerating it is a no-op."""
    path = GENERATOR.solutions_path(exercise)
    assert path.exists(), f"{path.name} is missing: run python notebooks/exercises/make_solutions.py"
    built = GENERATOR.build(exercise, nbformat.read(path, as_version=4))
    assert GENERATOR.text(built) == path.read_text(encoding="utf-8"), \
        f"{path.name}: run python notebooks/exercises/make_solutions.py"


def test_regenerating_keeps_the_outputs_of_unchanged_cells_only():
    exercise = EXERCISE_NOTEBOOKS[0]
    executed = GENERATOR.build(exercise)
    solution = _tagged(executed, "solution")[0]
    check = executed.cells[executed.cells.index(solution) + 1]
    for cell in (solution, check):
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
        cell.execution_count = 7
        cell.metadata["rlhf_scratch"] = {"source_sha256": "abc"}
    solution.source += "\n# edited since it ran"
    executed.metadata["language_info"] = {"name": "python", "version": "3.11.7"}  # nbclient fills it in
    rebuilt = GENERATOR.build(exercise, executed)
    assert rebuilt.metadata["language_info"] == {"name": "python", "version": "3.11.7"}
    again = {c.id: c for c in rebuilt.cells}
    assert again[check.id].outputs == check.outputs and again[check.id].execution_count == 7
    assert again[check.id].metadata["rlhf_scratch"] == {"source_sha256": "abc"}
    assert again[solution.id].outputs == [] and again[solution.id].execution_count is None
    assert "rlhf_scratch" not in again[solution.id].metadata


@pytest.mark.parametrize("exercise", EXERCISE_NOTEBOOKS, ids=lambda p: p.stem)
def test_every_solution_passes_its_check(exercise, capsys):
    """Each stub became its solution, plain (no eindex, no chunking, no package import), followed by
    the same check cell; executed with the setup cell, each passes the catalogue's check."""
    stubs = nbformat.read(exercise, as_version=4)
    nb = nbformat.read(GENERATOR.solutions_path(exercise), as_version=4)
    solutions = _tagged(nb, "solution")
    names = [c.metadata["exercise"] for c in solutions]
    assert names == [c.metadata["exercise"] for c in _tagged(stubs, "exercise")]
    assert [c.id for c in nb.cells if "solution" not in c.metadata.get("tags", [])] == \
           [c.id for c in stubs.cells if "exercise" not in c.metadata.get("tags", [])]
    namespace: dict = {}
    exec(next(c.source for c in nb.cells if c.cell_type == "code" and not c.metadata.get("tags")), namespace)
    for cell in solutions:
        name = cell.metadata["exercise"]
        assert "eindex" not in cell.source and "chunk" not in cell.source.lower(), f"{name} is not plain torch"
        assert "rlhf_scratch" not in cell.source, f"{name}'s solution imports the package"
        after = nb.cells[nb.cells.index(cell) + 1]
        assert after.source == f"check_{name}({name})" and after.metadata["tags"] == ["check"]
        exec(cell.source, namespace)
        catalogue.CHECKS[name](namespace[name])
        assert capsys.readouterr().out == f"check_{name}: all {len(catalogue.CASES[name]())} cases pass\n"


# --- exercises 01 and 02: the solutions written to be read against the package's ----------------

PACKAGE = {
    "get_log_probs": "rlhf_scratch.core.objectives",
    "compute_advantages": "rlhf_scratch.core.advantages",
    "normalize_reward": "rlhf_scratch.reward.functions",
    "calc_clipped_sur_obj": "rlhf_scratch.core.objectives",
    "calc_kl_penalty": "rlhf_scratch.core.objectives",
    "calc_entropy_bonus": "rlhf_scratch.core.objectives",
    "calc_value_fn_loss": "rlhf_scratch.core.objectives",
    "compute_rloo_advantages": "rlhf_scratch.algorithms.rloo",
    "compute_grpo_advantages": "rlhf_scratch.algorithms.grpo",
    "calc_dpo_loss": "rlhf_scratch.algorithms.online_dpo",
    "calc_reward_model_loss": "rlhf_scratch.reward.model",
}
"""Where the package keeps each of the functions course/solutions_formulas.py writes to be read."""


def _package(name):
    return getattr(importlib.import_module(PACKAGE[name]), name)


def test_the_formulas_module_writes_every_exercise_of_01_and_02():
    assert sorted(PACKAGE) == sorted(n for n, ref in catalogue.REFERENCES.items() if ref.module == solutions_formulas.__name__)


@pytest.mark.parametrize("name", list(PACKAGE))
def test_the_packages_own_function_passes_the_same_check(name, capsys):
    catalogue.CHECKS[name](_package(name))
    assert capsys.readouterr().out == f"check_{name}: all {len(catalogue.CASES[name]())} cases pass\n"


def _calls(g: torch.Generator) -> list[tuple[str, tuple, dict]]:
    """Random arguments for each function, with a ragged mask (rows keep 4, 2 and 1 of 4 tokens)."""
    def randn(*shape):
        return torch.randn(*shape, generator=g)

    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    logits, tokens = 4 * randn(3, 6, 7), torch.randint(0, 7, (3, 6), generator=g)
    lp, old, adv = randn(3, 4), randn(3, 4), randn(3, 4)
    pairs = [randn(5) for _ in range(4)]
    weights = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])
    return [
        ("get_log_probs", (logits, tokens), {}),
        ("get_log_probs", (logits, tokens), dict(prefix_len=2, temperature=0.7)),
        ("compute_advantages", (randn(3, 6), randn(3), 2), {}),
        ("compute_advantages", (randn(3, 6), randn(3), 2), dict(mask=mask)),
        ("normalize_reward", (randn(5),), {}),
        ("calc_clipped_sur_obj", (lp, old, adv, 0.2), {}),
        ("calc_clipped_sur_obj", (lp, old, adv, 0.2), dict(mask=mask)),
        ("calc_kl_penalty", (randn(3, 4, 7), randn(3, 4, 7), 0.1), dict(mask=mask)),
        ("calc_kl_penalty", (randn(3, 4, 7).log_softmax(-1), randn(3, 4, 7).log_softmax(-1), 0.1),
         dict(from_logprobs=True)),
        ("calc_entropy_bonus", (randn(3, 4, 7), 0.01), dict(mask=mask)),
        ("calc_value_fn_loss", (randn(3, 4), randn(3, 4), 0.5), dict(mask=mask)),
        ("compute_rloo_advantages", (randn(8), 4), {}),
        *[("compute_grpo_advantages", (randn(8), 4), dict(scale_rewards=s)) for s in ("group", "batch", "none")],
        ("calc_dpo_loss", (*pairs, 0.3), {}),
        ("calc_dpo_loss", (*pairs, 0.3), dict(loss_type="ipo", weights=weights)),
        ("calc_reward_model_loss", (randn(5), randn(5)), dict(margin=randn(5), center_rewards_coefficient=0.01)),
    ]


def test_the_solutions_written_to_be_read_give_the_packages_numbers_on_random_inputs():
    calls = _calls(torch.Generator().manual_seed(0))
    assert {name for name, _, _ in calls} == set(PACKAGE)
    for name, args, kwargs in calls:
        ours, theirs = getattr(solutions_formulas, name)(*args, **kwargs), _package(name)(*args, **kwargs)
        torch.testing.assert_close(tuple(ours) if name == "calc_dpo_loss" else ours,
                                   tuple(theirs) if name == "calc_dpo_loss" else theirs,
                                   msg=lambda m, name=name, kwargs=kwargs: f"{name}({kwargs}): {m}")
