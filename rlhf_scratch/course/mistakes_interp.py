"""Planted mistakes of exercises 05 (`checks_interp.py`): interpretability on the planted model. Each function is
the solution with one classic mistake, as a learner writes it.
"""

import torch

from rlhf_scratch.course import checks_interp
from rlhf_scratch.course import solutions_interp as sol
from rlhf_scratch.course.planted import Planted


def logit_diff_at_the_last_position(logits, pos_ids, neg_ids, last_pos=None):
    return sol.logit_diff(logits, pos_ids, neg_ids, None)

def logit_diff_summed(logits, pos_ids, neg_ids, last_pos=None):
    last = logits[:, -1] if last_pos is None else logits[torch.arange(len(logits)), last_pos]
    return last[:, pos_ids].sum(-1) - last[:, neg_ids].sum(-1)

def logit_diff_of_probabilities(logits, pos_ids, neg_ids, last_pos=None):
    return sol.logit_diff(logits.softmax(-1), pos_ids, neg_ids, last_pos)

def _lens_with(**kw):
    def logit_lens_logit_diff(resid, ln_weight, ln_bias, direction, unembed_bias_diff, eps=1e-5):
        return checks_interp._lens(resid, ln_weight, ln_bias, direction, unembed_bias_diff, eps, **kw)

    return logit_lens_logit_diff

def lens_with_the_final_scale(resid, ln_weight, ln_bias, direction, unembed_bias_diff, eps=1e-5):
    """Every site divided by the last site's scale (the frozen final scale)."""
    centred = resid - resid.mean(-1, keepdim=True)
    final = (centred[-1].pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return (centred / final * ln_weight + ln_bias) @ direction + unembed_bias_diff

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

def change_ignoring_the_mask(x_ref, x_tuned, mask, encode):
    return encode(x_tuned).mean((0, 1)) - encode(x_ref).mean((0, 1))

def change_of_the_mean_activation(x_ref, x_tuned, mask, encode):
    return encode(x_tuned[mask].mean(0)) - encode(x_ref[mask].mean(0))

def change_reference_minus_tuned(x_ref, x_tuned, mask, encode):
    return sol.feature_change(x_tuned, x_ref, mask, encode)

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

def heads_by_weight_change(reference, tuned, tokens, metric):
    """The size of each head's weight change, the same for every prompt (the decoy's weights moved most)."""
    from interp.attention import head_weight_change

    return head_weight_change(reference, tuned)["all"].expand(tokens.shape[0], -1, -1).clone()

def heads_by_size_of_the_base(reference, tuned, tokens, metric):
    """The reference's largest head."""
    size = torch.stack([getattr(reference, w).norm(dim=(-2, -1)) ** 2 for w in ("W_Q", "W_K", "W_V", "W_O")]).sum(0)
    return size.expand(tokens.shape[0], -1, -1).clone()

def heads_one_layer_late(reference, tuned, tokens, metric):
    """The patching scores with each layer's put at the next (an index off by one)."""
    return sol.changed_head_scores(reference, tuned, tokens, metric).roll(1, dims=1)

def heads_on_one_prompt(reference, tuned, tokens, metric):
    """The right scores on the first prompt, zeros on the others: the right head, a margin no interval decides."""
    scores = sol.changed_head_scores(reference, tuned, tokens[:1], metric)
    return torch.cat([scores, torch.zeros(tokens.shape[0] - 1, *scores.shape[1:])])

P = Planted
PLANTED: tuple[Planted, ...] = (
    P("logit_diff", "last-position", logit_diff_at_the_last_position, "you read the last POSITION"),
    P("logit_diff", "sum", logit_diff_summed, "the SUM of the positive logits"),
    P("logit_diff", "probabilities", logit_diff_of_probabilities, "those are probabilities"),
    P("logit_lens_logit_diff", "no-layernorm", _lens_with(ln=False), "the final LayerNorm is missing"),
    P("logit_lens_logit_diff", "final-scale", lens_with_the_final_scale, "its OWN scale"),
    P("logit_lens_logit_diff", "ln-bias-missing", _lens_with(use_b=False), "ln_final's bias is missing"),
    P("logit_lens_logit_diff", "not-centred", _lens_with(centre=False), "centre first"),
    P("residual_patching", "wrong-way-round", patching_the_wrong_way_round, "the wrong way round"),
    P("residual_patching", "patched-metric", patching_returning_the_patched_metric, "return the EFFECT"),
    P("residual_patching", "last-position", patching_the_last_position_only, "patch the residual at EVERY position"),
    P("feature_change", "mask-ignored", change_ignoring_the_mask, "the mask was ignored"),
    P("feature_change", "encoded-mean", change_of_the_mean_activation, "you encoded the MEAN activation"),
    P("feature_change", "sign", change_reference_minus_tuned, "sign: the change is tuned minus reference"),
    P("steered_logits", "last-position", steer_last_position, "add the vector at EVERY position"),
    P("steered_logits", "unit-rows", steer_with_unit_rows, "use the decoder rows as they are"),
    P("steered_logits", "coefficients-ignored", steer_without_coefficients, "the coefficients were ignored"),
    P("changed_head_scores", "weight-diff", heads_by_weight_change, "weights moved, but what it computes did not"),
    P("changed_head_scores", "largest-head", heads_by_size_of_the_base, "the base model's LARGEST head"),
    P("changed_head_scores", "layer-after", heads_one_layer_late, "one layer AFTER the head the run changed"),
    P("changed_head_scores", "one-prompt", heads_on_one_prompt, "do not decide it over the prompts"),
)
"""Exercises 05's planted mistakes (`course.mistakes.Planted`)."""
