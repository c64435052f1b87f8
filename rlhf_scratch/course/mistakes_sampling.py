"""Planted mistakes of exercises 04 (`checks_sampling.py`, `checks_reward.py`): sampling, the completion mask,
left padding, positions, the replay memory's minibatches, the reward model's head and step. Each function is
the solution with one classic mistake, as a learner writes it; the minibatch mistakes are the check's own
(`checks_sampling`: its worked answers are these functions' draws).
"""

import torch
import torch.nn.functional as F

from rlhf_scratch.course import checks_sampling
from rlhf_scratch.course import solutions as sol
from rlhf_scratch.course.planted import Planted

# --- next_token_probs -------------------------------------------------------------------------


def probs_multiplied_by_the_temperature(logits, temperature=1.0, top_k=0, top_p=1.0):
    return sol.next_token_probs(logits * temperature * temperature, temperature, top_k, top_p)


def probs_top_k_without_renormalising(logits, temperature=1.0, top_k=0, top_p=1.0):
    probs = (logits / temperature).softmax(-1)
    if top_k:
        kth = (logits / temperature).topk(top_k, dim=-1).values[:, -1:]
        probs = torch.where(logits / temperature >= kth, probs, 0.0)
    return probs

def probs_top_k_masked_to_zero(logits, temperature=1.0, top_k=0, top_p=1.0):
    z = logits / temperature
    if top_k:
        kth = z.topk(top_k, dim=-1).values[:, -1:]
        z = z.masked_fill(z < kth, 0.0)
    return z.softmax(-1)

def probs_nucleus_without_the_crossing_token(logits, temperature=1.0, top_k=0, top_p=1.0):
    probs = sol.next_token_probs(logits, temperature, top_k)  # right up to the nucleus
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(descending=True)
    keep_sorted = sorted_probs.cumsum(-1) <= top_p  # the token that crosses top_p is dropped
    keep_sorted[:, 0] = True
    keep = keep_sorted.scatter(-1, order, keep_sorted)
    probs = torch.where(keep, probs, 0.0)
    return probs / probs.sum(-1, keepdim=True)

def mask_without_the_eos(completion_ids, eos_id):
    return (completion_ids == eos_id).long().cumsum(-1) == 0

def mask_ids_not_eos(completion_ids, eos_id):
    return completion_ids != eos_id

def mask_by_argmax(completion_ids, eos_id):
    first = (completion_ids == eos_id).long().argmax(-1)
    return torch.arange(completion_ids.shape[1])[None, :] <= first[:, None]

def right_pad(prompts, pad_id):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id)
    mask = torch.zeros(len(prompts), width, dtype=torch.bool)
    for b, p in enumerate(prompts):
        ids[b, : len(p)], mask[b, : len(p)] = p, True
    return ids, mask

def left_pad_mask_from_ids(prompts, pad_id):
    ids, _ = sol.left_pad(prompts, pad_id)
    return ids, ids != pad_id

def left_pad_mask_inverted(prompts, pad_id):
    ids, mask = sol.left_pad(prompts, pad_id)
    return ids, ~mask

def positions_arange(attention_mask):
    return torch.arange(attention_mask.shape[1]).expand(attention_mask.shape)

def positions_from_one(attention_mask):
    return attention_mask.long().cumsum(-1).where(attention_mask, 0)

def positions_minus_one_on_pads(attention_mask):
    return attention_mask.long().cumsum(-1) - 1

def reward_at_the_last_position(hidden, attention_mask, weight, bias):
    return hidden[:, -1] @ weight + bias

def reward_mean_pooled(hidden, attention_mask, weight, bias):
    kept = attention_mask[..., None].float()
    return ((hidden * kept).sum(1) / kept.sum(1)) @ weight + bias

def reward_without_bias(hidden, attention_mask, weight, bias):
    return hidden[torch.arange(len(hidden)), attention_mask.sum(-1) - 1] @ weight

def step_without_zero_grad(model, chosen, rejected, optimizer):
    loss = -F.logsigmoid(model(chosen) - model(rejected)).mean()
    loss.backward()
    optimizer.step()
    return loss.item()

def step_ascending(model, chosen, rejected, optimizer):
    loss = -F.logsigmoid(model(chosen) - model(rejected)).mean()
    optimizer.zero_grad()
    (-loss).backward()
    optimizer.step()
    return loss.item()

def step_swapped(model, chosen, rejected, optimizer):
    return sol.reward_model_step(model, rejected, chosen, optimizer)


# --- more of each exercise's classic mistakes ------------------------------------------------------


def probs_temperature_ignored(logits, temperature=1.0, top_k=0, top_p=1.0):
    return sol.next_token_probs(logits, 1.0, top_k, top_p)


def probs_scaled_logits(logits, temperature=1.0, top_k=0, top_p=1.0):
    return logits / temperature  # the softmax forgotten


def probs_top_k_plus_one(logits, temperature=1.0, top_k=0, top_p=1.0):
    z = logits / temperature
    if top_k:
        kth = z.topk(top_k + 1, dim=-1).values[:, -1:]  # the k-th from 0: one too many
        z = z.masked_fill(z < kth, float("-inf"))
    return sol.next_token_probs(z, 1.0, 0, top_p)


def probs_smallest_k(logits, temperature=1.0, top_k=0, top_p=1.0):
    z = logits / temperature
    if top_k:
        kth = z.topk(top_k, dim=-1, largest=False).values[:, -1:]
        z = z.masked_fill(z > kth, float("-inf"))
    return sol.next_token_probs(z, 1.0, 0, top_p)


def probs_top_k_values_alone(logits, temperature=1.0, top_k=0, top_p=1.0):
    if top_k:
        return (logits / temperature).topk(top_k, dim=-1).values.softmax(-1)
    return sol.next_token_probs(logits, temperature, 0, top_p)


def probs_nucleus_from_the_bottom(logits, temperature=1.0, top_k=0, top_p=1.0):
    probs = sol.next_token_probs(logits, temperature, top_k)
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort()  # ascending: the nucleus of the LEAST likely
    keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < top_p
    keep = keep_sorted.scatter(-1, order, keep_sorted)
    probs = torch.where(keep, probs, 0.0)
    return probs / probs.sum(-1, keepdim=True)


def probs_nucleus_not_renormalised(logits, temperature=1.0, top_k=0, top_p=1.0):
    probs = sol.next_token_probs(logits, temperature, top_k)
    if top_p >= 1.0:
        return probs
    return torch.where(sol.next_token_probs(logits, temperature, top_k, top_p) > 0, probs, 0.0)


def probs_temperature_after_the_nucleus(logits, temperature=1.0, top_k=0, top_p=1.0):
    """top-k and top-p measured on the untempered distribution, the temperature applied to what is left."""
    kept = sol.next_token_probs(logits, 1.0, top_k, top_p) > 0
    return (logits / temperature).masked_fill(~kept, float("-inf")).softmax(-1)


def mask_at_the_last_eos(completion_ids, eos_id):
    is_eos = (completion_ids == eos_id).long()
    after_last = is_eos.flip(-1).cumsum(-1).flip(-1) == 0  # no EOS from here on
    last = torch.where(is_eos.any(-1, keepdim=True), ~after_last | (is_eos == 1), torch.ones_like(after_last))
    return last


def left_pad_with_a_long_mask(prompts, pad_id):
    ids, mask = sol.left_pad(prompts, pad_id)
    return ids, mask.long()


def mask_until_a_second_eos(completion_ids, eos_id):
    return (completion_ids == eos_id).long().cumsum(-1) <= 1


def probs_top_k_minus_one(logits, temperature=1.0, top_k=0, top_p=1.0):
    z = logits / temperature
    if top_k:
        kth = z.topk(top_k, dim=-1).values[:, -1:]
        z = z.masked_fill(z <= kth, float("-inf"))  # <= drops the k-th largest itself
    return sol.next_token_probs(z, 1.0, 0, top_p)


def reward_at_the_first_token(hidden, attention_mask, weight, bias):
    return hidden[:, 0] @ weight + bias


def step_summed(model, chosen, rejected, optimizer):
    loss = -F.logsigmoid(model(chosen) - model(rejected)).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item() / len(chosen)


def step_before_backward(model, chosen, rejected, optimizer):
    loss = -F.logsigmoid(model(chosen) - model(rejected)).mean()
    optimizer.step()
    optimizer.zero_grad()
    loss.backward()
    return loss.item()


def step_without_backward(model, chosen, rejected, optimizer):
    with torch.no_grad():
        loss = -F.logsigmoid(model(chosen) - model(rejected)).mean()
    return loss.item()


P = Planted
PLANTED: tuple[Planted, ...] = (
    P("next_token_probs", "times-temperature", probs_multiplied_by_the_temperature,
      "divide the logits by the temperature, don't multiply"),
    P("next_token_probs", "top-k-not-renormalised", probs_top_k_without_renormalising,
      "renormalise: zeroing the probabilities"),
    P("next_token_probs", "top-k-masked-to-zero", probs_top_k_masked_to_zero, "set them to -inf, which exp() makes 0"),
    P("next_token_probs", "crossing-token-out", probs_nucleus_without_the_crossing_token,
      "the token that CROSSES top_p is in"),
    P("next_token_probs", "temperature-ignored", probs_temperature_ignored, "the temperature was ignored"),
    P("next_token_probs", "scaled-logits", probs_scaled_logits, "those are the scaled logits"),
    P("next_token_probs", "k-plus-one", probs_top_k_plus_one, "you kept k + 1"),
    P("next_token_probs", "k-minus-one", probs_top_k_minus_one, "you kept k - 1"),
    P("next_token_probs", "smallest-k", probs_smallest_k, "the k SMALLEST logits"),
    P("next_token_probs", "k-values-alone", probs_top_k_values_alone, "return a probability for every token"),
    P("next_token_probs", "nucleus-from-the-bottom", probs_nucleus_from_the_bottom, "the nucleus is the MOST likely"),
    P("next_token_probs", "nucleus-not-renormalised", probs_nucleus_not_renormalised, "renormalise the nucleus"),
    P("next_token_probs", "temperature-after-top-p", probs_temperature_after_the_nucleus,
      "the nucleus was cut before the temperature"),
    P("completion_mask", "eos-left-out", mask_without_the_eos, "the EOS itself is kept"),
    P("completion_mask", "ids-not-eos", mask_ids_not_eos, "ids != eos is not the mask"),
    P("completion_mask", "argmax", mask_by_argmax, "a row with no EOS keeps every token"),
    P("completion_mask", "until-a-second-eos", mask_until_a_second_eos, "keeps what follows the first EOS"),
    P("completion_mask", "last-eos", mask_at_the_last_eos, "ends at its FIRST EOS, not its last"),
    P("left_pad", "right-padding", right_pad, "that is RIGHT padding"),
    P("left_pad", "mask-from-ids", left_pad_mask_from_ids, "the mask came from ids != pad_id"),
    P("left_pad", "mask-inverted", left_pad_mask_inverted, "the mask is upside down"),
    P("left_pad", "long-mask", left_pad_with_a_long_mask, "your mask is an int64 tensor of shape (2, 3): a mask is a bool"),
    P("position_ids", "arange", positions_arange, "positions ignored the padding"),
    P("position_ids", "from-one", positions_from_one, "off by one: the first real token is position 0"),
    P("position_ids", "minus-one-on-pads", positions_minus_one_on_pads, "the pads hold -1"),
    P("minibatch_rows", "one-permutation", checks_sampling._one_permutation_for_every_pass,
      "each pass draws a NEW permutation"),
    P("minibatch_rows", "permutation-per-minibatch", checks_sampling._a_permutation_per_minibatch,
      "a permutation per minibatch uses some rows twice"),
    P("minibatch_rows", "no-shuffle", checks_sampling._no_shuffle, "the rows were not shuffled"),
    P("minibatch_rows", "size-for-count", checks_sampling._minibatches_of_size_num_minibatches,
      "num_minibatches is how MANY minibatches"),
    P("reward_at_last_token", "last-position", reward_at_the_last_position, "you read the last POSITION"),
    P("reward_at_last_token", "mean-pooled", reward_mean_pooled, "that is the mean over the kept tokens"),
    P("reward_at_last_token", "bias-missing", reward_without_bias, "the head's bias b is missing"),
    P("reward_at_last_token", "first-token", reward_at_the_first_token, "you read the first token"),
    P("reward_model_step", "no-zero-grad", step_without_zero_grad, "zero the gradients before backward"),
    P("reward_model_step", "ascended", step_ascending, "the loss went UP"),
    P("reward_model_step", "swapped", step_swapped, "chosen and rejected are swapped"),
    P("reward_model_step", "sum", step_summed, "take the mean over pairs, not the sum"),
    P("reward_model_step", "step-before-backward", step_before_backward, "optimizer.step() ran before loss.backward()"),
    P("reward_model_step", "no-backward", step_without_backward, "the parameters did not move"),
)
"""Exercises 04's planted mistakes (`course.mistakes.Planted`)."""
