"""GRPO: group-relative advantages, the four loss aggregations, GSPO's sequence ratio, the k3 KL and
TRL's ratio-weighted k3 (value and gradient) by hand; the clipped side has no gradient; a bandit
that learns (and one with the sign flipped that does not); the trainer's learning phase checked by
hand; an end-to-end run from the command line."""

import json
import math

import pytest
import torch

from rlhf_scratch.algorithms.grpo import (
    GRPO_METRICS,
    KL_METRIC,
    GRPOTrainer,
    calc_clip_counts,
    calc_grpo_objective,
    calc_importance_ratio,
    calc_k3_kl,
    compute_grpo_advantages,
    mean_length_by_advantage_sign,
)
from rlhf_scratch.config import ConfigError, make_args
from rlhf_scratch.loop import SHARED_METRICS
from rlhf_scratch.runs import read_metrics

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


def bandit(sign: float, loss_type: str = "dapo") -> float:
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
                                    loss_type=loss_type, max_completion_length=1, **EPS)).backward()
        opt.step()
    return theta.softmax(-1)[1].item()


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_a_two_token_bandit_learns_the_rewarded_token(loss_type):
    assert bandit(+1.0, loss_type) > 0.9, "GRPO should have learned to pick the rewarded token"


def test_the_bandit_with_the_objective_negated_unlearns_it():
    assert bandit(-1.0) < 0.1, "descending J must move away from the reward (else the bandit test proves nothing)"


def test_mean_length_by_advantage_sign():
    got = mean_length_by_advantage_sign(torch.tensor([3, 5, 8, 2]), torch.tensor([-1.0, 0.0, -0.5, 2.0]))
    assert got == {"completions/mean_length_neg_adv": 5.5, "completions/mean_length_pos_adv": 2.0}
    assert math.isnan(mean_length_by_advantage_sign(torch.tensor([3]), torch.tensor([0.0]))["completions/mean_length_pos_adv"])


# --- config ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [("loss_type", "sum"), ("scale_rewards", "std"),
                                          ("importance_sampling_level", "tokens"), ("num_generations", 1),
                                          ("epsilon_low", 1.0), ("epsilon_high", 0.0), ("beta", -0.1)])
def test_a_bad_field_is_one_line_naming_it(field, value):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        make_args("tiny", "grpo", **{field: value})


def test_defaults_are_trls():
    args = make_args("tiny", "grpo")
    assert (args.num_generations, args.loss_type, args.scale_rewards, args.importance_sampling_level, args.beta,
            args.epsilon_low, args.epsilon_high, args.top_k, args.num_iterations, args.use_bias_correction_kl) == \
        (8, "dapo", "group", "token", 0.0, 0.2, 0.2, 0, 1, True)


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
    assert set(stats) == set(GRPO_METRICS) | {"kl"}
    assert stats["reward"] == pytest.approx(0.75)
    assert stats["frac_reward_zero_std"] == 0.5
    # one minibatch, at ρ = 1: dapo's J = Σ_i (A_i |o_i| − β k3_i) / N, and TRL's kl = Σ k3 / N
    assert stats["objective/grpo"] == pytest.approx(((adv * lengths).sum() - args.beta * k3.sum()).item() / n.item(),
                                                    abs=1e-5)
    assert stats["kl"] == pytest.approx((k3.sum() / n).item(), abs=1e-6)
    assert stats["clip_ratio/region_mean"] == 0.0, "nothing is clipped at ρ = 1"
    assert stats["completions/mean_length_neg_adv"] == pytest.approx(lengths[[4, 6]].mean().item())
    assert stats["completions/mean_length_pos_adv"] == pytest.approx(lengths[[5, 7]].mean().item())
    assert stats["entropy"] == pytest.approx(rollout.entropy[mask].mean().item(), abs=1e-6)
    assert stats["objective/beta"] == args.beta and stats["charts/skipped_steps"] == 0
    steps = trainer.optimizer.state[next(trainer.policy.parameters())]["step"]
    assert int(steps) == 1, "one optimizer step per minibatch"


def test_the_cli_runs_grpo_end_to_end_without_a_reference(tmp_path, one_thread):
    from rlhf_scratch.train import main

    run_dir = tmp_path / "run"
    assert main(["sentiment", "--algo", "grpo", "--total-phases", "2", "--batch-size", "8", "--num-generations", "4",
                 "--num-minibatches", "2", "--gen-len", "6", "--warmup-steps", "1", "--loss-type", "grpo",
                 "--importance-sampling-level", "sequence", "--threads", "1", "--seed", "2",
                 "--run-dir", str(run_dir)]) == 0
    metrics = read_metrics(run_dir)
    assert [m["phase"] for m in metrics] == [1, 2]
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["algo"], config["loss_type"], config["importance_sampling_level"]) == ("grpo", "grpo", "sequence")
    for m in metrics:
        missing = set(SHARED_METRICS + GRPO_METRICS) - set(m)
        assert missing == {KL_METRIC}, f"missing metrics: {missing - {KL_METRIC}} (kl: only when beta > 0, as TRL)"
        assert "kl" not in m, "TRL logs kl only when β > 0"
        assert math.isnan(m["rollout/kl_full_vocab"]), "β = 0: no reference ran, the KL is not made up"
        assert m["completions/total_tokens"] == 8 * 6, "--prompts prefix: fixed-length completions"
        # fixed lengths: every completion is 6 tokens, whatever its advantage's sign
        assert m["completions/mean_length_neg_adv"] == m["completions/mean_length_pos_adv"] == 6.0
        assert m["reward_std"] == pytest.approx(m["rewards/std"]), "no EOS penalty: scores = rewards"
        assert 0 <= m["clip_ratio/region_mean"] <= 1 and m["objective/beta"] == 0.0
    assert metrics[0]["charts/learning_rate"] == 0.0, "warmup: the first phase trains at 0"
    assert (run_dir / "policy.pt").is_file()


def test_no_reference_model_is_loaded_at_beta_zero(dataset_trainer):
    assert dataset_trainer.ref_model is not None, "β > 0 needs the reference"
    args = make_args("tiny", algo="grpo", batch_size=8, num_generations=4, gen_len=4, threads=1)
    trainer = GRPOTrainer(args, quiet=True)
    assert trainer.ref_model is None
    rollout = trainer.rollout_phase()
    assert rollout.ref_logprobs is None and rollout.kl is None


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
