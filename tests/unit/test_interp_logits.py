"""interp.logits: token sets, logit difference, log-prob change, KL, sentiment direction, sampling."""

import copy
import math

import pytest
import torch

from interp.logits import (
    SentimentTokens,
    direction_cosine,
    logit_diff,
    logit_diff_bias,
    logprob_change,
    mean_reward,
    next_token_kl,
    prompt_tokens,
    residual_sentiment_direction,
    sample_continuations,
    sentiment_direction,
    sentiment_tokens,
    top_token_changes,
)
from interp.residual import logit_lens_logit_diff
from interp.toy import perturb_head, toy_model, toy_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    m = toy_model(seed=0, tokenizer=toy_tokenizer())
    with torch.no_grad():  # non-trivial final LN and unembed biases, so their terms are tested
        g = torch.Generator().manual_seed(1)
        m.ln_final.w.copy_(1 + 0.3 * torch.randn(m.cfg.d_model, generator=g))
        m.ln_final.b.copy_(0.3 * torch.randn(m.cfg.d_model, generator=g))
        m.unembed.b_U.copy_(0.3 * torch.randn(m.cfg.d_vocab, generator=g))
    return m


def test_sentiment_tokens_keeps_single_tokens(model):
    st = sentiment_tokens(model, pos_words=[" good", " goodish-not-a-word"], neg_words=[" bad"])
    assert st.pos_words == (" good",), "multi-token or unknown words must be dropped"
    assert st.pos_ids == (model.tokenizer.encode(" good", add_special_tokens=False)[0],)


def test_sentiment_tokens_empty_set_is_a_clear_error(model):
    with pytest.raises(ValueError, match="none of the negative words"):
        sentiment_tokens(model, neg_words=[" qwertyuiop"])


def test_logit_diff_by_hand():
    logits = torch.zeros(2, 3, 5)
    logits[0, -1] = torch.tensor([0.0, 1.0, 3.0, -1.0, 0.5])
    logits[1, 1] = torch.tensor([2.0, 0.0, 0.0, 4.0, 0.0])
    st = SentimentTokens((1, 2), (3,), ("a", "b"), ("c",))
    # row 0 at pos 2: mean(1, 3) - (-1) = 3 ; row 1 at pos 1: mean(0, 0) - 4 = -4
    got = logit_diff(logits, st, torch.tensor([2, 1]))
    assert torch.allclose(got, torch.tensor([3.0, -4.0])), f"expected [3, -4], got {got.tolist()}"


def test_right_padding_is_exact(model):
    prompts = ["This movie was really", "I watched this film and it was", "The plot"]
    st = sentiment_tokens(model)
    tokens, last = prompt_tokens(model, prompts)
    assert last.tolist() == [len(model.to_tokens(p)[0]) - 1 for p in prompts]
    with torch.no_grad():
        batched = logit_diff(model(tokens), st, last)
        single = torch.cat([logit_diff(model(model.to_tokens(p)), st) for p in prompts])
    assert torch.allclose(batched, single, atol=1e-5), "right padding changed a real position"


def test_residual_direction_and_bias_give_the_logit_diff(model):
    st = sentiment_tokens(model)
    tokens = model.to_tokens("This movie was really")
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
        scaled = cache.apply_ln_to_stack(cache["resid_post", -1][None], layer=-1)[0, :, -1]
        by_direction = scaled @ residual_sentiment_direction(model, st) + logit_diff_bias(model, st)
    assert torch.allclose(by_direction, logit_diff(logits, st), atol=1e-5)


def test_kl_by_hand_and_zero_for_identical():
    p = torch.tensor([0.5, 0.5]).log()[None, None]
    q = torch.tensor([0.25, 0.75]).log()[None, None]
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)  # KL(tuned=p || ref=q)
    assert torch.allclose(next_token_kl(q, p), torch.tensor([[expected]])), "KL is KL(p_tuned || p_ref)"
    assert next_token_kl(p, p).abs().max() == 0


def test_logprob_change_and_top_tokens(model):
    ref = torch.zeros(1, 2, model.cfg.d_vocab)
    tuned = ref.clone()
    tuned[0, -1, 5] = 2.0
    tuned[0, -1, 7] = -2.0
    change = logprob_change(ref, tuned)
    assert change.shape == (1, model.cfg.d_vocab)
    assert torch.allclose(change.exp().mul(torch.softmax(ref[:, -1], -1)).sum(), torch.tensor(1.0))
    promoted, demoted = top_token_changes(model, change, k=1)
    assert promoted[0][0] == model.to_single_str_token(5) and demoted[0][0] == model.to_single_str_token(7)
    assert promoted[0][1] > 0 > demoted[0][1]


def test_identical_models_zero_change(model):
    st = sentiment_tokens(model)
    assert direction_cosine(model, model, st) == pytest.approx(1.0)
    tokens = model.to_tokens("This movie was")
    with torch.no_grad():
        logits = model(tokens)
    assert logprob_change(logits, logits).abs().max() == 0


def test_sampling_is_seeded_and_reward_is_the_mean(model):
    prompt = model.to_tokens("This movie was")
    with torch.no_grad():
        a = sample_continuations(model, prompt, n_samples=3, gen_len=4, seed=7)
        b = sample_continuations(model, prompt, n_samples=3, gen_len=4, seed=7)
    assert a.shape == (3, prompt.shape[1] + 4) and torch.equal(a, b)
    assert torch.equal(a[:, : prompt.shape[1]], prompt.expand(3, -1))
    with torch.no_grad():
        r = mean_reward(model, model, "This movie was",
                        lambda texts: [float(t.startswith("This movie was")) for t in texts], 3, 4)
    assert r == 1.0, "reward_fn gets prompt + continuation, special tokens removed"


def test_a_direction_planted_in_the_final_layernorm_bias_moves_logit_diff_and_lens_by_hand(model):
    """ln_final.b += c · d̂ with d = sentiment_direction and d̂ = d / |d|. The blocks are untouched and
    ln_final's bias is added after the normalization, so every logit t moves by c · d̂ · W_U[:, t], and
    the logit difference by c · d̂ · d = c · |d| exactly, on every prompt and at every logit-lens site.
    Red if logit_diff and sentiment_direction disagree (a sum instead of a mean over the words, the
    positive and negative sets swapped) or if the logit lens skips ln_final's bias."""
    st = sentiment_tokens(model)
    d = sentiment_direction(model, st)
    c = 2.0
    tuned = copy.deepcopy(model)
    with torch.no_grad():
        tuned.ln_final.b += c * d / d.norm()
    expected = c * d.norm().item()  # by hand: 2 |d|
    tokens, last = prompt_tokens(model, ["This movie was really", "I watched this film and it was", "The plot"])
    with torch.no_grad():
        ref_logits, ref_cache = model.run_with_cache(tokens)
        tuned_logits, tuned_cache = tuned.run_with_cache(tokens)
    moved = logit_diff(tuned_logits, st, last) - logit_diff(ref_logits, st, last)
    torch.testing.assert_close(moved, torch.full((3,), expected), atol=1e-4, rtol=0)
    lens_ref, sites = logit_lens_logit_diff(ref_cache, st, last)
    lens_tuned, _ = logit_lens_logit_diff(tuned_cache, st, last)
    torch.testing.assert_close(lens_tuned - lens_ref, torch.full((len(sites), 3), expected), atol=1e-4, rtol=0)


def test_perturbed_head_moves_logit_diff(model):
    """Smoke test (the known answer is the planted-bias test above): a head nudged along the
    sentiment direction changes the logit difference at all."""
    st = sentiment_tokens(model)
    tuned = perturb_head(model, 1, 0, residual_sentiment_direction(model, st), scale=5.0)
    tokens = model.to_tokens("This movie was")
    with torch.no_grad():
        assert not torch.allclose(logit_diff(model(tokens), st), logit_diff(tuned(tokens), st))
