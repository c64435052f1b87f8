"""Step 13's open problem (`course.open_problem`): the microscope grades a learner's own gradient estimator
exactly — a biased one is called biased by its exact amount, an unbiased one with more variance is not an
answer, a lower-variance unbiased one is — and the board of the package's estimators is the one recorded in
benchmarks/open_problem_2026-11-29.json. Exact sums over 242 completions: no training, about 0.1 s a grade."""

import json
from pathlib import Path

import pytest
import torch

from rlhf_scratch.course import open_problem as op

RECORD = Path(__file__).resolve().parents[2] / "benchmarks" / "open_problem_2026-11-29.json"


def reinforce_with(c: float, scale: float = 1.0):
    """scale · (r(y) + c) ∇log π(y): c a constant baseline (unbiased for any c), scale ≠ 1 biased."""
    def fn(rows):
        return (scale * (rows.rewards + c) * rows.seq_logprobs()).sum()
    return fn


def all_action(rows):
    """Σ_t Σ_a ∇π(a|s_t) (Q(s_t, a) − V̄(s_t)): every next token's value at each visited state, not the drawn one's."""
    q = op.action_values(rows)
    p = rows.logits[:, :-1].softmax(-1)
    v = (p.detach() * q).sum(-1, keepdim=True)
    return ((p * (q - v)).sum(-1) * rows.comps.mask).sum()


def board() -> dict[str, op.Grade]:
    return {g.name: g for g in op.package_board()}


def test_the_learners_reinforce_is_graded_as_the_packages(capsys):
    g = op.grade_gradient_estimator(reinforce_with(0.0), "mine")
    ref = board()["reinforce"]
    assert g.unbiased and g.bias < 1e-5
    assert g.variance == pytest.approx(ref.variance, rel=1e-5)
    out = capsys.readouterr().out
    assert "→ mine" in out and "not lower yet" in out


def test_a_shrunk_estimator_is_biased_by_exactly_its_shrinkage(capsys):
    """0.9 · REINFORCE: E[g] = 0.9 ∇J, so ‖E g − ∇J‖/‖∇J‖ = 0.1 and the size along ∇J 0.9, exactly."""
    g = op.grade_gradient_estimator(reinforce_with(0.0, scale=0.9), "shrunk")
    assert (g.bias, g.along) == pytest.approx((0.1, 0.9), abs=1e-5)
    assert not g.unbiased
    assert "biased by 0.1 " in capsys.readouterr().out


def test_the_per_token_mean_is_on_the_board_as_biased():
    g = board()["reinforce_length_normalised"]
    assert not g.unbiased and g.bias > 0.5


def test_a_constant_baseline_stays_unbiased_and_its_variance_is_quadratic_in_it(capsys):
    """Var[(r + c) s] = Var[r s] + 2c E[r ‖s‖²] + c² E‖s‖² (E[c s] = 0): from c = −1, 0, 1 the variance at
    c = 10 follows; the grade must say unbiased, and not an answer."""
    v = {c: op.grade(reinforce_with(c), f"c={c}").variance for c in (-1.0, 0.0, 1.0)}
    a, b = (v[1.0] - v[-1.0]) / 4, (v[1.0] + v[-1.0] - 2 * v[0.0]) / 2
    g = op.grade_gradient_estimator(reinforce_with(10.0), "plus10")
    assert g.unbiased
    assert g.variance == pytest.approx(v[0.0] + 20 * a + 100 * b, rel=1e-4)
    assert g.variance > 100 * board()[op.TO_BEAT].variance
    assert "plus10: unbiased (exact)" in capsys.readouterr().out


def test_an_estimator_with_less_variance_than_ppos_is_an_answer(capsys):
    g = op.grade_gradient_estimator(all_action, "all_action")
    assert g.unbiased and g.variance < 0.5 * board()[op.TO_BEAT].variance
    assert "an answer, and the lowest on the board" in capsys.readouterr().out


def test_zero_variance_is_called_reading_the_truth():
    g = op.Grade("cheat", 0.0, 1.0, 1.0, 0.0, 0.0)
    assert "not an estimator" in op.verdict(g)


def test_the_leaderboard_orders_unbiased_by_variance_then_biased():
    names = [g.name for g in op.leaderboard(list(op.package_board()))]
    assert names == ["ppo_advantage_pg", "ppo_gae_advantage_pg", "reinforce_value_baseline", "rloo", "reinforce",
                     "grpo_adv_none", "reinforce_length_normalised"]


@pytest.mark.parametrize("name", ["rloo", "grpo_adv_none"])
def test_the_group_entries_are_the_packages_estimators_over_sampled_batches(name):
    """The closed form of `group_grade` against the package's own estimator, Monte-Carlo over 2,000 seeded
    batches of G = 8 of each prompt: the size along ∇J within 4 s.e. (1 for RLOO; (G − 1)/G = 0.875 for GRPO's
    mean, exactly its bias 1/G), and the variance per completion within 8 % (the Monte-Carlo variance's own noise)."""
    sc = op.open_problem_scene()
    exact = board()[name]
    mc = sc.measure(name, sc.draws(2000, seed=3))
    G, X = sc.knobs.num_generations, sc.env.num_prompts
    assert exact.along == pytest.approx(1.0 if name == "rloo" else (G - 1) / G, abs=1e-5)
    assert abs(mc["norm_ratio_along_true"] - exact.along) < 4 * mc["norm_ratio_along_true_se"]
    per_completion = mc["variance"] * X * G / sc.truths["J"].grad.double().pow(2).sum().item()
    assert per_completion == pytest.approx(exact.variance, rel=0.08)


def test_action_values_average_to_the_state_value_and_end_in_the_reward():
    """Σ_a π(a|s) Q(s, a) = V(s) at every visited state (1e-5); Q(x, EOS) is the reward of the empty answer."""
    from rlhf_scratch.microscope.measure import rows_for

    sc = op.open_problem_scene()
    rows = rows_for(sc.env.completions, sc.theta, sc.theta_ref, sc.rewards, sc.values, sc.knobs)
    q = op.action_values(rows)
    p = rows.logits[:, :-1].softmax(-1).detach()
    mask = rows.comps.mask
    assert torch.allclose((p * q).sum(-1)[mask], rows.values[:, :-1][mask], atol=1e-5)
    empty = (sc.env.completions.tokens[:, 1] == 0).nonzero().flatten()  # "." of each prompt
    assert torch.allclose(q[empty, 0, 0], sc.rewards[empty])


def test_a_wrong_return_is_one_assertion_line():
    with pytest.raises(AssertionError, match="return one scalar tensor"):
        op.grade_gradient_estimator(lambda rows: rows.rewards * rows.seq_logprobs())
    with pytest.raises(AssertionError, match="carries no gradient"):
        op.grade_gradient_estimator(lambda rows: (rows.rewards * rows.seq_logprobs().detach()).sum())


def test_the_recorded_board_is_what_the_microscope_computes():
    recorded = json.loads(RECORD.read_text())
    assert recorded["settings"] == {**op.SETTINGS, "p_right": list(op.SETTINGS["p_right"])}
    for name, g in board().items():
        entry = recorded["entries"][name]
        assert entry["variance"] == pytest.approx(g.variance, rel=1e-6)
        assert entry["bias"] == pytest.approx(g.bias, abs=1e-6)
