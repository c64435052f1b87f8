"""Advantage estimates for the generated tokens.

One episode = one sample. State s_t = the context up to and including token t; the action at
s_t is token t+1; values[:, t] = V(s_t). The generated actions are taken in the states
t = prefix_len-1 ... seq_len-2, so both estimators return one advantage per generated token
(gen_len = seq_len - prefix_len). The reward is sparse: one number per sample, received after
the last generated token; there is no state after that, so values[:, -1] is never used.

With a completion mask `mask: Bool[batch, gen_len]` (completions that end at EOS; aligned with
the advantages, True up to and including the first EOS), the episode ends at each sample's LAST
KEPT token: the reward arrives there, nothing after it is an action, and those positions get
advantage 0. A row that keeps nothing is allowed and gets all zeros (its reward is then never used).

A multi-turn episode (issue 58, rollout/episodes.py) has holes in its mask: the environment's tokens
(a tool's reply) sit between the model's turns, False in the mask. They are not actions — the model
did not choose them — so they get no advantage, and they are not steps of the MDP either: they belong
to the transition. The state after a model token t is the state in which the model next acts, the one
before its next kept token n(t) (the environment's tokens included in it), so

    next value of t  =  V(s_{n(t)})      n(t) = the next kept position after t (none after the last: 0)

and GAE's recursion runs over kept positions only, A_t = δ_t + γλ A_{n(t)}: no discount, no reward and
no value estimate for the tokens in between. With a prefix mask (one turn) n(t) = t + 1 and every
number is what it was, bit for bit (tested).
"""

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor


def check_groups(rewards: Float[Tensor, " batch"], num_generations: int, who: str) -> None:
    """The group methods' input rule (RLOO, GRPO): G ≥ 2 completions per prompt, consecutive in a
    batch that is a whole number of groups; else a ValueError naming `who`."""
    if num_generations < 2:
        raise ValueError(f"{who}: num_generations must be >= 2 (a group of one has no baseline); got {num_generations}")
    if rewards.shape[0] % num_generations != 0:
        raise ValueError(f"{who}: batch of {rewards.shape[0]} is not a multiple of num_generations {num_generations}")


@torch.no_grad()
def zero_std_groups(values: Float[Tensor, " batch"], num_generations: int) -> Bool[Tensor, " prompts"]:
    """TRL's is_std_zero: for each group of G consecutive values, whether they are all equal (their std is
    0 up to float dust, `isclose`). A group whose rewards are all equal has every advantage 0 under GRPO
    and RLOO: it teaches nothing. DAPO's dynamic sampling drops such groups (verl's filter_groups keeps
    a group whose metric std is > 0); `frac_reward_zero_std` is their share.

        values [1, 1, 0, 1,  0, 0, 0, 0,  1, 1, 1, 1],  G = 4   ->   [False, True, True]"""
    check_groups(values, num_generations, "zero_std_groups")
    group_std = values.view(-1, num_generations).std(dim=1)  # [prompts]
    return torch.isclose(group_std, torch.zeros_like(group_std))


@torch.no_grad()
def group_reward_stats(
    scores: Float[Tensor, " batch"], rewards: Float[Tensor, " batch"], num_generations: int
) -> dict[str, float]:
    """TRL's reward statistics of a group method, over the whole (gathered) batch:

        reward                 mean of the reward function's scores
        reward_std             their std (n − 1; 0 for one score)
        frac_reward_zero_std   fraction of prompts whose G `rewards` are all equal (isclose: float
                               dust is not a spread): their advantages are 0, they teach nothing

    `rewards` are what the advantages are built from (RLOO: after the KL shaping; GRPO: after any
    missing-EOS penalty)."""
    zero_std = zero_std_groups(rewards, num_generations)
    return {
        "reward": scores.mean().item(),
        "reward_std": scores.std().item() if len(scores) > 1 else 0.0,
        "frac_reward_zero_std": zero_std.float().mean().item(),
    }


LENGTH_BY_SIGN_METRICS = ("completions/mean_length_neg_adv", "completions/mean_length_pos_adv")
"""Logged by the group methods (GRPO, RLOO): the length lesson's probe (docs/grpo.md)."""


@torch.no_grad()
def mean_length_by_advantage_sign(
    lengths: Int[Tensor, " batch"], advantages: Float[Tensor, " batch"]
) -> dict[str, float]:
    """The mean length of the completions the update pushes down (A < 0) and up (A > 0); NaN
    where there are none. The length lesson's probe: under GRPO's loss_type "grpo" the first grows
    and the second shrinks, under "dr_grpo" and RLOO neither should (docs/grpo.md)."""
    lengths = lengths.float()
    neg, pos = advantages < 0, advantages > 0
    return {
        "completions/mean_length_neg_adv": lengths[neg].mean().item() if neg.any() else float("nan"),
        "completions/mean_length_pos_adv": lengths[pos].mean().item() if pos.any() else float("nan"),
    }


def _check_prefix_len(prefix_len: int, seq_len: int) -> None:
    if not 1 <= prefix_len < seq_len:
        raise ValueError(f"prefix_len must be in [1, seq_len) = [1, {seq_len}); got {prefix_len}")


def _check_mask(mask: Tensor, shape: tuple[int, int]) -> None:
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = kept token); got dtype {mask.dtype}")
    if tuple(mask.shape) != shape:
        raise ValueError(f"mask has shape {tuple(mask.shape)}, expected (batch, gen_len) = {shape}")


def last_kept(mask: Bool[Tensor, "batch gen_len"]) -> Bool[Tensor, "batch gen_len"]:
    """True at each sample's last kept token: where the episode ends and the reward arrives (the end
    of the model's last turn; an earlier turn's end is not the episode's)."""
    kept_from_here = mask.flip(1).cumsum(1).flip(1)  # kept tokens at or after t
    return mask & (kept_from_here == 1)


def next_kept_values(
    v: Float[Tensor, "batch gen_len"], mask: Bool[Tensor, "batch gen_len"]
) -> Float[Tensor, "batch gen_len"]:
    """At each position t, V(s_{n(t)}) = v[:, n(t)], n(t) the next kept position after t; 0 where
    there is none (after the last kept token). With a prefix mask, v[:, t + 1] before the last kept token.

        v [1., 2., 3., 4., 5.],  mask [T, F, F, T, T]   ->   [4., 4., 4., 5., 0.]"""
    gen_len = mask.shape[1]
    positions = torch.arange(gen_len, device=mask.device).expand_as(mask)
    kept_at = torch.where(mask, positions, torch.full_like(positions, gen_len))
    after = torch.cat([kept_at[:, 1:], torch.full_like(kept_at[:, :1], gen_len)], dim=1)
    nxt = after.flip(1).cummin(1).values.flip(1)  # the smallest kept position > t, or gen_len
    return torch.where(nxt < gen_len, v.gather(1, nxt.clamp(max=gen_len - 1)), torch.zeros_like(v))


@torch.no_grad()
def compute_advantages(
    values: Float[Tensor, "batch seq_len"],
    rewards: Float[Tensor, " batch"],
    prefix_len: int,
    mask: Bool[Tensor, "batch gen_len"] | None = None,
) -> Float[Tensor, "batch gen_len"]:
    """The blog's one-step estimate: how much better the state after the action looks.

        A_t = Q_t - V(s_t),   Q_t = V(s_{t+1}) for t < last,   Q_last = reward

    i.e. Q = cat(values[:, prefix_len:-1], rewards[:, None]), A = Q - values[:, prefix_len-1:-1].
    (This is GAE with gamma = 1, lambda = 0: low variance, biased by the value function.)
    With `mask`, `last` is each sample's last kept token and masked positions get 0 (a sample
    that keeps no token gets a row of zeros); across the environment's tokens of a multi-turn episode
    Q_t = V(s_{n(t)}), the state of the model's next token (`next_kept_values`, the module docstring).
    """
    _check_prefix_len(prefix_len, values.shape[1])
    v = values[:, prefix_len - 1 : -1]
    if mask is None:
        q = torch.cat([values[:, prefix_len:-1], rewards[:, None]], dim=1)
        return q - v
    _check_mask(mask, tuple(v.shape))
    q = torch.where(last_kept(mask), rewards[:, None], next_kept_values(v, mask))
    return torch.where(mask, q - v, torch.zeros_like(v))


@torch.no_grad()
def compute_gae_advantages(
    values: Float[Tensor, "batch seq_len"],
    rewards: Float[Tensor, " batch"],
    prefix_len: int,
    gamma: float,
    gae_lambda: float,
    mask: Bool[Tensor, "batch gen_len"] | None = None,
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

    With `mask`, the episode ends at each sample's last kept token (reward there, V after it 0)
    and nothing from masked positions flows back into kept ones (their deltas are 0); masked
    positions get 0, a sample keeping nothing all zeros. The environment's tokens inside a multi-turn
    episode are part of the transition (the module docstring): δ_t reads V(s_{n(t)}), and the
    recursion steps from one kept position to the next, A_t = δ_t + γλ A_{n(t)}.
    """
    _check_prefix_len(prefix_len, values.shape[1])
    v = values[:, prefix_len - 1 : -1]  # V(s_t) for the generated steps
    if mask is None:
        mask = torch.ones_like(v, dtype=torch.bool)
    _check_mask(mask, tuple(v.shape))
    end = last_kept(mask)
    next_v = next_kept_values(v, mask)  # V(s_{n(t)}); 0 after the last kept step
    step_rewards = torch.where(end, rewards[:, None], torch.zeros_like(v))
    deltas = torch.where(mask, step_rewards + gamma * next_v - v, torch.zeros_like(v))

    advantages = torch.empty_like(deltas)
    running = torch.zeros_like(rewards)
    for t in reversed(range(deltas.shape[1])):  # an environment's token passes A_{n(t)} on unchanged
        running = torch.where(mask[:, t], deltas[:, t] + gamma * gae_lambda * running, running)
        advantages[:, t] = torch.where(mask[:, t], running, torch.zeros_like(running))
    return advantages
