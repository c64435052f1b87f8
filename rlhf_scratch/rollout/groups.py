"""Whole groups of a rollout taken out and put together: what DAPO's dynamic sampling needs
(`engine.dataflow.roll_out_filtered`) to keep the groups with a spread from several generation batches.

    part_1 = generate + reward (prompts 1..P)      part_2 = ... (prompts P+1..2P)
    batch  = take_groups(concat_rollouts([part_1, part_2]), [0, 3, 4, ...])

Both work on a rollout that has its samples and rewards but no log-probs yet (verl's DAPO filters after the
reward and before old_log_prob: log-probs are then computed for the kept rows only). Each generation batch
left-pads its prompts to its own longest, so `concat_rollouts` pads the narrower ones on the left again;
what stands under a False of the attention mask is never read, and is the pad the prompts already use.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from rlhf_scratch.rollout.phase import Rollout

PER_ROW = ("completion_ids", "completion_mask", "scores", "rewards", "verdicts",
           "env_rewards", "num_turns", "tool_calls", "tool_errors", "env_tokens")
"""The tensor columns a rollout has before its log-probs, besides the left-padded prompt and mask (the last five:
an episode's record, --env)."""
LATER = ("logprobs", "ref_logprobs", "kl", "entropy", "values", "ref_hidden", "ref_lse")
"""What `compute_log_prob` fills: not there yet when groups are chosen."""


def take_groups(rollout: Rollout, groups: Sequence[int]) -> Rollout:
    """The rows of the groups `groups` (each G consecutive rows; indices of groups, in the order given)."""
    _check_unscored(rollout, "take_groups")
    G = rollout.num_generations
    rows = [g * G + i for g in groups for i in range(G)]
    index = torch.tensor(rows, dtype=torch.long, device=rollout.completion_ids.device)
    columns = {name: None if (x := getattr(rollout, name)) is None else x[index]
               for name in ("prompt_ids", "attention_mask", *PER_ROW)}
    return Rollout(**columns, prompts=[rollout.prompts[r] for r in rows],
                   completions=[rollout.completions[r] for r in rows], num_generations=G,
                   eos_token_id=rollout.eos_token_id, temperature=rollout.temperature)


def concat_rollouts(parts: Sequence[Rollout]) -> Rollout:
    """The parts' rows one after another, their prompts left-padded to the widest part's (same G,
    EOS and temperature; the same columns set in every part)."""
    if not parts:
        raise ValueError("concat_rollouts: no parts")
    first = parts[0]
    for part in parts:
        _check_unscored(part, "concat_rollouts")
        if (part.num_generations, part.eos_token_id, part.temperature) != (first.num_generations, first.eos_token_id,
                                                                           first.temperature):
            raise ValueError("concat_rollouts: the parts differ in num_generations, eos_token_id or temperature")
    width = max(part.prefix_len for part in parts)
    pad = _pad_token(parts)
    prompt_ids = torch.cat([F.pad(p.prompt_ids, (width - p.prefix_len, 0), value=pad) for p in parts])
    attention_mask = torch.cat([F.pad(p.attention_mask, (width - p.prefix_len, 0), value=False) for p in parts])
    columns = {}
    for name in PER_ROW:
        given = [getattr(p, name) is not None for p in parts]
        if any(given) and not all(given):
            raise ValueError(f"concat_rollouts: column {name!r} is set in some parts and not in others")
        columns[name] = torch.cat([getattr(p, name) for p in parts]) if all(given) else None
    return Rollout(prompt_ids=prompt_ids, attention_mask=attention_mask, **columns,
                   prompts=[x for p in parts for x in p.prompts], completions=[x for p in parts for x in p.completions],
                   num_generations=first.num_generations, eos_token_id=first.eos_token_id, temperature=first.temperature)


def _pad_token(parts: Sequence[Rollout]) -> int:
    """The token the parts' prompts are left-padded with (read off a padded position), or else EOS (GPT-2's
    pad): it stands where the attention mask is False, so its value is never read."""
    for part in parts:
        padded = ~part.attention_mask[:, : part.prefix_len]
        if padded.any():
            return int(part.prompt_ids[padded][0])
    eos = parts[0].eos_token_id
    return int(eos[0] if isinstance(eos, tuple) else eos)


def _check_unscored(rollout: Rollout, who: str) -> None:
    filled = [name for name in LATER if getattr(rollout, name) is not None]
    if filled:
        raise ValueError(f"{who}: the rollout has {', '.join(filled)} already; choose groups before compute_log_prob")
