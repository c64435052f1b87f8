"""token_terms: the vocabulary-wide per-position terms a chunk at a time — the same numbers and
gradients as all at once, by hand on a small case, and nothing [rows, d_vocab] kept for backward."""

import math

import pytest
import torch

from rlhf_scratch.core.objectives import entropy_per_token, gather_log_probs, kl_per_token, temperature_scaled
from rlhf_scratch.core.vocab_terms import LOGITS_PER_CHUNK, TokenTerms, Unembedding, token_terms

ROWS, D, V = 7, 3, 5


def identity(d_vocab):
    return Unembedding(torch.eye(d_vocab), torch.zeros(d_vocab))


def setup(seed=0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(ROWS, D, generator=gen, requires_grad=True)
    unembed = Unembedding((torch.randn(D, V, generator=gen) * 2).requires_grad_(True),
                          torch.randn(V, generator=gen).requires_grad_(True))
    ref_hidden = torch.randn(ROWS, D, generator=gen)
    ref_unembed = Unembedding(torch.randn(D, V, generator=gen) * 2, torch.randn(V, generator=gen))
    targets = torch.tensor([0, 4, 1, 3, 2, 4, 0])  # distinct per row, so a shifted row shows
    return hidden, unembed, ref_hidden, ref_unembed, targets


def autograd_reference(hidden, unembed, ref_hidden, ref_unembed, targets, T):
    """The same terms by objectives.py's formulas on whole [rows, V] logits, differentiated by autograd."""
    logits = (hidden @ unembed.W_U + unembed.b_U)[None]
    ref_logits = (ref_hidden @ ref_unembed.W_U + ref_unembed.b_U)[None]
    z, z_ref = temperature_scaled(logits, T), temperature_scaled(ref_logits, T)
    lp, lq = z.log_softmax(-1), z_ref.log_softmax(-1)
    return TokenTerms(gather_log_probs(lp, targets[None])[0], entropy_per_token(lp, from_logprobs=True)[0],
                      kl_per_token(lp, lq, from_logprobs=True)[0], gather_log_probs(lq, targets[None])[0])


def test_the_terms_by_hand_on_one_position():
    """logits [ln 3, 0] (π = [¾, ¼]), reference [0, 0] (½, ½), target 1, T = 1."""
    ln = math.log
    out = token_terms(torch.tensor([[ln(3.0), 0.0]]), identity(2), torch.tensor([1]), ref_hidden=torch.zeros(1, 2),
                      ref_unembed=identity(2), with_entropy=True)
    assert out.logprobs.item() == pytest.approx(ln(0.25))
    assert out.entropy.item() == pytest.approx(-(0.75 * ln(0.75) + 0.25 * ln(0.25)))
    assert out.kl.item() == pytest.approx(0.75 * ln(0.75 / 0.5) + 0.25 * ln(0.25 / 0.5)), "KL(π ‖ π_ref), not KL(π_ref ‖ π)"
    assert out.ref_logprobs.item() == pytest.approx(ln(0.5))
    at_half = token_terms(torch.tensor([[ln(3.0), 0.0]]), identity(2), torch.tensor([1]), temperature=0.5)
    assert at_half.logprobs.item() == pytest.approx(ln(0.1)), "softmax([2 ln 3, 0]) = [0.9, 0.1]"


def test_the_hand_written_gradients_by_hand_on_one_position():
    """z = [ln 3, 0], π = [¾, ¼], reference uniform, target 1, T = 1:
    ∂log π_1/∂z = e_1 − π = [−¾, ¾];  ∂H/∂z = −π (log π + H);  ∂KL/∂z = π (log π − log q − KL)."""
    ln = math.log
    z = torch.tensor([[ln(3.0), 0.0]], requires_grad=True)
    p, logp = torch.tensor([0.75, 0.25]), torch.tensor([ln(0.75), ln(0.25)])
    h = -(p * logp).sum()
    kl = (p * (logp - ln(0.5))).sum()
    for term, want in (("logprobs", torch.tensor([-0.75, 0.75])), ("entropy", -p * (logp + h)),
                       ("kl", p * (logp - ln(0.5) - kl))):
        out = token_terms(z, identity(2), torch.tensor([1]), ref_hidden=torch.zeros(1, 2), ref_unembed=identity(2),
                          with_entropy=True)
        grad, = torch.autograd.grad(getattr(out, term).sum(), z)
        torch.testing.assert_close(grad[0], want.float(), msg=term)


@pytest.mark.parametrize("chunk_logits", [V, 2 * V, 3 * V, 0])
def test_chunks_give_the_numbers_and_gradients_of_autograd_on_the_formulas(chunk_logits):
    """1, 2 or 3 positions per chunk (7 rows: the last chunk is short) or all in one: the terms
    and the gradients w.r.t. ĥ, W_U and b_U of autograd on objectives.py's formulas, at T = 0.7."""
    hidden, unembed, ref_hidden, ref_unembed, targets = setup()
    weights = torch.tensor([1.0, -2.0, 0.5, 3.0, -1.0, 2.0, 0.25])  # a different weight per row
    params = (hidden, unembed.W_U, unembed.b_U)

    def loss(t):
        return (weights * (t.logprobs + 0.3 * t.entropy - 0.7 * t.kl)).sum()

    want = autograd_reference(hidden, unembed, ref_hidden, ref_unembed, targets, 0.7)
    got = token_terms(hidden, unembed, targets, 0.7, ref_hidden=ref_hidden, ref_unembed=ref_unembed, with_entropy=True,
                      chunk_logits=chunk_logits)
    for name in ("logprobs", "entropy", "kl", "ref_logprobs"):
        torch.testing.assert_close(getattr(got, name), getattr(want, name), msg=name)
    for g, w in zip(torch.autograd.grad(loss(got), params), torch.autograd.grad(loss(want), params)):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("chunk_logits", [2 * V, 0])
@pytest.mark.parametrize("ref_bias", [True, False])
def test_the_kept_reference_logsumexp_gives_the_terms_without_the_references_logits(chunk_logits, ref_bias):
    """The rollout keeps logsumexp(z_ref) (`TokenTerms.ref_lse`); given it back, the KL is
    Σ p log p − E_p[z_ref] + logsumexp(z_ref) with no z_ref made: the numbers and gradients of autograd
    on the formulas, with the reference's bias (a rank-one term) and without it, at T = 0.7."""
    hidden, unembed, ref_hidden, ref_unembed, targets = setup(4)
    if not ref_bias:
        ref_unembed = Unembedding(ref_unembed.W_U, torch.zeros(V))
    want = autograd_reference(hidden, unembed, ref_hidden, ref_unembed, targets, 0.7)
    first = token_terms(hidden.detach(), unembed, targets, 0.7, ref_hidden=ref_hidden, ref_unembed=ref_unembed)
    z_ref = (ref_hidden @ ref_unembed.W_U + ref_unembed.b_U) / 0.7
    torch.testing.assert_close(first.ref_lse, z_ref.logsumexp(-1))
    got = token_terms(hidden, unembed, targets, 0.7, ref_hidden=ref_hidden, ref_unembed=ref_unembed,
                      ref_lse=first.ref_lse, with_entropy=True, chunk_logits=chunk_logits)
    for name in ("logprobs", "entropy", "kl", "ref_logprobs"):
        torch.testing.assert_close(getattr(got, name), getattr(want, name), msg=name)
    weights = torch.tensor([1.0, -2.0, 0.5, 3.0, -1.0, 2.0, 0.25])
    params = (hidden, unembed.W_U, unembed.b_U)
    for g, w in zip(torch.autograd.grad((weights * (got.logprobs - 0.7 * got.kl)).sum(), params),
                    torch.autograd.grad((weights * (want.logprobs - 0.7 * want.kl)).sum(), params)):
        # −gK log q is added as −gK z_ref + gK logsumexp(z_ref): float32 rounding of two terms of size |z_ref|
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    wrong = token_terms(hidden, unembed, targets, 0.7, ref_hidden=ref_hidden, ref_unembed=ref_unembed,
                        ref_lse=first.ref_lse + 0.1)
    torch.testing.assert_close(wrong.kl, want.kl + 0.1)  # a stale logsumexp moves the KL by exactly its error


def test_a_reference_logsumexp_without_the_reference_is_refused():
    hidden, unembed, _, _, targets = setup(5)
    with pytest.raises(ValueError, match="ref_hidden is missing"):
        token_terms(hidden, unembed, targets, ref_lse=torch.zeros(ROWS))


@pytest.mark.parametrize("term", ["logprobs", "entropy", "kl"])
def test_each_terms_gradient_alone(term):
    """One term at a time (the others' gradients zero), so a sign or a missing term in one fails."""
    hidden, unembed, ref_hidden, ref_unembed, targets = setup(3)
    want = autograd_reference(hidden, unembed, ref_hidden, ref_unembed, targets, 1.3)
    got = token_terms(hidden, unembed, targets, 1.3, ref_hidden=ref_hidden, ref_unembed=ref_unembed, with_entropy=True,
                      chunk_logits=2 * V)
    weights = torch.arange(1.0, ROWS + 1)
    g, = torch.autograd.grad((weights * getattr(got, term)).sum(), hidden)
    w, = torch.autograd.grad((weights * getattr(want, term)).sum(), hidden)
    torch.testing.assert_close(g, w)


def test_log_probs_alone_take_the_logsumexp_form():
    hidden, unembed, _, _, targets = setup(1)
    out = token_terms(hidden, unembed, targets, 1.3, chunk_logits=2 * V)
    z = (hidden @ unembed.W_U + unembed.b_U) / 1.3
    torch.testing.assert_close(out.logprobs, z.log_softmax(-1)[torch.arange(ROWS), targets])
    assert out.entropy is None and out.kl is None and out.ref_logprobs is None
    g, = torch.autograd.grad(out.logprobs.sum(), hidden)
    w, = torch.autograd.grad(z.log_softmax(-1)[torch.arange(ROWS), targets].sum(), hidden)
    torch.testing.assert_close(g, w)


def saved_for_backward(fn) -> list[tuple[int, ...]]:
    """Shapes of what autograd keeps for backward while `fn()` runs."""
    shapes = []

    def pack(t):
        shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return shapes


def test_no_rows_by_vocabulary_tensor_is_kept_for_backward():
    """token_terms keeps ĥ, W_U and per-row numbers — nothing [rows, d_vocab]; autograd on the
    formulas keeps several (which this check sees, so it can fail)."""
    hidden, unembed, ref_hidden, ref_unembed, targets = setup(2)
    kw = dict(ref_hidden=ref_hidden, ref_unembed=ref_unembed, with_entropy=True)

    def rows_by_vocab(shapes):
        return [s for s in shapes if s[-1:] == (V,) and len(s) >= 2 and s[-2] == ROWS]

    assert rows_by_vocab(saved_for_backward(lambda: autograd_reference(hidden, unembed, ref_hidden, ref_unembed, targets, 1.0)))
    assert not rows_by_vocab(saved_for_backward(lambda: token_terms(hidden, unembed, targets, chunk_logits=0, **kw)))


def test_terms_of_flattened_rows_reshaped_are_the_terms_at_each_batch_position():
    """PPO scores [batch, gen_len] positions as flattened rows and reshapes the terms back. Each
    reshaped term at [b, t] must be log_softmax / entropy / KL computed directly on the [2, 3, V]
    logits at [b, t] (batch 2 ≠ gen_len 3, a different target per position).

    Red if: `reshape` permutes or drops a field (the terms differ per position and per field), the
    rows come back transposed (column-major, or reshape(3, 2).T), or a term is of the wrong row."""
    gen = torch.Generator().manual_seed(4)
    logits, ref_logits = torch.randn(2, 3, V, generator=gen) * 2, torch.randn(2, 3, V, generator=gen) * 2
    targets = torch.tensor([[0, 4, 1], [3, 2, 4]])
    got = token_terms(logits.flatten(0, 1), identity(V), targets.flatten(), ref_hidden=ref_logits.flatten(0, 1),
                      ref_unembed=identity(V), with_entropy=True).reshape(*targets.shape)
    lp, lq = logits.log_softmax(-1), ref_logits.log_softmax(-1)
    want = {"logprobs": lp.gather(-1, targets[..., None])[..., 0], "entropy": -(lp.exp() * lp).sum(-1),
            "kl": (lp.exp() * (lp - lq)).sum(-1), "ref_logprobs": lq.gather(-1, targets[..., None])[..., 0]}
    for name, value in want.items():
        assert getattr(got, name).shape == (2, 3), name
        torch.testing.assert_close(getattr(got, name), value, msg=name)
    alone = token_terms(logits.flatten(0, 1), identity(V), targets.flatten()).reshape(*targets.shape)
    torch.testing.assert_close(alone.logprobs, want["logprobs"])
    assert alone.entropy is None and alone.kl is None and alone.ref_logprobs is None, "a term not asked for stays None"


@pytest.mark.parametrize("d_vocab, rows, chunks", [(8192, 300, [256, 44]), (50257, 50, [41, 9])])
def test_the_default_chunk_is_8_mib_of_float32_logits(monkeypatch, d_vocab, rows, chunks):
    """Both defaults — `--chunk-logits` (config, -1: auto, on a CPU) and `token_terms`' own — are 8 MiB of float32 logits,
    8 · 2^20 B / 4 B = 2^21, so a chunk holds 2^21 // d_vocab positions: 256 at the tiny preset's
    V = 8,192 (300 rows: chunks of 256 and 44), 41 at GPT-2's 50,257 (50 rows: 41 and 9).

    Red if: either default moves from the documented 8 MiB (the two drifting apart included), or
    the rows per chunk are not chunk_logits // d_vocab (e.g. divided by d_model, or rounded up)."""
    from rlhf_scratch.config import make_args
    from rlhf_scratch.core import vocab_terms

    chunk_forward, seen = vocab_terms._chunk_forward, []

    def recording(hidden, *rest):
        seen.append(hidden.shape[0])
        return chunk_forward(hidden, *rest)

    monkeypatch.setattr(vocab_terms, "_chunk_forward", recording)
    hidden, targets = torch.randn(rows, 2), torch.arange(rows) % d_vocab
    unembed = Unembedding(torch.randn(2, d_vocab), torch.zeros(d_vocab))
    for chunk_logits in (make_args().logits_per_chunk("cpu"), LOGITS_PER_CHUNK, None):
        seen.clear()
        kw = {} if chunk_logits is None else {"chunk_logits": chunk_logits}
        assert chunk_logits is None or chunk_logits * 4 == 8 * 2**20, f"{chunk_logits} float32 logits are not 8 MiB"
        token_terms(hidden, unembed, targets, **kw)
        assert seen == chunks, f"chunk_logits={chunk_logits or 'default'}: chunks of {seen} rows, expected {chunks}"


def test_ppo_objective_from_the_kept_reference_equals_a_reference_forward():
    """PPO's KL from ĥ_ref and logsumexp(z_ref) kept by the rollout (--cache-ref-logprobs, the
    default: no reference logits made in the learning phase), from ĥ_ref alone, and from a reference
    forward per minibatch (--no-cache-ref-logprobs): the same J and gradient."""
    from rlhf_scratch.algorithms.ppo import RLHFTrainer
    from rlhf_scratch.config import make_args
    from rlhf_scratch.core.memory import ReplayMemory

    torch.manual_seed(0)
    args = make_args("tiny", "ppo", task="sentiment", total_phases=1, batch_size=8, num_minibatches=2, gen_len=6,
                     threads=1, save_every=0, save_model=False, kl_coef=0.5, temperature=0.8)
    trainer = RLHFTrainer(args, quiet=True)
    with torch.no_grad():  # a policy that differs from the reference, so the KL has a gradient
        for p in trainer.policy.base.parameters():
            p.add_(0.05 * torch.randn_like(p))
    rollout = trainer.rollout_phase()
    assert rollout.ref_hidden.shape == (8, 6, trainer.ref_model.cfg.d_model)
    assert rollout.ref_lse.shape == (8, 6)
    advantages = trainer.rollout_advantages(rollout)

    def first_minibatch(ref_hidden, ref_lse=None):
        memory = ReplayMemory(rollout.sample_ids, rollout.attention_mask, rollout.completion_mask, rollout.logprobs,
                              advantages, rollout.values, 2, 1, ref_hidden=ref_hidden, ref_lse=ref_lse)
        torch.manual_seed(1)
        return next(iter(memory.get_minibatches()))

    runs = [trainer.minibatch_objective(first_minibatch(*kept), rollout.temperature)
            for kept in ((rollout.ref_hidden, rollout.ref_lse), (rollout.ref_hidden,), (None,))]
    assert runs[0][1]["losses/kl_penalty"] > 1e-4
    grads = [torch.autograd.grad(j, trainer.policy.base.W_U)[0] for j, _ in runs]
    for (_, stats), grad in zip(runs[1:], grads[1:]):
        assert runs[0][1]["losses/kl_penalty"] == pytest.approx(stats["losses/kl_penalty"], rel=1e-4)
        torch.testing.assert_close(grads[0], grad, rtol=1e-4, atol=1e-6)
