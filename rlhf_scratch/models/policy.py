"""The policy as every layer above the algorithms' folders sees it, and the models a run is built from.

A policy is what a trainer trains and a run folder saves: the language model itself (RLOO, Online
DPO, GRPO), or an algorithm's module around it (PPO's, built in `algorithms/ppo/policy.py`). The
engine, the rollout and the commands know the second kind only through `PolicyWithExtras`:

    base                                  the LM: what samples, what is unembedded, what interp reads
    forward(ids, mask, return_hidden=True) -> (ĥ, extra)   one forward to ĥ and the extras' output at each position
    extras()                              the modules beside the LM, by name: their own learning rate, exported on request
    extras_lr(args)                       that learning rate under the run's args
    state_dict() / load_state_dict()     what a run folder saves and loads (torch's)

and the algorithm builds it from the LM through its registry entry's `policy` hook (`build_policy`),
so a run folder is rebuilt as the trainer built it.

The run's LM may carry low-rank adapters (--lora-rank, `models/lora.py`); what the layers above
need of that is here too, so none of them names it: `trainable_lm` (the LM as the run trains it),
`reference_of` and `as_reference` (the reference, which for an adapted LM is the LM itself with its
adapters off), `saved_state` / `load_saved_state` (what a checkpoint and policy.pt hold) and
`merged_lm` (a plain LM again, for export).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import HookedTransformer

from rlhf_scratch.config import CommonArgs, registry
from rlhf_scratch.models import lora
from rlhf_scratch.models.loading import load_lm


@runtime_checkable
class PolicyWithExtras(Protocol):
    """A policy that is more than its LM: `base` and modules beside it reading its ĥ (see the module docstring)."""

    base: HookedTransformer

    def forward(
        self, input_ids: Int[Tensor, "batch seq"], attention_mask: Int[Tensor, "batch seq"] | None = None,
        return_hidden: bool = False,
    ) -> tuple[Float[Tensor, "batch seq d"], Float[Tensor, "batch seq"]]:
        """(ĥ, the extras' output) with `return_hidden`, else (logits, the extras' output)."""
        ...

    def extras(self) -> dict[str, nn.Module]: ...
    def extras_lr(self, args: CommonArgs) -> float: ...
    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...
    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True, assign: bool = False) -> Any: ...


Policy = HookedTransformer | PolicyWithExtras
"""What a trainer trains and a run folder saves: the LM itself, or an algorithm's module around it."""


def language_model(policy: Policy) -> HookedTransformer:
    """The HookedTransformer inside a policy (the policy itself, or its `base`): what samples, what is
    unembedded, what the interp tools read."""
    return policy if isinstance(policy, HookedTransformer) else policy.base


def build_policy(args: CommonArgs, lm: HookedTransformer) -> Policy:
    """What `args.algo` trains, built from `lm` by its registry entry's `policy` hook (the LM itself without one)."""
    hook = registry.get(args.algo).policy
    return lm if hook is None else registry.resolve(hook)(args, lm)


def trainable_lm(lm: HookedTransformer, args: CommonArgs, generator: torch.Generator | None = None) -> HookedTransformer:
    """`lm` as the run trains it: whole (full fine-tuning), or with --lora-rank r > 0 frozen, with
    rank-r adapters on --lora-targets (`lora.add_lora`, A drawn from `generator`, else torch's seeded RNG)."""
    if args.lora_rank == 0:
        return lm
    return lora.add_lora(lm, args.lora_rank, args.lora_alpha, args.lora_target_names(), generator=generator)


ADAPTER_FIELDS = ("lora_rank", "lora_alpha", "lora_targets")
"""The config fields `trainable_lm` reads (a check against the model depends on them)."""


def load_reference(model: str, device: str) -> HookedTransformer:
    """A frozen copy of `model`: the reference the KL is measured against (no gradients)."""
    reference = load_lm(model, device=device).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference


def reference_of(args: CommonArgs, lm: HookedTransformer, device: str) -> HookedTransformer:
    """The reference the KL is measured against. With adapters (--lora-rank) it is the policy's own LM
    `lm`: every reference forward runs it under `as_reference`, where it computes as the base model
    bit for bit — no second model in memory. Otherwise a frozen copy (`load_reference`), on which
    `as_reference` changes nothing."""
    return lm if args.lora_rank else load_reference(args.model, device)


def as_reference(model: nn.Module) -> AbstractContextManager[nn.Module]:
    """`model` computing as the reference, for the block: an adapted LM with its adapters off
    (`lora.adapters_off`), any other model as it is. Every reference forward runs inside it."""
    return lora.adapters_off(model)


def saved_state(policy: nn.Module) -> dict:
    """What a checkpoint and policy.pt hold of `policy`: every weight, or for an adapted LM only what
    trains (adapters and extras) with the base's hash (`lora.policy_state_dict`)."""
    return lora.policy_state_dict(policy)


def load_saved_state(policy: nn.Module, state: dict) -> None:
    """Put `saved_state`'s dict back into `policy` (an adapted one refuses a base whose hash differs)."""
    lora.load_policy_state_dict(policy, state)


def merged_lm(lm: HookedTransformer) -> HookedTransformer:
    """A plain LM computing as `lm` does: its adapters' ΔW baked into the weights (`lora.merge_lora`;
    `lm` itself when it has none)."""
    return lora.merge_lora(lm)
