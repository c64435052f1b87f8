"""The PPO objective terms, each against numbers worked out by hand and an independent reference.

Hand examples use logits [0, ln 2, ln 3], whose softmax is [1/6, 2/6, 3/6], and all-zero
logits, whose softmax is uniform [1/3, 1/3, 1/3].
"""

import math

import pytest
import torch
import torch.nn.functional as F

from rlhf_scratch.core import objectives
from rlhf_scratch.core.objectives import (
    calc_approx_kl,
    calc_clip_fraction,
    calc_clipped_sur_obj,
    calc_entropy_bonus,
    calc_kl_penalty,
    calc_value_fn_loss,
    entropy_per_token,
    explained_variance,
    gather_log_probs,
    generated_span,
    get_log_probs,
    kl_per_token,
    masked_mean,
    masked_var,
    masked_whiten,
    sequence_log_probs,
    temperature_scaled,
)

LN2, LN3 = math.log(2), math.log(3)


def close(a, b, tol=1e-5):
    return abs(float(a) - float(b)) < tol


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


# --- get_log_probs ----------------------------------------------------------------------------


def test_get_log_probs_by_hand():
    # position 0 predicts token 1, position 1 predicts token 2 (the last position predicts nothing)
    logits = torch.tensor([[[0.0, LN2, LN3], [0.0, 0.0, 0.0], [5.0, -5.0, 1.0]]])
    tokens = torch.tensor([[2, 1, 0]])
    out = get_log_probs(logits, tokens)
    assert out.shape == (1, 2), "without prefix_len there is one log-prob per next token: seq_len - 1"
    expected = [math.log(2 / 6), math.log(1 / 3)]  # p(tok 1 | pos 0) = 2/6; uniform at pos 1
    assert torch.allclose(out, torch.tensor([expected])), (
        f"got {out.tolist()}, expected {expected}: logits at position t score token t+1 "
        "(did you pair logits[t] with tokens[t] instead of tokens[t+1]?)"
    )


def test_get_log_probs_matches_gather(gen):
    batch, seq_len, d_vocab, prefix_len = 3, 7, 11, 3
    logits = torch.randn(batch, seq_len, d_vocab, generator=gen)
    tokens = torch.randint(0, d_vocab, (batch, seq_len), generator=gen)
    logprobs = logits.log_softmax(-1)
    reference = logprobs[:, :-1].gather(-1, tokens[:, 1:, None]).squeeze(-1)

    assert torch.allclose(get_log_probs(logits, tokens), reference)
    gen_only = get_log_probs(logits, tokens, prefix_len=prefix_len)
    assert gen_only.shape == (batch, seq_len - prefix_len), "with prefix_len: one log-prob per generated token"
    assert torch.allclose(gen_only, reference[:, prefix_len - 1 :]), (
        "the generated tokens are predicted by logits[:, prefix_len-1 : -1]"
    )


def test_gather_log_probs_by_hand():
    lp = torch.tensor([[[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]]])
    assert gather_log_probs(lp, torch.tensor([[2, 0]])).tolist() == [[-3.0, -4.0]], (
        "position t's own token (no shift: the caller lines the span up)"
    )


def test_get_log_probs_stable_and_gradient_is_onehot_minus_softmax():
    # logits x 100: log(softmax) would give log(0) = -inf for the unlikely token; logit - logsumexp does not
    logits = (torch.tensor([[[0.0, LN2, LN3], [0.0, 0.0, 0.0]]]) * 100).requires_grad_()
    tokens = torch.tensor([[0, 0]])
    out = get_log_probs(logits, tokens)
    assert torch.isfinite(out).all() and close(out[0, 0].item(), -100 * LN3, 1e-3), f"got {out.tolist()}"
    out.sum().backward()
    expected = F.one_hot(torch.tensor(0), 3).float() - (logits[0, 0].detach()).softmax(-1)
    torch.testing.assert_close(logits.grad[0, 0], expected)
    assert torch.equal(logits.grad[0, 1], torch.zeros(3)), "the last position predicts nothing: no gradient"


def test_from_logprobs_is_the_same_function_on_shared_log_softmax(gen):
    """Passing log_softmax(logits) with from_logprobs=True (what the trainers do to share one
    log-softmax per minibatch) gives the values and the gradients of passing the logits."""
    logits = torch.randn(2, 5, 7, generator=gen, requires_grad=True)
    ref = torch.randn(2, 5, 7, generator=gen)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    lp, ref_lp = logits.log_softmax(-1), ref.log_softmax(-1)
    pairs = [
        (kl_per_token(logits, ref), kl_per_token(lp, ref_lp, from_logprobs=True)),
        (entropy_per_token(logits), entropy_per_token(lp, from_logprobs=True)),
        (calc_kl_penalty(logits, ref, 0.2, mask), calc_kl_penalty(lp, ref_lp, 0.2, mask, from_logprobs=True)),
        (calc_entropy_bonus(logits, 0.01, mask), calc_entropy_bonus(lp, 0.01, mask, from_logprobs=True)),
    ]
    for plain, shared in pairs:
        torch.testing.assert_close(shared, plain, atol=1e-6, rtol=0)
        g_plain, = torch.autograd.grad(plain.sum(), logits, retain_graph=True)
        g_shared, = torch.autograd.grad(shared.sum(), logits, retain_graph=True)
        torch.testing.assert_close(g_shared, g_plain, atol=1e-6, rtol=0)
    # and it is not a no-op: raw logits read as log-probs are not a distribution
    assert not torch.allclose(entropy_per_token(logits, from_logprobs=True), entropy_per_token(logits))


def test_get_log_probs_at_a_temperature_by_hand():
    """Sampled from softmax(z / T), scored at T: logits [0, ln 2, ln 3] at T = 0.5 are [0, 2 ln 2, 2 ln 3],
    softmax ∝ [1, 4, 9] = [1/14, 4/14, 9/14]."""
    logits = torch.tensor([[[0.0, LN2, LN3], [0.0, 0.0, 0.0]]])
    tokens = torch.tensor([[7, 1, 2]])
    out = get_log_probs(torch.cat([logits, logits[:, :1]], 1), tokens, prefix_len=1, temperature=0.5)
    expected = [math.log(4 / 14), math.log(1 / 3)]  # uniform logits stay uniform at any T
    torch.testing.assert_close(out, torch.tensor([expected]))
    at_one = get_log_probs(torch.cat([logits, logits[:, :1]], 1), tokens, prefix_len=1)
    assert not torch.allclose(out, at_one), f"T ignored: {out.tolist()} = the T = 1 log-probs (ln 2/6 = {math.log(2 / 6):.4f})"
    # T = 2: softmax ∝ [1, √2, √3]; log-prob of token 2 = ln(√3 / (1 + √2 + √3))
    t2 = get_log_probs(torch.tensor([[[0.0, LN2, LN3], [0.0, 0.0, 0.0]]]), torch.tensor([[0, 2]]), temperature=2.0)
    assert close(t2[0, 0], math.log(3**0.5 / (1 + 2**0.5 + 3**0.5))), "logits are divided by T, not multiplied"


def test_temperature_one_divides_nothing_so_t1_runs_are_bit_identical(gen):
    logits = torch.randn(2, 5, 7, generator=gen)
    assert temperature_scaled(logits, 1.0) is logits, "T = 1 must not even divide (bit-identical runs)"
    tokens = torch.randint(0, 7, (2, 5), generator=gen)
    assert torch.equal(get_log_probs(logits, tokens, 2, temperature=1.0), get_log_probs(logits, tokens, 2))
    torch.testing.assert_close(temperature_scaled(logits, 0.7), logits / 0.7, atol=0, rtol=0)


def test_get_log_probs_rejects_bad_prefix_len():
    with pytest.raises(ValueError, match="prefix_len"):
        get_log_probs(torch.zeros(1, 3, 4), torch.zeros(1, 3, dtype=torch.long), prefix_len=3)


# --- KL penalty -------------------------------------------------------------------------------


def test_kl_penalty_by_hand():
    # position 0: pi = [1/6, 2/6, 3/6] vs pi_ref uniform; position 1: identical (KL 0)
    logits = torch.tensor([[[0.0, LN2, LN3], [1.0, 2.0, 3.0]]])
    ref_logits = torch.tensor([[[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]])
    beta = 0.5
    kl_pos0 = 1 / 6 * math.log((1 / 6) / (1 / 3)) + 2 / 6 * math.log((2 / 6) / (1 / 3)) + 3 / 6 * math.log((3 / 6) / (1 / 3))
    expected = beta * (kl_pos0 + 0.0) / 2

    out = calc_kl_penalty(logits, ref_logits, beta)
    reversed_kl = 1 / 3 * (math.log((1 / 3) / (1 / 6)) + math.log((1 / 3) / (2 / 6)) + math.log((1 / 3) / (3 / 6)))
    assert not close(out, beta * reversed_kl / 2), "KL direction reversed: we want KL(pi || pi_ref) = sum pi (log pi - log pi_ref)"
    assert not close(out, kl_pos0 / 2), "you forgot to multiply by beta (the blog's kl_coef)"
    assert not close(out, beta * kl_pos0), "take the mean over positions, not the sum"
    assert close(out, expected), f"got {float(out)}, expected {expected}"


def test_kl_penalty_matches_torch_kl_div(gen):
    logits = torch.randn(4, 5, 13, generator=gen)
    ref_logits = torch.randn(4, 5, 13, generator=gen)
    # F.kl_div(input, target) = sum target * (log target - input) = KL(target || input)
    reference = F.kl_div(ref_logits.log_softmax(-1), logits.log_softmax(-1), log_target=True, reduction="none").sum(-1).mean()
    assert torch.allclose(calc_kl_penalty(logits, ref_logits, 1.0), reference, atol=1e-6)
    assert torch.allclose(calc_kl_penalty(logits, ref_logits, 0.3), 0.3 * reference, atol=1e-6)


def test_kl_penalty_zero_iff_identical(gen):
    logits = torch.randn(2, 3, 7, generator=gen)
    assert close(calc_kl_penalty(logits, logits.clone(), 1.0), 0.0), "KL of a distribution with itself is 0"
    assert close(calc_kl_penalty(logits, logits + 4.0, 1.0), 0.0), "adding a constant to logits doesn't change the distribution"
    assert float(calc_kl_penalty(logits, torch.randn(2, 3, 7, generator=gen), 1.0)) > 0


# --- entropy bonus ----------------------------------------------------------------------------


def test_entropy_bonus_by_hand():
    logits = torch.tensor([[[0.0, LN2, LN3], [0.0, 0.0, 0.0]]])
    ent_coef = 0.1
    h0 = -(1 / 6 * math.log(1 / 6) + 2 / 6 * math.log(2 / 6) + 3 / 6 * math.log(3 / 6))
    h1 = math.log(3)  # uniform over 3 tokens
    expected = ent_coef * (h0 + h1) / 2
    out = calc_entropy_bonus(logits, ent_coef)
    assert not close(out, (h0 + h1) / 2), "you forgot to multiply by ent_coef"
    assert not close(out, -expected), "entropy is -sum p log p (positive); check the sign"
    assert close(out, expected), f"got {float(out)}, expected {expected}"


def test_entropy_bonus_uniform_is_log_vocab():
    d_vocab = 50
    out = calc_entropy_bonus(torch.zeros(2, 3, d_vocab), 1.0)
    assert close(out, math.log(d_vocab)), "uniform logits over V tokens have entropy ln V"


def test_entropy_bonus_matches_categorical(gen):
    logits = torch.randn(3, 4, 17, generator=gen)
    reference = torch.distributions.Categorical(logits=logits).entropy().mean()
    assert torch.allclose(calc_entropy_bonus(logits, 0.01), 0.01 * reference, atol=1e-7)


# --- value-function loss ----------------------------------------------------------------------


def test_value_fn_loss_by_hand():
    values = torch.tensor([[1.0, 2.0]])
    returns = torch.tensor([[0.0, 4.0]])
    vf_coef = 0.2
    mse = ((1 - 0) ** 2 + (2 - 4) ** 2) / 2  # 2.5
    out = calc_value_fn_loss(values, returns, vf_coef)
    assert not close(out, vf_coef * mse), "you forgot the 1/2 in 1/2 * vf_coef * mean((V - R)^2)"
    assert not close(out, 0.5 * mse), "you forgot to multiply by vf_coef"
    assert not close(out, 0.5 * vf_coef * mse * 2), "take the mean of the squared errors, not the sum"
    assert close(out, 0.5 * vf_coef * mse), f"got {float(out)}, expected {0.5 * vf_coef * mse}"


def test_value_fn_loss_matches_mse_loss(gen):
    values, returns = torch.randn(4, 6, generator=gen), torch.randn(4, 6, generator=gen)
    assert torch.allclose(calc_value_fn_loss(values, returns, 0.15), 0.5 * 0.15 * F.mse_loss(values, returns))


# --- clipped surrogate ------------------------------------------------------------------------

# Advantages [[1, 1], [-1, -1]]: mean 0, sample std sqrt((4 * 1^2) / (4 - 1)) = 2/sqrt(3),
# so they normalise to +-sqrt(3)/2.
ADV = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
A_HAT = math.sqrt(3) / 2
CLIP = 0.2


def sur_obj(ratios, advantages=ADV, clip_coef=CLIP):
    """The surrogate for given ratios r (mb_logprobs = 0, so logprobs = log r)."""
    logprobs = torch.tensor(ratios).log().requires_grad_()
    out = calc_clipped_sur_obj(logprobs, torch.zeros_like(logprobs), advantages, clip_coef)
    out.backward()
    return out.detach(), logprobs.grad


def test_clipped_sur_obj_inside_clip_range():
    # every ratio inside [0.8, 1.2]: the clip is inactive, objective = mean(r * A_hat)
    ratios = [[1.1, 0.9], [1.1, 0.9]]
    out, _ = sur_obj(ratios)
    expected = (1.1 * A_HAT + 0.9 * A_HAT + 1.1 * -A_HAT + 0.9 * -A_HAT) / 4  # = 0
    assert close(out, expected)
    # an asymmetric case that distinguishes normalised from raw advantages
    ratios = [[1.1, 1.1], [0.9, 0.9]]
    out, _ = sur_obj(ratios)
    expected = (1.1 * A_HAT * 2 + 0.9 * -A_HAT * 2) / 4
    unnormalised = (1.1 * 2 - 0.9 * 2) / 4
    assert not close(out, unnormalised), "you forgot to normalise the advantages: (A - mean) / (std + eps)"
    assert close(out, expected), f"got {float(out)}, expected {expected}"


def test_clipped_sur_obj_outside_clip_range():
    # row 0 (A > 0): r = 1.5 is clipped to 1.2; r = 0.5 is NOT (min picks the lower 0.5 * A)
    # row 1 (A < 0): r = 0.5 is clipped to 0.8; r = 1.5 is NOT (min picks the lower -1.5 * A_hat)
    ratios = [[1.5, 0.5], [0.5, 1.5]]
    out, grad = sur_obj(ratios)
    expected = (1.2 * A_HAT + 0.5 * A_HAT + 0.8 * -A_HAT + 1.5 * -A_HAT) / 4
    no_clip = (1.5 * A_HAT + 0.5 * A_HAT + 0.5 * -A_HAT + 1.5 * -A_HAT) / 4
    clip_only = (1.2 * A_HAT + 0.8 * A_HAT + 0.8 * -A_HAT + 1.2 * -A_HAT) / 4
    assert not close(out, no_clip), "the ratio must be clipped to [1 - clip_coef, 1 + clip_coef]"
    assert not close(out, clip_only), "take min(r * A, clip(r) * A), not only the clipped term"
    assert close(out, expected), f"got {float(out)}, expected {expected}"

    # d/d logprob of r * A_hat / N is r * A_hat / N (since dr/dlogprob = r)
    assert grad[0, 0] == 0, "A > 0 and r > 1 + eps: the clip binds, there must be no gradient"
    assert grad[1, 0] == 0, "A < 0 and r < 1 - eps: the clip binds, there must be no gradient"
    assert close(grad[0, 1], 0.5 * A_HAT / 4), "A > 0 and r < 1 - eps: moving back is never clipped"
    assert close(grad[1, 1], 1.5 * -A_HAT / 4), "A < 0 and r > 1 + eps: moving back is never clipped"


def test_clipped_sur_obj_matches_piecewise_reference(gen):
    logprobs = torch.randn(8, 5, generator=gen) * 0.3
    mb_logprobs = torch.randn(8, 5, generator=gen) * 0.3
    advantages = torch.randn(8, 5, generator=gen) * 3 + 1
    r = (logprobs - mb_logprobs).exp()
    a = (advantages - advantages.mean()) / advantages.std()
    # for A >= 0 the objective is min(r, 1 + eps) * A; for A < 0 it is max(r, 1 - eps) * A
    reference = torch.where(a >= 0, r.clamp(max=1 + CLIP) * a, r.clamp(min=1 - CLIP) * a).mean()
    assert torch.allclose(calc_clipped_sur_obj(logprobs, mb_logprobs, advantages, CLIP), reference, atol=1e-6)


# --- diagnostics ------------------------------------------------------------------------------


def test_clip_fraction_by_hand():
    ratios = torch.tensor([[1.1, 1.5], [0.5, 0.9]])
    assert close(calc_clip_fraction(ratios.log(), torch.zeros(2, 2), 0.2), 2 / 4)  # 1.5 and 0.5 are outside


def test_approx_kl_by_hand():
    ratios = [[2.0, 0.5]]
    out = calc_approx_kl(torch.tensor(ratios).log(), torch.zeros(1, 2))
    expected = ((2.0 - 1) - math.log(2.0) + (0.5 - 1) - math.log(0.5)) / 2
    assert close(out, expected), f"got {out}, expected mean((r - 1) - log r) = {expected}"
    assert close(calc_approx_kl(torch.zeros(1, 2), torch.zeros(1, 2)), 0.0)


def test_explained_variance():
    returns = torch.tensor([1.0, 2.0, 3.0, 6.0])
    assert close(explained_variance(returns.clone(), returns), 1.0), "perfect values explain everything"
    assert close(explained_variance(torch.full((4,), 7.0), returns), 0.0), "a constant explains nothing"
    # residual [1, 0, 0, -1] has (population) variance 2/4; returns have mean 3, variance (4+1+0+9)/4
    values = returns - torch.tensor([1.0, 0.0, 0.0, -1.0])
    assert close(explained_variance(values, returns), 1 - (2 / 4) / (14 / 4))
    assert math.isnan(explained_variance(torch.randn(4), torch.ones(4))), "Var[R] = 0: undefined, returns NaN"


# --- numerical stability ----------------------------------------------------------------------


def test_everything_finite_for_huge_logits(gen):
    batch, seq_len, d_vocab, prefix_len = 2, 6, 9, 2
    gen_len = seq_len - prefix_len
    logits = (torch.randn(batch, seq_len, d_vocab, generator=gen) * 100).requires_grad_()
    ref_logits = torch.randn(batch, gen_len, d_vocab, generator=gen) * 100
    tokens = torch.randint(0, d_vocab, (batch, seq_len), generator=gen)

    span = logits[:, prefix_len - 1 : -1]
    logprobs = get_log_probs(logits, tokens, prefix_len)
    terms = {
        "get_log_probs": logprobs.sum(),
        "calc_kl_penalty": calc_kl_penalty(span, ref_logits, 1.0),
        "calc_entropy_bonus": calc_entropy_bonus(span, 1.0),
        "calc_clipped_sur_obj": calc_clipped_sur_obj(logprobs, logprobs.detach() - 1.0, torch.randn(batch, gen_len, generator=gen), CLIP),
    }
    for name, value in terms.items():
        assert torch.isfinite(value), f"{name} is not finite for logits x 100: use log_softmax, never log(softmax)"
        (grad,) = torch.autograd.grad(value, logits, retain_graph=True)
        assert torch.isfinite(grad).all(), f"{name} has a non-finite gradient for logits x 100"


# --- masks: completions that end at EOS -------------------------------------------------------
# Everything after a sample's first EOS is padding, not an action: each term averages over the
# kept tokens only. The hand examples keep 3 of 6 tokens and put very different numbers at the
# masked ones, so "mask ignored" and "one token too many / too few kept" both give other numbers.

MASK = torch.tensor([[True, True, False], [True, False, False]])  # kept: (0,0), (0,1), (1,0)


@pytest.fixture(params=[False, True], ids=["index", "sync_free"])
def form(request, monkeypatch):
    """Each masked test in both forms of the masked statistics (`objectives.SYNC_FREE`): the boolean
    index (a CPU's) and the mask-weighted sums (an accelerator's)."""
    monkeypatch.setattr(objectives, "SYNC_FREE", request.param)
    return request.param


def test_masked_mean_by_hand(form):
    x = torch.tensor([[1.0, 2.0, 100.0], [6.0, -50.0, 7.0]])
    assert masked_mean(x, MASK).item() == pytest.approx(3.0)  # (1 + 2 + 6) / 3; unmasked mean would be 11
    assert masked_mean(x, None).item() == pytest.approx(11.0)


def test_masked_value_loss_and_entropy_and_kl_by_hand(form):
    values = torch.tensor([[1.0, 2.0, 9.0], [0.0, 9.0, 9.0]])
    returns = torch.tensor([[2.0, 0.0, -9.0], [3.0, -9.0, -9.0]])
    # kept errors 1, 2, 3 → squares 1, 4, 9 → mean 14/3 → ½·0.3·14/3 = 0.7
    assert calc_value_fn_loss(values, returns, 0.3, mask=MASK).item() == pytest.approx(0.7)
    # logits: kept positions uniform over 2 (H = ln 2, KL to uniform 0); masked ones peaked
    logits = torch.tensor([[[0.0, 0.0], [1.0, 1.0], [9.0, -9.0]], [[2.0, 2.0], [9.0, -9.0], [9.0, -9.0]]])
    assert calc_entropy_bonus(logits, 0.5, mask=MASK).item() == pytest.approx(0.5 * math.log(2))
    assert calc_kl_penalty(logits, torch.zeros_like(logits), 2.0, mask=MASK).item() == pytest.approx(0.0, abs=1e-7)
    assert calc_kl_penalty(logits, torch.zeros_like(logits), 2.0).item() > 0.5, "unmasked, the peaked positions count"


def test_masked_surrogate_normalises_over_kept_tokens_only_and_gives_masked_tokens_no_gradient(form):
    logprobs = torch.zeros(2, 3, requires_grad=True)
    old = torch.zeros(2, 3)  # ratio 1 everywhere: the objective is the mean normalised advantage
    # kept advantages [1, 3, 5]: mean 3, std 2 → Â = [-1, 0, 1]; the 1000s would dominate if they leaked
    adv = torch.tensor([[1.0, 3.0, 1000.0], [5.0, -1000.0, 1000.0]])
    obj = calc_clipped_sur_obj(logprobs, old, adv, 0.2, mask=MASK)
    assert obj.item() == pytest.approx(0.0, abs=1e-6)
    obj.backward()
    expected = torch.tensor([[-1 / 3, 0.0, 0.0], [1 / 3, 0.0, 0.0]])  # d(r Â)/dlogp = r Â / 3 at kept tokens
    torch.testing.assert_close(logprobs.grad, expected, atol=1e-6, rtol=0)


def test_masked_gradients_are_zero_at_masked_positions(form):
    logits = torch.randn(2, 3, 5, requires_grad=True)
    (calc_entropy_bonus(logits, 1.0, mask=MASK) + calc_kl_penalty(logits, torch.randn(2, 3, 5), 1.0, mask=MASK)).backward()
    assert (logits.grad[~MASK] == 0).all() and (logits.grad[MASK] != 0).any()
    values = torch.randn(2, 3, requires_grad=True)
    calc_value_fn_loss(values, torch.randn(2, 3), 1.0, mask=MASK).backward()
    assert (values.grad[~MASK] == 0).all() and (values.grad[MASK] != 0).all()


def test_all_true_mask_equals_no_mask(form):
    torch.manual_seed(1)
    logits, ref = torch.randn(3, 4, 7), torch.randn(3, 4, 7)
    lp, old, adv, ret, val = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
    ones = torch.ones(3, 4, dtype=torch.bool)
    pairs = [
        (calc_kl_penalty(logits, ref, 0.3), calc_kl_penalty(logits, ref, 0.3, mask=ones)),
        (calc_entropy_bonus(logits, 0.3), calc_entropy_bonus(logits, 0.3, mask=ones)),
        (calc_value_fn_loss(val, ret, 0.3), calc_value_fn_loss(val, ret, 0.3, mask=ones)),
        (calc_clipped_sur_obj(lp, old, adv, 0.2), calc_clipped_sur_obj(lp, old, adv, 0.2, mask=ones)),
    ]
    for a, b in pairs:
        torch.testing.assert_close(a, b, atol=1e-7, rtol=0)
    assert calc_clip_fraction(lp, old, 0.2) == pytest.approx(calc_clip_fraction(lp, old, 0.2, mask=ones))
    assert calc_approx_kl(lp, old) == pytest.approx(calc_approx_kl(lp, old, mask=ones))
    assert explained_variance(val, ret) == pytest.approx(explained_variance(val, ret, mask=ones))


def test_masked_diagnostics_by_hand(form):
    lp = torch.tensor([[0.5, 0.0, 9.0], [0.0, 9.0, 9.0]])  # ratios e^0.5, 1, (masked), 1
    old = torch.zeros(2, 3)
    assert calc_clip_fraction(lp, old, 0.2, mask=MASK) == pytest.approx(1 / 3)
    k3 = (math.exp(0.5) - 1) - 0.5
    assert calc_approx_kl(lp, old, mask=MASK) == pytest.approx(k3 / 3)


def test_sequence_log_probs_by_hand_and_no_nan_from_minus_inf_at_padding():
    lp = torch.tensor([[-1.0, -2.0, -float("inf")], [-0.5, -float("inf"), -float("inf")]])
    out = sequence_log_probs(lp, MASK)
    assert out.tolist() == [-3.0, -0.5]


def test_per_token_kl_and_entropy_and_the_span():
    logits = torch.tensor([[[math.log(3.0), 0.0]]])
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert entropy_per_token(logits).item() == pytest.approx(h)
    kl = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
    assert kl_per_token(logits, torch.zeros_like(logits)).item() == pytest.approx(kl)
    assert list(range(6))[generated_span(2)] == [1, 2, 3, 4], "logits at 1..4 predict tokens 2..5 of 6"


def test_masked_terms_stay_finite_for_confident_logits(form):
    logits = torch.randn(2, 3, 11) * 100
    assert torch.isfinite(calc_kl_penalty(logits, torch.randn(2, 3, 11) * 100, 1.0, mask=MASK))
    assert torch.isfinite(calc_entropy_bonus(logits, 1.0, mask=MASK))


# The two off-by-ones a completion mask invites, next to MASK (kept: (0,0), (0,1), (1,0)):
EOS_DROPPED = torch.tensor([[True, False, False], [False, False, False]])  # "up to but NOT including EOS"
ONE_PAST = torch.tensor([[True, True, True], [True, True, False]])  # one padding token kept per row
PEAKED = [30.0, -30.0, -30.0]  # a near-deterministic distribution: entropy ~0, KL to uniform ~ln 3


def assert_mask_matters(term, expected, tol=1e-5):
    """term(MASK) is the hand number; ignoring the mask or keeping one token too few/many is not."""
    got = float(term(MASK))
    assert close(got, expected, tol), f"got {got}, expected {expected} (the mean over the 3 kept tokens)"
    for name, wrong in [("the mask was ignored", None), ("EOS itself was dropped", EOS_DROPPED),
                        ("one padding token was kept", ONE_PAST)]:
        assert not close(term(wrong), expected, tol), f"the test data cannot tell the right answer from: {name}"


def test_masked_entropy_and_kl_by_hand(form):
    # kept: (0,0) uniform over 3, (0,1) and (1,0) [1/6, 2/6, 3/6]; every masked position PEAKED
    logits = torch.tensor([[[0.0, 0.0, 0.0], [0.0, LN2, LN3], PEAKED], [[0.0, LN2, LN3], PEAKED, PEAKED]])
    h_uniform = math.log(3)
    h_136 = -(1 / 6 * math.log(1 / 6) + 2 / 6 * math.log(2 / 6) + 3 / 6 * math.log(3 / 6))  # ≈ 1.0114
    assert_mask_matters(lambda m: calc_entropy_bonus(logits, 0.1, mask=m), 0.1 * (h_uniform + 2 * h_136) / 3)

    # KL to a uniform reference: 0 at (0,0); sum p ln(3p) = 1/6 ln(1/2) + 2/6 ln 1 + 3/6 ln(3/2) at (0,1), (1,0)
    kl_136 = 1 / 6 * math.log(1 / 2) + 3 / 6 * math.log(3 / 2)  # ≈ 0.0872
    ref = torch.zeros_like(logits)
    assert_mask_matters(lambda m: calc_kl_penalty(logits, ref, 2.0, mask=m), 2.0 * (0 + 2 * kl_136) / 3)


def test_masked_value_loss_and_diagnostics_distinguish_off_by_one(form):
    values = torch.tensor([[1.0, 2.0, 9.0], [0.0, 9.0, 9.0]])
    returns = torch.tensor([[2.0, 0.0, -9.0], [3.0, -9.0, -9.0]])
    # kept errors 1, 2, 3 → ½·0.3·(1 + 4 + 9)/3 = 0.7
    assert_mask_matters(lambda m: calc_value_fn_loss(values, returns, 0.3, mask=m), 0.7)
    lp, old = torch.tensor([[0.5, 0.0, 9.0], [0.0, 9.0, 9.0]]), torch.zeros(2, 3)  # kept ratios e^0.5, 1, 1
    assert_mask_matters(lambda m: calc_clip_fraction(lp, old, 0.2, mask=m), 1 / 3)  # only e^0.5 ≈ 1.65 is outside
    assert_mask_matters(lambda m: calc_approx_kl(lp, old, mask=m), ((math.exp(0.5) - 1) - 0.5) / 3)


def test_masked_explained_variance_by_hand(form):
    # kept R = [0, 3, 6]: mean 3, population variance (9 + 0 + 9)/3 = 6
    # kept V = [1, 3, 4]: R - V = [-1, 0, 2], mean 1/3, variance ((4/3)² + (1/3)² + (5/3)²)/3 = 14/9
    # EV = 1 - (14/9)/6 = 20/27. After EOS the returns are filler with R = V (advantage 0), which
    # would flatter the value head if counted.
    returns = torch.tensor([[0.0, 3.0, 50.0], [6.0, -50.0, -50.0]])
    values = torch.tensor([[1.0, 3.0, 50.0], [4.0, -50.0, -50.0]])
    assert_mask_matters(lambda m: explained_variance(values, returns, mask=m), 20 / 27)
    assert explained_variance(values, returns) > 0.99, "unmasked, the perfectly 'predicted' filler dominates"


def test_masked_mean_and_sequence_log_probs_distinguish_off_by_one():
    x = torch.tensor([[1.0, 2.0, 100.0], [6.0, -50.0, 7.0]])
    assert_mask_matters(lambda m: masked_mean(x, m), (1 + 2 + 6) / 3)
    lp = torch.tensor([[-1.0, -2.0, -4.0], [-0.5, -8.0, -16.0]])
    expected = torch.tensor([-1.0 + -2.0, -0.5])  # sum over each row's kept tokens
    assert torch.equal(sequence_log_probs(lp, MASK), expected), "a sum over the kept tokens, not a mean"
    assert not torch.equal(sequence_log_probs(lp, EOS_DROPPED), expected), "the EOS token's log-prob counts"
    assert not torch.equal(sequence_log_probs(lp, ONE_PAST), expected)


def test_sequence_log_probs_gradient_is_the_mask_even_with_minus_inf_padding():
    lp = torch.tensor([[-1.0, -2.0, -float("inf")], [-0.5, -float("inf"), -float("inf")]], requires_grad=True)
    assert torch.isnan((lp * MASK).sum(-1)).any(), "why `where`: -inf * 0 = NaN"
    sequence_log_probs(lp, MASK).sum().backward()
    assert torch.equal(lp.grad, MASK.float()), "d/d logprob_t of sum_t mask_t logprob_t is mask_t (0, not NaN, on padding)"


def test_masked_whiten_by_hand():
    # kept [1, 3, 5]: mean 3, Bessel std sqrt((4 + 0 + 4)/2) = 2 → [-1, 0, 1]; masked → 0
    x = torch.tensor([[1.0, 3.0, 1000.0], [5.0, -1000.0, float("inf")]])
    out = masked_whiten(x, MASK, eps=0.0)
    assert torch.equal(out, torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])), (
        f"got {out.tolist()}: mean and std over the kept tokens only, and 0 at masked ones"
    )
    # one kept token has no spread: 0, not NaN (std of one number), so the step is not lost
    one = masked_whiten(torch.tensor([[4.0, 7.0]]), torch.tensor([[True, False]]), eps=1e-8)
    assert torch.equal(one, torch.zeros(1, 2)), f"got {one.tolist()}"


def test_masked_surrogate_by_hand_with_clipping_and_overflowing_ratios_on_padding():
    # kept advantages [1, 3, 5] → Â = [-1, 0, 1] (as above); kept ratios 1.5, 1.0, 1.5
    #   (0,0) Â = -1, r = 1.5: min(-1.5, -1.2) = -1.5   (moving back is never clipped)
    #   (0,1) Â =  0:          0
    #   (1,0) Â = +1, r = 1.5: min( 1.5,  1.2) =  1.2   (clip binds: no gradient)
    # obj = (-1.5 + 0 + 1.2)/3 = -0.1
    # Padding: advantages 1000 (would dominate mean/std if they leaked) and log r = 100, whose
    # exp overflows float32 to inf — r·0 there would make the gradient NaN.
    log_r = torch.tensor([[math.log(1.5), 0.0, 100.0], [math.log(1.5), 100.0, 100.0]])
    adv = torch.tensor([[1.0, 3.0, 1000.0], [5.0, 1000.0, -1000.0]])

    def objective(mask):
        logprobs = log_r.clone().requires_grad_()
        out = calc_clipped_sur_obj(logprobs, torch.zeros(2, 3), adv, 0.2, mask=mask)
        out.backward()
        return out.detach(), logprobs.grad

    assert_mask_matters(lambda m: objective(m)[0], -0.1)
    _, grad = objective(MASK)
    # d(r Â / 3)/d log r = r Â / 3 where unclipped: (0,0) → 1.5·(-1)/3 = -0.5
    expected = torch.tensor([[-0.5, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.isfinite(grad).all(), "an overflowing ratio on padding must not make the gradient NaN"
    torch.testing.assert_close(grad, expected, atol=1e-6, rtol=0)
    assert (grad[~MASK] == 0).all(), "padding is not an action: no gradient may reach it"


def test_all_true_mask_is_exactly_no_mask(gen):
    logits, ref = torch.randn(4, 6, 11, generator=gen), torch.randn(4, 6, 11, generator=gen)
    lp, old, adv, val, ret = (torch.randn(4, 6, generator=gen) for _ in range(5))
    ones = torch.ones(4, 6, dtype=torch.bool)
    terms = {
        "masked_mean": lambda m: masked_mean(val, m),
        "masked_whiten": lambda m: masked_whiten(adv, m, 1e-8),
        "calc_kl_penalty": lambda m: calc_kl_penalty(logits, ref, 0.3, mask=m),
        "calc_entropy_bonus": lambda m: calc_entropy_bonus(logits, 0.3, mask=m),
        "calc_value_fn_loss": lambda m: calc_value_fn_loss(val, ret, 0.3, mask=m),
        "calc_clipped_sur_obj": lambda m: calc_clipped_sur_obj(lp, old, adv, 0.2, mask=m),
        "calc_clip_fraction": lambda m: torch.tensor(calc_clip_fraction(lp, old, 0.2, mask=m)),
        "calc_approx_kl": lambda m: torch.tensor(calc_approx_kl(lp, old, mask=m)),
        "explained_variance": lambda m: torch.tensor(explained_variance(val, ret, mask=m)),
    }
    for name, term in terms.items():
        assert torch.equal(term(None), term(ones)), f"{name}: keeping every token must change nothing, bit for bit"
    assert torch.equal(sequence_log_probs(lp, ones), lp.sum(-1))
    assert torch.equal(calc_kl_penalty(logits, ref, 0.3), 0.3 * kl_per_token(logits, ref).mean())
    assert torch.equal(calc_entropy_bonus(logits, 0.3), 0.3 * entropy_per_token(logits).mean())


def test_masked_terms_finite_with_zero_gradient_on_padding_for_logits_x100(gen):
    batch, seq_len, d_vocab, prefix_len = 2, 5, 9, 2  # gen_len 3, like MASK
    logits = (torch.randn(batch, seq_len, d_vocab, generator=gen) * 100).requires_grad_()
    ref_logits = torch.randn(batch, seq_len - prefix_len, d_vocab, generator=gen) * 100
    tokens = torch.randint(0, d_vocab, (batch, seq_len), generator=gen)
    span = generated_span(prefix_len)
    logprobs = get_log_probs(logits, tokens, prefix_len)
    old = torch.where(MASK, logprobs.detach() - 1.0, torch.full_like(logprobs, -1000.0))  # padding: r = e^1000
    terms = {
        "calc_kl_penalty": calc_kl_penalty(logits[:, span], ref_logits, 1.0, mask=MASK),
        "calc_entropy_bonus": calc_entropy_bonus(logits[:, span], 1.0, mask=MASK),
        "calc_clipped_sur_obj": calc_clipped_sur_obj(logprobs, old, torch.randn(batch, 3, generator=gen), CLIP, mask=MASK),
        "sequence_log_probs": sequence_log_probs(logprobs, MASK).sum(),
    }
    for name, value in terms.items():
        assert torch.isfinite(value), f"{name} is not finite for logits x 100 under a mask"
        (grad,) = torch.autograd.grad(value, logits, retain_graph=True)
        assert torch.isfinite(grad).all(), f"{name} has a non-finite gradient for logits x 100 under a mask"
        assert (grad[:, span][~MASK] == 0).all(), f"{name}: the logits at padded positions must get no gradient"


def test_the_sync_free_masked_statistics_equal_the_boolean_index(monkeypatch):
    """Σ where(mask, x, 0) / Σ mask and its variance are x[mask]'s mean, std and population variance
    to float rounding, on asymmetric data with huge values at the masked positions; a NaN or inf there
    reaches neither the value nor the gradient (x · mask would give NaN); one kept position whitens
    to 0, not NaN."""
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(5, 7, generator=g) * 3 + 1, torch.randn(5, 7, generator=g)
    mask = torch.rand(5, 7, generator=g) < 0.6
    x[~mask], y[~mask] = 1e4, -1e4
    out = {}
    for form in (False, True):
        monkeypatch.setattr(objectives, "SYNC_FREE", form)
        out[form] = (masked_mean(x, mask), masked_whiten(x, mask, 1e-8), explained_variance(y, x, mask))
    for a, b in zip(out[False], out[True]):
        torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-6)
    assert not torch.equal(out[True][1], masked_whiten(x, None, 1e-8)), "the mask must matter"

    monkeypatch.setattr(objectives, "SYNC_FREE", True)
    poisoned = x.clone().requires_grad_(True)
    with torch.no_grad():
        poisoned[~mask] = float("nan")
        poisoned[0, ~mask[0]] = float("inf")
    mean = masked_mean(poisoned, mask)
    mean.backward()
    assert torch.isfinite(mean) and mean.item() == pytest.approx(x[mask].mean().item(), rel=1e-6)
    assert (poisoned.grad[~mask] == 0).all() and torch.allclose(poisoned.grad[mask], 1.0 / mask.sum().float())
    one = torch.tensor([[False, True, False]])
    assert masked_whiten(torch.tensor([[5.0, 2.0, -7.0]]), one, 1e-8).tolist() == [[0.0, 0.0, 0.0]]
    assert masked_var(torch.tensor([[5.0, 2.0, -7.0]]), ~one, unbiased=True).item() == pytest.approx(72.0)  # (6² + 6²) / 1
