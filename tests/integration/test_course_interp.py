"""Exercises 05 (interpretability): the planted model gives the answer it was built to give, and the solutions
written for reading (course/solutions_interp.py) agree with the package's `interp` functions on interp.toy's
model. The classic bugs each check names are the course's catalogue (course/mistakes_interp.py, planted in
tests/unit/test_course_mistakes.py).

The generic tests (each check passes its solution, no mistake gives the answer, the exercise notebook
is what the generator writes) are in test_course_checks.py.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

from rlhf_scratch.course import checks_interp
from rlhf_scratch.course import solutions_interp as sol

# --- the planted model ------------------------------------------------------------------------


def test_the_planted_head_is_recovered_exactly_where_it_sits():
    """Tuned at layer 0: patching recovers nothing at site 0 and the whole gap at sites 1 and 2; at
    layer 1, nothing at sites 0 and 1. The gap is positive and not small (the tuned model says the
    positive tokens more; the check could not tell the mistakes apart otherwise). Building it leaves torch's global RNG as it was."""
    state = torch.get_rng_state()
    checks_interp.planted.cache_clear()
    p = checks_interp.planted()
    assert torch.equal(torch.get_rng_state(), state)
    for layer, tuned in enumerate(p.tuned_at):
        effects = sol.residual_patching(p.reference, tuned, p.tokens, p.metric)
        gap = p.metric(tuned(p.tokens)) - p.metric(p.reference(p.tokens))
        assert gap > 0.5
        assert torch.allclose(effects[: layer + 1], torch.zeros(layer + 1), atol=1e-5)
        assert torch.allclose(effects[layer + 1 :], gap.expand(2 - layer), atol=1e-5)


@pytest.fixture(scope="module")
def toy_pair():
    """interp.toy's model and a copy with one head changed along the sentiment direction."""
    from interp.logits import sentiment_direction, sentiment_tokens
    from interp.toy import perturb_head, toy_model

    reference = toy_model()
    st = sentiment_tokens(reference)
    tuned = perturb_head(reference, 1, 2, direction=sentiment_direction(reference, st).detach(), scale=4.0)
    tokens = reference.to_tokens(["This movie was really", "The acting was"], padding_side="right")
    return reference, tuned, st, tokens


# --- logit_diff -------------------------------------------------------------------------------


def test_logit_diff_solution_is_interps(toy_pair):
    from interp.logits import logit_diff

    reference, _, st, tokens = toy_pair
    last_pos = (tokens != 0).sum(-1)  # right-padded; id 0 is also the BOS at position 0
    with torch.no_grad():
        logits = reference(tokens)
    assert torch.allclose(sol.logit_diff(logits, list(st.pos_ids), list(st.neg_ids), last_pos),
                          logit_diff(logits, st, last_pos), atol=1e-6)


# --- logit_lens_logit_diff --------------------------------------------------------------------


def test_logit_lens_solution_is_interps_and_ends_at_the_models_logit_diff(toy_pair):
    """On interp.toy's model (its ln_final and b_U made non-trivial): the solution is
    interp.residual.logit_lens_logit_diff at every site, and its last site is the model's logit diff."""
    from interp.logits import logit_diff
    from interp.residual import logit_lens_logit_diff

    model, _, st, tokens = toy_pair
    model = copy.deepcopy(model)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        model.ln_final.w.add_(0.3 * torch.randn(model.cfg.d_model, generator=g))
        model.ln_final.b.add_(0.3 * torch.randn(model.cfg.d_model, generator=g))
        model.unembed.b_U.add_(0.3 * torch.randn(model.cfg.d_vocab, generator=g))
        logits, cache = model.run_with_cache(tokens)
        theirs, _ = logit_lens_logit_diff(cache, st)
        resid = cache.accumulated_resid(layer=None, incl_mid=False)[:, :, -1]
        d = model.W_U[:, list(st.pos_ids)].mean(-1) - model.W_U[:, list(st.neg_ids)].mean(-1)
        bias = model.b_U[list(st.pos_ids)].mean() - model.b_U[list(st.neg_ids)].mean()
        ours = sol.logit_lens_logit_diff(resid, model.ln_final.w, model.ln_final.b, d, bias, model.cfg.eps)
    assert torch.allclose(ours, theirs, atol=1e-5)
    assert torch.allclose(ours[-1], logit_diff(logits, st), atol=1e-5)


# --- residual_patching ------------------------------------------------------------------------


def test_patching_solution_is_interps(toy_pair):
    from interp.residual import residual_patching

    reference, tuned, st, tokens = toy_pair
    tokens = tokens[:1]  # one prompt, no padding

    def metric(logits):
        return sol.logit_diff(logits, list(st.pos_ids), list(st.neg_ids)).mean()

    ours = sol.residual_patching(reference, tuned, tokens, metric)
    assert torch.allclose(ours, residual_patching(reference, tuned, tokens, st).effect, atol=1e-5)


# --- feature_change ---------------------------------------------------------------------------


class TinySAE(torch.nn.Module):
    """encode: ReLU((x − b_dec) W_enc + b_enc), decode: a W_dec + b_dec — the shape of interp.sae's."""

    def __init__(self, d_model: int, d_sae: int, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.W_enc = torch.randn(d_model, d_sae, generator=g) / d_model**0.5
        self.W_dec = torch.randn(d_sae, d_model, generator=g) / d_sae**0.5
        self.b_enc, self.b_dec = 0.1 * torch.randn(d_sae, generator=g), 0.1 * torch.randn(d_model, generator=g)

    def encode(self, x):
        return F.relu((x - self.b_dec) @ self.W_enc + self.b_enc)

    def decode(self, a):
        return a @ self.W_dec + self.b_dec


def test_feature_change_solution_is_interps_feature_diff(toy_pair):
    """interp.feature_diff.feature_diff's `change` on the toy pair (its real positions: no BOS or pad)."""
    from interp.feature_diff import feature_diff, real_positions, site_activations

    reference, tuned, _, tokens = toy_pair
    hook, sae = "blocks.1.hook_resid_post", TinySAE(reference.cfg.d_model, 24)
    theirs = feature_diff(reference, tuned, sae, hook, tokens).change
    ours = sol.feature_change(site_activations(reference, hook, tokens), site_activations(tuned, hook, tokens),
                              real_positions(reference, tokens), sae.encode)
    assert theirs.abs().max() > 0.01 and torch.allclose(ours, theirs, atol=1e-6)


# --- steered_logits ---------------------------------------------------------------------------


def test_steering_solution_is_interps_hook(toy_pair):
    from interp.causal import add_vector_hook, steering_vector

    model, _, _, tokens = toy_pair
    W_dec = TinySAE(model.cfg.d_model, 24).W_dec
    features, coefficients = [3, 17, 5], torch.tensor([1.5, -2.0, 0.5])
    hook = "blocks.0.hook_resid_post"
    with torch.no_grad():
        theirs = model.run_with_hooks(tokens, fwd_hooks=[(hook, add_vector_hook(steering_vector(W_dec, features,
                                                                                                coefficients)))])
        ours = sol.steered_logits(model, tokens, hook, W_dec, features, coefficients)
    assert torch.allclose(ours, theirs, atol=1e-5) and not torch.allclose(ours, model(tokens), atol=1e-3)
