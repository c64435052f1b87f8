"""The microscope off-policy (`rlhf_scratch.microscope.offpolicy`): the facts theory fixes when the sampler
is not the learner, checked against exact numbers, and TRL 1.16's importance-sampling correction run
from TRL's own source on the same numbers.

The environment is the small one of tests/integration/test_exact.py (4 tokens with EOS, at most 3, 2 prompts: 80
completions), under the sentiment reward (every token matters, so a step along ∇J moves every row
and the stale samplers differ from the learner at every position). The learner is the end of a
history of 4 steps of length 0.6 along the true gradient. Expectations over the sampler are exact sums
(compared to 1e-5); the one Monte-Carlo test uses 3,000 seeded batches and 4 standard errors.
"""

import dataclasses
import inspect
import math
import textwrap
import types

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from rlhf_scratch.core.objectives import sequence_log_probs
from rlhf_scratch.microscope.cli import ExactArgs
from rlhf_scratch.microscope.env import log_probs, prefix_values
from rlhf_scratch.microscope.estimators import Estimator, rloo
from rlhf_scratch.microscope.measure import exact_moments, per_unit, rows_for, weighted_moments
from rlhf_scratch.microscope.offpolicy import (
    VLLM_IS_MODES,
    Sampler,
    bf16_logits,
    correction,
    is_corrected_objective,
    sampler_probabilities,
    sampler_token_log_probs,
    vllm_importance_sampling_ratio,
)
from rlhf_scratch.microscope.offpolicy_run import (
    TRL_DEFAULT,
    OffPolicyScene,
    kl_estimators,
    main_estimators,
    off_policy_scene,
    sampler_facts,
)
from rlhf_scratch.microscope.truth import expected_reward, gradient, truths

EXACT = 1e-5
Z = 4.0
K = 4  # the oldest sampler
ARGS = ExactArgs(out="unused", vocab=4, max_len=3, p_right=(0.3, 0.6), num_generations=4, off_policy_reward="sentiment",
                 stale_step=0.6, staleness=(1, 2, K), top_k=2, top_p=0.8)


@pytest.fixture(scope="module")
def sc() -> OffPolicyScene:
    return off_policy_scene(ARGS)


def by_name(estimators, name):
    return next(e for e in estimators if e.name == name)


def assert_exactly(e: dict, what: str) -> None:
    assert e["cos_to_true"] == pytest.approx(1.0, abs=EXACT), f"{what}: cos {e['cos_to_true']}"
    assert e["norm_ratio"] == pytest.approx(1.0, abs=EXACT), f"{what}: ‖E g‖/‖∇‖ = {e['norm_ratio']}"


def test_the_importance_weight_of_each_trl_mode_by_hand():
    """Two completions, kept tokens [[1, 1, 0], [1, 0, 0]], log π − log q = [[ln 2, ln 3, ·], [ln ¼, ·, ·]]:

        token_*:     w_t = [[2, 3, 1], [¼, 1, 1]]      (1 after the end: d_t = 0 there)
        sequence_*:  w   = [[6], [¼]]                  (2 · 3 and ¼)
        token_truncate, C_max 2.5:    [[2, 2.5, 1], [¼, 1, 1]]      token_mask, C_max 2.5: [[2, 0, 1], [¼, 1, 1]]
        sequence_truncate, C_max 3:   [[3], [¼]]                    sequence_mask, C_max 3: [[0], [¼]]
        … with C_min ½:               [[3], [½]]                    … with C_min ½:         [[0], [0]]

    Red if the ratio is inverted (q/π: ½, ⅓, 4), the sequence weight is a mean instead of a sum of
    logs (√6), the padding's difference is counted, or masking clamps instead of zeroing."""
    logq = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.0, -1.0]])
    logp = logq + torch.tensor([[math.log(2), math.log(3), 5.0], [math.log(0.25), -7.0, 2.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])

    def w(mode, **clips):
        return vllm_importance_sampling_ratio(logp, logq, mask, mode, **clips)

    torch.testing.assert_close(w("token_truncate", clip_max=math.inf), torch.tensor([[2.0, 3.0, 1.0], [0.25, 1.0, 1.0]]))
    torch.testing.assert_close(w("sequence_truncate", clip_max=math.inf), torch.tensor([[6.0], [0.25]]))
    torch.testing.assert_close(w("token_truncate", clip_max=2.5), torch.tensor([[2.0, 2.5, 1.0], [0.25, 1.0, 1.0]]))
    torch.testing.assert_close(w("token_mask", clip_max=2.5), torch.tensor([[2.0, 0.0, 1.0], [0.25, 1.0, 1.0]]))
    torch.testing.assert_close(w("sequence_truncate", clip_max=3.0), torch.tensor([[3.0], [0.25]]))
    torch.testing.assert_close(w("sequence_mask", clip_max=3.0), torch.tensor([[0.0], [0.25]]))
    torch.testing.assert_close(w("sequence_truncate", clip_min=0.5, clip_max=3.0), torch.tensor([[3.0], [0.5]]))
    torch.testing.assert_close(w("sequence_mask", clip_min=0.5, clip_max=3.0), torch.tensor([[0.0], [0.0]]))
    with pytest.raises(ValueError, match="mode: must be one of"):
        w("sequence")


def trl_importance_sampling_ratio(old, sampling, completion_mask, mode, clip_min, clip_max):
    """TRL 1.16's own code: the block of `GRPOTrainer._generate_and_score_completions` that makes
    `vllm_importance_sampling_ratio` (from `if self.use_vllm and self.vllm_importance_sampling_correction:`
    to the reference model's log-probs), cut from the installed source and run on these tensors."""
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    head = "if self.use_vllm and self.vllm_importance_sampling_correction:\n"
    start = source.index(head, source.index("# Compute the importance sampling ratio when using vLLM"))
    start = source.rindex("\n", 0, start) + 1
    end = source.index("# Compute the per-token log probabilities for the reference model", start)
    block = textwrap.dedent(source[start:end])
    trainer = types.SimpleNamespace(use_vllm=True, vllm_importance_sampling_correction=True,
                                    vllm_importance_sampling_mode=mode, vllm_importance_sampling_clip_min=clip_min,
                                    vllm_importance_sampling_clip_max=clip_max)
    namespace = {"self": trainer, "torch": torch, "math": math, "old_per_token_logps": old,
                 "sampling_per_token_logps": sampling, "completion_mask": completion_mask, "tool_mask": None}
    exec(block, namespace)
    return namespace["vllm_importance_sampling_ratio"]


@pytest.mark.parametrize("mode", VLLM_IS_MODES)
@pytest.mark.parametrize("clip_min, clip_max", [(None, 3.0), (0.5, 1.6), (0.8, None)])
def test_our_importance_weights_are_trls_on_the_same_numbers(mode, clip_min, clip_max):
    """Peer check: TRL's own block (`trl_importance_sampling_ratio`) and `vllm_importance_sampling_ratio`
    on the same trainer and sampler log-probs (asymmetric, with padding that differs and one kept token
    the sampler could not score: NaN, which TRL leaves uncorrected), for each mode and bounds. Equal to
    1e-6, and the data reaches both bounds where they are set (so a swapped bound would show)."""
    g = torch.Generator().manual_seed(3)
    old = -torch.rand(3, 5, generator=g) * 2
    sampling = old - 0.8 * torch.randn(3, 5, generator=g)
    sampling[1, 1] = float("nan")
    completion_mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    theirs = trl_importance_sampling_ratio(old, sampling, completion_mask, mode, clip_min, clip_max)
    ours = vllm_importance_sampling_ratio(old, sampling, completion_mask.bool(), mode, clip_min, clip_max)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-6)
    raw = vllm_importance_sampling_ratio(old, sampling, completion_mask.bool(), mode.replace("mask", "truncate"),
                                         clip_max=math.inf)
    kept = raw if mode.startswith("sequence") else raw[completion_mask.bool()]
    assert (clip_max is None or (kept > clip_max).any()) and (clip_min is None or (kept < clip_min).any()), kept


def test_trls_defaults_and_where_the_weight_enters_its_loss():
    """TRL 1.16's GRPOConfig turns the correction on by default, mode sequence_mask, C_max 3, no C_min
    (our TRL_DEFAULT), and `_compute_loss` multiplies each token's loss by the weight (the gradient is
    then w · its own: `is_corrected_objective`). Red if TRL changes either."""
    fields = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    assert fields["vllm_importance_sampling_correction"] is True
    assert (fields["vllm_importance_sampling_mode"], fields["vllm_importance_sampling_clip_max"]) == TRL_DEFAULT
    assert fields["vllm_importance_sampling_clip_min"] is None
    source = inspect.getsource(GRPOTrainer._compute_loss)
    assert 'per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]' in source


def test_the_history_ascends_in_steps_of_the_given_length(sc):
    """θ_{j+1} = θ_j + η ∇J(θ_j)/‖∇J(θ_j)‖: each step has length η exactly and raises J (small steps
    along the gradient). Red if the step is not normalised or goes against the gradient."""
    J = [expected_reward(sc.env, t, sc.rewards).item() for t in sc.path]
    assert len(sc.path) == K + 1 and all(b > a for a, b in zip(J, J[1:])), J
    for a, b in zip(sc.path, sc.path[1:]):
        assert (b - a).norm().item() == pytest.approx(ARGS.stale_step, rel=1e-5)


def test_full_sequence_importance_weights_give_the_learners_gradient_exactly_at_any_staleness(sc):
    """E_q[(π(y)/q(y)) A ∇log π(y)] = Σ_y π(y) A ∇log π(y) = ∇J − V_q(x) E_π[∇log π] = ∇J, for every sampler
    whose support covers π's: every staleness and the bf16 sampler. Per-token weights are not full IS
    (each corrects its own token, not the prefix that led to it): biased at staleness K. Red if the
    weight is inverted (q/π) — the test's own inverted version is far off."""
    full = correction("sequence_truncate", math.inf)
    for s in [sc.stale(k) for k in ARGS.staleness] + sc.mismatches(ARGS.top_k, ARGS.top_p)[:1]:
        assert_exactly(sc.measure(full, s), f"full IS under {s.name}")
    stale = sc.stale(K)
    assert sc.measure(correction("token_truncate", math.inf), stale)["rel_error"] > 0.02

    def inverted(rows):
        w = vllm_importance_sampling_ratio(rows.sampler_logprobs, rows.logprobs.detach(), rows.comps.mask,
                                           "sequence_truncate", clip_max=math.inf)
        A = rows.rewards - rows.values[:, 0]
        return torch.where(rows.comps.mask, w * A[:, None] * rows.logprobs, 0.0).sum()

    assert sc.measure(Estimator("inverted", inverted, "completion", "J", "bug"), stale)["rel_error"] > 0.05


def test_a_sampler_equal_to_the_learner_gives_every_row_its_on_policy_value(sc):
    """Staleness 0 (q = π) and a bf16 sampler of a learner whose logits are already bf16 numbers: every
    weight and ratio is 1, so every correction and every clipped ratio has the expected gradient of no
    correction, which (A = r − V_π(x)) is ∇J exactly; GSPO keeps its own 1/|y| (its on-policy value,
    the same under both). Red if the sampler's log-probs are computed other than the learner's (top-k 0
    or top-p 1 filtering something, the pad differing) or a correction weighs a ratio of 1 other than 1."""
    learner16 = bf16_logits(sc.theta)
    sc16 = dataclasses.replace(sc, path=[learner16], truths=truths(sc.env, learner16, sc.theta_ref, sc.rewards, 0.7, 2))
    for scene, sampler in ((sc, sc.stale(0)), (sc16, Sampler("bf16", "", bf16_logits(learner16)))):
        facts = sampler_facts(scene, sampler)
        assert facts["kl_sampler_learner"] == 0.0 and facts["w_max"] == 1.0, facts
        base = scene.measure(correction(None, None), sampler)
        assert_exactly(base, "no correction, on-policy")
        for est in main_estimators():
            e = scene.measure(est, sampler)
            if est.name == "gspo_clip":
                assert e["cos_to_true"] < 0.99
                continue
            assert e["norm_ratio_along_true"] == pytest.approx(base["norm_ratio_along_true"], abs=EXACT), est.name
            assert e["cos_to_true"] == pytest.approx(base["cos_to_true"], abs=EXACT), est.name
    assert sampler_facts(sc, sc.mismatches(ARGS.top_k, ARGS.top_p)[0])["kl_sampler_learner"] > 0, "bf16 changed nothing"


def test_truncated_is_tends_to_full_is_as_c_grows_and_is_biased_at_small_c(sc):
    """min(w, C) = w once C ≥ max w: sequence TIS at C = 1e9 is full IS exactly (∇J), token TIS at
    C = 1e9 is per-token IS; at C = 1 both are biased at staleness K; so is clamping from BELOW at C
    (the bug `clamp(min=C)`)."""
    stale = sc.stale(K)
    big_seq = sc.measure(correction("sequence_truncate", 1e9), stale)
    assert_exactly(big_seq, "sequence TIS, C = 1e9")
    big_tok = sc.measure(correction("token_truncate", 1e9), stale)
    tok = sc.measure(correction("token_truncate", math.inf), stale)
    assert big_tok["norm_ratio_along_true"] == pytest.approx(tok["norm_ratio_along_true"], abs=EXACT)
    assert sc.measure(correction("sequence_truncate", 1.0), stale)["rel_error"] > 0.02
    wrong_side = Estimator("clamp_min", lambda rows: is_corrected_objective(rows, "sequence_truncate", None, 1.0),
                           "completion", "J", "bug")
    assert sc.measure(wrong_side, stale)["rel_error"] > 0.02


def test_without_a_correction_the_bias_grows_with_staleness(sc):
    """E_q[A ∇log π] with q = π_{θ_{K−k}}: the completions a stale policy draws, scored by the learner.
    0 at k = 0, and (here, exactly) ‖E g − ∇J‖/‖∇J‖ grows with every step of staleness.
    Red if the sampler were the learner after all (stale(k) returning θ_K)."""
    err = [sc.measure(correction(None, None), sc.stale(k))["rel_error"] for k in (0, *ARGS.staleness)]
    assert err[0] < EXACT and all(b > a for a, b in zip(err, err[1:])), err
    assert err[-1] > 0.1, err


def test_a_top_k_sampler_defeats_every_correction_full_is_follows_j_on_its_support(sc):
    """A top-k (or top-p) sampler never draws what it cuts, so no weight reaches those completions:
    E_q[(π/q) A ∇log π] = Σ_{y: q(y) > 0} π(y) A(y) ∇log π(y), the gradient of J restricted to q's
    support (with A's baseline held fixed), not ∇J. Checked to 1e-5 against autograd of that sum.
    Red if the sampler's top-k is not applied (q would cover π and full IS would be exact)."""
    top_k = sc.mismatches(ARGS.top_k, ARGS.top_p)[1]
    q, _, values = sc.sampling(top_k)
    on = q > 0
    assert not bool(on.all())
    for x in range(sc.env.num_prompts):
        assert q[sc.env.completions.prompt == x].sum().item() * 2 == pytest.approx(1.0, abs=1e-6)
    A = sc.rewards - values[sc.env.completions.idx[:, 0]]
    _, restricted = gradient(lambda t: (log_probs(t, sc.env.completions).exp() * A * on).sum() / 2, sc.theta)
    assert sc.measure(correction("sequence_truncate", math.inf), top_k)["rel_error"] > 0.05
    mean = exact_mean(sc, correction("sequence_truncate", math.inf), top_k)
    assert ((mean - restricted.double()).norm() / restricted.norm()).item() < EXACT


def exact_mean(sc, est, sampler):
    """E_q[g] of a one-completion estimator (the mean `measure` summarises)."""
    q, lq, values = sc.sampling(sampler)
    return exact_moments(sc.env, est, sc.theta, sc.theta_ref, sc.rewards, values, sc.knobs, q, lq).mean


def test_under_staleness_only_the_importance_weighted_k1_reward_is_the_reverse_kl_gradient(sc):
    """E_q[w k1_π(y) ∇log π(y)] = Σ_y π k1_π ∇log π = ∇KL(π‖π_ref) with w = π(y)/q(y), exactly. The
    learner's k1 without w, and the k1 the rollout recorded (the sampler's), are not. TRL's ρ k3 with
    ρ = π/q per token has ∇(ρ k3) = ρ k1 ∇log π (k1 = log π − log π_ref at that token): checked to the
    tensor against Σ_t sg(ρ_t) k1_t log π(y_t); at each prefix its mean over y_t ~ q is the gradient of
    the full-vocabulary KL there, so it equals PPO's term under any sampler. Red if ρ is detached in
    k3_loss_rho (then it is k3's gradient × ρ) or the ratio is taken against the learner (ρ = 1)."""
    stale = sc.stale(K)
    ests = kl_estimators()
    assert_exactly(sc.measure(by_name(ests, "k1_reward_is"), stale), "w · k1 in the reward")
    assert sc.measure(by_name(ests, "k1_reward"), stale)["rel_error"] > 0.05
    assert sc.measure(by_name(ests, "k1_reward_sampler"), stale)["rel_error"] > 0.05

    def rho_k1(rows):
        rho = (rows.logprobs.detach() - rows.sampler_logprobs).exp()
        k1 = (rows.logprobs - rows.ref_logprobs).detach()
        return torch.where(rows.comps.mask, rho * k1 * rows.logprobs, 0.0).sum()

    ours = exact_mean(sc, by_name(ests, "k3_loss_rho"), stale)
    hand = exact_mean(sc, Estimator("rho_k1", rho_k1, "completion", "kl_reverse", ""), stale)
    assert ((ours - hand).norm() / hand.norm()).item() < EXACT
    # and per prefix E_{y_t ~ q}[ρ_t k1_t ∇log π_t] = Σ_a π(a) k1(a) ∇log π(a): PPO's full-vocabulary term's gradient
    full = exact_mean(sc, by_name(ests, "kl_full_vocab_loss"), stale)
    assert ((ours - full).norm() / full.norm()).item() < EXACT


def test_rloo_off_policy_unclipped_is_unbiased_and_its_clip_is_not(sc):
    """The package's RLOO (`compute_rloo_advantages`, `calc_rloo_objective` against the sampler's
    sequence log-probs) on batches drawn from the policy K updates ago. With a clip that never binds its
    gradient is (1/n) Σ_i (π(y_i)/q(y_i)) (r_i − b_i) ∇log π(y_i), b_i from the other completions (not
    y_i): full IS with a baseline, unbiased — its size along ∇J is 1 within 4 s.e. With ε = 0.2 the clip
    drops the completions the learner already favours: off by far more than 4 s.e.
    Red if the sampler's log-probs are not the ratio's π_old (the ratio would be 1: no IS)."""
    stale = sc.stale(K)
    q, _, _ = sc.sampling(stale)
    batches = sc.draws(q, 3000, seed=5)
    est = Estimator("rloo_group", rloo, "batch", "J", "")
    wide = dataclasses.replace(sc, knobs=dataclasses.replace(sc.knobs, clip=1e6))
    e = wide.measure(est, stale, batches)
    assert abs(e["norm_ratio_along_true"] - 1) < Z * e["norm_ratio_along_true_se"], e
    clipped = sc.measure(est, stale, batches)
    assert abs(clipped["norm_ratio_along_true"] - 1) > Z * clipped["norm_ratio_along_true_se"], clipped


def test_the_sparse_exact_moments_equal_the_dense_per_completion_gradients(sc):
    """`weighted_moments` (each completion's gradient left in its position rows, which are distinct
    prefixes) equals `per_unit`'s dense θ-gradient per completion: the same Σ q g and Σ q ‖g‖² to
    float64 rounding. Red if two positions of one completion could share a row (then ‖g‖² would miss
    their cross term)."""
    comps = sc.env.completions
    q, lq, values = sc.sampling(sc.stale(K))
    rows = rows_for(comps, sc.theta, sc.theta_ref, sc.rewards, values, sc.knobs, lq)
    (grads,) = torch.autograd.grad(is_corrected_objective(rows, "token_mask", 1.5), rows.logits)
    G, leak = per_unit(sc.env, comps, grads, torch.arange(len(comps)), len(comps))
    mean, second, sparse_leak = weighted_moments(sc.env, comps, grads, q.double())
    torch.testing.assert_close(mean, q.double() @ G, atol=1e-12, rtol=1e-12)
    assert second == pytest.approx((q.double() @ G.pow(2).sum(1)).item(), rel=1e-12)
    assert sparse_leak == leak


def test_the_samplers_distributions_are_proper_and_the_values_are_theirs(sc):
    """Each sampler's q sums to 1 per prompt, and V_q at the prompt is Σ_y q(y|x) r(y) (the sampler's
    value, not the learner's). Red if top-p's nucleus or top-k were applied to the learner's scoring too."""
    for s in [sc.stale(K), *sc.mismatches(ARGS.top_k, ARGS.top_p)]:
        lq = sampler_token_log_probs(s, sc.env.completions)
        q = sampler_probabilities(sc.env, lq)
        for x in range(2):
            at = sc.env.completions.prompt == x
            assert q[at].sum().item() * 2 == pytest.approx(1.0, abs=1e-6), s.name
            V = prefix_values(sc.env, s.theta, sc.rewards, pi=q * 2)
            assert V[x].item() == pytest.approx((q[at] * sc.rewards[at]).sum().item() * 2, rel=1e-5), s.name
    lp = sequence_log_probs(sampler_token_log_probs(Sampler("l", "", sc.theta), sc.env.completions), sc.env.completions.mask)
    torch.testing.assert_close(lp, log_probs(sc.theta, sc.env.completions))


def test_a_bias_over_a_standard_error_of_zero_is_zero_or_infinite_not_a_zero_division():
    """Every Monte-Carlo draw can give the same gradient: under the right/wrong reward a stale sampler whose
    every completion is clipped gives RLOO's update 0 each time (size along ∇J 0 ± 0). Its bias, −1, is
    −∞ standard errors (null in exact.json); no bias is 0 s.e. Red if it divides by the s.e. of 0."""
    from rlhf_scratch.microscope.offpolicy_run import in_se

    assert in_se(-0.5, 0.25) == -2.0
    assert in_se(-1.0, 0.0) == -math.inf and in_se(0.3, 0.0) == math.inf
    assert in_se(0.0, 0.0) == 0.0


def test_the_advice_says_undefined_for_a_cos_of_a_zero_update():
    """A sampler far from a learner near its optimum can give a zero expected update (cos None); the
    advice's number reads "undefined" there, not a TypeError."""
    from rlhf_scratch.microscope.offpolicy_run import _g

    assert _g(None) == "undefined" and _g(math.nan) == "undefined"
    assert (_g(0.12345), _g(2.5e-5), _g(12.345, 4)) == ("0.123", "2.50e-05", "12.35")


@pytest.mark.parametrize("changes, message", [
    ({"stale_step": 1e6}, "stale_step, staleness: the learner at the end of 4 steps of 1e+06 along ∇J (sentiment "
                          "reward) is undefined"),
    ({"stale_step": 4.0, "staleness": (1, 16), "off_policy_reward": "correct"},
     "stale_step, staleness: the learner at the end of 16 steps of 4 along ∇J (correct reward) is too near its optimum"),
])
def test_a_learner_whose_gradient_is_float_rounding_is_refused_in_one_line_naming_the_flags(changes, message):
    """A history so long (or its steps so large) that the learner is deterministic to float precision:
    ∇J is 0 there (the next step divides by it: NaN) or rounding, and full IS, exact in theory, is
    measured off. One ConfigError naming --stale-step and --staleness, not a RuntimeError or a table of noise."""
    from rlhf_scratch.config import ConfigError

    with pytest.raises(ConfigError) as err:
        off_policy_scene(dataclasses.replace(ARGS, **changes))
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_the_off_policy_section_under_the_right_wrong_reward_is_measured():
    """`--off-policy-reward correct`, a listed choice: the section is measured, and where every draw
    of a group estimator gives the same update its bias in s.e. is ±∞ (null in exact.json), not a
    ZeroDivisionError."""
    from rlhf_scratch.microscope.offpolicy_run import measure_off_policy

    args = dataclasses.replace(ARGS, off_policy_reward="correct", off_policy_draws=20, is_clips=(2.0,))
    result = measure_off_policy(args, progress=False)
    groups = [e for rows in result["estimators"].values() for n, e in rows.items() if n.endswith("_group")]
    assert groups and all("bias_in_se" in e for e in groups)
    flat = [e for e in groups if e["norm_ratio_along_true_se"] == 0]
    assert flat and all(math.isinf(e["bias_in_se"]) or e["norm_ratio_along_true"] == 1 for e in flat)
    assert result["advice"] and all(isinstance(line, str) for line in result["advice"])
