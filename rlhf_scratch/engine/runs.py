"""The run folder: what a training run writes, who owns it, and `load_run` to read it back.

    runs/<task>-<direction>-<algo>-<YYYYmmdd-HHMMSS>/
        config.json      the algorithm, every field of its args, and `rewarded_by`: what scored the
                         samples (the task's reward, or a Python function's qualified name; a judge)
        metrics.jsonl    one JSON object per phase (see loop.SHARED_METRICS and each trainer's)
        samples.md       the sample tables printed during training
        curves.png       reward and KL per phase
        policy.pt        the tuned policy as `models.policy.saved_state` gives it: every weight of
                         the LM (and of what the algorithm built around it, PPO's critic), or of an
                         adapted LM only what trains, with the base's sha256
        status.json      {"status": running | finished | interrupted | failed, "phase": completed
                         phases, "total_phases", "pid", "error" (failed: the exception's one line)},
                         rewritten after every phase
        train.lock       held (flock) by the process training the run, for as long as it lives
        checkpoints/     phase-XXXX/checkpoint.pt and `latest` (checkpoint.py): weights,
                         optimizer moments, RNGs — what `--resume` needs; a finished run keeps one

A run folder has one owner: the training process holds an exclusive `flock` on train.lock from
start to exit. The OS drops the lock when the process ends, however it ends (kill -9 included),
so a lock is never stale. Every command that reads or resumes a run (`--resume`, `export`,
`sample`, `interp.report`, `compare`) asks `read_status`, which combines status.json with the
lock: "running" with nobody holding the lock is `lost` (the process died without a word).

The reference model is not copied: it is `loading.load_lm(config.model)`, the untouched model
the run started from. `load_run` rebuilds both.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformer_lens import HookedTransformer

from rlhf_scratch.config import CommonArgs, ConfigError, registry
from rlhf_scratch.models.loading import load_lm
from rlhf_scratch.models.policy import Policy, build_policy, language_model, load_saved_state, saved_state, trainable_lm
from rlhf_scratch.reward.model import KIND

CONFIG_FILE = "config.json"
STATUS_FILE = "status.json"
METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.md"
CURVES_FILE = "curves.png"
POLICY_FILE = "policy.pt"
LOCK_FILE = "train.lock"
CHECKPOINTS_DIR = "checkpoints"  # phase-XXXX/ each (`checkpoint.save_checkpoint`)
REWARDED_BY = "rewarded_by"  # config.json's key for what scored the run (not an args field)
CONTROLLER = "controller"  # config.json's key for how the run is placed (`controller.options.controller_record`)
REWARD_MODEL_KIND = KIND  # config.json's "algo" in a reward-model run folder (engine.reward_model.train_reward_model)


class RunFolderError(ConfigError):
    """A run folder that is missing, unreadable or would be overwritten (one-line message)."""


def check_new_run_dir(path: str | Path | None) -> None:
    """Refuse a run folder that is a file or a non-empty folder (None: an automatic name, fine); a
    run that stopped before its first checkpoint is refused with the way to start it over."""
    if path is None:
        return
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RunFolderError(f"run_dir: {path} is a file, not a folder; choose another --run-dir")
    if path.exists() and any(path.iterdir()):
        if stopped_before_config(path):
            raise RunFolderError(f"run_dir: {path} holds a run that {start_over_hint(path, 'it wrote config.json').removeprefix('it ')}")
        if (path / CONFIG_FILE).is_file() and not list_checkpoints(path) and read_status(path)["status"] != "running":
            raise RunFolderError(f"run_dir: {path} holds a run that {start_over_hint(path).removeprefix('it ')}")
        raise RunFolderError(f"run_dir: {path} exists and is not empty; choose another --run-dir")


def new_run_dir(args: CommonArgs, path: str | Path | None = None, root: str | Path = "runs",
                rewarded_by: dict | None = None, controller: dict | None = None) -> Path:
    """Create the run folder: `path`, `args.run_dir`, or `root/<task>-<direction>-<algo>-<timestamp>`,
    and write config.json (the args, `rewarded_by`, and how the run is placed: `controller`). Never reuse a non-empty folder, so no
    earlier run is overwritten."""
    path = path if path is not None else args.run_dir
    if path is not None:
        path = Path(path)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path(root) / f"{args.task}-{args.direction}-{args.algo}-{stamp}"
        n = 1
        while path.exists():
            n += 1
            path = Path(root) / f"{args.task}-{args.direction}-{args.algo}-{stamp}-{n}"
    check_new_run_dir(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        config = {**args.to_dict(), REWARDED_BY: rewarded_by, **({CONTROLLER: controller} if controller else {})}
        (path / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    except OSError as e:
        raise RunFolderError(f"run_dir: cannot write to {path} ({e.strerror or type(e).__name__})") from None
    return path


# --- who owns the folder -------------------------------------------------------------------------


class RunLock:
    """The training process's ownership of a run folder: an exclusive `flock` on train.lock, with
    the owner's PID written in the file. Released by `release()` or, whatever happens, by the OS
    when the process ends."""

    def __init__(self, run_dir: Path, fd: int):
        self.run_dir, self._fd = run_dir, fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None


def lock_run(run_dir: str | Path) -> RunLock:
    """Take ownership of `run_dir` for this process, or refuse in one line if a live process
    holds it (`read_status` readers hold a shared lock for an instant: retried for a second)."""
    run_dir = Path(run_dir)
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    for _ in range(20):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            time.sleep(0.05)
    else:
        os.close(fd)
        raise RunFolderError(f"{run_dir}: {next_step(run_dir)}")
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return RunLock(run_dir, fd)


def lock_holder(run_dir: str | Path) -> int | None:
    """The PID of the process training `run_dir` now (0 if it is unreadable), or None if no
    process holds the folder's lock."""
    path = Path(run_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # no lock file: never trained, or a run from before locks
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 32).decode(errors="replace").strip()
            return int(text) if text.isdigit() else 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


# --- status and the advice that fits it ------------------------------------------------------------


def write_status(run_dir: Path, status: str, phase: int, total_phases: int | None = None,
                 error: str | None = None) -> dict:
    """Record the run's state after `phase` completed phases (written atomically): running,
    finished, interrupted (a signal; a checkpoint of `phase` was written) or failed (`error`: the
    exception's one line). Returns the record."""
    path = Path(run_dir) / STATUS_FILE
    tmp = path.with_name(f".{STATUS_FILE}.tmp")
    record = {"status": status, "phase": phase, "total_phases": total_phases, "pid": os.getpid()}
    if error is not None:
        record["error"] = error
    tmp.write_text(json.dumps(record) + "\n")
    os.replace(tmp, path)
    return record


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Finished checkpoint folders, oldest first (temporary folders are not checkpoints)."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("phase-"))


def read_status(run_dir: str | Path) -> dict:
    """The run's state: status.json, checked against the lock. `running` needs a live owner:
    without one it is `lost` (killed, or the machine stopped, before it could say so); a folder
    whose owner has not written status.json yet is `running` at phase 0. A run folder from before
    status files counts as finished if it has a policy."""
    run_dir = Path(run_dir)
    path = run_dir / STATUS_FILE
    holder = lock_holder(run_dir)
    if path.is_file():
        try:
            status = json.loads(path.read_text())
        except json.JSONDecodeError:
            status = {"status": "unknown", "phase": None}
    else:
        status = {"status": "finished" if (run_dir / POLICY_FILE).is_file() else "unknown", "phase": None}
    if holder is not None:
        status = {**status, "status": "running", "pid": holder or status.get("pid")}
        status.setdefault("phase", 0)
    elif status["status"] == "running":
        status = {**status, "status": "lost"}
    return status


def saved_kind(run_dir: str | Path) -> str | None:
    """config.json's "algo" of a run folder (an algorithm, or `reward_model`); None if unreadable."""
    try:
        return json.loads((Path(run_dir) / CONFIG_FILE).read_text()).get("algo", "ppo")
    except (OSError, ValueError, AttributeError):
        return None


def resume_command(run_dir: str | Path) -> str:
    """The shell command that continues `run_dir`, quoted so it pastes as it is (spaces, quotes):
    `train --resume`, or `reward_model --resume` for a reward-model run."""
    command = "reward_model" if saved_kind(run_dir) == REWARD_MODEL_KIND else "train"
    return f"python -m rlhf_scratch.{command} --resume {shlex.quote(str(run_dir))}"


def next_step(run_dir: str | Path, status: dict | None = None) -> str:
    """What the run's state is and what to do about it, as one sentence: running → wait or stop it;
    interrupted, failed or lost → the exact resume command (or the Python call, for a reward the
    command line cannot rebuild); finished → nothing to do."""
    run_dir = Path(run_dir)
    status = status or read_status(run_dir)
    state, phase, total = status["status"], status.get("phase"), status.get("total_phases")
    of = f"{phase}/{total}" if total else f"{phase}"
    if state == "running":
        pid = status.get("pid") or "?"
        return (f"the run is still training (process {pid}, phase {of}); wait for it to finish, or stop it "
                f"with `kill -INT {pid}` (it saves a checkpoint) and resume it later")
    if state == "finished":
        return f"the run finished after {phase} phases"
    what = {"interrupted": f"the run was interrupted after phase {of}",
            "failed": f"the run failed after phase {of} ({status.get('error', 'no error recorded')})",
            "lost": f"the run stopped without a word after phase {of} (killed, or the machine stopped)"}.get(
        state, "the run has no status")
    return f"{what}; {resume_hint(run_dir)}"


def start_over_hint(run_dir: str | Path, before: str = "its first checkpoint") -> str:
    """The way out for a run that stopped before its first checkpoint (or before it wrote its
    config): nothing to resume, and the folder is not empty, so the command that began it is
    refused there until the folder goes."""
    quoted = shlex.quote(str(run_dir))
    return (f"it stopped before {before}, so there is nothing to resume: to start it over in {quoted}, "
            f"remove the folder (rm -r {quoted}) and run the command that began it again, or give it another --run-dir")


def stopped_before_config(run_dir: str | Path) -> bool:
    """A folder a run was killed in before it wrote config.json: only the lock and the status it
    takes first, and no live owner. Neither --resume nor the command that began it can use it as it is."""
    path = Path(run_dir)
    if not path.is_dir() or (path / CONFIG_FILE).exists():
        return False
    names = {p.name for p in path.iterdir()}
    return bool(names) and names <= {LOCK_FILE, STATUS_FILE} and lock_holder(path) is None


def resume_hint(run_dir: str | Path) -> str:
    """How to continue `run_dir` from its latest checkpoint: the shell command, or — when a Python
    function rewarded it, which the command line cannot rebuild — the Python call."""
    run_dir = Path(run_dir)
    checkpoints = list_checkpoints(run_dir)
    if not checkpoints:
        return start_over_hint(run_dir)
    at = int(checkpoints[-1].name.split("-")[1])
    rewarded = load_rewarded_by(run_dir)
    if saved_kind(run_dir) != REWARD_MODEL_KIND and not cli_can_rebuild(rewarded, load_args(run_dir)):
        return (f"resume it from phase {at} in Python with the same reward ({describe_rewarded_by(rewarded)}): "
                f"Trainer(load_args({str(run_dir)!r}), reward_fn=...).train({str(run_dir)!r}, resume=True)")
    return f"resume it from phase {at} with: {resume_command(run_dir)}"


def refuse_if_training(run_dir: str | Path) -> None:
    """One line, if a live process is training `run_dir` (its files are changing under us)."""
    status = read_status(run_dir)
    if status["status"] == "running":
        raise RunFolderError(f"{run_dir}: {next_step(run_dir, status)}")


def reward_shown(run_dir: str | Path, args: CommonArgs) -> str:
    """Which reward `sample` and `interp.report` show: the run's own (its task's, rebuilt from
    config.json), or — for a run a Python function rewarded — the task's, saying it is not the run's."""
    rewarded = load_rewarded_by(run_dir)
    if cli_can_rebuild(rewarded, args):
        if args.task == "sentiment" and args.reward_model != "tiny":
            kind = ("a Bradley–Terry reward model's scalar score (unbounded, not a probability)"
                    if saved_kind(args.reward_model) == REWARD_MODEL_KIND else "the classifier's probability")
            return f"reward shown: {args.reward_model}, {kind} — the run's own"
        return f"reward shown: task {args.task}, the run's own"
    return (f"reward shown: task {args.task}, NOT the run's own: it was rewarded by {describe_rewarded_by(rewarded)}, "
            "which the command line cannot load")


def size_text(path: Path) -> str:
    """The bytes of `path` (a folder: of its files) as a person reads them: `312 MB`, `4.2 MB`,
    `0.31 MB` (two significant figures below 10 MB: an adapted run's trained tensors are not "0 MB")."""
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    mb = sum(f.stat().st_size for f in files) / 1e6
    return f"{mb:.0f} MB" if mb >= 10 else f"{mb:.2g} MB"


def finished_summary(run_dir: str | Path) -> str:
    """What a finished run left and the two commands to look at it (printed by `train` at the end)."""
    run_dir = Path(run_dir)
    metrics, quoted = read_metrics(run_dir), shlex.quote(str(run_dir))
    reward = (f", reward {metrics[0]['rewards/mean']:.3f} → {metrics[-1]['rewards/mean']:.3f}"
              if metrics else "")
    kept = [f"{name} {size_text(run_dir / name)}" for name in (POLICY_FILE, "checkpoints") if (run_dir / name).exists()]
    checkpoints = list_checkpoints(run_dir)
    why = (f" ({checkpoints[-1].name}: weights + optimizer, to continue it with --resume and a larger "
           f"--total-phases; delete checkpoints/ if you will not)") if checkpoints else ""
    return "\n".join([
        f"done: {run_dir}  ({len(metrics)} phases{reward}; {size_text(run_dir)}: {', '.join(kept)}{why})",
        f"  look inside:  python -m interp.report {quoted}",
        f"  sample it:    python -m rlhf_scratch.sample {quoted}",
    ])


# --- what rewarded the run ---------------------------------------------------------------------------


def load_rewarded_by(run_dir: str | Path) -> dict | None:
    """config.json's `rewarded_by` ({"reward": ..., "judge": ...}); None for runs from before it."""
    path = Path(run_dir) / CONFIG_FILE
    try:
        return json.loads(path.read_text()).get(REWARDED_BY)
    except (OSError, json.JSONDecodeError):
        return None


def cli_can_rebuild(rewarded_by: dict | None, args: CommonArgs) -> bool:
    """Whether the command line rebuilds what rewarded the run: the task's reward (and the named
    judge), not a Python function."""
    if rewarded_by is None:
        return True
    return rewarded_by.get("reward") == f"task {args.task}" and rewarded_by.get("judge") in (
        None, f"judge {getattr(args, 'judge', None)}")


def describe_rewarded_by(rewarded_by: dict | None) -> str:
    """E.g. `task sentiment` or `python my_rewards.count_words, judged by judge vader`."""
    if rewarded_by is None:
        return "the task's reward"
    judge = rewarded_by.get("judge")
    weights = f" (reward model weights sha256 {rewarded_by['reward_model_sha256'][:12]}…)" if "reward_model_sha256" in rewarded_by else ""
    return rewarded_by["reward"] + weights + (f", judged by {judge}" if judge else "")


def append_metrics(run_dir: Path, metrics: dict[str, float | int], file: str = METRICS_FILE) -> None:
    """Append one phase's metrics as a JSON line (to metrics.jsonl, or `file`: validation.jsonl)."""
    try:
        with open(run_dir / file, "a") as f:
            f.write(json.dumps(metrics) + "\n")
    except OSError as e:
        raise RunFolderError(f"run_dir: cannot write {run_dir / file} ({e.strerror})") from None


def cut_metrics(run_dir: str | Path, last: int, key: str = "phase", file: str = METRICS_FILE) -> list[dict[str, float | int]]:
    """Cut metrics.jsonl back to the lines whose `key` (a run's phase, a reward model's step) is at
    most `last`, the checkpoint a run resumes from: what was logged after it, before the interruption,
    is logged again by the resumed run, so no line is duplicated or missing. A last line a kill cut
    short is dropped too. The file (`file`: another of the run's, validation.jsonl) is replaced whole (write, then rename):
    a kill while cutting leaves it as it was. Returns the lines kept."""
    path = Path(run_dir) / file
    if not path.is_file():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    kept = []
    for i, line in enumerate(lines):
        try:
            metrics = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # the write a kill interrupted
                break
            raise RunFolderError(f"{path} line {i + 1}: not JSON; the file is damaged") from None
        if metrics[key] <= last:
            kept.append(metrics)
    tmp = path.with_name(f".{file}.tmp")
    tmp.write_text("".join(json.dumps(m) + "\n" for m in kept))
    os.replace(tmp, path)
    return kept


def read_metrics(run_dir: str | Path) -> list[dict[str, float | int]]:
    """All phases' metrics of a run, in order."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise RunFolderError(f"{path}: no metrics file (is this a run folder?)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def save_run_policy(run_dir: str | Path, policy: torch.nn.Module) -> Path:
    """Save the tuned policy as `policy.pt` (`models.policy.saved_state`: with adapters, only what trains and the base's hash)."""
    path = Path(run_dir) / POLICY_FILE
    torch.save(on_cpu(saved_state(policy)), path)
    return path


def on_cpu(state: dict) -> dict:
    """A (nested) state dict with every tensor detached and on the CPU."""
    return {k: on_cpu(v) if isinstance(v, dict) else v.detach().cpu() if isinstance(v, torch.Tensor) else v
            for k, v in state.items()}


@dataclass
class LoadedRun:
    policy: Policy
    """The tuned policy: the HookedTransformer, or what its algorithm built around it (`models.policy.build_policy`)."""
    reference: HookedTransformer
    """The model the run started from, untouched."""
    args: CommonArgs
    path: Path

    @property
    def tuned(self) -> HookedTransformer:
        """The tuned language model, whatever the algorithm."""
        return language_model(self.policy)


def load_args(run_dir: str | Path) -> CommonArgs:
    """The args saved in a run folder (of the class its `algo` names; PPO for older runs), typed
    and validated as the command line would have them: one line naming the file and the field."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        if stopped_before_config(run_dir):
            raise RunFolderError(f"resume: {run_dir}: {start_over_hint(run_dir, 'it wrote config.json')}")
        raise RunFolderError(f"{path}: not found (is {run_dir} a run folder?)")
    if saved_kind(run_dir) == REWARD_MODEL_KIND:
        raise RunFolderError(f"{run_dir} is a reward-model run, not a policy's: resume it with "
                             f"{resume_command(run_dir)}, use it with --reward-model {run_dir}, or export it with "
                             f"python -m rlhf_scratch.export {run_dir} OUT")
    try:
        values = json.loads(path.read_text())
        if not isinstance(values, dict):
            raise ValueError("not a JSON object")
        values.pop(REWARDED_BY, None)
        values.pop(CONTROLLER, None)
        args = CommonArgs.from_dict(values)
    except (json.JSONDecodeError, ValueError, TypeError) as e:
        raise RunFolderError(f"{path}: unreadable config ({e})") from None
    try:  # the command line's rules: a value edited into the file is refused as the flag would be
        return args.validate()
    except ConfigError as e:
        raise RunFolderError(f"{path}: {e}") from None


def load_run(run_dir: str | Path, device: str = "cpu") -> LoadedRun:
    """Rebuild the tuned policy and the reference model of a finished run (refused, in one line
    saying what to do, while a process is training it). An adapted run's policy is the base loaded again
    with its adapters put back (refused in one line if the base's hash differs); its reference is a
    separate plain copy of the base."""
    run_dir = Path(run_dir)
    args = load_args(run_dir)
    refuse_if_training(run_dir)  # its policy.pt may be old, or half-written
    weights = run_dir / POLICY_FILE
    if not weights.is_file():
        status = read_status(run_dir)
        if status["status"] in ("interrupted", "failed", "lost"):
            raise RunFolderError(f"{run_dir}: no {POLICY_FILE} yet: {next_step(run_dir, status)}")
        raise RunFolderError(f"{weights}: not found (did the run finish with save_model on?)")
    try:
        state = torch.load(weights, map_location=device, weights_only=True)
    except Exception as e:  # truncated, corrupt or not a torch file: one line, no unpickling traceback
        raise RunFolderError(f"{weights}: unreadable ({type(e).__name__}); the file is truncated or not a policy") from None
    reference = load_lm(args.model, device=device).eval()
    lm = load_lm(args.model, device=device)
    # the base again, with its adapters if it had them (A's draw is overwritten: a generator of its own, not the caller's RNG)
    lm = trainable_lm(lm, args, generator=torch.Generator())
    policy = build_policy(args, lm)  # as the trainer built it: the algorithm's registry hook
    try:
        load_saved_state(policy, state)
    except (RuntimeError, ConfigError) as e:  # an adapted base's hash that differs is one line too
        raise RunFolderError(f"{weights}: does not fit {type(policy).__name__} of {args.model!r} "
                             f"({str(e).splitlines()[0]})") from None
    return LoadedRun(policy=policy.eval(), reference=reference, args=args, path=run_dir)


def refuse_unresumable(run_dir: str | Path, args: CommonArgs) -> None:
    """One line, before any model loads, if `--resume run_dir` cannot work: a live process is
    training it, it stopped before its first checkpoint (the line says how to start it over), or a
    Python reward function (or judge) rewarded it, which the command line cannot rebuild. The
    in-process loop and the controller (`--controller ray`) both ask it first."""
    status = read_status(run_dir)
    if status["status"] == "running":
        raise ConfigError(f"resume: {run_dir}: {next_step(run_dir, status)}")
    if not list_checkpoints(Path(run_dir)):
        raise ConfigError(f"resume: {run_dir} has no checkpoint: {start_over_hint(run_dir)}")
    rewarded = load_rewarded_by(run_dir)
    if not cli_can_rebuild(rewarded, args):
        raise ConfigError(f"resume: {run_dir} was rewarded by {describe_rewarded_by(rewarded)}, which the command "
                          f"line cannot rebuild; resume it from Python with the same function: "
                          f"{registry.get(args.algo).trainer_class().__name__}(load_args({run_dir!r}), reward_fn=...).train({run_dir!r}, "
                          "resume=True)")
