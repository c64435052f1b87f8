"""The phase loop, the only one: every algorithm runs in it, in process or on Ray (verl's one `fit`
at every scale), and what it writes: the run folder, metrics, samples, checkpoints, status, W&B,
the progress bar.

    for phase in 1..total_phases:                    # `_one_phase`: verl's RayPPOTrainer.fit
        prompts  = trainer.next_prompts()                     # this process's share
        rollout  = dataflow.roll_out(trainer, prompts)    # generate → ref → log π_old → values → scores
        batch    = gather_batch(rollout)                      # every process's columns, once (torchrun)
        stats    = dataflow.learn(trainer, batch)             # advantages → update_critic → update_actor
        log(shared metrics of the batch + stats), sample table every table_every phases
        early stopping (optional); checkpoint: the phase, early stopping, trainer.progress_state()
        (+ trainer.weights_state() when one is written)

`trainer` is anything that meets `contract.TrainerContract`: an algorithm's trainer (`RLHFTrainer`,
`RLOOTrainer`, `OnlineDPOTrainer`, `GRPOTrainer`: the in-process backend) or the single controller
(`controller.RayPPOTrainer`: each role forwarded to a worker group, where the same trainer runs it).
So a checkpoint on a signal or a failure, early stopping, hooks, the METRICS check,
--max-skipped-steps, `rewarded_by`, status.json and the lock are written once, here, for both. Run
setup (seeds, device, models, prompts) is `run_setup`'s, before the loop starts.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch
from tqdm.auto import tqdm

from rlhf_scratch.config import ConfigError, registry
from rlhf_scratch.core.host import Stats, read_once
from rlhf_scratch.core.kl_control import EarlyStopping
from rlhf_scratch.core.timing import PARTS, take_times, timed
from rlhf_scratch.engine import distributed as dist
from rlhf_scratch.engine.batch import Gathered, gather_batch
from rlhf_scratch.engine.checkpoint import list_checkpoints, load_latest_checkpoint
from rlhf_scratch.engine.contract import TrainerContract
from rlhf_scratch.engine.dataflow import STEPS, learn, roll_out_phase
from rlhf_scratch.engine.lifecycle import RunLife, TrainingStopped
from rlhf_scratch.engine.logger import Metrics, RunLogger
from rlhf_scratch.engine.runs import (
    append_metrics,
    cut_metrics,
    describe_rewarded_by,
    load_rewarded_by,
    new_run_dir,
    read_status,
)
from rlhf_scratch.engine.validation import VALIDATION_FILE, Validation
from rlhf_scratch.reward.heldout import HELDOUT_METRICS, heldout_metrics
from rlhf_scratch.rollout.episodes import episode_metrics
from rlhf_scratch.rollout.generation import kept_token_ids
from rlhf_scratch.rollout.phase import OverlongBuffer, Rollout
from rlhf_scratch.rollout.reward_call import reward_func_metrics
from rlhf_scratch.rollout.rl_dataset import prompt_columns

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
STEP_TIMINGS = tuple(f"timing/{step}" for step in STEPS)
"""verl's timing/<step> (`dataflow.STEPS`): seconds of each role's call this phase, logged for the steps
that ran (timing/values and timing/update_critic only with a critic)."""
TIMING_PREFIXES = ("time/", "timing/", "charts/rollout_time", "charts/phase_time", "charts/tokens_per_s")
"""The metrics that measure wall-clock time (`timing/…` is the controller's, verl's names). Two runs
of one seed differ in these and in nothing else: the equivalence tests, the kill sweep and the
controller's overhead benchmark compare everything but them (`without_timings`)."""


def without_timings(metrics: dict) -> dict:
    """`metrics` without the wall-clock ones (TIMING_PREFIXES)."""
    return {k: v for k, v in metrics.items() if not k.startswith(TIMING_PREFIXES)}


def rollout_metrics(rollout: Rollout | Gathered) -> Stats:
    """The shared per-phase numbers of a rollout, every mean over kept tokens only (over the
    whole global batch in a distributed run: pass `batch.everyone`, every process's rows).
    0-dim tensors, left on the device: the loop reads a phase's numbers at once (`core.host.read_once`)."""
    mask, lengths, terminated = rollout.completion_mask, rollout.lengths.float(), rollout.is_terminated
    rewards, entropy = rollout.rewards, rollout.entropy
    # no reference forward (GRPO at β = 0): the KL was not measured, logged as NaN
    kl = rollout.kl[mask].mean() if rollout.kl is not None else float("nan")
    # the mean over terminated completions, 0 when none did: their lengths are whole numbers, so the sum and
    # the count are exact in any order and this is the number lengths[terminated].mean() gives, with no read
    ended = terminated.sum()
    return {
        "rewards/mean": rewards.mean(),
        "rewards/std": rewards.std() if len(rewards) > 1 else 0.0,
        "rollout/kl_full_vocab": kl,
        "rollout/entropy_full_vocab": entropy[mask].mean(),
        "completions/total_tokens": lengths.sum(),
        "completions/mean_length": lengths.mean(),
        "completions/clipped_ratio": (~terminated).float().mean(),
        "completions/mean_terminated_length": torch.where(ended > 0, (lengths * terminated).sum() / ended.clamp(min=1), 0.0),
    }


OVERLONG_METRICS = ("rewards/overlong_reward", "completions/overlong_ratio")
"""Logged with --overlong-buffer (verl's overlong_reward and overlong, under this package's namespaces): the mean
soft overlong punishment added to the rewards (<= 0), and the fraction of completions it reached."""


def overlong_metrics(rollout: Rollout | Gathered, args) -> Metrics:
    """OVERLONG_METRICS of the (gathered) rollout, where the run shapes its rewards with --overlong-buffer."""
    overlong = OverlongBuffer.of(args)
    if overlong is None:
        return {}
    punishment = overlong.punishment(rollout.lengths)
    return {"rewards/overlong_reward": punishment.mean().item(), "completions/overlong_ratio": (punishment < 0).float().mean().item()}


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


def check_declared(stats: Stats, declared: Sequence[str], who: str) -> None:
    """Every key of `stats` must be among `declared`; else one line naming the strays."""
    stray = sorted(set(stats) - set(declared))
    if stray:
        raise UndeclaredMetricError(f"{who} returned {', '.join(stray)}, not among its METRICS; declare them there")


def capture_state(trainer: TrainerContract, phase: int, early_stopping: EarlyStopping | None) -> dict:
    """The small part of the checkpoint after `phase` completed phases (see `checkpoint`): the
    trainer's `progress_state()` and the loop's own two entries; the lifecycle adds
    `trainer.weights_state()` when it writes one."""
    return {"phase": phase, **trainer.progress_state(),
            "early_stopping": vars(early_stopping).copy() if early_stopping is not None else None}


def restore_state(trainer: TrainerContract, state: dict, early_stopping: EarlyStopping | None) -> int:
    """Put a checkpoint back (`trainer.load_state_dict` and the loop's entries); return the completed phases."""
    trainer.load_state_dict(state)
    if early_stopping is not None and state["early_stopping"] is not None:
        vars(early_stopping).update(state["early_stopping"])
    return int(state["phase"])


def run_training(trainer: TrainerContract, run_dir: Path | None = None, quiet: bool = False, resume: bool = False,
                 hooks: Sequence[PhaseHook] = (), controller: dict | None = None) -> Path:
    """Run every phase of `trainer`; write the run folder (created here unless given); return it.
    Each of `hooks` runs after every phase and adds its metrics to the phase's (`PhaseHook`).
    `controller` (how the run is placed: `controller.options.controller_record`) goes into config.json.

    With `resume`, `run_dir` is an existing run folder: its latest checkpoint is loaded and the
    run continues from the next phase, appending to metrics.jsonl and samples.md.

    The process owns the folder while it trains (`runs.lock_run`: a second process resuming it
    is refused). status.json is rewritten after every phase. An exception (a reward function
    raising, say) writes a checkpoint of the last completed phase where it can, marks the run
    `failed` with the error's one line, and is re-raised with the resume command as a note.
    """
    args, main = trainer.args, dist.is_main()  # in a distributed run only rank 0 writes
    record = trainer.rewarded_by()
    if resume:
        saved = load_rewarded_by(run_dir)
        if saved is not None and {key: record.get(key) for key in saved} != saved:  # (older runs record fewer keys)
            raise ConfigError(f"resume: {run_dir} was rewarded by {describe_rewarded_by(saved)}, this trainer by "
                              f"{describe_rewarded_by(record)}; resume it with the same reward function (and judge)")
    else:  # rank 0 creates the folder and tells the others its name
        run_dir = dist.gather_objects(new_run_dir(args, run_dir, rewarded_by=record, controller=controller) if main else None)[0]
    return _run_phases(trainer, Path(run_dir), quiet, resume, hooks)


def _run_phases(trainer: TrainerContract, run_dir: Path, quiet: bool, resume: bool, hooks: Sequence[PhaseHook]) -> Path:
    args, main = trainer.args, dist.is_main()
    early_stopping = (
        EarlyStopping(args.patience, args.kl_threshold, args.reward_threshold, args.window_size)
        if args.early_stopping else None
    )
    life = RunLife(run_dir, args.total_phases, args.keep_checkpoints, main=main,
                   state_now=trainer.weights_state, moved=trainer.steps_taken)
    finished_before = resume and read_status(run_dir)["status"] == "finished"
    with life:
        logger = RunLogger(run_dir, args, quiet) if main else _SilentLogger()
        validation = Validation.of(args)
        done = 0
        if resume:
            done = restore_state(trainer, load_latest_checkpoint(run_dir, logger.say), early_stopping)
            if main:
                cut_metrics(run_dir, done, file=VALIDATION_FILE)
            if done >= args.total_phases and finished_before:
                raise ConfigError(f"total_phases: {run_dir} has completed {done} phases, so total_phases="
                                  f"{args.total_phases} leaves none to run; give a larger --total-phases to continue it")
            logger.resume_at(done)
            # every phase done but killed before it finished (the policy, the status): only the finish is left
            logger.say(f"resumed {run_dir} after phase {done}" if done < args.total_phases else
                       f"{run_dir}: all {done} phases were done before it stopped; finishing it")
        ranks = f", {dist.world_size()} processes" if dist.world_size() > 1 else ""
        logger.say(f"run folder: {run_dir}  ({args.algo}, device {trainer.device}{ranks})")
        life.start(done, capture_state(trainer, done, early_stopping))
        for hook in hooks:
            hook.start(run_dir, done)
        if validation is not None and done == 0:  # the model before training (verl's val_before_train)
            _validated(validation, trainer, 0, run_dir, logger, main)
        take_times()  # start the per-part clocks from zero
        stop: TrainingStopped | None = None
        phase = done
        with tqdm(desc="phases", disable=quiet or not main, initial=done, total=args.total_phases) as bar:
            for phase in range(done + 1, args.total_phases + 1):
                metrics, rollout = _one_phase(trainer, phase, hooks, run_dir)
                if validation is not None and validation.due(phase):
                    metrics.update(_validated(validation, trainer, phase, run_dir, logger, main))
                with timed("logging"):
                    logger.log_phase(metrics)
                bar.update(1)
                kl = metrics["rollout/kl_full_vocab"]  # NaN when no reference runs (GRPO at β = 0): not shown
                bar.set_postfix(reward=f"{metrics['rewards/mean']:.3f}", **({} if kl != kl else {"kl": f"{kl:.3f}"}))
                last = phase == args.total_phases
                if early_stopping is not None and early_stopping.update(kl, metrics["rewards/mean"]):
                    logger.say(f"early stopping after phase {phase}: {early_stopping.reason}")
                    last = True
                with timed("logging"):
                    logger.log_samples(phase, rollout, force=last)
                skipped = trainer.skipped_in_a_row >= args.max_skipped_steps
                signalled = not skipped and dist.any_rank(life.signal is not None)  # every rank stops after the same phase
                # right after a skipped (non-finite) step: keep the older checkpoint
                state = capture_state(trainer, phase, early_stopping) if trainer.skipped_in_a_row == 0 else None
                save = last or skipped or signalled or (args.save_every and phase % args.save_every == 0)
                life.completed(phase, state, save=bool(save))
                if skipped:
                    stop = life.stopped(phase, f"stopped after phase {phase}: {trainer.skipped_in_a_row} optimizer steps in a "
                                        f"row had a non-finite loss or gradient norm (max_skipped_steps="
                                        f"{args.max_skipped_steps})", exit_code=3)
                elif signalled:
                    stop = life.interrupted_by_signal(phase)
                if stop is not None or last:
                    break
                life.running(phase)
        logger.finish()
        if stop is not None:
            raise stop
        if main:
            if args.save_model:
                trainer.save_policy(run_dir)
            for old in list_checkpoints(run_dir)[:-1]:  # a finished run keeps one: enough to continue it
                shutil.rmtree(old, ignore_errors=True)
        life.finished(phase)
    return run_dir


def _validated(validation: Validation, trainer: TrainerContract, phase: int, run_dir: Path, logger, main: bool) -> Metrics:
    """Validate after `phase` phases (`validation.Validation`), write the line of validation.jsonl, say pass@1."""
    metrics = validation.run(trainer, phase)
    if main:
        append_metrics(run_dir, {"phase": phase, **metrics}, file=VALIDATION_FILE)
        if "eval/pass@1" in metrics:
            logger.say(f"validation after phase {phase}: eval/pass@1 {metrics['eval/pass@1']:.3f} "
                       f"({int(metrics.get('eval/problems', 0))} held-out problems, {validation.args.val_n} samples each)")
    return metrics


def _one_phase(trainer: TrainerContract, phase: int, hooks: Sequence[PhaseHook], run_dir: Path) -> tuple[Metrics, Rollout]:
    """One phase as verl's `fit` runs it, step by step (each step's clocks are `time/<part>`):
    every number logged about it, and the rollout (for the sample table)."""
    start, steps = time.perf_counter(), {}
    lr = trainer.learning_rate()
    with torch.no_grad():
        rollout, sampling = roll_out_phase(trainer, steps)  # with --filter-groups, DAPO's dynamic sampling
    rollout_time = time.perf_counter() - start
    batch = gather_batch(rollout)
    learn_stats = learn(trainer, batch, steps)
    check_declared(learn_stats, trainer.METRICS, f"{type(trainer).__name__}.update_actor")
    seconds = time.perf_counter() - start
    hook_stats: Metrics = {}
    for hook in hooks:
        stats = hook.after_phase(run_dir, phase)
        check_declared(stats, hook.METRICS, type(hook).__name__)
        hook_stats.update(stats)
    shared, learn_stats = read_once(rollout_metrics(batch.everyone), learn_stats)  # the phase's numbers in one read
    metrics: Metrics = {
        "phase": phase,
        **shared,
        **overlong_metrics(batch.everyone, trainer.args),
        **episode_metrics(batch.everyone),  # --env: turns, tool calls, tokens of each author (episodes.episode_metrics)
        **sampling,
        **dist.mean_over_ranks(heldout_metrics(rollout, trainer.args.direction)),  # judges never trained on
        **dist.mean_over_ranks(reward_funcs_metrics(trainer, rollout)),  # TRL's rewards/<name>/mean of a task's parts
        **dist.mean_over_ranks(learn_stats),
        "charts/learning_rate": lr,
        "charts/rollout_time": rollout_time,
        "charts/phase_time": seconds,
        "charts/tokens_per_s": 0.0,  # filled in below, from every rank's tokens
        **phase_times(seconds),
        **steps,
        **hook_stats,
    }
    metrics["charts/tokens_per_s"] = metrics["completions/total_tokens"] / seconds
    return metrics, rollout


def reward_funcs_metrics(trainer: TrainerContract, rollout: Rollout) -> Metrics:
    """`rewards/<name>/mean` and `/std` of each part of the task's own reward (its registry entry's
    `reward_funcs`: TRL's per-function names), over this process's rows; none for a task whose reward is
    one column, or when the run was given a reward function of its own."""
    args = trainer.args
    task = registry.get_task(args.task)
    if task.reward_funcs is None or trainer.rewarded_by()["reward"] != f"task {args.task}":
        return {}
    ids = kept_token_ids(rollout.completion_ids, rollout.completion_mask)
    return reward_func_metrics(registry.resolve(task.reward_funcs)(args), rollout.prompts, rollout.completions, ids,
                               **prompt_columns(rollout.prompts))


class _SilentLogger:
    """The logger of ranks other than 0 in a distributed run: rank 0 prints and writes everything."""

    def resume_at(self, phase: int) -> None: ...
    def log_phase(self, metrics: Metrics) -> None: ...
    def log_samples(self, phase: int, rollout: Rollout, force: bool = False) -> None: ...
    def finish(self) -> None: ...
    def say(self, text: str) -> None: ...
