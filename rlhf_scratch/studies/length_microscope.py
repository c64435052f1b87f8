"""The length study's exact counterpart (`studies.length`): the exact-gradient microscope's own
length lesson (rlhf_scratch/microscope, docs/exact.md), recomputed with its own code and seeds, and
its rows on the study's page: per unit of J gained, how many tokens each estimator's expected update
adds after a right and after a wrong first token, where the true gradient adds exactly 0.
"""

from __future__ import annotations


def microscope_lesson(draws: int) -> dict:
    """The microscope's length lesson (`exact.run.length_lessons`) at its default environment and seeds
    with `draws` Monte-Carlo batches per policy: {policy: {"policy": its exact facts, "estimators":
    {name: {length_per_gain_after_right, …_after_wrong, … and their s.e.}}}}. At draws = 10,000 these
    are docs/exact.md's numbers."""
    import torch

    from rlhf_scratch.microscope.cli import ExactArgs
    from rlhf_scratch.microscope.run import length_lessons, main_scene

    torch.set_num_threads(1)
    args = ExactArgs(out="-", draws=draws)
    keep = ("length_per_gain", "length_per_gain_after_right", "length_per_gain_after_wrong")
    lessons = length_lessons(main_scene(args), args)
    return {name: {"policy": lesson["policy"],
                   "estimators": {est: {k: e.get(k) for k in (*keep, *(f"{k}_se" for k in keep))}
                                  for est, e in lesson["estimators"].items()}}
            for name, lesson in lessons.items()}


MICROSCOPE_NAMES = {"rloo": "RLOO", "grpo_grpo": "GRPO grpo", "grpo_dr_grpo": "GRPO dr_grpo", "grpo_dapo": "GRPO dapo"}


def microscope_rows(lesson: dict) -> list[list[str]]:
    """A row per (policy, estimator): tokens per unit of J gained, after a right and a wrong first
    token (± s.e.), their difference (the gap's growth; its s.e. at most the sum of theirs), and the
    whole update's effect on length against the true gradient's."""
    rows = []
    for policy, block in lesson.items():
        true = block["estimators"]["true"]["length_per_gain"]
        for name, e in block["estimators"].items():
            if name == "true":
                rows.append([policy, "true gradient", "0", "0", "0", f"{true:.3f} (1)"])
                continue
            right, wrong = e["length_per_gain_after_right"], e["length_per_gain_after_wrong"]
            rse, wse = e["length_per_gain_after_right_se"] or 0.0, e["length_per_gain_after_wrong_se"] or 0.0
            rows.append([policy, MICROSCOPE_NAMES.get(name, name), f"{right:+.4f} ± {rse:.4f}", f"{wrong:+.4f} ± {wse:.4f}",
                         f"{wrong - right:+.4f} (± ≤ {rse + wse:.4f})",
                         f"{e['length_per_gain']:.3f} ({e['length_per_gain'] / true:.2f})"])
    return rows


MICROSCOPE_HEADER = ["policy", "estimator", "after a right first token", "after a wrong first token",
                     "gap growth (wrong − right)", "all of θ (÷ the true gradient's)"]
