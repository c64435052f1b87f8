"""The vocabulary terms on a Qwen2-sized vocabulary: a Qwen2 folder with the real vocabulary
(151,936 rows, as Qwen2 and Qwen2.5 ship) but 2 layers of width 64 (`model_families.build_folder(...,
vocab_size=)`), loaded as `--model FOLDER` loads it. Only what grows with the vocabulary is large: the
tied unembedding is 64 × 151,936 (39 MB), so this runs in seconds.

Checked: the default chunk holds 2^21 // 151,936 = 13 positions (7.9 MB of float32 logits, not one
row, not all); `token_terms` with the model's own unembedding equals autograd on the whole logits,
chunked and unchunked, values and gradients, with targets at the end of the vocabulary; and one PPO
learning step on the model gives the objective and gradient of the unchunked computation.

Which bug turns each red: the chunk computed from d_model or rounded up (a chunk of 8 MiB · 64 or
more than 8 MiB); a chunk boundary that shifts rows or drops the short last chunk; a gather or
scatter that loses ids past 2^16 or past the tokenizer's 8,192 entries; a term whose gradient is
wrong only when the distribution is not near uniform (W_U is scaled up so that it is not).
"""

import pytest
import torch

from rlhf_scratch.core import vocab_terms
from rlhf_scratch.core.objectives import entropy_per_token, gather_log_probs, kl_per_token, temperature_scaled
from rlhf_scratch.core.vocab_terms import LOGITS_PER_CHUNK, Unembedding, token_terms, unembedding
from rlhf_scratch.models.fast_forward import final_hidden

QWEN2_VOCAB = 151_936  # Qwen2 / Qwen2.5 config.json's vocab_size
CHUNK_ROWS = LOGITS_PER_CHUNK // QWEN2_VOCAB  # 13

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def qwen_vocab_folder(tmp_path_factory):
    from rlhf_scratch.models.families import build_folder

    return build_folder("qwen2", tmp_path_factory.mktemp("qwen2_vocab") / "model", vocab_size=QWEN2_VOCAB)


@pytest.fixture(scope="module")
def qwen_vocab_lm(qwen_vocab_folder, one_thread):
    from rlhf_scratch.models.loading import load_lm

    return load_lm(str(qwen_vocab_folder)).eval()


@pytest.fixture
def recorded_chunks(monkeypatch):
    """The rows of every chunk `token_terms` makes logits for, forward (backward recomputes the same)."""
    chunk_forward, seen = vocab_terms._chunk_forward, []

    def recording(hidden, *rest):
        seen.append(hidden.shape[0])
        return chunk_forward(hidden, *rest)

    monkeypatch.setattr(vocab_terms, "_chunk_forward", recording)
    return seen


def test_the_folder_has_qwen2s_vocabulary_and_the_default_chunk_is_13_rows(qwen_vocab_lm):
    """13 rows × 151,936 × 4 B = 7.9 MB ≤ 8 MiB, and a 14th row would pass it."""
    lm = qwen_vocab_lm
    assert lm.cfg.d_vocab == QWEN2_VOCAB and tuple(lm.W_U.shape) == (lm.cfg.d_model, QWEN2_VOCAB) == (64, QWEN2_VOCAB)
    assert lm.cfg.original_architecture == "Qwen2ForCausalLM"
    assert CHUNK_ROWS == 13
    assert CHUNK_ROWS * QWEN2_VOCAB * 4 <= 8 * 2**20 < (CHUNK_ROWS + 1) * QWEN2_VOCAB * 4


def autograd_terms(hidden, unembed, ref_hidden, ref_unembed, targets, T):
    """The terms by objectives.py's formulas on the whole [rows, V] logits, differentiable by autograd."""
    z = temperature_scaled((hidden @ unembed.W_U + unembed.b_U)[None], T)
    z_ref = temperature_scaled((ref_hidden @ ref_unembed.W_U + ref_unembed.b_U)[None], T)
    lp, lq = z.log_softmax(-1), z_ref.log_softmax(-1)
    return {"logprobs": gather_log_probs(lp, targets[None])[0],
            "entropy": entropy_per_token(lp, from_logprobs=True)[0],
            "kl": kl_per_token(lp, lq, from_logprobs=True)[0],
            "ref_logprobs": gather_log_probs(lq, targets[None])[0]}


def test_token_terms_with_the_models_own_unembedding_equal_autograd(qwen_vocab_lm, recorded_chunks):
    """30 positions of the model's own ĥ (3 sequences of 10) through its own W_U and b_U — scaled up
    10x, so that π is far from uniform (a random init's logits have std ~0.2: entropy within 0.03 of
    ln V, where a wrong term hides) — and a perturbed copy as the reference, at T = 0.7.

    The default chunks (13 + 13 + 4 rows) give the numbers and gradients of one chunk (chunk 0) to
    float32 rounding, and both equal objectives.py's formulas on the whole logits differentiated by
    autograd in float64: the terms, and the gradients w.r.t. ĥ, W_U and b_U of a per-row-weighted
    sum. Tolerances are float32's over 151,936 entries: H and KL are one float32 dot product per row
    (`_rowdot`), measured within 5.1e-4 nats of float64 on entropies of 0.2-9.4 (relative 5e-5;
    autograd's float32 summation: 6e-5 nats), and the gradients within 3e-5 of their largest entry
    (autograd in float32: 1.6e-5) — hence rtol 1e-4 on the terms and 1e-4 of the largest entry on
    each gradient. A wrong term, row or chunk is off by far more."""
    lm = qwen_vocab_lm
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, QWEN2_VOCAB, (3, 10), generator=g)
    with torch.no_grad():
        hidden = final_hidden(lm, ids).flatten(0, 1)
    own = unembedding(lm)
    W_U = (10 * own.W_U.detach()).requires_grad_(True)
    b_U = (own.b_U.detach() + 0.1 * torch.randn(QWEN2_VOCAB, generator=g)).requires_grad_(True)
    unembed = Unembedding(W_U, b_U)
    ref_unembed = Unembedding(W_U.detach() + 0.1 * torch.randn(W_U.shape, generator=g), b_U.detach())
    ref_hidden = hidden + 0.1 * torch.randn(hidden.shape, generator=g)
    hidden.requires_grad_(True)
    targets = torch.randint(0, QWEN2_VOCAB, (30,), generator=g)
    targets[:6] = torch.tensor([QWEN2_VOCAB - 1, QWEN2_VOCAB - 2, 151_643, 2**16, 2**16 + 1, 8_192])
    weights = torch.linspace(-2.0, 3.0, 30, dtype=torch.float64)
    params = (hidden, W_U, b_U)

    def loss(t):
        return (weights * (t["logprobs"] + 0.3 * t["entropy"] - 0.7 * t["kl"]).double()).sum()

    exact_params = [x.detach().double().requires_grad_(True) for x in params]
    exact = autograd_terms(exact_params[0], Unembedding(*exact_params[1:]), ref_hidden.double(),
                           Unembedding(ref_unembed.W_U.double(), ref_unembed.b_U.double()), targets, 0.7)
    exact_grads = torch.autograd.grad(loss(exact), exact_params)
    assert exact["entropy"].max() < torch.log(torch.tensor(float(QWEN2_VOCAB))) - 1, "π must be far from uniform"
    assert exact["kl"].min() > 1e-3, "the reference must differ, so that the KL and its gradient are not ~0"
    results = {}
    for chunk_logits, chunks in ((LOGITS_PER_CHUNK, [13, 13, 4]), (0, [30])):
        recorded_chunks.clear()
        out = token_terms(hidden, unembed, targets, 0.7, ref_hidden=ref_hidden, ref_unembed=ref_unembed,
                          with_entropy=True, chunk_logits=chunk_logits)
        assert recorded_chunks == chunks, f"chunk_logits={chunk_logits}: rows per chunk {recorded_chunks}"
        got = {name: getattr(out, name) for name in exact}
        for name in exact:
            torch.testing.assert_close(got[name].double(), exact[name].detach(), rtol=1e-4, atol=1e-5,
                                       msg=lambda m, name=name, c=chunk_logits: f"{name}, chunk_logits {c}: {m}")
        grads = torch.autograd.grad(loss(got), params)
        for name, grad, want in zip(("ĥ", "W_U", "b_U"), grads, exact_grads):
            error, scale = (grad.double() - want).abs().max().item(), want.abs().max().item()
            assert error <= 1e-4 * scale, f"∂/∂{name}, chunk_logits {chunk_logits}: off by {error:.2e} of {scale:.2f}"
        results[chunk_logits] = [*got.values(), *grads]
    # chunked against whole: the same sums in another order, so float32's rounding of sums over the
    # 151,936-entry vocabulary: ∂/∂ĥ differed by 2.98e-5 where its largest entry is 3.82 (8e-6 of it) on
    # the 2026-11-28 machine's BLAS, within 1e-6 absolute on an earlier one; the other terms by ≤ 1.9e-6.
    # Held to 1e-5 of each tensor's largest entry: a wrong chunk or row is off by a whole entry.
    for chunked, whole in zip(results[LOGITS_PER_CHUNK], results[0]):
        error, scale = (chunked - whole).abs().max().item(), whole.abs().max().item()
        assert error <= 1e-5 * scale, f"chunked and whole differ by {error:.2e} of {scale:.2e}"


@pytest.mark.slow
def test_a_ppo_learning_step_on_a_qwen2_vocabulary(qwen_vocab_folder, recorded_chunks):
    """PPO on the model (batch 4, 5 tokens: 20 positions): a rollout, then the minibatch objective in
    the default chunks (13 + 7 rows) equals the unchunked one (J and ∂J/∂W_U, with a KL > 0 to the
    reference), and the learning phase takes its optimizer step: finite metrics, W_U moved."""
    from rlhf_scratch.algorithms.ppo import RLHFTrainer
    from rlhf_scratch.config import make_args
    from rlhf_scratch.core.memory import ReplayMemory

    torch.manual_seed(0)
    args = make_args("tiny", "ppo", model=str(qwen_vocab_folder), task="sentiment", total_phases=1, batch_size=4,
                     num_minibatches=1, gen_len=5, warmup_steps=0, threads=1, save_every=0, save_model=False,
                     beta=0.5)
    assert args.logits_per_chunk("cpu") == LOGITS_PER_CHUNK  # the default (-1, auto) on a CPU
    trainer = RLHFTrainer(args, quiet=True)
    assert trainer.lm.cfg.d_vocab == QWEN2_VOCAB
    with torch.no_grad():  # a policy that differs from the reference, so the KL has a gradient
        for p in trainer.policy.base.parameters():
            p.add_(0.05 * torch.randn_like(p))
    rollout = trainer.rollout_phase()
    assert bool(torch.isfinite(rollout.logprobs).all()) and bool(torch.isfinite(rollout.kl).all())
    advantages = trainer.rollout_advantages(rollout)
    memory = ReplayMemory(rollout.sample_ids, rollout.attention_mask, rollout.completion_mask, rollout.logprobs,
                          advantages, rollout.values, 1, 1, ref_hidden=rollout.ref_hidden)
    mb = next(iter(memory.get_minibatches()))
    results = {}
    for chunk_logits in (LOGITS_PER_CHUNK, 0):
        trainer.args.chunk_logits = chunk_logits
        recorded_chunks.clear()
        total, stats = trainer.minibatch_objective(mb, rollout.temperature)
        results[chunk_logits] = (total, stats, torch.autograd.grad(total, trainer.policy.base.W_U)[0])
        assert recorded_chunks == ([13, 7] if chunk_logits else [20]), recorded_chunks
    trainer.args.chunk_logits = LOGITS_PER_CHUNK
    (chunked, stats, grad), (whole, _, whole_grad) = results[LOGITS_PER_CHUNK], results[0]
    assert stats["losses/kl_penalty"] > 1e-4
    assert chunked.item() == pytest.approx(whole.item(), rel=1e-5, abs=1e-6)
    torch.testing.assert_close(grad, whole_grad, rtol=1e-4, atol=1e-7)
    assert grad.abs().max() > 0
    before = trainer.policy.base.W_U.detach().clone()
    learned = trainer.learning_phase(rollout)
    assert all(torch.isfinite(torch.tensor(float(v))) for v in learned.values()), learned
    assert (trainer.policy.base.W_U - before).abs().max() > 0, "the optimizer step moved the unembedding"
