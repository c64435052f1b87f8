"""`python -m rlhf_scratch.course progress`: every check run on the learner's own notebooks, and what is done.

For each graded notebook (`GRADED`: the exercise notebooks, notebook 06's learning phase, 09, 10 and 11) the
setup cells (the untagged code cells before the first exercise) and the learner's exercise cells (tag
`exercise`) are run in one namespace, in this process; then each exercise's check. An exercise is done
when its check passes, "not written" while its stub raises NotImplementedError, and otherwise "fails" with
the check's first line and hint. Nothing after an exercise cell runs (no training cell). A missing notebook
is one line. Then the minutes left by the plan (`course/plan.py`).
"""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass
from pathlib import Path

from rlhf_scratch.course.execute_notebooks import NOTEBOOK_DIR
from rlhf_scratch.course.plan import EXERCISES, STARS, hours

GRADED = (
    "exercises/01_ppo_objective_exercises.ipynb", "exercises/02_beyond_ppo_exercises.ipynb",
    "exercises/03_components_exercises.ipynb", "exercises/04_rollout_exercises.ipynb",
    "exercises/07_parts_exercises.ipynb", "06_build_the_ppo_loop.ipynb", "09_reward_hacking.ipynb",
    "10_verifiable_rewards.ipynb", "11_multi_turn_episodes.ipynb", "exercises/05_interp_exercises.ipynb",
    "exercises/06_capstones_exercises.ipynb",
)
"""The learner's graded notebooks (relative to notebooks/), in the README's order."""

CHECKED_WITH = {"phase_advantages": "learning_phase", "minibatch_objective": "learning_phase"}
"""Notebook 06's functions that have no check of their own: check_learning_phase grades all three."""


@dataclass(frozen=True)
class Result:
    name: str
    state: str  # "done", "not written", "fails"
    detail: str = ""


def _check(name: str, namespace: dict):
    target = CHECKED_WITH.get(name, name)
    if f"check_{target}" in namespace:
        return namespace[f"check_{target}"], namespace.get(target)
    from rlhf_scratch.course.catalogue import CHECKS

    return CHECKS[target], namespace.get(target)


def grade(path: Path) -> list[Result]:
    """Each exercise of the notebook at `path`, run and checked (see the module docstring)."""
    return graded(path)[0]


def graded(path: Path) -> tuple[list[Result], dict]:
    """(each exercise's result, the namespace its cells ran in: the learner's functions by name). A solutions
    notebook's cells (tag `solution`) count as written exercises."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    exercise_cells = [c for c in nb.cells if c.cell_type == "code"
                      and {"exercise", "solution"} & set(c.metadata.get("tags", []))]
    first = nb.cells.index(exercise_cells[0]) if exercise_cells else len(nb.cells)
    namespace: dict = {}
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):
        for cell in nb.cells[:first]:
            if cell.cell_type == "code" and not cell.metadata.get("tags"):
                exec(compile(cell.source, f"{path.name}:setup", "exec"), namespace)  # noqa: S102 (the learner's own notebook)
    results, graded_later = [], []
    for cell in exercise_cells:
        name = cell.metadata["exercise"]
        try:
            with contextlib.redirect_stdout(quiet):
                exec(compile(cell.source, f"{path.name}:{name}", "exec"), namespace)  # noqa: S102
                if name in CHECKED_WITH:  # graded with the function that calls it, once that is defined
                    graded_later.append(name)
                    continue
                check, fn = _check(name, namespace)
                check(fn)
            results.append(Result(name, "done"))
        except NotImplementedError:
            results.append(Result(name, "not written"))
        except Exception as e:  # noqa: BLE001 (a check's AssertionError, or the learner's cell raising)
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            hint = next((line for line in lines if line.startswith("hint:")), lines[1] if len(lines) > 1 else "")
            detail = lines[0] if lines else type(e).__name__
            results.append(Result(name, "fails", f"{detail} {hint}".strip()))
    by_name = {r.name: r for r in results}
    later = [Result(n, by_name[CHECKED_WITH[n]].state, f"graded with {CHECKED_WITH[n]}") if CHECKED_WITH[n] in by_name
             else Result(n, "fails", f"graded with {CHECKED_WITH[n]}, not found") for n in graded_later]
    return later + results, namespace


def _line(result: Result) -> str:
    difficulty, minutes = EXERCISES.get(result.name, (0, 0))
    plan = f"{STARS[difficulty]} {minutes:3d} min" if difficulty else "(no estimate)"
    mark = {"done": "done", "not written": "  - ", "fails": "FAIL"}[result.state]
    tail = f"  {result.state}" + (f": {result.detail}" if result.detail else "") if result.state != "done" else ""
    return f"  {mark}  {result.name:<28} {plan}{tail}"


def progress(root: Path = NOTEBOOK_DIR) -> int:
    """Print every graded notebook's exercises and the minutes left; 0 when every notebook was found."""
    done = total = left = 0
    missing = 0
    for relative in GRADED:
        path = root / relative
        if not path.exists():
            print(f"{relative}: missing (the course's copy is in the repository's notebooks/ folder)")
            missing += 1
            continue
        results = grade(path)
        print(f"{relative}: {sum(r.state == 'done' for r in results)} of {len(results)} done")
        for result in results:
            print(_line(result))
            total += 1
            done += result.state == "done"
            left += 0 if result.state == "done" else EXERCISES.get(result.name, (0, 0))[1]
    print(f"{done} of {total} exercises done; about {hours(left)} of exercises left by the plan "
          "(rlhf_scratch/course/plan.py)")
    return 1 if missing else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "progress" or len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--notebooks"):
        print("usage: python -m rlhf_scratch.course progress [--notebooks FOLDER]", file=sys.stderr)
        return 2
    root = Path(argv[2]) if len(argv) == 3 else NOTEBOOK_DIR
    if not root.is_dir():
        print(f"--notebooks: {root} is not a folder", file=sys.stderr)
        return 2
    return progress(root)
