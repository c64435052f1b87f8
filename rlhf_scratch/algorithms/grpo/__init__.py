"""GRPO (Shao et al. 2024) and TRL 1.16's other loss types in one folder:

    args.py       GRPOArgs (torch-free), GRPO_LOSS_TYPES
    loss.py       compute_grpo_advantages, calc_grpo_terms and its terms, aggregate_grpo_terms, calc_clip_counts
    trainer.py    GRPOTrainer: the rollout and learning phases, TRL's start warnings, the ratio metrics

Every name of these modules is importable from the package, as from the one file it was
(`from rlhf_scratch.algorithms.grpo import ...`), on first use: importing the package for its args loads no torch."""

from rlhf_scratch.algorithms import lazy_package

__all__ = ['GRPOArgs', 'compute_grpo_advantages', 'calc_grpo_terms', 'calc_grpo_objective', 'GRPOTrainer', 'GRPO_METRICS']
__getattr__ = lazy_package(__name__, ('args', 'loss', 'trainer'))
