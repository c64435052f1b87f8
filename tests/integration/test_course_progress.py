"""`python -m rlhf_scratch.course progress` (course/progress.py): it runs the learner's cells and the checks,
says what is done, not written or failing, names a missing notebook in one line, and sums the time left."""

import subprocess
import sys
from pathlib import Path

import nbformat

from rlhf_scratch.course import progress

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _learner_folder(tmp_path: Path, write: dict[str, str]) -> Path:
    """notebooks/exercises/07 as a learner left it: the exercises in `write` replaced by the given source."""
    (tmp_path / "exercises").mkdir()
    nb = nbformat.read(NOTEBOOKS / "exercises" / "07_parts_exercises.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("exercise") in write and "exercise" in cell.metadata.get("tags", []):
            cell.source = write[cell.metadata["exercise"]]
    nbformat.write(nb, tmp_path / "exercises" / "07_parts_exercises.ipynb")
    return tmp_path


def test_progress_grades_each_exercise_and_names_what_is_missing(tmp_path, capsys):
    solved = "from rlhf_scratch.course.solutions_parts import ReplayMemory"
    wrong = ("def generate(model, prompts, gen_len, next_token, pad_id, eos_id=None, use_cache=False):\n"
             "    raise ValueError('my loop broke')")
    root = _learner_folder(tmp_path, {"ReplayMemory": solved, "generate": wrong})
    assert progress.progress(root) == 1  # the other notebooks are missing
    out = capsys.readouterr().out
    assert "exercises/07_parts_exercises.ipynb: 1 of 3 done" in out
    assert "done  ReplayMemory" in out
    assert "FAIL  generate" in out and "my loop broke" in out
    assert "TransformerWithValueHead" in out and "not written" in out
    assert "exercises/01_ppo_objective_exercises.ipynb: missing" in out
    assert out.strip().endswith("1 of 3 exercises done; about 1 h 00 min of exercises left by the plan "
                                "(rlhf_scratch/course/plan.py)")  # 20 + 40 minutes


def test_the_command_refuses_a_bad_folder_in_one_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "rlhf_scratch.course", "progress", "--notebooks",
                          str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.strip() == f"--notebooks: {tmp_path / 'nowhere'} is not a folder"
