"""Solutions of exercises 07, the parts ARENA's RLHF chapter has you build, written to be read: the value
head as a module on the HookedTransformer, the generation loop (left padding, positions, an optional KV
cache), and the replay memory with its minibatches. Notebook 06 trains with them.

The package's own do the same work for every model and device (`algorithms.ppo.TransformerWithValueHead`,
`rollout.generation.generate` with its static cache, `core.memory.ReplayMemory`);
tests/integration/test_course_parts.py checks that each solution gives the package's numbers.

Read one after your own passes its check.
"""

from collections.abc import Callable, Iterator

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn
from transformer_lens import HookedTransformer
from transformer_lens.hook_points import HookPoint

from rlhf_scratch.course.parts_kit import ReplayMinibatch, forward_at, new_cache


class TransformerWithValueHead(nn.Module):
    """The policy and its value head V(s_t) in one forward: an MLP on `ln_final.hook_normalized`, the
    final residual after the LayerNorm (the vector the unembedding reads), run as a forward hook."""

    def __init__(self, base: HookedTransformer, detach_value_head: bool = True):
        super().__init__()
        self.base = base
        self.detach_value_head = detach_value_head
        d_model = base.cfg.d_model
        self.value_head = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, 1))
        self.values = None

    def store_values(self, resid: Float[Tensor, "batch seq d_model"], hook: HookPoint) -> None:
        if self.detach_value_head:  # the value loss trains the head only, not the trunk
            resid = resid.detach()
        self.values = self.value_head(resid).squeeze(-1)  # returns None: the residual goes on unchanged

    def forward(
        self, input_ids: Int[Tensor, "batch seq"], attention_mask: Int[Tensor, "batch seq"] | None = None
    ) -> tuple[Float[Tensor, "batch seq d_vocab"], Float[Tensor, "batch seq"]]:
        logits = self.base.run_with_hooks(input_ids, attention_mask=attention_mask,
                                          fwd_hooks=[("ln_final.hook_normalized", self.store_values)])
        values, self.values = self.values, None  # hand them over: nothing of this forward stays behind
        return logits, values


@torch.no_grad()
def generate(
    model: HookedTransformer,
    prompts: list[Int[Tensor, " _"]],
    gen_len: int,
    next_token: Callable[[Tensor], Tensor],
    pad_id: int,
    eos_id: int | None = None,
    use_cache: bool = False,
) -> tuple[Int[Tensor, "batch seq"], Bool[Tensor, "batch seq"], Bool[Tensor, "batch gen_len"]]:
    """(ids, attention_mask, completion_mask): the prompts left-padded, then gen_len tokens drawn by
    `next_token` from the logits after each row's last token; pad after a row's first eos_id."""
    batch, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((batch, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.bool)
    for b, prompt in enumerate(prompts):  # left padding: every prompt ends at the last column
        ids[b, width - len(prompt):] = prompt
        mask[b, width - len(prompt):] = True
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # each row counts from its first real token
    cache = new_cache(model, batch) if use_cache else None
    new_ids, new_positions, new_mask = ids, positions, mask  # what the next forward runs: the prompt first
    completion_mask = torch.zeros((batch, gen_len), dtype=torch.bool)
    finished = torch.zeros(batch, dtype=torch.bool)
    for t in range(gen_len):
        if use_cache:  # the cache holds every column before these
            logits = forward_at(model, new_ids, new_positions, new_mask, cache)[:, -1]
        else:  # no cache: the whole sequence again
            logits = forward_at(model, ids, positions, mask)[:, -1]
        token = torch.where(finished, pad_id, next_token(logits))
        completion_mask[:, t] = ~finished  # the EOS itself is kept: the policy chose it
        if eos_id is not None:
            finished |= token == eos_id
        next_position = positions[:, -1:] + 1  # one past each row's last token
        ids = torch.cat([ids, token[:, None]], dim=1)
        positions = torch.cat([positions, next_position], dim=1)
        mask = torch.cat([mask, torch.ones((batch, 1), dtype=torch.bool)], dim=1)
        new_ids, new_positions, new_mask = token[:, None], next_position, mask[:, -1:]
    return ids, mask, completion_mask


class ReplayMemory:
    """One rollout, and `batches_per_learning_phase` shuffles of it, each cut into `num_minibatches`."""

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
    ):
        gen_len = logprobs.shape[1]
        # detached: a tensor that keeps its graph keeps the whole rollout's activations in memory
        self.sample_ids = sample_ids.detach()
        self.attention_mask = attention_mask.detach()
        self.completion_mask = completion_mask.detach()
        self.logprobs = logprobs.detach()
        self.advantages = advantages.detach()
        # the returns R_t = A_t + V(s_t), s_t the state token t was chosen in: values[:, prefix_len-1 : -1]
        self.returns = self.advantages + values.detach()[:, -gen_len - 1:-1]
        self.num_minibatches = num_minibatches
        self.batches_per_learning_phase = batches_per_learning_phase

    def get_minibatches(self, generator: torch.Generator | None = None) -> Iterator[ReplayMinibatch]:
        batch = self.sample_ids.shape[0]
        for _ in range(self.batches_per_learning_phase):
            order = torch.randperm(batch, generator=generator)  # a new shuffle each epoch
            for rows in order.view(self.num_minibatches, -1):  # every row once per epoch
                yield ReplayMinibatch(
                    sample_ids=self.sample_ids[rows], attention_mask=self.attention_mask[rows],
                    completion_mask=self.completion_mask[rows], logprobs=self.logprobs[rows],
                    advantages=self.advantages[rows], returns=self.returns[rows])
