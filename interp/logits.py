"""What RLHF changed at the output: logit differences, log-prob changes, KL, the sentiment direction.

Every function takes a `reference` (the untouched original) and/or a `tuned` HookedTransformer
with the same config and tokenizer, or their logits. Units:

- logits and logit differences are in nats of log-odds (logit(a) - logit(b) = log p(a)/p(b));
- log-probs and their changes in nats;
- KL divergences in nats per position.

The *logit difference* of a prompt is mean_{t in pos} logit_t - mean_{t in neg} logit_t at the
prompt's last token: how much more the model wants to say a positive word next than a negative
one. (The blog: " good" vs " bad" is 1.595 on gpt2, -0.185 on an IMDB-tuned gpt2 and 1.718 on
the RLHF model.)

Prompts of different lengths are right-padded into one batch with `prompt_tokens`; `last_pos`
says where each row's last real token is. Causal attention makes right padding exact at the
real positions, so no attention mask is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import HookedTransformer

# One list for GPT-2's tokenizer and the tiny preset's BPE: `sentiment_tokens` keeps the words
# that are a single token in the model's tokenizer.
POSITIVE_WORDS: tuple[str, ...] = (
    " good", " great", " excellent", " best", " wonderful", " amazing", " brilliant", " perfect",
    " beautiful", " fun", " enjoyable", " funny",
)
NEGATIVE_WORDS: tuple[str, ...] = (
    " bad", " worst", " awful", " terrible", " boring", " poor", " horrible", " dull",
    " stupid", " waste", " mess", " worse",
)


@dataclass(frozen=True)
class SentimentTokens:
    """The two token sets a logit difference compares; ids and the words they came from."""

    pos_ids: tuple[int, ...]
    neg_ids: tuple[int, ...]
    pos_words: tuple[str, ...]
    neg_words: tuple[str, ...]


def single_token_ids(model: HookedTransformer, words: tuple[str, ...] | list[str]) -> tuple[list[int], list[str]]:
    """Ids of the `words` that are exactly one token in `model.tokenizer` (others are dropped)."""
    if model.tokenizer is None:
        raise ValueError("the model has no tokenizer; pass token ids to SentimentTokens yourself")
    ids, kept = [], []
    for word in words:
        tokens = model.tokenizer.encode(word, add_special_tokens=False)
        if len(tokens) == 1 and tokens[0] != model.tokenizer.unk_token_id:
            ids.append(int(tokens[0]))
            kept.append(word)
    return ids, kept


def sentiment_tokens(
    model: HookedTransformer,
    pos_words: tuple[str, ...] | list[str] = POSITIVE_WORDS,
    neg_words: tuple[str, ...] | list[str] = NEGATIVE_WORDS,
) -> SentimentTokens:
    """The single-token positive and negative words for this tokenizer; an empty set is an error."""
    pos_ids, pos_kept = single_token_ids(model, pos_words)
    neg_ids, neg_kept = single_token_ids(model, neg_words)
    for name, ids, words in (("positive", pos_ids, pos_words), ("negative", neg_ids, neg_words)):
        if not ids:
            raise ValueError(f"none of the {name} words {list(words)} is a single token in this tokenizer")
    return SentimentTokens(tuple(pos_ids), tuple(neg_ids), tuple(pos_kept), tuple(neg_kept))


def prompt_tokens(model: HookedTransformer, prompts: list[str]) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, " batch"]]:
    """Tokenize `prompts` (with the model's default BOS), right-pad them into one batch.

    Returns (tokens, last_pos): last_pos[b] is the index of row b's last real token.
    """
    rows = [model.to_tokens(p)[0] for p in prompts]
    length = max(len(r) for r in rows)
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0
    tokens = torch.full((len(rows), length), pad, dtype=torch.long, device=rows[0].device)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = row
    last_pos = torch.tensor([len(r) - 1 for r in rows], device=tokens.device)
    return tokens, last_pos


def at_last_pos(
    x: Float[Tensor, "batch pos *rest"], last_pos: Int[Tensor, " batch"] | None = None
) -> Float[Tensor, " batch *rest"]:
    """x[b, last_pos[b]] for each row b (the last position when last_pos is None)."""
    if last_pos is None:
        return x[:, -1]
    return x[torch.arange(x.shape[0], device=x.device), last_pos.to(x.device)]


def logit_diff(
    logits: Float[Tensor, "batch pos d_vocab"],
    tokens: SentimentTokens,
    last_pos: Int[Tensor, " batch"] | None = None,
) -> Float[Tensor, " batch"]:
    """mean_{t in pos} logit_t - mean_{t in neg} logit_t at each prompt's last token (nats of log-odds)."""
    last = at_last_pos(logits, last_pos)
    return last[:, list(tokens.pos_ids)].mean(-1) - last[:, list(tokens.neg_ids)].mean(-1)


def sentiment_direction(model: HookedTransformer, tokens: SentimentTokens) -> Float[Tensor, " d_model"]:
    """mean_{t in pos} W_U[:, t] - mean_{t in neg} W_U[:, t]: the logit difference as a direction.

    It lives in the basis of the final norm's *output*: logit_diff = ln_final(x) . direction
    + (b_U[pos].mean() - b_U[neg].mean()). Each model has its own (RLHF may move the unembedding).
    """
    W_U = model.W_U
    return W_U[:, list(tokens.pos_ids)].mean(-1) - W_U[:, list(tokens.neg_ids)].mean(-1)


def residual_sentiment_direction(model: HookedTransformer, tokens: SentimentTokens) -> Float[Tensor, " d_model"]:
    """The sentiment direction in the *normalized residual* basis: ln_final's weight folded in.

    If y = (x - mean x) / scale is the residual after the cached final-norm scale (what
    `ActivationCache.apply_ln_to_stack` returns; y = x / scale under RMSNorm, which does not
    centre), then logit_diff = y . this + `logit_diff_bias`.
    Equal to `sentiment_direction` when the model was loaded with fold_ln=True.
    """
    direction = sentiment_direction(model, tokens)
    w = getattr(model.ln_final, "w", None)
    return direction * w if w is not None else direction


def logit_diff_bias(model: HookedTransformer, tokens: SentimentTokens) -> Float[Tensor, ""]:
    """The part of the logit difference that no residual component carries (nats).

    ln_final.b . sentiment_direction + mean b_U[pos] - mean b_U[neg]; 0 for a model without biases.
    """
    b_U = model.b_U
    bias = b_U[list(tokens.pos_ids)].mean() - b_U[list(tokens.neg_ids)].mean()
    b = getattr(model.ln_final, "b", None)
    if b is not None:
        bias = bias + b @ sentiment_direction(model, tokens)
    return bias


def direction_cosine(reference: HookedTransformer, tuned: HookedTransformer, tokens: SentimentTokens) -> float:
    """Cosine between the two models' residual sentiment directions (1.0 = RLHF left it alone)."""
    a = residual_sentiment_direction(reference, tokens)
    b = residual_sentiment_direction(tuned, tokens)
    return torch.nn.functional.cosine_similarity(a, b, dim=0).item()


def logprob_change(
    ref_logits: Float[Tensor, "batch pos d_vocab"],
    tuned_logits: Float[Tensor, "batch pos d_vocab"],
    last_pos: Int[Tensor, " batch"] | None = None,
) -> Float[Tensor, "batch d_vocab"]:
    """log p_tuned(t | prompt) - log p_ref(t | prompt) for every token t, at each last position (nats)."""
    return at_last_pos(tuned_logits.log_softmax(-1) - ref_logits.log_softmax(-1), last_pos)


def top_token_changes(
    model: HookedTransformer,
    change: Float[Tensor, "batch d_vocab"],
    k: int = 10,
) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """The k tokens whose log-prob change (mean over the batch) is largest and smallest.

    Returns (promoted, demoted): lists of (token string, mean change in nats), strongest first.
    """
    mean = change.mean(0)
    k = min(k, mean.shape[0])
    up = mean.topk(k)
    down = (-mean).topk(k)
    promoted = [(model.to_single_str_token(int(i)), v.item()) for v, i in zip(up.values, up.indices)]
    demoted = [(model.to_single_str_token(int(i)), -v.item()) for v, i in zip(down.values, down.indices)]
    return promoted, demoted


def next_token_kl(
    ref_logits: Float[Tensor, "batch pos d_vocab"],
    tuned_logits: Float[Tensor, "batch pos d_vocab"],
) -> Float[Tensor, "batch pos"]:
    """KL(p_tuned || p_ref) of the next-token distributions at every position (nats).

    The direction of the PPO penalty: sum_t p_tuned(t) (log p_tuned(t) - log p_ref(t)).
    Positions past a row's last_pos are padding; ignore them.
    """
    tuned_lp = tuned_logits.log_softmax(-1)
    ref_lp = ref_logits.log_softmax(-1)
    return (tuned_lp.exp() * (tuned_lp - ref_lp)).sum(-1)


# --- the reward of a (possibly patched or ablated) model -----------------------------------------
# Coarser than the logit difference: it samples, so it carries sampling noise. Every model in one
# comparison is sampled with the same seed (common random numbers), which removes most of it.

LogitsFn = Callable[[Int[Tensor, "batch pos"]], Float[Tensor, "batch pos d_vocab"]]
RewardFn = Callable[[list[str]], Any]
"""interp's reward contract, the blog's: `reward_fn([prompt + completion, ...])` -> one number per text
(a list, an array or a tensor). A run's task reward (`rlhf_scratch.reward.tasks.make_reward_fn`) is one."""


def draw_next_token(
    logits: Float[Tensor, "batch d_vocab"], temperature: float, top_k: int, generator: torch.Generator
) -> Int[Tensor, " batch"]:
    """One token per row from softmax(logits / temperature), among the `top_k` largest (all when 0),
    drawn on the CPU with `generator`: the one sampling step of every interp sampler."""
    logits = logits.float().cpu() / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0]


@torch.no_grad()
def sample_continuations(
    logits_fn: LogitsFn,
    prompt: Int[Tensor, "1 prompt_pos"],
    n_samples: int = 16,
    gen_len: int = 20,
    seed: int = 0,
    temperature: float = 1.0,
    top_k: int = 10,
) -> Int[Tensor, "n_samples total_pos"]:
    """Sample `gen_len` tokens after `prompt`, `n_samples` times, from `logits_fn` (top-k, temperature).

    No KV cache: every step calls `logits_fn` on the whole sequence, so hooks and hybrid
    models that patch by position see the full sequence each time. Fixed `seed`. (Prompts of
    different lengths, left-padded, with hooks: `interp.sampling.sample`.)
    """
    generator = torch.Generator(device="cpu").manual_seed(seed)
    tokens = prompt.expand(n_samples, -1).clone()
    for _ in range(gen_len):
        next_tok = draw_next_token(logits_fn(tokens)[:, -1], temperature, top_k, generator)
        tokens = torch.cat([tokens, next_tok[:, None].to(tokens.device)], dim=1)
    return tokens


def mean_reward(
    logits_fn: LogitsFn,
    model: HookedTransformer,
    prompt: str,
    reward_fn: RewardFn,
    n_samples: int = 16,
    gen_len: int = 20,
    seed: int = 0,
) -> float:
    """Mean of `reward_fn` over `n_samples` sampled continuations of `prompt` (the reward's units).

    `model` only tokenizes and decodes; `logits_fn` (a model, a hooked model, a hybrid) samples.
    `reward_fn(samples)` gets the decoded prompt + continuation strings (special tokens removed)
    and returns one number per sample, like the trainer's reward functions.
    """
    tokens = sample_continuations(logits_fn, model.to_tokens(prompt), n_samples, gen_len, seed)
    texts = model.tokenizer.batch_decode(tokens, skip_special_tokens=True)
    rewards = torch.as_tensor(reward_fn(texts), dtype=torch.float32)
    return rewards.mean().item()
