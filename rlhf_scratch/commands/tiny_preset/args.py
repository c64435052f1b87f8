"""What the tiny preset's build reads (`build.py`): its sizes, steps and output folders, torch-free, so
that `python -m rlhf_scratch.pretrain` parses its flags, and answers `--help`, before torch is imported."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class PretrainArgs:
    out: str = "tiny_preset"
    """output folder; gets tiny_lm/, tiny_reward/ and metrics.json"""
    install: bool = False
    """also copy the result into the package's assets folder, replacing the shipped preset (needs --force; the shipped one is kept as assets/<name>.bak)"""
    force: bool = False
    """allow --install to replace the shipped preset"""
    seed: int = 0
    """seed of every random choice (split, init, batches, dropout, sampling)"""
    threads: int = 1
    """torch CPU threads; 1 makes the result bit-reproducible (other counts change float
    summation order) and is ~2x faster than 2 when other processes share the cores"""
    limit: int = 0
    """if > 0, keep only this many snippets per split (smoke tests)"""
    vocab_size: int = 8192
    """BPE vocabulary size, <|endoftext|> included"""
    n_layer: int = 4
    """transformer blocks"""
    n_head: int = 4
    """attention heads per block"""
    d_model: int = 128
    """width of the residual stream"""
    n_ctx: int = 128
    """context length; also the training window"""
    dropout: float = 0.1
    """dropout of LM pretraining and classifier fine-tuning"""
    lm_steps: int = 700
    """optimizer steps of LM pretraining"""
    lm_batch_size: int = 32
    """windows per LM optimizer step"""
    lm_lr: float = 1.5e-3
    """peak AdamW learning rate of LM pretraining (cosine decay to 10%)"""
    lm_warmup: int = 50
    """linear warmup steps of LM pretraining"""
    lm_eval_every: int = 100
    """validation loss every this many steps (the best step is kept)"""
    weight_decay: float = 0.1
    """AdamW weight decay (LM and classifier)"""
    clf_epochs: int = 3
    """epochs of classifier fine-tuning"""
    clf_batch_size: int = 32
    """reviews per classifier optimizer step"""
    clf_lr: float = 3e-4
    """AdamW learning rate of classifier fine-tuning"""
    clf_max_len: int = 64
    """classifier inputs are truncated to this many tokens"""
    n_samples: int = 256
    """headroom: number of sampled continuations of the prompt"""
    gen_len: int = 30
    """headroom: new tokens per sample"""

    @classmethod
    def smoke(cls, **overrides) -> "PretrainArgs":
        """Sizes for a test that finishes in seconds."""
        small = dict(limit=300, vocab_size=400, n_layer=1, n_head=2, d_model=32, n_ctx=64,
                     lm_steps=4, lm_batch_size=8, lm_warmup=1, lm_eval_every=2, clf_epochs=1,
                     clf_batch_size=32, n_samples=8, gen_len=5)
        return cls(**{**small, **overrides})


class PretrainError(ValueError):
    """A refused output or install (one line)."""


def check_outputs(args: PretrainArgs) -> None:
    """Refuse, before any work, to overwrite a non-empty --out or (without --force) the shipped preset."""
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PretrainError(f"out: {out} exists and is not empty; choose another --out")
    if args.install and not args.force:
        from rlhf_scratch.models.loading import TINY_LM_DIR, asset_path  # (torch: the flags are parsed by now)

        raise PretrainError(f"install: would replace the shipped preset in {asset_path(TINY_LM_DIR).parent}; "
                            "add --force (the current one is kept as <name>.bak)")
