"""The course's plan: each exercise's difficulty and time, each reading step's time, and what they add up to.

The minutes are estimates of a learner's time to read an exercise's note, write it and get its check to
pass (not measured: one author's estimate, set against a learner's report of 15-18 hours for the whole
path). The README's "to read and do" column is `step_minutes` of each step, and its total `total_minutes`;
every exercise notebook shows its exercise's line (`plan_line`), and `python -m rlhf_scratch.course progress`
sums what is left. Torch-free: the notebook generators import it.

Difficulty: 1 a formula written from its equation; 2 a component with a trap in it (masks, padding, the
order of operations); 3 a whole piece of the trainer (a loop, a trainer from the contract).
"""

EXERCISES: dict[str, tuple[int, int]] = {
    # exercises 01: PPO's objective
    "get_log_probs": (1, 10), "compute_advantages": (2, 10), "normalize_reward": (1, 5),
    "calc_clipped_sur_obj": (2, 15), "calc_kl_penalty": (1, 10), "calc_entropy_bonus": (1, 5),
    "calc_value_fn_loss": (1, 5),
    # exercises 02: beyond PPO
    "compute_rloo_advantages": (1, 10), "compute_grpo_advantages": (1, 10), "calc_dpo_loss": (2, 15),
    "calc_reward_model_loss": (1, 10),
    # exercises 03: components
    "compute_gae_advantages": (2, 20), "explained_variance": (1, 10), "direct_logit_attribution": (2, 20),
    # exercises 04: the rollout's parts
    "next_token_probs": (2, 15), "completion_mask": (1, 10), "left_pad": (1, 10), "position_ids": (1, 5),
    "minibatch_rows": (1, 10), "reward_at_last_token": (1, 10), "reward_model_step": (1, 10),
    # exercises 05: interpretability
    "logit_diff": (1, 10), "logit_lens_logit_diff": (2, 15), "residual_patching": (2, 20), "feature_change": (1, 10),
    "steered_logits": (2, 15), "changed_head_scores": (3, 30),
    # exercises 06: capstones
    "make_rloo_algorithm": (3, 60), "calc_k3_kl": (1, 15), "paired_difference_interval": (2, 20),
    # exercises 07: the parts notebook 06 trains with
    "TransformerWithValueHead": (2, 20), "generate": (3, 40), "ReplayMemory": (2, 20),
    # notebook 06: the learning phase
    "phase_advantages": (1, 10), "minibatch_objective": (2, 30), "learning_phase": (3, 35),
    # notebook 09: reward hacking
    "registered_fall": (1, 10), "held_out_peak": (1, 10), "early_stop_index": (2, 10), "ensemble_mean": (1, 10),
    "ensemble_min": (1, 10), "explained_share": (2, 10),
    # notebook 10: verifiable rewards
    "parse_answer": (2, 15), "accuracy_reward": (1, 10), "format_reward": (1, 5), "pass_at_k": (2, 20),
    # notebook 11: multi-turn episodes
    "assemble_completions": (2, 15), "sequence_log_probs": (1, 5), "grpo_loss": (2, 10), "masked_kl_mean": (1, 10),
    "add_turn": (2, 10),
}
"""(difficulty 1-3, minutes) of every exercise, by the name of the function (or module) the learner writes."""

READING: dict[str, int] = {
    "notebooks/01_ppo_objective_math.ipynb": 40, "docs/derivations.md": 45, "notebooks/02_rlhf_end_to_end.ipynb": 30,
    "notebooks/03_ppo_rloo_dpo.ipynb": 40, "notebooks/04_interp_walkthrough.ipynb": 40,
    "notebooks/05_sae_features.ipynb": 40, "notebooks/07_exact_gradients.ipynb": 45,
    "notebooks/08_single_controller.ipynb": 40,
}
"""Minutes of each step that is read and run, not written (no exercise of its own)."""

OPTIONAL = ("notebooks/08_single_controller.ipynb",)
"""Steps the README marks optional: outside `total_minutes`."""

STARS = {1: "★☆☆", 2: "★★☆", 3: "★★★"}


def plan_line(name: str) -> str:
    """"*Difficulty ★★☆ · about 20 minutes*", or "" for an exercise the plan does not list yet."""
    if name not in EXERCISES:
        return ""
    difficulty, minutes = EXERCISES[name]
    return f"*Difficulty {STARS[difficulty]} · about {minutes} minutes*"


def step_minutes(exercises: list[str] | None = None, reading: str | None = None) -> int:
    """A step's minutes: its exercises' sum, or its reading time."""
    return READING[reading] if reading is not None else sum(EXERCISES[name][1] for name in exercises or [])


def total_minutes(optional: bool = False) -> int:
    """Every exercise and every reading step (the optional ones with `optional`)."""
    reading = sum(m for path, m in READING.items() if optional or path not in OPTIONAL)
    return sum(m for _, m in EXERCISES.values()) + reading


def hours(minutes: int) -> str:
    """935 -> "15 h 35 min"."""
    return f"{minutes // 60} h {minutes % 60:02d} min"
