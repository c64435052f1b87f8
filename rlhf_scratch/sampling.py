"""Rollouts: sample continuations of one prompt from the policy."""

from __future__ import annotations

from jaxtyping import Int
from torch import Tensor
from transformer_lens import HookedTransformer


def get_samples(
    base_model: HookedTransformer,
    prompt: str,
    batch_size: int,
    gen_len: int,
    temperature: float,
    top_k: int,
    prepend_bos: bool,
) -> tuple[Int[Tensor, "batch seq_len"], list[str]]:
    """Sample `batch_size` continuations of `prompt`, each exactly `gen_len` new tokens.

    seq_len = prefix_len + gen_len, where prefix_len counts the prompt's tokens (with BOS when
    `prepend_bos`). Generation does not stop at EOS (`stop_at_eos=False`, as in the blog), so
    every sequence has the same length and the generated span is `[:, prefix_len:]`.
    `top_k=0` samples from the whole vocabulary.

    TransformerLens generates under `torch.inference_mode()`; the ids are cloned outside it so
    that they can be used in a later autograd forward pass.
    """
    input_ids = base_model.to_tokens(prompt, prepend_bos=prepend_bos)
    output_ids = base_model.generate(
        input_ids.repeat(batch_size, 1),
        max_new_tokens=gen_len,
        stop_at_eos=False,
        temperature=temperature,
        top_k=top_k or None,
        verbose=False,
    )
    sample_ids = output_ids.clone()
    samples = base_model.to_string(sample_ids[:, 1:] if prepend_bos else sample_ids)
    return sample_ids, list(samples)
