"""The phase loop every algorithm runs in, and what it writes: the run folder, metrics, samples,
checkpoints, status, W&B, the progress bar.

    for phase in 1..total_phases:
        rollout = trainer.rollout_phase()            # sample, score, reward — no gradients
        stats   = trainer.learning_phase(rollout)    # the algorithm's own objective
        log(shared metrics of the rollout + stats), sample table every table_every phases
        early stopping (optional)

A trainer (`RLHFTrainer`, `RLOOTrainer`, `OnlineDPOTrainer`, `GRPOTrainer`) holds its algorithm;
this module holds the loop around it, so no trainer knows about files, W&B or progress bars. The
loop touches a trainer only through `contract.TrainerContract`; run setup (seeds, device, models,
prompts) is `run_setup`'s, before the loop starts.
"""

from __future__ import annotations

import copy
import shutil
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from tqdm.auto import tqdm

from rlhf_scratch import distributed as dist
from rlhf_scratch.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_latest_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from rlhf_scratch.config import ConfigError
from rlhf_scratch.contract import TrainerContract
from rlhf_scratch.heldout import HELDOUT_METRICS, heldout_metrics
from rlhf_scratch.kl_control import EarlyStopping
from rlhf_scratch.logger import Metrics, RunLogger
from rlhf_scratch.reward.tasks import rewarded_by
from rlhf_scratch.rollout import Rollout
from rlhf_scratch.runs import (
    describe_rewarded_by,
    load_rewarded_by,
    lock_run,
    new_run_dir,
    next_step,
    resume_hint,
    save_run_policy,
    write_status,
)
from rlhf_scratch.timing import PARTS, take_times, timed

# Logged every phase by every algorithm, computed from the rollout (TRL's names where TRL has one).
SHARED_METRICS = (
    "phase",
    "rewards/mean",  # mean reward of the rollout batch (after any missing-EOS penalty)
    "rewards/std",
    # Our own names, not TRL's: TRL's objective/kl and objective/entropy are per-SEQUENCE sums of the
    # sampled log-ratio and of −log π (Online DPO logs those under TRL's names; docs/fidelity.md).
    "rollout/kl_full_vocab",  # mean per-token KL(π_old‖π_ref) over the vocabulary, kept tokens, nats (at T)
    "rollout/entropy_full_vocab",  # mean per-token entropy of π_old over the vocabulary, kept tokens, nats (at T)
    "completions/mean_length",  # kept tokens per completion
    "completions/clipped_ratio",  # fraction of completions that never produced EOS
    "completions/mean_terminated_length",  # mean length of those that did (0 if none)
    "completions/total_tokens",  # kept tokens generated this phase, over every rank
    *HELDOUT_METRICS,  # eval/vader, eval/ref_logprob_per_token, eval/repeated_3grams (see heldout.py)
    "charts/learning_rate",  # learning rate of the transformer this phase
    "charts/rollout_time",  # seconds: generation + scoring + reward
    "charts/phase_time",  # seconds, rollout + learning
    "charts/tokens_per_s",  # generated (kept) tokens per second of phase time
    *(f"time/{part}" for part in PARTS),  # seconds in each part of the phase (see timing.PARTS);
    # time/logging is the previous phase's (this phase's is not over when its metrics are written)
    "time/other",  # phase_time minus the parts: prompts, advantages, minibatching, bookkeeping
)


def rollout_metrics(rollout: Rollout) -> Metrics:
    """The shared per-phase numbers of a rollout, every mean over kept tokens only (over the
    whole global batch in a distributed run: each rank's tensors are gathered first)."""
    mask = dist.all_gather(rollout.completion_mask)
    lengths = dist.all_gather(rollout.lengths).float()
    terminated = dist.all_gather(rollout.is_terminated)
    rewards = dist.all_gather(rollout.rewards)
    entropy = dist.all_gather(rollout.entropy)
    # no reference forward (GRPO at β = 0): the KL was not measured, logged as NaN
    kl = dist.all_gather(rollout.kl)[mask].mean().item() if rollout.kl is not None else float("nan")
    return {
        "rewards/mean": rewards.mean().item(),
        "rewards/std": rewards.std().item() if len(rewards) > 1 else 0.0,
        "rollout/kl_full_vocab": kl,
        "rollout/entropy_full_vocab": entropy[mask].mean().item(),
        "completions/total_tokens": lengths.sum().item(),
        "completions/mean_length": lengths.mean().item(),
        "completions/clipped_ratio": (~terminated).float().mean().item(),
        "completions/mean_terminated_length": lengths[terminated].mean().item() if terminated.any() else 0.0,
    }


def phase_times(phase_seconds: float) -> Metrics:
    """`time/<part>` for every part timed since the last call, and `time/other`: what is left of
    the phase's wall time (logging excluded: it comes after the phase's clock stops)."""
    times = take_times()
    other = phase_seconds - sum(t for part, t in times.items() if part != "logging")
    return {**{f"time/{part}": t for part, t in times.items()}, "time/other": max(other, 0.0)}


@runtime_checkable
class PhaseHook(Protocol):
    """Work that runs beside training, once per phase, and logs its own numbers with the phase's
    (the over-optimisation study's held-out evaluation: `studies.overoptimization`). The loop
    calls `start` once the run folder exists and any checkpoint is restored (`phase` = phases
    already done: 0 for a new run), then `after_phase` after each phase's learning; what that
    returns is logged in metrics.jsonl with the phase, and must be named in `METRICS`."""

    METRICS: tuple[str, ...]

    def start(self, run_dir: Path, phase: int) -> None: ...
    def after_phase(self, run_dir: Path, phase: int) -> dict[str, float]: ...


class UndeclaredMetricError(RuntimeError):
    """A trainer or hook returned a metric it does not declare (its METRICS): the run stops, naming it."""


def check_declared(stats: dict[str, float], declared: Sequence[str], who: str) -> None:
    """Every key of `stats` must be among `declared`; else one line naming the strays."""
    stray = sorted(set(stats) - set(declared))
    if stray:
        raise UndeclaredMetricError(f"{who} returned {', '.join(stray)}, not among its METRICS; declare them there")


class TrainingStopped(RuntimeError):
    """The run stopped before its last phase (a signal, or too many skipped steps); a checkpoint
    was written, and the message ends with the command that resumes it."""

    def __init__(self, message: str, exit_code: int, run_dir: Path):
        super().__init__(message)
        self.exit_code, self.run_dir = exit_code, run_dir


def capture_state(trainer: TrainerContract, phase: int, early_stopping: EarlyStopping | None) -> dict:
    """Everything a bit-exact resume needs after `phase` completed phases (see `checkpoint`)."""
    return {
        "phase": phase,
        "algo": trainer.args.algo,
        "policy": trainer.policy.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict(),
        "prompts": trainer.prompts.state_dict(),
        "trainer": trainer.extra_state(),
        "skipped_in_a_row": trainer.skipped_in_a_row,
        "early_stopping": vars(early_stopping).copy() if early_stopping is not None else None,
        "rng": rng_state(),
        "rng_per_rank": dist.gather_objects(rng_state()),  # every rank's, in a distributed run
    }


def restore_state(trainer: TrainerContract, state: dict, early_stopping: EarlyStopping | None) -> int:
    """Put `state` back into the trainer; return the number of completed phases."""
    trainer.policy.load_state_dict(state["policy"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.scheduler.load_state_dict(state["scheduler"])
    trainer.prompts.load_state_dict(state["prompts"])
    trainer.load_extra_state(state["trainer"])
    trainer.skipped_in_a_row = state["skipped_in_a_row"]
    if early_stopping is not None and state["early_stopping"] is not None:
        vars(early_stopping).update(state["early_stopping"])
    per_rank = state.get("rng_per_rank", [state["rng"]])
    if len(per_rank) != dist.world_size():
        raise ConfigError(f"resume: the checkpoint was written by {len(per_rank)} process(es); "
                          f"resume it with the same number (torchrun --nproc-per-node {len(per_rank)})")
    set_rng_state(per_rank[dist.rank()])
    return int(state["phase"])


class _StopSignals:
    """Ctrl-C (SIGINT) or SIGTERM during a phase: finish the phase, checkpoint, stop. A second
    Ctrl-C stops at once (the previous checkpoint stays intact)."""

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
        tqdm.write(f"\n{signal.Signals(signum).name}: finishing this phase, then writing a checkpoint "
                   "(Ctrl-C again to stop at once)")

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class _LastCompleted:
    """The state after the last completed phase, kept so that an exception in the next phase
    (a reward function raising, say) still leaves a checkpoint of it. Kept: everything but the
    weights, optimizer and scheduler, deep-copied (small: RNGs, prompt position, controllers), and
    how many optimizer and scheduler steps had been taken. While those counts are unchanged the
    live weights are still that phase's (an exception in the rollout, or in a judge before the
    first step); after a step they are not, and the last periodic checkpoint stands."""

    BIG = ("policy", "optimizer", "scheduler")

    def __init__(self, trainer: TrainerContract):
        self.phase, self.small, self.at, self.steps = 0, None, None, 0
        self._hook = trainer.optimizer.register_step_post_hook(self._count)

    def _count(self, *_) -> None:
        self.steps += 1

    def keep(self, trainer: TrainerContract, state: dict) -> None:
        self.phase = state["phase"]
        self.small = copy.deepcopy({k: v for k, v in state.items() if k not in self.BIG})
        self.at = (self.steps, trainer.scheduler.last_epoch)

    def state(self, trainer: TrainerContract) -> dict | None:
        """The full state of the last completed phase, or None if the weights have moved since."""
        if self.small is None or self.at != (self.steps, trainer.scheduler.last_epoch):
            return None
        return {**self.small, "policy": trainer.policy.state_dict(), "optimizer": trainer.optimizer.state_dict(),
                "scheduler": trainer.scheduler.state_dict()}

    def close(self) -> None:
        self._hook.remove()


def one_line(err: BaseException) -> str:
    """`Type: first line of the message`, for status.json and the console."""
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def run_training(trainer: TrainerContract, run_dir: Path | None = None, quiet: bool = False, resume: bool = False,
                 hooks: Sequence[PhaseHook] = ()) -> Path:
    """Run every phase of `trainer`; write the run folder (created here unless given); return it.
    Each of `hooks` runs after every phase and adds its metrics to the phase's (`PhaseHook`).

    With `resume`, `run_dir` is an existing run folder: its latest checkpoint is loaded and the
    run continues from the next phase, appending to metrics.jsonl and samples.md.

    The process owns the folder while it trains (`runs.lock_run`: a second process resuming it
    is refused). status.json is rewritten after every phase. An exception (a reward function
    raising, say) writes a checkpoint of the last completed phase where it can, marks the run
    `failed` with the error's one line, and is re-raised with the resume command as a note.
    """
    args, main = trainer.args, dist.is_main()  # in a distributed run only rank 0 writes
    record = rewarded_by(args, trainer.reward_fn, trainer.judge)
    if resume:
        saved = load_rewarded_by(run_dir)
        if saved is not None and saved != record:
            raise ConfigError(f"resume: {run_dir} was rewarded by {describe_rewarded_by(saved)}, this trainer by "
                              f"{describe_rewarded_by(record)}; resume it with the same reward function (and judge)")
    else:  # rank 0 creates the folder and tells the others its name
        run_dir = dist.gather_objects(new_run_dir(args, run_dir, rewarded_by=record) if main else None)[0]
    run_dir = Path(run_dir)
    lock = lock_run(run_dir) if main else None  # before anything in the folder is written
    try:
        return _run_phases(trainer, run_dir, quiet, resume, hooks)
    finally:
        if lock is not None:
            lock.release()


def _run_phases(trainer: TrainerContract, run_dir: Path, quiet: bool, resume: bool, hooks: Sequence[PhaseHook]) -> Path:
    args, main = trainer.args, dist.is_main()
    early_stopping = (
        EarlyStopping(args.patience, args.kl_threshold, args.reward_threshold, args.window_size)
        if args.early_stopping else None
    )
    logger = RunLogger(run_dir, args, quiet) if main else _SilentLogger()
    done = 0
    if resume:
        done = restore_state(trainer, load_latest_checkpoint(run_dir, logger.say), early_stopping)
        if done >= args.total_phases:
            raise ConfigError(f"total_phases: {run_dir} has completed {done} phases, so total_phases="
                              f"{args.total_phases} leaves none to run; give a larger --total-phases to continue it")
        logger.resume_at(done)
        logger.say(f"resumed {run_dir} after phase {done}")
    ranks = f", {dist.world_size()} processes" if dist.world_size() > 1 else ""
    logger.say(f"run folder: {run_dir}  ({args.algo}, device {trainer.device}{ranks})")
    if main:
        write_status(run_dir, "running", done, args.total_phases)
    for hook in hooks:
        hook.start(run_dir, done)
    stopped: TrainingStopped | None = None
    phase = done
    last_completed = _LastCompleted(trainer)
    last_completed.keep(trainer, capture_state(trainer, done, early_stopping))
    take_times()  # start the per-part clocks from zero
    bar = tqdm(desc="phases", disable=quiet or not main, initial=done, total=args.total_phases)
    try:
        with _StopSignals() as signals:
            for phase in range(done + 1, args.total_phases + 1):
                start = time.perf_counter()
                lr = trainer.optimizer.param_groups[0]["lr"]
                rollout = trainer.rollout_phase()
                rollout_time = time.perf_counter() - start
                learn_stats = trainer.learning_phase(rollout)
                check_declared(learn_stats, trainer.METRICS, f"{type(trainer).__name__}.learning_phase")
                seconds = time.perf_counter() - start
                hook_stats: Metrics = {}
                for hook in hooks:
                    stats = hook.after_phase(run_dir, phase)
                    check_declared(stats, hook.METRICS, type(hook).__name__)
                    hook_stats.update(stats)
                metrics: Metrics = {
                    "phase": phase,
                    **rollout_metrics(rollout),
                    **dist.mean_over_ranks(heldout_metrics(rollout, args.direction)),  # judges never trained on
                    **dist.mean_over_ranks(learn_stats),
                    "charts/learning_rate": lr,
                    "charts/rollout_time": rollout_time,
                    "charts/phase_time": seconds,
                    "charts/tokens_per_s": 0.0,  # filled in below, from every rank's tokens
                    **phase_times(seconds),
                    **hook_stats,
                }
                metrics["charts/tokens_per_s"] = metrics["completions/total_tokens"] / seconds
                with timed("logging"):
                    logger.log_phase(metrics)
                bar.update(1)
                kl = metrics["rollout/kl_full_vocab"]  # NaN when no reference runs (GRPO at β = 0): not shown
                bar.set_postfix(reward=f"{metrics['rewards/mean']:.3f}", **({} if kl != kl else {"kl": f"{kl:.3f}"}))
                last = phase == args.total_phases
                if early_stopping is not None and early_stopping.update(metrics["rollout/kl_full_vocab"], metrics["rewards/mean"]):
                    logger.say(f"early stopping after phase {phase}: {early_stopping.reason}")
                    last = True
                with timed("logging"):
                    logger.log_samples(phase, rollout, force=last)
                skipped_in_a_row = trainer.skipped_in_a_row
                if skipped_in_a_row >= args.max_skipped_steps:
                    stopped = TrainingStopped(
                        f"stopped after phase {phase}: {skipped_in_a_row} optimizer steps in a row had a non-finite "
                        f"loss or gradient norm (max_skipped_steps={args.max_skipped_steps})", exit_code=3, run_dir=run_dir)
                elif dist.any_rank(signals.received is not None):  # every rank stops after the same phase
                    signum = signals.received or signal.SIGTERM
                    stopped = TrainingStopped(f"interrupted after phase {phase} ({signal.Signals(signum).name})",
                                              exit_code=128 + signum, run_dir=run_dir)
                if skipped_in_a_row == 0:  # right after a skipped (non-finite) step: keep the older checkpoint
                    state = capture_state(trainer, phase, early_stopping)  # every rank: it gathers their RNGs
                    last_completed.keep(trainer, state)
                    if main and (last or stopped or (args.save_every and phase % args.save_every == 0)):
                        save_checkpoint(run_dir, phase, state, args.keep_checkpoints)
                if main and not (stopped or last):
                    write_status(run_dir, "running", phase, args.total_phases)
                if stopped or last:
                    break
    except (Exception, KeyboardInterrupt) as err:  # not SystemExit: nothing to save there
        bar.close()
        if main:
            _record_failure(trainer, run_dir, last_completed, err, phase - 1 if phase > done else done)
        raise
    finally:
        last_completed.close()
    bar.close()
    logger.finish()
    if stopped is not None:
        if main:
            write_status(run_dir, "interrupted", phase, args.total_phases)
        stopped.args = (f"{stopped}; {resume_hint(run_dir)}",)
        raise stopped
    if main:
        if args.save_model:
            save_run_policy(run_dir, trainer.policy)
        for old in list_checkpoints(run_dir)[:-1]:  # a finished run keeps one: enough to continue it
            shutil.rmtree(old, ignore_errors=True)
        write_status(run_dir, "finished", phase, args.total_phases)
    return run_dir


def _record_failure(trainer: TrainerContract, run_dir: Path, last_completed: _LastCompleted, err: BaseException,
                    completed: int) -> None:
    """After an exception in a phase: checkpoint the last completed phase if the weights are still
    its own, write status `failed` (Ctrl-C twice: `interrupted`) with the error's one line, and
    add the next step to the exception as a note (shown under its traceback)."""
    state = last_completed.state(trainer)
    if state is not None and not isinstance(err, CheckpointError):  # a failed write would fail again
        try:
            save_checkpoint(run_dir, state["phase"], state, trainer.args.keep_checkpoints)
        except Exception as save_err:  # keep the first error; the older checkpoint stays
            tqdm.write(f"could not write a checkpoint of phase {state['phase']} ({one_line(save_err)})")
    status = "interrupted" if isinstance(err, KeyboardInterrupt) else "failed"
    record = write_status(run_dir, status, last_completed.phase if state is not None else completed,
                          trainer.args.total_phases, error=one_line(err))
    if hasattr(err, "add_note"):  # Python 3.11+
        err.add_note(f"{run_dir}: {next_step(run_dir, record)}")  # (this process still holds the lock)


class _SilentLogger:
    """The logger of ranks other than 0 in a distributed run: rank 0 prints and writes everything."""

    def resume_at(self, phase: int) -> None: ...
    def log_phase(self, metrics: Metrics) -> None: ...
    def log_samples(self, phase: int, rollout: Rollout, force: bool = False) -> None: ...
    def finish(self) -> None: ...
    def say(self, text: str) -> None: ...
