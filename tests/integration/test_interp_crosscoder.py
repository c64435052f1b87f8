"""interp.crosscoder on known answers: a BatchTopK crosscoder trained on synthetic paired activations
with planted shared, reference-only and tuned-only features must find each where it was planted,
and latent scaling, on crosscoders built by hand, must give the ratios worked out by hand.

Synthetic data: orthonormal directions u_0..u_9 (shared: the same coefficient in both models), p
(tuned-only) and q (reference-only) in R^16. Each shared feature fires on 10 % of positions, p on
25 %, q on 15 %, with coefficients in [1, 2]:

    x^ref = Σ_s c_s u_s + c_q q,        x^tuned = Σ_s c_s u_s + c_p p
"""

import copy
import random

import pytest
import torch

from interp.crosscoder import (
    REF,
    TUNED,
    Crosscoder,
    CrosscoderSettings,
    batch_topk,
    classify_latents,
    crosscoder_counts,
    delta_norm,
    firing_stats,
    latent_scaling,
    least_squares_beta,
    paired_activations,
    paired_text_activations,
    scaling_confirms,
    train_crosscoder,
)
from interp.logits import NEGATIVE_WORDS, POSITIVE_WORDS
from interp.toy import FILLER_WORDS, toy_model, toy_tokenizer

D, N_SHARED = 16, 10


def planted(n: int = 8192, seed: int = 0):
    """(x [n, 2, D], shared directions [N_SHARED, D], p, q)."""
    g = torch.Generator().manual_seed(seed)
    Q = torch.linalg.qr(torch.randn(D, D, generator=g))[0].T  # rows orthonormal
    U, p, q = Q[:N_SHARED], Q[N_SHARED], Q[N_SHARED + 1]

    def coeff(freq: float, shape) -> torch.Tensor:
        return (torch.rand(shape, generator=g) < freq) * (1 + torch.rand(shape, generator=g))

    c_shared, c_p, c_q = coeff(0.10, (n, N_SHARED)), coeff(0.25, (n, 1)), coeff(0.15, (n, 1))
    shared = c_shared @ U
    return torch.stack([shared + c_q * q, shared + c_p * p], 1), U, p, q


def cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a, b.expand_as(a), dim=-1)


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    x, U, p, q = planted()
    # k = 1.5, near the data's true L0 (10 · 0.1 + 0.25 + 0.15 = 1.4). At k = 2 the spare half latent per
    # position is spent on pairs that cancel (the p latent then also fires, with a partner cancelling it,
    # on 7 % of positions without p): the labels stay right but the frequencies are no longer clean.
    settings = CrosscoderSettings(d_latent=24, k=1.5, training_tokens=8192 * 40, batch_tokens=256, lr=3e-3,
                                  aux_k=4, dead_steps=50)
    cc, log = train_crosscoder(x, settings)
    freq, _ = firing_stats(cc, x)
    labels = classify_latents(delta_norm(cc.W_dec.detach()), freq > 0)
    return cc, log, x, U, p, q, labels, latent_scaling(cc, x)


def test_a_planted_tuned_direction_comes_out_as_exactly_one_tuned_only_latent_confirmed_by_scaling(trained):
    cc, log, x, U, p, q, labels, scaling = trained
    tuned_only = [j for j, lab in enumerate(labels) if lab == "tuned-only"]
    assert len(tuned_only) == 1, f"one tuned-only latent expected, got {tuned_only} (counts {crosscoder_counts(labels)})"
    j = tuned_only[0]
    assert cos(cc.W_dec[TUNED, j].detach(), p).item() > 0.95, "the tuned-only latent writes the planted direction p"
    planted_here = (x[:, TUNED] @ p) > 0.5
    fires = cc.encode(x)[:, j] > 0
    assert planted_here.float().mean().item() == pytest.approx(0.25, abs=0.02)
    assert (fires == planted_here).float().mean().item() > 0.99, "it fires exactly where p was planted"
    assert int(scaling.own[j]) == TUNED
    assert abs(scaling.nu_error[j].item()) < 0.1 and abs(scaling.nu_recon[j].item()) < 0.1
    assert scaling_confirms(scaling, j)
    assert scaling.beta_error[TUNED, j].item() == pytest.approx(1.0, abs=0.1), "its own model needs all of it"


def test_the_planted_reference_direction_comes_out_reference_only(trained):
    cc, _, x, U, p, q, labels, scaling = trained
    ref_only = [j for j, lab in enumerate(labels) if lab == "reference-only"]
    assert len(ref_only) == 1, f"one reference-only latent expected, got {ref_only}"
    assert cos(cc.W_dec[REF, ref_only[0]].detach(), q).item() > 0.95
    assert int(scaling.own[ref_only[0]]) == REF and scaling_confirms(scaling, ref_only[0])


def test_shared_features_come_out_shared_with_equal_decoders(trained):
    cc, log, x, U, p, q, labels, _ = trained
    dn = delta_norm(cc.W_dec.detach())
    live = torch.tensor([lab != "dead" for lab in labels])
    for s in range(N_SHARED):
        c = cos(cc.W_dec[REF].detach(), U[s]).masked_fill(~live, -1)
        j = int(c.argmax())
        assert c[j].item() > 0.95, f"shared feature {s} has a latent"
        assert labels[j] == "shared", f"shared feature {s}: latent {j} has Δ_norm {dn[j]:.3f}"
        assert cos(cc.W_dec[TUNED, j].detach(), U[s]).item() > 0.95
    assert crosscoder_counts(labels) == {"reference-only": 1, "shared": N_SHARED, "tuned-only": 1, "other": 0,
                                         "dead": cc.d_latent - N_SHARED - 2}, "one latent per planted feature, the rest unused"
    assert log["fvu_ref"] < 0.01 and log["fvu_tuned"] < 0.01, log


def test_batch_topk_keeps_k_per_position_on_average_across_the_batch():
    scores = torch.tensor([[5.0, 0.0, 1.0, 0.2], [4.0, 3.0, 2.0, 0.0], [0.1, 0.0, 0.0, 0.0]])
    keep = batch_topk(scores, 1.5)  # round(1.5 * 3) = 4 of the 12: 5, 4, 3, 2 — row 2 keeps none
    assert keep.tolist() == [[True, False, False, False], [True, True, True, False], [False] * 4]
    assert not batch_topk(torch.zeros(2, 3), 2.0).any(), "a zero score is never kept"


def test_delta_norm_and_its_bands_by_hand():
    W = torch.zeros(2, 5, 3)
    W[REF, :, 0] = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.9])
    W[TUNED, :, 0] = torch.tensor([1.0, 0.0, 2.0, 0.5, 1.2])
    dn = delta_norm(W)
    # ½((t − r)/max + 1): equal 0.5; ref-only 0; tuned-only 1; (0.5 − 1)/1 → 0.25; (1.2 − 0.9)/1.2 → 0.625
    torch.testing.assert_close(dn, torch.tensor([0.5, 0.0, 1.0, 0.25, 0.625]))
    alive = torch.tensor([True, True, True, True, False])
    assert classify_latents(dn, alive) == ["shared", "reference-only", "tuned-only", "other", "dead"]


def hand_built(with_decoupled_latent: bool) -> Crosscoder:
    """Latents on the basis e0..e3 of R^4. 0: shared (e0 in both). 1: tuned-only (tuned decoder e1,
    reference decoder 0). 2: reference-only (e2). 3 (optional): reference-only along e1, firing
    0.6 as much as latent 1. The encoder reads f_0 = x^tuned·e0, f_1 = x^tuned·e1, f_2 = x^ref·e2,
    f_3 = 0.6 x^tuned·e1; θ = 0."""
    n_lat = 4 if with_decoupled_latent else 3
    cc = Crosscoder(4, n_lat)
    e = torch.eye(4)
    with torch.no_grad():
        cc.W_enc.zero_(), cc.W_dec.zero_(), cc.b_enc.zero_(), cc.b_dec.zero_()
        cc.W_enc[TUNED, :, 0], cc.W_enc[TUNED, :, 1], cc.W_enc[REF, :, 2] = e[0], e[1], e[2]
        cc.W_dec[:, 0] = e[0]
        cc.W_dec[TUNED, 1] = e[1]
        cc.W_dec[REF, 2] = e[2]
        if with_decoupled_latent:
            cc.W_enc[TUNED, :, 3] = 0.6 * e[1]
            cc.W_dec[REF, 3] = e[1]
    return cc


def hand_data(ref_share_of_e1: float, n: int = 400):
    g = torch.Generator().manual_seed(3)
    a, b, c = (torch.rand(n, 1, generator=g) + 0.5 for _ in range(3))
    e = torch.eye(4)
    x_tuned = a * e[0] + b * e[1]
    x_ref = a * e[0] + ref_share_of_e1 * b * e[1] + c * e[2]
    return torch.stack([x_ref, x_tuned], 1)


def test_latent_scaling_flags_complete_shrinkage_with_the_hand_worked_ratio():
    """The reference holds 0.3 of the tuned-only latent's direction, but its reference decoder is 0
    (what an L1 penalty can do). Reference error along e1 = 0.3 b, tuned error + own part = b:
    ν_ε = 0.3. No latent writes e1 into the reference's reconstruction: ν_r = 0."""
    cc = hand_built(False)
    s = latent_scaling(cc, hand_data(0.3))
    assert delta_norm(cc.W_dec.detach())[1].item() == 1.0, "by decoder norms alone it looks tuned-only"
    assert int(s.own[1]) == TUNED
    assert s.beta_error[TUNED, 1].item() == pytest.approx(1.0, abs=1e-5), "forgot to put latent j's own part back?"
    assert s.beta_error[REF, 1].item() == pytest.approx(0.3, abs=1e-5)
    assert s.nu_error[1].item() == pytest.approx(0.3, abs=1e-5)
    assert s.nu_recon[1].item() == pytest.approx(0.0, abs=1e-6)
    # the same latent where the reference truly lacks e1: both ratios 0, and the cut confirms it
    s0 = latent_scaling(cc, hand_data(0.0))
    assert s0.nu_error[1].item() == pytest.approx(0.0, abs=1e-6) and scaling_confirms(s0, 1)
    assert not scaling_confirms(latent_scaling(cc, hand_data(0.6)), 1), "0.6 of it in the reference is not tuned-only"
    # the shared latent: ν = 1 on both targets
    assert s.nu_error[0].item() == pytest.approx(1.0, abs=1e-5) and s.nu_recon[0].item() == pytest.approx(1.0, abs=1e-5)


def test_latent_scaling_flags_latent_decoupling_on_the_reconstruction_target():
    """The reference's 0.6 b along e1 is reconstructed by another latent (3, reference-only): the
    reference's error along e1 is 0 (ν_ε = 0) but its reconstruction holds 0.6 b there: ν_r = 0.6."""
    cc = hand_built(True)
    s = latent_scaling(cc, hand_data(0.6))
    assert s.nu_error[1].item() == pytest.approx(0.0, abs=1e-6)
    assert s.nu_recon[1].item() == pytest.approx(0.6, abs=1e-5)
    assert not scaling_confirms(s, 1)


def test_least_squares_beta_is_the_argmin_lstsq_finds():
    g = torch.Generator().manual_seed(5)
    v = torch.randn(1, 6, generator=g, dtype=torch.float64)
    f = torch.rand(50, generator=g, dtype=torch.float64)
    y = torch.randn(50, 6, generator=g, dtype=torch.float64) + 1.7 * f[:, None] * v
    beta = least_squares_beta(v, (f[:, None] * y).sum(0, keepdim=True), f.pow(2).sum()[None])
    A = (f[:, None] * v).reshape(-1, 1)  # [50·6, 1]: β · f_n v against y_n, stacked
    expected = torch.linalg.lstsq(A, y.reshape(-1, 1)).solution.item()
    assert beta.item() == pytest.approx(expected, rel=1e-9)


def test_paired_activations_put_the_same_token_of_both_models_side_by_side(tiny_random_lm):
    reference = tiny_random_lm.eval()
    tuned = copy.deepcopy(reference)
    shift = torch.linspace(-1, 1, reference.cfg.d_model)
    with torch.no_grad():
        tuned.blocks[0].mlp.b_out += shift
    tokens = torch.randint(1, reference.cfg.d_vocab, (2, 5), generator=torch.Generator().manual_seed(0))
    x = paired_activations(reference, tuned, "blocks.0.hook_resid_post", tokens)
    assert x.shape == (10, 2, reference.cfg.d_model)  # no special tokens in a tokenizer-less model
    torch.testing.assert_close(x[:, TUNED] - x[:, REF], shift.expand(10, -1), atol=1e-5, rtol=0)


def test_bad_settings_fail_in_one_line():
    with pytest.raises(ValueError, match="crosscoder k"):
        CrosscoderSettings(d_latent=8, k=9.0).validate()
    with pytest.raises(ValueError, match="batch_tokens"):
        train_crosscoder(torch.zeros(10, 2, 4), CrosscoderSettings(batch_tokens=64))


def test_a_direction_planted_in_a_toy_models_residual_comes_out_as_one_tuned_only_latent():
    """End to end on a toy HookedTransformer: the tuned copy adds p (norm 2) to the embedding of the
    24 sentiment words, so at blocks.0.hook_resid_pre its residual is the reference's plus p on
    exactly those tokens (29 % of positions of random word strings). Read through
    `paired_text_activations`, the crosscoder must give p one tuned-only latent that fires exactly
    there, latent scaling must confirm it, and nothing may come out reference-only.

    (Δ_norm of that latent is 0.91–0.92 over seeds 0–3: its reference decoder keeps a little of the
    words' common embedding. At 128 latents and k = 4 it fell to 0.86 for one seed, "other" by the
    bands, while latent scaling still gave ν < 0.06: the bands alone are the weaker test.)"""
    torch.set_num_threads(1)
    reference = toy_model(seed=0, tokenizer=toy_tokenizer())
    tuned = copy.deepcopy(reference)
    p = torch.randn(reference.cfg.d_model, generator=torch.Generator().manual_seed(0))
    p = 2.0 * p / p.norm()
    planted_ids = [reference.to_single_token(w) for w in POSITIVE_WORDS + NEGATIVE_WORDS]
    with torch.no_grad():
        tuned.W_E[planted_ids] += p
    rng = random.Random(0)
    words = FILLER_WORDS + [w.strip() for w in POSITIVE_WORDS + NEGATIVE_WORDS]
    texts = [" ".join(rng.choice(words) for _ in range(30)) for _ in range(600)]
    x = paired_text_activations(reference, tuned, "blocks.0.hook_resid_pre", texts, 20_000)
    planted_here = (x[:, TUNED] - x[:, REF]).norm(dim=-1) > 1e-3
    assert planted_here.float().mean().item() == pytest.approx(0.29, abs=0.02)
    cc, _ = train_crosscoder(x, CrosscoderSettings(d_latent=96, k=4.0, training_tokens=300_000, batch_tokens=256,
                                                   lr=3e-3, aux_k=16, dead_steps=50))
    freq, _ = firing_stats(cc, x)
    labels = classify_latents(delta_norm(cc.W_dec.detach()), freq > 0)
    counts = crosscoder_counts(labels)
    assert counts["tuned-only"] == 1 and counts["reference-only"] == 0, counts
    j = labels.index("tuned-only")
    assert cos(cc.W_dec[TUNED, j].detach(), p).item() > 0.95
    assert ((cc.encode(x)[:, j] > 0) == planted_here).float().mean().item() > 0.98
    s = latent_scaling(cc, x)
    assert s.nu_error[j].abs().item() < 0.2 and s.nu_recon[j].abs().item() < 0.2 and scaling_confirms(s, j)
