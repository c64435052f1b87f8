"""`RLOOTrainer`: REINFORCE Leave-One-Out (Ahmadian et al. 2024, "Back to Basics"), TRL's names.

    for phase in range(total_phases):           # the engine's phase (loop.py), verl's names
        batch = generate_sequences → compute_log_prob → compute_scores   # G completions of each prompt, no gradients
        compute_advantages(batch)               # KL-shaped rewards → leave-one-out advantages (whole batch)
        update_actor(batch)                     # minibatch ascent on J

No critic: the baseline of a completion is the mean reward of the other G − 1 completions of the
same prompt. The KL to the reference is folded into the reward (sequence level, k1 estimator);
the objective is PPO's clipped surrogate on the SEQUENCE log-prob ratio:

    r_i  = R_i − β Σ_t (log π_old(o_t) − log π_ref(o_t))          compute_kl_shaped_rewards
    A_i  = r_i − 1/(G−1) Σ_{j≠i} r_j                              compute_rloo_advantages
    ρ_i  = exp(log π(o_i|q) − log π_old(o_i|q))
    J    = mean_i min(ρ_i A_i, clip(ρ_i, 1−ε_low, 1+ε_high) A_i)   calc_rloo_objective (maximised)

ρ = 1 only on the first minibatch of the first pass, where J's gradient is REINFORCE's,
mean_i A_i ∇ log π(o_i|q). Even with one pass per batch, each later minibatch was sampled from π_old
but is scored by a policy that has already taken steps, so its ρ ≠ 1 and the clip can bind.
"""

from __future__ import annotations

from torch import Tensor

from rlhf_scratch.algorithms.rloo.args import RLOOArgs
from rlhf_scratch.algorithms.rloo.objective import (
    calc_clip_ratios,
    calc_rloo_objective,
    compute_kl_shaped_rewards,
    compute_rloo_advantages,
    normalize_advantages,
)
from rlhf_scratch.core.advantages import (
    LENGTH_BY_SIGN_METRICS,
    group_reward_stats,
    mean_length_by_advantage_sign,
)
from rlhf_scratch.core.host import Stats
from rlhf_scratch.core.memory import minibatch_rows
from rlhf_scratch.core.objectives import sequence_log_probs
from rlhf_scratch.engine.batch import Batch
from rlhf_scratch.engine.trainer import Trainer

# Logged by RLOO's learning phase each phase, besides loop.SHARED_METRICS (TRL's names).
RLOO_METRICS = (
    "reward",  # mean score of the reward function (before the KL shaping and any EOS penalty)
    "reward_std",  # std of the scores over the batch
    "frac_reward_zero_std",  # fraction of prompts whose G KL-shaped rewards are all equal (TRL's: after shaping)
    "kl",  # per-TOKEN mean of k1 = log π_old − log π_ref over every kept token of the batch (TRL's)
    "entropy",  # mean per-token entropy of π_old (at T) over kept tokens (TRL: of π at the loss forward)
    "rewards/shaped_mean",  # mean of R − β·KL, what the advantages are built from
    "objective/rloo",  # J, mean over minibatches
    "objective/beta",
    "clip_ratio/low_mean",  # fraction of sequences with ρ < 1−ε_low and A < 0 (clipped)
    "clip_ratio/high_mean",  # fraction with ρ > 1+ε_high and A > 0 (clipped)
    "clip_ratio/region_mean",  # fraction clipped on either side
    *LENGTH_BY_SIGN_METRICS,  # ours: mean length of the completions with A < 0 and with A > 0 (NaN if none)
    "charts/skipped_steps",
)


class RLOOTrainer(Trainer):
    """RLOO of `args.model` toward the reward of `args.task` (or `reward_fn`): no critic."""

    METRICS = RLOO_METRICS
    args: RLOOArgs

    @staticmethod
    def generations(args) -> int:
        """G: `--num-generations` completions of each prompt."""
        return args.num_generations

    def shaped_rewards(self, batch: Batch) -> Tensor:
        """R − β·KL of every process's rows: what the advantages are built from."""
        e = batch.everyone
        return compute_kl_shaped_rewards(e.rewards, e.logprobs, e.ref_logprobs, e.completion_mask, self.args.beta)

    def compute_advantages(self, batch: Batch) -> None:
        """Shaped rewards → leave-one-out advantages (normalised over the whole batch if asked)."""
        advantages = compute_rloo_advantages(self.shaped_rewards(batch), self.args.num_generations)
        batch.advantages = normalize_advantages(advantages) if self.args.normalize_advantages else advantages

    def update_actor(self, batch: Batch) -> dict[str, float]:
        """num_iterations passes of minibatch ascent on J over this process's rows.

        Once the advantages are computed a row stands alone, so minibatches are drawn from all rows
        shuffled (a prompt's G completions need not share a minibatch)."""
        args, rollout, everyone = self.args, batch.rollout, batch.everyone
        advantages = batch.local_advantages
        old_seq_logprobs = sequence_log_probs(rollout.logprobs, rollout.completion_mask)

        def objective(rows: Tensor) -> tuple[Tensor, Stats]:
            seq_logprobs = self.sequence_log_probs(rollout, rows)
            clip = (seq_logprobs, old_seq_logprobs[rows], advantages[rows], args.epsilon_low, args.epsilon_high)
            J = calc_rloo_objective(*clip)
            return J, {"objective/rloo": J.detach(), **calc_clip_ratios(*clip)}  # J read with the phase's statistics

        learned = self.ascend(minibatch_rows(len(rollout), args.num_minibatches, args.num_iterations), objective,
                              total=args.num_minibatches * args.num_iterations)
        mask, shaped = everyone.completion_mask, self.shaped_rewards(batch)
        token_kl = (everyone.logprobs - everyone.ref_logprobs)[mask]  # k1 per kept token
        return {
            **group_reward_stats(everyone.scores, shaped, args.num_generations),
            "kl": token_kl.mean().item(),
            "entropy": everyone.entropy[mask].mean().item(),
            "rewards/shaped_mean": shaped.mean().item(),
            **learned,
            "objective/beta": args.beta,
            **mean_length_by_advantage_sign(everyone.lengths, batch.advantages),
        }
