"""interp.answers on the shipped arithmetic model: the answer positions, slots and operand columns of a
problem worked out by hand, and the exact numbers checked against the model's own forward passes."""

import pytest
import torch

from interp import answers
from rlhf_scratch.models.loading import load_lm

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return load_lm("arithmetic").eval()


def test_a_problem_s_positions_slots_and_columns_by_hand(model):
    # BOS 4 7 + 8 5 = 1 3 2 EOS at positions 0..10; `=` (6) writes the hundreds, 1 (7) the tens, 3 (8) the units,
    # 2 (9) the EOS
    b = answers.answer_batch(model, ["47+85="], ["132"], [{"extra_info": {"op": "+", "carry": True}}])
    assert b.tokens[0].tolist() == [0, 5, 8, 11, 9, 6, 14, 2, 4, 3, 0]
    assert b.query[0].nonzero().flatten().tolist() == [6, 7, 8, 9]
    assert b.targets[0, 6:10].tolist() == [2, 4, 3, 0], "the next token: 1, 3, 2, EOS"
    assert b.slot[0, 6:10].tolist() == [2, 1, 0, 3] and b.slot_names == ["units", "tens", "hundreds", "EOS"]
    assert b.operand[0].nonzero().flatten().tolist() == [1, 2, 4, 5]
    assert b.column[0, 6].nonzero().flatten().tolist() == [], "the hundreds of 47+85 is the carry: no operand digit"
    assert b.column[0, 7].nonzero().flatten().tolist() == [1, 4], "the tens: 4 and 8"
    assert b.column[0, 8].nonzero().flatten().tolist() == [2, 5], "the units: 7 and 5"
    assert b.digit[0].nonzero().flatten().tolist() == [6, 7, 8] and int(b.last[0]) == 10
    assert {k: v.tolist() for k, v in b.groups.items()} == {"op=+": [True], "carry=yes": [True]}


def test_answers_of_different_lengths_share_slots_by_column(model):
    b = answers.answer_batch(model, ["47+85=", "85-47="], ["132", "38"])
    assert b.slot[1, 6:9].tolist() == [1, 0, 3], "38's 3 is the tens, 8 the units, then the EOS slot of the batch"
    assert b.column[1, 6].nonzero().flatten().tolist() == [1, 4] and b.tokens[1, -1] == 0, "right-padded with EOS"


def test_a_prompt_that_is_not_a_problem_is_named(model):
    with pytest.raises(ValueError, match="not an arithmetic problem"):
        answers.answer_batch(model, ["47 plus 85"], ["132"])


@torch.no_grad()
def test_answer_logprob_is_the_product_of_the_model_s_own_next_token_probabilities(model):
    b = answers.answer_batch(model, ["42+25=", "61-19="], ["67", "42"])
    got = answers.answer_logprob(model(b.tokens), b)
    for row, (prompt, truth) in enumerate([("42+25=", "67"), ("61-19=", "42")]):
        ids = model.to_tokens(prompt)[0].tolist()
        want = 0.0
        for token in [*model.to_tokens(truth, prepend_bos=False)[0].tolist(), 0]:  # each answer token, then EOS
            want += model(torch.tensor([ids])).log_softmax(-1)[0, -1, token].item()
            ids.append(token)
        assert got[row].item() == pytest.approx(want, abs=1e-4)


@torch.no_grad()
def test_the_logit_lens_at_the_last_site_is_the_model_s_output_and_first_top_counts_every_position(model):
    b = answers.answer_batch(model, ["42+25=", "61-19=", "99+99="], ["67", "42", "198"])
    logits, cache = model.run_with_cache(b.tokens)
    lens = answers.answer_lens(cache, b)
    own = answers.target_logprobs(logits.log_softmax(-1), b)
    assert torch.allclose(lens.final_logprobs, own, atol=1e-5)
    top_at_output = (logits.argmax(-1) == b.targets) & b.query
    for k in range(len(lens.slots)):
        assert lens.top1[-1, k].item() == pytest.approx(top_at_output[b.slot == k].float().mean().item())
    assert lens.first_top.sum(0).tolist() == lens.count.tolist(), "each position is first top at one site, or never"
    never = b.query & ~top_at_output  # not on top at the output: never on top for good
    assert lens.first_top[-1].tolist() == [int((never & (b.slot == k)).sum()) for k in range(len(lens.slots))]


@torch.no_grad()
def test_operand_attention_shares_are_shares_and_the_column_is_inside_the_operands(model):
    b = answers.answer_batch(model, ["42+25=", "61-19=", "99+99="], ["67", "42", "198"])
    _, cache = model.run_with_cache(b.tokens)
    operand, column = answers.operand_attention(cache, b)
    assert ((0 <= column) & (column <= operand + 1e-6) & (operand <= 1 + 1e-6)).all()
    layer, head = 0, 1  # by hand: the pattern of one head, summed over the operand keys, at the digit-writing rows
    pattern = cache["pattern", layer][:, head]
    want = torch.stack([pattern[r, q][b.operand[r]].sum() for r in range(3) for q in b.digit[r].nonzero().flatten()])
    assert operand[layer, head].item() == pytest.approx(want.mean().item(), abs=1e-6)
