"""What exercises 07 (the parts: the value head, the generation loop, the replay memory) give the learner
besides the checks: a TransformerLens forward at positions the caller chooses, with or without a KV cache.

    forward_at(model, ids, positions, attention_mask, cache=None)   logits [batch, n, d_vocab]
    new_cache(model, batch)                                         an empty TransformerLens KV cache
    ReplayMinibatch                                                 the package's minibatch (core.memory)

and what notebook 06 trains with: `learner_parts()` (the learner's three parts where their checks pass, the
package's in place of the others, said) and `rollout_with_parts` (one phase's rollout made with them).

`forward_at` is TransformerLens' own forward with the positional embedding read at `positions` instead of
computed from the mask: the residual is W_E[ids] + W_pos[positions] (through `hook_embed` and
`hook_pos_embed`), then every block from layer 0 (`start_at_layer=0`), the attention masked by
`attention_mask`. With a `cache`, `attention_mask` covers the new columns only: it is appended to the
mask the cache holds (as TransformerLens' `input_to_embed` does), and the new columns attend to every
cached one. So the two things a padded, cached sampler must get right are the caller's: which positions,
and which columns are real. Absolute positional embeddings only (GPT-2's, the tiny preset's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn
from transformer_lens import HookedTransformer
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

from rlhf_scratch.core.memory import ReplayMinibatch
from rlhf_scratch.rollout.phase import Rollout

__all__ = ["Parts", "ReplayMinibatch", "forward_at", "learner_parts", "new_cache", "rollout_with_parts"]


def new_cache(model: HookedTransformer, batch: int) -> TransformerLensKeyValueCache:
    """An empty KV cache for `batch` rows: each forward_at with it appends its columns' keys and values."""
    return TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, batch)


def forward_at(
    model: HookedTransformer,
    ids: Int[Tensor, "batch n"],
    positions: Int[Tensor, "batch n"],
    attention_mask: Bool[Tensor, "batch n"],
    cache: TransformerLensKeyValueCache | None = None,
) -> Float[Tensor, "batch n d_vocab"]:
    """The logits after each of `ids`, token ids[b, i] embedded at position positions[b, i]:

        x = W_E[ids] + W_pos[positions];   logits = the blocks, ln_final and W_U on x, causal, masked

    `attention_mask` False hides a column from every query. With `cache`, `ids` are the columns after the
    cached ones: they attend to the cache (its columns masked as they were given) and to themselves, and
    are appended to it."""
    if positions.shape != ids.shape or attention_mask.shape != ids.shape:
        raise ValueError(f"forward_at: ids {tuple(ids.shape)}, positions {tuple(positions.shape)} and "
                         f"attention_mask {tuple(attention_mask.shape)} must have one shape")
    if int(positions.min()) < 0 or int(positions.max()) >= model.cfg.n_ctx:
        raise ValueError(f"forward_at: positions must lie in 0 .. n_ctx - 1 = {model.cfg.n_ctx - 1}, "
                         f"got {int(positions.min())} .. {int(positions.max())}")
    mask = attention_mask.long()
    if cache is not None:
        mask = cache.append_attention_mask(mask)
    residual = model.hook_embed(model.embed(ids)) + model.hook_pos_embed(model.W_pos[positions])
    return model(residual, start_at_layer=0, attention_mask=mask, past_kv_cache=cache)


# --- notebook 06: training with the learner's parts ----------------------------------------------

PARTS = ("TransformerWithValueHead", "generate", "ReplayMemory")
PARTS_NOTEBOOK = "exercises/07_parts_exercises.ipynb"


@dataclass
class Parts:
    """The three parts notebook 06 trains with, each the learner's where its check passes."""

    TransformerWithValueHead: Any  # noqa: N815 (the class it holds)
    generate: Callable
    ReplayMemory: Any  # noqa: N815
    whose: dict[str, str]


def learner_parts(notebook: str | Path = PARTS_NOTEBOOK) -> Parts:
    """Run the learner's exercises 07 (`notebook`, relative to notebooks/) with their checks
    (`progress.graded`) and take each part whose check passes; the package's stands in for a part that
    is not written or fails (its `TransformerWithValueHead`, `ReplayMemory`; for `generate`, whose
    contract the package's sampler does not share, the course's solution). Prints whose each part is."""
    from rlhf_scratch.algorithms.ppo import TransformerWithValueHead
    from rlhf_scratch.core.memory import ReplayMemory
    from rlhf_scratch.course import solutions_parts
    from rlhf_scratch.course.execute_notebooks import NOTEBOOK_DIR
    from rlhf_scratch.course.progress import graded

    path = NOTEBOOK_DIR / notebook
    results, namespace = graded(path) if path.exists() else ([], {})
    states = {r.name: r for r in results}
    fallback = {"TransformerWithValueHead": (TransformerWithValueHead, "the package's"),
                "generate": (solutions_parts.generate, "the course's solution, solutions_parts.generate"),
                "ReplayMemory": (ReplayMemory, "the package's")}
    chosen, whose = {}, {}
    for name in PARTS:
        result = states.get(name)
        if result is not None and result.state == "done":
            chosen[name], whose[name] = namespace[name], "yours"
            print(f"{name}: yours (its check passes)")
            continue
        why = "not found: " + str(path) if result is None else result.state
        chosen[name], whose[name] = fallback[name][0], fallback[name][1]
        print(f"{name}: {fallback[name][1]} (yours is {why})")
    return Parts(**chosen, whose=whose)


@torch.no_grad()
def rollout_with_parts(parts: Parts, policy: nn.Module, lm: HookedTransformer, ref_model: HookedTransformer,
                       prompts: list[str], reward_fn: Callable, args: Any) -> Rollout:
    """One phase's rollout with the learner's parts: `parts.generate` samples from `lm` (the policy's LM)
    with the package's sampler (`sample_next_token` at args.temperature, args.top_k), then `policy` (the
    learner's value-head module) gives log π_old and V_old, the reference log π_ref, and the per-token
    full-vocabulary KL(π_old ‖ π_ref) and entropy, all at the sampling temperature; the reward last
    (`compute_scores`)."""
    from rlhf_scratch.core.objectives import get_log_probs, temperature_scaled
    from rlhf_scratch.rollout.generation import (
        decode_completions,
        eos_token_ids,
        pad_token_id,
        prompt_tokens,
        sample_next_token,
    )
    from rlhf_scratch.rollout.phase import compute_scores

    rows = [prompt_tokens(lm, p, args.prepend_bos) for p in prompts]
    stop_at_eos = bool(args.stop_at_eos)  # None (the tiny preset's default): no stop
    eos = eos_token_ids(lm)[0] if stop_at_eos else None
    ids, attention_mask, completion_mask = parts.generate(
        lm, rows, args.gen_len, lambda logits: sample_next_token(logits, args.temperature, args.top_k),
        pad_token_id(lm), eos)
    prefix_len, mask = ids.shape[1] - args.gen_len, attention_mask.long()
    logits, values = policy(ids, attention_mask=mask)
    ref_logits = ref_model(ids, attention_mask=mask)
    span = slice(prefix_len - 1, -1)
    log_pi = temperature_scaled(logits[:, span], args.temperature).log_softmax(-1)
    log_ref = temperature_scaled(ref_logits[:, span], args.temperature).log_softmax(-1)
    rollout = Rollout(
        prompt_ids=ids[:, :prefix_len], completion_ids=ids[:, prefix_len:], attention_mask=attention_mask,
        completion_mask=completion_mask, prompts=list(prompts),
        completions=decode_completions(lm, ids[:, prefix_len:], completion_mask, stop_at_eos),
        num_generations=1, eos_token_id=eos_token_ids(lm), temperature=args.temperature,
        logprobs=get_log_probs(logits, ids, prefix_len, args.temperature),
        ref_logprobs=get_log_probs(ref_logits, ids, prefix_len, args.temperature),
        kl=(log_pi.exp() * (log_pi - log_ref)).sum(-1), entropy=-(log_pi.exp() * log_pi).sum(-1), values=values)
    return compute_scores(rollout, reward_fn)
