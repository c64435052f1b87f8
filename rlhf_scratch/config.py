"""One config dataclass for every RLHF run, its presets, and its validation.

`RLHFArgs` carries the blog's field names. Presets fill in the model, the reward model and
the hyper-parameters that suit them; anything given on the command line wins over the preset.
`validate()` is called once at start and fails with one line naming the field and the rule.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

TASKS = ("sentiment", "vader", "periods")
DIRECTIONS = ("pos", "neg")
ADVANTAGES = ("one_step", "gae")


class ConfigError(ValueError):
    """A bad config value; its message is one line naming the field and the rule."""


@dataclass
class RLHFArgs:
    # --- what to train ---------------------------------------------------------------------
    task: str = "sentiment"
    """Reward: `sentiment` (learned classifier), `vader` (lexicon sentiment) or `periods` (count '.')."""
    preset: str = "tiny"
    """`tiny` (shipped offline LM + classifier) or `gpt2` (GPT-2 + lvwerra/distilbert-imdb, the blog's setup)."""
    model: str = "tiny"
    """Policy to tune: `tiny`, a TransformerLens pretrained name (e.g. `gpt2`) or a local HF GPT-2 folder."""
    reward_model: str = "tiny"
    """Sentiment classifier for task `sentiment`: `tiny`, a Hub id or a local folder. Label 1 = positive."""
    direction: str = "pos"
    """`pos` rewards positive sentiment, `neg` negative (tasks `sentiment` and `vader`)."""
    seed: int = 1
    """Seeds torch, numpy and random once at start."""
    device: str = "auto"
    """`auto` (cuda if available, else cpu), `cpu` or `cuda`."""

    # --- phases and batches ----------------------------------------------------------------
    total_phases: int = 100
    """Rollout + learning phases to run."""
    batch_size: int = 64
    """Samples generated per rollout phase."""
    num_minibatches: int = 4
    """Minibatches each shuffled copy of the batch is split into; must divide batch_size."""
    batches_per_learning_phase: int = 2
    """How many times the rollout batch is reshuffled and trained on per phase (PPO epochs)."""

    # --- optimisation ----------------------------------------------------------------------
    base_lr: float = 1e-4
    """AdamW learning rate of the transformer trunk."""
    head_lr: float = 5e-4
    """AdamW learning rate of the value head."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip."""
    warmup_steps: int = 10
    """Phases of linear learning-rate warmup from 0 to 1 (times base/head lr)."""
    final_scale: float = 0.1
    """Learning-rate multiplier reached by linear decay at the last phase."""

    # --- the PPO objective -----------------------------------------------------------------
    clip_coef: float = 0.2
    """ε of the clipped surrogate: ratios outside [1-ε, 1+ε] get no gradient."""
    vf_coef: float = 0.15
    """Weight of the value-function loss."""
    ent_coef: float = 0.001
    """Weight of the entropy bonus."""
    kl_coef: float = 0.1
    """β of the KL(π‖π_ref) penalty (the initial β when adaptive_kl is on)."""
    detach_value_head: bool = True
    """If True (the blog's final code) value-loss gradients stop at the value head; if False
    (ARENA) they also train the trunk."""
    advantage: str = "one_step"
    """`one_step` (the blog's A_t = V(s_{t+1}) - V(s_t), reward at the last step) or `gae`."""
    gamma: float = 1.0
    """Discount for GAE."""
    gae_lambda: float = 0.95
    """λ for GAE."""
    adaptive_kl: bool = False
    """Adapt kl_coef toward target_kl (Ziegler et al. 2019 controller)."""
    target_kl: float = 0.5
    """Target of the adaptive controller: mean per-token KL(π‖π_ref) of a rollout, in nats."""
    kl_horizon: int = 10000
    """Horizon (in samples) of the adaptive KL controller."""

    # --- sampling --------------------------------------------------------------------------
    gen_len: int = 30
    """New tokens generated per sample."""
    temperature: float = 1.0
    """Sampling temperature (> 0)."""
    top_k: int = 10
    """Sample from the top-k tokens only (0 = all)."""
    prefix: str = "This movie was really"
    """Prompt every sample continues."""
    prepend_bos: bool = True
    """Prepend <|endoftext|> to the prompt."""
    normalize_reward: bool = True
    """Normalize each batch's rewards to mean 0, std 1 before the advantages."""

    # --- early stopping --------------------------------------------------------------------
    early_stopping: bool = False
    """Stop when the phase KL stays above kl_threshold (or reward above reward_threshold)."""
    patience: int = 5
    """Consecutive bad phases tolerated before stopping."""
    kl_threshold: float = 2.0
    """Per-phase mean KL (nats per token) above which a phase counts as bad."""
    reward_threshold: float | None = None
    """Optional: stop once the windowed mean reward reaches this."""
    window_size: int = 10
    """Phases averaged by the reward threshold."""

    # --- output ----------------------------------------------------------------------------
    run_dir: str | None = None
    """Run folder; default runs/<task>-<timestamp>. An existing non-empty folder is refused."""
    wandb: bool = False
    """Log one point per phase to Weights & Biases (offline mode without network)."""
    wandb_project: str = "rlhf_scratch"
    """W&B project name."""
    table_every: int = 1
    """Print the blog's sample table every this many phases (and at the first and last)."""
    save_model: bool = True
    """Save the tuned policy (with value head) to the run folder at the end."""

    def validate(self) -> "RLHFArgs":
        """Check every field; raise ConfigError with one line naming the first bad one."""
        _check(self.task in TASKS, "task", f"must be one of {', '.join(TASKS)}; got {self.task!r}")
        _check(self.preset in PRESETS, "preset", f"must be one of {', '.join(PRESETS)}; got {self.preset!r}")
        _check(self.direction in DIRECTIONS, "direction", f"must be 'pos' or 'neg'; got {self.direction!r}")
        _check(self.advantage in ADVANTAGES, "advantage", f"must be one of {', '.join(ADVANTAGES)}; got {self.advantage!r}")
        _check(self.device in ("auto", "cpu", "cuda", "mps") or self.device.startswith("cuda:"),
               "device", f"must be auto, cpu, cuda[:N] or mps; got {self.device!r}")
        for name in ("total_phases", "batch_size", "num_minibatches", "batches_per_learning_phase",
                     "gen_len", "window_size", "patience", "table_every", "kl_horizon"):
            _check(getattr(self, name) >= 1, name, f"must be >= 1; got {getattr(self, name)}")
        _check(self.batch_size % self.num_minibatches == 0, "batch_size",
               f"must be divisible by num_minibatches ({self.batch_size} % {self.num_minibatches} != 0)")
        for name in ("base_lr", "head_lr", "max_grad_norm", "vf_coef", "ent_coef", "kl_coef",
                     "warmup_steps", "final_scale", "top_k"):
            _check(getattr(self, name) >= 0, name, f"must be >= 0; got {getattr(self, name)}")
        _check(0 < self.clip_coef < 1, "clip_coef", f"must be in (0, 1); got {self.clip_coef}")
        _check(self.temperature > 0, "temperature", f"must be > 0; got {self.temperature}")
        _check(0 <= self.gamma <= 1, "gamma", f"must be in [0, 1]; got {self.gamma}")
        _check(0 <= self.gae_lambda <= 1, "gae_lambda", f"must be in [0, 1]; got {self.gae_lambda}")
        _check(self.target_kl > 0, "target_kl", f"must be > 0; got {self.target_kl}")
        _check(self.kl_threshold > 0, "kl_threshold", f"must be > 0; got {self.kl_threshold}")
        _check(self.final_scale <= 1, "final_scale", f"must be <= 1; got {self.final_scale}")
        _check(self.prefix != "" or self.prepend_bos, "prefix",
               "must be non-empty when prepend_bos is False (generation needs at least one token)")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "RLHFArgs":
        """Rebuild from a saved config; an unknown key is an error naming that key."""
        names = {f.name for f in dataclasses.fields(cls)}
        for key in values:
            _check(key in names, key, "is not an RLHFArgs field")
        return cls(**values)


def _check(ok: bool, name: str, rule: str) -> None:
    if not ok:
        raise ConfigError(f"{name}: {rule}")


# Each preset is a set of field values applied over the dataclass defaults (which are tuned for
# the tiny preset: see README, "Results").
PRESETS: dict[str, dict[str, Any]] = {
    # The shipped 4-layer review LM and classifier: runs offline on 2 CPU cores in minutes.
    "tiny": dict(model="tiny", reward_model="tiny"),
    # The blog's setup: GPT-2 small tuned against lvwerra/distilbert-imdb (needs the Hub).
    "gpt2": dict(
        model="gpt2",
        reward_model="lvwerra/distilbert-imdb",
        total_phases=100,
        batch_size=128,
        num_minibatches=4,
        batches_per_learning_phase=2,
        base_lr=2e-5,
        head_lr=5e-4,
        warmup_steps=20,
        final_scale=0.1,
        kl_coef=2.5,
        gen_len=30,
        top_k=10,
    ),
}


def make_args(preset: str = "tiny", **overrides: Any) -> RLHFArgs:
    """Preset values, then `overrides` (e.g. from the command line), validated."""
    _check(preset in PRESETS, "preset", f"must be one of {', '.join(PRESETS)}; got {preset!r}")
    names = {f.name for f in dataclasses.fields(RLHFArgs)}
    for key in overrides:
        _check(key in names, key, "is not an RLHFArgs field")
    values = {**PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None}}
    return RLHFArgs(preset=preset, **values).validate()
