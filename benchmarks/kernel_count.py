"""Aten ops per training forward, and per forward + backward: ours against TransformerLens' hooked
forward and Hugging Face's GPT-2 (SDPA attention), at the same shape.

On a GPU each aten op is at least one kernel launch, and at small shapes the chip waits on launches,
so this count — measurable on any CPU — is the number the GPU time follows. Counted with a
`TorchDispatchMode` that sees every op the dispatcher runs (views included: they are cheap but
each is a Python → C++ round trip), on a 16 × 35 batch with two left-padded rows, as a rollout's.

    python benchmarks/kernel_count.py                          # tiny preset shape, prints the table
    python benchmarks/kernel_count.py --shape gpt2-small --json benchmarks/kernel_count_gpt2-small.json
    python benchmarks/kernel_count.py --shape qwen2-tiny --json benchmarks/kernel_count_qwen2_tiny.json

A forward is tokens → logits [batch, pos, d_vocab] in float32 (for ours: `fast_final_hidden`, then
the unembedding); the backward is that of `logits.sum()`. The models are in eval mode (no dropout,
so HF's count has no dropout ops) with gradients on. tests/integration/test_fast_forward.py fails if ours rises
above the count recorded in benchmarks/kernel_count_tiny.json (and kernel_count_qwen2_tiny.json).

`qwen2-tiny` is a Qwen2 model (rotary positions, RMSNorm, 4 query heads over 2 K/V heads, Q/K/V
biases, gated SiLU MLP, tied embeddings) at the tiny preset's size (4 layers, d_model 128, d_mlp 512,
vocabulary 8,192), random init, loaded through TransformerLens as `--model FOLDER` loads it (norms
folded, RMSPre); HF's side is the same weights in `Qwen2ForCausalLM` with SDPA attention.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling provenance.py, however this file is loaded
from provenance import provenance  # noqa: E402

BATCH, POS = 16, 35


class OpCounter(TorchDispatchMode):
    """Counts every aten op dispatched inside the `with` block, by name."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def batch(vocab: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (BATCH, POS), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :6], mask[1, :2] = 0, 0
    return ids, mask


def tiny_case():
    """The shipped tiny preset (4 layers, d_model 128, vocab 8,192) and a 16 × 35 batch."""
    from rlhf_scratch.models.loading import load_lm

    model = load_lm("tiny").eval()
    return (model, *batch(model.cfg.d_vocab))


def gpt2_small_case():
    """GPT-2 small's shape (12 layers, d_model 768, vocab 50,257), random init, as a HookedTransformer."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(n_layers=12, d_model=768, n_heads=12, d_head=64, d_mlp=3072, d_vocab=50257,
                                  n_ctx=1024, act_fn="gelu_new", normalization_type="LN", seed=0)
    model = HookedTransformer(cfg).eval()
    return (model, *batch(cfg.d_vocab))


def qwen2_tiny_case(folder: Path):
    """A random Qwen2ForCausalLM at the tiny preset's size, written to `folder` with the tiny tokenizer
    and loaded as a run loads it; returns (TL model, ids, mask, the HF model)."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from rlhf_scratch.models.loading import TINY_LM_DIR, asset_path, load_lm

    tokenizer = AutoTokenizer.from_pretrained(asset_path(TINY_LM_DIR))
    config = Qwen2Config(hidden_size=128, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=len(tokenizer), max_position_embeddings=256,
                         tie_word_embeddings=True, attn_implementation="sdpa",
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    hf = Qwen2ForCausalLM(config).eval()
    hf.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    model = load_lm(str(folder)).eval()
    return (model, *batch(model.cfg.d_vocab), hf)


def hf_gpt2_like(model) -> torch.nn.Module:
    """Hugging Face's GPT2LMHeadModel (SDPA attention) of the same shape, random init."""
    from transformers import GPT2Config, GPT2LMHeadModel

    c = model.cfg
    config = GPT2Config(n_embd=c.d_model, n_layer=c.n_layers, n_head=c.n_heads, n_inner=c.d_mlp, vocab_size=c.d_vocab,
                        n_positions=c.n_ctx, activation_function="gelu_new", attn_implementation="sdpa")
    return GPT2LMHeadModel(config).eval()


def forward_fn(model, system: str):
    """tokens, mask → logits, for one of the systems."""
    if system == "ours":
        from rlhf_scratch.models.fast_forward import fast_final_hidden

        return lambda ids, mask: model.unembed(fast_final_hidden(model, ids, mask))
    if system == "transformer_lens":
        return lambda ids, mask: model(ids, attention_mask=mask)
    if system == "hf":
        return lambda ids, mask: model(input_ids=ids, attention_mask=mask).logits
    raise ValueError(f"system: {system!r}")


def count_ops(model, ids, mask, system: str) -> dict:
    """{'forward': ops, 'forward_backward': ops, 'by_op': {name: ops} of the forward}."""
    forward = forward_fn(model, system)
    forward(ids, mask)  # warm-up: lazy initialisations are not the steady state
    with OpCounter() as fwd:
        forward(ids, mask)
    with OpCounter() as both:
        forward(ids, mask).sum().backward()
    model.zero_grad(set_to_none=True)
    return {"forward": fwd.total, "forward_backward": both.total, "by_op": dict(fwd.ops.most_common())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=["tiny", "gpt2-small", "qwen2-tiny"], default="tiny")
    parser.add_argument("--json", type=Path, help="write the counts here")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if args.shape == "qwen2-tiny":
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            model, ids, mask, hf = qwen2_tiny_case(Path(tmp) / "qwen2")
    else:
        model, ids, mask = tiny_case() if args.shape == "tiny" else gpt2_small_case()
        hf = hf_gpt2_like(model)
    out = {"provenance": provenance(), "shape": args.shape, "batch": [BATCH, POS], "torch": torch.__version__,
           "ours": count_ops(model, ids, mask, "ours"),
           "transformer_lens": count_ops(model, ids, mask, "transformer_lens"),
           "hf": count_ops(hf, ids, mask, "hf")}
    print(f"{args.shape}, {BATCH} × {POS} tokens, two rows left-padded: aten ops")
    print(f"{'':<18}{'forward':>10}{'fwd + bwd':>12}")
    for system in ("ours", "transformer_lens", "hf"):
        print(f"{system:<18}{out[system]['forward']:>10}{out[system]['forward_backward']:>12}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
