"""Advantage estimates for the generated tokens.

One episode = one sample. State s_t = the context up to and including token t; the action at
s_t is token t+1; values[:, t] = V(s_t). The generated actions are taken in the states
t = prefix_len-1 ... seq_len-2, so both estimators return one advantage per generated token
(gen_len = seq_len - prefix_len). The reward is sparse: one number per sample, received after
the last generated token; there is no state after that, so values[:, -1] is never used.
"""

import torch
from jaxtyping import Float
from torch import Tensor


def _check_prefix_len(prefix_len: int, seq_len: int) -> None:
    if not 1 <= prefix_len < seq_len:
        raise ValueError(f"prefix_len must be in [1, seq_len) = [1, {seq_len}); got {prefix_len}")


@torch.no_grad()
def compute_advantages(
    values: Float[Tensor, "batch seq_len"],
    rewards: Float[Tensor, "batch"],
    prefix_len: int,
) -> Float[Tensor, "batch gen_len"]:
    """The blog's one-step estimate: how much better the state after the action looks.

        A_t = Q_t - V(s_t),   Q_t = V(s_{t+1}) for t < last,   Q_last = reward

    i.e. Q = cat(values[:, prefix_len:-1], rewards[:, None]), A = Q - values[:, prefix_len-1:-1].
    (This is GAE with gamma = 1, lambda = 0: low variance, biased by the value function.)
    """
    _check_prefix_len(prefix_len, values.shape[1])
    q = torch.cat([values[:, prefix_len:-1], rewards[:, None]], dim=1)
    return q - values[:, prefix_len - 1 : -1]


@torch.no_grad()
def compute_gae_advantages(
    values: Float[Tensor, "batch seq_len"],
    rewards: Float[Tensor, "batch"],
    prefix_len: int,
    gamma: float,
    gae_lambda: float,
) -> Float[Tensor, "batch gen_len"]:
    """Generalised Advantage Estimation (Schulman et al. 2016) with the sparse terminal reward.

        r_t   = 0 for every generated step except the last, r_last = reward;  V(s_{last+1}) = 0
        delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)
        A_t   = sum_{k >= 0} (gamma * lambda)^k * delta_{t+k}       (computed as a reversed loop:
                A_t = delta_t + gamma * lambda * A_{t+1})

    lambda = 0 gives the one-step estimate (`compute_advantages` when gamma = 1); gamma = lambda
    = 1 gives the Monte-Carlo advantage A_t = reward - V(s_t).

    Why the blog found GAE "blows up" here: with a single terminal reward every delta_t except
    the last is a pure value-function error, and as lambda -> 1 each A_t sums all the later
    errors plus the whole high-variance reward, so the same noisy Monte-Carlo return is spread
    onto every token of the sample (no per-token credit assignment), while the untrained value
    head's errors accumulate over gen_len steps instead of cancelling.
    """
    _check_prefix_len(prefix_len, values.shape[1])
    v = values[:, prefix_len - 1 : -1]  # V(s_t) for the generated steps
    next_v = torch.cat([values[:, prefix_len:-1], torch.zeros_like(rewards)[:, None]], dim=1)
    step_rewards = torch.zeros_like(v)
    step_rewards[:, -1] = rewards
    deltas = step_rewards + gamma * next_v - v

    advantages = torch.empty_like(deltas)
    running = torch.zeros_like(rewards)
    for t in reversed(range(deltas.shape[1])):
        running = deltas[:, t] + gamma * gae_lambda * running
        advantages[:, t] = running
    return advantages
