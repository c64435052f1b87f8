"""Exercise mode: every check passes the package's solution, answers a wrong type, signature or error with its
own one-line AssertionError, and no classic mistake it knows gives the answer; the exercise notebooks' check
cells pass with the stubs swapped for the solutions, and the shipped stubs still raise.

The planted bugs, each the solution with one mistake as a learner writes it, are the course's catalogue
(`rlhf_scratch.course.mistakes`); tests/unit/test_course_mistakes.py asserts that each check names each of them.
"""

import functools
import importlib
import importlib.util
import inspect
import math
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
from nbclient import NotebookClient

from rlhf_scratch.course import catalogue, checks

EXERCISES = Path(__file__).parents[2] / "notebooks" / "exercises"
EXERCISE_NOTEBOOKS = sorted(EXERCISES.glob("*.ipynb"))
NOTEBOOK_09 = EXERCISES.parent / "09_reward_hacking.ipynb"
NOTEBOOK_10 = EXERCISES.parent / "10_verifiable_rewards.ipynb"
NOTEBOOK_11 = EXERCISES.parent / "11_multi_turn_episodes.ipynb"


def solution(name: str):
    return getattr(importlib.import_module(catalogue.REFERENCES[name].module), name)


def check(name: str):
    return catalogue.CHECKS[name]


def fails_with(name: str, bug, phrase: str) -> str:
    """The check's AssertionError on `bug`, asserted to contain `phrase`."""
    with pytest.raises(AssertionError) as err:
        check(name)(bug)
    assert phrase in str(err.value), f"check_{name} on {bug.__name__} said:\n{err.value}\nexpected the phrase {phrase!r}"
    return str(err.value)


# --- the checks themselves --------------------------------------------------------------------


@pytest.mark.parametrize("name", list(catalogue.REFERENCES))
def test_every_check_passes_the_package_solution_and_prints_one_line(name, capsys):
    check(name)(solution(name))
    n = len(catalogue.CASES[name]())
    assert capsys.readouterr().out == f"check_{name}: all {n} cases pass\n"


@pytest.mark.parametrize("name", list(catalogue.REFERENCES))
def test_the_recorded_signature_is_the_solutions(name):
    params = inspect.signature(solution(name)).parameters.values()
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    actual = "(" + ", ".join(stars.get(p.kind, "") + (p.name if p.default is p.empty else f"{p.name}={p.default!r}")
                             for p in params) + ")"
    assert catalogue.REFERENCES[name].signature == actual


@pytest.mark.parametrize("name", list(catalogue.CASES))
def test_no_classic_mistake_gives_the_answer(name):
    """The cases can tell each recognised mistake from the right answer (and from each other, when
    their hints differ): a mistake whose number equals the answer would pass unnoticed. A mistake
    recognised by a rule (`like`: an eps of the learner's choosing) must take its own worked instance
    and refuse the answer."""
    for case in catalogue.CASES[name]():
        expected = checks._tensor(case.expected)
        for mistake in case.mistakes:
            gives = checks._tensor(mistake.gives)
            assert not mistake.matches(expected, case), f"{name} / {case.name}: {mistake.hint}"
            assert mistake.matches(gives, case), f"{name} / {case.name}: its own worked number is not {mistake.hint}"
            for other in case.mistakes:
                if other.hint != mistake.hint:
                    assert not other.matches(gives, case), f"{name} / {case.name}"


def test_check_names_cover_the_exercises():
    assert set(catalogue.CASES) == set(catalogue.REFERENCES)
    from rlhf_scratch import course

    assert sorted(course.__all__) == sorted(f"check_{name}" for name in catalogue.REFERENCES)


def test_importing_the_course_package_imports_no_torch():
    """The checks load on first use, so a sibling (re-executing the notebooks) starts without torch."""
    code = "import sys, rlhf_scratch.course; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_wrong_signature_is_named_before_anything_runs():
    def get_log_probs(logits, tokens):
        raise AssertionError("never called")

    fails_with("get_log_probs", get_log_probs, "must have the signature of rlhf_scratch.course.solutions_formulas.get_log_probs("
                                               "logits, tokens, prefix_len=None, temperature=1.0)")


def test_something_not_callable_is_named_before_anything_runs():
    """check_normalize_reward(42) in a notebook (the suite's beartype refuses the call itself, so the
    signature check that every check starts with is called here)."""
    with pytest.raises(AssertionError, match=r"^check_normalize_reward: pass your function itself, "
                                             r"normalize_reward\(reward, eps=1e-05\); got int '42'$"):
        checks._check_signature("normalize_reward", 42)


def returning(name: str, value):
    """A learner with the solution's signature that returns `value` (or `value(the solution's answer)`)."""
    answer = solution(name)

    @functools.wraps(answer)
    def fn(*args, **kwargs):
        return value(answer(*args, **kwargs)) if callable(value) else value

    return fn


def as_int64(x):
    return x.long() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


WRONG_RETURNS = {"None": None, "str": "abc", "list": [0.5], "ndarray": np.zeros(3), "float": 0.5, "int64": as_int64}


@pytest.mark.parametrize("name", list(catalogue.REFERENCES))
def test_a_wrong_type_returned_is_one_assertion_error_of_the_check(name, capsys):
    """None, a str, a list, a numpy array, a float, or the solution's floating-point answer as int64:
    each check answers with its own AssertionError (check_<name> …), never a TypeError from inside the
    check. Passing is allowed only where the wrong value is not the answer's (int64 of an integer answer,
    or a return the check does not read)."""
    for label, value in WRONG_RETURNS.items():
        try:
            check(name)(returning(name, value))
        except AssertionError as e:
            assert str(e).startswith(f"check_{name}"), f"{label}: {e}"
            if label == "int64":
                assert "int64" in str(e) or "floating" in str(e), f"{label}: {e}"
        else:
            assert label == "int64" or name == "reward_model_step", f"check_{name} passed a learner returning {label}"
    capsys.readouterr()


@pytest.mark.parametrize("name, value, phrase", [
    ("calc_k3_kl", None, "your calc_k3_kl returned None, where the solution returns a float32 tensor of shape (121, 4)"),
    ("calc_k3_kl", np.zeros(3), "your calc_k3_kl returned a numpy array (float64) of shape (3,)"),
    ("early_stop_index", None, "your early_stop_index returned None, where the solution returns an int 2"),
    ("minibatch_rows", None, "your minibatch_rows returned None, where the solution returns a generator"),
    ("paired_difference_interval", "abc", "your paired_difference_interval returned a str 'abc', where the solution "
                                          "returns a tuple of 3"),
    ("steered_logits", as_int64, "your steered_logits returned an int64 tensor of shape (2, 5, 10), where the solution "
                                 "returns a float32 tensor of shape (2, 5, 10)\n  hint: compute in the inputs' floating"),
    # the hand case's answer is integral ([[1, 7], [6, −8]]): int64 of it passed before
    ("compute_advantages", as_int64, "your compute_advantages returned an int64 tensor of shape (2, 2), where the "
                                     "solution returns a float32 tensor"),
    ("completion_mask", lambda m: m.float(), "your completion_mask returned a float32 tensor of shape (3, 4), where the "
                                             "solution returns a bool tensor of shape (3, 4)\n  hint: a mask is a bool"),
])
def test_the_wrong_type_or_dtype_is_named_with_the_case_and_what_the_solution_returns(name, value, phrase):
    message = fails_with(name, returning(name, value), phrase)
    assert message.startswith(f"check_{name} failed on case 1/"), message


def test_an_exception_of_the_learner_names_the_case_it_raised_on():
    """The learner's own error: one AssertionError naming the case and the error, chained to it (so the
    traceback still shows the learner's line); a stub's NotImplementedError stays one."""
    def compute_advantages(values, rewards, prefix_len, mask=None):
        if mask is not None:
            raise IndexError("my bug with the mask")
        return solution("compute_advantages")(values, rewards, prefix_len)

    with pytest.raises(AssertionError) as err:
        check("compute_advantages")(compute_advantages)
    assert str(err.value) == ("check_compute_advantages failed on case 2/2 (row 1 ends at EOS (mask)):\n"
                              "  your compute_advantages raised IndexError: my bug with the mask")
    assert isinstance(err.value.__cause__, IndexError)

    def normalize_reward(reward, eps=1e-05):
        raise NotImplementedError

    with pytest.raises(NotImplementedError):
        check("normalize_reward")(normalize_reward)


def test_an_unknown_mistake_still_shows_the_case_and_both_numbers():
    def value_loss_cubed(values, mb_returns, vf_coef, mask=None):
        return 0.5 * vf_coef * (values - mb_returns).abs().pow(3).mean()

    message = fails_with("calc_value_fn_loss", value_loss_cubed, "not a mistake this check knows")
    assert "case 1/2 (three positions, vf_coef = 0.2)" in message and "expected 0.166667" in message


# --- exercises 03: the reading solutions are the package's ------------------------------------


def test_the_reading_solutions_agree_with_the_package_on_random_inputs():
    """course/solutions.py is plain torch with loops; the package's functions are vectorised: the same numbers."""
    from rlhf_scratch.core.advantages import compute_gae_advantages
    from rlhf_scratch.core.objectives import explained_variance
    from rlhf_scratch.course import solutions

    g = torch.Generator().manual_seed(0)
    values, rewards = torch.randn(5, 9, generator=g), torch.randn(5, generator=g)
    mask = torch.arange(6)[None, :] < torch.tensor([6, 3, 1, 0, 5])[:, None]  # EOS at different steps, one empty
    for m in (None, mask):
        ours = solutions.compute_gae_advantages(values, rewards, 3, 0.9, 0.7, mask=m)
        assert torch.allclose(ours, compute_gae_advantages(values, rewards, 3, 0.9, 0.7, mask=m), atol=1e-6)
        returns = ours + values[:, 2:-1]
        assert math.isclose(solutions.explained_variance(values[:, 2:-1], returns, m),
                            explained_variance(values[:, 2:-1], returns, m), rel_tol=1e-5)


def test_the_dla_solution_is_the_packages_component_logit_diff(tiny_random_lm):
    """On a model's own cache: the components of its final residual at the last position, ln_final's
    cached scale, its weight and W_U[:, pos] − W_U[:, neg] give interp's attributions (bias row aside),
    and with the bias they sum to the logit difference."""
    from interp.logits import SentimentTokens, logit_diff, sentiment_direction
    from interp.residual import component_logit_diff, decompose_final_resid
    from rlhf_scratch.course.solutions import direct_logit_attribution

    model, g = tiny_random_lm, torch.Generator().manual_seed(1)
    with torch.no_grad():
        model.ln_final.w.copy_(1 + 0.3 * torch.randn(model.cfg.d_model, generator=g))
        model.ln_final.b.copy_(0.3 * torch.randn(model.cfg.d_model, generator=g))
        tokens = torch.randint(0, 50, (3, 7), generator=g)
        logits, cache = model.run_with_cache(tokens)
        st = SentimentTokens((4, 9), (17,), ("a", "b"), ("c",))
        theirs, _ = component_logit_diff(cache, st)
        parts, _ = decompose_final_resid(cache)
        ours = direct_logit_attribution(parts[:, :, -1], cache["ln_final.hook_scale"][:, -1], model.ln_final.w,
                                        sentiment_direction(model, st))
    assert torch.allclose(ours, theirs[:-1], atol=1e-5)
    assert torch.allclose(ours.sum(0) + theirs[-1], logit_diff(logits, st), atol=1e-5)


def test_every_check_has_a_planted_bug():
    """Each check is tested against planted mistakes: the course's catalogue (`course.mistakes`, run by
    tests/unit/test_course_mistakes.py and tests/integration/test_course_mistakes_run.py), or, for an exercise
    not yet in it, a `fails_with("<name>", ...)` in a sibling test_course_*.py."""
    from rlhf_scratch.course.mistakes import COUNTS

    source = "".join(p.read_text() for p in Path(__file__).parent.glob("test_course_*.py"))
    for name in catalogue.REFERENCES:
        assert COUNTS[name] or re.search(rf'fails_with\(\s*"{name}"', source), f"no planted bug for check_{name}"


# --- the exercise notebooks -------------------------------------------------------------------


def _code_cells(nb, tag):
    return [c for c in nb.cells if c.cell_type == "code" and tag in c.metadata.get("tags", [])]


def test_the_notebooks_are_what_the_generator_writes():
    """notebooks/exercises/make_exercises.py is the source; the notebooks on disk are its output."""
    spec = importlib.util.spec_from_file_location("make_exercises", EXERCISES / "make_exercises.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert sorted(generator.NOTEBOOKS) == [p.name for p in EXERCISE_NOTEBOOKS]
    for path in EXERCISE_NOTEBOOKS:
        on_disk, built = nbformat.read(path, as_version=4), generator.NOTEBOOKS[path.name]
        assert [(c.cell_type, c.source, c.metadata) for c in on_disk.cells] == \
               [(c.cell_type, c.source, c.metadata) for c in built.cells], f"{path.name}: run make_exercises.py"


def test_the_exercises_cover_every_check_once():
    """notebooks/exercises/ and notebooks 09 (reward hacking) and 10 (verifiable rewards), whose stubs are in the
    notebooks themselves."""
    names = [c.metadata["exercise"] for path in [*EXERCISE_NOTEBOOKS, NOTEBOOK_09, NOTEBOOK_10, NOTEBOOK_11]
             for c in _code_cells(nbformat.read(path, as_version=4), "exercise")]
    assert sorted(names) == sorted(catalogue.REFERENCES)


@pytest.mark.parametrize("path", EXERCISE_NOTEBOOKS, ids=lambda p: p.stem)
def test_shipped_stubs_raise_and_have_the_solutions_signature(path):
    """As shipped, every stub raises NotImplementedError (no solution in the exercise notebook), is
    followed by its check cell, and has the solution's signature: its check gets past the signature
    test to the stub's raise."""
    nb = nbformat.read(path, as_version=4)
    namespace: dict = {}
    setup = next(c for c in nb.cells if c.cell_type == "code" and not c.metadata.get("tags"))
    exec(setup.source, namespace)  # imports and the checks
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not re.search(r"rlhf_scratch\.(?!course\b)", cell.source), f"a solution is imported:\n{cell.source}"
    for stub in _code_cells(nb, "exercise"):
        name = stub.metadata["exercise"]
        assert "raise NotImplementedError" in stub.source, f"{name}: the stub must raise NotImplementedError"
        assert f"def {name}(" in stub.source or f"class {name}" in stub.source  # a function, or a module to write
        after = nb.cells[nb.cells.index(stub) + 1]
        assert after.source == f"check_{name}({name})" and "check" in after.metadata["tags"]
        exec(stub.source, namespace)
        with pytest.raises(NotImplementedError):
            namespace[f"check_{name}"](namespace[name])


@pytest.mark.slow  # a kernel per notebook
@pytest.mark.parametrize("path", EXERCISE_NOTEBOOKS, ids=lambda p: p.stem)
def test_exercise_notebook_passes_every_check_with_the_solutions(path, tmp_path):
    """The notebook executed with each stub cell replaced by the import of the package's solution:
    every check cell prints its pass line."""
    nb = nbformat.read(path, as_version=4)
    for stub in _code_cells(nb, "exercise"):
        name = stub.metadata["exercise"]
        stub.source = f"from {catalogue.REFERENCES[name].module} import {name}"
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    for cell in _code_cells(nb, "check"):
        name = cell.metadata["exercise"]
        printed = "".join(o.get("text", "") for o in cell.outputs  # stdout: an import's warning goes to stderr
                          if o.output_type == "stream" and o.get("name") == "stdout")
        assert printed == f"check_{name}: all {len(catalogue.CASES[name]())} cases pass\n", f"{name}: {cell.outputs}"

