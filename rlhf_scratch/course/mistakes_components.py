"""Planted mistakes of exercises 03, the components (`checks.py`): GAE, explained variance, direct logit
attribution. Each function is the solution with one classic mistake, written as a learner writes it; `PLANTED`
says what its check must name (`course.mistakes` gathers them).
"""

import math

import torch

from rlhf_scratch.course.planted import Planted


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


def dla_with_each_components_own_scale(components, scale, ln_weight, direction):
    """ln_final applied to each component as if it were the whole residual (its own mean and std)."""
    return torch.nn.functional.layer_norm(components, (components.shape[-1],)) @ (ln_weight * direction)


def dla_without_centring(components, scale, ln_weight, direction):
    return (components / scale) @ (ln_weight * direction)


def dla_without_the_ln_weight(components, scale, ln_weight, direction):
    return ((components - components.mean(-1, keepdim=True)) / scale) @ direction


def gae_without_gamma_in_delta(values, rewards, prefix_len, gamma, gae_lambda, mask=None):
    v, next_v = values[:, prefix_len - 1 : -1], values[:, prefix_len:]
    out, running = torch.zeros_like(v), 0.0
    for t in reversed(range(v.shape[1])):
        last = t == v.shape[1] - 1
        delta = (rewards if last else 0.0) + (0.0 if last else next_v[:, t]) - v[:, t]  # no γ on V(s_{t+1})
        running = delta + gamma * gae_lambda * running
        out[:, t] = running
    return out


def gae_run_forwards(values, rewards, prefix_len, gamma, gae_lambda, mask=None):
    v, next_v = values[:, prefix_len - 1 : -1], values[:, prefix_len:]
    out, running = torch.zeros_like(v), 0.0
    for t in range(v.shape[1]):  # the recursion from the first step on
        last = t == v.shape[1] - 1
        delta = (rewards if last else 0.0) + gamma * (0.0 if last else next_v[:, t]) - v[:, t]
        running = delta + gamma * gae_lambda * running
        out[:, t] = running
    return out


def gae_states_shifted(values, rewards, prefix_len, gamma, gae_lambda, mask=None):
    shifted = torch.cat([values[:, 1:], values[:, -1:]], dim=1)  # V(s_t) read one state late
    return _gae(shifted, rewards, prefix_len, gamma, gae_lambda, mask)


def gae_returns(values, rewards, prefix_len, gamma, gae_lambda, mask=None):
    return _gae(values, rewards, prefix_len, gamma, gae_lambda, mask) + values[:, prefix_len - 1 : -1]


def gae_with_the_sign_flipped(values, rewards, prefix_len, gamma, gae_lambda, mask=None):
    return -_gae(values, rewards, prefix_len, gamma, gae_lambda, mask)


def gae_deltas_alone(values, rewards, prefix_len, gamma, gae_lambda, mask=None):
    return _gae(values, rewards, prefix_len, gamma, 0.0, mask)


def gae_padding_zeroed_reward_at_the_end(values, rewards, prefix_len, gamma, gae_lambda, mask=None):
    a = _gae(values, rewards, prefix_len, gamma, gae_lambda, mask, use_mask=False)
    return a if mask is None else torch.where(mask, a, 0.0)


def gae_bootstrapping_from_the_padding(values, rewards, prefix_len, gamma, gae_lambda, mask=None):
    """The reward at the EOS, but γ V of the padding after it added: the episode goes on past its end
    (only the last column is treated as terminal)."""
    v, next_v = values[:, prefix_len - 1 : -1], values[:, prefix_len:]
    mask = torch.ones_like(v, dtype=torch.bool) if mask is None else mask
    out = torch.zeros_like(v)
    for b in range(v.shape[0]):
        last, running = int(mask[b].sum()) - 1, 0.0
        for t in reversed(range(last + 1)):
            nv = 0.0 if t == v.shape[1] - 1 else next_v[b, t]
            delta = (rewards[b] if t == last else 0.0) + gamma * nv - v[b, t]
            running = delta + gamma * gae_lambda * running
            out[b, t] = running
    return out


def _ev(values, returns, mask):
    if mask is not None:
        values, returns = values[mask], returns[mask]
    return values, returns


def ev_upside_down(values, returns, mask=None):
    values, returns = _ev(values, returns, mask)
    return 1 - returns.var() / (returns - values).var()


def ev_unexplained_part(values, returns, mask=None):
    values, returns = _ev(values, returns, mask)
    return (returns - values).var() / returns.var()


def ev_variance_of_v(values, returns, mask=None):
    values, returns = _ev(values, returns, mask)
    return 1 - values.var() / returns.var()


def ev_one_when_nothing_to_explain(values, returns, mask=None):
    values, returns = _ev(values, returns, mask)
    var = returns.var()
    return torch.tensor(1.0) if var == 0 else 1 - (returns - values).var() / var


def ev_minus_inf_when_nothing_to_explain(values, returns, mask=None):
    values, returns = _ev(values, returns, mask)
    var = returns.var()
    return torch.tensor(-math.inf) if var == 0 else 1 - (returns - values).var() / var


def ev_with_eps(eps):
    """1 − Var[R − V] / (Var[R] + eps): right to 1e-7 where Var[R] > 0, −Var[R − V]/eps where it is 0."""

    def explained_variance(values, returns, mask=None):
        values, returns = _ev(values, returns, mask)
        return 1 - (returns - values).var(unbiased=False) / (returns.var(unbiased=False) + eps)

    return explained_variance


def dla_not_divided_by_the_scale(components, scale, ln_weight, direction):
    return (components - components.mean(-1, keepdim=True)) @ (ln_weight * direction)


def dla_multiplied_by_the_scale(components, scale, ln_weight, direction):
    return ((components - components.mean(-1, keepdim=True)) * scale) @ (ln_weight * direction)


def dla_batch_first(components, scale, ln_weight, direction):
    return (((components - components.mean(-1, keepdim=True)) / scale) @ (ln_weight * direction)).T



def ev_population_over_unbiased(values, returns, mask=None):
    values, returns = _ev(values, returns, mask)
    return 1 - (returns - values).var(unbiased=False) / returns.var()


def ev_unbiased_over_population(values, returns, mask=None):
    values, returns = _ev(values, returns, mask)
    return 1 - (returns - values).var() / returns.var(unbiased=False)

P = Planted
PLANTED: tuple[Planted, ...] = (
    P("compute_gae_advantages", "lambda-missing", gae_without_lambda, "λ is missing from the recursion"),
    P("compute_gae_advantages", "bootstrap-past-end", gae_bootstrapping_past_the_end, "you bootstrapped past the end"),
    P("compute_gae_advantages", "mask-ignored", gae_ignoring_the_mask, "the mask was ignored",
      also=("case 2/3 (row 1 ends at EOS",)),
    P("compute_gae_advantages", "gamma-missing", gae_without_gamma_in_delta, "γ is missing from δ"),
    P("compute_gae_advantages", "forwards", gae_run_forwards, "the recursion runs the wrong way"),
    P("compute_gae_advantages", "states-shifted", gae_states_shifted, "states shifted by one"),
    P("compute_gae_advantages", "returns", gae_returns, "those are the returns A + V(s_t), not the advantages"),
    P("compute_gae_advantages", "sign", gae_with_the_sign_flipped, "sign: δ_t = r_t + γ V(s_{t+1}) − V(s_t)"),
    P("compute_gae_advantages", "deltas-alone", gae_deltas_alone, "those are the deltas alone (λ = 0)"),
    P("compute_gae_advantages", "reward-at-last-column", gae_padding_zeroed_reward_at_the_end,
      "the reward must arrive at the last kept token"),
    P("compute_gae_advantages", "bootstrap-from-padding", gae_bootstrapping_from_the_padding,
      "you bootstrapped from the padding after it"),
    P("explained_variance", "squared-error", ev_with_squared_error, "Var[R − V] is centred"),
    P("explained_variance", "mask-ignored", ev_ignoring_the_mask, "the mask was ignored"),
    P("explained_variance", "zero-for-nan", ev_zero_when_nothing_to_explain, "return NaN (CleanRL's), not 0"),
    P("explained_variance", "one-for-nan", ev_one_when_nothing_to_explain, "return NaN (CleanRL's), not 1"),
    P("explained_variance", "minus-inf-for-nan", ev_minus_inf_when_nothing_to_explain, "return NaN (CleanRL's), not -inf"),
    *(P("explained_variance", f"eps-{eps:g}", ev_with_eps(eps), "an eps in the denominator",
        also=("case 3/3 (nothing to explain: Var[R] = 0)",)) for eps in (1e-8, 1e-6, 1e-3)),
    P("explained_variance", "upside-down", ev_upside_down, "the ratio is upside down"),
    P("explained_variance", "unexplained-part", ev_unexplained_part, "the part NOT explained"),
    P("explained_variance", "variance-of-v", ev_variance_of_v, "Var[R − V], the variance of the errors, not Var[V]"),
    P("direct_logit_attribution", "own-scale", dla_with_each_components_own_scale, "FROZEN scale"),
    P("direct_logit_attribution", "not-centred", dla_without_centring, "centre each component first"),
    P("direct_logit_attribution", "ln-weight-missing", dla_without_the_ln_weight, "ln_final's weight is missing"),
    P("direct_logit_attribution", "not-divided", dla_not_divided_by_the_scale, "divide by ln_final's scale"),
    P("direct_logit_attribution", "multiplied", dla_multiplied_by_the_scale, "divide by the scale, don't multiply"),
    P("direct_logit_attribution", "batch-first", dla_batch_first, "return [component, batch]"),
    P("explained_variance", "divisors-n-over-n-1", ev_population_over_unbiased, "with different divisors"),
    P("explained_variance", "divisors-n-1-over-n", ev_unbiased_over_population, "with different divisors"),
)
"""Exercises 03's planted mistakes (`course.mistakes.Planted`)."""
