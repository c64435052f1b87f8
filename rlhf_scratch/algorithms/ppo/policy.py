"""PPO's policy: a HookedTransformer with a value head reading its final residual stream.

Only PPO knows it: everything outside this folder sees it through `models.policy.PolicyWithExtras`
(`base`, a forward to ĥ and V, `extras()` = {"value_head": ...}, `extras_lr(args)` = --head-lr), and
gets it from the LM through the registry's `policy` hook, `build_policy` below. `Policy` and
`language_model` (from `models.policy`) are importable from here too, as they were from this module's
old home.
"""

from __future__ import annotations

import copy

from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import HookedTransformer
from transformer_lens.hook_points import HookPoint

from rlhf_scratch.algorithms.ppo.args import RLHFArgs
from rlhf_scratch.models.fast_forward import final_hidden
from rlhf_scratch.models.policy import Policy, language_model


class TransformerWithValueHead(nn.Module):
    """A HookedTransformer plus a value head V(s_t), as in the blog.

    The value head is an MLP, Linear(d_model, 4·d_model) → ReLU → Linear(4·d_model, 1), run as a
    forward hook on `ln_final.hook_normalized` (the residual stream after the final LayerNorm,
    the same vector the unembedding reads), so one forward pass gives both the logits and
    V(s_t) for every position t.

    `detach_value_head=True` (the blog's final code) stops value-loss gradients at the head, so
    only the policy objective trains the trunk; `False` (ARENA) lets the value loss shape the
    trunk as well, which shares features but lets the value loss fight the policy.
    """

    base: HookedTransformer
    value_head: nn.Sequential

    def __init__(self, base: HookedTransformer, detach_value_head: bool = True):
        super().__init__()
        self.base = base
        self.detach_value_head = detach_value_head
        d_model = base.cfg.d_model
        self.value_head = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, 1)
        )
        self.value_head.to(base.cfg.device)
        self._values: Tensor | None = None

    def value_of(self, hidden: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch seq"]:
        """V(s_t) from the final normalised residual (detached first when `detach_value_head`)."""
        return self.value_head(hidden.detach() if self.detach_value_head else hidden).squeeze(-1)

    def _store_values(self, resid: Float[Tensor, "batch seq d_model"], hook: HookPoint) -> None:
        self._values = self.value_of(resid)

    def forward(
        self,
        input_ids: Int[Tensor, "batch seq"],
        attention_mask: Int[Tensor, "batch seq"] | None = None,
        return_hidden: bool = False,
    ) -> tuple[Float[Tensor, "batch seq d_vocab"] | Float[Tensor, "batch seq d_model"], Float[Tensor, "batch seq"]]:
        """Return (logits, values) for every position of `input_ids` (left padding hidden by
        `attention_mask` when given). `return_hidden=True` stops before the unembedding and
        returns (ĥ, values), ĥ = ln_final's output, the vector both the unembedding and the value
        head read (`token_terms` unembeds it a chunk of positions at a time), through the training
        forward with few kernels (`fast_forward.final_hidden`; the hooked forward for interp)."""
        if return_hidden:
            hidden = final_hidden(self.base, input_ids, attention_mask)  # the fast forward where it applies
            return hidden, self.value_of(hidden)
        logits = self.base.run_with_hooks(
            input_ids,
            return_type="logits",
            attention_mask=attention_mask,
            fwd_hooks=[("ln_final.hook_normalized", self._store_values)],
        )
        values, self._values = self._values, None
        assert values is not None
        return logits, values

    def extras(self) -> dict[str, nn.Module]:
        """The module beside the LM: the value head (`export --value-head` writes it as value_head.safetensors)."""
        return {"value_head": self.value_head}

    def extras_lr(self, args: RLHFArgs) -> float:
        """The value head's learning rate: --head-lr (fresh weights learn faster than the pretrained trunk)."""
        return args.head_lr



def build_policy(args: RLHFArgs, lm: HookedTransformer) -> TransformerWithValueHead | HookedTransformer:
    """The registry's `policy` hook: the LM with the blog's value head on its final normalised residual,
    trained and saved together (a run folder is rebuilt with it too); with `--critic separate` the LM
    alone (the critic is a model of its own, `build_critic`)."""
    if args.critic == "separate":
        return lm
    return TransformerWithValueHead(lm, detach_value_head=args.detach_value_head)


def build_critic(lm: HookedTransformer) -> TransformerWithValueHead:
    """verl's separate critic: a copy of the initial LM `lm` (taken before any step) with a fresh value
    head, its whole trunk trained by the value loss (nothing detached: no policy objective shares it)."""
    return TransformerWithValueHead(copy.deepcopy(lm), detach_value_head=False)


__all__ = ["Policy", "TransformerWithValueHead", "build_critic", "build_policy", "language_model"]
