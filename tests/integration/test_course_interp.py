"""Exercises 05 (interpretability): each check fails on planted classic bugs with their named hints, the
planted model gives the answer it was built to give, and the solutions written for reading
(course/solutions_interp.py) agree with the package's `interp` functions on interp.toy's model.

The generic tests (each check passes its solution, no mistake gives the answer, the exercise notebook
is what the generator writes) are in test_course_checks.py.
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from test_course_checks import fails_with

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


def logit_diff_at_the_last_position(logits, pos_ids, neg_ids, last_pos=None):
    return sol.logit_diff(logits, pos_ids, neg_ids, None)


def logit_diff_summed(logits, pos_ids, neg_ids, last_pos=None):
    last = logits[:, -1] if last_pos is None else logits[torch.arange(len(logits)), last_pos]
    return last[:, pos_ids].sum(-1) - last[:, neg_ids].sum(-1)


def logit_diff_of_probabilities(logits, pos_ids, neg_ids, last_pos=None):
    return sol.logit_diff(logits.softmax(-1), pos_ids, neg_ids, last_pos)


def test_logit_diff_recognises_the_last_position_of_a_padded_row():
    fails_with("logit_diff", logit_diff_at_the_last_position, "you read the last POSITION")


def test_logit_diff_recognises_a_sum():
    fails_with("logit_diff", logit_diff_summed, "the SUM of the positive logits")


def test_logit_diff_recognises_probabilities():
    fails_with("logit_diff", logit_diff_of_probabilities, "those are probabilities")


def test_logit_diff_solution_is_interps(toy_pair):
    from interp.logits import logit_diff

    reference, _, st, tokens = toy_pair
    last_pos = (tokens != 0).sum(-1)  # right-padded; id 0 is also the BOS at position 0
    with torch.no_grad():
        logits = reference(tokens)
    assert torch.allclose(sol.logit_diff(logits, list(st.pos_ids), list(st.neg_ids), last_pos),
                          logit_diff(logits, st, last_pos), atol=1e-6)


# --- logit_lens_logit_diff --------------------------------------------------------------------


def _lens_with(**kw):
    def logit_lens_logit_diff(resid, ln_weight, ln_bias, direction, unembed_bias_diff, eps=1e-5):
        return checks_interp._lens(resid, ln_weight, ln_bias, direction, unembed_bias_diff, eps, **kw)

    return logit_lens_logit_diff


def lens_with_the_final_scale(resid, ln_weight, ln_bias, direction, unembed_bias_diff, eps=1e-5):
    """Every site divided by the last site's scale (the frozen final scale)."""
    centred = resid - resid.mean(-1, keepdim=True)
    final = (centred[-1].pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return (centred / final * ln_weight + ln_bias) @ direction + unembed_bias_diff


def test_logit_lens_recognises_no_layernorm():
    fails_with("logit_lens_logit_diff", _lens_with(ln=False), "the final LayerNorm is missing")


def test_logit_lens_recognises_the_frozen_final_scale():
    fails_with("logit_lens_logit_diff", lens_with_the_final_scale, "its OWN scale")


def test_logit_lens_recognises_the_ln_bias_missing():
    fails_with("logit_lens_logit_diff", _lens_with(use_b=False), "ln_final's bias is missing")


def test_logit_lens_recognises_no_centring():
    fails_with("logit_lens_logit_diff", _lens_with(centre=False), "centre first")


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


def patching_the_wrong_way_round(reference, tuned, tokens, metric):
    return sol.residual_patching(tuned, reference, tokens, metric)


def patching_returning_the_patched_metric(reference, tuned, tokens, metric):
    return sol.residual_patching(reference, tuned, tokens, metric) + metric(reference(tokens))


def patching_the_last_position_only(reference, tuned, tokens, metric):
    _, cache = tuned.run_with_cache(tokens)
    base, out = metric(reference(tokens)), []
    for site in range(reference.cfg.n_layers + 1):
        name = sol.site_hook_name(reference, site)

        def patch(resid, hook, name=name):
            resid = resid.clone()
            resid[:, -1] = cache[name][:, -1]
            return resid

        out.append(metric(reference.run_with_hooks(tokens, fwd_hooks=[(name, patch)])) - base)
    return torch.stack(out)


def test_patching_recognises_the_wrong_way_round():
    fails_with("residual_patching", patching_the_wrong_way_round, "the wrong way round")


def test_patching_recognises_the_patched_metric_for_the_effect():
    fails_with("residual_patching", patching_returning_the_patched_metric, "return the EFFECT")


def test_patching_recognises_the_last_position_alone():
    fails_with("residual_patching", patching_the_last_position_only, "patch the residual at EVERY position")


def test_patching_solution_is_interps(toy_pair):
    from interp.residual import residual_patching

    reference, tuned, st, tokens = toy_pair
    tokens = tokens[:1]  # one prompt, no padding

    def metric(logits):
        return sol.logit_diff(logits, list(st.pos_ids), list(st.neg_ids)).mean()

    ours = sol.residual_patching(reference, tuned, tokens, metric)
    assert torch.allclose(ours, residual_patching(reference, tuned, tokens, st).effect, atol=1e-5)


# --- feature_change ---------------------------------------------------------------------------


def change_ignoring_the_mask(x_ref, x_tuned, mask, encode):
    return encode(x_tuned).mean((0, 1)) - encode(x_ref).mean((0, 1))


def change_of_the_mean_activation(x_ref, x_tuned, mask, encode):
    return encode(x_tuned[mask].mean(0)) - encode(x_ref[mask].mean(0))


def change_reference_minus_tuned(x_ref, x_tuned, mask, encode):
    return sol.feature_change(x_tuned, x_ref, mask, encode)


def test_feature_change_recognises_the_mask_ignored():
    fails_with("feature_change", change_ignoring_the_mask, "the mask was ignored")


def test_feature_change_recognises_the_encoder_on_the_mean():
    fails_with("feature_change", change_of_the_mean_activation, "you encoded the MEAN activation")


def test_feature_change_recognises_the_sign():
    fails_with("feature_change", change_reference_minus_tuned, "sign: the change is tuned minus reference")


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


def steer_last_position(model, tokens, hook_name, W_dec, features, coefficients):
    v = coefficients @ W_dec[features]

    def hook(x, hook):
        x = x.clone()
        x[:, -1] += v
        return x

    return model.run_with_hooks(tokens, fwd_hooks=[(hook_name, hook)])


def steer_with_unit_rows(model, tokens, hook_name, W_dec, features, coefficients):
    return sol.steered_logits(model, tokens, hook_name, W_dec / W_dec.norm(dim=-1, keepdim=True), features,
                              coefficients)


def steer_without_coefficients(model, tokens, hook_name, W_dec, features, coefficients):
    return sol.steered_logits(model, tokens, hook_name, W_dec, features, torch.ones(len(features)))


def test_steering_recognises_the_last_position_alone():
    fails_with("steered_logits", steer_last_position, "add the vector at EVERY position")


def test_steering_recognises_normalised_rows():
    fails_with("steered_logits", steer_with_unit_rows, "use the decoder rows as they are")


def test_steering_recognises_the_coefficients_ignored():
    fails_with("steered_logits", steer_without_coefficients, "the coefficients were ignored")


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
