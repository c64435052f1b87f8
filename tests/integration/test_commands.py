"""One command style: every command, behind `rlhf` or its `python -m` path, answers a bad flag with one
line `error: …` on stderr and exit 2, no traceback (`config.command`); a known failure is exit 1,
Ctrl-C 130, a bug keeps its traceback."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from rlhf_scratch.commands.main import COMMANDS, main
from rlhf_scratch.config import ConfigError
from rlhf_scratch.config.command import command

ROOT = Path(__file__).resolve().parents[2]

NOT_COMMANDS = {  # modules run with `python -m` that are not a user's command, and why
    "rlhf_scratch/commands/main.py": "the front door itself",
    "rlhf_scratch/microscope/__main__.py": "run as `rlhf exact` (microscope/cli.py)",
    "rlhf_scratch/studies/compare.py": "run as `rlhf compare` (commands/compare.py)",
    "rlhf_scratch/studies/overoptimization/study.py": "run as `rlhf overoptimization` (commands/overoptimization.py)",
    "rlhf_scratch/controller/fate.py": "the reaper of the controller's local Ray, started by the driver itself",
    "rlhf_scratch/studies/overoptimization/run.py": "one unit of the study, its argv a JSON plan written by the study",
    "rlhf_scratch/studies/hacking/watch.py": "one watched unit of the hacking study (--detectors), its argv a JSON plan",
    "rlhf_scratch/course/open_problem.py": "writes the open problem's board, benchmarks/open_problem_*.json, for the "
                                           "maintainers; a learner grades through grade_gradient_estimator (notebook 07)",
}


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith("error: "), lines
    return lines[0]


def test_every_python_m_entry_is_an_rlhf_command_or_says_why_not():
    entries = {str(p.relative_to(ROOT)) for folder in ("rlhf_scratch", "interp") for p in (ROOT / folder).rglob("*.py")
               if 'if __name__ == "__main__":' in p.read_text()}
    served = {str(Path(*module.split("."))) + ".py" for module, _ in COMMANDS.values()}
    served |= {f"rlhf_scratch/{p.name}" for p in (ROOT / "rlhf_scratch").glob("*.py")}  # the documented paths
    # (rlhf_scratch/train.py: each runs a served module's main, tests/unit/test_layers.py)
    assert entries - served - set(NOT_COMMANDS) == set(), "a new `python -m` command: add it to rlhf (commands/main.py)"
    assert set(NOT_COMMANDS) <= entries, "an exception that is no longer there"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_refuses_a_bad_flag_in_one_line(name, capsys):
    assert main([name, "--no-such-flag"]) == 2
    line = one_error_line(capsys)
    assert "--no-such-flag" in line or "required" in line, line


@pytest.mark.parametrize("name, argv, message", [
    ("train", ["sentiment", "--total-phases", "x"], "error: argument --total-phases: invalid int value: 'x'"),
    ("sample", ["runs/x", "-n", "0"], "error: -n: must be >= 1; got 0"),
    ("export", [], "error: the following arguments are required: RUN_DIR, OUT_DIR"),
    ("preferences", ["--out", "p.jsonl"], "error: the following arguments are required: --num-pairs"),
    ("reward-model", ["--pairs", "x.jsonl", "--lr", "-1"], "error: lr: "),
    ("exact", ["--vocab", "x"], "error: argument --vocab: invalid int value: 'x'"),
    ("families", ["gpt3", "out"], "error: name: must be one of gpt2,"),
    ("notebooks", ["--jobs", "0", "notebooks/01_ppo_objective_math.ipynb"], "error: --jobs 0: at least 1"),
    ("report", [], "error: the following arguments are required: RUN_DIR"),
    ("features", ["/nowhere", "--hook", "x"], "error: --hook: must be one of resid_pre,"),
    ("features-seeds", [], "error: runs: give at least one run folder"),
])
def test_a_bad_value_names_its_field_in_the_one_line(name, argv, message, capsys):
    assert main([name, *argv]) == 2
    assert one_error_line(capsys).startswith(message)


def test_rlhf_help_lists_every_command_with_one_line(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, (_, line) in COMMANDS.items():
        assert f"  {name} " in out and line in out, name


@pytest.mark.parametrize("argv", [[], ["trian"]])
def test_no_or_an_unknown_command_is_one_line_and_exit_2(argv, capsys):
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert "train, sample" in line and ("'trian'" in line if argv else "required" in line)


def test_each_command_module_is_imported_only_when_asked_for():
    code = ("import sys; from rlhf_scratch.commands.main import main; main(['--help']); "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith(('interp', 'rlhf_scratch.studies'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr


# --- command(): the exit codes ---------------------------------------------------------------------


def _parse(argv):
    return argv


class PackageFailure(RuntimeError):
    """An error class this package defines (its module is tests', not the package's: patched below)."""


def _raise(err):
    def run(_):
        raise err
    return run


def test_command_maps_each_kind_of_error_to_its_exit_code(capsys, monkeypatch):
    assert command(_parse, lambda argv: None, []) == 0
    assert command(_parse, lambda argv: 3, []) == 3
    assert command(_parse, _raise(ConfigError("beta: must be >= 0; got -1")), []) == 2
    assert one_error_line(capsys) == "error: beta: must be >= 0; got -1"
    assert command(_parse, _raise(FileNotFoundError("x.txt: not found\nmore")), []) == 1
    assert one_error_line(capsys) == "error: x.txt: not found"
    monkeypatch.setattr(PackageFailure, "__module__", "rlhf_scratch.engine.somewhere")
    assert command(_parse, _raise(PackageFailure("the worker died")), []) == 1
    assert one_error_line(capsys) == "error: the worker died"
    assert command(_parse, _raise(KeyboardInterrupt()), []) == 130
    assert capsys.readouterr().err.strip() == "interrupted"
    with pytest.raises(ZeroDivisionError):  # a bug: its traceback, not one line
        command(_parse, _raise(ZeroDivisionError("division by zero")), [])
    with pytest.raises(RuntimeError):  # torch's RuntimeError is no known failure
        command(_parse, _raise(RuntimeError("CUDA error")), [])


def test_an_errors_notes_follow_its_line(capsys):
    err = ValueError("prompts: p.txt: not found")
    err.add_note("the run folder runs/x was left as it was")
    assert command(_parse, _raise(err), []) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: prompts: p.txt: not found", "the run folder runs/x was left as it was"]


# --- the console script and the documented `python -m` paths, as a user runs them ------------------


@pytest.mark.parametrize("argv, message", [
    (["rlhf", "trian"], "error: unknown command 'trian'"),
    (["rlhf", "train", "sentiment", "--kl-coef", "-1"], "error: beta: must be a finite number >= 0; got -1.0"),
    ([sys.executable, "-m", "rlhf_scratch.exact", "--bogus"], "error: unrecognized arguments: --bogus"),
    ([sys.executable, "-m", "rlhf_scratch.train", "sentiment", "--kl-coef", "-1"],
     "error: beta: must be a finite number >= 0; got -1.0"),
    ([sys.executable, "-m", "interp.report", "--bogus"], "error: "),
])
def test_as_a_process(argv, message):
    import shutil

    if argv[0] == "rlhf" and shutil.which("rlhf") is None:
        pytest.fail("no rlhf script: pip install -e . (pyproject's [project.scripts])")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines


def test_every_command_module_has_a_main_taking_argv():
    for module, _ in COMMANDS.values():
        assert callable(importlib.import_module(module).main), module
