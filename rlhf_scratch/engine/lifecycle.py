"""A run folder's life, written once for every kind of run: the RL phase loop (`loop.py`) and the
reward-model trainer (`reward.model.train_reward_model`).

    with RunLife(run_dir, total, keep_checkpoints, state_now, moved) as life:   # the lock, the signal handlers
        ...restore a checkpoint, if resuming...
        life.start(done, small)                            # status "running"; failures recorded from here
        for unit in done + 1 .. total:                     # a phase, or an optimizer step
            ...train one unit...
            life.completed(unit, small, save=...)          # remembered (and checkpointed when due)
            if life.signal: raise life.stopped(unit, ...)  # Ctrl-C / SIGTERM: finish the unit, checkpoint, stop
        life.finished(total)

    an exception inside: a checkpoint of the last completed unit where the weights are still its
    own, status "failed" (a second Ctrl-C: "interrupted") with the error's one line, and the
    exception re-raised with the next step (the resume command) as a note.

A state comes in two parts, handed over by the trainer, named by no key here: `small` (the RNGs,
the prompts' position, the algorithm's counters: copied after every unit) and `state_now()` (the
weights, every optimizer's moments, every schedule: read only when a checkpoint is written). A
checkpoint is `{**small, **state_now()}`.

The process owns the folder while it lives (`runs.lock_run`: a second process is refused); the
OS drops the lock when the process ends, however it ends (kill -9 included).
"""

from __future__ import annotations

import copy
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from tqdm.auto import tqdm

from rlhf_scratch.engine.checkpoint import CheckpointError, save_checkpoint
from rlhf_scratch.engine.runs import lock_run, next_step, resume_hint, write_status


class TrainingStopped(RuntimeError):
    """The run stopped before its last unit (a signal, or too many skipped steps); a checkpoint
    was written, and the message ends with the command that resumes it."""

    def __init__(self, message: str, exit_code: int, run_dir: Path):
        super().__init__(message)
        self.exit_code, self.run_dir = exit_code, run_dir


def one_line(err: BaseException) -> str:
    """`Type: first line of the message`, for status.json and the console."""
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


class StopSignals:
    """Ctrl-C (SIGINT) or SIGTERM during a unit: finish it, checkpoint, stop. A second Ctrl-C
    stops at once (the previous checkpoint stays intact)."""

    def __init__(self):
        self.received: int | None = None
        self._previous: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signum
        tqdm.write(f"\n{signal.Signals(signum).name}: finishing this step, then writing a checkpoint "
                   "(Ctrl-C again to stop at once)")

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


class LastCompleted:
    """The state after the last completed unit, kept so that an exception in the next one (a
    reward function raising, say) still leaves a checkpoint of it. Kept: the small part,
    deep-copied, and `moved()` — the count of steps taken by every optimizer and schedule the
    trainer owns (None: unknown). While that count is unchanged the live weights are still that
    unit's (an exception in the rollout, or in a judge before the first step), and `state_now()`
    completes the state; after any step (the critic's too) they are not, and the last periodic
    checkpoint stands: a checkpoint never pairs one model's new weights with another's old."""

    def __init__(self, state_now: Callable[[], dict], moved: Callable[[], object]):
        self.state_now, self.moved = state_now, moved
        self.unit, self.small, self.at = 0, None, None

    def keep(self, unit: int, small: dict) -> None:
        self.unit = unit
        self.small = copy.deepcopy(small)
        self.at = self.moved()

    def state(self) -> dict | None:
        """The full state of the last completed unit, or None if the weights have moved since (or
        may have: an unknown count)."""
        now = self.moved()
        if self.small is None or self.at is None or now is None or self.at != now:
            return None
        return {**self.small, **self.state_now()}


class RunLife:
    """One run folder's lifecycle (see the module docstring). `state_now()` gives the large part of
    a checkpoint as it is now (weights, optimizers, schedules), `moved()` how many steps have
    changed it; `main=False` (a distributed run's other ranks) writes nothing and locks nothing."""

    def __init__(self, run_dir: Path, total: int, keep_checkpoints: int, state_now: Callable[[], dict],
                 moved: Callable[[], object], main: bool = True, unit_name: str = "phase"):
        self.run_dir, self.total, self.keep_checkpoints, self.main = run_dir, total, keep_checkpoints, main
        self.done, self.unit_name, self.started = 0, unit_name, False
        self.last = LastCompleted(state_now, moved)
        self.state_now = state_now
        self.signals = StopSignals()
        self._lock = None

    def __enter__(self) -> RunLife:
        self._lock = lock_run(self.run_dir) if self.main else None  # before anything in the folder is written
        self.signals.__enter__()
        return self

    def start(self, done: int, small: dict) -> None:
        """Training starts after `done` units from `small` and the weights now (restored, or the initial ones): status
        "running", and from now on an exception is recorded as the run's failure (one before this
        — a bad resume, say — leaves the folder's status as it was)."""
        self.done, self.started = done, True
        self.last.keep(done, small)
        self.running(done)

    @property
    def signal(self) -> int | None:
        """The signal received during the unit (SIGINT or SIGTERM), if any."""
        return self.signals.received

    def completed(self, unit: int, small: dict | None, save: bool) -> None:
        """`unit` is done and `small` with the weights now is everything needed to continue after it:
        remember it (for a failure in the next unit) and write it as a checkpoint when `save`.
        `small=None`: the unit ended on a skipped (non-finite) step, so the older checkpoint is kept."""
        self.done = unit
        if small is None:
            return
        self.last.keep(unit, small)
        if self.main and save:
            save_checkpoint(self.run_dir, unit, {**small, **self.state_now()}, self.keep_checkpoints)

    def running(self, unit: int) -> None:
        if self.main:
            write_status(self.run_dir, "running", unit, self.total)

    def stopped(self, unit: int, message: str, exit_code: int) -> TrainingStopped:
        """Status "interrupted" after `unit` and the exception that says how to resume (raise it)."""
        if self.main:
            write_status(self.run_dir, "interrupted", unit, self.total)
        return TrainingStopped(f"{message}; {resume_hint(self.run_dir)}", exit_code, self.run_dir)

    def interrupted_by_signal(self, unit: int) -> TrainingStopped:
        signum = self.signal or signal.SIGTERM
        return self.stopped(unit, f"interrupted after {self.unit_name} {unit} ({signal.Signals(signum).name})", 128 + signum)

    def finished(self, unit: int) -> None:
        if self.main:
            write_status(self.run_dir, "finished", unit, self.total)

    def __exit__(self, exc_type, err, tb) -> None:
        try:
            self.signals.__exit__()
            if err is not None and not isinstance(err, (TrainingStopped, SystemExit)) and self.main and self.started:
                self._record_failure(err)
        finally:
            self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _record_failure(self, err: BaseException) -> None:
        """After an exception in a unit: checkpoint the last completed unit if the weights are still
        its own, write status `failed` (Ctrl-C twice, or its output closed because the study that
        started it was killed: `interrupted`) with the error's one line, and
        add the next step to the exception as a note (shown under its traceback)."""
        try:  # (through Ray the weights are the workers': a dead worker cannot give them)
            state = self.last.state()
        except Exception as state_err:
            tqdm.write(f"could not read the state of {self.unit_name} {self.last.unit} ({one_line(state_err)})")
            state = None
        if state is not None and not isinstance(err, CheckpointError):  # a failed write would fail again
            try:
                save_checkpoint(self.run_dir, self.last.unit, state, self.keep_checkpoints)
            except Exception as save_err:  # keep the first error; the older checkpoint stays
                tqdm.write(f"could not write a checkpoint of {self.unit_name} {self.last.unit} ({one_line(save_err)})")
        # a closed output (BrokenPipeError) means the process that started this one, a study, ended
        status = "interrupted" if isinstance(err, (KeyboardInterrupt, BrokenPipeError)) else "failed"
        record = write_status(self.run_dir, status, self.last.unit if state is not None else self.done,
                              self.total, error=one_line(err))
        if hasattr(err, "add_note"):  # Python 3.11+
            err.add_note(f"{self.run_dir}: {next_step(self.run_dir, record)}")  # (this process still holds the lock)
