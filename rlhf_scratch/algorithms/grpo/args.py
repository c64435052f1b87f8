"""GRPO's config: a `GroupArgs` with TRL 1.16's names and defaults, and its eight loss types. Torch-free: the command line reads it
before torch loads, so a bad flag is answered at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rlhf_scratch.config import CommonArgs, GroupArgs, _check, _finite

GRPO_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")  # TRL 1.16's eight
SCALE_REWARDS = ("group", "batch", "none")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")


@dataclass
class GRPOArgs(GroupArgs):
    """GRPO (Shao et al. 2024), its length-bias fixes (Dr. GRPO, DAPO, GSPO, LUSPO) and its other
    surrogates (CISPO, SAPO, VESPO), with TRL 1.16's names and defaults."""

    ALGO: ClassVar[str] = "grpo"

    num_generations: int = 8
    """G: completions per prompt (consecutive in the batch); batch_size must divide by it. 8 as TRL:
    the tiny preset's batch of 64 is then 8 prompts."""
    num_iterations: int = 1
    """Passes over each rollout batch (TRL's μ). With 1, every ratio is 1 (the loss REINFORCE-like) only on
    the first minibatch; later minibatches are scored by a policy that has already stepped."""
    steps_per_generation: int | None = None
    """TRL's: the optimizer steps one generation batch (batch_size completions) is split into, each on
    batch_size / steps_per_generation of them (TRL's per_device_train_batch_size × processes). TRL counts
    per-device batches and steps every gradient_accumulation_steps of them; we have no accumulation
    (TRL's default of 1), so here it is one number with num_minibatches, and giving it sets num_minibatches.
    None: num_minibatches (4, ours: four off-policy steps per rollout). TRL's own None means
    gradient_accumulation_steps, i.e. ONE on-policy step per generation batch: `--steps-per-generation 1`."""
    epsilon_low: float = 0.2
    """Lower clip of the ratio: 1 - epsilon_low (TRL's `epsilon`)."""
    epsilon_high: float = 0.2
    """Upper clip of the ratio: 1 + epsilon_high (DAPO's clip-higher recommends 0.28). Under loss_type
    `cispo` it is ε_max, the cap of the weight itself (not 1 + it): ScaleRL recommends 5.0, and TRL's
    default 0.2 then caps every weight at 0.2."""
    delta: float | None = None
    """Two-sided clipping (INTELLECT-2, TRL's `delta`): the unclipped side of the surrogate is capped
    too, min(ρ, δ) A, so a token with A < 0 whose ratio ran away weighs at most δ. Clipped loss types
    only (grpo, bnpo, dr_grpo, dapo, luspo). None (TRL's default): off. TRL recommends δ > 1 + epsilon_high."""
    beta: float = 0.0
    """β of the per-token k3 KL to the reference in the loss. 0 (TRL's default): no reference forward at all."""
    use_bias_correction_kl: bool = True
    """Weigh each token's k3 by the importance ratio ρ (unclipped, with its gradient), as TRL's default
    (DeepSeek-V3.2): the KL term's gradient is then the unbiased one of KL(π‖π_ref) for tokens sampled
    from π_old. Changes the gradient whenever beta > 0, even at ρ = 1; no effect at beta = 0."""
    loss_type: str = "dapo"
    """The per-token term and its aggregation (docs/grpo.md). Clipped surrogate, aggregated: `grpo`
    (per-sequence mean, then mean: length-biased), `bnpo` (mean over the minibatch's tokens), `dr_grpo`
    (sum / (sequences x gen_len)), `dapo` (sum / the generation batch's tokens), `luspo` (per-sequence sum,
    then mean; meant with importance_sampling_level sequence). Other surrogates: `cispo` (clipped, detached
    weight on log π; dapo's sum), `sapo` (a soft sigmoid gate instead of the clip; grpo's mean), `vespo`
    (a Gamma-shaped, detached sequence weight on log π; dapo's sum)."""
    scale_rewards: str = "group"
    """Advantage scale: `group` (÷ the group's reward std), `batch` (÷ the whole batch's) or `none` (Dr. GRPO)."""
    importance_sampling_level: str = "token"
    """`token` (one ratio per token) or `sequence` (GSPO: one ratio per sequence, exp of the mean log-ratio)."""
    sapo_temperature_pos: float = 1.0
    """τ of SAPO's gate for tokens with A > 0: the term is (4/τ) σ(τ (ρ − 1)) A (TRL's default 1.0)."""
    sapo_temperature_neg: float = 1.05
    """τ of SAPO's gate for tokens with A <= 0 (TRL's default 1.05: a slightly sharper gate on the pushed-down side)."""
    vespo_k_pos: float = 2.0
    """k of VESPO's weight φ(w) = e^λ w^k e^(−λ w) for A >= 0: how hard a low sequence ratio w < 1 is down-weighted."""
    vespo_lambda_pos: float = 3.0
    """λ of VESPO's weight for A >= 0: how hard a high sequence ratio w > 1 is down-weighted."""
    vespo_k_neg: float = 3.0
    """k of VESPO's weight for A < 0 (TRL's default 3.0)."""
    vespo_lambda_neg: float = 2.0
    """λ of VESPO's weight for A < 0 (TRL's default 2.0)."""
    mask_truncated_completions: bool = False
    """Leave the completions that never produced EOS (cut at gen_len) out of the loss, as TRL (DAPO's
    overlong filtering). They still count in their group's advantages. Needs completions that stop at
    EOS (--stop-at-eos, or a prompt dataset)."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus (TRL's `entropy_coef`): J + entropy_coef · mean over kept tokens of
    H[π] at each position, the same for every loss_type. 0 (TRL's default): off, and no entropy is computed."""
    top_k: int = 0
    """Sample from the top-k tokens only (0 = all, TRL's default)."""
    measure_kl: bool = False
    """With beta = 0, still run the reference forward each rollout, only to log rollout/kl_full_vocab
    and eval/ref_logprob_per_token (a diagnostic, not in TRL; always on when beta > 0)."""

    def __post_init__(self) -> None:
        if self.steps_per_generation is not None:
            # the two are one count here; num_minibatches left at its default takes steps_per_generation's value
            _check(self.steps_per_generation >= 1, "steps_per_generation", f"must be >= 1; got {self.steps_per_generation}")
            _check(self.num_minibatches in (self.steps_per_generation, CommonArgs.num_minibatches), "steps_per_generation",
                   f"is num_minibatches under TRL's name (no gradient accumulation here): give one of them, or the same "
                   f"value; got steps_per_generation {self.steps_per_generation}, num_minibatches {self.num_minibatches}")
            self.num_minibatches = self.steps_per_generation

    def validate(self) -> "GRPOArgs":
        super().validate()
        _check(self.loss_type in GRPO_LOSS_TYPES, "loss_type",
               f"must be one of {', '.join(GRPO_LOSS_TYPES)}; got {self.loss_type!r}")
        _check(self.scale_rewards in SCALE_REWARDS, "scale_rewards",
               f"must be one of {', '.join(SCALE_REWARDS)}; got {self.scale_rewards!r}")
        _check(self.importance_sampling_level in IMPORTANCE_SAMPLING_LEVELS, "importance_sampling_level",
               f"must be one of {', '.join(IMPORTANCE_SAMPLING_LEVELS)}; got {self.importance_sampling_level!r}")
        _check(self.delta is None or (_finite(self.delta) and self.delta > 1), "delta",
               f"must be > 1 (a cap at or below 1 caps tokens that have not moved; TRL recommends > 1 + epsilon_high); "
               f"got {self.delta}")
        for name in ("sapo_temperature_pos", "sapo_temperature_neg"):
            value = getattr(self, name)
            _check(_finite(value) and value > 0, name, f"must be > 0 (the gate divides by it); got {value}")
        _check(not self.mask_truncated_completions or self.eos_stops(), "mask_truncated_completions",
               "needs completions that stop at EOS (--stop-at-eos, or a prompt dataset): without a stop every "
               "completion runs to gen_len and would be masked")
        return self

    def _nonnegative_floats(self) -> tuple[str, ...]:
        return super()._nonnegative_floats() + ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg",
                                                "entropy_coef")
