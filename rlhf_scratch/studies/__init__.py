"""The studies: many training runs, one question, one folder of answers.

    runner.py                what every study shares, written once: the plan file, units of work
                             (method, setting, seed) run as resumable processes `--jobs` at a time,
                             the ledger of what each measured, list flags, the table and the HTML page
    compare.py               `python -m rlhf_scratch.compare`: the algorithms at equal budget — the
                             reward–KL frontier, held-out judges, what each changed inside
    compare_features.py      … and with --features: do they move the same SAE features?
    overoptimization.py      `python -m rlhf_scratch.overoptimization`: Gao et al.'s reward-model
                             over-optimisation — gold vs proxy reward against KL, per proxy size and method
    overoptimization_run.py  one RL run of it (its own process), judged after every phase by a PhaseHook

A study is its plan (an args dataclass and the units it implies) and its report; running, resuming,
refusing a different plan and writing the page are the runner's. The algorithms come from
`rlhf_scratch.registry`, never from a list written here.
"""
