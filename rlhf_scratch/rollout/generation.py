"""Generation: left-padded prompts in, completions out — the sampling loop written by hand, with a KV cache.

    prompt_ids        [batch, prompt_len]   left-padded, so every prompt ends at the same column
    prompt_mask       [batch, prompt_len]   False on the padding
    completion_ids    [batch, gen_len]      the sampled tokens; after a sample's first EOS (with
                                            stop_at_eos) every token is the pad token
    completion_mask   [batch, gen_len]      True up to and including the first EOS

Why our own loop instead of TransformerLens' `generate`: (1) we need the completion mask and the
left-padding attention mask ourselves anyway; (2) `generate` draws over the whole vocabulary
even with top-k (it masks the rest to -inf and samples from all V logits), while top-k sampling
only needs the k largest logits — `sample_next_token` draws among those k, which is the same
distribution at a fraction of the cost. The loop keeps a KV cache, so each new token costs one
position of forward pass, not the whole sequence.

Left padding and positions: the attention mask hides the pad columns from every query, and
TransformerLens numbers positions from the first attended token (`cumsum(mask) - 1`), so a
padded prompt gets exactly the positions it would get alone (tested to 1e-4 on the tiny LM).

Two KV caches behind one sampling loop. The loop (`generate`) only needs something that turns the
prompt, then each sampled token, into next-token logits — a `Decoder`:

- `StaticCacheDecoder` (rlhf_scratch/models/static_cache.py, the default where it applies): K/V buffers
  [n_layers, batch, n_kv_heads, prompt_len + gen_len, d_head] allocated once; each step writes one
  column and attends over all of them, the not-yet-written and pad columns masked. Every step has
  the same shapes, so on CUDA it is captured once in a CUDA graph and replayed per token. The
  forward is written out in that file (the model's own weights and modules, no hooks).
- `TransformerLensCacheDecoder`: TransformerLens' own forward and cache (which grows by one
  column per step). Used for models the static forward does not cover (ALiBi, local windows, QK
  norms, ...; on CUDA every family beyond GPT-2's set until its written-out forward has run on a
  GPU: see `static_cache.unsupported_reason`) and for models with hooks attached.

No host sync per token: nothing in the loop reads a device tensor back, except the "has every
sample ended?" check under `stop_at_eos` — every step on the CPU (there is no device to wait for,
and the loop stops drawing random numbers where it always has), every `EOS_CHECK_EVERY` steps on
an accelerator. A sample that has ended keeps being fed the pad token, its positions masked out.
The sampling itself (temperature, top-k, top-p, the draw) is `rollout/sampling.py`, which also
holds the same loop over static buffers (`SampledDecode`, `generate(sample_in_graph=...)`): the
draw, the writes and the EOS bookkeeping on the device, nothing read back until the completion,
so that on CUDA the whole step is one graph. It samples the same tokens (tested on the CPU).

Instruct models, as their users prompt them (`--chat-template`, `--prompts`):

- The prompt format lives on the model's tokenizer. When it has a chat template, `prompt_tokens`
  renders each prompt p as one user turn and the assistant's opening — for ChatML (Qwen)
  `<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n` — and tokenizes that text as it
  stands (`add_special_tokens=False`, as transformers' `apply_chat_template(tokenize=True)` and
  TRL do): the template writes a BOS itself when its model was trained with one (Llama 3, Gemma),
  so `prepend_bos` is not applied on top (no double BOS); ChatML has none. Without a template
  (tiny, GPT-2) a prompt is the plain text, BOS first when `prepend_bos`, exactly as before.
  `--chat-template none` removes the template from the run's model (`use_chat_template`), so every
  caller of `tokenize_prompts` — the algorithms' rollouts, `sample`, the preference pairs, the
  over-optimisation study — gives the model one format. The template tokens stay in the ids: the
  texts (`decode_completions`, what the reward and the logs read) are the plain prompt and the
  completion's own tokens.
- The tokens that end a completion are the model's generation config's `eos_token_id` (an int or
  a list, as transformers' `generate` reads it; ChatML: `<|im_end|>`) when its folder has one,
  else the tokenizer's EOS (`eos_token_ids`). Any of them ends a completion.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor
from transformer_lens import HookedTransformer
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

from rlhf_scratch.core.host import read_per_version
from rlhf_scratch.models.static_cache import DecoderCache, StaticCacheDecoder, has_hooks, unsupported_reason
from rlhf_scratch.rollout import sampling
from rlhf_scratch.rollout.rl_dataset import TokenizedPrompt
from rlhf_scratch.rollout.sampling import draw_categorical, nucleus, sample_next_token  # noqa: F401 (their home was here)

ChatTemplate = Literal["auto", "none"]


def use_chat_template(model: HookedTransformer, chat_template: ChatTemplate) -> None:
    """Apply --chat-template to `model` once, where a run sets it up: `auto` keeps its tokenizer's
    chat template (if any), `none` removes it, so that everything that tokenizes prompts for this
    model (`prompt_tokens`) writes plain text."""
    if chat_template not in ("auto", "none"):
        raise ValueError(f"chat_template must be 'auto' or 'none', not {chat_template!r}")
    if chat_template == "none":
        model.tokenizer.chat_template = None


def has_chat_template(model: HookedTransformer) -> bool:
    """Whether prompts are rendered through the tokenizer's chat template (`prompt_tokens`)."""
    return getattr(model.tokenizer, "chat_template", None) is not None


def render_prompt(model: HookedTransformer, prompt: str) -> str:
    """The text the model is given for `prompt`: one user turn and the assistant's opening in its
    chat template, or `prompt` itself when it has none."""
    if not has_chat_template(model):
        return prompt
    return model.tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)


def prompt_tokens(model: HookedTransformer, prompt: str, prepend_bos: bool) -> Int[Tensor, " n"]:
    """The token ids `model` is given for `prompt` (the module docstring, "Instruct models"):

        chat template:  tokens(render_prompt(p))  with no special token added (the template wrote them)
        otherwise:      [BOS if prepend_bos] + tokens(p)
        a TokenizedPrompt (chat messages, or cut to --max-prompt-length: rl_dataset.py): its own ids

    Not truncated here: a prompt too long for the context is refused before sampling (`check_prompt_lengths`)."""
    if isinstance(prompt, TokenizedPrompt):
        return torch.tensor(prompt.ids, dtype=torch.long, device=model.cfg.device)
    if not has_chat_template(model):
        return model.to_tokens(prompt, prepend_bos=prepend_bos, truncate=False)[0]
    ids = model.tokenizer.encode(render_prompt(model, prompt), add_special_tokens=False)
    return torch.tensor(ids, dtype=torch.long, device=model.cfg.device)


def tokenize_prompts(
    model: HookedTransformer, prompts: list[str], prepend_bos: bool
) -> tuple[Int[Tensor, "batch prompt_len"], Bool[Tensor, "batch prompt_len"]]:
    """Token ids of each prompt (`prompt_tokens`: through the chat template when the model has one,
    else BOS first when `prepend_bos`), left-padded to the longest.

    Returns `(prompt_ids, prompt_mask)`; padding columns hold the pad token and mask False.
    """
    rows = [prompt_tokens(model, p, prepend_bos) for p in prompts]
    prompt_len = max(len(r) for r in rows)
    pad = pad_token_id(model)
    prompt_ids = torch.full((len(rows), prompt_len), pad, dtype=torch.long, device=model.cfg.device)
    prompt_mask = torch.zeros((len(rows), prompt_len), dtype=torch.bool, device=model.cfg.device)
    for i, row in enumerate(rows):
        prompt_ids[i, prompt_len - len(row) :] = row
        prompt_mask[i, prompt_len - len(row) :] = True
    return prompt_ids, prompt_mask


def pad_token_id(model: HookedTransformer) -> int:
    tok = model.tokenizer
    return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id


_EOS_IDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> its eos_token_ids, read once


def eos_token_ids(model: HookedTransformer) -> tuple[int, ...]:
    """The tokens that end a completion: the `eos_token_id` of the generation config in the model's
    folder (the tokenizer's `name_or_path`; an int or a list, as transformers' `generate` reads it),
    else the tokenizer's EOS. An instruct model's config names its end-of-turn token (ChatML's
    `<|im_end|>`), often not the tokenizer's EOS; the tiny preset's and GPT-2's name the same token.
    Read once per tokenizer."""
    tok = model.tokenizer
    if tok not in _EOS_IDS:
        configured = generation_config_eos(tok.name_or_path)
        _EOS_IDS[tok] = configured or (tok.eos_token_id,)
    return _EOS_IDS[tok]


def generation_config_eos(name_or_path: str) -> tuple[int, ...]:
    """`eos_token_id` of the generation_config.json in the local folder `name_or_path`, as a tuple
    (empty without a folder, a file, or the field). A Hub name is not looked up: GPT-2's names the
    tokenizer's EOS anyway, and a run never waits on the network for it."""
    folder = Path(str(name_or_path)).expanduser()
    if not (folder / "generation_config.json").is_file():
        return ()
    from transformers import GenerationConfig

    eos = GenerationConfig.from_pretrained(str(folder)).eos_token_id
    if eos is None:
        return ()
    return tuple(int(i) for i in (eos if isinstance(eos, (list, tuple)) else [eos]))


def is_eos(ids: Int[Tensor, "..."], eos: tuple[int, ...] | int) -> Bool[Tensor, "..."]:
    """Where `ids` hold any of the EOS ids `eos`."""
    return torch.isin(ids, torch.as_tensor(eos, dtype=ids.dtype, device=ids.device))


def attention_mask_or_none(mask: Bool[Tensor, "batch seq"], of: Bool[Tensor, "whole seq"] | None = None
                           ) -> Int[Tensor, "batch seq"] | None:
    """The mask TransformerLens wants, or None when nothing is padded (its faster, identical path).

    `of`: the whole mask `mask`'s rows were cut from (the rollout's). Where the whole has no padding
    neither has any part of it, and that is read from the device once per whole (`core.host.read_per_version`),
    not once per chunk or minibatch; only a whole with padding has each part asked."""
    if read_per_version(mask if of is None else of, "unpadded", lambda m: bool(m.all())):
        return None
    return None if of is not None and bool(mask.all()) else mask.long()


@runtime_checkable
class Decoder(Protocol):
    """What the sampling loop calls: the prompt's next-token logits, then one step per sampled token."""

    def prefill(self) -> Float[Tensor, "batch d_vocab"]:
        """Run the left-padded prompt, fill the cache, return the logits after its last column."""
        ...

    def step(self, token: Int[Tensor, " batch"]) -> Float[Tensor, "batch d_vocab"]:
        """Append one token per row to the cache, return the logits after it."""
        ...


class TransformerLensCacheDecoder:
    """TransformerLens' own forward and KV cache (the cache grows by one column per step)."""

    def __init__(self, model: HookedTransformer, prompt_ids: Int[Tensor, "batch prompt_len"],
                 prompt_mask: Bool[Tensor, "batch prompt_len"]):
        self.model, self.prompt_ids, self.prompt_mask = model, prompt_ids, prompt_mask
        self.cache = TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, prompt_ids.shape[0])
        self.step_mask = torch.ones((prompt_ids.shape[0], 1), dtype=torch.long, device=prompt_ids.device)

    def prefill(self) -> Float[Tensor, "batch d_vocab"]:
        # The cache needs the mask even without padding: it appends each step's mask to it.
        return self.model(self.prompt_ids, attention_mask=self.prompt_mask.long(), past_kv_cache=self.cache)[:, -1]

    def step(self, token: Int[Tensor, " batch"]) -> Float[Tensor, "batch d_vocab"]:
        return self.model(token[:, None], attention_mask=self.step_mask, past_kv_cache=self.cache)[:, -1]


KVCache = Literal["auto", "static", "transformer_lens"]
EOS_CHECK_EVERY = 8
"""Steps between "has every sample ended?" checks on an accelerator (each check waits for the device)."""


def make_decoder(
    model: HookedTransformer,
    prompt_ids: Int[Tensor, "batch prompt_len"],
    prompt_mask: Bool[Tensor, "batch prompt_len"],
    gen_len: int,
    kv_cache: KVCache = "auto",
    cuda_graph: bool = True,
    decoders: DecoderCache | None = None,
) -> Decoder:
    """The static-cache decoder when `kv_cache` is "static", or "auto" and the model is one it runs
    exactly with no hooks attached; else TransformerLens' own. Asking for "static" where it cannot
    run is an error that says why."""
    if kv_cache not in ("auto", "static", "transformer_lens"):
        raise ValueError(f"kv_cache must be 'auto', 'static' or 'transformer_lens', not {kv_cache!r}")
    reason = unsupported_reason(model) or ("the model has hooks attached" if has_hooks(model) else None)
    if kv_cache == "static" and reason:
        raise ValueError(f"kv_cache='static' cannot run this model: {reason}; use kv_cache='auto'")
    if kv_cache == "transformer_lens" or reason:
        return TransformerLensCacheDecoder(model, prompt_ids, prompt_mask)
    if decoders is not None:  # a trainer's: the last call's buffers and CUDA graph, reused where the shape allows
        return decoders.get(model, prompt_ids, prompt_mask, gen_len, cuda_graph)
    return StaticCacheDecoder(model, prompt_ids, prompt_mask, gen_len, cuda_graph)


@torch.inference_mode()
def generate(
    model: HookedTransformer,
    prompt_ids: Int[Tensor, "batch prompt_len"],
    prompt_mask: Bool[Tensor, "batch prompt_len"],
    gen_len: int,
    temperature: float = 1.0,
    top_k: int = 0,
    stop_at_eos: bool = False,
    kv_cache: KVCache = "auto",
    cuda_graph: bool = True,
    top_p: float = 1.0,
    decoders: DecoderCache | None = None,
    stop_ids: tuple[int, ...] | None = None,
    sample_in_graph: bool | None = None,
) -> tuple[Int[Tensor, "batch gen_len"], Bool[Tensor, "batch gen_len"]]:
    """Sample `gen_len` tokens after each (left-padded) prompt, with a KV cache.

    Step 0 runs the whole prompt and fills the cache; each later step feeds only the token just
    sampled. With `stop_at_eos`, a sample that has produced EOS (any of `eos_token_ids`) keeps
    being fed the pad token (so the batch stays rectangular) and its later positions are masked
    out; generation ends early once every sample has stopped. Returns `(completion_ids, completion_mask)`, cloned out
    of inference mode so they can enter an autograd forward pass later.

    `kv_cache` picks the decoder (`make_decoder`): "auto" (the static cache where it applies),
    "static" or "transformer_lens". Both draw the same random numbers in the same order and their
    logits agree to < 1e-5, so on the CPU one seed gives the same tokens either way (tested).
    `cuda_graph=False` runs the static decoder's step uncaptured on CUDA (as it runs on the CPU).
    `decoders` (a trainer's `static_cache.DecoderCache`) keeps the static decoder between calls of
    one shape: its cache and captured graph are reused, its weights laid out again each call.
    `top_k` and `top_p` restrict each draw (`sample_next_token`); the log-probs of the tokens are
    computed afterwards over the whole softmax, as TRL computes them (docs/fidelity.md, "Top-k").
    `stop_ids` replaces the tokens a row stops at (default: `eos_token_ids`): a multi-turn episode stops
    at EOS or at its environment's stop token (`episodes.generate_episodes`).
    `sample_in_graph`: run the loop over static buffers with the draw inside the step
    (`sampling.SampledDecode`: the same tokens, nothing read back per step, captured whole on CUDA;
    it always runs gen_len steps). None (the default): on CUDA with the graph once that path has been
    checked on a GPU (`sampling.GRAPHED_SAMPLING_CHECKED`); True: with the static decoder anywhere
    (uncaptured off CUDA); False: never.
    """
    batch, device = prompt_ids.shape[0], prompt_ids.device
    eos, pad = eos_token_ids(model) if stop_ids is None else stop_ids, pad_token_id(model)
    decoder = make_decoder(model, prompt_ids, prompt_mask, gen_len, kv_cache, cuda_graph, decoders)
    if isinstance(decoder, StaticCacheDecoder) and samples_in_graph(decoder, sample_in_graph):
        completion_ids, completion_mask = sampled_decode(
            decoder, gen_len, temperature, top_k, top_p, stop_at_eos, tuple(eos), pad).run()
        return completion_ids.clone(), completion_mask.clone()
    completion_ids = torch.full((batch, gen_len), pad, dtype=torch.long, device=device)
    completion_mask = torch.zeros((batch, gen_len), dtype=torch.bool, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    check_every = 1 if device.type == "cpu" else EOS_CHECK_EVERY

    logits = decoder.prefill()
    for t in range(gen_len):
        token = sample_next_token(logits, temperature, top_k, top_p)
        token = torch.where(finished, pad, token)
        completion_ids[:, t] = token
        completion_mask[:, t] = ~finished
        if stop_at_eos:
            finished |= is_eos(token, eos)
            if (t + 1) % check_every == 0 and bool(finished.all()):  # the loop's only host sync
                break
        if t + 1 < gen_len:
            logits = decoder.step(token)
    return completion_ids.clone(), completion_mask.clone()


def samples_in_graph(decoder: StaticCacheDecoder, asked: bool | None) -> bool:
    """Whether `generate` runs `sampling.SampledDecode` (see its `sample_in_graph`)."""
    if asked is None:
        return decoder.use_graph and sampling.GRAPHED_SAMPLING_CHECKED
    return asked


def sampled_decode(decoder: StaticCacheDecoder, gen_len: int, temperature: float, top_k: int, top_p: float,
                   stop_at_eos: bool, stop_ids: tuple[int, ...], pad: int) -> sampling.SampledDecode:
    """The decoder's `SampledDecode` for this setting: the one kept with it (its buffers and captured
    graph) when the setting is the same, else a new one, kept."""
    kept = decoder.sampling
    key = sampling.SampledDecode.setting(gen_len, temperature, top_k, top_p, stop_at_eos, stop_ids, pad, decoder.use_graph)
    if kept is None or kept.key != key:
        kept = decoder.sampling = sampling.SampledDecode(
            decoder, gen_len, temperature, top_k, top_p, stop_at_eos, stop_ids, pad, capture=decoder.use_graph)
    return kept


def decode_completions(
    model: HookedTransformer,
    completion_ids: Int[Tensor, "batch gen_len"],
    completion_mask: Bool[Tensor, "batch gen_len"],
    stop_at_eos: bool = False,
) -> list[str]:
    """The text of each completion's kept tokens. With `stop_at_eos` the EOS that ended it (any of
    `eos_token_ids`) is not part of the text (the reward reads the review, not the end marker);
    without, EOS tokens stay in the text as `<|endoftext|>`, as in the blog's samples. Only the
    generated tokens are decoded: a chat template's tokens, in the prompt, are never in the text."""
    keep = completion_mask & ~is_eos(completion_ids, eos_token_ids(model)) if stop_at_eos else completion_mask
    return [model.tokenizer.decode(row) for row in kept_token_ids(completion_ids, keep)]


def kept_token_ids(ids: Int[Tensor, "batch len"], keep: Bool[Tensor, "batch len"]) -> list[list[int]]:
    """Each row's ids where `keep` holds, as Python lists, from ONE read of the device:

        ids [[5, 7, 9], [4, 0, 0]],  keep [[1, 1, 0], [1, 0, 0]]  ->  [[5, 7], [4]]

    The dropped positions become −1 (no token id is negative) in one tensor brought over whole; a GPU
    index and copy per row would wait on the device once a row (docs/speed.md, "Host reads")."""
    rows = torch.where(keep.bool(), ids, -1).tolist()
    return [[token for token in row if token >= 0] for row in rows]


def get_samples(
    base_model: HookedTransformer,
    prompt: str | list[str],
    batch_size: int,
    gen_len: int,
    temperature: float,
    top_k: int,
    prepend_bos: bool,
    stop_at_eos: bool = False,
) -> tuple[Int[Tensor, "batch seq_len"], list[str]]:
    """The blog's rollout: `batch_size` samples continuing `prompt`, as (ids, texts).

    `prompt` is one string (repeated batch_size times, as in the blog) or a list of batch_size
    prompts (left-padded). seq_len = prompt_len + gen_len; the generated span is
    `[:, prompt_len:]`. Each text is the prompt followed by its completion (without BOS or
    padding), cut after EOS when `stop_at_eos`. `top_k=0` samples from the whole vocabulary.
    """
    prompts = [prompt] * batch_size if isinstance(prompt, str) else list(prompt)
    if len(prompts) != batch_size:
        raise ValueError(f"get_samples: {len(prompts)} prompts for batch_size {batch_size}")
    prompt_ids, prompt_mask = tokenize_prompts(base_model, prompts, prepend_bos)
    completion_ids, completion_mask = generate(
        base_model, prompt_ids, prompt_mask, gen_len, temperature, top_k, stop_at_eos
    )
    texts = [p + c for p, c in zip(prompts, decode_completions(base_model, completion_ids, completion_mask, stop_at_eos))]
    return torch.cat([prompt_ids, completion_ids], dim=1), texts
