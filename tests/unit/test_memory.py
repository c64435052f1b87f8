"""ReplayMemory: shuffled minibatches that cover the batch, and the returns."""

import pytest
import torch

from rlhf_scratch.core.memory import ReplayMemory

BATCH, GEN_LEN, SEQ_LEN = 6, 2, 5
NUM_MINIBATCHES, EPOCHS = 3, 2


def make_memory(ref_hidden=False):
    i = torch.arange(BATCH)
    # every tensor encodes its sample index i, so we can check rows stay aligned after shuffling
    sample_ids = i[:, None].repeat(1, SEQ_LEN)
    attention_mask = torch.arange(SEQ_LEN) >= (i[:, None] % 2)  # odd rows: one left pad
    completion_mask = torch.tensor([True, False]) | (i[:, None] % 3 == 0)  # rows 0, 3 keep both tokens
    logprobs = -i[:, None].float().repeat(1, GEN_LEN)
    advantages = torch.tensor([[1.0, -2.0]]) * (i[:, None] + 1)
    values = torch.arange(SEQ_LEN).float() + 10.0 * i[:, None]  # row i: [10i, 10i+1, ..., 10i+4]
    ref = i[:, None, None] * torch.ones(BATCH, GEN_LEN, 3) if ref_hidden else None  # row i holds i
    memory = ReplayMemory(sample_ids, attention_mask, completion_mask, logprobs, advantages, values,
                          NUM_MINIBATCHES, EPOCHS, ref_hidden=ref)
    return memory


def test_minibatch_count_and_shapes():
    memory = make_memory()
    minibatches = list(memory.get_minibatches(torch.Generator().manual_seed(0)))
    assert len(minibatches) == len(memory) == EPOCHS * NUM_MINIBATCHES
    size = BATCH // NUM_MINIBATCHES
    for mb in minibatches:
        assert mb.sample_ids.shape == mb.attention_mask.shape == (size, SEQ_LEN)
        assert mb.logprobs.shape == mb.advantages.shape == mb.returns.shape == mb.completion_mask.shape == (size, GEN_LEN)
        assert mb.ref_hidden is None, "nothing kept: the trainer runs the reference per minibatch"


def test_each_permutation_covers_every_sample_once_and_rows_stay_aligned():
    memory = make_memory(ref_hidden=True)
    minibatches = list(memory.get_minibatches(torch.Generator().manual_seed(0)))
    orders = []
    for epoch in range(EPOCHS):
        chunk = minibatches[epoch * NUM_MINIBATCHES : (epoch + 1) * NUM_MINIBATCHES]
        ids = torch.cat([mb.sample_ids[:, 0] for mb in chunk])
        assert sorted(ids.tolist()) == list(range(BATCH)), "each shuffle must contain every sample exactly once"
        orders.append(ids.tolist())
        for mb in chunk:
            i = mb.sample_ids[:, 0]
            assert torch.equal(mb.logprobs[:, 0], -i.float()), "logprobs rows are shuffled differently from sample_ids"
            assert torch.equal(mb.attention_mask[:, 0], i % 2 == 0), "attention_mask rows are shuffled differently"
            assert torch.equal(mb.completion_mask[:, 1], i % 3 == 0), "completion_mask rows are shuffled differently"
            assert torch.equal(mb.advantages[:, 0], i.float() + 1), "advantages rows are shuffled differently from sample_ids"
            assert torch.equal(mb.ref_hidden[:, 1, 2], i.float()), "ref_hidden rows are shuffled differently"
    assert orders[0] != orders[1], "each learning epoch should use a fresh permutation"


def test_returns_by_hand():
    memory = make_memory()
    mb = next(memory.get_minibatches(torch.Generator().manual_seed(0)))
    for row, i in enumerate(mb.sample_ids[:, 0].tolist()):
        # generated tokens 3, 4 are chosen in states s_2, s_3: values[-gen_len-1 : -1] = [10i+2, 10i+3]
        # advantages row i: [1 * (i+1), -2 * (i+1)]
        expected = [(i + 1) + (10 * i + 2), -2 * (i + 1) + (10 * i + 3)]
        assert mb.returns[row].tolist() == expected, (
            f"returns = advantages + values[:, -gen_len-1 : -1] (the states the actions were taken in); "
            f"got {mb.returns[row].tolist()}, expected {expected}"
        )


def test_generator_makes_shuffles_reproducible():
    memory = make_memory()
    a = memory.get_minibatches(torch.Generator().manual_seed(3))
    b = memory.get_minibatches(torch.Generator().manual_seed(3))
    assert all(torch.equal(x.sample_ids, y.sample_ids) for x, y in zip(a, b))


def test_shape_mismatch_is_one_clear_line():
    good = make_memory()
    # under the test suite's runtime shape checking, jaxtyping catches it first (a TypeError);
    # a user without it gets ReplayMemory's own one-line ValueError
    with pytest.raises((ValueError, TypeError)) as err:
        ReplayMemory(good.sample_ids, good.attention_mask, good.completion_mask, good.logprobs,
                     torch.zeros(BATCH, GEN_LEN + 1), good.values, NUM_MINIBATCHES, EPOCHS)
    if isinstance(err.value, ValueError) and not isinstance(err.value, TypeError):
        assert str(err.value).startswith("ReplayMemory: advantages has shape (6, 3), expected (6, 2)")
        assert "\n" not in str(err.value)
    else:
        assert "advantages" in str(err.value)
