"""PPO's config: the blog's names (value head, clipped surrogate, KL penalty). Torch-free: the command line reads it
before torch loads, so a bad flag is answered at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rlhf_scratch.config import CommonArgs, _check, _finite

ADVANTAGES = ("one_step", "gae")
CRITICS = ("shared", "separate")  # RLHFArgs.critic: the blog's value head on the policy's trunk, or verl's second model
KL_ESTIMATORS = ("full", "k2")  # RLHFArgs.kl_estimator: the blog's full-vocabulary KL, or k2 at the sampled token


@dataclass
class RLHFArgs(CommonArgs):
    """PPO, the blog's algorithm: a value head, the clipped surrogate, an explicit KL penalty."""

    ALGO: ClassVar[str] = "ppo"
    FLAG_ALIASES: ClassVar[dict[str, str]] = {"--kl-coef": "--beta"}
    RENAMED: ClassVar[dict[str, str]] = {"kl_coef": "beta"}

    batches_per_learning_phase: int = 2
    """How many times the rollout batch is reshuffled and trained on per phase (PPO epochs)."""
    head_lr: float = 5e-4
    """AdamW learning rate of the value head."""
    clip_coef: float = 0.2
    """ε of the clipped surrogate: ratios outside [1-ε, 1+ε] get no gradient."""
    vf_coef: float = 0.15
    """Weight of the value-function loss."""
    ent_coef: float = 0.001
    """Weight of the entropy bonus."""
    beta: float = 0.1
    """β of the KL(π‖π_ref) penalty (the initial β when adaptive_kl is on). The blog calls it
    `kl_coef`: `--kl-coef` is the same flag."""
    detach_value_head: bool = True
    """If True (the blog's final code) value-loss gradients stop at the value head; if False
    (ARENA) they also train the trunk."""
    kl_estimator: str = "full"
    """How the KL(π‖π_ref) term is taken at each completion position: `full` (the blog's, over the
    whole vocabulary: Σ_v π(v) (log π(v) − log π_ref(v))) or `k2` (½ (log π(o_t) − log π_ref(o_t))² at
    the sampled token only, `calc_k2_kl`). Their expected gradients are equal (docs/exact.md computes
    both exactly); k2's is noisier (4.4× the variance there) and skips the reference's unembedding in
    the learning phase (docs/speed.md)."""
    cache_ref_logprobs: bool = True
    """Keep the reference's final normalised residual ĥ_ref from the rollout for the KL term
    (batch × gen_len × d_model floats: 1 MB on the tiny preset, 6 MB for GPT-2 at batch 64; the
    KL unembeds it a chunk at a time) instead of a reference forward per minibatch;
    --no-cache-ref-logprobs runs the forward instead."""
    advantage: str = "one_step"
    """`one_step` (the blog's A_t = V(s_{t+1}) - V(s_t), reward at the last step) or `gae`."""
    gamma: float = 1.0
    """Discount for GAE."""
    gae_lambda: float = 0.95
    """λ for GAE."""
    normalize_reward: bool = True
    """Normalize each batch's rewards to mean 0, std 1 before the advantages."""
    adaptive_kl: bool = False
    """Adapt β toward target_kl (Ziegler et al. 2019 controller)."""
    target_kl: float = 0.5
    """Target of the adaptive controller: mean per-token KL(π‖π_ref) of a rollout, in nats."""
    kl_horizon: int = 10000
    """Horizon (in samples) of the adaptive KL controller."""
    critic_warmup: int = 0
    """Phases at the start in which only the critic learns (verl's trainer.critic_warmup): the value
    loss alone is descended, so the policy does not move while V catches up with it. 0: none."""
    critic: str = "shared"
    """`shared` (the blog's: the value head on the policy's own trunk, its loss a term of J) or
    `separate` (verl's default: a second copy of the initial model with its own value head, trunk and
    AdamW, trained on the value loss alone over the same phase; J then has no value term). Not with
    --lora-rank."""
    critic_lr: float | None = None
    """AdamW learning rate of the separate critic's trunk (its head learns at --head-lr); None: --base-lr."""

    def validate(self) -> "RLHFArgs":
        super().validate()
        _check(self.advantage in ADVANTAGES, "advantage", f"must be one of {', '.join(ADVANTAGES)}; got {self.advantage!r}")
        _check(self.kl_estimator in KL_ESTIMATORS, "kl_estimator",
               f"must be one of {', '.join(KL_ESTIMATORS)}; got {self.kl_estimator!r}")
        _check(_finite(self.clip_coef) and 0 < self.clip_coef < 1, "clip_coef", f"must be in (0, 1); got {self.clip_coef}")
        _check(0 <= self.gamma <= 1, "gamma", f"must be in [0, 1]; got {self.gamma}")
        _check(0 <= self.gae_lambda <= 1, "gae_lambda", f"must be in [0, 1]; got {self.gae_lambda}")
        _check(_finite(self.target_kl) and self.target_kl > 0, "target_kl", f"must be > 0; got {self.target_kl}")
        _check(self.critic_warmup >= 0, "critic_warmup", f"must be >= 0 (0 = none); got {self.critic_warmup}")
        _check(self.critic in CRITICS, "critic", f"must be one of {', '.join(CRITICS)}; got {self.critic!r}")
        _check(self.critic == "shared" or self.lora_rank == 0, "critic",
               "separate is not built with --lora-rank (the critic would be a second adapted copy); use --critic shared")
        _check(self.critic_lr is None or (_finite(self.critic_lr) and self.critic_lr >= 0), "critic_lr",
               f"must be >= 0 (or unset: --base-lr); got {self.critic_lr}")
        # Advantages are normalised per minibatch: one token has no std (NaN advantages).
        tokens = self.minibatch_size() * self.gen_len
        _check(tokens >= 2, "batch_size",
               f"a minibatch must hold at least 2 tokens to normalise advantages; batch_size / num_minibatches "
               f"x gen_len = {self.minibatch_size()} x {self.gen_len} = {tokens}")
        return self

    def critic_trunk_lr(self) -> float:
        """The separate critic's trunk learning rate: --critic-lr, or --base-lr when unset."""
        return self.base_lr if self.critic_lr is None else self.critic_lr

    def _positive_ints(self) -> tuple[str, ...]:
        return super()._positive_ints() + ("batches_per_learning_phase", "kl_horizon")

    def _nonnegative_floats(self) -> tuple[str, ...]:
        return super()._nonnegative_floats() + ("head_lr", "vf_coef", "ent_coef", "beta")
