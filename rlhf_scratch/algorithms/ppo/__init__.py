"""PPO, the blog's algorithm, in one folder:

    args.py       RLHFArgs (torch-free)
    objective.py  compute_rlhf_objective: J = L_clip − ½·c_vf·(V − R)² + c_ent·H[π] − β·KL(π ‖ π_ref)
    policy.py     TransformerWithValueHead: the LM and its value head, the policy PPO trains
    trainer.py    RLHFTrainer: the rollout and learning phases

Every name of these modules is importable from the package, as from the one file it was
(`from rlhf_scratch.algorithms.ppo import ...`), on first use: importing the package for its args loads no torch."""

from rlhf_scratch.algorithms import lazy_package

__all__ = ['RLHFArgs', 'compute_rlhf_objective', 'TransformerWithValueHead', 'RLHFTrainer', 'PPO_METRICS']
__getattr__ = lazy_package(__name__, ('args', 'objective', 'policy', 'trainer'))
