"""The course around the notebooks; here, exercise mode: write each formula, a check says if it is right.

    from rlhf_scratch.course import check_calc_kl_penalty
    check_calc_kl_penalty(my_calc_kl_penalty)     # prints one line, or raises with a hint

Each `check_<name>(fn)` (`checks.py`) runs your `fn`, which has the signature of the package's
`<name>` (the solution), on small cases worked out by hand; when the answer is wrong it recognises
the classic mistake by the number it produced (logits and tokens off by one, a missing coefficient,
the KL the wrong way round, padding counted in a mean, log(softmax) at logits x 100, ...) and says
so. `notebooks/exercises/` holds a stub and its check for every function. The checks live by topic:
`checks.py` (exercises 01-03), `checks_sampling.py` and `checks_reward.py` (04: sampling, the replay
memory, the reward model), `checks_parts.py` (07: the value head module, the generation loop, the replay
memory, the parts notebook 06 trains with), `checks_interp.py` (05: interpretability on a planted model),
`checks_capstones.py` (06: RLOO's trainer from the contract, a KL estimator graded by the microscope,
a paired interval over seeds), `checks_hacking.py` (notebook 09: the fall of gold decided over seeds, early
stopping, a reward-model ensemble, the share of the proxy's excess a feature explains), `checks_verifiable.py`
(notebook 10: the answer parsed, the rule rewards, pass@k); `catalogue.py` lists them all. The solutions written to be read: `solutions.py`, `solutions_parts.py`, `solutions_interp.py`,
`solutions_capstones.py`, `solutions_hacking.py`, `solutions_verifiable.py`; `capstone_kit.py` is what notebook 06 builds with. The other
modules of this package (the learning-phase check of notebook 06, re-executing the notebooks) are
imported by name; among them `mistakes.py`, the planted-mistake catalogue: each classic mistake of every
exercise written as a learner writes it, with the words its check must say (the course's tests plant each).

The checks are imported on first use (PEP 562), as the package's top-level names are, so that
importing a sibling module does not import torch.
"""

import importlib

_CHECKS_BY_MODULE = {
    "checks": (  # exercises 01-03: one formula each, and GAE, explained variance, DLA
        "check_calc_clipped_sur_obj",
        "check_calc_dpo_loss",
        "check_calc_entropy_bonus",
        "check_calc_kl_penalty",
        "check_calc_reward_model_loss",
        "check_calc_value_fn_loss",
        "check_compute_advantages",
        "check_compute_grpo_advantages",
        "check_compute_gae_advantages",
        "check_compute_rloo_advantages",
        "check_direct_logit_attribution",
        "check_explained_variance",
        "check_get_log_probs",
        "check_normalize_reward",
    ),
    "checks_sampling": (  # exercises 04: sampling and the replay memory
        "check_completion_mask",
        "check_left_pad",
        "check_minibatch_rows",
        "check_next_token_probs",
        "check_position_ids",
    ),
    "checks_reward": ("check_reward_at_last_token", "check_reward_model_step"),  # exercises 04: the reward model
    "checks_parts": ("check_ReplayMemory", "check_TransformerWithValueHead", "check_generate"),  # exercises 07
    "checks_interp": (  # exercises 05: interpretability on a planted model
        "check_feature_change",
        "check_logit_diff",
        "check_logit_lens_logit_diff",
        "check_residual_patching",
        "check_steered_logits",
    ),
    "checks_discovery": ("check_changed_head_scores",),  # exercises 05: which head did RL change?
    "checks_capstones": (  # exercises 06: a whole trainer, an estimator graded exactly, a verdict over seeds
        "check_calc_k3_kl",
        "check_make_rloo_algorithm",
        "check_paired_difference_interval",
    ),
    "checks_hacking": (  # notebook 09: reward hacking decided, stopped, explained
        "check_early_stop_index",
        "check_ensemble_mean",
        "check_ensemble_min",
        "check_explained_share",
        "check_held_out_peak",
        "check_registered_fall",
    ),
    "checks_verifiable": (  # notebook 10: RL with verifiable rewards
        "check_accuracy_reward",
        "check_format_reward",
        "check_parse_answer",
        "check_pass_at_k",
    ),
    "checks_episodes": (  # notebook 11: multi-turn episodes, the loss mask
        "check_add_turn",
        "check_assemble_completions",
        "check_grpo_loss",
        "check_masked_kl_mean",
        "check_sequence_log_probs",
    ),
}
_CHECKS = {name: module for module, names in _CHECKS_BY_MODULE.items() for name in names}
__all__ = list(_CHECKS)


def __getattr__(name: str):
    if name not in _CHECKS:
        raise AttributeError(f"module 'rlhf_scratch.course' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rlhf_scratch.course.{_CHECKS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_CHECKS))
