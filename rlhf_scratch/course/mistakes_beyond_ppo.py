"""Planted mistakes of exercises 02, beyond PPO (`checks.py`): RLOO's and GRPO's advantages, DPO's loss and the
reward model's Bradley–Terry loss. Each function is the solution with one classic mistake, written as a learner
writes it; `PLANTED` says what its check must name (`course.mistakes` gathers them).
"""

import math

import torch
import torch.nn.functional as F

from rlhf_scratch.course import solutions_formulas as sol
from rlhf_scratch.course.planted import Planted


def rloo_with_the_group_mean(rewards, num_generations):
    grouped = rewards.view(-1, num_generations)
    return (grouped - grouped.mean(dim=1, keepdim=True)).flatten()


def rloo_with_groups_across_the_batch(rewards, num_generations):
    G = num_generations
    grouped = rewards.view(G, -1)  # the mistake: a prompt's G completions read as every (batch/G)-th row
    return (grouped - (grouped.sum(dim=0, keepdim=True) - grouped) / (G - 1)).flatten()


def grpo_with_population_std(rewards, num_generations, scale_rewards="group"):
    grouped = rewards.view(-1, num_generations)
    centred = (grouped - grouped.mean(dim=1, keepdim=True)).flatten()
    std = grouped.std(dim=1, unbiased=False).repeat_interleave(num_generations)
    return centred / (std + 1e-4)


def grpo_without_the_epsilon(rewards, num_generations, scale_rewards="group"):
    grouped = rewards.view(-1, num_generations)
    centred = (grouped - grouped.mean(dim=1, keepdim=True)).flatten()
    return centred / grouped.std(dim=1).repeat_interleave(num_generations)


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


def rloo_divided_by_g(rewards, num_generations):
    grouped = rewards.view(-1, num_generations)
    return (grouped - (grouped.sum(dim=1, keepdim=True) - grouped) / num_generations).flatten()


def rloo_with_the_sign_flipped(rewards, num_generations):
    return -sol.compute_rloo_advantages(rewards, num_generations)


def rloo_whole_batch_baseline(rewards, num_generations):
    return rewards - (rewards.sum() - rewards) / (len(rewards) - 1)


def grpo_leave_one_out(rewards, num_generations, scale_rewards="group"):
    return sol.compute_rloo_advantages(rewards, num_generations)


def grpo_not_scaled(rewards, num_generations, scale_rewards="group"):
    return sol.compute_grpo_advantages(rewards, num_generations, "none")


def grpo_batch_std_for_group(rewards, num_generations, scale_rewards="group"):
    return sol.compute_grpo_advantages(rewards, num_generations, "batch" if scale_rewards == "group" else scale_rewards)


def grpo_centred_by_the_batch_mean(rewards, num_generations, scale_rewards="group"):
    if scale_rewards != "batch":
        return sol.compute_grpo_advantages(rewards, num_generations, scale_rewards)
    return (rewards - rewards.mean()) / (rewards.std() + 1e-4)


def grpo_scaled_when_told_none(rewards, num_generations, scale_rewards="group"):
    return sol.compute_grpo_advantages(rewards, num_generations, "group" if scale_rewards == "none" else scale_rewards)


def _dpo_fixed(**change):
    """The solution with one thing changed, by keyword: margin, per_pair (the sigmoid loss of β h), ipo (of h and β),
    rewards (the implicit rewards of the two log-ratios and β), reduce (of the per-pair losses and the weights)."""

    def calc_dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta,
                      loss_type="sigmoid", weights=None):
        chosen, rejected = policy_chosen_logps - ref_chosen_logps, policy_rejected_logps - ref_rejected_logps
        h = change.get("margin", lambda pc, pr, rc, rr: (pc - pr) - (rc - rr))(
            policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
        if loss_type == "sigmoid" or change.get("ignore_loss_type"):
            losses = change.get("per_pair", lambda h, beta: -F.logsigmoid(beta * h))(h, beta)
        else:
            losses = change.get("ipo", lambda h, beta: (h - 1 / (2 * beta)) ** 2)(h, beta)
        if weights is None:
            loss = change.get("mean", torch.mean)(losses)
        else:
            loss = change.get("reduce", lambda ls, w: (w * ls).sum() / w.sum().clamp(min=1))(losses, weights)
        rewards = change.get("rewards", lambda c, r, beta: (beta * c.detach(), beta * r.detach()))(chosen, rejected, beta)
        return (loss, *rewards)

    return calc_dpo_loss


dpo_without_the_reference = _dpo_fixed(margin=lambda pc, pr, rc, rr: pc - pr)


dpo_reference_margin_added = _dpo_fixed(margin=lambda pc, pr, rc, rr: (pc - pr) + (rc - rr))


dpo_loss_maximised = _dpo_fixed(per_pair=lambda h, beta: F.logsigmoid(beta * h))


dpo_summed_over_pairs = _dpo_fixed(mean=torch.sum)


dpo_rewards_without_beta = _dpo_fixed(rewards=lambda c, r, beta: (c.detach(), r.detach()))


dpo_rewards_swapped = _dpo_fixed(rewards=lambda c, r, beta: (beta * r.detach(), beta * c.detach()))


dpo_ipo_target_one_over_beta = _dpo_fixed(ipo=lambda h, beta: (h - 1 / beta) ** 2)


dpo_ipo_on_beta_h = _dpo_fixed(ipo=lambda h, beta: (beta * h - 0.5) ** 2)  # the sigmoid's β h, the target scaled to it


dpo_loss_type_ignored = _dpo_fixed(ignore_loss_type=True)


dpo_weights_ignored = _dpo_fixed(reduce=lambda ls, w: ls.mean())


dpo_weights_over_the_pairs = _dpo_fixed(reduce=lambda ls, w: (w * ls).sum() / len(ls))


dpo_weights_unguarded = _dpo_fixed(reduce=lambda ls, w: (w * ls).sum() / w.sum())


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


def dpo_loss_only(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta,
                  loss_type="sigmoid", weights=None):
    return sol.calc_dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta,
                             loss_type, weights)[0]  # the loss alone


def _bt_fixed(*, sign=1.0, reduce=torch.mean, margin_sign=-1.0, use_margin=True, centring=None):
    """The Bradley–Terry loss with one change: its sign, its reduction, the margin's sign or the margin
    ignored, the centring term (of the two rewards) replaced."""

    def calc_reward_model_loss(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None):
        diff = chosen_rewards - rejected_rewards
        if margin is not None and use_margin:
            diff = diff + margin_sign * margin
        loss = sign * reduce(-F.logsigmoid(diff))
        if center_rewards_coefficient is not None:
            term = (centring or (lambda c, r: ((c + r) ** 2).mean()))(chosen_rewards, rejected_rewards)
            loss = loss + center_rewards_coefficient * term
        return loss

    return calc_reward_model_loss


rm_loss_maximised = _bt_fixed(sign=-1.0)


rm_summed_over_pairs = _bt_fixed(reduce=torch.sum)


rm_margin_added = _bt_fixed(margin_sign=1.0)


rm_margin_ignored = _bt_fixed(use_margin=False)


rm_centring_square_of_the_mean = _bt_fixed(centring=lambda c, r: (c + r).mean() ** 2)


rm_centring_subtracted = _bt_fixed(centring=lambda c, r: -((c + r) ** 2).mean())



def grpo_centred_by_the_batch_mean_scaled_by_the_group(rewards, num_generations, scale_rewards="group"):
    grouped = rewards.view(-1, num_generations)
    centred = rewards - rewards.mean()  # the batch's mean, the group's std
    if scale_rewards == "none":
        return centred
    std = grouped.std(dim=1).repeat_interleave(num_generations) if scale_rewards == "group" else rewards.std()
    return centred / (std + 1e-4)

P = Planted
PLANTED: tuple[Planted, ...] = (
    P("compute_rloo_advantages", "mean-baseline", rloo_with_the_group_mean, "leave-one-out subtracts the mean of the OTHER"),
    P("compute_rloo_advantages", "wrong-axis", rloo_with_groups_across_the_batch, "view(-1, G), not view(G, -1)"),
    P("compute_rloo_advantages", "divided-by-g", rloo_divided_by_g, "by G-1 (how many there are), not by G"),
    P("compute_rloo_advantages", "sign", rloo_with_the_sign_flipped, "sign: A_i = r_i - baseline"),
    P("compute_rloo_advantages", "whole-batch", rloo_whole_batch_baseline, "not of the whole batch"),
    P("compute_grpo_advantages", "population-std", grpo_with_population_std, "the std with ÷ n (population)",
      also=("unbiased std, ÷ (n-1)",)),
    P("compute_grpo_advantages", "no-eps", grpo_without_the_epsilon, "a group of equal rewards has std 0"),
    P("compute_grpo_advantages", "leave-one-out", grpo_leave_one_out, "that is RLOO's leave-one-out"),
    P("compute_grpo_advantages", "not-scaled", grpo_not_scaled, "divide by the group's std (+ 1e-4)"),
    P("compute_grpo_advantages", "batch-std", grpo_batch_std_for_group, "each group's OWN std"),
    P("compute_grpo_advantages", "batch-mean", grpo_centred_by_the_batch_mean, "centre each reward by its GROUP's mean"),
    P("compute_grpo_advantages", "scaled-when-none", grpo_scaled_when_told_none, "scale_rewards = 'none' divides by nothing"),
    P("calc_dpo_loss", "log-of-sigmoid", dpo_via_log_of_sigmoid, "use F.logsigmoid(x)",
      also=("(stability: a margin of -10000)",)),
    P("calc_dpo_loss", "swapped", dpo_chosen_and_rejected_swapped, "the margin's sign is flipped"),
    P("calc_dpo_loss", "beta-missing", dpo_without_beta, "β is missing"),
    P("calc_dpo_loss", "beta-times-loss", dpo_beta_times_the_loss, "not -β log σ(h)"),
    P("calc_dpo_loss", "log-beta-sigma", dpo_log_of_beta_sigma, "not -log(β σ(h))"),
    P("calc_dpo_loss", "loss-only", dpo_loss_only, "return (loss, chosen_rewards, rejected_rewards)"),
    P("calc_dpo_loss", "reference-missing", dpo_without_the_reference, "the reference is missing"),
    P("calc_dpo_loss", "reference-added", dpo_reference_margin_added, "the reference's margin is subtracted, not added"),
    P("calc_dpo_loss", "maximised", dpo_loss_maximised, "sign: the loss is MINIMISED"),
    P("calc_dpo_loss", "sum", dpo_summed_over_pairs, "take the mean over pairs, not the sum"),
    P("calc_dpo_loss", "rewards-without-beta", dpo_rewards_without_beta, "the implicit reward is β (log pi - log pi_ref): β is missing"),
    P("calc_dpo_loss", "rewards-swapped", dpo_rewards_swapped, "chosen and rejected rewards are swapped"),
    P("calc_dpo_loss", "ipo-target", dpo_ipo_target_one_over_beta, "IPO's target is 1/(2β), not 1/β"),
    P("calc_dpo_loss", "ipo-on-beta-h", dpo_ipo_on_beta_h, "on h itself, not on β h"),
    P("calc_dpo_loss", "loss-type-ignored", dpo_loss_type_ignored, "loss_type = 'ipo' was ignored"),
    P("calc_dpo_loss", "weights-ignored", dpo_weights_ignored, "the weights were ignored"),
    P("calc_dpo_loss", "weights-over-n", dpo_weights_over_the_pairs, "divide by Σ w (the pairs that count)"),
    P("calc_dpo_loss", "weights-unguarded", dpo_weights_unguarded, "divide by max(Σ w, 1) to get 0, not NaN"),
    P("calc_reward_model_loss", "log-of-sigmoid", rm_via_log_of_sigmoid, "log(sigmoid(x)) is log(0) = -inf"),
    P("calc_reward_model_loss", "swapped", rm_chosen_and_rejected_swapped, "chosen and rejected are swapped"),
    P("calc_reward_model_loss", "coef-missing", rm_centring_without_its_coefficient,
      "forgot to multiply by center_rewards_coefficient"),
    P("calc_reward_model_loss", "maximised", rm_loss_maximised, "sign: the loss is MINIMISED"),
    P("calc_reward_model_loss", "sum", rm_summed_over_pairs, "take the mean over pairs, not the sum"),
    P("calc_reward_model_loss", "margin-added", rm_margin_added, "the margin was added"),
    P("calc_reward_model_loss", "margin-ignored", rm_margin_ignored, "the margin was ignored"),
    P("calc_reward_model_loss", "square-of-mean", rm_centring_square_of_the_mean, "not the square of the mean"),
    P("calc_reward_model_loss", "centring-subtracted", rm_centring_subtracted, "the centring term is added to the loss"),
    P("compute_grpo_advantages", "batch-mean-group-std", grpo_centred_by_the_batch_mean_scaled_by_the_group,
      "centre each reward by its GROUP's mean (the batch's is 4 here)"),
)
"""Exercises 02's planted mistakes (`course.mistakes.Planted`)."""
