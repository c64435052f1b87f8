"""The exact quantities, as sums over every completion, and their gradients by autograd.

    J(θ)          = E_x Σ_y π(y|x) r(y)                          the objective every RL estimator follows
    J_k(θ), J_T(θ) = the same under top-k (π_k) / temperature-T (π_T) sampling
    KL_rev(θ)     = E_x Σ_y π(y|x) (log π(y|x) − log π_ref(y|x))     KL(π ‖ π_ref), what RLHF's penalty means
    KL_fwd(θ)     = E_x Σ_y π_ref(y|x) (log π_ref(y|x) − log π(y|x)) KL(π_ref ‖ π)
    E_len(θ)      = E_x Σ_y π(y|x) |y|                            the expected length

(E_x: the mean over the X prompts.) Each is a scalar of θ built from `env.log_probs` (the package's
`get_log_probs` and `sequence_log_probs`), so ∇ is `torch.autograd.grad`: exact to float32 precision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from rlhf_scratch.microscope.env import Environment, log_probs


def expected_reward(
    env: Environment, theta: Float[Tensor, "prefixes vocab"], rewards: Float[Tensor, " n"],
    temperature: float = 1.0, top_k: int = 0,
) -> Float[Tensor, ""]:
    """J = E_x Σ_y π_{T,k}(y|x) r(y) (T = 1, k = 0: the policy itself)."""
    return (log_probs(theta, env.completions, temperature, top_k).exp() * rewards).sum() / env.num_prompts


def reverse_kl(
    env: Environment, theta: Float[Tensor, "prefixes vocab"], theta_ref: Float[Tensor, "prefixes vocab"]
) -> Float[Tensor, ""]:
    """KL(π ‖ π_ref) = E_x Σ_y π(y|x) (log π(y|x) − log π_ref(y|x)) over whole completions."""
    logp = log_probs(theta, env.completions)
    return (logp.exp() * (logp - log_probs(theta_ref, env.completions))).sum() / env.num_prompts


def forward_kl(
    env: Environment, theta: Float[Tensor, "prefixes vocab"], theta_ref: Float[Tensor, "prefixes vocab"]
) -> Float[Tensor, ""]:
    """KL(π_ref ‖ π) = E_x Σ_y π_ref(y|x) (log π_ref(y|x) − log π(y|x))."""
    ref = log_probs(theta_ref, env.completions)
    return (ref.exp() * (ref - log_probs(theta, env.completions))).sum() / env.num_prompts


def expected_length(env: Environment, theta: Float[Tensor, "prefixes vocab"]) -> Float[Tensor, ""]:
    """E[|y|] = E_x Σ_y π(y|x) |y| (kept tokens, EOS included)."""
    return (log_probs(theta, env.completions).exp() * env.completions.lengths.float()).sum() / env.num_prompts


def gradient(f: Callable[[Tensor], Tensor], theta: Float[Tensor, "prefixes vocab"]) -> tuple[float, Float[Tensor, " params"]]:
    """(f(θ), ∇f(θ) flattened to [prefixes · vocab]) by autograd."""
    theta = theta.detach().requires_grad_()
    value = f(theta)
    (grad,) = torch.autograd.grad(value, theta)
    return value.item(), grad.flatten()


@dataclass
class Truth:
    """One exact quantity and its gradient at the policy measured."""

    name: str
    about: str
    value: float
    grad: Float[Tensor, " params"]


def truths(
    env: Environment, theta: Float[Tensor, "prefixes vocab"], theta_ref: Float[Tensor, "prefixes vocab"],
    rewards: Float[Tensor, " n"], temperature: float, top_k: int,
) -> dict[str, Truth]:
    """Every exact quantity an estimator is compared with, at θ."""
    table = {
        "J": ("J = E_x Σ_y π(y|x) r(y)", lambda t: expected_reward(env, t, rewards)),
        "J_topk": (f"J under top-{top_k} sampling, E_x Σ_y π_k(y|x) r(y)", lambda t: expected_reward(env, t, rewards, top_k=top_k)),
        "J_T": (f"J under temperature {temperature}, E_x Σ_y π_T(y|x) r(y)",
                lambda t: expected_reward(env, t, rewards, temperature=temperature)),
        "kl_reverse": ("KL(π ‖ π_ref)", lambda t: reverse_kl(env, t, theta_ref)),
        "kl_forward": ("KL(π_ref ‖ π)", lambda t: forward_kl(env, t, theta_ref)),
        "length": ("E[|y|]", lambda t: expected_length(env, t)),
    }
    return {name: Truth(name, about, *gradient(f, theta)) for name, (about, f) in table.items()}
