"""The discovery exercise's planted pairs: a base model, and a copy in which a short REINFORCE run changed
ONE attention head. Which one is the question (exercises 05, `check_changed_head_scores`); this module
knows it, so do not read on until your check passes.

    base       a random 3-layer LayerNorm transformer (d_model 16, 4 heads of 4, a 12-token vocabulary)
               whose heads have different sizes (each head's W_V and W_O scaled by e^{0.6 z}, z ~ N(0, 1)),
               as a trained model's heads differ
    the run    REINFORCE on the next token after 16 prompts: reward +1 for a "positive" token (2, 3), −1
               for the "negative" one (7), 0 otherwise; 32 samples a prompt, the batch-mean baseline, Adam
               (lr `LR`, `STEPS` steps), the gradient kept on one head's W_Q, W_K, W_V, W_O only
    the decoy  another head re-expressed in a rotated basis of its d_head space: W_Q R, W_K R, W_V R,
               Rᵀ W_O (R orthogonal). q·k, and z @ W_O, are unchanged: the model computes the same
               function, to float rounding, but that head's weights (and its hook_z) moved more than the
               trained head's did. A weight diff alone names it.

Everything is seeded; building a pair takes about 0.2 s (`mystery` caches it per process).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import lru_cache

import torch
from jaxtyping import Int
from torch import Tensor
from transformer_lens import HookedTransformer, HookedTransformerConfig

POS, NEG = (2, 3), (7,)
"""The tokens the run rewards (+1) and punishes (−1)."""
LR, STEPS, SAMPLES, PROMPTS = 1e-2, 20, 32, 16
"""The run: Adam's learning rate, its steps, samples per prompt per step, prompts."""
Head = tuple[int, int]


@dataclass(frozen=True)
class Mystery:
    """A base model, the same after the run, the prompts and the metric the run moved."""

    reference: HookedTransformer
    tuned: HookedTransformer
    tokens: Int[Tensor, "prompt pos"]

    @staticmethod
    def metric(logits: Tensor) -> Tensor:
        """The mean logit difference at the last position: mean of the positive tokens' logits − the negative's (nats)."""
        last = logits[:, -1]
        return (last[:, list(POS)].mean(-1) - last[:, list(NEG)].mean(-1)).mean()


@dataclass(frozen=True)
class Plant:
    """Where a pair's answer was planted (the check's side)."""

    seed: int
    trained: Head
    decoy: Head


PLANTS = (Plant(seed=3, trained=(1, 2), decoy=(0, 3)), Plant(seed=11, trained=(2, 1), decoy=(1, 0)))
"""Mystery A (the notebook's) and mystery B (the check's second pair: the method, not the answer, passes)."""


def base_model(seed: int) -> HookedTransformer:
    """The base model: random, its heads' W_V and W_O scaled by e^{0.6 z} (one z per head, seeded)."""
    cfg = HookedTransformerConfig(n_layers=3, d_model=16, n_heads=4, d_head=4, d_mlp=32, n_ctx=8, d_vocab=12,
                                  act_fn="gelu", normalization_type="LN", seed=seed)
    model = HookedTransformer(cfg)
    model.eval()
    size = torch.exp(0.6 * torch.randn(cfg.n_layers, cfg.n_heads, generator=torch.Generator().manual_seed(seed)))
    with torch.no_grad():
        for layer, block in enumerate(model.blocks):
            block.attn.W_V.mul_(size[layer, :, None, None])
            block.attn.W_O.mul_(size[layer, :, None, None])
    return model


def reinforce_one_head(model: HookedTransformer, head: Head, tokens: Tensor, seed: int) -> HookedTransformer:
    """A copy of `model` after `STEPS` REINFORCE steps on the next token, the gradient kept on `head` alone:
    J = mean_{prompt, sample} (r(a) − r̄_prompt) log π(a | prompt), a ~ π (`SAMPLES` a prompt)."""
    tuned = copy.deepcopy(model)
    attn = tuned.blocks[head[0]].attn
    params = [attn.W_Q, attn.W_K, attn.W_V, attn.W_O]
    tuned.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    keep = torch.zeros(model.cfg.n_heads, 1, 1)
    keep[head[1]] = 1.0  # each W is [n_heads, ., .]: the other heads' gradient is zeroed
    reward = torch.zeros(model.cfg.d_vocab)
    reward[list(POS)], reward[list(NEG)] = 1.0, -1.0
    optimizer = torch.optim.Adam(params, lr=LR)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(STEPS):
        logp = tuned(tokens)[:, -1].log_softmax(-1)  # [prompt, vocab]
        actions = torch.multinomial(logp.exp().detach(), SAMPLES, replacement=True, generator=generator)
        r = reward[actions]
        advantage = r - r.mean(1, keepdim=True)
        loss = -(advantage * logp.gather(1, actions)).mean()
        optimizer.zero_grad()
        loss.backward()
        for p in params:
            p.grad.mul_(keep)
        optimizer.step()
    tuned.requires_grad_(False)
    return tuned


@torch.no_grad()
def rotate_head(model: HookedTransformer, head: Head, seed: int) -> None:
    """Re-express `head` in a random orthogonal basis R of its d_head space, in place: W_Q R, W_K R, W_V R,
    Rᵀ W_O (and b_Q, b_K, b_V times R). q·k and z @ W_O are unchanged, so is the model's function."""
    layer, h = head
    attn = model.blocks[layer].attn
    R, _ = torch.linalg.qr(torch.randn(model.cfg.d_head, model.cfg.d_head, generator=torch.Generator().manual_seed(seed)))
    for w in (attn.W_Q, attn.W_K, attn.W_V):
        w[h] = w[h] @ R
    for b in (attn.b_Q, attn.b_K, attn.b_V):
        b[h] = b[h] @ R
    attn.W_O[h] = R.T @ attn.W_O[h]


def build(plant: Plant) -> Mystery:
    """The pair of `plant`: the base model, the run on its trained head, the decoy rotated (torch's global
    RNG is left as it was)."""
    with torch.random.fork_rng():
        reference = base_model(plant.seed)
        tokens = torch.randint(1, reference.cfg.d_vocab, (PROMPTS, 6), generator=torch.Generator().manual_seed(plant.seed + 1))
        tuned = reinforce_one_head(reference, plant.trained, tokens, plant.seed + 2)
        rotate_head(tuned, plant.decoy, plant.seed + 3)
    return Mystery(reference, tuned, tokens)


@lru_cache(maxsize=2)
def mystery(which: str = "A") -> Mystery:
    """Mystery A (the notebook's pair) or B (the check's second pair), built once per process."""
    return build(PLANTS["AB".index(which)])
