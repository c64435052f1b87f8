"""GRPO: group-relative advantages, TRL's eight loss types (the aggregations, GSPO's sequence ratio,
LUSPO's sum, CISPO's capped weight, SAPO's gate, VESPO's Gamma weight), two-sided clipping, the
entropy bonus, the k3 KL and TRL's ratio-weighted k3 (value and gradient) by hand; the clip metrics;
truncated completions masked; the clipped side has no gradient; a bandit that learns (and one with
the sign flipped that does not); TRL's start warnings; the trainer's learning phase checked by hand;
an end-to-end run from the command line. (TRL's own code against ours: tests/slow/test_vs_trl.py.)"""

import math

import pytest
import torch

from rlhf_scratch.algorithms.grpo import (
    GRPO_METRICS,
    LENGTH_NOTE,
    LUSPO_WARNING,
    SEQUENCE_SUM_WARNING,
    VESPO_WARNING,
    GRPOTrainer,
    calc_clip_counts,
    calc_grpo_objective,
    calc_grpo_terms,
    calc_importance_ratio,
    calc_k3_kl,
    calc_vespo_weights,
    clip_fraction_extremes,
    compute_grpo_advantages,
    grpo_start_notes,
    loss_mask,
    mean_length_by_advantage_sign,
)
from rlhf_scratch.config import ConfigError, make_args

# --- advantages ---------------------------------------------------------------------------------------

REWARDS = torch.tensor([1.0, 2.0, 3.0, 6.0, 5.0, 5.0, 5.0, 5.0])  # group 1 spread, group 2 all equal


def test_group_scaled_advantages_by_hand():
    # group 1: mean 3, centred [-2, -1, 0, 3], unbiased std √(14/3) = 2.160247; group 2: equal → exactly 0
    adv = compute_grpo_advantages(REWARDS, 4, "group")
    expected = torch.tensor([-2.0, -1.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0]) / (math.sqrt(14 / 3) + 1e-4)
    torch.testing.assert_close(adv, expected)
    assert torch.equal(adv[4:], torch.zeros(4)), "a group of equal rewards teaches nothing"
    # a biased std (÷G) would give /√(14/4) = /1.8708; RLOO's leave-one-out would give 4/3·centred


def test_batch_scaled_advantages_by_hand():
    # centred per group as above, divided by the std of all 8 rewards: mean 4, Σ dev² = 22, √(22/7) = 1.772811
    adv = compute_grpo_advantages(REWARDS, 4, "batch")
    expected = torch.tensor([-2.0, -1.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0]) / (math.sqrt(22 / 7) + 1e-4)
    torch.testing.assert_close(adv, expected)


def test_unscaled_advantages_are_the_centred_rewards_dr_grpo():
    adv = compute_grpo_advantages(REWARDS, 4, "none")
    torch.testing.assert_close(adv, torch.tensor([-2.0, -1.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0]))
    # two groups of two: ±half the difference (RLOO's would be ± the whole difference)
    torch.testing.assert_close(compute_grpo_advantages(torch.tensor([1.0, 0.0, 0.5, 0.25]), 2, "none"),
                               torch.tensor([0.5, -0.5, 0.125, -0.125]))


def test_advantage_errors_are_one_line():
    with pytest.raises(ValueError, match=r"^compute_grpo_advantages: batch of 6 is not a multiple of num_generations 4$"):
        compute_grpo_advantages(torch.zeros(6), 4)
    with pytest.raises(ValueError, match=r"^compute_grpo_advantages: num_generations must be >= 2"):
        compute_grpo_advantages(torch.zeros(6), 1)
    with pytest.raises(ValueError, match=r"^compute_grpo_advantages: scale_rewards must be group, batch or none; got 'std'$"):
        compute_grpo_advantages(torch.zeros(4), 2, "std")


# --- the objective on a 2×3 example: row 1's third token is padding ---------------------------------------

OLD = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0]])
MASK = torch.tensor([[True, True, True], [True, True, False]])
ADV = torch.tensor([2.0, -1.0])
EPS = dict(epsilon_low=0.2, epsilon_high=0.28)  # asymmetric: a swap of the two changes every clipped value
DAPO_N = dict(num_items_in_batch=50, num_splits=2)  # each step divides by 50 / 2 = 25


def objective(new, loss_type, **kw):
    return calc_grpo_objective(new, OLD, ADV, MASK, loss_type=loss_type, max_completion_length=5, **EPS, **DAPO_N,
                               **kw).item()


@pytest.mark.parametrize("loss_type, expected", [
    ("grpo", (6 / 3 + -2 / 2) / 2),  # row sums 3·2 = 6 and 2·(-1) = -2 over 3 and 2 tokens, then the mean
    ("bnpo", (6 - 2) / 5),  # 5 kept tokens (counting the padding would give (6 - 3)/6)
    ("dr_grpo", (6 - 2) / (2 * 5)),  # B = 2 rows × max_completion_length 5 (not the tensor's 3)
    ("dapo", (6 - 2) / (50 / 2)),  # the generation batch's 50 tokens over 2 splits
])
def test_each_loss_type_at_ratio_one_by_hand(loss_type, expected):
    assert objective(OLD, loss_type) == pytest.approx(expected, abs=1e-6)


def test_dapo_without_a_batch_count_is_the_minibatch_token_mean():
    got = calc_grpo_objective(OLD, OLD, ADV, MASK, loss_type="dapo", max_completion_length=5, **EPS).item()
    assert got == pytest.approx(0.8, abs=1e-6)


# log-ratios: row 0 (A = 2): ρ = e^0.1 (inside), e^0.4 = 1.49 (> 1.28: clipped to 1.28), e^-0.5 = 0.61
# (< 0.8 but A > 0: moving away, not clipped); row 1 (A = -1): e^-0.3 = 0.74 (< 0.8, A < 0: clipped to
# 0.8), e^0.3 = 1.35 (> 1.28 but A < 0: not clipped), e^5 on the padding (must count for nothing).
NEW = OLD + torch.tensor([[0.1, 0.4, -0.5], [-0.3, 0.3, 5.0]])
S0 = 2 * math.exp(0.1) + 2 * 1.28 + 2 * math.exp(-0.5)  # = 5.983403
S1 = -0.8 - math.exp(0.3)  # = -2.149859


@pytest.mark.parametrize("loss_type, expected", [
    ("grpo", (S0 / 3 + S1 / 2) / 2),  # 0.459769
    ("bnpo", (S0 + S1) / 5),  # 0.766709
    ("dr_grpo", (S0 + S1) / 10),  # 0.383354
    ("dapo", (S0 + S1) / 25),  # 0.153342
])
def test_each_loss_type_with_clipping_by_hand(loss_type, expected):
    assert objective(NEW, loss_type) == pytest.approx(expected, abs=1e-5)


def test_swapped_epsilons_change_the_clipped_objective():
    # ε_low 0.28, ε_high 0.2: row 0's second token clips at 1.2 and row 1's first (0.74 > 0.72) is not clipped
    swapped = calc_grpo_objective(NEW, OLD, ADV, MASK, loss_type="bnpo", max_completion_length=5,
                                  epsilon_low=0.28, epsilon_high=0.2).item()
    hand = (2 * math.exp(0.1) + 2 * 1.2 + 2 * math.exp(-0.5) - math.exp(-0.3) - math.exp(0.3)) / 5
    assert swapped == pytest.approx(hand, abs=1e-5)
    assert swapped != pytest.approx(objective(NEW, "bnpo"), abs=1e-3)


def test_clip_counts_are_of_kept_tokens_on_the_side_the_advantage_pushes():
    # low: row 1's first token only (row 0's 0.61 has A > 0); high: row 0's second only (row 1's 1.35 has A < 0)
    counts = calc_clip_counts(NEW, OLD, ADV, MASK, **EPS)
    torch.testing.assert_close(counts, torch.tensor([1.0, 1.0, 5.0]))


def test_sequence_level_ratio_gspo_by_hand():
    # row 0: mean log-ratio (0.3 + 0.3 + 0)/3 = 0.2; row 1: (-0.6 + 0)/2 = -0.3 (the padding's 5 excluded)
    new = OLD + torch.tensor([[0.3, 0.3, 0.0], [-0.6, 0.0, 5.0]])
    ratio = calc_importance_ratio(new, OLD, MASK, "sequence")
    assert ratio.shape == (2, 1)
    torch.testing.assert_close(ratio, torch.tensor([[math.exp(0.2)], [math.exp(-0.3)]]))
    # row 0: e^0.2 = 1.22 inside → 2·1.2214 per token; row 1: 0.74 < 0.8 with A < 0 → clipped, -0.8 per token
    got = calc_grpo_objective(new, OLD, ADV, MASK, loss_type="grpo", max_completion_length=5,
                              importance_sampling_level="sequence", **EPS).item()
    assert got == pytest.approx((2 * math.exp(0.2) - 0.8) / 2, abs=1e-5)
    # clip counts are per sequence at this level: row 1 clipped low, of 2 sequences
    counts = calc_clip_counts(new, OLD, ADV, MASK, **EPS, importance_sampling_level="sequence")
    torch.testing.assert_close(counts, torch.tensor([1.0, 0.0, 2.0]))


def objective_and_grad(new, loss_type, old=OLD, adv=ADV, **kw):
    """J and ∇J w.r.t. the per-token log-probs on the 2×3 example (dapo's N = 50 over 2 splits: ÷ 25)."""
    logp = new.clone().requires_grad_(True)
    J = calc_grpo_objective(logp, old, adv, MASK, loss_type=loss_type, max_completion_length=5,
                            **{**EPS, **DAPO_N, **kw})
    J.backward()
    return J.item(), logp.grad


# the per-token log-probs of NEW: row 0 [-0.9, -1.6, -1.0], row 1 [-1.8, -0.4] (+ padding)
NEW_LOGP = [[-0.9, -1.6, -1.0], [-1.8, -0.4]]
RHO = [[math.exp(0.1), math.exp(0.4), math.exp(-0.5)], [math.exp(-0.3), math.exp(0.3)]]  # 1.105 1.492 0.607 | 0.741 1.350


def padded(rows):
    return torch.tensor([rows[0], rows[1] + [0.0]])


def test_cispo_weighs_log_pi_by_the_capped_detached_ratio_by_hand():
    """ε_max = 1.3: row 0's ρ = 1.49 and row 1's 1.35 are capped at 1.3, the others keep their ρ.
    J = Σ sg(min(ρ, 1.3)) A log π / 25 = -0.220356; ∇J = min(ρ, 1.3) A / 25 on every kept token —
    clipped ones included (the clipped surrogate would give them 0). Red if the cap is 1 + ε_max
    (nothing capped), if the weight is not detached (∇ gains ρ A log π), or with the mean of bnpo."""
    w = [[min(r, 1.3) for r in row] for row in RHO]
    hand = (sum(wi * 2 * lp for wi, lp in zip(w[0], NEW_LOGP[0])) + sum(wi * -1 * lp for wi, lp in zip(w[1], NEW_LOGP[1]))) / 25
    got, grad = objective_and_grad(NEW, "cispo", epsilon_high=1.3)
    assert got == pytest.approx(hand, abs=1e-6) and hand == pytest.approx(-0.220356, abs=1e-6)
    torch.testing.assert_close(grad, padded([[2 * wi / 25 for wi in w[0]], [-wi / 25 for wi in w[1]]]))
    # at TRL's default ε_high = 0.2 the cap binds everywhere: every weight is 0.2
    _, grad_default = objective_and_grad(NEW, "cispo", epsilon_high=0.2)
    torch.testing.assert_close(grad_default, padded([[2 * 0.2 / 25] * 3, [-0.2 / 25] * 2]))


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def test_sapo_soft_gate_by_hand():
    """τ_pos = 2 (row 0, A = 2), τ_neg = 0.5 (row 1, A = -1): ℓ = (4/τ) σ(τ (ρ − 1)) A, grpo's per-sequence
    mean: J = (2.124067 + (-4.045075)) / 2 = -0.960504. Red if the temperatures are swapped, if the
    gate's 4/τ is dropped, or with dapo's normaliser (÷ 25 instead of the per-sequence means)."""
    row0 = sum(4 / 2.0 * sigmoid(2.0 * (r - 1)) * 2 for r in RHO[0]) / 3
    row1 = sum(4 / 0.5 * sigmoid(0.5 * (r - 1)) * -1 for r in RHO[1]) / 2
    got, grad = objective_and_grad(NEW, "sapo", sapo_temperature_pos=2.0, sapo_temperature_neg=0.5)
    assert got == pytest.approx((row0 + row1) / 2, abs=1e-6) and got == pytest.approx(-0.960504, abs=1e-6)
    swapped, _ = objective_and_grad(NEW, "sapo", sapo_temperature_pos=0.5, sapo_temperature_neg=2.0)
    assert swapped != pytest.approx(got, abs=1e-3)
    # ∂ℓ/∂log π = ρ · 4 σ(1 − σ) A, then ÷ |o_i| ÷ B: no clip edge, every token has a gradient
    g0 = [r * 4 * sigmoid(2.0 * (r - 1)) * (1 - sigmoid(2.0 * (r - 1))) * 2 / 3 / 2 for r in RHO[0]]
    g1 = [r * 4 * sigmoid(0.5 * (r - 1)) * (1 - sigmoid(0.5 * (r - 1))) * -1 / 2 / 2 for r in RHO[1]]
    torch.testing.assert_close(grad, padded([g0, g1]))


def test_sapo_at_ratio_one_is_the_policy_gradient_of_grpo():
    """At ρ = 1 the gate's slope 4 σ(0)(1 − σ(0)) = 1: SAPO's gradient is exactly grpo's, whatever τ."""
    _, sapo = objective_and_grad(OLD, "sapo", sapo_temperature_pos=3.0, sapo_temperature_neg=0.3)
    _, grpo = objective_and_grad(OLD, "grpo")
    torch.testing.assert_close(sapo, grpo)


def test_luspo_sums_each_sequence_instead_of_averaging_it_by_hand():
    """LUSPO = GSPO's sequence term × |o_i|, then the mean over sequences: (3 · 2ρ_0 + 2 · (−0.8)) / 2,
    where GSPO (loss_type grpo) gives (2ρ_0 − 0.8) / 2. Red if the sum is a mean (GSPO's value)."""
    new = OLD + torch.tensor([[0.3, 0.3, 0.0], [-0.6, 0.0, 5.0]])  # ρ_0 = e^0.2 inside, ρ_1 = e^-0.3 clipped low
    got, _ = objective_and_grad(new, "luspo", importance_sampling_level="sequence")
    assert got == pytest.approx((3 * 2 * math.exp(0.2) + 2 * -0.8) / 2, abs=1e-6)  # 2.864208
    gspo, _ = objective_and_grad(new, "grpo", importance_sampling_level="sequence")
    assert gspo == pytest.approx((2 * math.exp(0.2) - 0.8) / 2, abs=1e-6)
    # at the token level it is the per-row sum of the clipped surrogate, then the mean (S0, S1 below)
    token, _ = objective_and_grad(NEW, "luspo")
    assert token == pytest.approx((S0 + S1) / 2, abs=1e-5)


# VESPO's own case: summed log-ratios 0.3 (row 0, A > 0) and −0.5 (row 1, A < 0; the padding's 5 excluded)
VESPO_NEW = OLD + torch.tensor([[0.1, 0.4, -0.2], [-0.3, -0.2, 5.0]])


def test_vespo_gamma_weight_by_hand():
    """w_0 = e^0.3 with (k, λ) = (2, 3): φ_0 = exp(3 + 2·0.3 − 3 e^0.3) = 0.637898; w_1 = e^-0.5 with
    (3, 2): φ_1 = exp(2 + 3·(−0.5) − 2 e^-0.5) = 0.490141. J = Σ φ A log π / 25 = -0.110367 and
    ∇J = φ A / 25. Red if the pos/neg parameters are swapped, if w is GSPO's mean ratio (row 0: e^0.1),
    if the padding's 5 enters the sum, or if φ carries a gradient."""
    phi0, phi1 = math.exp(3 + 2 * 0.3 - 3 * math.exp(0.3)), math.exp(2 + 3 * -0.5 - 2 * math.exp(-0.5))
    phi = calc_vespo_weights(VESPO_NEW - OLD, ADV, MASK, k_pos=2.0, lambda_pos=3.0, k_neg=3.0, lambda_neg=2.0)
    torch.testing.assert_close(phi, torch.tensor([[phi0], [phi1]]))
    got, grad = objective_and_grad(VESPO_NEW, "vespo")  # TRL's defaults (2, 3, 3, 2)
    hand = (phi0 * 2 * (-0.9 - 1.6 - 0.7) + phi1 * -1 * (-1.8 - 0.9)) / 25
    assert got == pytest.approx(hand, abs=1e-6) and hand == pytest.approx(-0.110367, abs=1e-6)
    torch.testing.assert_close(grad, padded([[phi0 * 2 / 25] * 3, [-phi1 / 25] * 2]))
    # normalised: φ(1) = 1 for either sign; a huge ratio's weight vanishes (0, not NaN)
    ones = calc_vespo_weights(torch.zeros(2, 3), ADV, MASK, 2.0, 3.0, 3.0, 2.0)
    torch.testing.assert_close(ones, torch.ones(2, 1))
    huge = calc_vespo_weights(torch.full((2, 3), 30.0), ADV, MASK, 2.0, 3.0, 3.0, 2.0)
    assert torch.equal(huge, torch.zeros(2, 1))


def test_two_sided_clipping_caps_a_runaway_ratio_with_a_negative_advantage_by_hand():
    """δ = 1.3 (> 1 + ε_high = 1.28): row 1's second token (A = −1, ρ = 1.35) weighs min(1.35, 1.3) = 1.3
    and gets no gradient; row 0's 1.49 (A > 0) was clipped at 1.28 anyway. bnpo: (S0 − 0.8 − 1.3) / 5."""
    got, grad = objective_and_grad(NEW, "bnpo", delta=1.3)
    assert got == pytest.approx((S0 - 0.8 - 1.3) / 5, abs=1e-6)
    _, plain = objective_and_grad(NEW, "bnpo")
    assert plain[1, 1].item() == pytest.approx(-math.exp(0.3) / 5, abs=1e-6) and grad[1, 1].item() == 0.0
    torch.testing.assert_close(grad[0], plain[0])
    # the clip metrics read the capped ratio (TRL's coef_1 after the cap): no change here, 1.3 > 1.28
    assert calc_grpo_terms(NEW, OLD, ADV, MASK, loss_type="bnpo", max_completion_length=5, delta=1.3,
                           **EPS).clip_counts.tolist() == [1.0, 1.0, 5.0]


def test_the_entropy_bonus_is_the_mean_kept_entropy_whatever_the_loss_type():
    """J + c · Σ mask H / Σ mask: 0.1 · (1 + 2 + 3 + 4 + 5) / 5 = 0.3 (the padding's 9 excluded) is added to
    every loss type's J alike (TRL: not rescaled by the loss type's normaliser), with ∂J/∂H = c / 5."""
    entropies = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 9.0]], requires_grad=True)
    for loss_type in ("grpo", "dapo", "sapo", "luspo"):
        base = calc_grpo_objective(NEW, OLD, ADV, MASK, loss_type=loss_type, max_completion_length=5, **EPS, **DAPO_N)
        got = calc_grpo_objective(NEW, OLD, ADV, MASK, loss_type=loss_type, max_completion_length=5, **EPS, **DAPO_N,
                                  entropies=entropies, entropy_coef=0.1)
        assert (got - base).item() == pytest.approx(0.3, abs=1e-6), loss_type
    got.backward()
    torch.testing.assert_close(entropies.grad, torch.tensor([[0.02, 0.02, 0.02], [0.02, 0.02, 0.0]]))
    with pytest.raises(ValueError, match="entropy_coef != 0 needs entropies"):
        calc_grpo_objective(NEW, OLD, ADV, MASK, loss_type="dapo", max_completion_length=5, entropy_coef=0.1, **EPS)


def test_clip_ratio_low_min_and_high_max_are_the_extreme_per_sequence_fractions_by_hand():
    """Four rows: the fraction of each row's kept tokens clipped low / high (a row with no kept token: NaN,
    skipped). low: [0, 1/2, 1/3, –] → min 0; high: [2/3, 0, 0, –] → max 2/3. With A of one sign per row a row
    with A > 0 is never clipped low, so low_min is 0 unless every advantage is negative (the second case)."""
    ratio = torch.tensor([[1.5, 1.4, 1.0], [0.5, 1.0, 9.0], [0.7, 1.0, 1.1], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [0, 0, 0]]).bool()
    adv = torch.tensor([1.0, -1.0, -0.5, 2.0])
    got = clip_fraction_extremes(ratio, adv, mask, 0.8, 1.28)
    torch.testing.assert_close(got, torch.tensor([0.0, 2 / 3]))
    got = clip_fraction_extremes(ratio, -adv.abs(), mask, 0.8, 1.28)  # every row pushed down
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0]))  # row 0 (1.5, 1.4, 1.0) has nothing below 0.8
    got = clip_fraction_extremes(ratio[1:3], -adv[1:3].abs(), mask[1:3], 0.8, 1.28)
    torch.testing.assert_close(got, torch.tensor([1 / 3, 0.0]))  # rows 1 and 2: 1/2 and 1/3 → min 1/3
    assert clip_fraction_extremes(ratio[3:], adv[3:], mask[3:], 0.8, 1.28).isnan().all(), "no kept token: NaN"


def test_loss_mask_drops_every_token_of_a_truncated_completion():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]]).bool()
    terminated = torch.tensor([True, False, True])  # row 1 ran to gen_len without an EOS
    assert loss_mask(mask, terminated, False) is mask
    assert loss_mask(mask, terminated, True).tolist() == [[True, True, False], [False] * 3, [True, False, False]]


def test_trls_warnings_and_our_note_at_start():
    """One line each where TRL's GRPOTrainer warns, and our note where the loss type cannot matter."""
    def notes(**kw):
        return grpo_start_notes(make_args("tiny", "grpo", **kw))

    assert notes() == [] and notes(importance_sampling_level="sequence", loss_type="grpo", stop_at_eos=True) == []  # GSPO
    assert notes(importance_sampling_level="sequence") == [SEQUENCE_SUM_WARNING.format(loss_type="dapo")]
    assert notes(importance_sampling_level="sequence", loss_type="cispo") == [SEQUENCE_SUM_WARNING.format(loss_type="cispo")]
    assert notes(loss_type="luspo") == [LUSPO_WARNING] and notes(loss_type="luspo", importance_sampling_level="sequence") == []
    assert notes(loss_type="vespo", importance_sampling_level="sequence") == [VESPO_WARNING] and notes(loss_type="vespo") == []
    assert notes(loss_type="bnpo") == [LENGTH_NOTE.format(loss_type="bnpo", gen_len=30)]
    assert notes(loss_type="bnpo", stop_at_eos=True) == [] and notes(loss_type="sapo") == [], "sapo's surrogate differs anyway"
    assert all("\n" not in line for line in notes(importance_sampling_level="sequence", loss_type="bnpo"))


def test_the_trainer_prints_the_gspo_warning_once_on_stderr(capsys, one_thread):
    args = make_args("tiny", "grpo", batch_size=8, num_generations=4, gen_len=4, threads=1,
                     importance_sampling_level="sequence", stop_at_eos=True)
    GRPOTrainer(args)
    err = capsys.readouterr().err
    assert err.count("warning: --importance-sampling-level sequence with --loss-type dapo") == 1
    GRPOTrainer(args, quiet=True)
    assert "warning" not in capsys.readouterr().err


def test_k3_kl_by_hand_and_in_the_objective():
    # x = log π_ref − log π: row 0 [0, ln 2, −ln 2], row 1 [ln 2, 0, 3 (padding)]; k3 = e^x − x − 1
    x = torch.tensor([[0.0, math.log(2), -math.log(2)], [math.log(2), 0.0, 3.0]])
    ref = OLD + x
    k3 = calc_k3_kl(OLD, ref)
    a, b = 1 - math.log(2), math.log(2) - 0.5  # e^{ln2} − ln2 − 1 = 0.30685, e^{−ln2} + ln2 − 1 = 0.19315
    torch.testing.assert_close(k3[:, :2], torch.tensor([[0.0, a], [a, 0.0]]))
    assert k3[0, 2].item() == pytest.approx(b, abs=1e-6) and (k3 >= 0).all()
    # at ρ = 1, bnpo: (Σ A − β Σ k3) / 5 over kept tokens; k3 with π and π_ref swapped would give row 1 b, not a
    got = calc_grpo_objective(OLD, OLD, ADV, MASK, loss_type="bnpo", max_completion_length=5, ref_logprobs=ref,
                              beta=0.1, **EPS).item()
    assert got == pytest.approx((4 - 0.1 * (a + b + a)) / 5, abs=1e-6)
    with pytest.raises(ValueError, match="beta != 0 needs ref_logprobs"):
        calc_grpo_objective(OLD, OLD, ADV, MASK, loss_type="bnpo", max_completion_length=5, beta=0.1, **EPS)


# --- TRL's use_bias_correction_kl: the k3 term weighed by the raw ratio, gradient included ----------------

# x = log π_ref − log π at NEW, largest where clip(ρ) ≠ ρ (row 0's 2nd and 3rd, row 1's 1st and 2nd):
# weighing k3 by the clipped ratio would move the value; 2.0 on the padding must count for nothing.
X = torch.tensor([[0.5, -0.9, 0.7], [-0.6, 0.8, 2.0]])
BETA = 0.5


def kl_objective_and_grad(new, ref, level, use_bias_correction_kl):
    logp = new.clone().requires_grad_(True)
    got = calc_grpo_objective(logp, OLD, ADV, MASK, loss_type="bnpo", max_completion_length=5, **EPS,
                              importance_sampling_level=level, ref_logprobs=ref, beta=BETA,
                              use_bias_correction_kl=use_bias_correction_kl)
    got.backward()
    return got.item(), logp.grad


def test_bias_corrected_kl_weighs_k3_by_the_raw_token_ratio_by_hand():
    """ℓ = surrogate − β ρ k3 (TRL's default) vs − β k3; ∇(ρ k3) = ρ (log π − log π_ref) ∇log π = −ρ x ∇log π."""
    rho = [[math.exp(0.1), math.exp(0.4), math.exp(-0.5)], [math.exp(-0.3), math.exp(0.3)]]  # kept tokens
    x = [[0.5, -0.9, 0.7], [-0.6, 0.8]]
    k3 = [[math.exp(v) - v - 1 for v in row] for row in x]  # [[0.1487, 0.3066, 0.3138], [0.1488, 0.4255]]
    weighted = sum(r * k for rr, kk in zip(rho, k3) for r, k in zip(rr, kk))  # Σ ρ k3 = 1.4967
    clipped = sum(min(max(r, 0.8), 1.28) * k for rr, kk in zip(rho, k3) for r, k in zip(rr, kk))  # 1.4715
    plain = sum(map(sum, k3))  # Σ k3 = 1.3434
    got, grad = kl_objective_and_grad(NEW, NEW + X, "token", True)
    assert got != pytest.approx((S0 + S1 - BETA * clipped) / 5, abs=1e-4), \
        "k3 is weighed by the CLIPPED ratio: TRL weighs it by the raw ρ (coef_1, before the clamp)"
    assert got != pytest.approx((S0 + S1 - BETA * plain) / 5, abs=1e-4), \
        "k3 is not weighed by the token ratio (the flag ignored, or GSPO's ρ_i, 1 for both rows here, used)"
    assert got == pytest.approx((S0 + S1 - BETA * weighted) / 5, abs=1e-6)  # 0.617041
    off, grad_off = kl_objective_and_grad(NEW, NEW + X, "token", False)
    assert off == pytest.approx((S0 + S1 - BETA * plain) / 5, abs=1e-6)  # 0.632369

    # ∇J·5 = the surrogate's (A ρ where unclipped: row 0's 1st and 3rd, row 1's 2nd; 0 where clipped)
    #        + β ρ x with the weight (−β ρ (1 − e^x) if ρ were detached), − β (1 − e^x) without it
    surrogate = [[2 * rho[0][0], 0.0, 2 * rho[0][2]], [0.0, -rho[1][1]]]
    with_rho = [[s + BETA * r * v for s, r, v in zip(*row)] for row in zip(surrogate, rho, x)]
    detached = [[s - BETA * r * (1 - math.exp(v)) for s, r, v in zip(*row)] for row in zip(surrogate, rho, x)]
    without = [[s - BETA * (1 - math.exp(v)) for s, v in zip(*row)] for row in zip(surrogate, x)]

    def pad(rows):  # row 1's padding gets no gradient; bnpo's ÷ 5 kept tokens
        return torch.tensor([rows[0], rows[1] + [0.0]]) / 5

    assert not torch.allclose(grad, pad(detached), atol=1e-4), "ρ is detached: TRL's weight carries its gradient"
    torch.testing.assert_close(grad, pad(with_rho))
    torch.testing.assert_close(grad_off, pad(without))


def test_gspo_weighs_k3_by_the_sequence_ratio_whose_gradient_spreads_over_the_row():
    """With one ρ_i per sequence, ∂ρ_i/∂log π_{i,s} = ρ_i / |o_i|: every token of row i gets β ρ_i Σ_t k3_{i,t} / |o_i|."""
    new = OLD + torch.tensor([[0.3, 0.3, 0.0], [-0.6, 0.0, 5.0]])  # ρ_0 = e^0.2 inside, ρ_1 = e^-0.3 < 0.8 clipped
    x = [[0.5, -0.9, 0.7], [-0.6, 0.8]]
    k3 = [[math.exp(v) - v - 1 for v in row] for row in x]
    r0, r1 = math.exp(0.2), math.exp(-0.3)
    got, grad = kl_objective_and_grad(new, new + X, "sequence", True)
    surrogate = 3 * 2 * r0 + 2 * -0.8  # row 0: 2 ρ_0 per token; row 1: clipped to 0.8 · (−1) per token
    assert got == pytest.approx((surrogate - BETA * (r0 * sum(k3[0]) + r1 * sum(k3[1]))) / 5, abs=1e-6)
    row0 = [2 * r0 - BETA * (r0 * sum(k3[0]) / 3 + r0 * (1 - math.exp(v))) for v in x[0]]
    row1 = [0.0 - BETA * (r1 * sum(k3[1]) / 2 + r1 * (1 - math.exp(v))) for v in x[1]]  # clipped: no surrogate
    torch.testing.assert_close(grad, torch.tensor([row0, row1 + [0.0]]) / 5)


def test_gradient_is_zero_where_the_ratio_is_clipped_on_the_side_the_advantage_pushes():
    # four one-token completions: ρ = e^0.5 with A > 0 (clipped), e^-0.5 with A < 0 (clipped),
    # e^0.5 with A < 0 and e^-0.5 with A > 0 (moving back: not clipped)
    old = torch.zeros(4, 1)
    logp = torch.tensor([[0.5], [-0.5], [0.5], [-0.5]], requires_grad=True)
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    calc_grpo_objective(logp, old, adv, torch.ones(4, 1, dtype=torch.bool), loss_type="bnpo",
                        max_completion_length=1, **EPS).backward()
    ratio = torch.tensor([0.5, -0.5, 0.5, -0.5]).exp()
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0], [0.0], [-ratio[2] / 4], [ratio[3] / 4]]))


def test_grpo_weighs_a_token_by_one_over_its_length_and_dr_grpo_and_dapo_do_not():
    """The length bias, in one gradient: two completions with A = +1, of 1 and 3 tokens."""
    mask = torch.tensor([[True, False, False], [True, True, True]])
    adv = torch.tensor([1.0, 1.0])
    grads = {}
    for loss_type in ("grpo", "dr_grpo", "dapo"):
        logp = torch.zeros(2, 3, requires_grad=True)
        calc_grpo_objective(logp, logp.detach(), adv, mask, loss_type=loss_type, max_completion_length=3,
                            **EPS).backward()
        grads[loss_type] = logp.grad
    # grpo: 1/(2·1) for the short one's token, 1/(2·3) for each of the long one's: short wins per token
    torch.testing.assert_close(grads["grpo"], torch.tensor([[1 / 2, 0, 0], [1 / 6, 1 / 6, 1 / 6]]))
    torch.testing.assert_close(grads["dr_grpo"], torch.full((2, 3), 1 / 6) * mask)  # 1/(B·L) each
    torch.testing.assert_close(grads["dapo"], torch.full((2, 3), 1 / 4) * mask)  # 1/(4 kept tokens) each


def test_dapo_minibatches_sum_to_the_gradient_of_the_whole_batch():
    """Cut into minibatches, each step divides by N / num_splits: the steps' gradients add up to
    num_splits × the whole batch's, whatever token counts the minibatches hold (bnpo's do not)."""
    torch.manual_seed(0)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]]).bool()
    adv, old = torch.tensor([1.0, -0.5, 2.0, -1.0]), torch.randn(4, 4)
    n = mask.sum()

    def grad(rows, loss_type, splits):
        logp = old.clone().requires_grad_(True)
        calc_grpo_objective(logp[rows], old[rows], adv[rows], mask[rows], loss_type=loss_type, max_completion_length=4,
                            num_items_in_batch=n, num_splits=splits, **EPS).backward()
        return logp.grad

    whole = grad(torch.arange(4), "dapo", 1)
    halves = grad(torch.tensor([0, 1]), "dapo", 2) + grad(torch.tensor([2, 3]), "dapo", 2)
    torch.testing.assert_close(halves, 2 * whole)


# --- bandit ----------------------------------------------------------------------------------------------


def bandit(sign: float, loss_type: str = "dapo", **kw) -> float:
    """π = softmax(θ) over two tokens; token 1 earns reward 1. Returns π(1) after 30 GRPO steps."""
    torch.manual_seed(0)
    theta = torch.zeros(2, requires_grad=True)
    opt = torch.optim.SGD([theta], lr=0.5, maximize=True)
    G = 4
    for _ in range(30):
        logp_all = theta.log_softmax(-1)
        tokens = torch.multinomial(logp_all.exp().detach(), 8 * G, replacement=True)
        adv = compute_grpo_advantages((tokens == 1).float(), G)
        logp = logp_all[tokens][:, None]  # one-token completions
        opt.zero_grad()
        (sign * calc_grpo_objective(logp, logp.detach(), adv, torch.ones_like(logp, dtype=torch.bool),
                                    loss_type=loss_type, max_completion_length=1, **{**EPS, **kw})).backward()
        opt.step()
    return theta.softmax(-1)[1].item()


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"])
def test_a_two_token_bandit_learns_the_rewarded_token(loss_type):
    kw = dict(epsilon_high=5.0) if loss_type == "cispo" else {}  # CISPO's ε_max: ScaleRL's 5 (0.28 would cap ρ = 1)
    assert bandit(+1.0, loss_type, **kw) > 0.9, f"GRPO ({loss_type}) should have learned to pick the rewarded token"


def test_the_bandit_with_the_objective_negated_unlearns_it():
    assert bandit(-1.0) < 0.1, "descending J must move away from the reward (else the bandit test proves nothing)"


def test_mean_length_by_advantage_sign():
    got = mean_length_by_advantage_sign(torch.tensor([3, 5, 8, 2]), torch.tensor([-1.0, 0.0, -0.5, 2.0]))
    assert got == {"completions/mean_length_neg_adv": 5.5, "completions/mean_length_pos_adv": 2.0}
    assert math.isnan(mean_length_by_advantage_sign(torch.tensor([3]), torch.tensor([0.0]))["completions/mean_length_pos_adv"])


# --- config ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [("loss_type", "sum"), ("scale_rewards", "std"),
                                          ("importance_sampling_level", "tokens"), ("num_generations", 1),
                                          ("epsilon_low", 1.0), ("epsilon_high", 0.0), ("beta", -0.1),
                                          ("delta", 1.0), ("sapo_temperature_neg", 0.0), ("vespo_k_pos", -1.0),
                                          ("entropy_coef", -0.01), ("steps_per_generation", 0), ("top_p", 0.0),
                                          ("top_p", 1.5), ("mask_truncated_completions", True)])
def test_a_bad_field_is_one_line_naming_it(field, value):
    """(mask_truncated_completions without a stop at EOS: every completion would be masked.)"""
    with pytest.raises(ConfigError, match=f"^{field}: "):
        make_args("tiny", "grpo", **{field: value})


def test_steps_per_generation_is_trls_name_for_our_minibatches():
    """No gradient accumulation here: TRL's steps_per_generation (optimizer steps per generation batch)
    is num_minibatches. Given, it sets it; unset, our 4 stand (TRL's own default is 1: tests/slow/test_vs_trl.py)."""
    assert make_args("tiny", "grpo").num_minibatches == 4
    args = make_args("tiny", "grpo", steps_per_generation=1)
    assert (args.num_minibatches, args.minibatch_size()) == (1, 64), "one on-policy step on the whole batch, as TRL"
    assert make_args("tiny", "grpo", steps_per_generation=2, num_minibatches=2).num_minibatches == 2
    with pytest.raises(ConfigError, match="^steps_per_generation: is num_minibatches under TRL's name"):
        make_args("tiny", "grpo", steps_per_generation=2, num_minibatches=8)
    with pytest.raises(ConfigError, match="^batch_size: must be divisible by num_minibatches"):
        make_args("tiny", "grpo", steps_per_generation=3)


# --- the trainer -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset_trainer(tmp_path_factory, one_thread):
    """β > 0 (so a reference runs), one minibatch, on distinct prompts that stop at EOS; the prompts are
    2, 3, 5 and 7 tokens long, so every batch of two prompts is left-padded."""
    tmp = tmp_path_factory.mktemp("grpo_prompts")
    (tmp / "prompts.txt").write_text("A\nThe acting\nI thought the film\nWorst of all,\n")
    args = make_args("tiny", algo="grpo", total_phases=2, batch_size=8, num_generations=4, num_minibatches=1,
                     gen_len=8, warmup_steps=0, base_lr=1e-3, beta=0.04, seed=4, prompts=str(tmp / "prompts.txt"),
                     run_dir=str(tmp / "run"))
    return GRPOTrainer(args, quiet=True)


def test_learning_phase_metrics_by_hand(dataset_trainer):
    trainer, args = dataset_trainer, dataset_trainer.args
    rollout = trainer.rollout_phase()
    assert not rollout.attention_mask.all(), "this test needs left-padded prompts"
    rollout.completion_mask = mask = rollout.completion_mask.clone()
    mask[1, 3:] = False  # as if row 1 had stopped at its 3rd token: the rest must not count
    # Before any step the learning forward reproduces the rollout's log π_old on kept tokens: ρ = 1.
    with torch.no_grad():
        now = trainer.token_log_probs(rollout, torch.arange(8))
    torch.testing.assert_close(now[mask], rollout.logprobs[mask], atol=1e-4, rtol=1e-4)

    # hand-set rewards: prompt 1's four are equal (A = 0), prompt 2's are [0, 1, 0, 1]: A = ±0.5/(√(1/3) + 1e-4)
    rollout.scores = rollout.rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    a = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    adv = torch.tensor([0.0, 0.0, 0.0, 0.0, -a, a, -a, a])
    # a hand-set reference: log π_ref = log π_old − d_i at each row's first token (x = −d_i there, 0 elsewhere)
    d = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    rollout.ref_logprobs = rollout.logprobs.clone()
    rollout.ref_logprobs[:, 0] -= d
    k3 = (-d).exp() + d - 1  # one per row
    lengths = mask.sum(-1).float()
    n = lengths.sum()
    stats = trainer.learning_phase(rollout)
    assert set(stats) == set(GRPO_METRICS) - {"cispo_clip_ratio", "vespo/phi_seq_mean"}, "dapo's: TRL's clip ratios, and kl"
    assert stats["reward"] == pytest.approx(0.75)
    assert stats["frac_reward_zero_std"] == 0.5
    # one minibatch, at ρ = 1: dapo's J = Σ_i (A_i |o_i| − β k3_i) / N, and TRL's kl = Σ k3 / N
    assert stats["objective/grpo"] == pytest.approx(((adv * lengths).sum() - args.beta * k3.sum()).item() / n.item(),
                                                    abs=1e-5)
    assert stats["kl"] == pytest.approx((k3.sum() / n).item(), abs=1e-6)
    assert stats["clip_ratio/region_mean"] == stats["clip_ratio/high_max"] == 0.0, "nothing is clipped at ρ = 1"
    assert stats["completions/mean_length_neg_adv"] == pytest.approx(lengths[[4, 6]].mean().item())
    assert stats["completions/mean_length_pos_adv"] == pytest.approx(lengths[[5, 7]].mean().item())
    assert stats["entropy"] == pytest.approx(rollout.entropy[mask].mean().item(), abs=1e-6)
    assert stats["objective/beta"] == args.beta and stats["charts/skipped_steps"] == 0
    steps = trainer.optimizer.state[next(trainer.policy.parameters())]["step"]
    assert int(steps) == 1, "one optimizer step per minibatch"


def test_no_reference_model_is_loaded_at_beta_zero(dataset_trainer):
    assert dataset_trainer.ref_model is not None, "β > 0 needs the reference"
    args = make_args("tiny", algo="grpo", batch_size=8, num_generations=4, gen_len=4, threads=1)
    trainer = GRPOTrainer(args, quiet=True)
    assert trainer.ref_model is None
    rollout = trainer.rollout_phase()
    assert rollout.ref_logprobs is None and rollout.kl is None


def test_learning_phase_masks_truncated_completions_and_adds_the_entropy_bonus(dataset_trainer):
    """mask_truncated_completions and entropy_coef through the trainer, at ρ = 1 (one minibatch):
    J = Σ_i A_i |o_i| [o_i ended] / N + c · mean H over the kept tokens, N counting the ended rows' tokens
    only; `entropy` over those tokens too. "Ended" is made to vary: the rollout's EOS id is set to a token
    some rows produced (what `is_terminated` reads), so no log-prob changes."""
    trainer = dataset_trainer
    rollout = trainer.rollout_phase()
    rollout.scores = rollout.rewards = torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0])  # every A = ±a
    rollout.ref_logprobs = rollout.logprobs.clone()  # k3 = 0
    a = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    adv = torch.tensor([-a, a, -a, a, a, -a, a, -a])
    lengths = rollout.completion_mask.sum(-1)
    unmasked = (adv * lengths).sum().item() / lengths.sum().item()

    def masked_value() -> float:  # Σ over the ended rows of A_i |o_i|, over their tokens
        ended = rollout.is_terminated
        return (adv * lengths * ended).sum().item() / (lengths * ended).sum().item()

    # an EOS id that leaves some rows ended and some truncated, and makes masking them matter (the
    # sampled rollout decides which tokens can: whatever ran before in this process moved the RNG)
    for token in rollout.completion_ids[rollout.completion_mask].tolist():
        rollout.eos_token_id = token
        if 0 < int(rollout.is_terminated.sum()) < len(rollout) and abs(masked_value() - unmasked) > 1e-3:
            break
    ended = rollout.is_terminated
    assert 0 < int(ended.sum()) < len(rollout), "the test needs ended and truncated rows"
    mask = rollout.completion_mask & ended[:, None]
    n = mask.sum().item()
    with torch.no_grad():  # π = π_old before the step: its entropy is the rollout's
        _, entropy_now = trainer.token_log_probs_and_entropy(rollout, torch.arange(8))
    torch.testing.assert_close(entropy_now[mask], rollout.entropy[mask], atol=1e-4, rtol=1e-4)
    args, c = trainer.args, 0.1
    args.mask_truncated_completions, args.entropy_coef = True, c
    try:
        stats = trainer.learning_phase(rollout)
    finally:
        args.mask_truncated_completions, args.entropy_coef = False, 0.0
    expected = (adv * mask.sum(-1)).sum().item() / n + c * rollout.entropy[mask].mean().item()
    assert stats["objective/grpo"] == pytest.approx(expected, abs=1e-4)
    assert abs(stats["objective/grpo"] - unmasked - c * rollout.entropy[mask].mean().item()) > 1e-3, \
        "the truncated rows must change J here"
    assert stats["entropy"] == pytest.approx(rollout.entropy[mask].mean().item(), abs=1e-6)


def test_with_equal_lengths_every_loss_type_is_the_same_update():
    """No EOS stop (the default --prompts prefix): every row keeps all L tokens, so grpo (mean of row
    means), bnpo (token mean), dr_grpo (sum / (B·L)) and dapo (sum / (N / splits), N = B·L) divide
    the same sum by B·L. Red if an aggregation is wrong (e.g. dr_grpo dividing by B only) — and the
    reason `GRPOTrainer` notes that --loss-type changes nothing there."""
    torch.manual_seed(0)
    B, L = 4, 5
    old = -torch.rand(B, L) - 0.5
    adv = torch.tensor([1.5, -0.5, 0.25, -1.25])
    mask = torch.ones(B, L, dtype=torch.bool)
    results = {}
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
        logp = (old + 0.1 * torch.randn(B, L, generator=torch.Generator().manual_seed(1))).requires_grad_(True)
        J = calc_grpo_objective(logp, old, adv, mask, loss_type=loss_type, max_completion_length=L, epsilon_low=0.2,
                                epsilon_high=0.2, num_items_in_batch=B * L, num_splits=1)
        J.backward()
        results[loss_type] = (J.detach(), logp.grad)
    J0, g0 = results["grpo"]
    for loss_type, (J, g) in results.items():
        torch.testing.assert_close(J, J0, rtol=0, atol=1e-7, msg=f"{loss_type} differs from grpo at equal lengths")
        torch.testing.assert_close(g, g0, rtol=0, atol=1e-7)
