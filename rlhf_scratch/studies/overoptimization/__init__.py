"""Reward-model over-optimisation (Gao, Schulman & Hilton 2022), as a folder: one file per job.

    formulas.py  best-of-n's KL and exact expectation, Gao et al.'s fitted forms and when a fit may be
                 reported, a curve read at d, one evaluation's standard error (pure, hand-checked)
    plan.py      the args, the methods (the registry's algorithms and best-of-n), the units
    study.py     `python -m rlhf_scratch.overoptimization`: the `Study` — the prompts' split, gold pairs,
                 proxy reward models, best-of-n and the RL runs, each resumable (its docstring: the steps)
    run.py       one RL run of it, its own process, judged after every phase by a `loop.PhaseHook`
    report.py    the curves, the table, the verdicts, the KL-penalty sweep, the figures, the page

The formulas are public (`rlhf_scratch.kl_bon`, `best_of_n_expectation`, `fit_gao`) and importable
from here, as is the command's `main`.
"""

from rlhf_scratch.studies.overoptimization.formulas import (
    at_d,
    best_of_n_expectation,
    fit_gao,
    gold_standard_error,
    kl_bon,
    unsupported_fit,
)
from rlhf_scratch.studies.overoptimization.study import main

__all__ = ["at_d", "best_of_n_expectation", "fit_gao", "gold_standard_error", "kl_bon", "main", "unsupported_fit"]
