"""Solutions of exercises 06 (the capstones), written to be read.

- `make_rloo_algorithm`: RLOO written from the algorithm contract, the way `tests/toy_algorithm.py`
  writes its toy REINFORCE: an args class, a `Trainer` subclass with its two methods
  (`compute_advantages` over the whole batch, `update_actor` on this process's rows) and the
  registry entry that names them. The package's own is `rlhf_scratch.algorithms.rloo` (the same
  math, with its metrics); `check_make_rloo_algorithm` compares the two phase for phase.
- `paired_difference_interval`: the paired difference of two methods run on the same seeds, with
  Student's t interval (`rlhf_scratch.studies.stats.difference` is the package's, with its verdict).

The k3 estimator of the second capstone is the package's own, `algorithms.grpo.calc_k3_kl`.
Read one after your own passes its check.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from rlhf_scratch.algorithms.rloo.args import RLOOArgs
from rlhf_scratch.config.registry import Algorithm
from rlhf_scratch.core.memory import minibatch_rows
from rlhf_scratch.core.objectives import sequence_log_probs
from rlhf_scratch.engine.batch import Batch
from rlhf_scratch.engine.trainer import Trainer


@dataclass
class MyRLOOArgs(RLOOArgs):
    """RLOO's fields (G, β, the clip, passes), under a name of our own."""

    ALGO: ClassVar[str] = "my_rloo"


class MyRLOOTrainer(Trainer):
    """RLOO over the shared scaffolding: the rollout, the optimizer and the minibatch loop are the base's."""

    METRICS = ("objective/rloo", "charts/skipped_steps")  # what update_actor returns (the engine checks)
    args: MyRLOOArgs

    @staticmethod
    def generations(args) -> int:
        return args.num_generations  # G completions of each prompt, consecutive rows of the batch

    def compute_advantages(self, batch: Batch) -> None:
        e, G, beta = batch.everyone, self.args.num_generations, self.args.beta  # every process's rows
        # the reward with the KL folded in, one number per completion: r = R − β Σ_t (log π_old − log π_ref)
        kl = sequence_log_probs(e.logprobs - e.ref_logprobs, e.completion_mask)
        r = (e.rewards - beta * kl).view(-1, G)  # [prompts, G]: a prompt's G completions are one row
        others = (r.sum(dim=1, keepdim=True) - r) / (G - 1)  # the mean of the OTHER G − 1: not r's own
        batch.advantages = (r - others).flatten()

    def update_actor(self, batch: Batch) -> dict[str, float]:
        args, rollout, advantages = self.args, batch.rollout, batch.local_advantages
        old = sequence_log_probs(rollout.logprobs, rollout.completion_mask)  # log π_old(o|q), from the rollout

        def objective(rows: Tensor) -> tuple[Tensor, dict[str, float]]:
            ratio = (self.sequence_log_probs(rollout, rows) - old[rows]).exp()  # ρ of the whole sequence
            A = advantages[rows]
            clipped = ratio.clamp(1 - args.epsilon_low, 1 + args.epsilon_high)
            J = torch.minimum(ratio * A, clipped * A).mean()  # maximised: ascend hands J to the optimizer
            return J, {"objective/rloo": J.item()}

        rows = minibatch_rows(len(rollout), args.num_minibatches, args.num_iterations)
        return self.ascend(rows, objective)


def make_rloo_algorithm(name: str = "my_rloo") -> Algorithm:
    """The registry entry: `--algo name` builds MyRLOOArgs and MyRLOOTrainer."""
    return Algorithm(name, "My RLOO", args=MyRLOOArgs, trainer=MyRLOOTrainer, compared_by_default=False)


def paired_difference_interval(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95
) -> tuple[float, float, float]:
    """(d̄, low, high): d_i = a_i − b_i seed by seed, d̄ ± t_{(1+c)/2, n−1} · s_d / √n (s_d with n − 1).
    One seed has no spread: (d, −inf, inf)."""
    from scipy.stats import t  # Student's t quantile (scipy comes with the dev extras)

    d = [x - y for x, y in zip(a, b, strict=True)]  # paired: the same seed on both sides
    n, mean = len(d), statistics.fmean(d)
    if n < 2:
        return mean, -math.inf, math.inf
    half = t.ppf((1 + confidence) / 2, n - 1) * statistics.stdev(d) / math.sqrt(n)  # stdev divides by n − 1
    return mean, mean - half, mean + half
