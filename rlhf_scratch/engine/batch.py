"""The batch a phase's roles pass along (verl's DataProto, in this package's terms), and the one
place a rollout is gathered across processes.

    rollout = trainer.compute_scores(trainer.compute_log_prob(trainer.generate_sequences(prompts)))
    batch   = gather_batch(rollout)          # this process's rows + every process's columns, once
    trainer.compute_advantages(batch)        # on the whole batch: batch.advantages, every process's rows
    metrics = trainer.update_actor(batch)    # ascends on this process's rows: batch.mine(batch.advantages)

In one process every gather is the identity: `everyone` holds the rollout's own tensors. In a
torchrun run each process samples its own share of the prompts; `everyone` is the global batch,
in rank order, so a statistic over it (reward normalisation, RLOO's and GRPO's advantages, every
logged mean) is what one process would compute on all the rows. Only the columns that have the
same shape on every process are gathered: one number per completion or per generated token (a
prompt's left padding differs between processes; PPO's values are gathered over the generated
span, `values[:, prefix_len - 1:]`, which is what its advantages read).
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxtyping import Bool, Float, Int
from torch import Tensor

from rlhf_scratch.engine import distributed as dist
from rlhf_scratch.rollout.phase import Rollout


@dataclass(kw_only=True)
class Gathered:
    """Every process's rows of a rollout's per-completion and per-token columns (same names as
    `Rollout`'s, so a function of those columns takes either)."""

    completion_mask: Bool[Tensor, "batch gen_len"]
    logprobs: Float[Tensor, "batch gen_len"]
    ref_logprobs: Float[Tensor, "batch gen_len"] | None
    kl: Float[Tensor, "batch gen_len"] | None
    entropy: Float[Tensor, "batch gen_len"]
    scores: Float[Tensor, " batch"]
    rewards: Float[Tensor, " batch"]
    is_terminated: Bool[Tensor, " batch"]
    lengths: Int[Tensor, " batch"]
    value_span: Float[Tensor, "batch span"] | None
    """V(s_t) from the last prompt position on (`values[:, prefix_len - 1:]`, gen_len + 1 wide):
    every value the advantages read, with prefix_len 1. None without extras."""
    verdicts: Int[Tensor, " batch"] | None
    """A judge's verdict on each row's pair, repeated on both rows (`Rollout.verdicts`)."""
    num_turns: Int[Tensor, " batch"] | None = None
    """An episode's record (`Rollout.num_turns` …, --env), for `episodes.episode_metrics`; None without an environment."""
    tool_calls: Int[Tensor, " batch"] | None = None
    tool_errors: Int[Tensor, " batch"] | None = None
    env_tokens: Int[Tensor, " batch"] | None = None

    def __len__(self) -> int:
        return self.completion_mask.shape[0]


@dataclass(kw_only=True)
class Batch:
    """One phase's data between the roles: this process's `rollout`, `everyone`'s columns, and
    what the driver's `compute_advantages` adds over the whole batch."""

    rollout: Rollout
    """This process's rows: what its learning phase ascends on."""
    everyone: Gathered
    """Every process's rows, in rank order (the rollout's own tensors in one process)."""
    world_size: int = 1
    """How many processes share the batch (each holds len(rollout) of its rows)."""
    rank: int = 0
    advantages: Tensor | None = None
    """Set by `compute_advantages`, over every process's rows (per completion, or per token for PPO)."""

    def mine(self, x: Tensor) -> Tensor:
        """This process's rows of a tensor over every process's rows (`distributed.local_rows`, without a call)."""
        n = x.shape[0] // self.world_size
        return x[self.rank * n : (self.rank + 1) * n]

    @property
    def local_advantages(self) -> Tensor:
        """`advantages` of this process's rows."""
        return self.mine(self.advantages)


def gather_batch(rollout: Rollout) -> Batch:
    """`rollout` with every process's columns beside it: the one gather of a phase (see the module docstring)."""
    return Batch(rollout=rollout, everyone=_columns(rollout, dist.all_gather), world_size=dist.world_size(),
                 rank=dist.rank())


def batch_of(rollout: Rollout, advantages: Tensor | None = None) -> Batch:
    """A batch of `rollout` alone, gathering nothing: for a caller whose rows are the whole batch it
    learns on (the controller's workers: their driver computed `advantages` over every row)."""
    return Batch(rollout=rollout, everyone=_columns(rollout, lambda x: x), advantages=advantages)


def _columns(rollout: Rollout, gather) -> Gathered:
    def column(x: Tensor | None) -> Tensor | None:
        return None if x is None else gather(x)

    values = None if rollout.values is None else rollout.values[:, rollout.prefix_len - 1 :]
    return Gathered(
        completion_mask=column(rollout.completion_mask), logprobs=column(rollout.logprobs),
        ref_logprobs=column(rollout.ref_logprobs), kl=column(rollout.kl), entropy=column(rollout.entropy),
        scores=column(rollout.scores), rewards=column(rollout.rewards), is_terminated=column(rollout.is_terminated),
        lengths=column(rollout.lengths), value_span=column(values), verdicts=column(rollout.verdicts),
        num_turns=column(rollout.num_turns), tool_calls=column(rollout.tool_calls), tool_errors=column(rollout.tool_errors),
        env_tokens=column(rollout.env_tokens),
    )
