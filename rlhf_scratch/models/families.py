"""Random-init Hugging Face folders of the model families people fine-tune, built offline.

The Hub is not needed: `transformers` builds any of these architectures from a config with random
weights, and `save_pretrained` writes the folder a user would download. `--model FOLDER` then loads
it through TransformerLens exactly as it would load the real checkpoint (`loading.load_lm`).

Two shapes per family:
- `tiny`: 2 layers, d_model 64, the family's real features switched on (rotary, RMSNorm, grouped
  K/V heads, gated MLP, parallel attention, tied or untied embeddings) and the shipped tiny
  tokenizer: the offline test matrix (tests/integration/test_model_families.py), seconds a run.
- `real`: the published shape of one checkpoint of the family (GPT-2 small, Pythia-160M/410M,
  Qwen2.5-0.5B, Llama-3.2-1B, Gemma-2B), with its real vocabulary size: what docs/models.md
  measures parameters, memory and time on. The weights are random, so only sizes and speed mean
  anything; the tokenizer is still the tiny one (its ids are a subset of the vocabulary).

    python -m rlhf_scratch.models.families llama /tmp/llama_tiny
    python -m rlhf_scratch.models.families qwen2.5-0.5b /tmp/qwen_shape --chat-template
    python -m rlhf_scratch.models.families qwen2 /tmp/qwen_vocab --vocab-size 151936   # tiny, Qwen2's vocabulary
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

# A ChatML template (Qwen's format), for testing `--chat-template auto` with a tiny tokenizer.
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class Family:
    """One architecture: its HF config class name and the kwargs of a tiny and a real shape."""

    model_type: str
    config_class: str
    tiny: dict
    features: str  # what the tiny shape switches on, for the docs and test ids


_TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=256)

FAMILIES: dict[str, Family] = {
    "gpt2": Family("gpt2", "GPT2Config", dict(n_embd=64, n_layer=2, n_head=4, n_positions=256),
                   "learned positions, LayerNorm, tied embeddings"),
    "pythia": Family("gpt_neox", "GPTNeoXConfig", dict(_TINY, rotary_pct=0.25, use_parallel_residual=True,
                                                       tie_word_embeddings=False),
                     "partial rotary (25 %), parallel attention and MLP, LayerNorm, untied"),
    "llama": Family("llama", "LlamaConfig", dict(_TINY, num_key_value_heads=2, tie_word_embeddings=False),
                    "rotary, RMSNorm, grouped K/V (4 heads, 2 K/V), gated SiLU MLP, untied"),
    "qwen2": Family("qwen2", "Qwen2Config", dict(_TINY, num_key_value_heads=2, tie_word_embeddings=True),
                    "rotary, RMSNorm, grouped K/V, Q/K/V biases, gated SiLU MLP, tied"),
    "gemma": Family("gemma", "GemmaConfig", dict(_TINY, num_key_value_heads=1, head_dim=16),
                    "rotary, (1 + w) RMSNorm, one K/V head, gated GELU MLP, √d embedding scale, tied"),
}

# Published shapes (from each checkpoint's config.json), for the size table.
REAL_SHAPES: dict[str, tuple[str, dict]] = {
    "gpt2-small": ("gpt2", dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257)),
    "pythia-160m": ("pythia", dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                   num_attention_heads=12, max_position_embeddings=2048, rotary_pct=0.25,
                                   use_parallel_residual=True, tie_word_embeddings=False, vocab_size=50304)),
    "pythia-410m": ("pythia", dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                                   num_attention_heads=16, max_position_embeddings=2048, rotary_pct=0.25,
                                   use_parallel_residual=True, tie_word_embeddings=False, vocab_size=50304)),
    "qwen2.5-0.5b": ("qwen2", dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                   num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                                   rope_theta=1000000.0, tie_word_embeddings=True, vocab_size=151936)),
    "llama-3.2-1b": ("llama", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                   num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                                   rope_theta=500000.0, tie_word_embeddings=True, vocab_size=128256,
                                   rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                                     high_freq_factor=4.0, original_max_position_embeddings=8192))),
}


def family_config(name: str, vocab_size: int, bos: int | None, eos: int | None,
                  shape: Literal["tiny", "real"] = "tiny"):
    """The `transformers` config of family `name` (tiny) or of published shape `name` (real)."""
    import transformers

    if shape == "real":
        family, kwargs = REAL_SHAPES[name]
    else:
        family, kwargs = name, dict(FAMILIES[name].tiny, vocab_size=vocab_size)
    config_class = getattr(transformers, FAMILIES[family].config_class)
    return config_class(**kwargs, bos_token_id=bos, eos_token_id=eos)


def build_folder(name: str, out: str | Path, shape: Literal["tiny", "real"] = "tiny", seed: int = 0,
                 chat_template: bool = False, vocab_size: int | None = None) -> Path:
    """Write a random-init causal LM of `name` and the tiny preset's tokenizer to `out`.

    `chat_template`: give the tokenizer a ChatML template (and `<|im_start|>`/`<|im_end|>` as added
    special tokens, `<|im_end|>` as the generation config's EOS), as an instruct model ships.
    `vocab_size` (tiny shape only; default the tokenizer's length): a published vocabulary on a tiny
    model, e.g. Qwen2's 151,936, for what grows with the vocabulary alone (the unembedding, the
    vocabulary terms' chunks); the tokenizer's ids are its first entries.
    """
    import torch  # (here, not at the top: the command answers --help and a bad flag before torch is imported)
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from rlhf_scratch.models.loading import TINY_LM_DIR, asset_path

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"out: {out} exists and is not empty")
    tokenizer = AutoTokenizer.from_pretrained(asset_path(TINY_LM_DIR))
    eos = tokenizer.eos_token_id
    if chat_template:
        tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
        tokenizer.chat_template = CHATML_TEMPLATE
        eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if vocab_size is not None and shape != "tiny":
        raise ValueError(f"{name}: a published shape has its own vocabulary; vocab_size is for the tiny shape")
    config = family_config(name, len(tokenizer) if vocab_size is None else vocab_size, tokenizer.bos_token_id, eos, shape)
    if config.vocab_size < len(tokenizer):  # (0 too: not "the default")
        raise ValueError(f"vocab_size: {config.vocab_size} is below the tokenizer's {len(tokenizer)} ids ({name})")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=eos)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@dataclass
class FolderArgs:
    """Write a random-init HF folder of a model family (tiny) or a published shape (real)."""

    name: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="NAME")] = tyro.MISSING
    """tiny: gpt2, pythia, llama, qwen2, gemma (FAMILIES); real: a published shape (REAL_SHAPES)."""
    out: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="OUT")] = tyro.MISSING
    """The folder to write (must not exist or be empty)."""
    seed: int = 0
    """Seeds the random weights."""
    chat_template: bool = False
    """A tokenizer with a ChatML template."""
    vocab_size: int | None = None
    """Tiny shapes: this many embedding rows (None: the tokenizer's)."""


def parse(argv: list[str]) -> FolderArgs:
    """The command line (tyro), the name and seed checked."""
    from rlhf_scratch.config import ConfigError, check_seed
    from rlhf_scratch.config.cli import parse_dataclass

    args = parse_dataclass(FolderArgs, argv, default=None, prog="python -m rlhf_scratch.models.families",
                           description=FolderArgs.__doc__)
    names = [*FAMILIES, *REAL_SHAPES]
    if args.name not in names:
        raise ConfigError(f"name: must be one of {', '.join(names)}; got {args.name!r}")
    check_seed(args.seed)
    return args


def run(args: FolderArgs) -> int:
    """Write the folder and print its path."""
    from rlhf_scratch.config import ConfigError

    shape = "real" if args.name in REAL_SHAPES else "tiny"
    try:
        out = build_folder(args.name, args.out, shape, args.seed, args.chat_template, args.vocab_size)
    except FileExistsError as e:  # the folder named on the command line: a bad value, as out: …
        raise ConfigError(str(e)) from None
    print(out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command: `command()` owns its one-line errors and exit codes."""
    from rlhf_scratch.config.command import command

    return command(parse, run, argv)


if __name__ == "__main__":
    sys.exit(main())
