"""The reward-model command's settings, torch-free: `rlhf reward-model --help` and a bad flag answer before
torch is imported (tests/integration/test_import_cost.py). The model, its loss and its training are
reward/model.py's, which imports these back."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

KIND = "reward_model"  # config.json's "algo" in a reward-model run folder (the engine's runs.REWARD_MODEL_KIND)


@dataclass
class RewardModelArgs:
    """Training a Bradley–Terry reward model on preference pairs."""

    pairs: str = ""
    """Preference pairs: a .jsonl file (from `python -m rlhf_scratch.preferences`) or a dataset id/folder."""
    model: str = "tiny"
    """The LM to start from: `tiny`, a local GPT-2 folder or a TransformerLens model name."""
    run_dir: str | None = None
    """Run folder; default runs/reward_model-<timestamp>. An existing non-empty folder is refused."""
    eval_fraction: float = 0.1
    """Fraction of the pairs held out (at least one pair), chosen with the seed."""
    epochs: int = 2
    """Passes over the training pairs."""
    batch_size: int = 32
    """Pairs per optimizer step (2·batch_size texts per forward)."""
    lr: float = 1e-4
    """AdamW learning rate (trunk and head), constant."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip."""
    center_rewards_coefficient: float | None = None
    """c of the centring term c · mean((r_c + r_r)²) (TRL recommends 0.01); None: no term."""
    seed: int = 1
    """Seeds the split, the shuffles and the head's initialisation."""
    threads: int = 1
    """torch CPU threads (0 = torch's default)."""
    device: str = "auto"
    """`auto`, `cpu` or `cuda`."""
    log_every: int = 10
    """Log the training metrics (averaged since the last log) every this many steps."""
    save_every: int = 50
    """Checkpoint every this many steps and at the end (0 = only at the end)."""
    keep_checkpoints: int = 2
    """How many of the newest checkpoints to keep."""
    quiet: bool = False
    """No progress bar or messages."""

    def validate(self) -> "RewardModelArgs":
        from rlhf_scratch.config import ConfigError, check_seed

        def check(ok: bool, field: str, rule: str) -> None:
            if not ok:
                raise ConfigError(f"{field}: {rule}")

        check(bool(self.pairs), "pairs", "required: a .jsonl file of preference pairs or a dataset id")
        check(0 < self.eval_fraction < 1, "eval_fraction", f"must be in (0, 1); got {self.eval_fraction}")
        for name in ("epochs", "batch_size", "log_every", "keep_checkpoints"):
            check(getattr(self, name) >= 1, name, f"must be >= 1; got {getattr(self, name)}")
        check(self.save_every >= 0, "save_every", f"must be >= 0; got {self.save_every}")
        check(math.isfinite(self.lr) and self.lr > 0, "lr", f"must be > 0; got {self.lr}")
        check(self.center_rewards_coefficient is None or self.center_rewards_coefficient >= 0,
              "center_rewards_coefficient", f"must be >= 0; got {self.center_rewards_coefficient}")
        check(self.threads >= 0, "threads", f"must be >= 0; got {self.threads}")
        check_seed(self.seed)  # as train's: numpy's range
        return self

    def to_dict(self) -> dict:
        return {"algo": KIND, **asdict(self)}
