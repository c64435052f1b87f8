"""PPO: the objective the trainer ascends, by hand (a short run on the tiny preset: tests/integration/test_ppo_run.py)."""

import math

import pytest
import torch

from rlhf_scratch.algorithms.ppo import PPO_METRICS, RLHFTrainer, compute_rlhf_objective
from rlhf_scratch.commands.train import main
from rlhf_scratch.config import make_args
from rlhf_scratch.core.memory import ReplayMinibatch
from rlhf_scratch.core.vocab_terms import Unembedding
from rlhf_scratch.engine.loop import SHARED_METRICS

PHASE_METRICS = SHARED_METRICS + PPO_METRICS


def objective(logits, values, ref_logits, mb, args, beta):
    """`compute_rlhf_objective` with the logits themselves as ĥ (an identity unembedding) and
    the reference's at the generated span, as the rollout keeps ĥ_ref."""
    span = slice(mb.sample_ids.shape[1] - mb.logprobs.shape[1] - 1, -1)
    d_vocab = logits.shape[-1]
    identity = Unembedding(torch.eye(d_vocab), torch.zeros(d_vocab))
    return compute_rlhf_objective(logits, values, ref_logits[:, span], mb, args, beta, args.temperature, identity, identity)


def test_compute_rlhf_objective_by_hand():
    """J = L_clip − value loss + entropy bonus − KL penalty on a fixed 2-sample minibatch.

    prefix_len 2, gen_len 2, vocab 2: logits at positions 1 and 2 predict the two completion
    tokens. Positions 0 and 3 hold extreme logits and values, so a span shifted by one token
    changes every term; the masked token (row 1, t = 1) holds an extreme advantage and return,
    so an ignored mask changes them too.
    """
    ln = math.log
    logits = torch.tensor([[5.0, -5.0], [0.0, 0.0], [ln(3.0), 0.0], [-5.0, 5.0]]).repeat(2, 1, 1)
    ref_logits = torch.tensor([[2.0, -2.0], [0.0, 0.0], [0.0, 0.0], [-3.0, 3.0]]).repeat(2, 1, 1)
    values = torch.tensor([[9.0, 1.0, 2.0, 9.0], [9.0, 0.5, 0.0, 9.0]])
    # log π of the completion tokens: position 1 is uniform (ln ½), position 2 gives token 0 ln ¾
    sample_ids = torch.tensor([[0, 0, 0, 0], [0, 0, 1, 0]])
    # ratios r = π/π_old = [[1, 1.5], [0.5, 1]]  →  π_old = π / r
    old_logprobs = torch.tensor([[ln(0.5), ln(0.75) - ln(1.5)], [ln(0.5) - ln(0.5), ln(0.75)]])
    mb = ReplayMinibatch(
        sample_ids=sample_ids,
        attention_mask=torch.ones(2, 4, dtype=torch.bool),
        completion_mask=torch.tensor([[True, True], [True, False]]),
        logprobs=old_logprobs,
        advantages=torch.tensor([[1.0, 3.0], [-1.0, 99.0]]),
        returns=torch.tensor([[1.5, 2.0], [1.5, 7.0]]),
    )
    args = make_args(clip_coef=0.2, vf_coef=0.2, ent_coef=0.01)
    total, terms = objective(logits, values, ref_logits, mb, args, beta=0.5)

    # kept advantages [1, 3, -1]: mean 1, std (n-1) 2 → Â = [0, 1, -1]
    # min(r Â, clip(r, 0.8, 1.2) Â): [min(0, 0), min(1.5, 1.2), min(-0.5, -0.8)] = [0, 1.2, -0.8]
    clipped_surrogate = (0.0 + 1.2 - 0.8) / 3
    # V at positions 1, 2 minus the returns, kept: [-0.5, 0, -1]
    value_loss = 0.5 * 0.2 * (0.25 + 0.0 + 1.0) / 3
    h_uniform = ln(2.0)
    h_34 = -(0.75 * ln(0.75) + 0.25 * ln(0.25))
    entropy_bonus = 0.01 * (h_uniform + h_34 + h_uniform) / 3
    kl_34 = 0.75 * ln(0.75 / 0.5) + 0.25 * ln(0.25 / 0.5)  # KL([¾, ¼] ‖ [½, ½]); 0 at the uniform position
    kl_penalty = 0.5 * (0.0 + kl_34 + 0.0) / 3
    expected = {"clipped_surrogate": clipped_surrogate, "value_loss": value_loss,
                "entropy_bonus": entropy_bonus, "kl_penalty": kl_penalty}
    for name, value in expected.items():
        assert terms[name].item() == pytest.approx(value, abs=1e-6), f"{name}: got {terms[name].item()}, expected {value}"
    j = clipped_surrogate - value_loss + entropy_bonus - kl_penalty
    assert total.item() == pytest.approx(j, abs=1e-6), (
        f"J = L_clip − value_loss + entropy_bonus − kl_penalty = {j}; got {total.item()} (a sign flipped?)"
    )

    # One position per chunk (chunk_logits = d_vocab): the same J and the same gradient as every
    # position at once, so the chunks line up with their rows and the recomputation is exact.
    logits.requires_grad_(True)
    whole = make_args(clip_coef=0.2, vf_coef=0.2, ent_coef=0.01, chunk_logits=0)
    grad_whole, = torch.autograd.grad(objective(logits, values, ref_logits, mb, whole, 0.5)[0], logits)
    total_chunked, _ = objective(logits, values, ref_logits, mb, make_args(clip_coef=0.2, vf_coef=0.2, ent_coef=0.01, chunk_logits=2), 0.5)
    assert total_chunked.item() == pytest.approx(j, abs=1e-6)
    grad_chunked, = torch.autograd.grad(total_chunked, logits)
    torch.testing.assert_close(grad_chunked, grad_whole)
    assert grad_whole[:, [0, 3]].abs().sum() == 0, "only the generated span's logits carry gradient"


def test_the_k2_kl_estimator_by_hand():
    """--kl-estimator k2: the KL term is ½ (log π(o_t) − log π_ref(o_t))² at the sampled tokens,
    kept ones only, from the rollout's log π_ref — not the full-vocabulary KL — and its gradient is
    (log π − log π_ref) ∇log π (the term's expected gradient equals the full one's: docs/exact.md)."""
    ln = math.log
    # positions 0 and 1 predict the two completion tokens; position 2 predicts nothing (extreme, so a shift shows)
    logits = torch.tensor([[ln(3.0), 0.0], [0.0, ln(4.0)], [5.0, -5.0]])[None].repeat(2, 1, 1)
    sample_ids = torch.tensor([[0, 0, 1], [0, 1, 1]])  # completion: row 0 [0, 1]; row 1 [1, 1]
    # log π at the completion: row 0 [ln ¾, ln ⅘]; row 1 [ln ¼, ln ⅘]; reference (asymmetric per position):
    ref_logprobs = torch.tensor([[ln(0.5), ln(0.1)], [ln(0.5), ln(0.9)]])
    mb = ReplayMinibatch(
        sample_ids=sample_ids, attention_mask=torch.ones(2, 3, dtype=torch.bool),
        completion_mask=torch.tensor([[True, True], [True, False]]),
        logprobs=torch.log(torch.tensor([[0.75, 0.8], [0.25, 0.8]])), advantages=torch.zeros(2, 2),
        returns=torch.zeros(2, 2), ref_logprobs=ref_logprobs,
    )
    args = make_args(clip_coef=0.2, vf_coef=0.0, ent_coef=0.0, kl_estimator="k2")
    identity = Unembedding(torch.eye(2), torch.zeros(2))
    logits.requires_grad_(True)
    _, terms = compute_rlhf_objective(logits, torch.zeros(2, 3), None, mb, args, 0.5, 1.0, identity, identity)
    k2 = [0.5 * ln(0.75 / 0.5) ** 2, 0.5 * ln(0.8 / 0.1) ** 2, 0.5 * ln(0.25 / 0.5) ** 2]  # row 1's t = 1 is masked
    assert terms["kl_penalty"].item() == pytest.approx(0.5 * sum(k2) / 3, abs=1e-6)
    grad, = torch.autograd.grad(terms["kl_penalty"], logits)
    # d/dz of ½ (log p_o − c)² = (log p_o − c)(e_o − p): row 0, position 1 (token 0, p = [¾, ¼])
    want = 0.5 / 3 * ln(0.75 / 0.5) * torch.tensor([1 - 0.75, -0.25])
    torch.testing.assert_close(grad[0, 0], want)
    assert grad[1, 1].abs().sum() == 0 and grad[:, 2].abs().sum() == 0, "the masked token adds nothing"


def test_a_k2_run_keeps_no_reference_residual_and_penalises_k2_of_the_rollout():
    """--kl-estimator k2 end to end on the tiny preset: the rollout keeps no ĥ_ref (nothing of the
    reference enters the vocabulary pass), and with one minibatch and the learning rate still 0 (phase 1
    of the warm-up) the phase's KL penalty is β · mean_kept ½ (log π_old − log π_ref)² of the rollout."""
    from rlhf_scratch.core.objectives import calc_k2_kl, masked_mean

    torch.manual_seed(0)
    args = make_args("tiny", "ppo", total_phases=2, batch_size=8, num_minibatches=1, batches_per_learning_phase=1,
                     gen_len=6, threads=1, save_every=0, save_model=False, beta=0.3, kl_estimator="k2")
    trainer = RLHFTrainer(args, quiet=True)
    with torch.no_grad():  # a policy away from the reference, so k2 is not 0
        for param in trainer.policy.base.parameters():
            param.add_(0.05 * torch.randn_like(param))
    rollout = trainer.rollout_phase()
    assert rollout.ref_hidden is None and rollout.ref_lse is None
    stats = trainer.learning_phase(rollout)
    want = 0.3 * masked_mean(calc_k2_kl(rollout.logprobs, rollout.ref_logprobs), rollout.completion_mask).item()
    assert want > 1e-4
    assert stats["losses/kl_penalty"] == pytest.approx(want, rel=1e-4)
    full = masked_mean(rollout.kl, rollout.completion_mask).item()
    assert abs(stats["losses/kl_penalty"] - 0.3 * full) > 1e-3 * want, "k2's value is not the full-vocabulary KL's"


def _random_minibatch(gen):
    logits = torch.randn(3, 6, 5, generator=gen) * 2
    ref_logits = torch.randn(3, 6, 5, generator=gen) * 2
    values = torch.randn(3, 6, generator=gen)
    sample_ids = torch.randint(0, 5, (3, 6), generator=gen)
    mb = ReplayMinibatch(
        sample_ids=sample_ids, attention_mask=torch.ones(3, 6, dtype=torch.bool),
        completion_mask=torch.tensor([[True] * 4, [True, True, False, False], [True] * 4]),
        logprobs=torch.randn(3, 4, generator=gen) - 2, advantages=torch.randn(3, 4, generator=gen),
        returns=torch.randn(3, 4, generator=gen),
    )
    return logits, ref_logits, values, mb


def test_at_temperature_one_the_objective_is_the_blogs():
    """T = 1 divides nothing: every term equals the blog's formula on log_softmax(logits) (to float
    rounding: the chunked terms take log p as z − logsumexp(z))."""
    from rlhf_scratch.core.objectives import (
        calc_clipped_sur_obj,
        calc_entropy_bonus,
        calc_kl_penalty,
        calc_value_fn_loss,
        gather_log_probs,
    )

    logits, ref_logits, values, mb = _random_minibatch(torch.Generator().manual_seed(1))
    args = make_args(clip_coef=0.2, vf_coef=0.2, ent_coef=0.01)
    assert args.temperature == 1.0
    total, terms = objective(logits, values, ref_logits, mb, args, beta=0.5)
    lp_v, ref_v, mask = logits[:, 1:-1].log_softmax(-1), ref_logits[:, 1:-1].log_softmax(-1), mb.completion_mask
    blog = {"clipped_surrogate": calc_clipped_sur_obj(gather_log_probs(lp_v, mb.sample_ids[:, 2:]), mb.logprobs,
                                                      mb.advantages, 0.2, mask=mask),
            "value_loss": calc_value_fn_loss(values[:, 1:-1], mb.returns, 0.2, mask=mask),
            "entropy_bonus": calc_entropy_bonus(lp_v, 0.01, mask=mask, from_logprobs=True),
            "kl_penalty": calc_kl_penalty(lp_v, ref_v, 0.5, mask=mask, from_logprobs=True)}
    for name, value in blog.items():
        torch.testing.assert_close(terms[name], value, rtol=1e-6, atol=1e-7, msg=f"{name} changed at T = 1")


def test_the_objective_is_of_the_sampled_distribution_at_temperature_t():
    """At T = 0.5 every policy term — ratio, entropy, KL to the reference — is of softmax(z / T): the
    same as T = 1 on logits and reference logits both divided by T, and not what T = 1 gives on the
    raw logits (so the data can tell). The value loss reads the value head, not the logits: it is
    the same at every T. Forgetting T for the policy, for the reference, or in any one term changes
    that term; dividing the values (or the returns) by T changes the value loss."""
    from rlhf_scratch.core.objectives import calc_value_fn_loss

    logits, ref_logits, values, mb = _random_minibatch(torch.Generator().manual_seed(2))
    at_half = make_args(clip_coef=0.2, vf_coef=0.2, ent_coef=0.01, temperature=0.5)
    at_one = make_args(clip_coef=0.2, vf_coef=0.2, ent_coef=0.01)
    total, terms = objective(logits, values, ref_logits, mb, at_half, beta=0.5)
    want, want_terms = objective(logits / 0.5, values, ref_logits / 0.5, mb, at_one, beta=0.5)
    _, raw_terms = objective(logits, values, ref_logits, mb, at_one, beta=0.5)  # T forgotten everywhere
    for name in ("clipped_surrogate", "entropy_bonus", "kl_penalty"):
        torch.testing.assert_close(terms[name], want_terms[name], msg=f"{name} at T = 0.5 is not of softmax(z / T)")
        assert (terms[name] - raw_terms[name]).abs() > 1e-3, f"{name} does not depend on T: the test cannot see T forgotten"
    assert torch.equal(terms["value_loss"], raw_terms["value_loss"]), "the value loss changed with T"
    torch.testing.assert_close(terms["value_loss"], calc_value_fn_loss(values[:, 1:-1], mb.returns, 0.2, mask=mb.completion_mask),
                               msg="the value loss at T = 0.5 is not the blog's on the value head")
    torch.testing.assert_close(total, want, msg="J = L_clip − value_loss + entropy_bonus − kl_penalty at T")
    for wrong in (objective(logits, values, ref_logits / 0.5, mb, at_one, 0.5)[1],
                  objective(logits / 0.5, values, ref_logits, mb, at_one, 0.5)[1]):
        assert not torch.allclose(wrong["kl_penalty"], terms["kl_penalty"]), "only one side at T"


def test_context_overflow_names_the_field_to_blame():
    with pytest.raises(ValueError, match=r"^gen_len: 5000 leaves no room for a prompt in the model's context n_ctx=128$"):
        RLHFTrainer(make_args("tiny", gen_len=5000), quiet=True)
    long_prefix = " ".join(["great"] * 200)
    with pytest.raises(ValueError, match=r"^prefix: \d+ tokens with gen_len 30 exceed the model's context n_ctx=128$"):
        RLHFTrainer(make_args("tiny", prefix=long_prefix), quiet=True)


def test_offline_hub_gives_one_line_error(capsys):
    assert main(["sentiment", "--preset", "gpt2"]) == 1  # the environment, not the flags: exit 1 (config/command.py)
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.startswith("error: cannot download 'gpt2' from the Hugging Face Hub") and "--preset tiny" in err
