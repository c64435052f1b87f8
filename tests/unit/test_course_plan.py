"""The course plan (rlhf_scratch/course/plan.py): the README's times are its sums, and every exercise of the
catalogue and of notebook 06 has a difficulty and a time."""

import re
from pathlib import Path

from rlhf_scratch.course import plan

README = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
NOTEBOOK_EXERCISES = {  # the README row's link -> the exercises written there
    "notebooks/exercises/01_ppo_objective_exercises.ipynb": ["get_log_probs", "compute_advantages", "normalize_reward",
                                                             "calc_clipped_sur_obj", "calc_kl_penalty",
                                                             "calc_entropy_bonus", "calc_value_fn_loss"],
    "notebooks/exercises/07_parts_exercises.ipynb": ["TransformerWithValueHead", "generate", "ReplayMemory"],
    "notebooks/06_build_the_ppo_loop.ipynb": ["phase_advantages", "minibatch_objective", "learning_phase"],
    "notebooks/11_multi_turn_episodes.ipynb": ["assemble_completions", "sequence_log_probs", "grpo_loss",
                                               "masked_kl_mean", "add_turn"],
}


def _row_minutes() -> dict[str, int]:
    rows = {}
    for line in README.splitlines():
        link, about = re.search(r"\]\(([^)]+)\)", line), re.search(r"\| about (\d+) minutes \|", line)
        if line.startswith("| ") and link and about:
            rows[link.group(1)] = int(about.group(1))
    return rows


def test_a_step_of_exercises_takes_the_sum_of_its_exercises_minutes():
    rows = _row_minutes()
    for link, names in NOTEBOOK_EXERCISES.items():
        assert rows[link] == plan.step_minutes(names) == sum(plan.EXERCISES[n][1] for n in names), link
    assert plan.step_minutes(["generate", "ReplayMemory"]) == 60


def test_the_readme_total_is_the_plans_sum():
    rows = _row_minutes()
    assert sum(rows.values()) == plan.total_minutes(optional=True), \
        "each README row's minutes come from rlhf_scratch/course/plan.py: a new step's exercises go in EXERCISES " \
        "(difficulty, minutes), a step to read in READING, and the README's total sentence says the new sum"
    assert plan.total_minutes(optional=True) == 1055
    assert f"About {plan.hours(plan.total_minutes())} in all, {plan.hours(plan.total_minutes(optional=True))} with " \
           "the optional step 15" in README
    assert plan.hours(935) == "15 h 35 min" and plan.hours(605) == "10 h 05 min"


def test_every_exercise_has_a_difficulty_and_a_time():
    from rlhf_scratch.course import (
        checks,
        checks_capstones,
        checks_episodes,
        checks_hacking,
        checks_interp,
        checks_parts,
        checks_reward,
        checks_sampling,
        checks_verifiable,
    )

    modules = (checks, checks_sampling, checks_reward, checks_parts, checks_interp, checks_capstones, checks_hacking,
               checks_verifiable, checks_episodes)  # the README's steps
    missing = sorted({name for m in modules for name in m.REFERENCES} - set(plan.EXERCISES))
    assert not missing, f"add {missing} to rlhf_scratch/course/plan.py EXERCISES (difficulty, minutes) and the README row"
    assert all(d in (1, 2, 3) and m > 0 for d, m in plan.EXERCISES.values())
    assert plan.plan_line("generate") == "*Difficulty ★★★ · about 40 minutes*" and plan.plan_line("unknown") == ""
