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

With --filter-groups (GRPO, RLOO: DAPO's dynamic sampling, `roll_out_filtered`) the rollout is
generate_sequences → compute_scores, again on more prompts until the batch is full of groups whose rewards
differ, then the log-probs of the kept rows (verl's DAPO trainer's order): the same roles, so both backends
have it.

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
from rlhf_scratch.core.advantages import zero_std_groups
from rlhf_scratch.core.host import Stats
from rlhf_scratch.engine import distributed as dist
from rlhf_scratch.engine.batch import Batch
from rlhf_scratch.rollout.episodes import RECORD
from rlhf_scratch.rollout.groups import concat_rollouts, take_groups

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
    return _call("reward", times, trainer.compute_scores, _log_probs(trainer, rollout, times))


def _log_probs(trainer: Any, rollout, times: dict[str, float] | None):
    """ĥ_ref, then log π_old (log π_ref, KL, entropy), then the values where the algorithm has a critic
    and they did not come with the log-probs."""
    ref_hidden = _call("ref", times, trainer.compute_ref_log_prob, rollout)
    rollout = _call("old_log_prob", times, trainer.compute_log_prob, rollout, ref_hidden)
    if rollout.values is None and has_critic(trainer):
        rollout.values = _call("values", times, trainer.compute_values, rollout)
    return rollout


FILTER_GROUPS_METRICS = ("filter_groups/num_gen_batches", "filter_groups/dropped_groups", "filter_groups/filled_groups")
"""Logged every phase of a run with --filter-groups (`roll_out_filtered`): generation batches sampled (verl's
train/num_gen_batches), groups with all-equal rewards left out, and such groups trained on all the same because
--max-num-gen-batches was reached before the batch was full (groups: every process's)."""


def roll_out_phase(trainer: Any, times: dict[str, float] | None = None) -> tuple[Any, dict[str, float]]:
    """This phase's rollout: `roll_out` of the next prompts, or with --filter-groups `roll_out_filtered`;
    and the dynamic sampling's counts (FILTER_GROUPS_METRICS; none without it)."""
    if trainer.args.filters_groups():
        return roll_out_filtered(trainer, times)
    return roll_out(trainer, trainer.next_prompts(), times), {}


@torch.no_grad()
def roll_out_filtered(trainer: Any, times: dict[str, float] | None = None) -> tuple[Any, dict[str, float]]:
    """DAPO's dynamic sampling (Yu et al. 2025; verl's algorithm.filter_groups), written with the roles:

        until P groups with a spread are in hand (P = the prompts of one next_prompts), or max_num_gen_batches
        generation batches were sampled (0: no limit):
            part = compute_scores(generate_sequences(next_prompts()))            timing/gen, timing/reward
            its groups whose filter_groups_metric is all equal (`zero_std_groups`) are left out
        rollout = the first P groups with a spread (any more are not used, as verl's), filled up with left-out
                  groups in the order sampled when the limit came first (verl raises there)
        then compute_ref_log_prob → compute_log_prob → compute_values, on those rows only

    A left-out group has every advantage 0 under GRPO and RLOO: it would only dilute the batch. Every
    next_prompts moves the run's prompt iterator, which the checkpoint keeps (a resumed run draws the same).
    Under torchrun each process fills its own share, and all sample as many batches (`any_rank`). Returns the
    rollout and FILTER_GROUPS_METRICS."""
    args = trainer.args
    G, limit = args.num_generations, args.max_num_gen_batches
    parts, spread, need = [], [], 0
    while True:
        prompts = trainer.next_prompts()
        need = need or len(prompts)
        part = _call("reward", times, trainer.compute_scores, _call("gen", times, trainer.generate_sequences, prompts))
        parts.append(part)
        spread.append(~zero_std_groups(part.rewards if args.filter_groups_metric == "seq_reward" else part.scores, G))
        if len(parts) == limit or not dist.any_rank(int(torch.cat(spread).sum()) < need):
            break
    spread_all = torch.cat(spread)
    kept, left_out = spread_all.nonzero().flatten().tolist(), (~spread_all).nonzero().flatten().tolist()
    filled = max(0, need - len(kept))
    rollout = _log_probs(trainer, take_groups(concat_rollouts(parts), (kept + left_out)[:need]), times)
    counts = [sum(c) for c in zip(*dist.gather_objects((len(left_out) - filled, filled)))]
    return rollout, {"filter_groups/num_gen_batches": float(len(parts)), "filter_groups/dropped_groups": float(counts[0]),
                     "filter_groups/filled_groups": float(counts[1])}


def learn(trainer: Any, batch: Batch, times: dict[str, float] | None = None) -> Stats:
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
    {"prompts": each prompt n times in a row, "completions", "lengths"} (what a task's `evaluate` reads), and
    with an environment "episodes": each sample's record (`episodes.RECORD`: turns, tool calls and errors, tokens)."""
    from rlhf_scratch.engine import distributed as dist

    per_call = max(1, rows_per_call // n)
    calls = [prompts[i : i + per_call] for i in range(0, len(prompts), per_call)]
    mine = []
    with _clock("testing", times):
        for index in range(dist.rank(), len(calls), dist.world_size()):
            seed = random.Random(f"{key}-{index}").getrandbits(62)
            rollout = trainer.generate_sequences(calls[index], validate={"n": n, "seed": seed})
            record = {k: getattr(rollout, k).tolist() for k in RECORD if getattr(rollout, k) is not None}
            mine.append((index, list(rollout.prompts), list(rollout.completions), rollout.lengths.tolist(), record))
        done = sorted((part for rank in dist.gather_objects(mine) for part in rank), key=lambda part: part[0])
    samples = {"prompts": [p for part in done for p in part[1]], "completions": [c for part in done for c in part[2]],
               "lengths": [n for part in done for n in part[3]]}
    if done and done[0][4]:  # episodes (--env): their record too
        samples["episodes"] = {k: [x for part in done for x in part[4][k]] for k in done[0][4]}
    return samples


def merge_stats(*parts: Stats) -> Stats:
    """The metrics of one phase's several updates (verl's update_critic, then update_actor) as one
    dict: `charts/skipped_steps` added up, every other key the last part's (they are disjoint or equal)."""
    merged = {k: v for part in parts for k, v in part.items()}
    if any("charts/skipped_steps" in part for part in parts):
        merged["charts/skipped_steps"] = float(sum(part.get("charts/skipped_steps", 0.0) for part in parts))
    return merged
