"""interp.residual: logit lens, decomposition, drift, activation patching — known answers."""

import math

import pytest
import torch

from interp.logits import logit_diff, prompt_tokens, residual_sentiment_direction, sentiment_tokens
from interp.residual import (
    component_logit_diff,
    decompose_final_resid,
    hybrid_logits_fn,
    logit_lens_logit_diff,
    logit_lens_logprobs,
    patched_residual_logits,
    recovered_fraction,
    residual_drift,
    residual_patching,
    residual_patching_reward,
)
from interp.toy import perturb_head, toy_model, toy_tokenizer

PROMPTS = ["This movie was really", "I watched this film and it was", "The plot"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup():
    ref = toy_model(seed=0, tokenizer=toy_tokenizer(), n_layers=3)
    with torch.no_grad():  # non-trivial final LN, so "apply ln_final correctly" is tested
        g = torch.Generator().manual_seed(2)
        ref.ln_final.w.copy_(1 + 0.3 * torch.randn(ref.cfg.d_model, generator=g))
        ref.ln_final.b.copy_(0.3 * torch.randn(ref.cfg.d_model, generator=g))
    st = sentiment_tokens(ref)
    # differs from ref in one head of layer 1 only: sites 0 and 1 see no change, 2 and 3 all of it
    tuned = perturb_head(ref, 1, 2, residual_sentiment_direction(ref, st), scale=5.0)
    tokens, last = prompt_tokens(ref, PROMPTS)
    return ref, tuned, st, tokens, last


def test_logit_lens_last_site_is_the_models_log_probs(setup):
    ref, tuned, st, tokens, last = setup
    for model in (ref, tuned):
        with torch.no_grad():
            logits, cache = model.run_with_cache(tokens)
            lens, labels = logit_lens_logprobs(cache)
            lens_ld, _ = logit_lens_logit_diff(cache, st, last)
        assert labels[-1] == "final_post" and lens.shape[0] == model.cfg.n_layers + 1
        assert torch.allclose(lens[-1], logits.log_softmax(-1), atol=1e-5), "ln_final not applied as the model does"
        assert torch.allclose(lens_ld[-1], logit_diff(logits, st, last), atol=1e-5)


def test_decomposition_sums_to_final_resid_and_logit_diff(setup):
    ref, tuned, st, tokens, last = setup
    with torch.no_grad():
        logits, cache = tuned.run_with_cache(tokens)
        parts, labels = decompose_final_resid(cache)
        attrs, attr_labels = component_logit_diff(cache, st, last)
    assert labels[:2] == ["embed", "pos_embed"] and len(labels) == 2 + 2 * tuned.cfg.n_layers
    assert torch.allclose(parts.sum(0), cache["resid_post", -1], atol=1e-5), "parts must sum to the whole"
    assert attr_labels[-1] == "bias"
    assert torch.allclose(attrs.sum(0), logit_diff(logits, st, last), atol=1e-5)


def test_identical_models_give_zero_differences(setup):
    ref, _, st, tokens, last = setup
    with torch.no_grad():
        _, cache = ref.run_with_cache(tokens)
        _, cache2 = ref.run_with_cache(tokens)
    drift = residual_drift(cache, cache2, tokens, last)
    assert torch.allclose(drift.cosine, torch.ones_like(drift.cosine)) and drift.diff_norm.abs().max() == 0
    result = residual_patching(ref, ref, tokens, st, last)
    assert result.effect.abs().max() == 0
    assert torch.isnan(result.fraction).all(), "no gap to recover: the fraction is undefined (nan)"


def test_patching_every_site_recovers_all_and_nothing_recovers_none(setup):
    ref, tuned, st, tokens, last = setup
    with torch.no_grad():
        tuned_logits, tuned_cache = tuned.run_with_cache(tokens)
        ref_ld = logit_diff(ref(tokens), st, last).mean().item()
        tuned_ld = logit_diff(tuned_logits, st, last).mean().item()
        all_sites = list(range(ref.cfg.n_layers + 1))
        every = logit_diff(patched_residual_logits(ref, tokens, tuned_cache, all_sites), st, last).mean()
        nothing = logit_diff(patched_residual_logits(ref, tokens, tuned_cache, []), st, last).mean()
    assert abs(tuned_ld - ref_ld) > 0.1, "fixture should open a gap"
    assert recovered_fraction(every, ref_ld, tuned_ld).item() == pytest.approx(1.0, abs=1e-4)
    assert recovered_fraction(nothing, ref_ld, tuned_ld).item() == pytest.approx(0.0, abs=1e-6)


def test_per_site_patching_finds_the_changed_layer(setup):
    ref, tuned, st, tokens, last = setup
    result = residual_patching(ref, tuned, tokens, st, last)
    assert result.labels == ["0_pre", "1_pre", "2_pre", "final_post"]
    # the head lives in layer 1: residuals entering layers 0 and 1 are unchanged
    assert torch.allclose(result.fraction, torch.tensor([0.0, 0.0, 1.0, 1.0]), atol=1e-4), result.fraction


def test_per_position_patching_only_last_position_matters_at_the_end(setup):
    ref, tuned, st, tokens, last = setup
    one = tokens[:1, : int(last[0]) + 1]
    result = residual_patching(ref, tuned, one, st, per_position=True)
    assert result.fraction.shape == (ref.cfg.n_layers + 1, one.shape[1])
    final = result.fraction[-1]
    assert final[-1].item() == pytest.approx(1.0, abs=1e-4) and final[:-1].abs().max() < 1e-5


def test_hybrid_equals_patching_at_all_positions(setup):
    ref, tuned, st, tokens, last = setup
    with torch.no_grad():
        _, tuned_cache = tuned.run_with_cache(tokens)
        for site in range(ref.cfg.n_layers + 1):
            hybrid = hybrid_logits_fn(ref, tuned, site)(tokens)
            patched = patched_residual_logits(ref, tokens, tuned_cache, [site])
            assert torch.allclose(hybrid, patched, atol=1e-5), f"site {site}"


def test_reward_patching_fractions(setup):
    ref, tuned, st, tokens, last = setup
    # deterministic "reward": 1 if any positive word appears; sampling uses one seed for all models
    words = {w.strip() for w in st.pos_words}
    reward = lambda texts: [float(any(w in t.split() for w in words)) for t in texts]  # noqa: E731
    rewards, fraction, ref_r, tuned_r = residual_patching_reward(ref, tuned, "This movie was", reward, 4, 5)
    assert rewards.shape == (ref.cfg.n_layers + 1,)
    assert rewards[0].item() == ref_r and rewards[-1].item() == pytest.approx(rewards[-2].item())
    if abs(tuned_r - ref_r) > 1e-6:  # site n_layers (final) with an unchanged unembed == tuned
        assert fraction[-1].item() == pytest.approx(1.0)
    else:
        assert torch.isnan(fraction).all()


def test_recovered_fraction_guards_a_zero_gap():
    assert math.isnan(recovered_fraction(torch.tensor(1.0), 2.0, 2.0 + 1e-9).item())
    assert recovered_fraction(torch.tensor([1.0, 3.0]), 1.0, 3.0).tolist() == [0.0, 1.0]
