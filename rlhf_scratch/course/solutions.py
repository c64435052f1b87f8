"""Solutions of exercises 03 and 04, written to be read: plain torch, one step per line, a loop where
the formula is a loop. The package's own versions do the same work for every shape and device
(`rlhf_scratch.core.advantages.compute_gae_advantages`, `rlhf_scratch.core.objectives.explained_variance`,
`interp.residual.component_logit_diff` on a whole cache, `rollout.generation.sample_next_token` and
`generate`, `interp.sampling.left_padded`, `core.memory.minibatch_rows`, `reward.model.RewardModel` and
`engine.reward_model`'s step); tests/integration/test_course_checks.py and test_course_sampling.py check
that each solution passes its check and agrees with the package's. Exercises 05's (interp) are in
`solutions_interp.py`.

Read one after your own passes its check.
"""

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn


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


# --- exercises 04: sampling, the replay memory, the reward model ------------------------------------


def next_token_probs(
    logits: Float[Tensor, "batch d_vocab"], temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> Float[Tensor, "batch d_vocab"]:
    """The distribution the next token is drawn from: temperature, then top-k, then top-p (transformers'
    order), renormalised; 0 for every token left out."""
    logits = logits / temperature  # T < 1 sharpens, T > 1 flattens
    if 0 < top_k < logits.shape[-1]:
        kth_largest = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))  # -inf: exp() gives exactly 0
    probs = logits.softmax(dim=-1)
    if top_p < 1.0:
        keep = torch.zeros_like(probs, dtype=torch.bool)
        for b in range(probs.shape[0]):
            mass_above = 0.0  # the mass of the tokens more likely than this one
            for v in probs[b].argsort(descending=True).tolist():
                if mass_above >= top_p:
                    break  # the nucleus already holds top_p: this token and all below it are out
                keep[b, v] = True
                mass_above += probs[b, v].item()
        probs = torch.where(keep, probs, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def completion_mask(completion_ids: Int[Tensor, "batch gen_len"], eos_id: int) -> Bool[Tensor, "batch gen_len"]:
    """True up to and including each row's first EOS; a row without EOS keeps every token."""
    batch, gen_len = completion_ids.shape
    mask = torch.zeros(batch, gen_len, dtype=torch.bool)
    for b in range(batch):
        for t in range(gen_len):
            mask[b, t] = True
            if completion_ids[b, t] == eos_id:
                break  # the EOS is the last action; what follows is padding
    return mask


def left_pad(prompts: list[Int[Tensor, " _"]], pad_id: int) -> tuple[Int[Tensor, "batch width"], Bool[Tensor, "batch width"]]:
    """Every prompt right-aligned (so each ends at the last column, where the next token is drawn),
    pad_id before it; the mask says which columns are real, whatever their id."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.bool)
    for b, prompt in enumerate(prompts):
        ids[b, width - len(prompt):] = prompt
        mask[b, width - len(prompt):] = True  # from the mask, never from ids != pad_id: BOS may be the pad id
    return ids, mask


def position_ids(attention_mask: Bool[Tensor, "batch seq"]) -> Int[Tensor, "batch seq"]:
    """Each real token's position counted from its row's first real token; 0 on the padding."""
    positions = attention_mask.long().cumsum(dim=-1) - 1  # the first real token is position 0
    return positions.clamp(min=0)  # the padding before it: any valid index (it is never attended)


def minibatch_rows(
    batch: int, num_minibatches: int, passes: int = 1, generator: torch.Generator | None = None
) -> Iterator[Int[Tensor, " minibatch"]]:
    """`passes` shuffles of the rows, each cut into `num_minibatches` equal minibatches: every row once
    per pass. One permutation per pass, drawn when the pass begins."""
    size = batch // num_minibatches
    for _ in range(passes):
        order = torch.randperm(batch, generator=generator)
        for i in range(num_minibatches):
            yield order[i * size : (i + 1) * size]


def reward_at_last_token(
    hidden: Float[Tensor, "batch seq d_model"],
    attention_mask: Bool[Tensor, "batch seq"],
    weight: Float[Tensor, " d_model"],
    bias: Float[Tensor, ""],
) -> Float[Tensor, " batch"]:
    """r = w · ĥ[last kept token] + b for each right-padded row: the reward model's scalar head."""
    rewards = []
    for b in range(hidden.shape[0]):
        last = int(attention_mask[b].sum()) - 1  # right padding: the kept tokens are 0 .. last
        rewards.append(hidden[b, last] @ weight + bias)
    return torch.stack(rewards)


def reward_model_step(
    model: nn.Module,
    chosen: Tensor,
    rejected: Tensor,
    optimizer: torch.optim.Optimizer,
) -> float:
    """One Bradley–Terry step: score both sides, loss = mean −log σ(r_c − r_r), descend; the loss."""
    r_chosen, r_rejected = model(chosen), model(rejected)
    loss = -F.logsigmoid(r_chosen - r_rejected).mean()  # minimised: the chosen side should score higher
    optimizer.zero_grad()  # else this step adds the last step's gradient to its own
    loss.backward()
    optimizer.step()
    return loss.item()
