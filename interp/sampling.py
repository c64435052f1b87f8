"""Samples from a model with hooks attached, and what they score: the sampler of the feature diff
and of the steering / ablation checks.

Prompts of different lengths are tokenized and LEFT-padded into one batch (the attention mask
hides the padding), then every step runs the whole sequence, with no KV cache, so a hook at any
site sees every position each step (the loop of `interp.logits.sample_continuations`, batched over
prompts; both draw with `interp.logits.draw_next_token`). It reads a HookedTransformer only: the
training code's KV-cached sampler is not needed here.

Rewards follow the blog's contract (`interp.logits.RewardFn`): `reward_fn([prompt + completion, ...])`
returns one number per sample, as the report's reward does. The sampled KL of a model to the
reference is Σ_t log p_model(o_t) − log p_ref(o_t) over each sample's completion tokens (nats per sample).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor
from transformer_lens import HookedTransformer

from interp.logits import RewardFn, draw_next_token


@dataclass
class SampleSettings:
    """How the feature pages sample: the run's own settings by default (`from_args`)."""

    n_samples: int = 64
    gen_len: int = 20
    temperature: float = 1.0
    top_k: int = 0
    prepend_bos: bool = True
    stop_at_eos: bool = False
    seed: int = 0

    @classmethod
    def from_args(cls, args, n_samples: int, seed: int = 0) -> SampleSettings:
        """A run's sampling: `args` is any object with gen_len, temperature, top_k, prepend_bos and
        eos_stops() (a run's config, `rlhf_scratch.engine.runs.load_run(...).args`)."""
        return cls(n_samples, args.gen_len, args.temperature, args.top_k, args.prepend_bos, args.eos_stops(), seed)

    def for_diff(self, n_diff: int) -> SampleSettings:
        """The same sampling with `n_diff` samples per model and the next seed: the diff's sequences
        are not the causal checks' samples."""
        return replace(self, n_samples=n_diff, seed=self.seed + 1)


class Samples(NamedTuple):
    """`sample`'s result: each sample's prompt, the left-padded prompt ids and the completions."""

    prompts: list[str]
    prompt_ids: Int[Tensor, "batch prompt_len"]
    prompt_mask: Bool[Tensor, "batch prompt_len"]
    """False on the left padding."""
    completion_ids: Int[Tensor, "batch gen_len"]
    completion_mask: Bool[Tensor, "batch gen_len"]
    """False after a sample's EOS (with stop_at_eos): those tokens are padding, not text."""


def pad_token_id(model: HookedTransformer) -> int:
    tok = model.tokenizer
    return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id


def left_padded(model: HookedTransformer, prompts: list[str], prepend_bos: bool = True
                ) -> tuple[Int[Tensor, "batch prompt_len"], Bool[Tensor, "batch prompt_len"]]:
    """Each prompt's token ids (BOS first when `prepend_bos`), left-padded to the longest, and the mask
    of real tokens: every row ends at the last column, where the next token is drawn."""
    rows = [model.to_tokens(p, prepend_bos=prepend_bos)[0] for p in prompts]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_token_id(model), dtype=torch.long, device=model.cfg.device)
    mask = torch.zeros((len(rows), width), dtype=torch.bool, device=model.cfg.device)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = row
        mask[i, width - len(row):] = True
    return ids, mask


def _masked(attend: Bool[Tensor, "batch pos"]) -> dict:
    """The attention_mask keyword TransformerLens needs for left padding, or none when nothing is padded."""
    return {} if bool(attend.all()) else {"attention_mask": attend.long()}


@torch.no_grad()
def sample(model: HookedTransformer, prompts: list[str], s: SampleSettings, fwd_hooks: Sequence = ()) -> Samples:
    """`s.n_samples` completions of `prompts` (cycled) of `s.gen_len` tokens, with `fwd_hooks` in place,
    drawn with a generator seeded by `s.seed` (one seed, the same draws for every model compared).
    With `s.stop_at_eos` a finished sample is fed padding and its later tokens are masked out."""
    used = [prompts[i % len(prompts)] for i in range(s.n_samples)]
    prompt_ids, prompt_mask = left_padded(model, used, s.prepend_bos)
    n, device = len(used), prompt_ids.device
    eos, pad = model.tokenizer.eos_token_id, pad_token_id(model)
    ids = torch.full((n, s.gen_len), pad, dtype=torch.long, device=device)
    mask = torch.zeros((n, s.gen_len), dtype=torch.bool, device=device)
    finished = torch.zeros(n, dtype=torch.bool, device=device)
    generator = torch.Generator(device="cpu").manual_seed(s.seed)
    seq, attend = prompt_ids, prompt_mask
    with model.hooks(fwd_hooks=list(fwd_hooks)):
        for t in range(s.gen_len):
            token = draw_next_token(model(seq, **_masked(attend))[:, -1], s.temperature, s.top_k, generator).to(device)
            token = torch.where(finished, pad, token)
            ids[:, t], mask[:, t] = token, ~finished
            if s.stop_at_eos:
                finished |= token == eos
                if bool(finished.all()):
                    break
            seq = torch.cat([seq, token[:, None]], 1)
            attend = torch.cat([attend, torch.ones_like(attend[:, :1])], 1)
    return Samples(used, prompt_ids, prompt_mask, ids, mask)


def completion_texts(model: HookedTransformer, samples: Samples, stop_at_eos: bool = False) -> list[str]:
    """Each completion's kept tokens as text; with `stop_at_eos` without the EOS that ended it."""
    ids, kept = samples.completion_ids, samples.completion_mask
    if stop_at_eos:
        kept = kept & (ids != model.tokenizer.eos_token_id)
    return [model.tokenizer.decode(row[k].tolist()) for row, k in zip(ids, kept)]


@torch.no_grad()
def completion_logprobs(model: HookedTransformer, prompt_ids: Int[Tensor, "batch prompt_len"],
                        prompt_mask: Bool[Tensor, "batch prompt_len"], ids: Int[Tensor, "batch gen_len"],
                        mask: Bool[Tensor, "batch gen_len"], fwd_hooks: Sequence = ()) -> Float[Tensor, " batch"]:
    """Σ_t log p(completion token t) under `model` (with `fwd_hooks`), over the kept tokens."""
    seq = torch.cat([prompt_ids, ids], 1)
    attend = torch.cat([prompt_mask, torch.ones_like(mask)], 1)
    with model.hooks(fwd_hooks=list(fwd_hooks)):
        logits = model(seq, **_masked(attend))
    P = prompt_ids.shape[1]
    logp = logits[:, P - 1 : -1].log_softmax(-1).gather(-1, ids[..., None])[..., 0]
    return (logp * mask).sum(1)


def rewards_of(reward_fn: RewardFn, texts: list[str]) -> Float[Tensor, " batch"]:
    """`reward_fn(texts)` as a float32 CPU tensor, or one line saying what was wrong with it."""
    rewards = torch.as_tensor(reward_fn(texts), dtype=torch.float32).detach().cpu()
    if rewards.shape != (len(texts),):
        raise ValueError(f"reward function returned shape {tuple(rewards.shape)} for {len(texts)} samples")
    if not bool(rewards.isfinite().all()):
        raise ValueError(f"reward function returned {rewards[~rewards.isfinite()][0].item()} for a sample")
    return rewards


def sampled_reward_and_kl(model: HookedTransformer, reference: HookedTransformer, prompts: list[str],
                          reward_fn: RewardFn, s: SampleSettings, fwd_hooks: Sequence = ()) -> tuple[float, float, float]:
    """(mean reward, its standard error, mean sampled KL(model+hooks ‖ reference) in nats per sample)
    of samples from `model` with `fwd_hooks`; the reward reads prompt + completion."""
    out = sample(model, prompts, s, fwd_hooks)
    texts = [p + c for p, c in zip(out.prompts, completion_texts(model, out, s.stop_at_eos))]
    rewards = rewards_of(reward_fn, texts)
    kl = (completion_logprobs(model, out.prompt_ids, out.prompt_mask, out.completion_ids, out.completion_mask, fwd_hooks)
          - completion_logprobs(reference, out.prompt_ids, out.prompt_mask, out.completion_ids, out.completion_mask))
    se = rewards.std().item() / math.sqrt(len(rewards)) if len(rewards) > 1 else float("nan")
    return rewards.mean().item(), se, kl.mean().item()
