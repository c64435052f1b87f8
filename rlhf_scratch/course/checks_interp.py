"""The checks of exercises 05: interpretability — the logit difference, the logit lens through the model's
own final LayerNorm, activation patching, a feature diff and steering.

Built as `checks.py` is (read its docstring). The logit difference and the feature diff are worked out
by hand. The three that need a model run on a PLANTED pair where the answer is known (`planted`): a
tiny random 2-layer LayerNorm transformer (its final LayerNorm and unembedding biases made non-trivial,
so that leaving one out shows) and copies of it in which ONE attention head writes more along
the positive-minus-negative direction (`interp.toy.perturb_head`), at layer 0 or at layer 1. Patching
the tuned residual into the reference must then recover nothing before the planted head and all of the
gap after it. Their expected numbers are the package's own functions (`interp.residual`,
`interp.causal`) on that pair, and each mistake's numbers are the mistake run on the same pair.
The discovery exercise of the same notebook (which head did RL change?) is checked in `checks_discovery.py`.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from transformer_lens import HookedTransformer, HookedTransformerConfig

from rlhf_scratch.course.checks import PADDING_COUNTED, Case, Mistake, Reference, _run

SOLUTIONS = "rlhf_scratch.course.solutions_interp"
REFERENCES: dict[str, Reference] = {
    "logit_diff": Reference(SOLUTIONS, "(logits, pos_ids, neg_ids, last_pos=None)"),
    "logit_lens_logit_diff": Reference(SOLUTIONS, "(resid, ln_weight, ln_bias, direction, unembed_bias_diff, eps=1e-05)"),
    "residual_patching": Reference(SOLUTIONS, "(reference, tuned, tokens, metric)"),
    "feature_change": Reference(SOLUTIONS, "(x_ref, x_tuned, mask, encode)"),
    "steered_logits": Reference(SOLUTIONS, "(model, tokens, hook_name, W_dec, features, coefficients)"),
}
"""The solution of each exercise (written to be read; the package's own is named in each check)."""

POS, NEG = [2, 3], [7]
"""The planted model's "positive" and "negative" token ids."""


@dataclass(frozen=True)
class Planted:
    """The reference, two tuned copies (one head changed, at layer 0 or 1), prompts, and the sentiment tokens."""

    reference: HookedTransformer
    tuned_at: tuple[HookedTransformer, HookedTransformer]
    tokens: Tensor

    @property
    def sentiment(self):
        from interp.logits import SentimentTokens

        return SentimentTokens(tuple(POS), tuple(NEG), ("pos", "pos"), ("neg",))

    def metric(self, logits: Tensor) -> Tensor:
        """The mean logit difference over the prompts (nats)."""
        from interp.logits import logit_diff

        return logit_diff(logits, self.sentiment).mean()


@lru_cache(maxsize=1)
def planted() -> Planted:
    """The planted pair (built once; torch's global RNG is left as it was)."""
    from interp.toy import perturb_head

    cfg = HookedTransformerConfig(n_layers=2, d_model=8, n_heads=2, d_head=4, d_mlp=16, n_ctx=8, d_vocab=10,
                                  act_fn="gelu", normalization_type="LN", seed=0)
    with torch.random.fork_rng():
        reference = HookedTransformer(cfg)
        reference.eval()
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():  # non-trivial final LayerNorm and unembedding biases: leaving one out shows
            reference.ln_final.w.copy_(1 + 0.3 * torch.randn(8, generator=g))
            reference.ln_final.b.copy_(0.3 * torch.randn(8, generator=g))
            reference.unembed.b_U.copy_(0.3 * torch.randn(10, generator=g))
        direction = reference.W_U[:, POS].mean(-1) - reference.W_U[:, NEG].mean(-1)
        # (layer, head, seed) where the head's u · z is positive on these prompts: the tuned model says
        # the positive tokens more, by about 1 nat (tests/integration/test_course_interp.py pins it)
        tuned = tuple(perturb_head(reference, layer, head, direction=direction.detach(), scale=6.0, seed=seed)
                      for layer, head, seed in ((0, 1, 1), (1, 0, 2)))
    return Planted(reference, tuned, torch.tensor([[1, 2, 3, 4, 5], [6, 5, 4, 1, 8]]))


# --- logit_diff -------------------------------------------------------------------------------


def _logit_diff_cases() -> list[Case]:
    # vocab 4, positive tokens {0, 1}, negative {2}
    logits = torch.tensor([[[0.0, 0, 0, 0], [1, 1, 1, 1], [1, 3, 0, 5]],
                           [[9.0, 9, 9, 9], [4, 0, 1, 2], [0, 0, 3, 0]]])
    probs = logits.softmax(-1)
    p_row0, p_row1 = probs[0, 2], probs[1, 1]
    return [
        Case("right-padded: row 0 ends at 2, row 1 at 1",
             lambda fn: fn(logits.clone(), [0, 1], [2], torch.tensor([2, 1])),
             # row 0 at 2: mean(1, 3) − 0 = 2;  row 1 at 1: mean(4, 0) − 1 = 1
             [2.0, 1.0],
             (Mistake([2.0, -3.0], "you read the last POSITION: with right padding row 1's last real token is at "
                                   "last_pos[1] = 1 (position 2 is padding)"),
              Mistake([4.0, 3.0], "the SUM of the positive logits: take the mean over each word set (the sets can "
                                  "differ in size)"),
              Mistake([-2.0, -1.0], "sign: positive minus negative"),
              Mistake([(p_row0[:2].mean() - p_row0[2]).item(), (p_row1[:2].mean() - p_row1[2]).item()],
                      "those are probabilities: the logit difference is on the LOGITS (a difference of log-odds, "
                      "the same under log_softmax)"))),
        Case("last_pos = None: the last position",
             lambda fn: fn(logits.clone(), [0, 1], [2]),
             [2.0, -3.0],  # row 1 at 2: 0 − 3
             (Mistake([0.0, 0.0], "you read position 0: without last_pos read the LAST position, where the next "
                                  "token is predicted"),)),
    ]


def check_logit_diff(fn: Callable) -> None:
    """Check `logit_diff(logits, pos_ids, neg_ids, last_pos=None) -> [batch]`, the metric of notebooks 04
    and 05 (`interp.logits.logit_diff`; the solution: `rlhf_scratch.course.solutions_interp.logit_diff`).

    Recognises: the last position of a right-padded row, a sum for the mean, the sign, probabilities for
    logits, position 0 without last_pos.
    """
    _run("logit_diff", fn, _logit_diff_cases(), REFERENCES["logit_diff"])


# --- logit_lens_logit_diff --------------------------------------------------------------------


def _lens(resid: Tensor, w: Tensor, b: Tensor, d: Tensor, bias: Tensor, eps: float, *, scale: Tensor | None = None,
          centre: bool = True, ln: bool = True, use_w: bool = True, use_b: bool = True, use_bias: bool = True) -> Tensor:
    """The logit lens, or it with one mistake (`scale`: a frozen scale for every site)."""
    x = resid - resid.mean(-1, keepdim=True) if centre else resid
    if ln:
        x = x / (scale if scale is not None else (x.pow(2).mean(-1, keepdim=True) + eps).sqrt())
        x = (x * w if use_w else x) + (b if use_b else 0)
    return x @ d + (bias if use_bias else 0)


def _lens_case(name: str, model: HookedTransformer) -> Case:
    from interp.residual import logit_lens_logit_diff

    p = planted()
    with torch.no_grad():
        _, cache = model.run_with_cache(p.tokens)
        expected, _ = logit_lens_logit_diff(cache, p.sentiment)
        resid = cache.accumulated_resid(layer=None, incl_mid=False)[:, :, -1]  # [site, batch, d_model]
        w, b, eps = model.ln_final.w.detach(), model.ln_final.b.detach(), model.cfg.eps
        d = model.W_U[:, POS].mean(-1) - model.W_U[:, NEG].mean(-1)
        bias = model.b_U[POS].mean() - model.b_U[NEG].mean()
        final_scale = cache["ln_final.hook_scale"][:, -1]  # [batch, 1]

    def run(fn: Callable) -> Any:
        return fn(resid.clone(), w.clone(), b.clone(), d.clone(), bias.clone(), eps=eps)

    def lens(**mistake: Any) -> Tensor:
        return _lens(resid, w, b, d, bias, eps, **mistake)

    return Case(f"{name}: 3 sites x 2 prompts", run, expected,
                (Mistake(lens(ln=False), "the final LayerNorm is missing: the unembedding reads ln_final(resid), "
                                         "so the lens must apply it too"),
                 Mistake(lens(scale=final_scale), "each site is normalised with its OWN scale (recomputed): the "
                                                  "frozen final scale is DLA's, which asks what each part "
                                                  "contributes, not what the model would say if the residual "
                                                  "stopped here"),
                 Mistake(lens(centre=False), "centre first: LayerNorm subtracts the mean over d_model before "
                                             "dividing by the std"),
                 Mistake(lens(use_w=False), "ln_final's weight is missing: (x − mean) / scale · w + b"),
                 Mistake(lens(use_b=False), "ln_final's bias is missing: (x − mean) / scale · w + b"),
                 Mistake(lens(use_bias=False), "the unembedding's bias difference is missing")))


def _lens_cases() -> list[Case]:
    p = planted()
    return [_lens_case("the reference", p.reference), _lens_case("tuned at layer 0", p.tuned_at[0])]


def check_logit_lens_logit_diff(fn: Callable) -> None:
    """Check `logit_lens_logit_diff(resid, ln_weight, ln_bias, direction, unembed_bias_diff, eps=1e-5)
    -> [site, batch]` against `interp.residual.logit_lens_logit_diff` on the planted model (the solution:
    `rlhf_scratch.course.solutions_interp.logit_lens_logit_diff`).

    Recognises: no LayerNorm, the frozen final scale for each site's own, no centring, the LayerNorm's
    weight or bias missing, the unembedding's bias missing.
    """
    _run("logit_lens_logit_diff", fn, _lens_cases(), REFERENCES["logit_lens_logit_diff"])


# --- residual_patching ------------------------------------------------------------------------


def _effects(p: Planted, reference: HookedTransformer, source: HookedTransformer, *, position: int | None = None,
             relative: bool = True) -> Tensor:
    """The patching effects with the residual from `source` (the mistakes: a source, a position, no baseline)."""
    from interp.residual import patched_residual_logits

    with torch.no_grad():
        _, cache = source.run_with_cache(p.tokens)
        base = p.metric(reference(p.tokens)) if relative else 0.0
        return torch.stack([p.metric(patched_residual_logits(reference, p.tokens, cache, [s], position)) - base
                            for s in range(reference.cfg.n_layers + 1)])


def _patching_cases() -> list[Case]:
    from interp.residual import residual_patching

    p = planted()
    cases = []
    for layer, tuned in enumerate(p.tuned_at):
        result = residual_patching(p.reference, tuned, p.tokens, p.sentiment)
        gap = result.tuned_logit_diff - result.ref_logit_diff
        cases.append(Case(
            f"one head changed at layer {layer}: nothing recovered before it, the whole gap after",
            lambda fn, tuned=tuned: fn(p.reference, tuned, p.tokens.clone(), p.metric),
            result.effect,
            (Mistake(_effects(p, tuned, p.reference), "the wrong way round: run the REFERENCE with the TUNED "
                                                      "model's residual (which sites carry the change the tuning "
                                                      "made?), and subtract the reference's metric"),
             Mistake(_effects(p, p.reference, tuned, relative=False), "return the EFFECT, metric(patched) − "
                                                                      "metric(reference), not the patched metric"),
             Mistake(result.effect / gap, "that is the fraction of the gap recovered; return the effect itself "
                                          "(in nats)"),
             Mistake(torch.zeros(3), "nothing changed: the residual you patched in is the reference's own; take it "
                                     "from the tuned model's cache (tuned.run_with_cache)"))
            # the last position alone: told apart only where a later layer reads the earlier positions
            + (Mistake(_effects(p, p.reference, tuned, position=p.tokens.shape[1] - 1),
                       "patch the residual at EVERY position: at the last one alone, the tuned model's change at "
                       "earlier positions never reaches the last one through attention"),) * (layer == 0),
            atol=1e-4))
    return cases


def check_residual_patching(fn: Callable) -> None:
    """Check `residual_patching(reference, tuned, tokens, metric) -> [n_layers + 1]`: the effect on
    metric of running the reference with its residual at each site (blocks.{l}.hook_resid_pre, then the
    final blocks.{n-1}.hook_resid_post) replaced by the tuned model's, at every position. On the planted
    pair (one head changed) against `interp.residual.residual_patching` (the solution:
    `rlhf_scratch.course.solutions_interp.residual_patching`).

    Recognises: the wrong way round, the patched metric for the effect, the fraction for the effect,
    the reference's own residual, the last position alone.
    """
    _run("residual_patching", fn, _patching_cases(), REFERENCES["residual_patching"])


# --- feature_change ---------------------------------------------------------------------------

W_ENC = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, -1.0]])


def _encode(x: Tensor) -> Tensor:
    """A 3-feature SAE encoder on a 2-d site: a(x) = ReLU([x0, x1, x0 − x1])."""
    return F.relu(x @ W_ENC)


def _feature_change_cases() -> list[Case]:
    x_ref = [[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]]    # a = [1, 0, 1], [0, 1, 0]: mean [.5, .5, .5]
    x_tuned = [[[0.5, 0.0], [0.0, 3.0], [9.0, 0.0]]]  # a = [.5, 0, .5], [0, 3, 0]: mean [.25, 1.5, .25]
    mask = [[True, True, False]]  # position 2 is padding
    return [
        Case("two real positions and one pad",
             lambda fn: fn(torch.tensor(x_ref), torch.tensor(x_tuned), torch.tensor(mask), _encode),
             [-0.25, 1.0, -0.25],
             (Mistake([7 / 6, -1.0, 17 / 6], "the mask was ignored: padding is not text; average over the real "
                                             "positions only (x[mask])"),
              Mistake([-1 / 6, 2 / 3, -1 / 6], PADDING_COUNTED),
              Mistake([-0.25, 1.0, 0.0], "you encoded the MEAN activation: the encoder is not linear (ReLU), so "
                                         "encode every position, then average the features"),
              Mistake([0.25, -1.0, 0.25], "sign: the change is tuned minus reference"),
              Mistake([0.25, 1.0, 0.25], "the mean of |Δa| loses the direction of the change: take the mean of "
                                         "Δa (rank by its absolute value afterwards)"))),
    ]


def check_feature_change(fn: Callable) -> None:
    """Check `feature_change(x_ref, x_tuned, mask, encode) -> [d_sae]`: each feature's mean activation on
    the tuned model's residual minus on the reference's, over the real positions, one SAE `encode` for both
    (`interp.feature_diff.feature_diff`'s `change`; the solution:
    `rlhf_scratch.course.solutions_interp.feature_change`).

    Recognises: the mask ignored or padding counted in the mean, the encoder on the mean activation, the
    sign, the mean of |Δa|.
    """
    _run("feature_change", fn, _feature_change_cases(), REFERENCES["feature_change"])


# --- steered_logits ---------------------------------------------------------------------------

STEER_HOOK = "blocks.1.hook_resid_pre"


def _per_position(out: Any) -> Any:
    """Logits [batch, pos, d_vocab] summarised as the logit difference at every position [batch, pos]."""
    if isinstance(out, Tensor) and out.dim() == 3 and out.shape[-1] == 10:
        return out[..., POS].mean(-1) - out[..., NEG].mean(-1)
    return out


def _steered(p: Planted, vector: Tensor, last_only: bool = False) -> Tensor:
    """The reference's per-position logit difference with `vector` added at STEER_HOOK (the package's hook)."""
    from interp.causal import add_vector_hook

    def last(x: Tensor, hook) -> Tensor:
        x = x.clone()
        x[:, -1] += vector
        return x

    with torch.no_grad():
        hook = last if last_only else add_vector_hook(vector)
        return _per_position(p.reference.run_with_hooks(p.tokens, fwd_hooks=[(STEER_HOOK, hook)]))


def _steering_cases() -> list[Case]:
    from interp.causal import steering_vector

    p = planted()
    W_dec = torch.randn(6, 8, generator=torch.Generator().manual_seed(2))  # d_sae 6, d_model 8
    features, coefficients = [4, 1], torch.tensor([2.0, -1.5])
    v = steering_vector(W_dec, features, coefficients)
    unit = W_dec / W_dec.norm(dim=-1, keepdim=True)
    with torch.no_grad():
        unsteered = _per_position(p.reference(p.tokens))
    return [
        Case("two features, coefficients [2, −1.5], at blocks.1.hook_resid_pre",
             lambda fn: _per_position(fn(p.reference, p.tokens.clone(), STEER_HOOK, W_dec.clone(), list(features),
                                         coefficients.clone())),
             _steered(p, v),
             (Mistake(_steered(p, v, last_only=True), "add the vector at EVERY position, not the last one alone"),
              Mistake(_steered(p, -v), "sign: steering ADDS Σ c_i d_i (a negative coefficient already subtracts)"),
              Mistake(_steered(p, steering_vector(unit, features, coefficients)),
                      "use the decoder rows as they are: the SAE's activation a_f multiplies W_dec[f] itself, so "
                      "normalising the rows changes how far a coefficient moves the residual"),
              Mistake(_steered(p, coefficients[0] * W_dec[features[0]]), "only the first feature was added: sum "
                                                                         "over every feature"),
              Mistake(_steered(p, W_dec[features].sum(0)), "the coefficients were ignored: v = Σ_i c_i · W_dec[f_i]"),
              Mistake(unsteered, "nothing changed: run the model with a hook on hook_name that returns x + v "
                                 "(model.run_with_hooks(tokens, fwd_hooks=[(hook_name, hook)]))")),
             atol=1e-4),
    ]


def check_steered_logits(fn: Callable) -> None:
    """Check `steered_logits(model, tokens, hook_name, W_dec, features, coefficients) -> [batch, pos, d_vocab]`:
    the logits with v = Σ_i c_i · W_dec[f_i] added at hook_name at every position, as
    `interp.causal.steering_vector` and `add_vector_hook` steer (the solution:
    `rlhf_scratch.course.solutions_interp.steered_logits`). Compared as the logit difference at every position.

    Recognises: the last position alone, the sign, normalised decoder rows, the first feature alone, the
    coefficients ignored, no steering at all.
    """
    _run("steered_logits", fn, _steering_cases(), REFERENCES["steered_logits"])


CASES: dict[str, Callable[[], list[Case]]] = {
    "logit_diff": _logit_diff_cases,
    "logit_lens_logit_diff": _lens_cases,
    "residual_patching": _patching_cases,
    "feature_change": _feature_change_cases,
    "steered_logits": _steering_cases,
}
"""Each exercise's cases, by function name."""
