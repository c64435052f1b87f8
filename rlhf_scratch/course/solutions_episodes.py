"""Solutions of notebook 11 (multi-turn episodes), written to be read: plain Python and torch.

- `assemble_completions`: an episode's segments, the model's turns and the tool's replies, one after
  another as completion_ids, right-padded to gen_len, and completion_mask True on the model's tokens only
  (the package's: `rollout.episodes.assemble_completions`, which takes `Episode`s).
- `sequence_log_probs`, `grpo_loss`, `masked_kl_mean`: the terms of the loss over a batch that carries
  two masks, as verl's does: `completion_mask` (the model's tokens; verl's response_mask) and
  `attention_mask` (every token of the episode, the tool's too: what the forward reads). Every term reads
  the first (the package's: `core.objectives.sequence_log_probs`, `algorithms.grpo.loss.aggregate_grpo_terms`
  with loss_type "grpo", `core.objectives.masked_mean` of TRL's k3).
- `add_turn`: the model's turn kept as the ids it sampled, the tool's text encoded on its own (the
  package's: `rollout.episodes.take_turn`, whose environment hands back ids).

tests/integration/test_course_episodes.py checks that each equals the package's. Each solution cell of
notebook 11 is a function's source here (notebooks/make_11_multi_turn_episodes.py), so a function body
imports what it needs itself.
"""

from __future__ import annotations


def assemble_completions(episodes, gen_len, pad):
    """The episodes as a rollout's (completion_ids, completion_mask), each [batch, gen_len]: an episode is a
    list of segments (ids, by_model), the model's turns and the environment's replies in order; its ids one
    after another, right-padded with `pad` (a long tensor); the mask True on the model's tokens only,
    False on the environment's and on the padding (a bool tensor). Each episode fits in gen_len.

        segments  ((5, 6, 7), True) · ((8, 9), False) · ((4, 0), True)        gen_len 8, pad 0
        ids       [5, 6, 7, 8, 9, 4, 0, 0]
        mask      [T, T, T, F, F, T, T, F]"""
    import torch

    ids = torch.full((len(episodes), gen_len), pad, dtype=torch.long)
    mask = torch.zeros((len(episodes), gen_len), dtype=torch.bool)
    for row, segments in enumerate(episodes):
        start = 0
        for seg_ids, by_model in segments:
            end = start + len(seg_ids)  # the segment covers positions start .. end - 1
            ids[row, start:end] = torch.tensor(seg_ids, dtype=torch.long)
            mask[row, start:end] = by_model
            start = end
    return ids, mask


def sequence_log_probs(logprobs, completion_mask, attention_mask):
    """log π(o | q) of each episode, [batch]: the sum of the log-probs of the MODEL's tokens,
    Σ_t completion_mask_t · logprobs_t. The tool's reply is context the model read, not tokens it chose:
    attention_mask (True on the tool's tokens too) is what the forward reads, and no term of the loss reads
    it. A position outside the mask may hold -inf (a token the model could not have sampled)."""
    import torch

    return torch.where(completion_mask, logprobs, torch.zeros_like(logprobs)).sum(dim=-1)


def grpo_loss(per_token_loss, completion_mask, attention_mask):
    """GRPO's aggregation (TRL's loss_type "grpo"), a scalar: each episode's per-token loss summed over
    the model's tokens and divided by its own length |o_i| = the number of the MODEL's tokens, then the
    mean over episodes:  (1/B) Σ_i (Σ_t m_it ℓ_it) / Σ_t m_it."""
    per_episode = (per_token_loss * completion_mask).sum(dim=-1) / completion_mask.sum(dim=-1).clamp(min=1)
    return per_episode.mean()


def masked_kl_mean(logprobs, ref_logprobs, completion_mask, attention_mask):
    """The KL to the reference as TRL logs it, a scalar: k3 per token,
    kl_t = exp(ref_t − logprobs_t) − (ref_t − logprobs_t) − 1, averaged over the MODEL's tokens of the whole
    batch, Σ m·kl / Σ m (a token mean, not a mean of the episodes' means)."""
    import torch

    delta = ref_logprobs - logprobs
    per_token_kl = torch.exp(delta) - delta - 1
    kept = torch.where(completion_mask, per_token_kl, torch.zeros_like(per_token_kl))
    return kept.sum() / completion_mask.sum()


def add_turn(segments, turn_ids, observation, tokenizer):
    """The episode's segments after the model's turn and the tool's reply: `segments` (a list of
    (ids, by_model)), then (the turn's ids EXACTLY as sampled, True), then (the reply's text `observation`
    encoded on its own, without special tokens, False) when the reply is not empty. Never decode the model's
    ids and encode them again: the round trip can give other tokens than the ones it sampled."""
    out = list(segments) + [(tuple(turn_ids), True)]
    if observation:
        out.append((tuple(tokenizer.encode(observation, add_special_tokens=False)), False))
    return out
