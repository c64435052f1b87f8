"""The policy: a HookedTransformer with a value head reading its final residual stream."""

from __future__ import annotations

from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import HookedTransformer
from transformer_lens.hook_points import HookPoint

from rlhf_scratch.models.fast_forward import final_hidden


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


Policy = HookedTransformer | TransformerWithValueHead
"""What a trainer trains and a run folder saves: the LM itself, or PPO's LM with its value head."""


def language_model(policy: Policy) -> HookedTransformer:
    """The HookedTransformer inside a policy (PPO's trunk, or the policy itself): what samples,
    what is unembedded, what the interp tools read."""
    return policy.base if isinstance(policy, TransformerWithValueHead) else policy
