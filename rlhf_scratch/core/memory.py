"""PPO's rollout storage, and how a learning phase cuts it into shuffled minibatches.

Everything here was computed during the rollout, under `torch.no_grad()`: the old policy's
log-probs and values and the advantages. The reference model's final normalised residual ĥ_ref
is stored only when the trainer asks (`ref_hidden`, PPO's `cache_ref_logprobs`): batch × gen_len ×
d_model floats in exchange for no reference forward per minibatch (the KL unembeds it a chunk at a
time). Without it the KL term runs a reference forward pass per minibatch.

Minibatches are drawn lazily from one permutation of row indices: only the minibatch being
trained on is materialised.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor


@dataclass
class ReplayMinibatch:
    """One minibatch of rollout data, as the learning phase consumes it."""

    sample_ids: Int[Tensor, "minibatch seq_len"]
    """Token ids of the whole sequences (left-padded prompt + completion)."""
    attention_mask: Bool[Tensor, "minibatch seq_len"]
    """False on the prompt's left padding."""
    completion_mask: Bool[Tensor, "minibatch gen_len"]
    """True for the completion tokens the policy chose (False after the first EOS)."""
    logprobs: Float[Tensor, "minibatch gen_len"]
    """log pi_old of each generated token, from the rollout."""
    advantages: Float[Tensor, "minibatch gen_len"]
    """Advantage of each generated token (un-normalised; the surrogate normalises)."""
    returns: Float[Tensor, "minibatch gen_len"]
    """Value targets: advantages + V_old of the state each generated token was chosen in."""
    ref_hidden: Float[Tensor, "minibatch gen_len d_model"] | None = None
    """The reference's ĥ_ref at each position that predicts a completion token, if stored."""
    ref_lse: Float[Tensor, "minibatch gen_len"] | None = None
    """logsumexp of the reference's logits (/ T) at those positions, stored with ref_hidden."""
    ref_logprobs: Float[Tensor, "minibatch gen_len"] | None = None
    """log π_ref of each generated token, if stored (PPO's sampled k2 KL)."""
    whole_attention_mask: Bool[Tensor, "batch seq_len"] | None = None
    """The batch's mask these rows were cut from (`generation.attention_mask_or_none(of=...)`: where it
    has no padding, neither has this minibatch, and the device is not asked again)."""


class ReplayMemory:
    """Holds one rollout batch and yields `batches_per_learning_phase` shuffles of it, each cut
    into `num_minibatches` minibatches."""

    def __init__(
        self,
        sample_ids: Int[Tensor, "batch seq_len"],
        attention_mask: Bool[Tensor, "batch seq_len"],
        completion_mask: Bool[Tensor, "batch gen_len"],
        logprobs: Float[Tensor, "batch gen_len"],
        advantages: Float[Tensor, "batch gen_len"],
        values: Float[Tensor, "batch seq_len"],
        num_minibatches: int,
        batches_per_learning_phase: int,
        ref_hidden: Float[Tensor, "batch gen_len d_model"] | None = None,
        ref_lse: Float[Tensor, "batch gen_len"] | None = None,
        ref_logprobs: Float[Tensor, "batch gen_len"] | None = None,
    ) -> None:
        batch, seq_len = sample_ids.shape
        gen_len = logprobs.shape[1]
        expected = {
            "attention_mask": (attention_mask, (batch, seq_len)),
            "completion_mask": (completion_mask, (batch, gen_len)),
            "advantages": (advantages, (batch, gen_len)),
            "values": (values, (batch, seq_len)),
        }
        for name, (tensor, shape) in expected.items():
            if tuple(tensor.shape) != shape:
                raise ValueError(
                    f"ReplayMemory: {name} has shape {tuple(tensor.shape)}, expected {shape} "
                    f"(batch={batch}, seq_len={seq_len} from sample_ids, gen_len={gen_len} from logprobs)"
                )
        if seq_len <= gen_len:
            raise ValueError(f"ReplayMemory: seq_len {seq_len} must exceed gen_len {gen_len} (need a prompt token)")
        if batch % num_minibatches != 0:
            raise ValueError(f"ReplayMemory: batch {batch} is not divisible by num_minibatches {num_minibatches}")

        self.num_minibatches = num_minibatches
        self.batches_per_learning_phase = batches_per_learning_phase
        self.sample_ids = sample_ids.detach()
        self.attention_mask = attention_mask.detach()
        self.whole_attention_mask = attention_mask  # the rollout's own tensor: asked once whether it is padded
        self.completion_mask = completion_mask.detach()
        self.logprobs = logprobs.detach()
        self.advantages = advantages.detach()
        self.values = values.detach()
        self.ref_hidden = None if ref_hidden is None else ref_hidden.detach()
        self.ref_lse = None if ref_lse is None else ref_lse.detach()
        self.ref_logprobs = None if ref_logprobs is None else ref_logprobs.detach()
        # returns = advantages + values[:, -gen_len-1 : -1]: the values of the states the
        # generated tokens were chosen in, i.e. Q-estimates.
        self.returns = self.advantages + self.values[:, -gen_len - 1 : -1]

    def __len__(self) -> int:
        """Minibatches per learning phase."""
        return self.batches_per_learning_phase * self.num_minibatches

    def get_minibatches(self, generator: torch.Generator | None = None) -> Iterator[ReplayMinibatch]:
        """`batches_per_learning_phase` random permutations of the batch, each cut into
        `num_minibatches` equal minibatches, so every sample appears exactly once per permutation.

        `generator` (a CPU torch.Generator) makes the shuffles reproducible; by default torch's
        global RNG. Each minibatch is gathered only when the loop reaches it.
        """
        rows = minibatch_rows(self.sample_ids.shape[0], self.num_minibatches, self.batches_per_learning_phase,
                              generator)
        for idx in rows:
            idx = idx.to(self.sample_ids.device)
            yield ReplayMinibatch(
                sample_ids=self.sample_ids[idx],
                attention_mask=self.attention_mask[idx],
                completion_mask=self.completion_mask[idx],
                logprobs=self.logprobs[idx],
                advantages=self.advantages[idx],
                returns=self.returns[idx],
                ref_hidden=None if self.ref_hidden is None else self.ref_hidden[idx],
                ref_lse=None if self.ref_lse is None else self.ref_lse[idx],
                ref_logprobs=None if self.ref_logprobs is None else self.ref_logprobs[idx],
                whole_attention_mask=self.whole_attention_mask,
            )


def minibatch_rows(
    batch: int, num_minibatches: int, passes: int = 1, generator: torch.Generator | None = None
) -> Iterator[Int[Tensor, " minibatch"]]:
    """Row indices of each minibatch, the one way every algorithm cuts a batch: `passes` random
    permutations of the batch, each cut into `num_minibatches` equal minibatches, so every row is
    used exactly once per pass. Each permutation is drawn when its pass begins, from `generator`
    (a CPU torch.Generator) or torch's global RNG."""
    if batch % num_minibatches:
        raise ValueError(f"minibatch_rows: {batch} rows do not split into {num_minibatches} equal minibatches")
    for _ in range(passes):
        yield from torch.randperm(batch, generator=generator).view(num_minibatches, -1)
