"""`python -m rlhf_scratch.train TASK --controller ray [--workers N] [--placement colocated|split]
[--max-staleness 0|1] [--ray-address ADDR]`: the same run through the single controller.

`split_controller_flags` takes the five flags out of the command line before the algorithm's
dataclass parses the rest (it imports no Ray: `--controller local`, the default, never loads it);
`run_controller` starts a local Ray instance (or joins `--ray-address`), drives the phases with
`RayPPOTrainer` and writes a run folder as the in-process loop does (config.json, metrics.jsonl,
samples.md, curves.png, checkpoints that `--resume` continues bit for bit, the tuned policy), then ends its workers and shuts down the Ray it started —
on Ctrl-C or a failure too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlhf_scratch.config import CommonArgs, ConfigError
from rlhf_scratch.config.cli import split_flags

CONTROLLERS = ("local", "ray")
PLACEMENTS = ("colocated", "split")
STALENESS_CORRECTION = {
    "ppo": "the per-token clipped ratio π_θ/π_behaviour",
    "grpo": "the loss type's ratio π_θ/π_behaviour (per token, or GSPO's per sequence)",
    "rloo": "the clipped sequence ratio π_θ(y)/π_behaviour(y)",
    "online_dpo": "none needed: DPO's loss reads π_θ and π_ref only, a classification of pairs from any sampler",
}
"""The algorithms `--max-staleness 1` runs, and what in each one's loss takes the stale samples into
account: π_old is the behaviour policy (the rollout pool's weights), so the ratio starts at π_{n−1}/π_{n−2}
and its clip bounds the step. An algorithm not here (one registered from your code, tests/toy_algorithm.py's
REINFORCE: J = A·log π) has no ratio against the sampler, and is refused."""


@dataclass
class ControllerArgs:
    controller: str = "local"
    """`local`: the in-process loop (the default); `ray`: the single controller over Ray worker groups."""
    workers: int = 1
    """Ranks per worker group (data parallel inside the group, gloo on CPU / NCCL on GPU)."""
    placement: str = "colocated"
    """`colocated`: every role in one process per rank; `split`: the reward model in processes of its own
    (with --max-staleness 1: rollout, reference and reward model in one pool, actor and critic in another)."""
    max_staleness: int = 0
    """0: synchronous (the default). 1: one step of asynchrony (needs --controller ray --placement split):
    the rollout pool samples phase n+1 with the weights after update n−1 while the actor learns phase n;
    the algorithm's ratio is taken against the sampler's log-probs (docs/distributed.md#one-step-of-asynchrony)."""
    ray_address: str | None = None
    """Join this Ray cluster instead of starting a local instance."""


def split_controller_flags(argv: list[str]) -> tuple[ControllerArgs, list[str]]:
    """The controller's flags (tyro, `cli.split_flags`), checked (one ConfigError line each), and the rest of argv."""
    given, rest = split_flags(ControllerArgs, argv, default=ControllerArgs(), prog="python -m rlhf_scratch.train")
    for name, allowed in (("controller", CONTROLLERS), ("placement", PLACEMENTS)):
        if getattr(given, name) not in allowed:
            raise ConfigError(f"{name}: must be one of {', '.join(allowed)}; got {getattr(given, name)!r}")
    if given.max_staleness not in (0, 1):
        raise ConfigError(f"max_staleness: must be 0 (synchronous) or 1 (one step of asynchrony); got {given.max_staleness}")
    if given.max_staleness and (given.controller, given.placement) != ("ray", "split"):
        raise ConfigError("max_staleness: 1 needs --controller ray --placement split (a rollout pool of its own)")
    if given.controller == "local" and given != ControllerArgs():
        raise ConfigError("controller: --workers, --placement and --ray-address need --controller ray")
    if given.workers < 1:
        raise ConfigError(f"workers: must be at least 1; got {given.workers}")
    if given.max_staleness and given.workers != 1:
        raise ConfigError(f"max_staleness: 1 runs with --workers 1 only (a rollout pool of several ranks is not tested); got {given.workers}")
    return given, rest


def check_staleness(algo: str, max_staleness: int) -> None:
    """Refuse (one ConfigError line) an algorithm whose loss would not correct stale samples (`STALENESS_CORRECTION`)."""
    if max_staleness and algo not in STALENESS_CORRECTION:
        raise ConfigError(f"max_staleness: {algo}'s loss has no ratio against the sampler's log-probs to correct "
                          f"stale samples; 1 runs {', '.join(STALENESS_CORRECTION)}")


def main_controller(args: CommonArgs, resume: str | None, controller: ControllerArgs) -> int:
    """`train --controller ray`'s exit code: 0 and the finished run's summary, or 130 at Ctrl-C.
    A failure (a bad value, a worker's exception as WorkerError) is the command's one line
    (`config.command`)."""
    import sys

    from rlhf_scratch.engine.runs import finished_summary

    try:
        run_dir = run_controller(args, controller, resume=resume)
    except KeyboardInterrupt:  # the workers ended and Ray shut down on the way out (run_controller's finally)
        print("stopped: Ctrl-C; the workers and Ray are shut down (continue from the last checkpoint with --resume)",
              file=sys.stderr)
        return 130
    print(finished_summary(run_dir))
    return 0


def run_controller(args: CommonArgs, controller: ControllerArgs, quiet: bool = False, resume: str | None = None) -> Path:
    """The run through `RayPPOTrainer`, in a new run folder (or continuing `resume`'s from its latest
    checkpoint); a checkpoint every `save_every` phases and at the end, as the in-process loop
    writes it. Returns the folder."""
    from tqdm.auto import tqdm

    from rlhf_scratch.controller.ray_trainer import RayPPOTrainer, init_ray, shutdown_ray
    from rlhf_scratch.engine.lifecycle import one_line
    from rlhf_scratch.engine.logger import RunLogger
    from rlhf_scratch.engine.runs import check_new_run_dir, lock_run, new_run_dir, refuse_unresumable, write_status

    if args.early_stopping:
        raise ConfigError("early_stopping: not run by --controller ray yet; use the in-process loop")
    check_staleness(args.algo, controller.max_staleness)
    if resume is None:
        check_new_run_dir(args.run_dir)
    else:
        refuse_unresumable(resume, args)  # the in-process loop's lines, before Ray starts (a run killed before its
        # first checkpoint: how to start it over, not a worker's "has no checkpoints")
    started = init_ray(controller.ray_address, num_cpus=controller.workers * (1 + (controller.placement == "split")))
    trainer = None
    try:
        trainer = RayPPOTrainer(args, workers=controller.workers, placement=controller.placement,
                                max_staleness=controller.max_staleness)
        run_dir = Path(resume) if resume is not None else new_run_dir(trainer.args)
        lock = lock_run(run_dir)  # the folder is this driver's while it trains, as an in-process run's
        try:
            logger, done = RunLogger(run_dir, trainer.args, quiet), 0
            if resume is not None:
                done = trainer.load_checkpoint(run_dir)
                if done >= args.total_phases:
                    raise ConfigError(f"total_phases: {run_dir} has completed {done} phases; give a larger --total-phases")
                logger.resume_at(done)
            saved = done  # the phase of the newest checkpoint: where a failure leaves the run
            write_status(run_dir, "running", done, args.total_phases)
            try:
                bar = tqdm(range(done + 1, args.total_phases + 1), desc="phases", disable=quiet)
                for phase in bar:
                    metrics, rollout = trainer.step(phase)
                    logger.log_phase(metrics)
                    last = phase == args.total_phases
                    logger.log_samples(phase, rollout, force=last)
                    if last or (args.save_every and phase % args.save_every == 0):
                        trainer.save_checkpoint(run_dir, phase)
                        saved = phase
                    write_status(run_dir, "running", phase, args.total_phases)
                    bar.set_postfix(reward=f"{metrics['rewards/mean']:.3f}", kl=f"{metrics['rollout/kl_full_vocab']:.4f}")
                logger.finish()
                if args.save_model:
                    trainer.actor_rollout_wg.save_policy(str(run_dir))
            except BaseException as err:  # status.json says what stopped it and where a --resume starts
                status = "interrupted" if isinstance(err, KeyboardInterrupt) else "failed"
                write_status(run_dir, status, saved, args.total_phases,
                             error=None if status == "interrupted" else one_line(err))
                raise
            write_status(run_dir, "finished", args.total_phases, args.total_phases)
        finally:
            lock.release()
        return run_dir
    finally:
        if trainer is not None:
            trainer.shutdown()
        if started:
            shutdown_ray()
