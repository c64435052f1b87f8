"""The algorithms, siblings over the shared rollout and `trainer.Trainer`: `ppo` (the blog's
RLHFTrainer, with a value head), `rloo`, `online_dpo` and `grpo`. None imports another; each
composes `rollout`, `objectives`, `advantages`, `memory` and the trainer's learning-phase carrier.
The table that names them for everything else is `rlhf_scratch/config/registry.py`."""
