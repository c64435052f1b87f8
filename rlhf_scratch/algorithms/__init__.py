"""The algorithms, siblings over the shared rollout: `ppo` (the blog's RLHFTrainer), `rloo`,
`online_dpo`. None imports another; each composes `rollout`, `objectives`, `optim` and `loop`."""
