"""The settings of the features view's dictionaries and levels, torch-free, so that `python -m
interp.features` parses its flags (whose defaults these are) and answers `--help` before torch is
imported: the sites and architectures an SAE may use and `SAESettings` (`interp.sae`), the
crosscoder's `CrosscoderSettings` (`interp.crosscoder`), and two defaults of `interp.levels.DiffLevels`.
Each is importable from its own module too."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

HOOKS = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")
"""The sites an SAE may read, per block (no resid_mid where attention and MLP run in parallel)."""

ARCHITECTURES = ("batchtopk", "matryoshka_batchtopk", "standard")
"""SAE Lens's architecture names `--dictionary` accepts (the first is the default)."""

ADL_K = 5
"""First real tokens of each text the Activation Difference Lens averages over (`DiffLevels.adl_k`)."""

CROSSCODER_POSITIONS = 200_000
"""Distinct positions the crosscoder trains on, at most (`DiffLevels.crosscoder_positions`)."""


@dataclass
class SAESettings:
    """How the SAE is trained (all of it goes into the cache key)."""

    d_sae: int = 1024
    """Number of features (8x the tiny preset's d_model = 128)."""
    k: float = 16
    """BatchTopK: mean number of active features per token during training."""
    training_tokens: int = 400_000
    """Activations to train on (about one pass over the train split; a few minutes on 2 CPU cores)."""
    context_size: int = 128
    """Tokens per sequence (review snippets concatenated, BOS-separated); capped at the model's n_ctx."""
    batch_tokens: int = 1024
    lr: float = 1e-3
    seed: int = 0
    eval_batches: int = 8
    """Batches of 16 sequences for SAE Lens's evals on the validation split."""
    architecture: str = ARCHITECTURES[0]
    """One of `ARCHITECTURES`. Matryoshka: nested widths d_sae/8, d_sae/4, d_sae/2, d_sae."""
    l1_coefficient: float = 1.0
    """The standard SAE's L1 penalty (SAE Lens's default; not tuned here). Unused by the others."""

    def key(self) -> str:
        fields = asdict(self)
        if self.architecture == ARCHITECTURES[0]:  # the key of a BatchTopK SAE as before these two fields: caches stay valid
            del fields["architecture"], fields["l1_coefficient"]
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class CrosscoderSettings:
    """How the crosscoder is trained."""

    d_latent: int = 1024
    """Latents (8x the tiny preset's d_model = 128)."""
    k: float = 16
    """BatchTopK: mean active latents per position."""
    training_tokens: int = 200_000
    """Positions (each read by both models) to train on."""
    batch_tokens: int = 1024
    lr: float = 3e-3
    """Adam's learning rate (3e-3 beat 1e-3 and 3e-4 on the tiny preset's site: fewer dead latents, lower FVU; docs/features.md)."""
    aux_k: int = 64
    """Dead latents that reconstruct the error in the auxiliary loss (Gao et al.: d_model / 2)."""
    aux_coefficient: float = 1 / 32
    """α of the auxiliary loss (Gao et al.'s 1/32)."""
    dead_steps: int = 100
    """Steps without firing after which a latent counts as dead for the auxiliary loss."""
    seed: int = 0

    def validate(self) -> None:
        """Refuse bad values in one line naming the field."""
        for name in ("d_latent", "training_tokens", "batch_tokens", "dead_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"crosscoder {name}: must be >= 1; got {getattr(self, name)}")
        if not 0 < self.k <= self.d_latent:
            raise ValueError(f"crosscoder k: must be in (0, d_latent = {self.d_latent}]; got {self.k}")
        if self.lr <= 0 or self.aux_coefficient < 0 or self.aux_k < 0:
            raise ValueError("crosscoder lr must be > 0, aux_coefficient and aux_k >= 0")
