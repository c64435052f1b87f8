"""The scaffolding every algorithm shares, written once; an algorithm adds its advantages and its update.

    class RLOOTrainer(Trainer):                       # one folder under algorithms/
        METRICS = ("reward", "kl", ...)              # what update_actor returns (TRL's names)

        def compute_advantages(self, batch):         # over every process's rows (batch.everyone)
            batch.advantages = compute_rloo_advantages(...)

        def update_actor(self, batch) -> dict:       # the algorithm's loss on this process's rows
            def objective(rows):                     # one minibatch, MAXIMISED
                seq_logprobs = self.sequence_log_probs(batch.rollout, rows)
                return calc_rloo_objective(...), {"objective/rloo": ...}
            return {**self.ascend(minibatch_rows(...), objective), ...}

The engine drives a phase through the trainer's role methods, verl's names, in verl's order
(`dataflow`; the controller's workers call the same ones remotely): `next_prompts` →
`generate_sequences` → `compute_ref_log_prob` (ĥ_ref) → `compute_log_prob` (log π_old, log π_ref, KL,
entropy, and PPO's values from the same trunk, in the same call) → `compute_scores` (the reward, the
missing-EOS penalty, a judge's verdicts) → the engine's one gather (`batch.gather_batch`) →
`compute_advantages` → `update_critic` (an algorithm with a critic) → `update_actor`.
`loop.run_training` knows an algorithm only through `contract.TrainerContract`. `Trainer`
implements the shared part of it: run setup (seed, threads, device), the policy and the frozen
reference, the prompts, the reward, the optimizer and scheduler, the learning forward (DDP,
torch.compile), the three rollout roles from the config, resume as one dict (`state_dict` /
`load_state_dict`), and the carrier of the learning phase:

    token_log_probs / sequence_log_probs   log π of a minibatch now, with gradient, through the
                                           learner, at the rollout's temperature, --chunk-logits at a time
    hidden_and_extras                      ĥ and the extras' output (PPO's values) from one learning
                                           forward through the learner; `chunk_logits` for their terms
    ascend(minibatches, objective)         the minibatch loop: bar, the learning forward's clock and
                                           precision, one guarded optimizer step each, one scheduler step

so a setting of the learning phase is read in one place and no algorithm can miss it. A subclass
holds no scaffolding and the base holds no algorithm math; algorithms never import each other.
The base does not import the loop: `train()` goes through `engine.run.run`, the one front door.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm
from transformer_lens import HookedTransformer

from rlhf_scratch.config import CommonArgs, ConfigError
from rlhf_scratch.core.host import Stats, read_once
from rlhf_scratch.core.timing import timed
from rlhf_scratch.engine import distributed as dist
from rlhf_scratch.engine.accel import begin_step, compiled, learning_autocast
from rlhf_scratch.engine.batch import Batch, gather_batch
from rlhf_scratch.engine.checkpoint import rng_state, set_rng_state
from rlhf_scratch.engine.dataflow import learn, merge_stats, roll_out_phase
from rlhf_scratch.engine.optim import Learner, clip_and_step, get_optimizer_and_scheduler
from rlhf_scratch.engine.run_setup import load_policy, make_prompt_iterator, setup_torch
from rlhf_scratch.engine.runs import save_run_policy
from rlhf_scratch.models.fast_forward import HiddenForward, fast_path_note
from rlhf_scratch.models.policy import Policy, build_policy, load_saved_state, reference_of, saved_state, trainable_lm
from rlhf_scratch.models.static_cache import DecoderCache
from rlhf_scratch.reward.judges import Judge
from rlhf_scratch.reward.tasks import RewardFn, make_reward_fn
from rlhf_scratch.reward.tasks import rewarded_by as rewarded_by_record
from rlhf_scratch.rollout.environment import make_environment_factory
from rlhf_scratch.rollout.episodes import generate_episodes
from rlhf_scratch.rollout.phase import (
    OverlongBuffer,
    Rollout,
    compute_log_prob,
    compute_scores,
    generate_sequences,
    policy_sequence_log_probs,
    policy_token_log_probs,
    policy_token_terms,
    policy_values,
    reference_hidden,
)

Minibatch = TypeVar("Minibatch")
Objective = Callable[[Minibatch], "tuple[Tensor, Stats] | None"]


class Trainer:
    """The shared scaffolding of every algorithm (see the module docstring). A subclass writes
    `rollout_phase` and `learning_phase`; it may override `build_policy` (by default the registry's `policy` hook),
    `uses_reference` (GRPO at β = 0 loads none) and `extra_state`/`load_extra_state`."""

    METRICS: ClassVar[tuple[str, ...]] = ()
    optimizer_steps: int = 0
    """Optimizer steps taken by every optimizer of this trainer (`optimizer_step`): with the schedules, `steps_taken`."""
    skipped_steps: int = 0
    """Optimizer steps skipped for a non-finite objective or gradient norm, over the trainer's life."""
    _found_inf: tuple[Tensor, ...] = ()
    """The found_inf flags of the steps not counted yet (`count_steps`), unread, in order."""

    def __init__(self, args: CommonArgs, reward_fn: RewardFn | None = None, quiet: bool = False):
        args = args.with_local_paths_resolved()  # what config.json records must mean the same files on resume
        self.device = setup_torch(args)
        self.args, self.quiet = args, quiet or not dist.is_main()  # one progress bar: rank 0's
        lm = trainable_lm(load_policy(args.model, self.device), args)  # whole, or frozen with adapters (models.policy)
        self.ref_model: HookedTransformer | None = reference_of(args, lm, self.device) if self.uses_reference() else None
        """The reference: a frozen copy, or the policy's own LM run under `models.policy.as_reference`."""
        self.lm: HookedTransformer = lm
        """The language model being tuned (an algorithm's policy may hold more around it): what samples and what interp reads."""
        self.policy: Policy = self.build_policy(lm)
        self.prompts = make_prompt_iterator(args, lm, say=None if self.quiet else lambda text: tqdm.write(f"note: {text}", file=sys.stderr))
        self.reward_fn = reward_fn or make_reward_fn(args, device=self.device)
        self.judge: Judge | None = None  # Online DPO may set one
        self.optimizer, self.scheduler = get_optimizer_and_scheduler(args, self.policy)
        forward = HiddenForward(lm) if self.policy is lm else self.policy  # the LM's learning forward returns ĥ
        self.learner = compiled(dist.wrap_for_training(forward), args)  # the learning forward (fast path, DDP, compile)
        self.skipped_in_a_row = 0
        self.decoders = DecoderCache()  # sampling's static cache (and CUDA graph), kept between rollouts
        self.environments = make_environment_factory(args, lm.tokenizer)  # --env: episodes of turns (issue 58)
        if not self.quiet and (note := fast_path_note(lm, self.device)):
            tqdm.write(f"note: {note}", file=sys.stderr)

    @property
    def chunk_logits(self) -> int:
        """--chunk-logits on this run's device (-1, auto: 2**21 on a CPU, 2**27 on a GPU)."""
        return self.args.logits_per_chunk(self.device)

    # ------------------------------------------------------------------ what a subclass may change
    def build_policy(self, lm: HookedTransformer) -> Policy:
        """The module that is trained and saved: the LM itself, or what the algorithm's registry entry
        builds around it (`models.policy.build_policy`; a run folder is rebuilt the same way)."""
        return build_policy(self.args, lm)

    @staticmethod
    def check_ranks(args: CommonArgs, ranks: int) -> None:
        """Refuse, in one ConfigError line, settings this algorithm cannot run on `ranks` data-parallel
        ranks (torchrun's processes, or the controller's --workers): asked before anything starts."""

    def uses_reference(self) -> bool:
        """Whether a frozen reference copy of the model is loaded and run in every rollout."""
        return True

    def extra_state(self) -> dict[str, Any]:
        """The algorithm's state besides weights, optimizer, scheduler and RNG, for checkpoints."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Put back what `extra_state` returned."""

    def keeps_ref_hidden(self) -> bool:
        """Whether the rollout keeps the reference's ĥ for the learning phase (PPO's --cache-ref-logprobs)."""
        return False

    def compute_advantages(self, batch: Batch) -> None:
        """Set `batch.advantages` over every process's rows (`batch.everyone`): the algorithm's part."""
        raise NotImplementedError(f"{type(self).__name__} must define compute_advantages")

    def update_actor(self, batch: Batch) -> Stats:
        """Ascend on this process's rows of `batch`; return the phase's metrics (its `METRICS`)."""
        raise NotImplementedError(f"{type(self).__name__} must define update_actor")

    def update_critic(self, batch: Batch) -> Stats:
        """The critic's update, before `update_actor`, in an algorithm whose registry entry has a
        critic (`dataflow.learn`); nothing here."""
        return {}

    def schedulers(self) -> list[torch.optim.lr_scheduler.LRScheduler]:
        """Every learning-rate schedule this trainer steps (PPO's separate critic adds its own)."""
        return [self.scheduler]

    # ------------------------------------------------------------------ the roles (verl's names)
    @staticmethod
    def generations(args: CommonArgs) -> int:
        """G, the completions sampled per prompt, from the args alone (a driver that builds no trainer,
        the controller, asks the trainer class): 1 here; a subclass says its own."""
        return 1

    @property
    def num_generations(self) -> int:
        """G of this run: `generations(args)`."""
        return self.generations(self.args)

    def next_prompts(self) -> list[str]:
        """This phase's prompts: batch_size / G of them, this process's share."""
        return dist.shard(self.prompts.next_batch(self.args.batch_size // self.num_generations))

    def generate_sequences(self, prompts: list[str], validate: dict | None = None) -> Rollout:
        """G completions of each prompt, sampled from the policy (`rollout.generate_sequences`). With
        `validate` ({"n": n, "seed": s}, verl's validate meta_info with val_kwargs.n: `dataflow.validate`)
        n completions of each instead, at --val-temperature from the whole softmax, drawn from a random stream
        of their own seeded with s, so that a validation leaves the run's own stream, and so its samples, as they were.
        With --env each completion is an episode of up to --max-turns turns (`rollout.episodes.generate_episodes`)."""
        args = self.args
        n, temperature, top_k, top_p = ((self.num_generations, args.temperature, args.top_k, args.top_p) if validate is None
                                        else (int(validate["n"]), args.val_temperature, 0, 1.0))
        with nullcontext() if validate is None else own_random_stream(int(validate["seed"]), self.device):
            if self.environments is not None:
                return generate_episodes(
                    self.lm, prompts, self.environments, num_generations=n, gen_len=args.gen_len, max_turns=args.max_turns,
                    temperature=temperature, top_k=top_k, top_p=top_p, prepend_bos=args.prepend_bos, kv_cache=args.kv_cache,
                    cuda_graph=args.cuda_graph, decoders=self.decoders,
                )[0]
            return generate_sequences(
                self.lm, prompts, num_generations=n, gen_len=args.gen_len,
                temperature=temperature, top_k=top_k, top_p=top_p, prepend_bos=args.prepend_bos,
                stop_at_eos=args.eos_stops(), kv_cache=args.kv_cache, cuda_graph=args.cuda_graph, decoders=self.decoders,
            )

    def compute_log_prob(self, rollout: Rollout, ref_hidden: Tensor | None = None, with_values: bool = True) -> Rollout:
        """log π_old, log π_ref, the per-token KL, the entropy and (with extras: PPO's value head on
        the same trunk) V(s_t), one pass at the sampling temperature in the learning phase's
        precision (`rollout.compute_log_prob`): values come from this call, not a separate one.
        The single controller takes it apart as verl does: `ref_hidden` from `compute_ref_log_prob`,
        `with_values=False` and `compute_values` — the same numbers, at the cost of a second trunk forward."""
        return compute_log_prob(self.policy, self.ref_model, rollout, chunk_size=self.args.minibatch_size(),
                                keep_ref_hidden=self.keeps_ref_hidden(), policy_precision=self.learning_precision,
                                chunk_logits=self.chunk_logits, ref_hidden=ref_hidden, with_values=with_values)

    def compute_ref_log_prob(self, rollout: Rollout) -> Tensor | None:
        """The reference's part of `compute_log_prob` alone: ĥ_ref at every position that predicts a
        completion token (`rollout.reference_hidden`), for `compute_log_prob(ref_hidden=...)`, which
        unembeds it beside the policy's (the full-vocabulary KL needs both); None without a reference."""
        return None if self.ref_model is None else reference_hidden(self.ref_model, rollout, self.args.minibatch_size())

    def compute_values(self, rollout: Rollout) -> Tensor | None:
        """V(s_t) at every position from the policy's extras (PPO's value head), the values of
        `compute_log_prob` by a forward of their own (`rollout.policy_values`); None without extras."""
        if isinstance(self.policy, HookedTransformer):
            return None
        return policy_values(self.policy, rollout, self.args.minibatch_size(), self.learning_precision)

    def compute_scores(self, rollout: Rollout) -> Rollout:
        """The reward of each completion, less the missing-EOS penalty and the soft overlong punishment
        (--overlong-buffer) (`rollout.compute_scores`),
        and a judge's verdicts on its pairs where the algorithm has one (`judge_pairs`)."""
        return self.judge_pairs(compute_scores(rollout, self.reward_fn, self.args.missing_eos_penalty,
                                               OverlongBuffer.of(self.args)))

    def judge_pairs(self, rollout: Rollout) -> Rollout:
        """Set `rollout.verdicts` from the judge, if the algorithm asks one (Online DPO); else nothing."""
        return rollout

    # ------------------------------------------------------------------ the two phases, composed
    def rollout_phase(self) -> Rollout:
        """This phase's rollout: the loop's own dataflow (`dataflow.roll_out`: prompts →
        generate_sequences → compute_ref_log_prob → compute_log_prob → compute_scores; with --filter-groups
        DAPO's dynamic sampling, `dataflow.roll_out_filtered`), no gradients."""
        return roll_out_phase(self)[0]

    def learning_phase(self, rollout: Rollout) -> dict[str, float]:
        """The rollout gathered over processes once (`batch.gather_batch`), then the loop's own learning
        (`dataflow.learn`: the advantages, update_critic where there is a critic, update_actor).
        A rollout not judged yet (one made elsewhere, given to a trainer with a judge) is judged first.
        The metrics as numbers (the loop reads them with the rollout's instead: `loop._one_phase`)."""
        return read_once(learn(self, gather_batch(self.judge_pairs(rollout))))[0]

    # ------------------------------------------------------------------ resume as one dict (nanoGPT's way)
    def weights_state(self) -> dict[str, Any]:
        """The large part of `state_dict`: the policy's weights (as `models.policy.saved_state` gives
        them), the optimizer's and the scheduler's state."""
        return {"policy": saved_state(self.policy), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict()}

    def progress_state(self) -> dict[str, Any]:
        """The small part of `state_dict`, copied after every phase: the prompts' position, the
        algorithm's state (`extra_state`), skipped steps, every process's RNG (a collective in a
        distributed run: every rank calls it)."""
        return {
            "algo": self.args.algo,
            "prompts": self.prompts.state_dict(),
            "trainer": self.extra_state(),
            "skipped_in_a_row": self.skipped_in_a_row,
            "rng": rng_state(),
            "rng_per_rank": dist.gather_objects(rng_state()),  # every rank's, in a distributed run
        }

    def state_dict(self) -> dict[str, Any]:
        """Everything a bit-exact resume needs of the trainer, as one plain dict (nanoGPT's way):
        `weights_state()` and `progress_state()`."""
        return {**self.weights_state(), **self.progress_state()}

    def steps_taken(self) -> int:
        """Optimizer steps taken by every optimizer of this trainer, plus every schedule's steps: while
        it is unchanged, no weight, moment or learning rate has moved (`lifecycle.LastCompleted`). Steps whose
        flags are unread (an exception inside `ascend`) are counted first."""
        if self._found_inf:
            self.count_steps()
        return self.optimizer_steps + sum(scheduler.last_epoch for scheduler in self.schedulers())

    def learning_rate(self) -> float:
        """The policy's learning rate for its next step (charts/learning_rate)."""
        return self.optimizer.param_groups[0]["lr"]

    def rewarded_by(self) -> dict:
        """What scores this trainer's samples, as the run folder records it (`reward.tasks.rewarded_by`)."""
        return rewarded_by_record(self.args, self.reward_fn, self.judge)

    def save_policy(self, run_dir: Path) -> None:
        """The tuned policy into the run folder (`runs.save_run_policy`)."""
        save_run_policy(Path(run_dir), self.policy)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back what `state_dict` returned (a checkpoint of any earlier version: the same keys;
        one without `rng_per_rank` holds one process's RNG)."""
        load_saved_state(self.policy, state["policy"])  # adapters: refused if the base's hash differs
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.prompts.load_state_dict(state["prompts"])
        self.load_extra_state(state["trainer"])
        self.skipped_in_a_row = state["skipped_in_a_row"]
        per_rank = state.get("rng_per_rank", [state["rng"]])
        if len(per_rank) != dist.world_size():
            raise ConfigError(f"resume: the checkpoint was written by {len(per_rank)} process(es); "
                              f"resume it with the same number (torchrun --nproc-per-node {len(per_rank)})")
        set_rng_state(per_rank[dist.rank()])

    def learning_precision(self):
        """The context the learning forward runs in (bf16 autocast with --bf16, else nothing)."""
        return learning_autocast(self.args, self.device)

    # ------------------------------------------------------------------ the learning phase's carrier
    def token_log_probs(self, rollout: Rollout, rows: Int[Tensor, " rows"]) -> Float[Tensor, "rows gen_len"]:
        """log π(o_t | q, o_<t) of the rollout's `rows` under the policy now, with gradient: through
        the learner (compiled / DDP), at the temperature the rollout was sampled at, `--chunk-logits`
        logits at a time (`rollout.policy_token_log_probs`)."""
        return policy_token_log_probs(self.learner, rollout, rows, chunk_logits=self.chunk_logits)

    def token_log_probs_and_entropy(
        self, rollout: Rollout, rows: Int[Tensor, " rows"]
    ) -> tuple[Float[Tensor, "rows gen_len"], Float[Tensor, "rows gen_len"]]:
        """`token_log_probs` and the entropy H[π] at the same positions, both with gradient, from one
        forward (`rollout.policy_token_terms`): for an entropy bonus in the objective."""
        terms = policy_token_terms(self.learner, rollout, rows, chunk_logits=self.chunk_logits, with_entropy=True)
        return terms.logprobs, terms.entropy

    def hidden_and_extras(
        self, ids: Int[Tensor, "rows seq"], attention_mask: Tensor | None
    ) -> tuple[Float[Tensor, "rows seq d_model"], Tensor]:
        """ĥ at every position and the policy's extras' output (PPO's V(s_t)), with gradient, from one
        forward through the learner (compiled / DDP): for an algorithm whose policy has extras. Their
        vocabulary terms are then taken `self.chunk_logits` logits at a time."""
        return self.learner(ids, attention_mask=attention_mask, return_hidden=True)

    def sequence_log_probs(self, rollout: Rollout, rows: Int[Tensor, " rows"]) -> Float[Tensor, " rows"]:
        """log π(o | q) of the rollout's `rows` now, with gradient: `token_log_probs` summed over kept tokens."""
        return policy_sequence_log_probs(self.learner, rollout, rows, chunk_logits=self.chunk_logits)

    def ascend(self, minibatches: Iterable[Minibatch], objective: Objective, total: int | None = None,
               learner: Learner | None = None) -> dict[str, float]:
        """The minibatch loop of every algorithm's learning phase:

            for each minibatch:   J, stats = objective(minibatch)     (the learning forward: its clock, its precision)
                                  one optimizer step on J             (skipped if J or its gradient is not finite)
            one scheduler step

        `objective` returns None to skip a minibatch (Online DPO: no decided pair anywhere). The steps
        are the policy's (`self.policy`, `self.optimizer`, `self.scheduler`) unless `learner` names
        another module with its own optimizer and schedule (PPO's separate critic).
        Returns the stats averaged over minibatches (`mean_stats`) and `charts/skipped_steps`."""
        stats: list[dict[str, float | Tensor]] = []
        # a nested bar only on a terminal: written to a file it is a few lines of noise a phase
        bar = tqdm(minibatches, total=total, desc="minibatches", leave=False, disable=self.quiet or not sys.stderr.isatty())
        for minibatch in bar:
            begin_step(self.args)  # --compile-mode reduce-overhead: a new step of the graphed forward
            with timed("learning_forward"), self.learning_precision():
                out = objective(minibatch)
            if out is None:
                continue
            J, minibatch_stats = out
            self.optimizer_step(J, learner)
            if minibatch_stats:
                stats.append(minibatch_stats)
        (self.scheduler if learner is None else learner.scheduler).step()
        skipped_before = self.skipped_steps
        *stats, flags = read_once(*stats, dict(enumerate(self._found_inf)))  # the phase's one read of its statistics
        self.count_steps(flags.values())
        return {**mean_stats(stats), "charts/skipped_steps": float(self.skipped_steps - skipped_before)}

    def optimizer_step(self, objective: Tensor, learner: Learner | None = None) -> Tensor:
        """One ascent step on `objective` (MAXIMISED): zero the gradients, backward, clip the
        gradient norm, step — or skip the step when the objective or the gradient norm is not
        finite (the gradients stay on the parameters until the next step, for inspection). The policy's
        step, or `learner`'s (see `ascend`). Returns the step's `found_inf` (`optim.clip_and_step`: 1.0
        where it was skipped), unread: the steps are counted (`count_steps`) when the flags are read,
        once a phase (`ascend`), or when `steps_taken` is asked first."""
        module, optimizer = (self.policy, self.optimizer) if learner is None else (learner.module, learner.optimizer)
        optimizer.zero_grad()
        with timed("backward"):
            objective.backward()
        with timed("optimizer_step"):
            found_inf = clip_and_step(optimizer, module, objective, self.args.max_grad_norm)
        self._found_inf += (found_inf,)
        return found_inf

    def count_steps(self, found_inf: Iterable[float] | None = None) -> None:
        """Count the steps whose `found_inf` flags were unread, in order: taken (0.0) or skipped in a row
        (1.0; the loop stops at max_skipped_steps). `found_inf`: the flags already read (`ascend`); by
        default they are read here, one read."""
        flags = [float(f) for f in (read_once(dict(enumerate(self._found_inf)))[0].values() if found_inf is None else found_inf)]
        self._found_inf = ()
        for skipped in flags:
            self.skipped_in_a_row = self.skipped_in_a_row + 1 if skipped else 0
            self.skipped_steps += bool(skipped)
            self.optimizer_steps += not skipped

    def train(self, run_dir: str | Path | None = None, resume: bool = False, hooks: Sequence[Any] = ()) -> Path:
        """Run every phase (`engine.run.run`, the one front door): a new run folder (or `run_dir`),
        or with `resume=True` continue the run in `run_dir` from its latest checkpoint. `hooks` run
        after every phase and log beside it (`loop.PhaseHook`). Returns the folder."""
        from rlhf_scratch.engine.run import run  # the engine runs a trainer; the trainer does not import the loop

        return run(self, run_dir, resume=resume, hooks=hooks)


def mean_stats(stats: list[dict[str, float]]) -> dict[str, float]:
    """The per-minibatch statistics of a phase averaged key by key (empty: no step was taken)."""
    return {k: float(np.mean([s[k] for s in stats])) for k in stats[0]} if stats else {}


__all__ = ["Trainer", "mean_stats", "merge_stats"]  # merge_stats: dataflow's, named here for the algorithms


@contextmanager
def own_random_stream(seed: int, device: torch.device | str) -> Iterator[None]:
    """torch's random stream (the CPU's, and the device's on a GPU) seeded with `seed` inside, and put back
    as it was on leaving: what is drawn inside changes nothing drawn after."""
    devices = [torch.device(device)] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield
