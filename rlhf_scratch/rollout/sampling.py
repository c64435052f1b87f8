"""Sampling one token per row: temperature, top-k, top-p and the draw — and the sampling loop's body
over static buffers, so that on a GPU the draw runs inside the decode step's CUDA graph.

    logits [batch, d_vocab]  →  z / T  →  the k largest  →  the top-p nucleus  →  softmax  →  one draw

The draw, `draw_categorical`, is the exponential race that `torch.multinomial(p, 1)` itself runs
(ATen's Distributions.cpp, its path for one sample):

    token = argmax_i  p_i / E_i,      E_i ~ Exp(1) independent

P(token = i) = p_i: the first of independent exponential clocks with rates p_i to ring is clock i
with probability p_i / Σ p (E_i / p_i ~ Exp(p_i)). Taking logs, −log E_i is a Gumbel variable: it is
the Gumbel-max trick. Written out, the same random numbers in the same order give the same tokens as
`torch.multinomial` (tested draw for draw); what it leaves out is multinomial's sanity check of p (a
minimum, a maximum and a sum per call, which older PyTorch read back to the host: a sync, forbidden
inside a CUDA graph).

`SampledDecode` is the loop of `generation.generate` with nothing read back to the host: the step
counter t, the rows that have ended and the completion are device tensors written in place, so the
whole step — draw, write, feed the decoder — has the same kernels and shapes every time. On CUDA it
is captured once and replayed per token, and a rollout's only read is the completion afterwards.
A row that has ended keeps being fed the pad token and its positions are masked out (as in the
eager loop); the loop does not stop early when every row has ended (that would be a read per step),
so it always runs gen_len steps. On CUDA that path is used only once the `cuda` test that compares
it with the eager loop has passed on a GPU (`GRAPHED_SAMPLING_CHECKED`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from rlhf_scratch.core.objectives import temperature_scaled
from rlhf_scratch.models.static_cache import CUDAGraphStep, StaticCacheDecoder

GRAPHED_SAMPLING_CHECKED = False
"""Whether the draw inside the decode step's CUDA graph (`SampledDecode`) has been run on a GPU and
found to sample the eager loop's tokens. Written and tested uncaptured on CPU only; a path never run
on a GPU is not a default, so until `test_on_cuda_sampling_inside_the_graph_draws_the_eager_tokens`
passes in `benchmarks/gpu_check.sh` a CUDA run samples outside the graph (the decode step alone is
captured)."""


def nucleus(logits: Float[Tensor, "batch vocab"], top_p: float) -> Float[Tensor, "batch vocab"]:
    """Top-p (nucleus) filtering, as `transformers`' `TopPLogitsWarper` (what TRL's generation runs):
    the logits with every token outside the nucleus set to −inf.

        p = softmax(logits);  sort ascending;  c_j = p_(1) + … + p_(j)  (the mass of token j and all below it)
        drop token j  ⇔  c_j ≤ 1 − top_p          (always keeping the most likely token)

    i.e. keep a token iff the tokens MORE likely than it hold less than top_p of the mass: the
    smallest set of most likely tokens whose mass reaches top_p (the token that crosses top_p is in).
    `logits` are the already temperature-scaled (and top-k-restricted) ones, the order transformers
    applies them in: temperature, then top-k, then top-p. At top_p = 1 nothing is dropped.
    """
    if top_p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1)  # ascending
    drop_sorted = sorted_logits.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
    drop_sorted[..., -1] = False  # the most likely token is always kept
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def multinomial_draw(probs: Float[Tensor, "batch n"]) -> Int[Tensor, " batch"]:
    """One index per row with P(i) = probs_i: `torch.multinomial`, which checks probs first."""
    return torch.multinomial(probs, num_samples=1).squeeze(-1)


def draw_categorical(probs: Float[Tensor, "batch n"], generator: torch.Generator | None = None) -> Int[Tensor, " batch"]:
    """One index per row with P(i) = probs_i, by the exponential race (the module docstring):

        token = argmax_i  p_i / E_i,     E_i ~ Exp(1)

    The same random numbers, drawn in the same order, as `torch.multinomial(probs, 1)`: the same
    tokens for the same seed. Nothing is read back to the host, so a CUDA graph can hold it."""
    race = torch.empty_like(probs).exponential_(1, generator=generator)
    return (probs / race).argmax(dim=-1)


def sample_next_token(
    logits: Float[Tensor, "batch d_vocab"], temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
    draw: Callable[[Tensor], Tensor] = multinomial_draw,
) -> Int[Tensor, " batch"]:
    """Draw one token per row from softmax(logits / temperature), restricted to the top-k logits and
    then to the top-p nucleus (`nucleus`), the order `transformers` applies them in.

        top_k > 0:  v_1..v_k = the k largest logits;  p_i = softmax(nucleus(v / T))_i;  token = index of v_i
        top_k = 0:  p = softmax(nucleus(logits / T)) over the whole vocabulary

    Restricting first and drawing among k is the same distribution as masking the other V - k
    logits to -inf and drawing among V, but the draw costs O(k) instead of O(V). At top_p = 1 (the
    default) the nucleus is everything and the draw is the one before top-p existed, random numbers included.
    `draw`: `multinomial_draw` (checks p) or `draw_categorical` (the same tokens, graph-safe).
    """
    if top_k and top_k < logits.shape[-1]:
        top = logits.topk(top_k, dim=-1)
        probs = nucleus(temperature_scaled(top.values, temperature), top_p).softmax(dim=-1)
        return top.indices.gather(-1, draw(probs)[:, None]).squeeze(-1)
    probs = nucleus(temperature_scaled(logits, temperature), top_p).softmax(dim=-1)
    return draw(probs)


class SampledDecode:
    """`generate`'s loop over static buffers (the module docstring): each step draws from `logits`,
    writes the token at column t of the completion, marks the rows that ended and feeds the token to
    the static-cache decoder, whose next-token logits are copied back into `logits`:

        token_t              = pad                              where finished  (else the draw)
        completion_ids[:, t] = token_t,   completion_mask[:, t] = ~finished     (before this token)
        finished            |= token_t ∈ stop_ids               (with stop_at_eos)
        logits               = decoder(token_t)                 (every step but the last)

    On CUDA (`capture`) the step t < gen_len − 1 is one CUDA graph, replayed gen_len − 1 times, and the
    last draw runs uncaptured. Kept with its decoder between rollouts of one shape and one sampling
    setting (`key`); `run` resets every buffer in place."""

    def __init__(self, decoder: StaticCacheDecoder, gen_len: int, temperature: float, top_k: int, top_p: float,
                 stop_at_eos: bool, stop_ids: tuple[int, ...], pad: int, capture: bool):
        batch, device = decoder.prompt_ids.shape[0], decoder.prompt_ids.device
        self.decoder, self.gen_len, self.pad, self.capture = decoder, gen_len, pad, capture
        self.key = SampledDecode.setting(gen_len, temperature, top_k, top_p, stop_at_eos, stop_ids, pad, capture)
        self.sample = lambda logits: sample_next_token(logits, temperature, top_k, top_p, draw=draw_categorical)
        self.stop = torch.tensor(stop_ids, dtype=torch.long, device=device) if stop_at_eos else None
        self.completion_ids: Int[Tensor, "batch gen_len"] = torch.full((batch, gen_len), pad, dtype=torch.long, device=device)
        self.completion_mask: Bool[Tensor, "batch gen_len"] = torch.zeros((batch, gen_len), dtype=torch.bool, device=device)
        self.finished: Bool[Tensor, " batch"] = torch.zeros(batch, dtype=torch.bool, device=device)
        self.t: Int[Tensor, " 1"] = torch.zeros(1, dtype=torch.long, device=device)
        self.logits: Float[Tensor, "batch d_vocab"] | None = None
        self.graph: CUDAGraphStep | None = None

    @staticmethod
    def setting(gen_len: int, temperature: float, top_k: int, top_p: float, stop_at_eos: bool,
                stop_ids: tuple[int, ...], pad: int, capture: bool) -> tuple:
        """What a kept loop must share with a call to be reused for it (`generation.sampled_decode`)."""
        return gen_len, temperature, top_k, top_p, stop_at_eos, stop_ids, pad, capture

    def draw_and_write(self) -> Int[Tensor, " batch"]:
        """Draw step t's token, write it and its mask at column t, mark the rows it ends; t += 1."""
        token = torch.where(self.finished, self.pad, self.sample(self.logits))
        self.completion_ids.index_copy_(1, self.t, token[:, None])
        self.completion_mask.index_copy_(1, self.t, ~self.finished[:, None])
        if self.stop is not None:
            self.finished |= (token[:, None] == self.stop).any(dim=-1)  # not isin: past ~10 ids it sorts and syncs
        self.t += 1
        return token

    def step(self) -> Float[Tensor, "batch d_vocab"]:
        """One whole step t < gen_len − 1: draw, write, feed the decoder; the next logits in `logits`."""
        self.logits.copy_(self.decoder.advance(self.draw_and_write()))
        return self.logits

    def run(self) -> tuple[Int[Tensor, "batch gen_len"], Bool[Tensor, "batch gen_len"]]:
        """The completion of the decoder's current prompts, nothing read back to the host."""
        self.completion_ids.fill_(self.pad)
        self.completion_mask.fill_(False)
        self.finished.fill_(False)
        self.t.zero_()
        logits = self.decoder.prefill()
        if self.logits is None:
            self.logits = torch.empty_like(logits)
        self.logits.copy_(logits)
        for _ in range(self.gen_len - 1):
            if not self.capture:
                self.step()
            elif self.graph is None:  # captured on the first step, the buffers restored after its warm-up
                buffers = (self.completion_ids, self.completion_mask, self.finished, self.t, self.logits,
                           self.decoder.token, self.decoder.column, self.decoder.position)
                self.graph = CUDAGraphStep(self.step, restore=buffers)
                self.graph()
            else:
                self.graph()
        self.draw_and_write()
        return self.completion_ids, self.completion_mask
