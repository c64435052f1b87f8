"""Exercises 04 (sampling, the replay memory, the reward model): the solutions written for reading
(course/solutions.py) agree with the package's own functions — the sampler, the generation loop, left
padding, TransformerLens' positions, the minibatches, the reward model's head.

The planted classic bugs each check must name are the course's catalogue (`course/mistakes_sampling.py`,
tested in tests/unit/test_course_mistakes.py); the generic tests (each check passes its solution, no mistake
gives the answer, the exercise notebook is what the generator writes) are in test_course_checks.py.
"""

import pytest
import torch

from rlhf_scratch.course import solutions


@pytest.fixture
def toy():
    """interp.toy's random LM with its word-level tokenizer (id 0 is BOS, EOS and pad, as GPT-2's)."""
    from interp.toy import toy_model

    return toy_model()


# --- next_token_probs -------------------------------------------------------------------------


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


def test_left_pad_is_interp_sampling_left_padded(toy):
    from interp.sampling import left_padded

    prompts = ["This movie was", "I", "The acting was really great and"]
    ids, mask = left_padded(toy, prompts)
    ours = solutions.left_pad([toy.to_tokens(p)[0] for p in prompts], toy.tokenizer.pad_token_id)
    assert torch.equal(ours[0], ids) and torch.equal(ours[1], mask)


def test_position_ids_are_transformer_lens():
    from transformer_lens.utilities import get_offset_position_ids

    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 0, 1]]).bool()
    assert torch.equal(solutions.position_ids(mask), get_offset_position_ids(0, mask.long()))


# --- minibatch_rows ---------------------------------------------------------------------------


def test_minibatch_rows_solution_is_the_packages_for_any_sizes():
    from rlhf_scratch.core.memory import minibatch_rows

    for batch, n, passes, seed in ((12, 4, 2, 0), (8, 8, 1, 3), (10, 1, 3, 7)):
        ours = list(solutions.minibatch_rows(batch, n, passes, torch.Generator().manual_seed(seed)))
        theirs = list(minibatch_rows(batch, n, passes, torch.Generator().manual_seed(seed)))
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


# --- reward_at_last_token and reward_model_step -----------------------------------------------


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
