"""The rollout batch, and how a learning phase cuts it into shuffled minibatches.

Everything here was computed during the rollout, under `torch.no_grad()`: the old policy's
log-probs and values, the advantages, and the reference model's logits. Only the generated
span of the reference logits is kept ([batch gen_len d_vocab] rather than ARENA's
[batch seq_len d_vocab]) since the KL penalty is only taken there.
"""

from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from rlhf_scratch.config import RLHFArgs


@dataclass
class ReplayMinibatch:
    """One minibatch of rollout data, as the learning phase consumes it."""

    sample_ids: Int[Tensor, "minibatch seq_len"]
    """Token ids of the whole sequences (prefix + generated)."""
    logprobs: Float[Tensor, "minibatch gen_len"]
    """log pi_old of each generated token, from the rollout."""
    advantages: Float[Tensor, "minibatch gen_len"]
    """Advantage of each generated token (un-normalised; the surrogate normalises)."""
    returns: Float[Tensor, "minibatch gen_len"]
    """Value targets: advantages + V_old of the state each generated token was chosen in."""
    ref_logits: Float[Tensor, "minibatch gen_len d_vocab"]
    """Reference model's logits over the generated span (for the KL penalty)."""


class ReplayMemory:
    """Holds one rollout batch and yields `batches_per_learning_phase` shuffles of it."""

    def __init__(
        self,
        args: RLHFArgs,
        sample_ids: Int[Tensor, "batch seq_len"],
        logprobs: Float[Tensor, "batch gen_len"],
        advantages: Float[Tensor, "batch gen_len"],
        values: Float[Tensor, "batch seq_len"],
        ref_logits: Float[Tensor, "batch gen_len d_vocab"],
    ) -> None:
        batch, gen_len = args.batch_size, args.gen_len
        seq_len = sample_ids.shape[1]
        expected = {
            "sample_ids": (sample_ids, (batch, seq_len)),
            "logprobs": (logprobs, (batch, gen_len)),
            "advantages": (advantages, (batch, gen_len)),
            "values": (values, (batch, seq_len)),
            "ref_logits": (ref_logits, (batch, gen_len, ref_logits.shape[-1])),
        }
        for name, (tensor, shape) in expected.items():
            if tuple(tensor.shape) != shape:
                raise ValueError(
                    f"ReplayMemory: {name} has shape {tuple(tensor.shape)}, expected {shape} "
                    f"(batch_size={batch}, gen_len={gen_len}, seq_len={seq_len} from sample_ids)"
                )
        if seq_len <= gen_len:
            raise ValueError(f"ReplayMemory: seq_len {seq_len} must exceed gen_len {gen_len} (need a prefix token)")

        self.args = args
        self.sample_ids = sample_ids.detach()
        self.logprobs = logprobs.detach()
        self.advantages = advantages.detach()
        self.values = values.detach()
        self.ref_logits = ref_logits.detach()

    def get_minibatches(self, generator: torch.Generator | None = None) -> list[ReplayMinibatch]:
        """`batches_per_learning_phase` random permutations of the batch, each cut into
        `num_minibatches` equal minibatches, so every sample appears exactly once per permutation.

            returns = advantages + values[:, -gen_len-1 : -1]

        (the values of the states the generated tokens were chosen in, i.e. Q-estimates).
        `generator` (a CPU torch.Generator) makes the shuffles reproducible.
        """
        args = self.args
        returns = self.advantages + self.values[:, -args.gen_len - 1 : -1]
        minibatch_size = args.batch_size // args.num_minibatches
        minibatches = []
        for _ in range(args.batches_per_learning_phase):
            perm = torch.randperm(args.batch_size, generator=generator).to(self.sample_ids.device)
            for idx in perm.reshape(args.num_minibatches, minibatch_size):
                minibatches.append(
                    ReplayMinibatch(
                        sample_ids=self.sample_ids[idx],
                        logprobs=self.logprobs[idx],
                        advantages=self.advantages[idx],
                        returns=returns[idx],
                        ref_logits=self.ref_logits[idx],
                    )
                )
        return minibatches
