"""Solutions of exercises 03, written to be read: plain torch, one step per line, a loop where the
formula is a loop. The package's own versions do the same work for every shape and device
(`rlhf_scratch.core.advantages.compute_gae_advantages`, `rlhf_scratch.core.objectives.explained_variance`,
`interp.residual.component_logit_diff` on a whole cache); tests/integration/test_course_checks.py checks that
each solution passes its check and agrees with the package's on random inputs.

Read one after your own passes its check.
"""

import math

import torch
from jaxtyping import Bool, Float
from torch import Tensor


@torch.no_grad()  # advantages are targets: nothing flows back through them
def compute_gae_advantages(
    values: Float[Tensor, "batch seq_len"],
    rewards: Float[Tensor, " batch"],
    prefix_len: int,
    gamma: float,
    gae_lambda: float,
    mask: Bool[Tensor, "batch gen_len"] | None = None,
) -> Float[Tensor, "batch gen_len"]:
    """A_t = δ_t + γλ A_{t+1}, δ_t = r_t + γ V(s_{t+1}) − V(s_t); the reward at each row's last kept
    token, V after it 0, padding 0."""
    batch, seq_len = values.shape
    gen_len = seq_len - prefix_len
    if mask is None:
        mask = torch.ones(batch, gen_len, dtype=torch.bool)
    advantages = torch.zeros(batch, gen_len)
    for b in range(batch):
        last = int(mask[b].sum()) - 1  # the EOS (or the last token): the episode ends here
        running = 0.0  # A_{t+1}; 0 after the last step
        for t in range(last, -1, -1):
            v = values[b, prefix_len - 1 + t]  # V(s_t): step t's token is chosen in state prefix_len-1+t
            if t == last:
                delta = rewards[b] - v  # the reward arrives; there is no next state (V = 0)
            else:
                delta = gamma * values[b, prefix_len + t] - v  # no reward yet: r_t = 0
            running = delta + gamma * gae_lambda * running
            advantages[b, t] = running
    return advantages


def explained_variance(
    values: Float[Tensor, "*shape"],
    returns: Float[Tensor, "*shape"],
    mask: Bool[Tensor, "*shape"] | None = None,
) -> float:
    """1 − Var[R − V] / Var[R] over the kept positions (population variances); NaN when Var[R] = 0."""
    if mask is not None:
        values, returns = values[mask], returns[mask]
    errors = returns - values
    var_returns = ((returns - returns.mean()) ** 2).mean().item()
    var_errors = ((errors - errors.mean()) ** 2).mean().item()
    if var_returns == 0:
        return math.nan  # nothing to explain
    return 1.0 - var_errors / var_returns


def direct_logit_attribution(
    components: Float[Tensor, "component batch d_model"],
    scale: Float[Tensor, "batch 1"],
    ln_weight: Float[Tensor, " d_model"],
    direction: Float[Tensor, " d_model"],
) -> Float[Tensor, "component batch"]:
    """Each component's direct effect on the logit difference through ln_final, its scale frozen:
    ((x_c − mean x_c) / scale) · (ln_weight ⊙ direction)."""
    centred = components - components.mean(dim=-1, keepdim=True)  # LayerNorm's centring is linear: per part
    normalised = centred / scale  # the whole residual's scale, as the forward computed it
    return normalised @ (ln_weight * direction)  # w ⊙ (W_U[:, pos] − W_U[:, neg]): the direction it is read along
