"""Solutions of exercises 01 and 02 (PPO's objective term by term; RLOO, GRPO, DPO and the reward
model's loss), written to be read: plain torch, one step per line, each function whole on its own.

The package's own versions do the same work where the trainers need more: `core.objectives`
(`get_log_probs` gathers with eindex and never writes out a [batch, seq, d_vocab] log-softmax, the KL
and entropy share `kl_per_token` and `entropy_per_token`, the means go through `masked_mean`),
`core.advantages.compute_advantages`, `reward.functions.normalize_reward`, `algorithms.rloo`,
`algorithms.grpo`, `algorithms.online_dpo` (which returns a named `DPOLoss`) and `reward.model`.
tests/integration/test_course_solutions.py checks that these pass the same checks as the package's and
give the same numbers on random inputs.

Read one after your own passes its check.
"""

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

# --- exercises 01: PPO's objective --------------------------------------------------------------


def get_log_probs(
    logits: Float[Tensor, "batch seq_len d_vocab"],
    tokens: Int[Tensor, "batch seq_len"],
    prefix_len: int | None = None,
    temperature: float = 1.0,
) -> Float[Tensor, "batch gen_len"]:
    """log softmax(logits[b, t] / temperature)[tokens[b, t+1]]: the log-prob of each token that came next.

    With prefix_len, only the generated tokens tokens[:, prefix_len:] (gen_len = seq_len - prefix_len);
    without it, every next token (gen_len = seq_len - 1).
    """
    if prefix_len is None:
        prefix_len = 1  # every token but the first was predicted by the position before it
    predicting = logits[:, prefix_len - 1 : -1].float()  # position t predicts token t+1; the last predicts nothing
    log_probs = (predicting / temperature).log_softmax(dim=-1)  # subtracts the max first: no log 0 for large logits
    next_tokens = tokens[:, prefix_len:]
    return log_probs.gather(-1, next_tokens[..., None]).squeeze(-1)  # one entry per position: the token chosen


@torch.no_grad()  # advantages are targets: nothing flows back through them
def compute_advantages(
    values: Float[Tensor, "batch seq_len"],
    rewards: Float[Tensor, " batch"],
    prefix_len: int,
    mask: Bool[Tensor, "batch gen_len"] | None = None,
) -> Float[Tensor, "batch gen_len"]:
    """A_t = V(s_{t+1}) - V(s_t) for each generated step, the reward in place of V after the last one.

    With mask, the last step is each row's last kept token and masked positions get 0.
    """
    v = values[:, prefix_len - 1 : -1]  # V(s_t): step t's token is chosen in state prefix_len-1+t
    q = values[:, prefix_len:].clone()  # Q_t = V(s_{t+1}), the state the token leads to
    if mask is None:
        mask = torch.ones_like(v, dtype=torch.bool)
    for b in range(values.shape[0]):
        last = int(mask[b].sum()) - 1  # the EOS (or the last token): the episode ends here
        if last >= 0:
            q[b, last] = rewards[b]  # the reward arrives; there is no next state
    return torch.where(mask, q - v, 0.0)  # padding is not an action: advantage 0


def normalize_reward(reward: Float[Tensor, " batch"], eps: float = 1e-5) -> Float[Tensor, " batch"]:
    """(r - mean(r)) / (std(r) + eps), std unbiased; zeros for fewer than two rewards."""
    if reward.numel() < 2:
        return torch.zeros_like(reward)  # one reward has no spread (its unbiased std is 0/0)
    return (reward - reward.mean()) / (reward.std() + eps)  # std(): Bessel's n - 1; eps outside the root


def calc_clipped_sur_obj(
    logprobs: Float[Tensor, "minibatch gen_len"],
    mb_logprobs: Float[Tensor, "minibatch gen_len"],
    mb_advantages: Float[Tensor, "minibatch gen_len"],
    clip_coef: float,
    eps: float = 1e-8,
    mask: Bool[Tensor, "minibatch gen_len"] | None = None,
) -> Float[Tensor, ""]:
    """mean over kept tokens of min(r A_hat, clip(r, 1 - clip_coef, 1 + clip_coef) A_hat), to maximise.

    r = exp(logprobs - mb_logprobs); A_hat = advantages whitened over the kept tokens (std n - 1).
    """
    if mask is None:
        mask = torch.ones_like(logprobs, dtype=torch.bool)
    kept = mb_advantages[mask]  # padding's advantages must not move the mean and std
    std = kept.std() if kept.numel() > 1 else torch.zeros(())  # one kept token has no spread: A_hat = 0
    advantages = (mb_advantages - kept.mean()) / (std + eps)
    log_ratio = torch.where(mask, logprobs - mb_logprobs, 0.0)  # r = 1 on padding, even if exp would overflow
    ratio = log_ratio.exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - clip_coef, 1 + clip_coef) * advantages
    return torch.minimum(unclipped, clipped)[mask].mean()  # the pessimistic one, over the kept tokens


def calc_kl_penalty(
    logits: Float[Tensor, "batch gen_len d_vocab"],
    ref_logits: Float[Tensor, "batch gen_len d_vocab"],
    beta: float,
    mask: Bool[Tensor, "batch gen_len"] | None = None,
    from_logprobs: bool = False,
) -> Float[Tensor, ""]:
    """beta * mean over kept positions of KL(pi || pi_ref) = sum_v pi(v) (log pi(v) - log pi_ref(v))."""
    log_pi = logits if from_logprobs else logits.log_softmax(dim=-1)
    log_ref = ref_logits if from_logprobs else ref_logits.log_softmax(dim=-1)
    kl = (log_pi.exp() * (log_pi - log_ref)).sum(dim=-1)  # [batch, gen_len]: weighted by pi, not pi_ref
    if mask is not None:
        kl = kl[mask]  # after EOS the policy chose nothing
    return beta * kl.mean()


def calc_entropy_bonus(
    logits: Float[Tensor, "batch gen_len d_vocab"],
    ent_coef: float,
    mask: Bool[Tensor, "batch gen_len"] | None = None,
    from_logprobs: bool = False,
) -> Float[Tensor, ""]:
    """ent_coef * mean over kept positions of the entropy -sum_v pi(v) log pi(v)."""
    log_pi = logits if from_logprobs else logits.log_softmax(dim=-1)
    entropy = -(log_pi.exp() * log_pi).sum(dim=-1)  # [batch, gen_len], nats
    if mask is not None:
        entropy = entropy[mask]  # no bonus for spreading mass over choices never made
    return ent_coef * entropy.mean()


def calc_value_fn_loss(
    values: Float[Tensor, "minibatch gen_len"],
    mb_returns: Float[Tensor, "minibatch gen_len"],
    vf_coef: float,
    mask: Bool[Tensor, "minibatch gen_len"] | None = None,
) -> Float[Tensor, ""]:
    """1/2 * vf_coef * mean over kept positions of (values - mb_returns)^2."""
    squared_errors = (values - mb_returns) ** 2
    if mask is not None:
        squared_errors = squared_errors[mask]  # a state after EOS has no return
    return 0.5 * vf_coef * squared_errors.mean()


# --- exercises 02: beyond PPO -----------------------------------------------------------------------


def compute_rloo_advantages(rewards: Float[Tensor, " batch"], num_generations: int) -> Float[Tensor, " batch"]:
    """r_i minus the mean reward of the other G - 1 completions of its prompt (the G are consecutive)."""
    G = num_generations
    grouped = rewards.view(-1, G)  # [prompts, G]: a prompt's G completions are one row
    others = (grouped.sum(dim=1, keepdim=True) - grouped) / (G - 1)  # the mean of the OTHER G - 1
    return (grouped - others).flatten()


def compute_grpo_advantages(
    rewards: Float[Tensor, " batch"], num_generations: int, scale_rewards: str = "group"
) -> Float[Tensor, " batch"]:
    """(r_i - group mean) / (std + 1e-4), std of the group ("group") or the batch ("batch"); "none": no division."""
    grouped = rewards.view(-1, num_generations)  # [prompts, G]
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # r_i is part of its own baseline
    if scale_rewards == "none":  # Dr. GRPO: no per-prompt weighting by difficulty
        return centred.flatten()
    if scale_rewards == "group":
        std = grouped.std(dim=1, keepdim=True)  # each prompt's own spread (n - 1)
    elif scale_rewards == "batch":
        std = rewards.std()  # one spread for the whole batch
    else:
        raise ValueError(f"scale_rewards must be group, batch or none; got {scale_rewards!r}")
    return (centred / (std + 1e-4)).flatten()  # a group of equal rewards: 0 / 1e-4 = 0


def calc_dpo_loss(
    policy_chosen_logps: Float[Tensor, " pairs"],
    policy_rejected_logps: Float[Tensor, " pairs"],
    ref_chosen_logps: Float[Tensor, " pairs"],
    ref_rejected_logps: Float[Tensor, " pairs"],
    beta: float,
    loss_type: str = "sigmoid",
    weights: Float[Tensor, " pairs"] | None = None,
) -> tuple[Float[Tensor, ""], Float[Tensor, " pairs"], Float[Tensor, " pairs"]]:
    """(loss, chosen_rewards, rejected_rewards): the mean DPO (or IPO) loss and the implicit rewards."""
    chosen_log_ratio = policy_chosen_logps - ref_chosen_logps  # log pi/pi_ref of the chosen completion
    rejected_log_ratio = policy_rejected_logps - ref_rejected_logps
    h = chosen_log_ratio - rejected_log_ratio  # how much more the policy moved toward the chosen one
    if loss_type == "sigmoid":
        losses = -F.logsigmoid(beta * h)  # beta inside the sigmoid; logsigmoid stays finite for large |beta h|
    elif loss_type == "ipo":
        losses = (h - 1 / (2 * beta)) ** 2  # IPO: a target margin, not "as large as possible"
    else:
        raise ValueError(f"loss_type must be sigmoid or ipo; got {loss_type!r}")
    if weights is None:
        loss = losses.mean()
    else:
        loss = (weights * losses).sum() / weights.sum().clamp(min=1)  # a pair of weight 0 adds nothing
    chosen_rewards = beta * chosen_log_ratio.detach()  # implicit rewards: reported, not trained on
    rejected_rewards = beta * rejected_log_ratio.detach()
    return loss, chosen_rewards, rejected_rewards


def calc_reward_model_loss(
    chosen_rewards: Float[Tensor, " batch"],
    rejected_rewards: Float[Tensor, " batch"],
    margin: Float[Tensor, " batch"] | float | None = None,
    center_rewards_coefficient: float | None = None,
) -> Float[Tensor, ""]:
    """mean -log sigmoid(r_c - r_r - margin) + c * mean((r_c + r_r)^2)."""
    diff = chosen_rewards - rejected_rewards  # Bradley-Terry sees only the difference
    if margin is not None:
        diff = diff - margin  # the chosen side must win by at least the margin
    loss = -F.logsigmoid(diff).mean()  # -log sigma(z) = softplus(-z): stable for any |z|
    if center_rewards_coefficient is not None:
        loss = loss + center_rewards_coefficient * ((chosen_rewards + rejected_rewards) ** 2).mean()
    return loss
