"""The studies: many training runs, one question, one folder of answers.

    base.py                  `Study`, the shape every study shares: args -> units -> each unit's run checked
                             -> the study's folder (new, the same plan again, or more seeds) -> the units
                             not done yet, each a resumable `python -m rlhf_scratch.train` process -> report
                             (collect, stats, figures, page) -> print. A study subclasses it with its plan
                             and its report
    runner.py                the pieces, written once: the plan file (whose seeds may grow), units of work
                             (method, setting, seed) run as resumable processes `--jobs` at a time, the
                             ledger of what each measured, list flags, the table's mean ± interval cells,
                             bands over seeds, the HTML page
    stats.py                 what a study may say: the mean over seeds with its 95 % Student-t
                             interval and n, the paired difference and its t-test, the verdict that
                             names a winner only when the seeds resolve it, the seeds it would take
    compare.py               `python -m rlhf_scratch.compare`: the algorithms at equal budget — the
                             reward–KL frontier, held-out judges, what each changed inside
    compare_figures.py       … its figures (reward per phase, the frontier, held-out judges, the inside view)
    compare_features.py      … and with --features: do they move the same SAE features?
    overoptimization/        `python -m rlhf_scratch.overoptimization`: Gao et al.'s reward-model
                             over-optimisation — gold vs proxy reward against KL, per proxy size and method;
                             a file per job: formulas.py (kl_bon, best_of_n_expectation, fit_gao, …), plan.py,
                             study.py (the `Study`), run.py (one RL run's process and its held-out
                             PhaseHook), report.py (curves, table, verdicts, figures, page)
    length.py                `python -m rlhf_scratch.studies.length`: GRPO's length lesson on the task
                             first_token — the length of A < 0 and A > 0 completions per loss type and
                             RLOO over seeds, beside the exact-gradient microscope's own numbers
                             (length_microscope.py)
    features_seeds.py        the features view's claims over seeds (reads several runs' features.json)

A study is its plan (an args dataclass and the units it implies) and its report; running, resuming,
refusing a different plan, the intervals over seeds, the verdict and writing the page are `Study`'s,
the runner's and stats.py's. Every study takes `--seeds` and has a `--quick` setting for tests. The
algorithms come from `rlhf_scratch.config.registry`, never from a list written here.
"""
