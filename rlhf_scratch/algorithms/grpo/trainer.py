"""`GRPOTrainer`: Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath) and the
variants TRL 1.16 offers as `loss_type`, as TRL 1.16 computes them (`GRPOTrainer._compute_loss` and
`_generate_and_score_completions`): the length-bias fixes Dr. GRPO (Liu et al. 2025), DAPO (Yu et
al. 2025), GSPO (Zheng et al. 2025) and LUSPO, and the other surrogates CISPO (MiniMax-M1), SAPO
and VESPO (papers and formulas: docs/grpo.md).

    for phase in range(total_phases):           # the engine's phase (loop.py), verl's names
        batch = generate_sequences → compute_log_prob → compute_scores   # G completions each (no reference at β = 0)
        compute_advantages(batch)               # group-relative advantages, over the whole batch
        update_actor(batch)                     # per-token surrogate → minibatch ascent

RLOO's sibling (algorithms/rloo.py): G completions per prompt, no critic. Where they differ:

                  RLOO                                   GRPO
    baseline      mean of the OTHER G − 1 rewards        mean of all G, r_i included
    scale         none                                   ÷ (std + 1e-4): the group's, the batch's or none
    KL            k1, summed, folded into the reward     k3 per token in the loss (β = 0 by default)
    ratio         one per sequence                       one per token (GSPO: one per sequence)
    aggregation   mean over sequences                    `loss_type`: grpo, bnpo, dr_grpo, dapo, luspo, …

    A_i     = (r_i − mean_j r_j) / (std_j r_j + 1e-4)                       compute_grpo_advantages
    ρ_{i,t} = exp(log π(o_{i,t}) − log π_old(o_{i,t}))                      calc_importance_ratio
    ℓ_{i,t} = min(ρ A_i, clip(ρ, 1−ε_low, 1+ε_high) A_i)                    calc_clipped_surrogate (or cispo/sapo/vespo's)
              − β ρ k3_{i,t}                                                calc_k3_kl (ρ k3: TRL's default)
    J       = Σ_{i,t} mask · ℓ / (the loss_type's normaliser)               aggregate_grpo_terms
              + entropy_coef · mean_kept H[π]                               (maximised: J = −TRL's loss)

How J is averaged over tokens decides what it teaches about length: see `aggregate_grpo_terms`
and docs/grpo.md, where the length bias of `grpo` is measured against `dr_grpo`, `dapo` and RLOO.
"""

from __future__ import annotations

import sys

import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from rlhf_scratch.algorithms.grpo.args import GRPOArgs
from rlhf_scratch.algorithms.grpo.loss import (
    AGGREGATION_ONLY_LOSS_TYPES,
    CLIPPED_LOSS_TYPES,
    calc_grpo_terms,
    compute_grpo_advantages,
    grpo_loss_settings,
    loss_mask,
    nan_extreme,
)
from rlhf_scratch.core.advantages import (
    LENGTH_BY_SIGN_METRICS,
    group_reward_stats,
    mean_length_by_advantage_sign,
)
from rlhf_scratch.core.host import Stats
from rlhf_scratch.core.memory import minibatch_rows
from rlhf_scratch.engine import distributed as dist
from rlhf_scratch.engine.batch import Batch
from rlhf_scratch.engine.trainer import Trainer

# Logged by GRPO's learning phase each phase, besides loop.SHARED_METRICS (TRL's names, then ours).
GRPO_METRICS = (
    "reward",  # mean score of the reward function (before any missing-EOS penalty)
    "reward_std",  # std of the scores over the batch
    "frac_reward_zero_std",  # fraction of prompts whose G rewards are all equal: advantage 0, no signal
    "entropy",  # mean per-token entropy of π_old over the loss's tokens (TRL: of π in the loss forward; equal on a pass's first minibatch)
    # TRL logs the clip ratios for the clipped loss types only (CLIPPED_LOSS_TYPES); per optimizer step
    # over every process's kept tokens (sequences, for GSPO), then the mean over steps:
    "clip_ratio/low_mean",  # fraction with ρ < 1−ε_low and A < 0
    "clip_ratio/high_mean",  # fraction with ρ > 1+ε_high and A > 0
    "clip_ratio/region_mean",  # fraction clipped on either side
    "clip_ratio/low_min",  # the smallest, over sequences, fraction of a sequence's kept tokens clipped low
    "clip_ratio/high_max",  # the largest, over sequences, fraction of a sequence's kept tokens clipped high
    "cispo_clip_ratio",  # cispo only: fraction of kept tokens with ρ > ε_max (epsilon_high) and A > 0
    "vespo/phi_seq_mean",  # vespo only: mean over sequences of VESPO's weight φ
    "objective/grpo",  # J, mean over minibatches
    "objective/beta",
    *LENGTH_BY_SIGN_METRICS,  # ours: mean length of the completions with A < 0 and with A > 0 (NaN if none)
    "charts/skipped_steps",
    "kl",  # logged only when β > 0, as TRL: mean per-token k3 of π to π_ref in the loss forward (KL_METRIC)
)
KL_METRIC = "kl"
LENGTH_NOTE = ("note: --loss-type {loss_type} changes nothing here: without a stop at EOS every completion has "
               "gen_len={gen_len} tokens, and with equal lengths grpo, bnpo, dr_grpo and dapo give the same update; "
               "the length lesson needs --stop-at-eos or --prompts rt (docs/grpo.md)")
# TRL 1.16's warnings about importance_sampling_level and loss_type (GRPOTrainer.__init__), one line each
SEQUENCE_SUM_WARNING = ("warning: --importance-sampling-level sequence with --loss-type {loss_type} sums per-token terms, "
                        "which weighs each sequence by its length instead of optimising GSPO's per-sequence objective; "
                        "GSPO is --loss-type grpo (TRL warns the same; docs/grpo.md)")
LUSPO_WARNING = ("warning: --loss-type luspo is meant with --importance-sampling-level sequence, the LUSPO paper's "
                 "setup (TRL warns the same; docs/grpo.md)")
VESPO_WARNING = ("warning: --loss-type vespo computes its own sequence-level weight; --importance-sampling-level "
                 "should be token, sequence changes only the ratio on the KL term (TRL warns the same; docs/grpo.md)")


def grpo_start_notes(args: GRPOArgs) -> list[str]:
    """The lines `GRPOTrainer` prints on stderr at start: TRL's warnings where it warns (GSPO's sequence
    ratio with a loss type that sums tokens; luspo without it; vespo with it), and our note when the
    loss type cannot matter (no stop at EOS: every completion has gen_len tokens)."""
    notes = []
    if args.importance_sampling_level == "sequence" and args.loss_type in ("bnpo", "dr_grpo", "dapo", "cispo"):
        notes.append(SEQUENCE_SUM_WARNING.format(loss_type=args.loss_type))
    if args.loss_type == "luspo" and args.importance_sampling_level != "sequence":
        notes.append(LUSPO_WARNING)
    if args.loss_type == "vespo" and args.importance_sampling_level != "token":
        notes.append(VESPO_WARNING)
    if not args.eos_stops() and args.loss_type in AGGREGATION_ONLY_LOSS_TYPES and args.loss_type != GRPOArgs.loss_type:
        notes.append(LENGTH_NOTE.format(loss_type=args.loss_type, gen_len=args.gen_len))
    return notes



class GRPOTrainer(Trainer):
    """GRPO of `args.model` toward the reward of `args.task` (or `reward_fn`): no critic, and no
    reference model at all when β = 0 (unless `measure_kl`)."""

    METRICS = GRPO_METRICS
    args: GRPOArgs

    def __init__(self, args: GRPOArgs, reward_fn=None, quiet: bool = False):
        super().__init__(args, reward_fn, quiet)
        if not self.quiet:
            for line in grpo_start_notes(args):
                tqdm.write(line, file=sys.stderr)

    def uses_reference(self) -> bool:
        """As TRL: at β = 0 the reference is never loaded nor run (unless asked to measure the KL)."""
        return self.args.beta > 0 or self.args.measure_kl

    @staticmethod
    def generations(args) -> int:
        """G: `--num-generations` completions of each prompt."""
        return args.num_generations

    def compute_advantages(self, batch: Batch) -> None:
        """Group-relative advantages from the whole batch's rewards (a group never splits over
        processes; the batch std spans all of them)."""
        batch.advantages = compute_grpo_advantages(batch.everyone.rewards, self.args.num_generations,
                                                   self.args.scale_rewards)

    def update_actor(self, batch: Batch) -> dict[str, float]:
        """num_iterations passes of minibatch ascent on J over this process's rows, each pass
        num_minibatches (= steps_per_generation) optimizer steps.

        dapo's token count N is the whole batch's. A row stands alone: minibatches are drawn from
        all rows shuffled, as in RLOO. The clip counts of each optimizer step are summed over the
        processes after the phase: they are of the new policy's log-probs, which no gathered rollout holds."""
        args, rollout, everyone = self.args, batch.rollout, batch.everyone
        mask = loss_mask(rollout.completion_mask, rollout.is_terminated, args.mask_truncated_completions)
        every_mask = loss_mask(everyone.completion_mask, everyone.is_terminated, args.mask_truncated_completions)
        advantages = batch.local_advantages
        num_items_in_batch = every_mask.sum()  # the loss's tokens, whole generation batch
        use_ref = args.beta != 0.0
        settings = grpo_loss_settings(args)
        counts: list[Tensor] = []  # per step on this rank: [clip low, clip high, clip n, KL-term sum, kept tokens, φ sum, rows]
        extremes: list[Tensor] = []  # per step on this rank: [clip low_min, clip high_max]

        def objective(rows: Tensor) -> tuple[Tensor, Stats]:
            if args.entropy_coef != 0.0:
                logprobs, entropies = self.token_log_probs_and_entropy(rollout, rows)
            else:
                logprobs, entropies = self.token_log_probs(rollout, rows), None
            terms = calc_grpo_terms(
                logprobs, rollout.logprobs[rows], advantages[rows], mask[rows], max_completion_length=args.gen_len,
                ref_logprobs=rollout.ref_logprobs[rows] if use_ref else None, num_items_in_batch=num_items_in_batch,
                num_splits=args.num_minibatches * batch.world_size, entropies=entropies, **settings,
            )
            counts.append(torch.cat([terms.clip_counts, torch.stack([terms.kl_sum, mask[rows].sum().float(),
                                                                     terms.phi_sum, logprobs.new_tensor(len(rows))])]))
            extremes.append(terms.clip_extremes)
            return terms.objective, {"objective/grpo": terms.objective.detach()}  # read with the phase's statistics

        learned = self.ascend(minibatch_rows(len(rollout), args.num_minibatches, args.num_iterations), objective,
                              total=args.num_minibatches * args.num_iterations)
        world, n_steps = batch.world_size, len(counts)
        steps = dist.all_gather(torch.stack(counts)).view(world, n_steps, 7).sum(0)  # [steps, 7], every process's
        step_extremes = dist.all_gather(torch.stack(extremes)).view(world, n_steps, 2)
        return {
            **group_reward_stats(everyone.scores, everyone.rewards, args.num_generations),
            **({KL_METRIC: (steps[:, 3] / steps[:, 4].clamp(min=1.0)).mean().item()} if use_ref else {}),
            "entropy": everyone.entropy[every_mask].mean().item(),
            **ratio_metrics(args.loss_type, steps, step_extremes),
            **learned,
            "objective/beta": args.beta,
            **mean_length_by_advantage_sign(everyone.lengths, batch.advantages),
        }


def ratio_metrics(
    loss_type: str, steps: Float[Tensor, "steps 7"], step_extremes: Float[Tensor, "processes steps 2"]
) -> dict[str, float]:
    """TRL's metrics about the importance ratio, for the loss types that log them: per optimizer step
    over every process (counts summed, extremes the min / max of the processes'), then the mean over
    the steps, NaN steps left out as TRL's `log` leaves them out.

    `steps` columns: clip low, clip high, clip n, KL-term sum, kept tokens, φ sum, rows (`GRPOTrainer.learning_phase`)."""
    n = steps[:, 2].clamp(min=1.0)
    if loss_type in CLIPPED_LOSS_TYPES:
        low, high = (steps[:, 0] / n).mean().item(), (steps[:, 1] / n).mean().item()
        return {
            "clip_ratio/low_mean": low,
            "clip_ratio/high_mean": high,
            "clip_ratio/region_mean": low + high,
            "clip_ratio/low_min": nan_extreme(step_extremes[..., 0], largest=False, dim=0).nanmean().item(),
            "clip_ratio/high_max": nan_extreme(step_extremes[..., 1], largest=True, dim=0).nanmean().item(),
        }
    if loss_type == "cispo":
        return {"cispo_clip_ratio": (steps[:, 1] / n).mean().item()}
    if loss_type == "vespo":
        return {"vespo/phi_seq_mean": (steps[:, 5] / steps[:, 6]).mean().item()}
    return {}
