"""What notebook 06 trains with: `learner_parts()` (the learner's three parts of exercises 07 — the value head,
the generation loop, the replay memory — where their checks pass, the package's in place of the others, said)
and `rollout_with_parts` (one phase's rollout made with them).

Apart from `parts_kit` (what the exercises and their checks use) because it runs the learner's notebook through
`progress`, which reads the whole catalogue: the checks must not import it back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformer_lens import HookedTransformer

from rlhf_scratch.rollout.phase import Rollout

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
