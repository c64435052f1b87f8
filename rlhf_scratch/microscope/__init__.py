"""The exact-gradient microscope: every RLHF gradient estimator of the package against the truth.

Sampled runs cannot settle whether an estimator is biased; an environment small enough to list
can. A tabular autoregressive policy over a handful of tokens (`env`): every completion, its exact
probability, the exact objective J(θ) = Σ_y π(y) r(y), both KLs to a reference and the expected
length, with their gradients by autograd (`truth`). Each estimator (`estimators`: REINFORCE, RLOO,
GRPO with every loss type and scaling, GSPO, PPO's clipped surrogate, the k1/k2/k3 KL terms,
top-k and temperature sampling, Online DPO) is the package's own code; its expected gradient is
exact where one draw is one completion and Monte-Carlo with a standard error where it is a batch
(`measure`); `run` measures them all and `report` writes the table, the figure and the page.
Off-policy (`offpolicy`, measured by `offpolicy_run`, reported by `offpolicy_report`): the same
estimators and TRL's importance-sampling corrections when the completions come from a stale policy
or a sampler whose numbers differ from the learner's (bf16 logits, another top-k / top-p).

The same estimators on a verifiable task (`arithmetic`: one-digit sums, the rule accuracy reward, every
completion of at most two digits and EOS listed), where a group estimator's expectation is exact too
(`groups`: under a 0/1 reward it depends on the group only through how many others are right).

    python -m rlhf_scratch.exact --out exact/                       # ~1–2 min on one core; docs/exact.md
    python -m rlhf_scratch.exact --env arithmetic --out exact_a/    # one-digit sums

Importing this package imports nothing (the command line answers a bad flag before torch loads).
"""
