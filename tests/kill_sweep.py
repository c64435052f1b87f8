"""A kill -9 sweep of the long commands: each is killed at seeded random instants, continued exactly
as its docs and its error line say, and its output is checked against an uninterrupted run.

    python tests/kill_sweep.py --instants 3 --json benchmarks/kill_sweep_<date>.json   # every case
    python tests/kill_sweep.py --cases train-ppo --instants 1                          # one

tests/integration/test_kill_sweep.py runs a quick version (one case, one instant) in the default tier and the
whole sweep at fewer instants in the slow tier. For each case:

1. the command runs uninterrupted once (the reference, and its wall time W);
2. for each instant t ~ U(0.15 W, 0.9 W) (seeded), the command is started in a new folder, SIGKILLed
   at t (the main process only, as the OOM killer would), then continued with the case's command
   (`--resume RUN`, or the same command again) until it exits 0 (at most 3 tries); where the error
   line says the run stopped before its first checkpoint (or its config), the folder is removed
   and the command that began it run again, as that line says; a kill before the folder existed
   is followed by the same command again; a kill after the run wrote its finished status (in the
   controller's Ray shutdown) is followed by nothing: the folder is checked as it was left;
3. the folder is checked: status.json parses and says finished; every metrics.jsonl line is JSON,
   its step numbers strictly increasing with none missing; no temporary folder or file is left
   (`*.tmp`); the run's lock is free; no process of the killed command is left after 5 s; and where
   the docs promise bit-exactness, the metrics (without wall-clock timings) and the weights equal
   the reference's.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import torch

from rlhf_scratch.engine.loop import TIMING_PREFIXES

PY = sys.executable
START_OVER = "remove the folder"  # the error line of a run killed before its first checkpoint
TIMING_KEYS = (*TIMING_PREFIXES, "elapsed", "seconds")  # the training loop's, and the other commands' wall-clock keys


@dataclass
class Case:
    """One long command: how to start it into `out`, how to continue it, what to compare."""

    name: str
    start: Callable[[Path, Path], list[str]]  # (out, shared) -> argv
    cont: Callable[[Path, Path], list[str]]  # the documented way to continue after a kill
    folder: Callable[[Path], Path] = lambda out: out  # the run folder inside `out`
    metrics: str | None = "metrics.jsonl"
    step_key: str = "phase"
    weights: tuple[str, ...] = ()  # files whose tensors must equal the reference's
    bit_exact: bool = True
    status: bool = True  # writes status.json
    extra_checks: list[Callable[[Path, Path], str | None]] = field(default_factory=list)


def train(*flags: str) -> Callable[[Path, Path], list[str]]:
    return lambda out, shared: [PY, "-m", "rlhf_scratch.train", "periods", "--total-phases", "5", "--batch-size", "8",
                                "--num-minibatches", "2", "--gen-len", "6", "--save-every", "1", "--threads", "1",
                                "--prompts", str(shared / "prompts.txt"), "--run-dir", str(out), *flags]


def resume_train(out: Path, shared: Path) -> list[str]:
    return [PY, "-m", "rlhf_scratch.train", "--resume", str(out)]


def reward_model(out: Path, shared: Path) -> list[str]:
    return [PY, "-m", "rlhf_scratch.reward_model", "--pairs", str(shared / "pairs.jsonl"), "--epochs", "3",
            "--batch-size", "8", "--save-every", "2", "--run-dir", str(out)]


def preferences(out: Path, shared: Path) -> list[str]:
    return [PY, "-m", "rlhf_scratch.preferences", "--out", str(out / "pairs.jsonl"), "--num-pairs", "160", "--gen-len", "8",
            "--threads", "1"]


def same_file(name: str) -> Callable[[Path, Path], str | None]:
    def check(run: Path, reference: Path) -> str | None:
        if not (run / name).is_file():
            return f"{name} missing"
        return None if (run / name).read_bytes() == (reference / name).read_bytes() else f"{name} differs from the uninterrupted run's"
    return check


def unless_written(name: str, start: Callable[[Path, Path], list[str]]) -> Callable[[Path, Path], list[str]]:
    return lambda out, shared: [PY, "-c", "pass"] if (out / name).exists() else start(out, shared)


def prepare_out(start: Callable[[Path, Path], list[str]]) -> Callable[[Path, Path], list[str]]:
    """A command that writes a file into `out` (made first, as a user's folder would be)."""
    def argv(out: Path, shared: Path) -> list[str]:
        out.mkdir(parents=True, exist_ok=True)
        return start(out, shared)
    return argv


def study(out: Path, shared: Path) -> list[str]:
    return [PY, "-m", "rlhf_scratch.compare", "periods", "--quick", "--seeds", "1", "--algos", "ppo,rloo",
            "--out", str(out)]


def units_match(run: Path, reference: Path) -> str | None:
    """Each unit of a study (runs/<unit>/) finished, with the uninterrupted study's metrics and weights,
    and the study's table (its numbers over the units) the same."""
    units = sorted(p.name for p in (reference / "runs").iterdir())
    for unit in units:
        mine, ref = run / "runs" / unit, reference / "runs" / unit
        try:
            status = json.loads((mine / "status.json").read_text())["status"]
        except (OSError, json.JSONDecodeError, KeyError) as e:
            return f"{unit}: status.json unreadable ({e})"
        if status != "finished":
            return f"{unit}: status {status!r}"
        rows, bad = read_lines(mine / "metrics.jsonl")
        if bad or [without_timings(r) for r in rows] != [without_timings(r) for r in read_lines(ref / "metrics.jsonl")[0]]:
            return f"{unit}: metrics.jsonl differs from the uninterrupted study's" + (f" ({bad})" if bad else "")
        a, b = tensors(mine / "policy.pt"), tensors(ref / "policy.pt")
        if a.keys() != b.keys() or any(not torch.equal(a[k], b[k]) for k in b):
            return f"{unit}: policy.pt differs from the uninterrupted study's"
    measured = ("wall_s", "peak_mib", "tokens_per_s")  # the machine's, not the study's: they differ run to run
    groups = [{label: {k: v for k, v in numbers.items() if k not in measured} for label, numbers in
               json.loads((folder / "table.json").read_text())["groups"].items()} for folder in (run, reference)]
    if groups[0] != groups[1]:
        return "table.json's groups differ from the uninterrupted study's"
    return None


def features(out: Path, shared: Path) -> list[str]:
    """interp.features on a finished run (made once in `shared`), small settings, its SAE cache in `out`."""
    return [PY, "-m", "interp.features", str(shared / "ppo-run"), "--out", str(out / "page"), "--cache-dir",
            str(out / "saes"), "--d-sae", "32", "--k", "4", "--training-tokens", "8192", "--eval-batches", "2",
            "--top-n", "2", "--n-samples", "8", "--n-diff", "8", "--n-snippets", "20", "--adl-texts", "0",
            "--threads", "1"]


def features_match(run: Path, reference: Path) -> str | None:
    """The page's features.json as the uninterrupted command's (its numbers; not its timings), and no
    half-written SAE left in the cache (a `.KEY-XXXX` folder)."""
    stale = [p.name for p in (run / "saes").glob(".*")] if (run / "saes").is_dir() else []
    if stale:
        return f"half-written SAE folders left in the cache: {stale}"
    found = [sorted(folder.glob("page/**/features.json")) for folder in (run, reference)]
    if not found[0]:
        return "features.json missing"
    a, b = (json.loads(f[0].read_text()) for f in found)
    drop = ("seconds", "time", "wall", "cache", "path", "folder", "generated")
    clean = lambda d: {k: v for k, v in d.items() if not any(w in k for w in drop)}
    return None if clean(a) == clean(b) else f"features.json differs in {sorted(k for k in clean(b) if clean(a).get(k) != b[k])[:5]}"


def calculator(out: Path, shared: Path) -> list[str]:
    """A multi-turn run (issue 58): `train arithmetic --env calculator`, the shipped sibling's episodes calling the
    calculator (the environment's defaults: its model, its problems, gen_len 20); validation after phases 4 and 8."""
    return [PY, "-m", "rlhf_scratch.train", "arithmetic", "--env", "calculator", "--total-phases", "8", "--batch-size", "8",
            "--num-minibatches", "2", "--test-freq", "4", "--val-size", "8", "--val-n", "2", "--save-every", "1", "--threads", "1",
            "--seed", "2", "--run-dir", str(out)]


def calls_made(run: Path, reference: Path) -> str | None:
    """The run's episodes called the tool and it answered (else the case tested one-turn episodes only)."""
    rows, _ = read_lines(run / "metrics.jsonl")
    called = [r["phase"] for r in rows if r.get("tools/call_frequency", 0) > 0 and r.get("episodes/env_tokens", 0) > 0]
    return None if len(called) >= len(rows) // 2 else f"a tool call in phases {called} only, of {len(rows)}"


def controller(out: Path, shared: Path) -> list[str]:
    return [*train("--controller", "ray", "--workers", "1")(out, shared)]


CASES = {
    "train-ppo": Case("train-ppo", train(), resume_train, weights=("policy.pt",)),
    "train-grpo": Case("train-grpo", train("--algo", "grpo", "--num-generations", "2"), resume_train, weights=("policy.pt",)),
    "train-ppo-lora": Case("train-ppo-lora", train("--lora-rank", "4"), resume_train, weights=("policy.pt",)),
    "reward-model": Case("reward-model", reward_model,
                         lambda out, shared: [PY, "-m", "rlhf_scratch.reward_model", "--resume", str(out)],
                         step_key="step", weights=("reward_model.pt",)),
    # written whole or not at all (a temporary file renamed): after a kill, the same command again,
    # unless the file is there (then it is whole, and the command would refuse to overwrite it)
    "preferences": Case("preferences", prepare_out(preferences), prepare_out(unless_written("pairs.jsonl", preferences)),
                        metrics=None, status=False, extra_checks=[same_file("pairs.jsonl")]),
    # a study: "run the same command again to continue" (its units resume from their checkpoints)
    "study-quick": Case("study-quick", study, study, metrics=None, status=False, extra_checks=[units_match]),
    # a page: the same command again; the SAE it was training when killed is trained anew
    "interp-features": Case("interp-features", features, features, metrics=None, status=False,
                            extra_checks=[features_match]),
    # a multi-turn run, its episodes calling the calculator (issue 58): --resume, bit-exact
    "train-calculator": Case("train-calculator", calculator, resume_train, weights=("policy.pt",), extra_checks=[calls_made]),
    # the single controller on Ray: --resume, as the in-process run
    "train-controller": Case("train-controller", controller,
                             lambda out, shared: [*resume_train(out, shared), "--controller", "ray", "--workers", "1"],
                             weights=("policy.pt",)),
}


def prepare_shared(shared: Path, names: list[str] | tuple[str, ...] = tuple(CASES)) -> None:
    """What the cases `names` read: a prompts file, and as they need them a finished run and a small set of preference
    pairs (made once)."""
    shared.mkdir(parents=True, exist_ok=True)
    (shared / "prompts.txt").write_text("The movie was\nI think that\nIn the end\nThe actors\n")
    if "interp-features" in names and not (shared / "ppo-run" / "status.json").exists():  # the run interp-features reads
        subprocess.run(train()(shared / "ppo-run", shared), check=True, capture_output=True, timeout=300)
    if "reward-model" in names and not (shared / "pairs.jsonl").exists():
        subprocess.run([PY, "-m", "rlhf_scratch.preferences", "--out", str(shared / "pairs.jsonl"), "--num-pairs", "96",
                        "--gen-len", "8", "--threads", "1"], check=True, capture_output=True, timeout=300)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}


def run_to_end(argv: list[str], timeout: float = 600) -> tuple[int, float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env(), capture_output=True, text=True, timeout=timeout)
    return proc.returncode, time.perf_counter() - start, (proc.stdout + proc.stderr)[-3000:]


def run_and_kill(argv: list[str], at: float) -> tuple[int, list[str]]:
    """Start `argv` in a session of its own, SIGKILL its main process after `at` s; return its exit
    code and the processes of its session still alive 5 s later (children it left behind), each as "pid command line"."""
    proc = subprocess.Popen(argv, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        proc.wait(timeout=at)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
    code = proc.wait()
    time.sleep(5)
    pids = session_pids(proc.pid)
    left = [f"{pid} {describe(pid)}" for pid in pids]
    for pid in pids:  # never leave them running, whatever the verdict
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return code, left


def describe(pid: int) -> str:
    """A leftover process as the failure line names it: its command line, cut to 120 characters."""
    try:
        return " ".join(psutil.Process(pid).cmdline())[:120]
    except psutil.Error:
        return "(gone)"


def session_pids(sid: int) -> list[int]:
    """The live (not zombie) processes of session `sid`."""
    pids = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                pids.append(proc.pid)
        except (ProcessLookupError, PermissionError):
            continue
    return pids


def read_lines(path: Path) -> tuple[list[dict], str | None]:
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            return rows, f"{path.name} line {n} is not JSON: {line[:80]!r}"
    return rows, None


def without_timings(row: dict) -> dict:
    return {k: v for k, v in row.items() if not any(k.startswith(t) or k == t for t in TIMING_KEYS)}


def tensors(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    flat: dict[str, torch.Tensor] = {}

    def walk(prefix: str, obj) -> None:
        if isinstance(obj, torch.Tensor):
            flat[prefix] = obj
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)

    walk("", state)
    return flat


def check_folder(case: Case, run: Path, reference: Path) -> list[str]:
    """Every way the continued run's folder can be wrong, as one line each (empty: it is right)."""
    problems = []
    if case.status:
        try:
            status = json.loads((run / "status.json").read_text())
            if status.get("status") != "finished":
                problems.append(f"status.json says {status.get('status')!r}, not 'finished'")
        except (OSError, json.JSONDecodeError) as e:
            problems.append(f"status.json unreadable: {e}")
    if case.metrics:
        rows, bad = read_lines(run / case.metrics)
        if bad:
            problems.append(bad)
        steps = [r.get(case.step_key) for r in rows]
        ref_rows, _ = read_lines(reference / case.metrics)
        if steps != [r.get(case.step_key) for r in ref_rows]:
            problems.append(f"{case.metrics} steps {steps}, uninterrupted {[r.get(case.step_key) for r in ref_rows]}")
        elif case.bit_exact:
            for mine, ref in zip(rows, ref_rows):
                if without_timings(mine) != without_timings(ref):
                    diff = sorted(k for k in without_timings(ref) if without_timings(mine).get(k) != ref[k])
                    problems.append(f"{case.step_key} {ref.get(case.step_key)} differs from the uninterrupted run in {diff[:5]}")
                    break
    if case.bit_exact:
        for name in case.weights:
            mine, ref = tensors(run / name), tensors(reference / name)
            if mine.keys() != ref.keys() or any(not torch.equal(mine[k], ref[k]) for k in ref):
                problems.append(f"{name} differs from the uninterrupted run's")
    leftovers = [str(p.relative_to(run)) for p in run.rglob("*") if p.name.endswith(".tmp") or ".tmp." in p.name]
    if leftovers:
        problems.append(f"temporary files left: {leftovers[:5]}")
    for lock in run.rglob("*.lock"):
        with open(lock) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
            except OSError:
                problems.append(f"{lock.name} still held")
    for check in case.extra_checks:
        if problem := check(run, reference):
            problems.append(problem)
    return problems


def finished(case: Case, run: Path) -> bool:
    """Whether the killed run had already said it finished (the kill landed in what follows the status:
    the controller's Ray shutdown, the interpreter's exit). Then nothing is continued — `--resume` rightly
    refuses a finished run — and the folder is checked as it is."""
    try:
        return case.status and json.loads((case.folder(run) / "status.json").read_text())["status"] == "finished"
    except (OSError, ValueError, KeyError):
        return False


def sweep(names: list[str], instants: int, seed: int, root: Path, say=print) -> list[dict]:
    shared = root / "shared"
    prepare_shared(shared, names)
    rng = random.Random(seed)
    results = []
    for name in names:
        case = CASES[name]
        reference = root / f"{name}-reference"
        code, wall, out = run_to_end(case.start(reference, shared))
        if code != 0:
            raise RuntimeError(f"{name}: the uninterrupted run failed (exit {code}):\n{out}")
        say(f"{name}: uninterrupted run {wall:.1f} s")
        for k in range(instants):
            at = rng.uniform(0.15, 0.9) * wall
            run = root / f"{name}-kill{k}"
            code, left = run_and_kill(case.start(run, shared), at)
            done_before = len(read_lines(run / case.metrics)[0]) if case.metrics and (run / case.metrics).exists() else 0
            tries, said = 0, []  # said: each failed command's last line, in order
            cont_code = 0 if finished(case, run) else None  # killed in its tail (Ray's shutdown): nothing to continue
            while cont_code is None and tries < 3:
                tries += 1
                if not run.exists():  # killed before it made its folder: nothing happened, so the same command again
                    cont_code, _, last = run_to_end(case.start(run, shared))
                    if cont_code == 0:
                        break
                    said.append(f"start: {last.strip().splitlines()[-1:]}")
                    continue
                cont_code, _, last = run_to_end(case.cont(run, shared))
                if cont_code == 0:
                    break
                said.append(f"continue: {last.strip().splitlines()[-1:]}")
                if START_OVER in last:  # killed before its first checkpoint: the error line says to start over
                    shutil.rmtree(run)
                    cont_code, _, last = run_to_end(case.start(run, shared))
                    if cont_code == 0:
                        break
                    said.append(f"start over: {last.strip().splitlines()[-1:]}")
            problems = ([] if cont_code == 0 else [f"continuing failed {tries} times: {said}"])
            if cont_code == 0:
                problems += check_folder(case, case.folder(run), case.folder(reference))
            if left:
                problems.append(f"{len(left)} process(es) of the killed command still running 5 s after the kill: {left}")
            results.append({"case": name, "instant_s": round(at, 2), "of_wall": round(at / wall, 2),
                            "killed": code == -signal.SIGKILL, "steps_logged_at_kill": done_before,
                            "continue_tries": tries, "problems": problems})
            say(f"{name}: kill at {at:.1f} s ({done_before} logged) -> {'ok' if not problems else problems}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--instants", type=int, default=3, help="kills per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args(argv)
    names = opts.cases.split(",")
    if unknown := [n for n in names if n not in CASES]:
        print(f"error: --cases: unknown {', '.join(unknown)}; choose from {', '.join(CASES)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        results = sweep(names, opts.instants, opts.seed, Path(tmp))
    passed = sum(not r["problems"] for r in results)
    print(f"{passed} of {len(results)} kills continued to a correct folder ({len(names)} commands × {opts.instants} instants)")
    if opts.json:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
        from provenance import provenance  # the commit that ran, read from git now (benchmarks/provenance.py)

        record = {"provenance": provenance(), "seed": opts.seed, "instants": opts.instants, "cases": names,
                  "passed": passed, "kills": len(results), "results": results}
        opts.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
