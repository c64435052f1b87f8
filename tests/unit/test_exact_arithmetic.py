"""The microscope's arithmetic environment (issue 56, item 7): the facts theory fixes, on one-digit sums.

Two problems (0+4=4 and 4+7=11: a one-token and a two-token answer), π(right answer) 0.1 and 0.5, the
rule accuracy reward: 2,222 completions, 2,442 parameters. An estimator whose draw is one completion
has an exact expectation; a group estimator's expectation under a 0/1 reward is exact too
(`microscope.groups`), so "unbiased" is checked to float precision, not within a Monte-Carlo error
(the reduction against the package's estimators sampled, and the command: tests/integration/test_exact_arithmetic_command.py).
Each test says the bug that turns it red.
"""

import math
from dataclasses import replace

import pytest
import torch

from rlhf_scratch.microscope.arithmetic import (
    answer_rows,
    arithmetic_policies,
    make_arithmetic_environment,
    one_digit_sums,
)
from rlhf_scratch.microscope.env import probabilities, rewards_of
from rlhf_scratch.microscope.groups import coefficient, exact_group_estimator
from rlhf_scratch.microscope.run import arithmetic_scene, policy_facts

EXACT = 1e-5  # float32 sums over 2,222 completions
P_RIGHT = (0.1, 0.5)


@pytest.fixture(scope="module")
def sc():
    return arithmetic_scene(P_RIGHT, num_generations=8)


def parts(sc):
    """‖∇J_x‖² of each prompt's part of ∇J (the prompts' rows are disjoint)."""
    grad = sc.truths["J"].grad.double()
    return [grad[sc.env.param_rows(lambda p, x=x: p[0] == x)].pow(2).sum().item() for x in range(sc.env.num_prompts)]


def test_every_completion_is_listed_and_the_rule_rewards_exactly_one_per_prompt():
    """Per prompt 1 + 10 + 100 that end at EOS and 1,000 cut at 3 tokens, each once; the accuracy rule
    (`reward.verifiable`) on the decoded text pays exactly the ground truth then EOS: "4" for 0+4=, not
    "04" (a leading zero), not "40" (the whole line is compared), not "" — while the format rule pays "40".
    Red if EOS is decoded into the text, the cut completions are missing, or the rule accepts "04"."""
    env = make_arithmetic_environment(one_digit_sums(2, 0))
    assert env.prompt_text == ("0+4=", "4+7=") and env.ground_truth == ("4", "11")
    assert len(env.completions) == 2 * 1111 and env.num_params == 2 * 111 * 11
    assert len({tuple(t.tolist()) for t in env.completions.tokens}) == len(env.completions)
    acc, fmt = rewards_of(env, "accuracy"), rewards_of(env, "format")
    text = {(int(x), env.text(i)): i for i, x in enumerate(env.completions.prompt)}
    assert [env.text(i) for i in answer_rows(env)] == ["4.", "11."] and acc.sum() == 2
    for shown, a, f in (("4.", 1, 1), ("04.", 0, 0), ("40.", 0, 1), ("400", 0, 1), (".", 0, 0), ("11.", 0, 1)):
        i = text[(0, shown)]
        assert (acc[i].item(), fmt[i].item()) == (a, f), (shown, acc[i].item(), fmt[i].item())
    assert fmt.sum() == 2 * (10 + 90 + 900)  # "0" … "9", "10" … "99", "100" … "999"


def test_the_policy_gives_each_prompt_its_own_probability_of_the_right_answer():
    """π(right | x) = p_right[x] exactly (each of the k answer tokens at p^(1/k)), in the prompts' order,
    and Σ_y π(y | x) = 1. Red if the path is set on the wrong prompt (the asymmetric 0.1, 0.5 swap) or
    a step's probability is p instead of p^(1/k)."""
    env = make_arithmetic_environment(one_digit_sums(2, 0))
    theta, _ = arithmetic_policies(env, 0, P_RIGHT)
    q = probabilities(env, theta) * 2
    assert q[answer_rows(env)].tolist() == pytest.approx(list(P_RIGHT), abs=1e-6)
    for x in range(2):
        assert q[env.completions.prompt == x].sum().item() == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("name", ["reinforce", "ppo_advantage_pg", "ppo_gae_advantage_pg", "k1_reward", "topk_sampled",
                                  "temperature_sampled"])
def test_an_unbiased_estimators_expectation_is_the_true_gradient_to_float_precision(sc, name):
    """E[g] = Σ_y q(y) g(y) over every completion equals its true gradient: REINFORCE and PPO's advantage
    from the exact V (one step and GAE) ∇J, k1 in the reward ∇KL(π‖π_ref), top-k and temperature scored
    as sampled ∇J_k and ∇J_T. Red if a mask, a value read one position off or a log-prob at the wrong
    temperature enters."""
    e = sc.measure(name)
    assert e["exact"] and e["rel_error"] < EXACT, (name, e["rel_error"])
    assert e["cos_to_true"] == pytest.approx(1.0, abs=EXACT) and e["norm_ratio"] == pytest.approx(1.0, abs=EXACT)


def test_the_biased_ones_show_their_bias_exactly(sc):
    """Exact, so any gap is bias: top-k scored with the full softmax and temperature sampling scored at T = 1
    leave their gradient's direction; k1 as a loss has zero expectation. Red if the estimators were
    scored as sampled (they would be exact)."""
    assert sc.measure("topk_full_softmax")["cos_to_true"] < 0.999
    assert sc.measure("temperature_unscaled")["cos_to_true"] < 0.99
    k1 = sc.measure("k1_loss")
    assert k1["zero_mean"] and k1["norm_ratio"] < 1e-5


def hand_coefficient(G: int, p: float) -> float:
    """c = Σ_k P(K = k) [A(1, k) − A(0, k)] for GRPO's group std, from the closed form: m ones in a group
    of G have mean m/G and unbiased std σ_m = √(m (G − m) / (G (G − 1)))."""
    sigma = lambda m: math.sqrt(m * (G - m) / (G * (G - 1)))
    total = 0.0
    for k in range(G):
        right = (1 - (k + 1) / G) / (sigma(k + 1) + 1e-4)
        wrong = -(k / G) / (sigma(k) + 1e-4)
        total += math.comb(G - 1, k) * p**k * (1 - p) ** (G - 1 - k) * (right - wrong)
    return total


def test_the_group_coefficients_against_hand_worked_numbers():
    """By hand for G = 4 (σ_1 = σ_3 = 1/2, σ_2 = 1/√3; ε = 1e-4): A(1,k) − A(0,k) = 1.49970, 1.36577, 1.36577,
    1.49970 for k = 0 … 3, so c(0.1) = 1.49970 · 0.730 + 1.36577 · 0.270 = 1.46354 and c(0.5) = 1.49970 · 0.25
    + 1.36577 · 0.75 = 1.39925 — different: the std scales a hard prompt's part more. RLOO's is 1 and the
    group mean's (G − 1)/G = 0.75 whatever p. For G = 3 every k gives (2/3)/(1/√3 + ε) = 1.15450.
    Red if the std is the biased (n) one, r_i is left out of the group, or the binomial has G, not G − 1, draws."""
    assert coefficient("group", 4, 0.1) == pytest.approx(1.46354, abs=2e-5)
    assert coefficient("group", 4, 0.5) == pytest.approx(1.39925, abs=2e-5)
    for p in (0.1, 0.5, 0.9):
        assert coefficient("rloo", 4, p) == pytest.approx(1.0, abs=1e-6)
        assert coefficient("none", 4, p) == pytest.approx(0.75, abs=1e-6)
        assert coefficient("group", 3, p) == pytest.approx(1.15450, abs=2e-5)
        assert coefficient("group", 8, p) == pytest.approx(hand_coefficient(8, p), abs=1e-5)


def test_group_estimators_exactly_rloo_unbiased_grpo_mean_shrunk_grpo_std_turned(sc):
    """Exact expectations under the 0/1 reward: RLOO's is ∇J to float precision; GRPO's group mean
    (G − 1)/G ∇J (cos 1, size 0.875); GRPO's std scales each prompt's part by its own c_x, so
    cos = Σ c_x a_x / (√(Σ c_x² a_x) √(Σ a_x)), a_x = ‖∇J_x‖², below 1. Red if the baseline leaves r_i in
    (RLOO would be 0.875) or the std is shared across prompts (cos would be 1)."""
    p = tuple(policy_facts(sc)["p_right"])
    rloo = sc.measure(exact_group_estimator("rloo", p, 8))
    assert rloo["rel_error"] < EXACT and rloo["norm_ratio_along_true"] == pytest.approx(1.0, abs=EXACT)
    mean = sc.measure(exact_group_estimator("grpo_adv_none", p, 8))
    assert mean["cos_to_true"] == pytest.approx(1.0, abs=EXACT) and mean["norm_ratio_along_true"] == pytest.approx(7 / 8, abs=EXACT)
    std = sc.measure(exact_group_estimator("grpo_adv_group", p, 8))
    c, a = [coefficient("group", 8, px) for px in p], parts(sc)
    cos = sum(ci * ai for ci, ai in zip(c, a)) / math.sqrt(sum(ci * ci * ai for ci, ai in zip(c, a)) * sum(a))
    assert std["cos_to_true"] == pytest.approx(cos, abs=EXACT) and std["cos_to_true"] < 0.999
    assert std["norm_ratio_along_true"] == pytest.approx(sum(ci * ai for ci, ai in zip(c, a)) / sum(a), abs=EXACT)


def test_a_group_estimator_refuses_a_reward_that_is_not_zero_or_one(sc):
    """The reduction needs r ∈ {0, 1}: a graded reward is one ValueError line, not a wrong number."""
    graded = sc.rewards.clone()
    graded[0] = 0.5
    with pytest.raises(ValueError, match="exact only under a 0/1 reward"):
        replace(sc, rewards=graded).measure(exact_group_estimator("rloo", P_RIGHT, 8))
    assert torch.equal(sc.rewards, rewards_of(sc.env, "accuracy"))
