"""benchmarks/gpu_check.sh as a caller reads it: its exit code says whether the check passed, a machine
without a GPU is said in one line, and nothing is written outside OUT.

The steps themselves take minutes; here `python3` on the PATH is a stand-in that answers the import
check, fails `gpu_speed.py` on purpose and writes a default run's metrics.jsonl where `--run-dir`
says (everything else goes to the real interpreter), so the script's own logic runs in a second.
"""

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "benchmarks/gpu_check.sh"

STAND_IN = """#!/bin/bash
case "$*" in
  *"import torch, transformer_lens, rlhf_scratch"*) echo "torch (stand-in) no GPU"; exit 0;;
  *benchmarks/gpu_speed.py*) echo "gpu_speed: a planted failure" >&2; exit 3;;
  *"-m rlhf_scratch.train"*)
    while [ $# -gt 0 ]; do [ "$1" = --run-dir ] && dir=$2; shift; done
    mkdir -p "$dir/checkpoints"
    for i in 1 2 3; do echo '{"rewards/mean": 0.25, "charts/phase_time": 0.5}'; done > "$dir/metrics.jsonl"
    exit 0;;
esac
exec {python} "$@"
"""


def gpu_check(env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", SCRIPT], cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_without_out_it_refuses_in_one_line():
    done = gpu_check({"OUT": ""})
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [
        "gpu_check: OUT=FOLDER is required, the folder for the results (OUT=/tmp/gpu_out bash benchmarks/gpu_check.sh)"]


def test_on_a_machine_without_a_gpu_it_runs_nothing_and_exits_non_zero_in_one_line(tmp_path):
    """CUDA_VISIBLE_DEVICES="" hides any GPU, so this is the no-GPU machine everywhere. Before: every
    step failed on cuda and the script ended `done`, exit 0, leaving /tmp/gpu_check_default_* behind."""
    before = set(Path("/tmp").glob("gpu_check_default_*"))
    out = tmp_path / "out"
    done = gpu_check({"OUT": str(out), "CUDA_VISIBLE_DEVICES": "", "STEPS": "4", "BUDGET": "60"})
    assert done.returncode == 4, done
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpu_check: no GPU here (torch ") and "DEVICE=cpu" in err[0], err
    assert [p.name for p in out.iterdir()] == ["log.txt"]
    assert set(Path("/tmp").glob("gpu_check_default_*")) == before


def test_a_failed_step_makes_the_exit_non_zero_and_the_default_run_stays_inside_out(tmp_path):
    """Step 2 fails (the stand-in), step 4 writes its run: exit 1, the last line names the failed step,
    the default run's metrics are copied into OUT and its folder (checkpoints) removed; nothing else."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(STAND_IN.replace("{python}", shutil.which("python3")))
    (bin_dir / "python3").chmod(0o755)
    out = tmp_path / "out"
    done = gpu_check({"OUT": str(out), "DEVICE": "cpu", "STEPS": "2,4", "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert done.returncode == 1, done
    last = done.stdout.strip().splitlines()[-1]
    assert last.endswith("] FAILED: 2. gpu_speed (tiny)"), done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "ppo_default.jsonl"]
    log = (out / "log.txt").read_text()
    assert "2. gpu_speed (tiny) rc=3" in log and "4. default run rc=0" in log
    assert "default run: 3 phases, mean reward of the last 3: 0.250" in log
