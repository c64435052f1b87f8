"""RLOO (Ahmadian et al. 2024) in one folder:

    args.py       RLOOArgs (torch-free)
    objective.py  compute_kl_shaped_rewards, compute_rloo_advantages, calc_rloo_objective
    trainer.py    RLOOTrainer: the rollout and learning phases

Every name of these modules is importable from the package, as from the one file it was
(`from rlhf_scratch.algorithms.rloo import ...`), on first use: importing the package for its args loads no torch."""

from rlhf_scratch.algorithms import lazy_package

__all__ = ['RLOOArgs', 'compute_kl_shaped_rewards', 'compute_rloo_advantages', 'calc_rloo_objective', 'RLOOTrainer', 'RLOO_METRICS']
__getattr__ = lazy_package(__name__, ('args', 'objective', 'trainer'))
