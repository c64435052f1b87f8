"""ReplayMemory: shuffled minibatches that cover the batch, and the returns."""

import pytest
import torch

from rlhf_scratch.config import make_args
from rlhf_scratch.memory import ReplayMemory

BATCH, GEN_LEN, SEQ_LEN, D_VOCAB = 6, 2, 5, 3


def make_memory(**overrides):
    args = make_args(batch_size=BATCH, num_minibatches=3, batches_per_learning_phase=2, gen_len=GEN_LEN, **overrides)
    i = torch.arange(BATCH)
    # every tensor encodes its sample index i, so we can check rows stay aligned after shuffling
    sample_ids = i[:, None].repeat(1, SEQ_LEN)
    logprobs = -i[:, None].float().repeat(1, GEN_LEN)
    advantages = torch.tensor([[1.0, -2.0]]) * (i[:, None] + 1)
    values = torch.arange(SEQ_LEN).float() + 10.0 * i[:, None]  # row i: [10i, 10i+1, ..., 10i+4]
    ref_logits = i[:, None, None].float().repeat(1, GEN_LEN, D_VOCAB)
    return args, ReplayMemory(args, sample_ids, logprobs, advantages, values, ref_logits)


def test_minibatch_count_and_shapes():
    args, memory = make_memory()
    minibatches = memory.get_minibatches(torch.Generator().manual_seed(0))
    assert len(minibatches) == args.batches_per_learning_phase * args.num_minibatches
    size = BATCH // args.num_minibatches
    for mb in minibatches:
        assert mb.sample_ids.shape == (size, SEQ_LEN)
        assert mb.logprobs.shape == mb.advantages.shape == mb.returns.shape == (size, GEN_LEN)
        assert mb.ref_logits.shape == (size, GEN_LEN, D_VOCAB)


def test_each_permutation_covers_every_sample_once_and_rows_stay_aligned():
    args, memory = make_memory()
    minibatches = memory.get_minibatches(torch.Generator().manual_seed(0))
    orders = []
    for epoch in range(args.batches_per_learning_phase):
        chunk = minibatches[epoch * args.num_minibatches : (epoch + 1) * args.num_minibatches]
        ids = torch.cat([mb.sample_ids[:, 0] for mb in chunk])
        assert sorted(ids.tolist()) == list(range(BATCH)), "each shuffle must contain every sample exactly once"
        orders.append(ids.tolist())
        for mb in chunk:
            i = mb.sample_ids[:, 0]
            assert torch.equal(mb.logprobs[:, 0], -i.float()), "logprobs rows are shuffled differently from sample_ids"
            assert torch.equal(mb.ref_logits[:, 0, 0], i.float()), "ref_logits rows are shuffled differently from sample_ids"
            assert torch.equal(mb.advantages[:, 0], i.float() + 1), "advantages rows are shuffled differently from sample_ids"
    assert orders[0] != orders[1], "each learning epoch should use a fresh permutation"


def test_returns_by_hand():
    _, memory = make_memory()
    mb = memory.get_minibatches(torch.Generator().manual_seed(0))[0]
    for row, i in enumerate(mb.sample_ids[:, 0].tolist()):
        # generated tokens 3, 4 are chosen in states s_2, s_3: values[-gen_len-1 : -1] = [10i+2, 10i+3]
        # advantages row i: [1 * (i+1), -2 * (i+1)]
        expected = [(i + 1) + (10 * i + 2), -2 * (i + 1) + (10 * i + 3)]
        assert mb.returns[row].tolist() == expected, (
            f"returns = advantages + values[:, -gen_len-1 : -1] (the states the actions were taken in); "
            f"got {mb.returns[row].tolist()}, expected {expected}"
        )


def test_generator_makes_shuffles_reproducible():
    _, memory = make_memory()
    a = memory.get_minibatches(torch.Generator().manual_seed(3))
    b = memory.get_minibatches(torch.Generator().manual_seed(3))
    assert all(torch.equal(x.sample_ids, y.sample_ids) for x, y in zip(a, b))


def test_shape_mismatch_with_args_is_one_clear_line():
    args = make_args(batch_size=BATCH, num_minibatches=3, gen_len=GEN_LEN + 1)  # tensors have gen_len 2
    _, good = make_memory()
    with pytest.raises(ValueError, match=r"logprobs has shape \(6, 2\), expected \(6, 3\)") as err:
        ReplayMemory(args, good.sample_ids, good.logprobs, good.advantages, good.values, good.ref_logits)
    assert "\n" not in str(err.value)
