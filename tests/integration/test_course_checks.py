"""Exercise mode: every check passes the package's solution and fails, with its targeted hint, on a
planted classic bug; the exercise notebooks' check cells pass with the stubs swapped for the solutions,
and the shipped stubs still raise.

The planted bugs are written out below as a learner would (each is the solution with one mistake),
so a check that stopped recognising a mistake, or stopped catching it at all, turns this red.
"""

import functools
import importlib
import importlib.util
import inspect
import math
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from nbclient import NotebookClient

from rlhf_scratch.course import catalogue, checks

EXERCISES = Path(__file__).parents[2] / "notebooks" / "exercises"
EXERCISE_NOTEBOOKS = sorted(EXERCISES.glob("*.ipynb"))
NOTEBOOK_09 = EXERCISES.parent / "09_reward_hacking.ipynb"
NOTEBOOK_10 = EXERCISES.parent / "10_verifiable_rewards.ipynb"
NOTEBOOK_11 = EXERCISES.parent / "11_multi_turn_episodes.ipynb"


def solution(name: str):
    return getattr(importlib.import_module(catalogue.REFERENCES[name].module), name)


def check(name: str):
    return catalogue.CHECKS[name]


def fails_with(name: str, bug, phrase: str) -> str:
    """The check's AssertionError on `bug`, asserted to contain `phrase`."""
    with pytest.raises(AssertionError) as err:
        check(name)(bug)
    assert phrase in str(err.value), f"check_{name} on {bug.__name__} said:\n{err.value}\nexpected the phrase {phrase!r}"
    return str(err.value)


# --- the checks themselves --------------------------------------------------------------------


@pytest.mark.parametrize("name", list(catalogue.REFERENCES))
def test_every_check_passes_the_package_solution_and_prints_one_line(name, capsys):
    check(name)(solution(name))
    n = len(catalogue.CASES[name]())
    assert capsys.readouterr().out == f"check_{name}: all {n} cases pass\n"


@pytest.mark.parametrize("name", list(catalogue.REFERENCES))
def test_the_recorded_signature_is_the_solutions(name):
    params = inspect.signature(solution(name)).parameters.values()
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    actual = "(" + ", ".join(stars.get(p.kind, "") + (p.name if p.default is p.empty else f"{p.name}={p.default!r}")
                             for p in params) + ")"
    assert catalogue.REFERENCES[name].signature == actual


@pytest.mark.parametrize("name", list(catalogue.CASES))
def test_no_classic_mistake_gives_the_answer(name):
    """The cases can tell each recognised mistake from the right answer (and from each other, when
    their hints differ): a mistake whose number equals the answer would pass unnoticed. A mistake
    recognised by a rule (`like`: an eps of the learner's choosing) must take its own worked instance
    and refuse the answer."""
    for case in catalogue.CASES[name]():
        expected = checks._tensor(case.expected)
        for mistake in case.mistakes:
            gives = checks._tensor(mistake.gives)
            assert not mistake.matches(expected, case), f"{name} / {case.name}: {mistake.hint}"
            assert mistake.matches(gives, case), f"{name} / {case.name}: its own worked number is not {mistake.hint}"
            for other in case.mistakes:
                if other.hint != mistake.hint:
                    assert not other.matches(gives, case), f"{name} / {case.name}"


def test_check_names_cover_the_exercises():
    assert set(catalogue.CASES) == set(catalogue.REFERENCES)
    from rlhf_scratch import course

    assert sorted(course.__all__) == sorted(f"check_{name}" for name in catalogue.REFERENCES)


def test_importing_the_course_package_imports_no_torch():
    """The checks load on first use, so a sibling (re-executing the notebooks) starts without torch."""
    code = "import sys, rlhf_scratch.course; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_wrong_signature_is_named_before_anything_runs():
    def get_log_probs(logits, tokens):
        raise AssertionError("never called")

    fails_with("get_log_probs", get_log_probs, "must have the signature of rlhf_scratch.course.solutions_formulas.get_log_probs("
                                               "logits, tokens, prefix_len=None, temperature=1.0)")


def test_something_not_callable_is_named_before_anything_runs():
    """check_normalize_reward(42) in a notebook (the suite's beartype refuses the call itself, so the
    signature check that every check starts with is called here)."""
    with pytest.raises(AssertionError, match=r"^check_normalize_reward: pass your function itself, "
                                             r"normalize_reward\(reward, eps=1e-05\); got int '42'$"):
        checks._check_signature("normalize_reward", 42)


def returning(name: str, value):
    """A learner with the solution's signature that returns `value` (or `value(the solution's answer)`)."""
    answer = solution(name)

    @functools.wraps(answer)
    def fn(*args, **kwargs):
        return value(answer(*args, **kwargs)) if callable(value) else value

    return fn


def as_int64(x):
    return x.long() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


WRONG_RETURNS = {"None": None, "str": "abc", "list": [0.5], "ndarray": np.zeros(3), "float": 0.5, "int64": as_int64}


@pytest.mark.parametrize("name", list(catalogue.REFERENCES))
def test_a_wrong_type_returned_is_one_assertion_error_of_the_check(name, capsys):
    """None, a str, a list, a numpy array, a float, or the solution's floating-point answer as int64:
    each check answers with its own AssertionError (check_<name> …), never a TypeError from inside the
    check. Passing is allowed only where the wrong value is not the answer's (int64 of an integer answer,
    or a return the check does not read)."""
    for label, value in WRONG_RETURNS.items():
        try:
            check(name)(returning(name, value))
        except AssertionError as e:
            assert str(e).startswith(f"check_{name}"), f"{label}: {e}"
            if label == "int64":
                assert "int64" in str(e) or "floating" in str(e), f"{label}: {e}"
        else:
            assert label == "int64" or name == "reward_model_step", f"check_{name} passed a learner returning {label}"
    capsys.readouterr()


@pytest.mark.parametrize("name, value, phrase", [
    ("calc_k3_kl", None, "your calc_k3_kl returned None, where the solution returns a float32 tensor of shape (121, 4)"),
    ("calc_k3_kl", np.zeros(3), "your calc_k3_kl returned a numpy array (float64) of shape (3,)"),
    ("early_stop_index", None, "your early_stop_index returned None, where the solution returns an int 2"),
    ("minibatch_rows", None, "your minibatch_rows returned None, where the solution returns a generator"),
    ("paired_difference_interval", "abc", "your paired_difference_interval returned a str 'abc', where the solution "
                                          "returns a tuple of 3"),
    ("steered_logits", as_int64, "your steered_logits returned an int64 tensor of shape (2, 5, 10), where the solution "
                                 "returns a float32 tensor of shape (2, 5, 10)\n  hint: compute in the inputs' floating"),
    # the hand case's answer is integral ([[1, 7], [6, −8]]): int64 of it passed before
    ("compute_advantages", as_int64, "your compute_advantages returned an int64 tensor of shape (2, 2), where the "
                                     "solution returns a float32 tensor"),
    ("completion_mask", lambda m: m.float(), "your completion_mask returned a float32 tensor of shape (3, 4), where the "
                                             "solution returns a bool tensor of shape (3, 4)\n  hint: a mask is a bool"),
])
def test_the_wrong_type_or_dtype_is_named_with_the_case_and_what_the_solution_returns(name, value, phrase):
    message = fails_with(name, returning(name, value), phrase)
    assert message.startswith(f"check_{name} failed on case 1/"), message


def test_an_exception_of_the_learner_names_the_case_it_raised_on():
    """The learner's own error: one AssertionError naming the case and the error, chained to it (so the
    traceback still shows the learner's line); a stub's NotImplementedError stays one."""
    def compute_advantages(values, rewards, prefix_len, mask=None):
        if mask is not None:
            raise IndexError("my bug with the mask")
        return solution("compute_advantages")(values, rewards, prefix_len)

    with pytest.raises(AssertionError) as err:
        check("compute_advantages")(compute_advantages)
    assert str(err.value) == ("check_compute_advantages failed on case 2/2 (row 1 ends at EOS (mask)):\n"
                              "  your compute_advantages raised IndexError: my bug with the mask")
    assert isinstance(err.value.__cause__, IndexError)

    def normalize_reward(reward, eps=1e-05):
        raise NotImplementedError

    with pytest.raises(NotImplementedError):
        check("normalize_reward")(normalize_reward)


def test_an_unknown_mistake_still_shows_the_case_and_both_numbers():
    def value_loss_cubed(values, mb_returns, vf_coef, mask=None):
        return 0.5 * vf_coef * (values - mb_returns).abs().pow(3).mean()

    message = fails_with("calc_value_fn_loss", value_loss_cubed, "not a mistake this check knows")
    assert "case 1/2 (three positions, vf_coef = 0.2)" in message and "expected 0.166667" in message


def test_a_right_value_without_a_gradient_is_refused():
    def kl_as_a_number(logits, ref_logits, beta, mask=None, from_logprobs=False):
        return torch.tensor(solution("calc_kl_penalty")(logits, ref_logits, beta, mask).item())

    fails_with("calc_kl_penalty", kl_as_a_number, "carries no gradient")


# --- planted bugs: get_log_probs --------------------------------------------------------------


def log_probs_off_by_one(logits, tokens, prefix_len=None, temperature=1.0):
    """Pairs logits[t] with tokens[t]."""
    start = 1 if prefix_len is None else prefix_len
    logprobs = (logits[:, start:] / temperature).log_softmax(-1)
    return logprobs.gather(-1, tokens[:, start:, None]).squeeze(-1)


def log_probs_via_log_of_softmax(logits, tokens, prefix_len=None, temperature=1.0):
    start = 1 if prefix_len is None else prefix_len
    probs = (logits[:, start - 1 : -1] / temperature).softmax(-1)
    return probs.log().gather(-1, tokens[:, start:, None]).squeeze(-1)


def log_probs_times_temperature(logits, tokens, prefix_len=None, temperature=1.0):
    start = 1 if prefix_len is None else prefix_len
    logprobs = (logits[:, start - 1 : -1] * temperature).log_softmax(-1)
    return logprobs.gather(-1, tokens[:, start:, None]).squeeze(-1)


def test_get_log_probs_recognises_the_off_by_one():
    fails_with("get_log_probs", log_probs_off_by_one, "off by one between logits and tokens")


def test_get_log_probs_recognises_log_of_softmax_at_logits_x100():
    message = fails_with("get_log_probs", log_probs_via_log_of_softmax, "use x.log_softmax(-1)")
    assert "case 4/4 (stability: logits x 100)" in message, "the first three cases are right"


def test_get_log_probs_recognises_a_multiplied_temperature():
    fails_with("get_log_probs", log_probs_times_temperature, "divide the logits by the temperature")


# --- compute_advantages -----------------------------------------------------------------------


def advantages_v_minus_q(values, rewards, prefix_len, mask=None):
    q = torch.cat([values[:, prefix_len:-1], rewards[:, None]], dim=1)
    return values[:, prefix_len - 1 : -1] - q


def advantages_ignoring_the_mask(values, rewards, prefix_len, mask=None):
    q = torch.cat([values[:, prefix_len:-1], rewards[:, None]], dim=1)
    return q - values[:, prefix_len - 1 : -1]


def advantages_monte_carlo(values, rewards, prefix_len, mask=None):
    return rewards[:, None] - values[:, prefix_len - 1 : -1]


def test_compute_advantages_recognises_the_sign():
    fails_with("compute_advantages", advantages_v_minus_q, "you computed V(s_t) - Q")


def test_compute_advantages_recognises_an_ignored_mask():
    fails_with("compute_advantages", advantages_ignoring_the_mask, "the reward arrives there and padding gets 0")


def test_compute_advantages_recognises_the_monte_carlo_advantage():
    fails_with("compute_advantages", advantages_monte_carlo, "Monte-Carlo advantage")


# --- normalize_reward -------------------------------------------------------------------------


def normalize_with_population_std(reward, eps=1e-5):
    return (reward - reward.mean()) / (reward.std(unbiased=False) + eps)


def normalize_without_a_guard_for_one(reward, eps=1e-5):
    return (reward - reward.mean()) / (reward.std() + eps)


def test_normalize_reward_recognises_the_population_std_and_says_which_the_reference_uses():
    message = fails_with("normalize_reward", normalize_with_population_std, "population std (÷ n)")
    assert "unbiased std" in message and "Bessel" in message


@pytest.mark.filterwarnings("ignore:std\\(\\)")  # the planted bug takes the std of one number
def test_normalize_reward_recognises_nan_for_a_batch_of_one():
    fails_with("normalize_reward", normalize_without_a_guard_for_one, "a batch of one")


# --- calc_clipped_sur_obj ---------------------------------------------------------------------


def _whiten_kept(adv, mask, eps, unbiased=True):
    kept = adv if mask is None else adv[mask]
    return (adv - kept.mean()) / (kept.std(unbiased=unbiased) + eps)


def surrogate_with_max(logprobs, mb_logprobs, mb_advantages, clip_coef, eps=1e-8, mask=None):
    ratio, adv = (logprobs - mb_logprobs).exp(), _whiten_kept(mb_advantages, mask, eps)
    return torch.maximum(ratio * adv, ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv).mean()


def surrogate_with_population_std(logprobs, mb_logprobs, mb_advantages, clip_coef, eps=1e-8, mask=None):
    ratio, adv = (logprobs - mb_logprobs).exp(), _whiten_kept(mb_advantages, mask, eps, unbiased=False)
    return torch.minimum(ratio * adv, ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv).mean()


def surrogate_counting_padding(logprobs, mb_logprobs, mb_advantages, clip_coef, eps=1e-8, mask=None):
    """Whitened over the kept tokens, but the mean divides by every position."""
    ratio, adv = (logprobs - mb_logprobs).exp(), _whiten_kept(mb_advantages, mask, eps)
    terms = torch.minimum(ratio * adv, ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv)
    return terms.mean() if mask is None else (terms * mask).mean()


def test_clipped_sur_obj_recognises_max_for_min():
    fails_with("calc_clipped_sur_obj", surrogate_with_max, "min, not max")


def test_clipped_sur_obj_recognises_the_population_std():
    fails_with("calc_clipped_sur_obj", surrogate_with_population_std, "whitened with the population std")


def test_clipped_sur_obj_recognises_padding_in_the_mean():
    fails_with("calc_clipped_sur_obj", surrogate_counting_padding, "padding counted in the mean")


# --- calc_kl_penalty --------------------------------------------------------------------------


def _masked_mean(x, mask):
    return x.mean() if mask is None else x[mask].mean()


def kl_wrong_direction(logits, ref_logits, beta, mask=None, from_logprobs=False):
    logprobs, ref = logits.log_softmax(-1), ref_logits.log_softmax(-1)
    return beta * _masked_mean((ref.exp() * (ref - logprobs)).sum(-1), mask)


def kl_without_beta(logits, ref_logits, beta, mask=None, from_logprobs=False):
    logprobs, ref = logits.log_softmax(-1), ref_logits.log_softmax(-1)
    return _masked_mean((logprobs.exp() * (logprobs - ref)).sum(-1), mask)


def kl_via_log_of_softmax(logits, ref_logits, beta, mask=None, from_logprobs=False):
    p, q = logits.softmax(-1), ref_logits.softmax(-1)
    return beta * _masked_mean((p * (p.log() - q.log())).sum(-1), mask)


def test_kl_penalty_recognises_the_wrong_direction():
    fails_with("calc_kl_penalty", kl_wrong_direction, "wrong KL direction")


def test_kl_penalty_recognises_a_missing_beta():
    fails_with("calc_kl_penalty", kl_without_beta, "forgot to multiply by beta")


def test_kl_penalty_recognises_log_of_softmax_at_logits_x100():
    fails_with("calc_kl_penalty", kl_via_log_of_softmax, "log(softmax(x)) underflows")


# --- calc_entropy_bonus -----------------------------------------------------------------------


def entropy_without_coef(logits, ent_coef, mask=None, from_logprobs=False):
    logprobs = logits.log_softmax(-1)
    return _masked_mean(-(logprobs.exp() * logprobs).sum(-1), mask)


def entropy_with_the_sign_flipped(logits, ent_coef, mask=None, from_logprobs=False):
    logprobs = logits.log_softmax(-1)
    return ent_coef * _masked_mean((logprobs.exp() * logprobs).sum(-1), mask)


def entropy_ignoring_the_mask(logits, ent_coef, mask=None, from_logprobs=False):
    logprobs = logits.log_softmax(-1)
    return ent_coef * (-(logprobs.exp() * logprobs).sum(-1)).mean()


def test_entropy_bonus_recognises_a_missing_coefficient():
    fails_with("calc_entropy_bonus", entropy_without_coef, "forgot to multiply by ent_coef")


def test_entropy_bonus_recognises_the_sign():
    fails_with("calc_entropy_bonus", entropy_with_the_sign_flipped, "sign: the entropy is -Σ p log p")


def test_entropy_bonus_recognises_an_ignored_mask():
    fails_with("calc_entropy_bonus", entropy_ignoring_the_mask, "the mask was ignored")


# --- calc_value_fn_loss -----------------------------------------------------------------------


def value_loss_without_the_half(values, mb_returns, vf_coef, mask=None):
    return vf_coef * _masked_mean((values - mb_returns) ** 2, mask)


def value_loss_counting_padding(values, mb_returns, vf_coef, mask=None):
    errors = (values - mb_returns) ** 2
    return 0.5 * vf_coef * (errors if mask is None else errors * mask).mean()


def test_value_fn_loss_recognises_a_missing_half():
    fails_with("calc_value_fn_loss", value_loss_without_the_half, "you forgot the 1/2")


def test_value_fn_loss_recognises_padding_in_the_mean():
    fails_with("calc_value_fn_loss", value_loss_counting_padding, "padding counted in the mean")


# --- compute_rloo_advantages ------------------------------------------------------------------


def rloo_with_the_group_mean(rewards, num_generations):
    grouped = rewards.view(-1, num_generations)
    return (grouped - grouped.mean(dim=1, keepdim=True)).flatten()


def rloo_with_groups_across_the_batch(rewards, num_generations):
    G = num_generations
    grouped = rewards.view(G, -1)  # the mistake: a prompt's G completions read as every (batch/G)-th row
    return (grouped - (grouped.sum(dim=0, keepdim=True) - grouped) / (G - 1)).flatten()


def test_rloo_recognises_the_mean_baseline():
    fails_with("compute_rloo_advantages", rloo_with_the_group_mean, "leave-one-out subtracts the mean of the OTHER")


def test_rloo_recognises_groups_read_across_the_batch():
    fails_with("compute_rloo_advantages", rloo_with_groups_across_the_batch, "view(-1, G), not view(G, -1)")


# --- compute_grpo_advantages ------------------------------------------------------------------


def grpo_with_population_std(rewards, num_generations, scale_rewards="group"):
    grouped = rewards.view(-1, num_generations)
    centred = (grouped - grouped.mean(dim=1, keepdim=True)).flatten()
    std = grouped.std(dim=1, unbiased=False).repeat_interleave(num_generations)
    return centred / (std + 1e-4)


def grpo_without_the_epsilon(rewards, num_generations, scale_rewards="group"):
    grouped = rewards.view(-1, num_generations)
    centred = (grouped - grouped.mean(dim=1, keepdim=True)).flatten()
    return centred / grouped.std(dim=1).repeat_interleave(num_generations)


def test_grpo_recognises_the_population_std_and_says_which_the_reference_uses():
    message = fails_with("compute_grpo_advantages", grpo_with_population_std, "the std with ÷ n (population)")
    assert "unbiased std, ÷ (n-1)" in message


def test_grpo_recognises_nan_for_a_group_of_equal_rewards():
    fails_with("compute_grpo_advantages", grpo_without_the_epsilon, "a group of equal rewards has std 0")


# --- calc_dpo_loss ----------------------------------------------------------------------------


def _dpo(margin_fn, loss_fn):
    """A DPO loss with the margin and the per-pair loss given; the rest (IPO, weights, rewards) right."""

    def calc_dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta,
                      loss_type="sigmoid", weights=None):
        h = margin_fn(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
        losses = loss_fn(beta * h) if loss_type == "sigmoid" else (h - 1 / (2 * beta)) ** 2
        loss = losses.mean() if weights is None else (weights * losses).sum() / weights.sum().clamp(min=1)
        return (loss, beta * (policy_chosen_logps - ref_chosen_logps).detach(),
                beta * (policy_rejected_logps - ref_rejected_logps).detach())

    return calc_dpo_loss


def right_margin(pc, pr, rc, rr):
    return (pc - pr) - (rc - rr)


dpo_via_log_of_sigmoid = _dpo(right_margin, lambda x: -torch.sigmoid(x).log())
dpo_chosen_and_rejected_swapped = _dpo(lambda pc, pr, rc, rr: (pr - pc) - (rr - rc), lambda x: -F.logsigmoid(x))
dpo_without_beta = _dpo(right_margin, lambda x: -F.logsigmoid(x / 0.5))  # the check's first case has β = 0.5


def test_dpo_recognises_log_of_sigmoid_at_a_huge_margin():
    message = fails_with("calc_dpo_loss", dpo_via_log_of_sigmoid, "use F.logsigmoid(x)")
    assert "(stability: a margin of -10000)" in message


def test_dpo_recognises_chosen_and_rejected_swapped():
    fails_with("calc_dpo_loss", dpo_chosen_and_rejected_swapped, "the margin's sign is flipped")


def test_dpo_recognises_a_missing_beta():
    fails_with("calc_dpo_loss", dpo_without_beta, "β is missing")


def test_dpo_recognises_beta_outside_the_sigmoid():
    """-β log σ(h) and -log(β σ(h)): the exercise warns of it, so the check names both."""
    def dpo_beta_times_the_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps,
                                beta, loss_type="sigmoid", weights=None):
        h = right_margin(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
        return (-beta * F.logsigmoid(h).mean(), beta * (policy_chosen_logps - ref_chosen_logps).detach(),
                beta * (policy_rejected_logps - ref_rejected_logps).detach())

    def dpo_log_of_beta_sigma(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps,
                              beta, loss_type="sigmoid", weights=None):
        h = right_margin(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
        return (-(math.log(beta) + F.logsigmoid(h)).mean(), beta * (policy_chosen_logps - ref_chosen_logps).detach(),
                beta * (policy_rejected_logps - ref_rejected_logps).detach())

    fails_with("calc_dpo_loss", dpo_beta_times_the_loss, "not -β log σ(h)")
    fails_with("calc_dpo_loss", dpo_log_of_beta_sigma, "not -log(β σ(h))")


def test_dpo_asks_for_the_implicit_rewards_too():
    def dpo_loss_only(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta,
                      loss_type="sigmoid", weights=None):
        return solution("calc_dpo_loss")(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps,
                                         ref_rejected_logps, beta, loss_type, weights)[0]  # the loss

    fails_with("calc_dpo_loss", dpo_loss_only, "return (loss, chosen_rewards, rejected_rewards)")


# --- calc_reward_model_loss -------------------------------------------------------------------


def _bt(log_sigmoid, coefficient=lambda c: c, swap=False):
    """A Bradley–Terry loss with the log-sigmoid and the centring coefficient given."""

    def calc_reward_model_loss(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None):
        diff = (rejected_rewards - chosen_rewards) if swap else (chosen_rewards - rejected_rewards)
        loss = -log_sigmoid(diff if margin is None else diff - margin).mean()
        if center_rewards_coefficient is not None:
            loss = loss + coefficient(center_rewards_coefficient) * ((chosen_rewards + rejected_rewards) ** 2).mean()
        return loss

    return calc_reward_model_loss


rm_via_log_of_sigmoid = _bt(lambda x: torch.sigmoid(x).log())
rm_chosen_and_rejected_swapped = _bt(F.logsigmoid, swap=True)
rm_centring_without_its_coefficient = _bt(F.logsigmoid, coefficient=lambda c: 1.0)


def test_reward_model_loss_recognises_log_of_sigmoid():
    fails_with("calc_reward_model_loss", rm_via_log_of_sigmoid, "log(sigmoid(x)) is log(0) = -inf")


def test_reward_model_loss_recognises_chosen_and_rejected_swapped():
    fails_with("calc_reward_model_loss", rm_chosen_and_rejected_swapped, "chosen and rejected are swapped")


def test_reward_model_loss_recognises_a_missing_coefficient():
    fails_with("calc_reward_model_loss", rm_centring_without_its_coefficient,
               "forgot to multiply by center_rewards_coefficient")


# --- exercises 03: compute_gae_advantages, explained_variance, direct_logit_attribution -------


def test_the_reading_solutions_agree_with_the_package_on_random_inputs():
    """course/solutions.py is plain torch with loops; the package's functions are vectorised: the same numbers."""
    from rlhf_scratch.core.advantages import compute_gae_advantages
    from rlhf_scratch.core.objectives import explained_variance
    from rlhf_scratch.course import solutions

    g = torch.Generator().manual_seed(0)
    values, rewards = torch.randn(5, 9, generator=g), torch.randn(5, generator=g)
    mask = torch.arange(6)[None, :] < torch.tensor([6, 3, 1, 0, 5])[:, None]  # EOS at different steps, one empty
    for m in (None, mask):
        ours = solutions.compute_gae_advantages(values, rewards, 3, 0.9, 0.7, mask=m)
        assert torch.allclose(ours, compute_gae_advantages(values, rewards, 3, 0.9, 0.7, mask=m), atol=1e-6)
        returns = ours + values[:, 2:-1]
        assert math.isclose(solutions.explained_variance(values[:, 2:-1], returns, m),
                            explained_variance(values[:, 2:-1], returns, m), rel_tol=1e-5)


def test_the_dla_solution_is_the_packages_component_logit_diff(tiny_random_lm):
    """On a model's own cache: the components of its final residual at the last position, ln_final's
    cached scale, its weight and W_U[:, pos] − W_U[:, neg] give interp's attributions (bias row aside),
    and with the bias they sum to the logit difference."""
    from interp.logits import SentimentTokens, logit_diff, sentiment_direction
    from interp.residual import component_logit_diff, decompose_final_resid
    from rlhf_scratch.course.solutions import direct_logit_attribution

    model, g = tiny_random_lm, torch.Generator().manual_seed(1)
    with torch.no_grad():
        model.ln_final.w.copy_(1 + 0.3 * torch.randn(model.cfg.d_model, generator=g))
        model.ln_final.b.copy_(0.3 * torch.randn(model.cfg.d_model, generator=g))
        tokens = torch.randint(0, 50, (3, 7), generator=g)
        logits, cache = model.run_with_cache(tokens)
        st = SentimentTokens((4, 9), (17,), ("a", "b"), ("c",))
        theirs, _ = component_logit_diff(cache, st)
        parts, _ = decompose_final_resid(cache)
        ours = direct_logit_attribution(parts[:, :, -1], cache["ln_final.hook_scale"][:, -1], model.ln_final.w,
                                        sentiment_direction(model, st))
    assert torch.allclose(ours, theirs[:-1], atol=1e-5)
    assert torch.allclose(ours.sum(0) + theirs[-1], logit_diff(logits, st), atol=1e-5)


@torch.no_grad()
def _gae(values, rewards, prefix_len, gamma, gae_lambda, mask=None, *, lam_in_recursion=True, bootstrap=False,
         use_mask=True):
    """GAE written as a learner would, with the mistakes to plant."""
    v, next_v = values[:, prefix_len - 1 : -1], values[:, prefix_len:]
    gen_len = v.shape[1]
    if mask is None or not use_mask:
        mask = torch.ones_like(v, dtype=torch.bool)
    last = mask.sum(1) - 1
    out = torch.zeros_like(v)
    for b in range(v.shape[0]):
        running = 0.0
        for t in reversed(range(gen_len)):
            if t > last[b]:
                continue
            end = t == last[b]
            nv = next_v[b, t] if (not end or bootstrap) else 0.0
            delta = (rewards[b] if end else 0.0) + gamma * nv - v[b, t]
            running = delta + gamma * (gae_lambda if lam_in_recursion else 1.0) * running
            out[b, t] = running
    return out


def gae_without_lambda(values, rewards, prefix_len, gamma, gae_lambda, mask=None):
    return _gae(values, rewards, prefix_len, gamma, gae_lambda, mask, lam_in_recursion=False)


def gae_bootstrapping_past_the_end(values, rewards, prefix_len, gamma, gae_lambda, mask=None):
    return _gae(values, rewards, prefix_len, gamma, gae_lambda, mask, bootstrap=True)


def gae_ignoring_the_mask(values, rewards, prefix_len, gamma, gae_lambda, mask=None):
    return _gae(values, rewards, prefix_len, gamma, gae_lambda, mask, use_mask=False)


def test_gae_recognises_lambda_missing_from_the_recursion():
    fails_with("compute_gae_advantages", gae_without_lambda, "λ is missing from the recursion")


def test_gae_recognises_a_bootstrap_past_the_last_token():
    fails_with("compute_gae_advantages", gae_bootstrapping_past_the_end, "you bootstrapped past the end")


def test_gae_recognises_the_mask_ignored_at_eos():
    message = fails_with("compute_gae_advantages", gae_ignoring_the_mask, "the mask was ignored")
    assert "case 2/3 (row 1 ends at EOS" in message, "the first case has no mask"


def ev_with_squared_error(values, returns, mask=None):
    if mask is not None:
        values, returns = values[mask], returns[mask]
    return 1 - ((returns - values) ** 2).mean() / returns.var(unbiased=False)


def ev_ignoring_the_mask(values, returns, mask=None):
    return 1 - (returns - values).var() / returns.var()  # unbiased on both: the ratio is the same


def ev_zero_when_nothing_to_explain(values, returns, mask=None):
    if mask is not None:
        values, returns = values[mask], returns[mask]
    var = returns.var()
    return torch.tensor(0.0) if var == 0 else 1 - (returns - values).var() / var


def test_explained_variance_recognises_the_squared_error_for_the_variance():
    fails_with("explained_variance", ev_with_squared_error, "Var[R − V] is centred")


def test_explained_variance_recognises_the_mask_ignored():
    fails_with("explained_variance", ev_ignoring_the_mask, "the mask was ignored")


def test_explained_variance_wants_nan_when_the_returns_are_constant():
    fails_with("explained_variance", ev_zero_when_nothing_to_explain, "return NaN (CleanRL's), not 0")


@pytest.mark.parametrize("eps", [1e-8, 1e-6, 1e-3])
def test_explained_variance_names_an_eps_in_the_denominator_whatever_the_eps(eps):
    """1 − Var[R − V] / (Var[R] + eps): right to 1e-7 where Var[R] > 0, −Var[R − V]/eps where it is 0."""
    def ev_with_eps(values, returns, mask=None):
        if mask is not None:
            values, returns = values[mask], returns[mask]
        return 1 - (returns - values).var(unbiased=False) / (returns.var(unbiased=False) + eps)

    message = fails_with("explained_variance", ev_with_eps, "an eps in the denominator")
    assert "case 3/3 (nothing to explain: Var[R] = 0)" in message, message


def dla_with_each_components_own_scale(components, scale, ln_weight, direction):
    """ln_final applied to each component as if it were the whole residual (its own mean and std)."""
    return torch.nn.functional.layer_norm(components, (components.shape[-1],)) @ (ln_weight * direction)


def dla_without_centring(components, scale, ln_weight, direction):
    return (components / scale) @ (ln_weight * direction)


def dla_without_the_ln_weight(components, scale, ln_weight, direction):
    return ((components - components.mean(-1, keepdim=True)) / scale) @ direction


def test_dla_recognises_each_components_own_scale():
    fails_with("direct_logit_attribution", dla_with_each_components_own_scale, "FROZEN scale")


def test_dla_recognises_the_missing_centring():
    fails_with("direct_logit_attribution", dla_without_centring, "centre each component first")


def test_dla_recognises_the_missing_ln_weight():
    fails_with("direct_logit_attribution", dla_without_the_ln_weight, "ln_final's weight is missing")


def test_every_check_has_a_planted_bug_here():
    """Each check is shown failing on at least one planted bug in this file or a sibling test_course_*.py
    (test_course_sampling.py: exercises 04; test_course_interp.py: 05)."""
    source = "".join(p.read_text() for p in Path(__file__).parent.glob("test_course_*.py"))
    for name in catalogue.REFERENCES:
        assert re.search(rf'fails_with\(\s*"{name}"', source), f"no planted bug for check_{name}"


# --- the exercise notebooks -------------------------------------------------------------------


def _code_cells(nb, tag):
    return [c for c in nb.cells if c.cell_type == "code" and tag in c.metadata.get("tags", [])]


def test_the_notebooks_are_what_the_generator_writes():
    """notebooks/exercises/make_exercises.py is the source; the notebooks on disk are its output."""
    spec = importlib.util.spec_from_file_location("make_exercises", EXERCISES / "make_exercises.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert sorted(generator.NOTEBOOKS) == [p.name for p in EXERCISE_NOTEBOOKS]
    for path in EXERCISE_NOTEBOOKS:
        on_disk, built = nbformat.read(path, as_version=4), generator.NOTEBOOKS[path.name]
        assert [(c.cell_type, c.source, c.metadata) for c in on_disk.cells] == \
               [(c.cell_type, c.source, c.metadata) for c in built.cells], f"{path.name}: run make_exercises.py"


def test_the_exercises_cover_every_check_once():
    """notebooks/exercises/ and notebooks 09 (reward hacking) and 10 (verifiable rewards), whose stubs are in the
    notebooks themselves."""
    names = [c.metadata["exercise"] for path in [*EXERCISE_NOTEBOOKS, NOTEBOOK_09, NOTEBOOK_10, NOTEBOOK_11]
             for c in _code_cells(nbformat.read(path, as_version=4), "exercise")]
    assert sorted(names) == sorted(catalogue.REFERENCES)


@pytest.mark.parametrize("path", EXERCISE_NOTEBOOKS, ids=lambda p: p.stem)
def test_shipped_stubs_raise_and_have_the_solutions_signature(path):
    """As shipped, every stub raises NotImplementedError (no solution in the exercise notebook), is
    followed by its check cell, and has the solution's signature: its check gets past the signature
    test to the stub's raise."""
    nb = nbformat.read(path, as_version=4)
    namespace: dict = {}
    setup = next(c for c in nb.cells if c.cell_type == "code" and not c.metadata.get("tags"))
    exec(setup.source, namespace)  # imports and the checks
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not re.search(r"rlhf_scratch\.(?!course\b)", cell.source), f"a solution is imported:\n{cell.source}"
    for stub in _code_cells(nb, "exercise"):
        name = stub.metadata["exercise"]
        assert "raise NotImplementedError" in stub.source, f"{name}: the stub must raise NotImplementedError"
        assert f"def {name}(" in stub.source or f"class {name}" in stub.source  # a function, or a module to write
        after = nb.cells[nb.cells.index(stub) + 1]
        assert after.source == f"check_{name}({name})" and "check" in after.metadata["tags"]
        exec(stub.source, namespace)
        with pytest.raises(NotImplementedError):
            namespace[f"check_{name}"](namespace[name])


@pytest.mark.slow  # a kernel per notebook
@pytest.mark.parametrize("path", EXERCISE_NOTEBOOKS, ids=lambda p: p.stem)
def test_exercise_notebook_passes_every_check_with_the_solutions(path, tmp_path):
    """The notebook executed with each stub cell replaced by the import of the package's solution:
    every check cell prints its pass line."""
    nb = nbformat.read(path, as_version=4)
    for stub in _code_cells(nb, "exercise"):
        name = stub.metadata["exercise"]
        stub.source = f"from {catalogue.REFERENCES[name].module} import {name}"
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    for cell in _code_cells(nb, "check"):
        name = cell.metadata["exercise"]
        printed = "".join(o.get("text", "") for o in cell.outputs  # stdout: an import's warning goes to stderr
                          if o.output_type == "stream" and o.get("name") == "stdout")
        assert printed == f"check_{name}: all {len(catalogue.CASES[name]())} cases pass\n", f"{name}: {cell.outputs}"

