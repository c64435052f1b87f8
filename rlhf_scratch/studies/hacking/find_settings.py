"""What each step of finding the hack reads (`find_steps.py`): torch-free, so that the command's flags
(`find.FindArgs` derives from it) are parsed, and `--help` answered, before torch is imported."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlhf_scratch.reward.preferences import RATER_DEFAULTS

if TYPE_CHECKING:
    from interp.sampling import SampleSettings


@dataclass
class FindSettings:
    """How many samples each step reads, and gold's penalty."""

    n_samples: int = 512
    """Samples per model for the decomposition (cycled over the prompts)."""
    n_causal: int = 256
    """Samples per condition of the causal check."""
    n_random: int = 4
    """Random candidates of the finding's kind ablated as the causal check's baseline."""
    gen_len: int = 16
    """Tokens per completion (the most)."""
    n_ablate: int = 10
    """The second causal check ablates the top this many internal candidates together."""
    top_k_movers: int = 10
    """Top movers shown and tried as candidates."""
    penalty: float = RATER_DEFAULTS["penalty"]
    """c of gold g' = g − c · rep₃ (the repetition rater's gold; 0: gold g)."""
    seed: int = 0
    """Sampling seed (the same for every model and condition: common random numbers)."""

    def sampling(self, n: int, seed_offset: int = 0) -> SampleSettings:
        """The samples' settings: temperature 1, the whole vocabulary, stop at EOS, `n` of them."""
        from interp.sampling import SampleSettings

        return SampleSettings(n, self.gen_len, 1.0, 0, True, True, self.seed + seed_offset)
