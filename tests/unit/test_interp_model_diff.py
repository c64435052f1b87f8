"""interp.model_diff on known answers: planted weight updates of known rank and norm, and a planted
mean shift that the Activation Difference Lens must read back (its top logit-lens token, and the
dictionary feature that wrote it)."""

import copy
import math

import pytest
import torch

from interp.model_diff import (
    activation_difference_lens,
    as_matrix,
    dictionary_matches,
    effective_rank,
    energy_rank,
    first_token_differences,
    relative_update,
    weight_diff,
    weight_diffs,
    weight_summary,
)
from interp.toy import toy_model, toy_tokenizer


def planted_rank(m: int, n: int, singular_values: list[float], seed: int = 0) -> torch.Tensor:
    """U diag(σ) V^T with orthonormal U [m, r], V [n, r]: a matrix of rank r and the given σ."""
    g = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(m, len(singular_values), generator=g, dtype=torch.float64))[0]
    V = torch.linalg.qr(torch.randn(n, len(singular_values), generator=g, dtype=torch.float64))[0]
    return U @ torch.diag(torch.tensor(singular_values, dtype=torch.float64)) @ V.T


def test_relative_update_by_hand():
    W = torch.tensor([[3.0, 0.0], [0.0, 4.0]])  # ‖W‖_F = 5
    dW = torch.tensor([[0.0, 1.2], [-0.5, 0.0]])  # ‖ΔW‖_F = √(1.44 + 0.25) = 1.3
    assert relative_update(W, W + dW) == pytest.approx(1.3 / 5, rel=1e-6)
    assert relative_update(W, W) == 0.0
    assert relative_update(torch.zeros(2), torch.ones(2)) == math.inf


def test_a_planted_rank_1_update_measures_rank_1():
    W = torch.randn(24, 40, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    d = weight_diff("blocks.0.mlp.W_in", W, W + planted_rank(24, 40, [2.5]))
    assert d.effective_rank == pytest.approx(1.0, abs=1e-6)
    assert (d.rank_90, d.rank_99, d.numerical_rank, d.full_rank) == (1, 1, 1, 24)


def test_a_planted_rank_3_update_measures_rank_3_with_the_hand_worked_entropy():
    """σ = (3, 2, 1): p = (1/2, 1/3, 1/6), exp(H) = exp(½ ln 2 + ⅓ ln 3 + ⅙ ln 6) = 2.749…;
    σ² = (9, 4, 1) of 14: 9/14 = 0.64 < 0.9 ≤ 13/14 = 0.93, so r_90 = 2, and r_99 = 3."""
    W = torch.randn(30, 20, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    d = weight_diff("blocks.1.mlp.W_out", W, W + planted_rank(30, 20, [3.0, 2.0, 1.0]))
    expected = math.exp(0.5 * math.log(2) + math.log(3) / 3 + math.log(6) / 6)
    assert d.effective_rank == pytest.approx(expected, abs=1e-6)
    assert (d.rank_90, d.rank_99, d.numerical_rank) == (2, 3, 3)
    # three equal singular values: exactly 3 by every measure
    e = weight_diff("x", W, W + planted_rank(30, 20, [1.0, 1.0, 1.0]))
    assert e.effective_rank == pytest.approx(3.0, abs=1e-6) and (e.rank_90, e.rank_99) == (3, 3)


def test_energy_and_effective_rank_edge_cases():
    assert effective_rank(torch.zeros(4)) != effective_rank(torch.zeros(4))  # nan: no update, no rank
    assert energy_rank(torch.zeros(3), 0.9) == 0
    assert energy_rank(torch.tensor([1.0, 3.0]), 0.9) == 1, "9/10 already holds 90 % (sorted first)"


def test_per_head_attention_weights_are_read_as_the_layers_matrix():
    """A rank-1 update of the layer's whole W_Q map spread over heads must still measure rank 1,
    which it would not if each head were a separate matrix or the heads were flattened wrongly."""
    n_heads, d_model, d_head = 4, 16, 4
    full = planted_rank(d_model, n_heads * d_head, [1.0]).float()  # [d_model, head·d_head]
    per_head = full.reshape(d_model, n_heads, d_head).permute(1, 0, 2)  # TransformerLens' [head, d_model, d_head]
    torch.testing.assert_close(as_matrix("blocks.0.attn.W_Q", per_head), full)
    W_ref = torch.zeros_like(per_head) + 0.5
    assert weight_diff("blocks.0.attn.W_Q", W_ref, W_ref + per_head).numerical_rank == 1
    W_O = full.T.reshape(n_heads, d_head, d_model)  # [head, d_head, d_model]
    torch.testing.assert_close(as_matrix("blocks.0.attn.W_O", W_O), full.T)
    assert as_matrix("blocks.0.attn.b_Q", torch.zeros(4, 4)) is None, "a per-head bias is a vector per head, not a map"
    assert as_matrix("blocks.0.attn._b_K", torch.zeros(2, 4)) is None, "nor is a grouped K/V head's bias (GQA)"
    assert as_matrix("blocks.0.attn._W_K", torch.zeros(2, 16, 4)).shape == (16, 8), "a grouped K/V weight is a map"


def test_weight_diffs_of_a_model_find_only_the_planted_matrix(tiny_random_lm):
    reference = tiny_random_lm
    tuned = copy.deepcopy(reference)
    with torch.no_grad():
        tuned.blocks[1].mlp.W_in += planted_rank(16, 64, [0.9, 0.2]).float()
    diffs = {d.name: d for d in weight_diffs(reference, tuned)}
    moved = [n for n, d in diffs.items() if d.delta_norm > 0]
    assert moved == ["blocks.1.mlp.W_in"]
    d = diffs["blocks.1.mlp.W_in"]
    assert d.relative_update == pytest.approx(math.sqrt(0.9**2 + 0.2**2) / reference.blocks[1].mlp.W_in.norm().item(), rel=1e-4)
    assert (d.numerical_rank, d.rank_90, d.rank_99) == (2, 1, 2)  # σ² = 0.81, 0.04: 0.81 / 0.85 = 0.95
    summary = weight_summary(list(diffs.values()))
    assert summary["n_matrices_moved"] == 1 and summary["top"][0]["name"] == "blocks.1.mlp.W_in"


@pytest.fixture(scope="module")
def shifted_pair():
    """A toy reference and a tuned copy whose block-0 MLP output bias adds SHIFT · W_U[:, target]'s
    centred direction: every position's residual after block 0 moves by the same vector."""
    tokenizer = toy_tokenizer()
    reference = toy_model(seed=3, tokenizer=tokenizer)
    tuned = copy.deepcopy(reference)
    target = reference.to_single_token(" wonderful")
    direction = reference.W_U[:, target].detach().clone()
    direction = direction - direction.mean()
    direction = 1.7 * direction / direction.norm()
    with torch.no_grad():
        tuned.blocks[0].mlp.b_out += direction
    return reference, tuned, target, direction


TEXTS = ["the film was long", "I watched it with a friend", "the plot and the cast", "this one is not very good"]


def test_first_token_differences_recover_a_constant_shift_at_every_position(shifted_pair):
    reference, tuned, _, direction = shifted_pair
    deltas = first_token_differences(reference, tuned, "blocks.0.hook_resid_post", TEXTS, k=3)
    assert deltas.shape == (3, reference.cfg.d_model)
    torch.testing.assert_close(deltas, direction.expand(3, -1), atol=1e-5, rtol=0)


def test_the_activation_difference_lens_reads_the_planted_shift_back(shifted_pair):
    """Its logit lens (tuned model) must put the planted token first, and against a dictionary in
    which one feature's decoder is the planted direction (at another norm) that feature must come
    first with cosine 1 and projection |direction| = 1.7."""
    reference, tuned, target, direction = shifted_pair
    d = reference.cfg.d_model
    W_dec = torch.randn(12, d, generator=torch.Generator().manual_seed(4))
    W_dec[7] = 0.4 * direction
    adl = activation_difference_lens(reference, tuned, "blocks.0.hook_resid_post", TEXTS, k=3,
                                     dictionaries={"sae": W_dec})
    assert adl["logit_lens"]["promoted"][0][0] == " wonderful"
    assert adl["mean_delta_norm"] == pytest.approx(1.7, abs=1e-4)
    best = adl["dictionaries"]["sae"][0]
    assert best["feature"] == 7 and best["cosine"] == pytest.approx(1.0, abs=1e-5)
    assert best["projection"] == pytest.approx(1.7, abs=1e-4)
    # a model diffed against itself: no difference, nothing promoted
    same = first_token_differences(reference, reference, "blocks.0.hook_resid_post", TEXTS, k=3)
    assert same.abs().max().item() == 0.0


def test_dictionary_matches_rank_by_absolute_cosine_and_keep_the_sign():
    W = torch.tensor([[1.0, 0.0], [0.0, -2.0], [1.0, 1.0], [0.0, 0.0]])
    m = dictionary_matches(torch.tensor([0.0, 3.0]), W, k=3)
    assert [r["feature"] for r in m] == [1, 2, 0]
    assert m[0]["cosine"] == pytest.approx(-1.0) and m[0]["projection"] == pytest.approx(-3.0)
    assert m[1]["cosine"] == pytest.approx(1 / math.sqrt(2))
    dead_1 = dictionary_matches(torch.tensor([0.0, 3.0]), W, k=1, alive=torch.tensor([True, False, True, True]))
    assert dead_1[0]["feature"] == 2, "a dead feature is never a match"
