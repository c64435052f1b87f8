"""Exercises 04 (sampling, the replay memory, the reward model): each check fails on planted classic
bugs with their named hints, and the solutions written for reading (course/solutions.py) agree with
the package's own functions — the sampler, the generation loop, left padding, TransformerLens'
positions, the minibatches, the reward model's head.

The generic tests (each check passes its solution, no mistake gives the answer, the exercise notebook
is what the generator writes) are in test_course_checks.py; they read `rlhf_scratch.course.catalogue`.
"""

import pytest
import torch
import torch.nn.functional as F
from test_course_checks import fails_with

from rlhf_scratch.course import solutions


@pytest.fixture
def toy():
    """interp.toy's random LM with its word-level tokenizer (id 0 is BOS, EOS and pad, as GPT-2's)."""
    from interp.toy import toy_model

    return toy_model()


# --- next_token_probs -------------------------------------------------------------------------


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
    probs = solutions.next_token_probs(logits, temperature, top_k)  # right up to the nucleus
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(descending=True)
    keep_sorted = sorted_probs.cumsum(-1) <= top_p  # the token that crosses top_p is dropped
    keep_sorted[:, 0] = True
    keep = keep_sorted.scatter(-1, order, keep_sorted)
    probs = torch.where(keep, probs, 0.0)
    return probs / probs.sum(-1, keepdim=True)


def test_next_token_probs_recognises_a_multiplied_temperature():
    def multiplied(logits, temperature=1.0, top_k=0, top_p=1.0):
        return solutions.next_token_probs(logits * temperature * temperature, temperature, top_k, top_p)

    fails_with("next_token_probs", multiplied, "divide the logits by the temperature, don't multiply")


def test_next_token_probs_recognises_top_k_without_renormalising():
    fails_with("next_token_probs", probs_top_k_without_renormalising, "renormalise: zeroing the probabilities")


def test_next_token_probs_recognises_top_k_masked_to_zero_not_minus_inf():
    fails_with("next_token_probs", probs_top_k_masked_to_zero, "set them to -inf, which exp() makes 0")


def test_next_token_probs_recognises_the_crossing_token_left_out_of_the_nucleus():
    fails_with("next_token_probs", probs_nucleus_without_the_crossing_token, "the token that CROSSES top_p is in")


def test_next_token_probs_is_what_the_package_samples_from(one_thread):
    """20,000 draws of rollout.generation.sample_next_token per setting: each token's frequency within
    0.015 of the solution's probability (about 4.5 standard errors at p = 0.5), none drawn where it is 0."""
    from rlhf_scratch.rollout.generation import sample_next_token

    logits = torch.tensor([[1.0, -0.5, 2.0, 0.3, 0.0, 1.5]])
    for temperature, top_k, top_p in ((1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 3, 1.0), (1.0, 0, 0.6), (0.8, 4, 0.7)):
        draws = sample_next_token(logits.repeat(20_000, 1), temperature, top_k, top_p)
        freq = torch.bincount(draws, minlength=6).float() / len(draws)
        probs = solutions.next_token_probs(logits, temperature, top_k, top_p)[0]
        assert torch.allclose(freq, probs, atol=0.015), (temperature, top_k, top_p, freq, probs)
        assert (freq[probs == 0] == 0).all()


# --- completion_mask --------------------------------------------------------------------------


def mask_without_the_eos(completion_ids, eos_id):
    return (completion_ids == eos_id).long().cumsum(-1) == 0


def mask_ids_not_eos(completion_ids, eos_id):
    return completion_ids != eos_id


def mask_by_argmax(completion_ids, eos_id):
    first = (completion_ids == eos_id).long().argmax(-1)
    return torch.arange(completion_ids.shape[1])[None, :] <= first[:, None]


def test_completion_mask_recognises_the_eos_left_out():
    fails_with("completion_mask", mask_without_the_eos, "the EOS itself is kept")


def test_completion_mask_recognises_ids_not_eos():
    fails_with("completion_mask", mask_ids_not_eos, "ids != eos is not the mask")


def test_completion_mask_recognises_a_row_without_eos_cut_at_zero():
    fails_with("completion_mask", mask_by_argmax, "a row with no EOS keeps every token")


def test_completion_mask_is_the_generation_loops(toy, one_thread):
    """rollout.generation.generate with stop_at_eos on a toy model that often says EOS: the mask it
    returns is the solution's mask of its ids."""
    from rlhf_scratch.rollout.generation import generate

    with torch.no_grad():
        toy.unembed.b_U[0] += 4.0  # EOS (id 0) likely at every step
    ids = torch.tensor([[0, 5, 6, 7], [0, 8, 9, 10]]).repeat(4, 1)
    out, mask = generate(toy, ids, torch.ones_like(ids, dtype=torch.bool), gen_len=10, stop_at_eos=True,
                         kv_cache="transformer_lens")
    assert 0 < int(mask.sum()) < mask.numel(), "the case needs rows that end early"
    assert torch.equal(solutions.completion_mask(out, 0), mask)


# --- left_pad and position_ids ----------------------------------------------------------------


def right_pad(prompts, pad_id):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id)
    mask = torch.zeros(len(prompts), width, dtype=torch.bool)
    for b, p in enumerate(prompts):
        ids[b, : len(p)], mask[b, : len(p)] = p, True
    return ids, mask


def left_pad_mask_from_ids(prompts, pad_id):
    ids, _ = solutions.left_pad(prompts, pad_id)
    return ids, ids != pad_id


def left_pad_mask_inverted(prompts, pad_id):
    ids, mask = solutions.left_pad(prompts, pad_id)
    return ids, ~mask


def test_left_pad_recognises_right_padding():
    fails_with("left_pad", right_pad, "that is RIGHT padding")


def test_left_pad_recognises_the_mask_from_ids():
    fails_with("left_pad", left_pad_mask_from_ids, "the mask came from ids != pad_id")


def test_left_pad_recognises_the_mask_inverted():
    fails_with("left_pad", left_pad_mask_inverted, "the mask is upside down")


def test_left_pad_is_interp_sampling_left_padded(toy):
    from interp.sampling import left_padded

    prompts = ["This movie was", "I", "The acting was really great and"]
    ids, mask = left_padded(toy, prompts)
    ours = solutions.left_pad([toy.to_tokens(p)[0] for p in prompts], toy.tokenizer.pad_token_id)
    assert torch.equal(ours[0], ids) and torch.equal(ours[1], mask)


def positions_arange(attention_mask):
    return torch.arange(attention_mask.shape[1]).expand(attention_mask.shape)


def positions_from_one(attention_mask):
    return attention_mask.long().cumsum(-1).where(attention_mask, 0)


def positions_minus_one_on_pads(attention_mask):
    return attention_mask.long().cumsum(-1) - 1


def test_position_ids_recognises_arange():
    fails_with("position_ids", positions_arange, "positions ignored the padding")


def test_position_ids_recognises_positions_from_one():
    fails_with("position_ids", positions_from_one, "off by one: the first real token is position 0")


def test_position_ids_recognises_minus_one_on_the_pads():
    fails_with("position_ids", positions_minus_one_on_pads, "the pads hold -1")


def test_position_ids_are_transformer_lens():
    from transformer_lens.utilities import get_offset_position_ids

    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 0, 1]]).bool()
    assert torch.equal(solutions.position_ids(mask), get_offset_position_ids(0, mask.long()))


# --- minibatch_rows ---------------------------------------------------------------------------


def test_minibatch_rows_recognises_one_permutation_for_every_pass():
    from rlhf_scratch.course.checks_sampling import _one_permutation_for_every_pass as bug

    fails_with("minibatch_rows", bug, "each pass draws a NEW permutation")


def test_minibatch_rows_recognises_a_permutation_per_minibatch():
    def minibatch_rows(batch, num_minibatches, passes=1, generator=None):
        for _ in range(passes * num_minibatches):
            yield torch.randperm(batch, generator=generator)[: batch // num_minibatches]

    fails_with("minibatch_rows", minibatch_rows, "a permutation per minibatch uses some rows twice")


def test_minibatch_rows_recognises_num_minibatches_as_the_size():
    def minibatch_rows(batch, num_minibatches, passes=1, generator=None):
        for _ in range(passes):
            yield from torch.randperm(batch, generator=generator).split(num_minibatches)

    fails_with("minibatch_rows", minibatch_rows, "num_minibatches is how MANY minibatches")


def test_minibatch_rows_solution_is_the_packages_for_any_sizes():
    from rlhf_scratch.core.memory import minibatch_rows

    for batch, n, passes, seed in ((12, 4, 2, 0), (8, 8, 1, 3), (10, 1, 3, 7)):
        ours = list(solutions.minibatch_rows(batch, n, passes, torch.Generator().manual_seed(seed)))
        theirs = list(minibatch_rows(batch, n, passes, torch.Generator().manual_seed(seed)))
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


# --- reward_at_last_token and reward_model_step -----------------------------------------------


def reward_at_the_last_position(hidden, attention_mask, weight, bias):
    return hidden[:, -1] @ weight + bias


def reward_mean_pooled(hidden, attention_mask, weight, bias):
    kept = attention_mask[..., None].float()
    return ((hidden * kept).sum(1) / kept.sum(1)) @ weight + bias


def reward_without_bias(hidden, attention_mask, weight, bias):
    return hidden[torch.arange(len(hidden)), attention_mask.sum(-1) - 1] @ weight


def test_reward_head_recognises_the_last_position():
    fails_with("reward_at_last_token", reward_at_the_last_position, "you read the last POSITION")


def test_reward_head_recognises_mean_pooling():
    fails_with("reward_at_last_token", reward_mean_pooled, "that is the mean over the kept tokens")


def test_reward_head_recognises_the_bias_missing():
    fails_with("reward_at_last_token", reward_without_bias, "the head's bias b is missing")


def test_reward_head_solution_is_the_reward_models_forward(toy):
    """RewardModel on the toy LM: its score of right-padded texts is the solution's head on ĥ."""
    from rlhf_scratch.reward.model import RewardModel

    rm = RewardModel(toy)
    ids, mask = rm.tokenize(["This movie was really great", "bad", "the plot and the acting"])
    with torch.no_grad():
        _, cache = toy.run_with_cache(ids, names_filter="ln_final.hook_normalized")
        ours = solutions.reward_at_last_token(cache["ln_final.hook_normalized"], mask.bool(),
                                              rm.score.weight[0], rm.score.bias[0])
        assert torch.allclose(ours, rm(ids, mask), atol=1e-5)


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
    return solutions.reward_model_step(model, rejected, chosen, optimizer)


def test_reward_model_step_recognises_no_zero_grad():
    fails_with("reward_model_step", step_without_zero_grad, "zero the gradients before backward")


def test_reward_model_step_recognises_the_loss_ascended():
    fails_with("reward_model_step", step_ascending, "the loss went UP")


def test_reward_model_step_recognises_chosen_and_rejected_swapped():
    fails_with("reward_model_step", step_swapped, "chosen and rejected are swapped")


def test_reward_model_step_trains_a_reward_model_on_the_toy_lm(toy, one_thread):
    """The solution's step on the package's RewardModel (the toy LM and its head): twenty AdamW steps on
    one pair make the chosen text win, and the Bradley–Terry loss falls from about log 2."""
    from rlhf_scratch.reward.model import RewardModel

    rm = RewardModel(toy)
    (chosen, mask), (rejected, _) = rm.tokenize(["great great great"]), rm.tokenize(["bad bad bad"])
    assert chosen.shape == rejected.shape and bool(mask.all()), "equal lengths: the scorer needs no mask"

    class Scorer(torch.nn.Module):  # the step calls model(ids)
        def __init__(self):
            super().__init__()
            self.rm = rm

        def forward(self, ids):
            return self.rm(ids, torch.ones_like(ids))

    optimizer = torch.optim.AdamW(rm.parameters(), lr=1e-2)
    losses = [solutions.reward_model_step(Scorer(), chosen, rejected, optimizer) for _ in range(20)]
    assert losses[-1] < losses[0] / 4, losses
    with torch.no_grad():
        assert rm(chosen, mask) > rm(rejected, mask)
