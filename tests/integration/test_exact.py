"""The exact-gradient microscope (`rlhf_scratch.microscope`): the facts theory fixes, checked against exact numbers.

The environment is small enough to list every completion (4 tokens with EOS, at most 3 tokens, 2
prompts: 80 completions, 104 parameters), so J(θ), both KLs and their gradients are exact sums; an
estimator whose draw is one completion has an exact expectation (compared to float32 precision,
1e-5), one whose draw is a batch a Monte-Carlo one (4,000 seeded batches; compared within 4
standard errors). Each test derives its fact and names the bug that turns it red.
"""

import sys

import pytest
import torch

from rlhf_scratch.algorithms.grpo import calc_grpo_objective
from rlhf_scratch.algorithms.rloo import calc_rloo_objective
from rlhf_scratch.config import GRPO_LOSS_TYPES
from rlhf_scratch.core.advantages import compute_advantages
from rlhf_scratch.core.objectives import calc_clipped_sur_obj, kl_per_token, masked_whiten, sequence_log_probs
from rlhf_scratch.microscope.cli import main
from rlhf_scratch.microscope.env import probabilities
from rlhf_scratch.microscope.estimators import Estimator, k1_loss, k2_loss, token_advantages
from rlhf_scratch.microscope.measure import per_unit, rows_for
from rlhf_scratch.microscope.run import scene

EXACT = 1e-5  # float32 sums over 80 completions
DRAWS = 4000
Z = 4.0  # standard errors


@pytest.fixture(scope="module")
def sentiment():
    """A reward that depends on every token (so V is not trivial and GAE differs from one step)."""
    return scene(vocab=4, max_len=3, p_right=(0.3, 0.6), reward="sentiment", num_generations=4)


@pytest.fixture(scope="module")
def correct():
    """The right/wrong reward (the first token decides), most answers wrong: p(first = a) = 0.2."""
    return scene(vocab=4, max_len=3, p_right=(0.2, 0.2), reward="correct", num_generations=4)


@pytest.fixture(scope="module")
def draws(sentiment):
    return sentiment.draws(DRAWS, seed=1)


def assert_exactly(e: dict, what: str) -> None:
    assert e["cos_to_true"] == pytest.approx(1.0, abs=EXACT), f"{what}: cos {e['cos_to_true']}"
    assert e["norm_ratio"] == pytest.approx(1.0, abs=EXACT), f"{what}: ‖E g‖/‖∇‖ = {e['norm_ratio']}"


def test_every_completion_is_listed_once_and_the_sequence_kl_is_the_sum_of_the_per_position_kls(sentiment):
    """Per prompt: Σ_{l=1}^{L} (V−1)^{l−1} completions that end at EOS plus (V−1)^L cut at L (here
    13 + 27 = 40), each once, and Σ_y π(y|x) = 1. The chain rule of KL then says the sequence KL by
    enumeration equals each prefix's full-vocabulary KL (`kl_per_token`) weighted by the probability
    of reaching it: KL(π‖π_ref) = Σ_p π(p) KL(π(·|p) ‖ π_ref(·|p)).

    Red if the cut completions (no EOS) are missing (Σ π < 1), a completion is listed twice, or the
    mask drops the EOS token (the sequence log-prob then misses log π(EOS) and the KLs differ)."""
    env = sentiment.env
    assert len(env.completions) == 2 * (1 + 3 + 9 + 27) and env.num_params == 2 * 13 * 4
    assert len({tuple(t.tolist()) for t in env.completions.tokens}) == len(env.completions)
    q = probabilities(env, sentiment.theta)
    for x in range(2):
        assert q[env.completions.prompt == x].sum().item() * 2 == pytest.approx(1.0, abs=1e-6)
    comps = env.completions
    rows = rows_for(comps, sentiment.theta, sentiment.theta_ref, sentiment.rewards, sentiment.values, sentiment.knobs)
    per_position = kl_per_token(rows.logits[:, :-1].detach(), rows.ref_logits[:, :-1])  # [n, gen]
    # each prefix once: the position where a completion passes through it, weighted by q(y) and shared
    # among the completions through it as their probabilities share π(prefix)
    weighted = (q[:, None] * torch.where(comps.mask, per_position, torch.zeros_like(per_position))).sum()
    assert weighted.item() == pytest.approx(sentiment.truths["kl_reverse"].value, rel=1e-5)


def test_reinforce_is_exactly_unbiased_and_forgetting_the_mask_is_caught(sentiment):
    """E_π[r ∇log π] = Σ_y ∇π(y) r(y) = ∇J: cos 1 and norm ratio 1 to float precision. The estimator
    uses `calc_rloo_objective` with A = r at ρ = 1, so this also pins that surrogate's gradient.

    A REINFORCE that sums the log-probs of the padding after EOS too (no mask) pushes logits the policy
    never chose: in this model they belong to the pad row, so θ's gradient hides it but `pad_leak`
    shows it. Red if the estimator leaks into padding or the rewards are misaligned with the rows."""
    e = sentiment.measure("reinforce")
    assert_exactly(e, "reinforce")
    assert e["pad_leak"] == 0.0

    def unmasked(rows):
        seq = rows.logprobs.sum(-1)  # the bug: padding included
        return len(rows) * calc_rloo_objective(seq, seq.detach(), rows.rewards, 0.2, 0.2)

    bug = sentiment.measure(Estimator("unmasked", unmasked, "completion", "J", "bug"))
    assert bug["pad_leak"] > 1e-3, "the test's data cannot tell a masked REINFORCE from an unmasked one"


def test_rloo_is_unbiased_and_a_mean_baseline_that_includes_r_i_shrinks_it_by_g_minus_1_over_g(sentiment, draws):
    """RLOO's baseline b_i = mean_{j≠i} r_j does not depend on y_i, so E[b_i ∇log π(y_i)] = 0 and
    E[(r_i − b_i) ∇log π(y_i)] = ∇J: along the true gradient E[g]·∇J/‖∇J‖² = 1 within 4 s.e., and
    ‖E[g] − ∇J‖ no larger than twice the Monte-Carlo error. GRPO's group mean includes r_i:
    E[(r_i − mean_j r_j) s_i] = (1 − 1/G) ∇J, i.e. 3/4 at G = 4, in direction unbiased.

    Red if the leave-one-out baseline includes r_i (RLOO then reads 0.75) or leaks across groups."""
    G = sentiment.knobs.num_generations
    rloo = sentiment.measure("rloo", draws)
    assert abs(rloo["norm_ratio_along_true"] - 1) < Z * rloo["norm_ratio_along_true_se"], rloo
    assert rloo["rel_error"] < 2 * rloo["bias_se"], rloo
    mean = sentiment.measure("grpo_adv_none", draws)
    assert abs(mean["norm_ratio_along_true"] - (G - 1) / G) < Z * mean["norm_ratio_along_true_se"], mean
    assert abs(rloo["norm_ratio_along_true"] - (G - 1) / G) > Z * rloo["norm_ratio_along_true_se"], "can't tell them apart"


def test_with_the_exact_value_ppos_advantages_give_the_exact_policy_gradient(sentiment):
    """With V(s) = E[r | s] exact, the one-step advantage A_t = V(s_{t+1}) − V(s_t) (the reward in place
    of V at the end) has E[A_t | s_t, a_t] = Q(s_t, a_t) − V(s_t), and GAE's later deltas have mean 0
    given s_t, a_t; so Σ_t A_t ∇log π(y_t) has expectation ∇J exactly, for one step and GAE(λ) alike.

    Red if `compute_advantages` / `compute_gae_advantages` misalign values and actions (V(s_t) read
    one position off): the test's own misaligned version shows that such a bug is visible."""
    assert_exactly(sentiment.measure("ppo_advantage_pg"), "one-step advantage, exact V")
    assert_exactly(sentiment.measure("ppo_gae_advantage_pg"), "GAE advantage, exact V")

    def off_by_one(rows):
        shifted = torch.cat([rows.values[:, 1:], rows.values[:, -1:]], dim=1)  # the bug: V(s_{t+1}) as V(s_t)
        A = compute_advantages(shifted, rows.rewards, 1, rows.comps.mask)
        return sequence_log_probs(rows.logprobs * A, rows.comps.mask).sum()

    bug = sentiment.measure(Estimator("off_by_one", off_by_one, "completion", "J", "bug"))
    assert bug["rel_error"] > 0.05, f"a misaligned value function should be visible: {bug['rel_error']}"


def test_the_clipped_surrogates_at_ratio_one_are_advantage_weighted_policy_gradients(sentiment, draws):
    """At ρ = 1 (log π_old = log π, detached) no clip binds and min(ρA, clip(ρ)A) has gradient A ∇ρ = A ∇log π:

        calc_clipped_sur_obj:  ∂J/∂log π_t = mask_t Â_t / N      Â = masked_whiten(A), N = kept tokens
        calc_rloo_objective:   ∂J/∂log π(y_i) = A_i / n
        calc_grpo_objective (dr_grpo):  ∂J/∂log π_{i,t} = mask_{i,t} A_i / (n · L)

    Red if a clip binds at ρ = 1 (a clamp bound on the wrong side of 1), or if the whitening or the
    mean counts the padding."""
    batch = draws[0]
    rows = rows_for(sentiment.env.completions[batch], sentiment.theta, sentiment.theta_ref, sentiment.rewards[batch],
                    sentiment.values, sentiment.knobs)
    logprobs, mask = rows.logprobs.detach().requires_grad_(), rows.comps.mask
    n, L = mask.shape
    A = token_advantages(rows, "one_step", "exact")
    (g,) = torch.autograd.grad(calc_clipped_sur_obj(logprobs, logprobs.detach(), A, 0.2, mask=mask), logprobs)
    torch.testing.assert_close(g, torch.where(mask, masked_whiten(A, mask, 1e-8), 0.0) / mask.sum())
    seq = sequence_log_probs(logprobs, mask)
    (g,) = torch.autograd.grad(calc_rloo_objective(seq, seq.detach(), rows.rewards, 0.2, 0.2), seq)
    torch.testing.assert_close(g, rows.rewards / n)
    (g,) = torch.autograd.grad(calc_grpo_objective(logprobs, logprobs.detach(), rows.rewards, mask, epsilon_low=0.2,
                                                   epsilon_high=0.2, loss_type="dr_grpo", max_completion_length=L),
                               logprobs)
    torch.testing.assert_close(g, torch.where(mask, rows.rewards[:, None], 0.0) / (n * L))


def test_k1_as_a_loss_has_zero_expected_gradient_but_not_when_scored_off_the_sampled_distribution(sentiment):
    """∇k1 = ∇log π(y) (π_ref has no gradient) and E_π[∇log π] = Σ_y ∇π(y) = ∇1 = 0: as a loss term k1
    does nothing in expectation (norm ratio ~1e-7, float rounding), whatever KL it means to estimate.
    That holds only on the distribution sampled: drawn at T = 0.7 but scored at T = 1, E_{π_T}[∇log π] ≠ 0.

    Red if the log-probs are not of the distribution the completions came from (a temperature or
    top-k mismatch), or if the k1 term carries a gradient through π_ref."""
    e = sentiment.measure("k1_loss")
    assert e["norm_ratio"] < EXACT and e["zero_mean"], e
    mismatched = Estimator("k1_at_T1", k1_loss, "completion", "kl_reverse", "k1, sampled at T, scored at 1",
                           sampling="temperature")
    assert sentiment.measure(mismatched)["norm_ratio"] > 0.05


def test_k1_folded_into_the_reward_estimates_the_reverse_kl_gradient_of_whole_sequences(sentiment):
    """∇KL(π‖π_ref) = Σ_y ∇π (log π/π_ref) + Σ_y π ∇log π = E_π[k1(y) ∇log π(y)] + 0, with k1(y) =
    Σ_t (log π − log π_ref) over the whole completion: RLOO's KL-shaped reward (`compute_kl_shaped_rewards`)
    through the score function is exactly the reverse-KL gradient, for sequences too; not the forward one.

    Red if each token's score is paired with its own k1 only (per-token credit: then it is k2's
    gradient, below), or if the shaped reward lets gradient through."""
    e = sentiment.measure("k1_reward")
    assert_exactly(e, "k1 in the reward")
    assert e["cos_kl_forward"] < 0.99, e["cos_kl_forward"]


def test_for_one_token_k2_is_the_reverse_kl_gradient_and_k3_the_forward_one():
    """One token a ~ π: ∇k2 = (log π(a) − log π_ref(a)) ∇log π(a), whose mean is Σ_a ∇π(a)(log π − log π_ref)
    = ∇KL(π‖π_ref). ∇k3 = (1 − π_ref(a)/π(a)) ∇log π(a), whose mean is Σ_a ∇π(a) − Σ_a π_ref(a) ∇log π(a)
    = ∇KL(π_ref‖π). TRL's ρ-weighted k3 has ∇(ρ k3) = (log π − log π_ref) ∇log π at ρ = 1: k2's.

    Red if k3's log-ratio has its sign flipped (x = log π − log π_ref instead of log π_ref − log π), or
    if the ρ weight is detached (then ρ k3 is plain k3 again)."""
    sc = scene(vocab=4, max_len=1, p_right=(0.3, 0.6), reward="sentiment", num_generations=4)
    assert_exactly(sc.measure("k2_loss"), "k2 vs the reverse KL")
    assert_exactly(sc.measure("k3_loss"), "k3 vs the forward KL")
    assert_exactly(sc.measure("k3_loss_rho"), "ρ k3 vs the reverse KL")
    assert sc.measure("k3_loss")["cos_kl_reverse"] < 0.999, "the two KL gradients must differ here to tell k2 from k3"


def test_for_sequences_the_per_token_kl_terms_drop_the_effect_on_later_prefixes(sentiment):
    """For a completion, ∇KL(π‖π_ref) = E[Σ_t ∇log π(y_t) · Σ_{t'≥t} k1_{t'}] (earlier k1's are constants
    for token t: their product with ∇log π(y_t) has mean 0). Per-token k2 keeps only t' = t:

        ∇KL(π‖π_ref) = E[∇ Σ_t k2_t] + E[Σ_t ∇log π(y_t) Σ_{t'>t} k1_{t'}]          (exactly)

    and E[∇ k2_t | y_<t] = ∇ of the full-vocabulary KL at that prefix with π(prefix) held fixed, so
    PPO's per-position KL term, k2 and TRL's ρ k3 share one expected gradient — the local one, which
    misses how θ moves the probability of reaching later prefixes (here ‖E g − ∇KL‖/‖∇KL‖ = 0.17;
    per-token k3 against the forward KL: 0.21, its prefixes weighted by π instead of π_ref).

    Red if the per-position KL term's gradient reached the prefix probabilities (it then equals
    ∇KL), or if k2 were summed with the wrong mask."""
    k2, full, rho = (sentiment.measure(n) for n in ("k2_loss", "kl_full_vocab_loss", "k3_loss_rho"))
    for other in (full, rho):
        assert other["cos_to_true"] == pytest.approx(k2["cos_to_true"], abs=EXACT)
        assert other["norm_ratio"] == pytest.approx(k2["norm_ratio"], abs=EXACT)
    assert k2["rel_error"] > 0.05 and sentiment.measure("k3_loss")["rel_error"] > 0.05

    def future_k1(rows):
        k1 = torch.where(rows.comps.mask, rows.logprobs - rows.ref_logprobs, 0.0).detach()
        later = k1.flip(-1).cumsum(-1).flip(-1) - k1  # Σ_{t' > t} k1_{t'}
        return sequence_log_probs(rows.logprobs * later, rows.comps.mask).sum()

    future = sentiment.moments(Estimator("future", future_k1, "completion", "kl_reverse", "the dropped term"))
    k2_mean = sentiment.moments(Estimator("k2", k2_loss, "completion", "kl_reverse", ""))
    true = sentiment.truths["kl_reverse"].grad.double()
    assert ((k2_mean.mean + future.mean - true).norm() / true.norm()).item() < EXACT


def test_top_k_scored_with_the_full_softmax_is_biased_and_scored_as_sampled_is_not(sentiment):
    """Top-k draws y ~ π_k (the k largest logits renormalised). Scored with π_k itself, E_{π_k}[r ∇log π_k]
    = ∇J_k exactly (J_k = Σ_y π_k(y) r(y)); scored with the full softmax, E_{π_k}[r ∇log π] is the
    gradient of neither J nor J_k: a token outside the top k is never drawn, its logit moves only
    through the normalisation (docs/fidelity.md). Same for temperature: drawn at T and scored at T it
    is ∇J_T exactly; scored at T = 1 it is not.

    Red if `top_k_logits` keeps the wrong tokens (or all of them: the two then agree) or if the
    temperature is not applied when scoring (`temperature_scaled`)."""
    assert_exactly(sentiment.measure("topk_sampled"), "top-k scored as sampled")
    full = sentiment.measure("topk_full_softmax")
    assert full["cos_J"] < 0.99 and full["cos_J_topk"] < 0.99, full
    assert_exactly(sentiment.measure("temperature_sampled"), "temperature scored as sampled")
    assert sentiment.measure("temperature_unscaled")["cos_to_true"] < 0.99


def test_grpo_aggregation_makes_wrong_answers_longer_and_right_ones_shorter_while_dr_grpo_and_rloo_do_not(correct):
    """Right/wrong reward: r depends on the first token only, so ∇J lives on the root rows and the true
    update changes nothing after the first token. Under loss_type grpo a token of y weighs 1/|y|, and
    for the rows after the first token E[A (1/|y|) Σ_t ∇log π(y_t) | first token] = A ∇E[1/|y| | first],
    with A < 0 after a wrong first token (raise E[1/|y|]'s opposite: longer) and A > 0 after the right
    one (shorter): d_length > 0 on the rows after a wrong answer, < 0 after a right one, each beyond
    4 s.e. dr_grpo weighs every token 1/(B·L), a constant, and RLOO sums log-probs: there
    E[A Σ_{t≥2} ∇log π(y_t) | first] = 0, within 4 s.e.

    Red if `calc_grpo_objective`'s grpo divided like dr_grpo (no length effect) or dr_grpo per sequence."""
    batches = correct.draws(DRAWS, seed=2)
    grpo = correct.measure("grpo_grpo", batches)
    assert grpo["d_length_after_wrong"] > Z * grpo["d_length_after_wrong_se"], grpo
    assert grpo["d_length_after_right"] < -Z * grpo["d_length_after_right_se"], grpo
    for name in ("grpo_dr_grpo", "rloo"):
        e = correct.measure(name, batches)
        for part in ("after_wrong", "after_right"):
            assert abs(e[f"d_length_{part}"]) < Z * e[f"d_length_{part}_se"], (name, part, e)


def test_online_dpo_at_the_start_under_a_right_wrong_reward_is_beta_times_the_policy_gradient(correct):
    """At π = π_ref, h = 0: the sigmoid loss's update is (β/2)(s(y_c) − s(y_r)), IPO's (1/β)(s(y_c) − s(y_r))
    (s = ∇log π). With y₁, y₂ iid and a 0/1 reward, the chosen one is the one with r = 1 when they
    differ, and a tie (first chosen) has mean 0 by symmetry, so E[s(y_c) − s(y_r)] = 2 E[s(y₁)(r₁ − r₂)]
    = 2 (∇J − E[s] J) = 2 ∇J: sigmoid gives β ∇J, IPO (2/β) ∇J, exactly.

    Red if `select_chosen` picked the lower reward (−β ∇J) or broke ties toward the second in a
    reward-dependent way."""
    beta = 0.1
    sig, ipo = correct.measure_dpo(beta, "sigmoid"), correct.measure_dpo(beta, "ipo")
    assert sig["cos_to_true"] == pytest.approx(1.0, abs=EXACT) and sig["norm_ratio"] == pytest.approx(beta, rel=EXACT)
    assert ipo["cos_to_true"] == pytest.approx(1.0, abs=EXACT) and ipo["norm_ratio"] == pytest.approx(2 / beta, rel=EXACT)


def test_each_row_gradient_is_summed_into_its_own_unit_and_prefix(sentiment):
    """`per_unit` adds row i, position t's logit gradient into unit u_i, table row idx[i, t]: with
    gradient 1 everywhere, a unit's entry for prefix p counts the (row, position) pairs of the unit
    that read p. Red if rows are summed into the wrong unit or the pad row is counted as θ."""
    comps = sentiment.env.completions[torch.tensor([0, 5, 5])]
    V = sentiment.env.vocab
    G, leak = per_unit(sentiment.env, comps, torch.ones(3, comps.idx.shape[1], V), torch.tensor([0, 1, 1]), 2)
    for u, rows in ((0, [0]), (1, [1, 2])):
        counts = torch.zeros(sentiment.env.num_prefixes)
        for r in rows:
            for p in comps.idx[r].tolist():
                if p < sentiment.env.num_prefixes:
                    counts[p] += 1
        torch.testing.assert_close(G[u].view(-1, V)[:, 0].float(), counts)
    assert leak > 0  # positions after the end read the pad row


SMALL = ["--vocab", "4", "--max-len", "2", "--p-right", "0.3", "0.6", "--num-generations", "2", "--draws", "40",
         "--draws-by-reward", "20", "--lesson-p-right", "0.2", "0.8", "--off-policy-draws", "20", "--staleness", "1", "3",
         "--is-clips", "2", "--top-k", "2"]


def test_the_command_end_to_end(tmp_path, capsys):
    """`python -m rlhf_scratch.exact --out DIR` with small settings: exit 0, the four files, every
    required entry with every required field (bias_se 0 where exact), every GRPO loss type of
    `config.GRPO_LOSS_TYPES` measured, no estimator leaking gradient into padding.

    Red if an entry is renamed or dropped, a loss type is skipped, or an estimator ignores the mask."""
    import json

    out = tmp_path / "exact"
    assert main(["--out", str(out), *SMALL]) == 0
    assert {p.name for p in out.iterdir()} == {"exact.json", "exact.md", "exact.png", "exact_offpolicy.png", "exact.html"}
    data = json.loads((out / "exact.json").read_text())
    entries = data["estimators"]
    required = ["reinforce", "rloo", "ppo_clip_ratio1", "k1_loss", "k2_loss", "k3_loss", "k1_reward",
                "topk_full_softmax", "topk_sampled", *(f"grpo_{lt}" for lt in GRPO_LOSS_TYPES)]
    for name in required:
        e = entries[name]
        for field in ("cos_to_true", "norm_ratio", "bias_se", "variance", "d_length", "true"):
            assert field in e, (name, field)
        assert (e["bias_se"] == 0) == e["exact"], name
    for name, e in entries.items():
        assert e["pad_leak"] == 0.0, f"{name} moves the logits after EOS"
    assert entries["k1_loss"]["zero_mean"] and entries["k1_loss"]["cos_to_true"] is None
    assert entries["topk_sampled"]["true"] == "J_topk" and entries["k3_loss"]["true"] == "kl_forward"
    assert set(data["by_reward"]) == {"length", "sentiment"} and set(data["length_lesson"]) == {"p_right=0.2", "p_right=0.8"}
    off = data["off_policy"]
    samplers = {"stale_0", "stale_1", "stale_3", "bf16", "top_k_2", "top_p_0.9"}
    assert set(off["samplers"]) == set(off["estimators"]) == set(off["kl"]) == set(off["curves"]) == samplers
    assert off["estimators"]["stale_3"]["sequence_truncate_Cinf"]["rel_error"] < 1e-5  # full IS: exact
    assert off["estimators"]["stale_3"]["rloo_group"]["n"] == 20 and "rloo_group" not in off["estimators"]["bf16"]
    assert [p["C"] for p in off["curves"]["stale_3"]["sequence_mask"]] == [2.0, None]
    assert off["advice"] and all(isinstance(line, str) for line in off["advice"])
    assert "exact.json" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--vocab", "2"], "error: vocab: must be >= 3; got 2"),
    (["--draws", "abc"], "error: argument --draws: invalid int value: 'abc'"),
    (["--reward", "nope"], "error: reward: must be one of correct, length, sentiment; got 'nope'"),
    (["--p-right", "0.5", "1.5"], "error: p_right: each must be in (0, 1); got 0.5 1.5"),
    (["--top-k", "9"], "error: top_k: must be <= vocab (5); got 9"),
    (["--vocab", "9", "--max-len", "6"], "error: max_len: 2 prompts x vocab 9 x max_len 6 make 599,186 completions"),
    (["--temperature", "0"], "error: temperature: must be > 0; got 0.0"),
    (["--staleness", "0", "2"], "error: staleness: each must be >= 1; got 0 2"),
    (["--is-clips", "2", "-1"], "error: is_clips: each must be > 0; got 2.0 -1.0"),
    (["--top-p", "1.5"], "error: top_p: must be in (0, 1]; got 1.5"),
    (["--stale-step", "0"], "error: stale_step: must be > 0; got 0.0"),
    (["--off-policy-reward", "x"], "error: off_policy_reward: must be one of correct, length, sentiment; got 'x'"),
    (["--off-policy-reward", "length", "--max-len", "1"], "error: off_policy_reward: length is 1 for every completion"),
    (["--staleness", "1", "1"], "error: staleness: each must be larger than the one before (one row each); got 1 1"),
    (["--staleness", "4", "2"], "error: staleness: each must be larger than the one before (one row each); got 4 2"),
    (["--is-clips", "inf"], "error: is_clips: each must be finite (∞ is always added); got inf"),
    (["--is-clips", "2", "2"], "error: is_clips: each must be larger than the one before (one row each); got 2.0 2.0"),
    (["--bogus"], "error: unrecognized arguments: --bogus"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    """Each bad flag: exit 2, nothing written, one stderr line starting with the rule.
    Red if a traceback or a tyro box escapes, or the folder is created anyway."""
    out = tmp_path / "x"
    assert main(["--out", str(out), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err
    assert not out.exists()


def test_missing_out_or_a_used_folder_is_one_line(tmp_path, capsys):
    """No --out, or a folder that already holds exact.json: one line, exit 2, nothing overwritten."""
    assert main([]) == 2
    assert capsys.readouterr().err.strip() == "error: out: required (the folder to write exact.json and the rest into)"
    (tmp_path / "exact.json").write_text("keep")
    assert main(["--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().startswith(f"error: out: {tmp_path} already holds exact.json")
    assert (tmp_path / "exact.json").read_text() == "keep"


def test_a_bad_flag_is_answered_before_torch_is_imported():
    """The command parses and validates with the config-only modules: a bad flag costs no torch import."""
    import subprocess

    code = ("import sys; from rlhf_scratch.microscope.cli import main; "
            "rc = main(['--out', 'nowhere', '--vocab', '2']); print(rc, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["2", "False"], out
