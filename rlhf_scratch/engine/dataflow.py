"""One phase's dataflow, written once: the roles called in verl's order (`RayPPOTrainer.fit`'s), on
whatever implements them — the trainer itself in process, or `controller.RayPPOTrainer`, which
forwards each call to its worker group.

    rollout   = roll_out(trainer, prompts)
        generate_sequences(prompts)       timing/gen
        compute_ref_log_prob(rollout)     timing/ref            ĥ_ref (None without a reference)
        compute_log_prob(rollout, ĥ_ref)  timing/old_log_prob   log π_old, log π_ref, KL, entropy
        compute_values(rollout)           timing/values         where the algorithm has a critic and the
                                                                 values did not come with the log-probs
        compute_scores(rollout)           timing/reward         reward, missing-EOS penalty, a judge's verdicts
    batch     = gather_batch(rollout)                           every process's rows (torchrun), once
    stats     = learn(trainer, batch)
        compute_advantages(batch)         timing/adv            over the whole batch
        update_critic(batch)              timing/update_critic  where the algorithm has a critic
        update_actor(batch)               timing/update_actor

Which roles an algorithm has is its registry entry's (`registry.Algorithm.has_critic`); the
trainer decides what each call does in a phase (PPO's --critic-warmup: `update_critic` learns alone and
`update_actor` returns nothing). In process the values come from the log-probs' own trunk forward
(one pass); through Ray they are the critic's call, as verl's (the same numbers: tests/integration/test_controller.py).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

from rlhf_scratch.config import registry
from rlhf_scratch.engine.batch import Batch

STEPS = ("gen", "ref", "old_log_prob", "values", "reward", "adv", "update_critic", "update_actor")
"""The dataflow's steps, verl's names, each logged as `timing/<step>` (seconds, the call's wait included)
when it ran this phase."""

T = TypeVar("T")


def has_critic(trainer: Any) -> bool:
    """verl's use_critic, from the algorithm's registry entry (its policy has extras: PPO's value head).
    A trainer class no entry names (a learner's, built and called directly) has no critic role."""
    return trainer.args.algo in registry.names() and registry.get(trainer.args.algo).has_critic


@contextmanager
def _clock(step: str, times: dict[str, float] | None) -> Iterator[None]:
    start = time.perf_counter()
    yield
    if times is not None:
        times[f"timing/{step}"] = times.get(f"timing/{step}", 0.0) + time.perf_counter() - start


def _call(step: str, times: dict[str, float] | None, fn: Callable[..., T], *args: Any) -> T:
    with _clock(step, times):
        return fn(*args)


@torch.no_grad()
def roll_out(trainer: Any, prompts: list[str], times: dict[str, float] | None = None):
    """The rollout of `prompts`: sampled, scored by the policy and the reference, valued, rewarded.
    `times` (if given) collects `timing/<step>`."""
    rollout = _call("gen", times, trainer.generate_sequences, prompts)
    ref_hidden = _call("ref", times, trainer.compute_ref_log_prob, rollout)
    rollout = _call("old_log_prob", times, trainer.compute_log_prob, rollout, ref_hidden)
    if rollout.values is None and has_critic(trainer):
        rollout.values = _call("values", times, trainer.compute_values, rollout)
    return _call("reward", times, trainer.compute_scores, rollout)


def learn(trainer: Any, batch: Batch, times: dict[str, float] | None = None) -> dict[str, float]:
    """The advantages over the whole batch, then the critic's update (where there is a critic), then
    the actor's; their metrics as one dict (`merge_stats`)."""
    _call("adv", times, trainer.compute_advantages, batch)
    critic = _call("update_critic", times, trainer.update_critic, batch) if has_critic(trainer) else {}
    actor = _call("update_actor", times, trainer.update_actor, batch)
    return merge_stats(critic, actor)


def validate(trainer: Any, prompts: list[str], n: int, key: str, rows_per_call: int,
             times: dict[str, float] | None = None) -> dict[str, list]:
    """verl's `_validate`: `n` samples of each held-out prompt from the policy now, at the run's sampling
    settings, `rows_per_call` rows a `generate_sequences` call (the training's batch: memory it is known
    to fit), call i drawn from a random stream of its own seeded from (key, i) (`Trainer.generate_sequences`'
    `validate`: the run's own stream is left as it was; the loop's key is the run's seed and the phase). With several processes (torchrun) each draws
    every world_size-th call and all of them get every sample, so the samples do not depend on the number
    of processes. `timing/testing` (verl's name) collects the time. Returns the samples in prompt order:
    {"prompts": each prompt n times in a row, "completions", "lengths"} (what a task's `evaluate` reads)."""
    from rlhf_scratch.engine import distributed as dist

    per_call = max(1, rows_per_call // n)
    calls = [prompts[i : i + per_call] for i in range(0, len(prompts), per_call)]
    mine = []
    with _clock("testing", times):
        for index in range(dist.rank(), len(calls), dist.world_size()):
            seed = random.Random(f"{key}-{index}").getrandbits(62)
            rollout = trainer.generate_sequences(calls[index], validate={"n": n, "seed": seed})
            mine.append((index, list(rollout.prompts), list(rollout.completions), rollout.lengths.tolist()))
        done = sorted((part for rank in dist.gather_objects(mine) for part in rank), key=lambda part: part[0])
    return {"prompts": [p for part in done for p in part[1]], "completions": [c for part in done for c in part[2]],
            "lengths": [n for part in done for n in part[3]]}


def merge_stats(*parts: dict[str, float]) -> dict[str, float]:
    """The metrics of one phase's several updates (verl's update_critic, then update_actor) as one
    dict: `charts/skipped_steps` added up, every other key the last part's (they are disjoint or equal)."""
    merged = {k: v for part in parts for k, v in part.items()}
    if any("charts/skipped_steps" in part for part in parts):
        merged["charts/skipped_steps"] = float(sum(part.get("charts/skipped_steps", 0.0) for part in parts))
    return merged
