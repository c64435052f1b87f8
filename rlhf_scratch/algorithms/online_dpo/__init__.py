"""Online DPO (Guo et al. 2024) in one folder:

    args.py       OnlineDPOArgs (torch-free)
    loss.py       calc_dpo_loss, select_chosen, select_chosen_by_judge
    trainer.py    OnlineDPOTrainer: the rollout and learning phases

Every name of these modules is importable from the package, as from the one file it was
(`from rlhf_scratch.algorithms.online_dpo import ...`), on first use: importing the package for its args loads no torch."""

from rlhf_scratch.algorithms import lazy_package

__all__ = ['OnlineDPOArgs', 'calc_dpo_loss', 'select_chosen', 'OnlineDPOTrainer', 'DPO_METRICS']
__getattr__ = lazy_package(__name__, ('args', 'loss', 'trainer'))
