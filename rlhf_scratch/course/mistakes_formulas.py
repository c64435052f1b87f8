"""Planted mistakes of exercises 01, PPO's objective term by term (`checks.py`): the log-probs, the one-step
advantage, the reward's normalisation, the clipped surrogate, the KL penalty, the entropy bonus, the value loss.
Each function is the solution with one classic mistake, written as a learner writes it; `PLANTED` says what its
check must name (`course.mistakes` gathers them).
"""


import torch

from rlhf_scratch.course import solutions_formulas as sol
from rlhf_scratch.course.planted import Planted


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


def advantages_v_minus_q(values, rewards, prefix_len, mask=None):
    q = torch.cat([values[:, prefix_len:-1], rewards[:, None]], dim=1)
    return values[:, prefix_len - 1 : -1] - q


def advantages_ignoring_the_mask(values, rewards, prefix_len, mask=None):
    q = torch.cat([values[:, prefix_len:-1], rewards[:, None]], dim=1)
    return q - values[:, prefix_len - 1 : -1]


def advantages_monte_carlo(values, rewards, prefix_len, mask=None):
    return rewards[:, None] - values[:, prefix_len - 1 : -1]


def normalize_with_population_std(reward, eps=1e-5):
    return (reward - reward.mean()) / (reward.std(unbiased=False) + eps)


def normalize_without_a_guard_for_one(reward, eps=1e-5):
    return (reward - reward.mean()) / (reward.std() + eps)


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


def entropy_without_coef(logits, ent_coef, mask=None, from_logprobs=False):
    logprobs = logits.log_softmax(-1)
    return _masked_mean(-(logprobs.exp() * logprobs).sum(-1), mask)


def entropy_with_the_sign_flipped(logits, ent_coef, mask=None, from_logprobs=False):
    logprobs = logits.log_softmax(-1)
    return ent_coef * _masked_mean((logprobs.exp() * logprobs).sum(-1), mask)


def entropy_ignoring_the_mask(logits, ent_coef, mask=None, from_logprobs=False):
    logprobs = logits.log_softmax(-1)
    return ent_coef * (-(logprobs.exp() * logprobs).sum(-1)).mean()


def value_loss_without_the_half(values, mb_returns, vf_coef, mask=None):
    return vf_coef * _masked_mean((values - mb_returns) ** 2, mask)


def value_loss_counting_padding(values, mb_returns, vf_coef, mask=None):
    errors = (values - mb_returns) ** 2
    return 0.5 * vf_coef * (errors if mask is None else errors * mask).mean()


def log_probs_raw_logits(logits, tokens, prefix_len=None, temperature=1.0):
    start = 1 if prefix_len is None else prefix_len
    return (logits[:, start - 1 : -1] / temperature).gather(-1, tokens[:, start:, None]).squeeze(-1)  # no log_softmax


def log_probs_probabilities(logits, tokens, prefix_len=None, temperature=1.0):
    start = 1 if prefix_len is None else prefix_len
    return (logits[:, start - 1 : -1] / temperature).softmax(-1).gather(-1, tokens[:, start:, None]).squeeze(-1)


def log_probs_prefix_len_ignored(logits, tokens, prefix_len=None, temperature=1.0):
    return sol.get_log_probs(logits, tokens, None, temperature)


def log_probs_temperature_ignored(logits, tokens, prefix_len=None, temperature=1.0):
    return sol.get_log_probs(logits, tokens, prefix_len)


def advantages_states_shifted(values, rewards, prefix_len, mask=None):
    q = torch.cat([values[:, prefix_len + 1 :], rewards[:, None]], dim=1)
    return q - values[:, prefix_len:]  # V(s_t) read one state late


def advantages_without_the_reward(values, rewards, prefix_len, mask=None):
    return values[:, prefix_len:] - values[:, prefix_len - 1 : -1]  # Q_last = V(s_{last+1}), a state that is not there


def advantages_padding_zeroed_reward_at_the_end(values, rewards, prefix_len, mask=None):
    q = torch.cat([values[:, prefix_len:-1], rewards[:, None]], dim=1)
    a = q - values[:, prefix_len - 1 : -1]
    return a if mask is None else torch.where(mask, a, 0.0)


def normalize_not_centred(reward, eps=1e-5):
    return reward / (reward.std() + eps) if reward.numel() > 1 else torch.zeros_like(reward)


def normalize_not_scaled(reward, eps=1e-5):
    return reward - reward.mean()


def normalize_by_the_variance(reward, eps=1e-5):
    return (reward - reward.mean()) / (reward.var() + eps) if reward.numel() > 1 else torch.zeros_like(reward)


def normalize_without_eps(reward, eps=1e-5):
    return (reward - reward.mean()) / reward.std() if reward.numel() > 1 else torch.zeros_like(reward)


def normalize_eps_inside_the_root(reward, eps=1e-5):
    return (reward - reward.mean()) / (reward.var() + eps).sqrt() if reward.numel() > 1 else torch.zeros_like(reward)


def _surrogate(logprobs, mb_logprobs, mb_advantages, clip_coef, eps, mask, *, whiten=True, clip=True, pick=torch.minimum,
               upside_down=False, padding_in_whitening=False):
    ratio = (logprobs - mb_logprobs).exp()
    ratio = 1 / ratio if upside_down else ratio
    if whiten:
        adv = _whiten_kept(mb_advantages, None if padding_in_whitening else mask, eps)
    else:
        adv = mb_advantages
    clipped = ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv
    terms = pick(ratio * adv, clipped) if clip else ratio * adv
    return _masked_mean(terms, mask)


def surrogate_unclipped(logprobs, mb_logprobs, mb_advantages, clip_coef, eps=1e-8, mask=None):
    return _surrogate(logprobs, mb_logprobs, mb_advantages, clip_coef, eps, mask, clip=False)


def surrogate_clipped_term_alone(logprobs, mb_logprobs, mb_advantages, clip_coef, eps=1e-8, mask=None):
    return _surrogate(logprobs, mb_logprobs, mb_advantages, clip_coef, eps, mask, pick=lambda a, b: b)


def surrogate_not_whitened(logprobs, mb_logprobs, mb_advantages, clip_coef, eps=1e-8, mask=None):
    return _surrogate(logprobs, mb_logprobs, mb_advantages, clip_coef, eps, mask, whiten=False)


def surrogate_ratio_upside_down(logprobs, mb_logprobs, mb_advantages, clip_coef, eps=1e-8, mask=None):
    return _surrogate(logprobs, mb_logprobs, mb_advantages, clip_coef, eps, mask, upside_down=True)


def surrogate_as_a_loss(logprobs, mb_logprobs, mb_advantages, clip_coef, eps=1e-8, mask=None):
    return -_surrogate(logprobs, mb_logprobs, mb_advantages, clip_coef, eps, mask)


def surrogate_whitened_with_the_padding(logprobs, mb_logprobs, mb_advantages, clip_coef, eps=1e-8, mask=None):
    return _surrogate(logprobs, mb_logprobs, mb_advantages, clip_coef, eps, mask, padding_in_whitening=True)


def _kl_terms(logits, ref_logits):
    logprobs, ref = logits.log_softmax(-1), ref_logits.log_softmax(-1)
    return (logprobs.exp() * (logprobs - ref)).sum(-1)


def kl_summed_over_positions(logits, ref_logits, beta, mask=None, from_logprobs=False):
    kl = _kl_terms(logits, ref_logits)
    return beta * (kl.sum() if mask is None else kl[mask].sum())


def kl_with_the_sign_flipped(logits, ref_logits, beta, mask=None, from_logprobs=False):
    return -beta * _masked_mean(_kl_terms(logits, ref_logits), mask)


def kl_log_ratio_unweighted(logits, ref_logits, beta, mask=None, from_logprobs=False):
    return beta * _masked_mean((logits.log_softmax(-1) - ref_logits.log_softmax(-1)).sum(-1), mask)


def kl_counting_padding(logits, ref_logits, beta, mask=None, from_logprobs=False):
    kl = _kl_terms(logits, ref_logits)
    return beta * (kl if mask is None else kl * mask).mean()


def kl_ignoring_the_mask(logits, ref_logits, beta, mask=None, from_logprobs=False):
    return beta * _kl_terms(logits, ref_logits).mean()


def kl_as_a_number(logits, ref_logits, beta, mask=None, from_logprobs=False):
    """The right value through .item(): it carries no gradient back to the policy."""
    return torch.tensor(sol.calc_kl_penalty(logits, ref_logits, beta, mask).item())


def _entropy(logits):
    logprobs = logits.log_softmax(-1)
    return -(logprobs.exp() * logprobs).sum(-1)


def entropy_summed_over_positions(logits, ent_coef, mask=None, from_logprobs=False):
    h = _entropy(logits)
    return ent_coef * (h.sum() if mask is None else h[mask].sum())


def entropy_via_log_of_softmax(logits, ent_coef, mask=None, from_logprobs=False):
    p = logits.softmax(-1)
    return ent_coef * _masked_mean(-(p * p.log()).sum(-1), mask)


def entropy_counting_padding(logits, ent_coef, mask=None, from_logprobs=False):
    h = _entropy(logits)
    return ent_coef * (h if mask is None else h * mask).mean()


def value_loss_without_vf_coef(values, mb_returns, vf_coef, mask=None):
    return 0.5 * _masked_mean((values - mb_returns) ** 2, mask)


def value_loss_summed(values, mb_returns, vf_coef, mask=None):
    errors = (values - mb_returns) ** 2
    return 0.5 * vf_coef * (errors.sum() if mask is None else errors[mask].sum())


def value_loss_absolute_errors(values, mb_returns, vf_coef, mask=None):
    return 0.5 * vf_coef * _masked_mean((values - mb_returns).abs(), mask)


def value_loss_with_the_sign_flipped(values, mb_returns, vf_coef, mask=None):
    return -0.5 * vf_coef * _masked_mean((values - mb_returns) ** 2, mask)


def value_loss_ignoring_the_mask(values, mb_returns, vf_coef, mask=None):
    return 0.5 * vf_coef * ((values - mb_returns) ** 2).mean()



def log_probs_over_positions(logits, tokens, prefix_len=None, temperature=1.0):
    start = 1 if prefix_len is None else prefix_len
    logprobs = (logits[:, start - 1 : -1] / temperature).log_softmax(1)  # dim=1: the positions, not the vocabulary
    return logprobs.gather(-1, tokens[:, start:, None]).squeeze(-1)


def log_probs_over_positions_then_sliced(logits, tokens, prefix_len=None, temperature=1.0):
    start = 1 if prefix_len is None else prefix_len
    logprobs = (logits / temperature).log_softmax(1)[:, start - 1 : -1]
    return logprobs.gather(-1, tokens[:, start:, None]).squeeze(-1)


def kl_over_positions(logits, ref_logits, beta, mask=None, from_logprobs=False):
    logprobs, ref = logits.log_softmax(1), ref_logits.log_softmax(1)
    return beta * _masked_mean((logprobs.exp() * (logprobs - ref)).sum(-1), mask)


def entropy_over_positions(logits, ent_coef, mask=None, from_logprobs=False):
    logprobs = logits.log_softmax(1)
    return ent_coef * _masked_mean(-(logprobs.exp() * logprobs).sum(-1), mask)


def surrogate_log_ratio_as_ratio(logprobs, mb_logprobs, mb_advantages, clip_coef, eps=1e-8, mask=None):
    adv = _whiten_kept(mb_advantages, mask, eps)
    ratio = logprobs - mb_logprobs  # the exp forgotten
    return _masked_mean(torch.minimum(ratio * adv, ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv), mask)

P = Planted
PLANTED: tuple[Planted, ...] = (
    P("get_log_probs", "off-by-one", log_probs_off_by_one, "off by one between logits and tokens"),
    P("get_log_probs", "log-of-softmax", log_probs_via_log_of_softmax, "use x.log_softmax(-1)",
      also=("case 4/4 (stability: logits x 100)",)),
    P("get_log_probs", "times-temperature", log_probs_times_temperature, "divide the logits by the temperature"),
    P("get_log_probs", "raw-logits", log_probs_raw_logits, "those are the raw logits of the tokens"),
    P("get_log_probs", "probabilities", log_probs_probabilities, "those are probabilities: take the log"),
    P("get_log_probs", "prefix-len-ignored", log_probs_prefix_len_ignored, "prefix_len ignored"),
    P("get_log_probs", "temperature-ignored", log_probs_temperature_ignored, "the temperature was ignored"),
    P("compute_advantages", "v-minus-q", advantages_v_minus_q, "you computed V(s_t) - Q"),
    P("compute_advantages", "mask-ignored", advantages_ignoring_the_mask, "the reward arrives there and padding gets 0"),
    P("compute_advantages", "monte-carlo", advantages_monte_carlo, "Monte-Carlo advantage"),
    P("compute_advantages", "states-shifted", advantages_states_shifted, "states shifted by one"),
    P("compute_advantages", "reward-missing", advantages_without_the_reward, "the reward is missing"),
    P("compute_advantages", "reward-at-last-column", advantages_padding_zeroed_reward_at_the_end,
      "the reward must arrive at the last kept token"),
    P("normalize_reward", "population-std", normalize_with_population_std, "population std (÷ n)",
      also=("unbiased std", "Bessel")),
    P("normalize_reward", "batch-of-one", normalize_without_a_guard_for_one, "a batch of one"),
    P("normalize_reward", "not-centred", normalize_not_centred, "subtract the mean before dividing by the std"),
    P("normalize_reward", "not-scaled", normalize_not_scaled, "did not divide by the std"),
    P("normalize_reward", "variance", normalize_by_the_variance, "divide by the std, not the variance"),
    P("normalize_reward", "eps-ignored", normalize_without_eps, "eps was ignored"),
    P("normalize_reward", "eps-inside-root", normalize_eps_inside_the_root, "eps goes outside the square root"),
    P("calc_clipped_sur_obj", "max-for-min", surrogate_with_max, "min, not max"),
    P("calc_clipped_sur_obj", "population-std", surrogate_with_population_std, "whitened with the population std"),
    P("calc_clipped_sur_obj", "padding-counted", surrogate_counting_padding, "padding counted in the mean"),
    P("calc_clipped_sur_obj", "unclipped", surrogate_unclipped, "the ratio was not clipped"),
    P("calc_clipped_sur_obj", "clipped-term-alone", surrogate_clipped_term_alone, "not the clipped term alone"),
    P("calc_clipped_sur_obj", "not-whitened", surrogate_not_whitened, "normalise the advantages per minibatch first"),
    P("calc_clipped_sur_obj", "ratio-upside-down", surrogate_ratio_upside_down, "the ratio is upside down"),
    P("calc_clipped_sur_obj", "a-loss", surrogate_as_a_loss, "an objective to MAXIMISE"),
    P("calc_clipped_sur_obj", "padding-in-whitening", surrogate_whitened_with_the_padding,
      "whitened with the padding included"),
    P("calc_kl_penalty", "wrong-direction", kl_wrong_direction, "wrong KL direction"),
    P("calc_kl_penalty", "beta-missing", kl_without_beta, "forgot to multiply by beta"),
    P("calc_kl_penalty", "log-of-softmax", kl_via_log_of_softmax, "log(softmax(x)) underflows"),
    P("calc_kl_penalty", "sum", kl_summed_over_positions, "the mean over positions, not the sum"),
    P("calc_kl_penalty", "sign", kl_with_the_sign_flipped, "sign: the penalty is a positive number"),
    P("calc_kl_penalty", "unweighted", kl_log_ratio_unweighted, "weight each log-ratio by pi(v)"),
    P("calc_kl_penalty", "padding-counted", kl_counting_padding, "padding counted in the mean"),
    P("calc_kl_penalty", "mask-ignored", kl_ignoring_the_mask, "the mask was ignored"),
    P("calc_kl_penalty", "no-gradient", kl_as_a_number, "carries no gradient"),
    P("calc_entropy_bonus", "coef-missing", entropy_without_coef, "forgot to multiply by ent_coef"),
    P("calc_entropy_bonus", "sign", entropy_with_the_sign_flipped, "sign: the entropy is -Σ p log p"),
    P("calc_entropy_bonus", "mask-ignored", entropy_ignoring_the_mask, "the mask was ignored"),
    P("calc_entropy_bonus", "sum", entropy_summed_over_positions, "the mean over positions, not the sum"),
    P("calc_entropy_bonus", "log-of-softmax", entropy_via_log_of_softmax, "log(softmax(x)) underflows"),
    P("calc_entropy_bonus", "padding-counted", entropy_counting_padding, "padding counted in the mean"),
    P("calc_value_fn_loss", "half-missing", value_loss_without_the_half, "you forgot the 1/2"),
    P("calc_value_fn_loss", "padding-counted", value_loss_counting_padding, "padding counted in the mean"),
    P("calc_value_fn_loss", "coef-missing", value_loss_without_vf_coef, "forgot to multiply by vf_coef"),
    P("calc_value_fn_loss", "sum", value_loss_summed, "take the mean of the squared errors, not the sum"),
    P("calc_value_fn_loss", "absolute", value_loss_absolute_errors, "not their absolute value"),
    P("calc_value_fn_loss", "sign", value_loss_with_the_sign_flipped, "sign: the loss is a positive number"),
    P("calc_value_fn_loss", "mask-ignored", value_loss_ignoring_the_mask, "the mask was ignored"),
    P("get_log_probs", "wrong-axis", log_probs_over_positions, "softmax over the wrong axis"),
    P("get_log_probs", "wrong-axis-then-sliced", log_probs_over_positions_then_sliced, "softmax over the wrong axis"),
    P("calc_kl_penalty", "wrong-axis", kl_over_positions, "softmax over the wrong axis"),
    P("calc_entropy_bonus", "wrong-axis", entropy_over_positions, "softmax over the wrong axis"),
    P("calc_clipped_sur_obj", "log-ratio", surrogate_log_ratio_as_ratio, "that ratio is the LOG-ratio"),
)
"""Exercises 01's planted mistakes (`course.mistakes.Planted`)."""
