"""LoRA from scratch on a HookedTransformer: low-rank adapters on TransformerLens' einsum weights, and
the reference model as the same model with its adapters off.

LoRA (Hu et al. 2021) freezes a pretrained weight W and trains a low-rank change to it:

    W' = W + ΔW,     ΔW = (α/r) · B · A,     A ∈ R^{r × d_in},  B ∈ R^{d_out × r}

(peft's names and shapes, for y = W x). B starts at 0, so at step 0 the model IS the pretrained one;
A starts as nn.Linear's weights do (Kaiming-uniform), so that B's first gradient, (α/r) · ∂L/∂ΔW · Aᵀ,
is not zero. r ≪ d_in, d_out: r (d_in + d_out) trained numbers instead of d_in · d_out.

Why not peft: peft wraps `nn.Linear` modules, and a HookedTransformer has none — its attention is
einsums over W_Q [n_heads, d_model, d_head] and its MLP products over bare W_in [d_model, d_mlp].
So the change is applied to the weights themselves, with `torch.nn.utils.parametrize`: reading
`block.attn.W_Q` returns W + ΔW, computed from the frozen W and the factors. Every einsum, hook
and hook name of the HookedTransformer is untouched, so the interp tools (logit lens, head DLA,
weight change, patching, SAEs) read a LoRA policy exactly as they read a fully tuned one.

The layout: one factor pair per weight matrix, not one per head. TransformerLens keeps x @ W
([d_in, d_out]) and splits attention by head; each weight is seen as the matrix GPT-2 itself keeps:

    W_Q, W_K, W_V  [n_heads, d_model, d_head]   as  d_model × (n_heads·d_head)   (GPT-2's c_attn, per q/k/v)
    W_O            [n_heads, d_head, d_model]   as  (n_heads·d_head) × d_model   (GPT-2's attn c_proj)
    W_in, W_out    [d_model, d_mlp], [d_mlp, d_model]                            (GPT-2's c_fc, mlp c_proj)

and ΔW is added in TransformerLens' layout: the transpose of B·A, reshaped (`to_weight_layout`).
Why this choice: it is the LoRA of the literature on GPT-2 (peft on c_attn / c_proj adapts
exactly these matrices), so a rank here means what it means there, and merging is the plain
matrix identity. What it means for the rank: r bounds the rank of the whole layer's ΔW, and so
of each head's slice of it; the heads' updates share one r-dimensional subspace — for W_Q, W_K,
W_V the r directions of the residual stream they change how they read (the rows of A), for W_O
the r directions they change what they write (the columns of B). Per-head factors (A_h, B_h for
each head) would give every head its own subspace, with n_heads · r · (d_model + d_head)
parameters instead of r · (d_model + n_heads · d_head), a total rank up to n_heads · r, and a rank
no longer comparable with peft's.

The reference for free: `adapters_off(model)` switches every ΔW off (each parametrization returns
W unchanged), so inside it the policy computes exactly as the base model — bit for bit, since
W + ΔW is never formed. RLHF's reference IS the base model, so a LoRA run keeps no second copy:
the trainer's reference is the policy's own LM and every reference forward runs under
`adapters_off` (`models.policy.reference_of`); on a frozen copy `adapters_off` changes nothing.

What a LoRA run saves (`policy_state_dict`): the trainable tensors only — the adapters, and a policy's
extras (PPO's critic) — with the sha256 of the base's weights, checked when they are loaded back on the base.
`merge_lora` bakes ΔW into the weights (for export: a plain GPT-2 again).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import einops
import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.nn.utils import parametrize
from transformer_lens import HookedTransformer

from rlhf_scratch.config import LORA_TARGETS, ConfigError

LAYOUTS = {
    "W_Q": "n d h -> d (n h)",
    "W_K": "n d h -> d (n h)",
    "W_V": "n d h -> d (n h)",
    "W_O": "n h d -> (n h) d",
    "W_in": "d m -> d m",
    "W_out": "m d -> m d",
}
"""How each TransformerLens weight is seen as a d_in × d_out matrix (einops: weight -> matrix)."""
assert tuple(LAYOUTS) == LORA_TARGETS, "config.LORA_TARGETS names the weights LAYOUTS lays out"


@dataclass(frozen=True)
class LoRAConfig:
    """What `add_lora` did to a model: set on it as `model.lora_config`."""

    rank: int
    alpha: float
    targets: tuple[str, ...]
    base_sha256: str
    """sha256 of the base weights the adapters were added to (`base_sha256`)."""


def lora_delta(A: Float[Tensor, "rank d_in"], B: Float[Tensor, "d_out rank"], scale: float) -> Float[Tensor, "d_in d_out"]:
    """ΔW = scale · B · A with scale = α/r, returned transposed: [d_in, d_out], TransformerLens' x @ W layout."""
    return scale * (B @ A).T


def to_matrix(weight: Float[Tensor, "*weight"], target: str) -> Float[Tensor, "d_in d_out"]:
    """A TransformerLens weight as the d_in × d_out matrix LoRA factors (`LAYOUTS`); W_Q [n, d_model, d_head] → [d_model, n·d_head]."""
    return einops.rearrange(weight, LAYOUTS[target])


def to_weight_layout(matrix: Float[Tensor, "d_in d_out"], target: str, shape: Sequence[int]) -> Float[Tensor, "*weight"]:
    """The inverse of `to_matrix`: [d_model, n·d_head] → W_Q's [n, d_model, d_head] (n read from `shape`)."""
    source, result = LAYOUTS[target].split(" -> ")
    sizes = {"n": shape[0]} if "n" in source else {}
    return einops.rearrange(matrix, f"{result} -> {source}", **sizes)


class LoRA(nn.Module):
    """The parametrization W ↦ W + ΔW of one weight (registered with `torch.nn.utils.parametrize`, so
    reading the weight calls `forward` on the frozen original):

        W' = W + to_weight_layout((α/r) · (B A)ᵀ)          A [r, d_in] Kaiming-uniform,  B [d_out, r] = 0

    `enabled = False` (`adapters_off`) returns W itself: the base model, bit for bit."""

    def __init__(self, target: str, shape: Sequence[int], rank: int, alpha: float,
                 generator: torch.Generator | None = None):
        super().__init__()
        d_in, d_out = to_matrix(torch.empty(shape, device="meta"), target).shape
        self.target, self.shape, self.scale, self.enabled = target, tuple(shape), alpha / rank, True
        A = torch.empty(rank, d_in)
        nn.init.kaiming_uniform_(A, a=math.sqrt(5), generator=generator)  # nn.Linear's init, as peft's A
        self.A = nn.Parameter(A)
        self.B = nn.Parameter(torch.zeros(d_out, rank))

    def forward(self, W: Float[Tensor, "*weight"]) -> Float[Tensor, "*weight"]:
        if not self.enabled:
            return W
        return W + to_weight_layout(lora_delta(self.A, self.B, self.scale), self.target, self.shape)


def _adapted_module(block: nn.Module, target: str) -> nn.Module:
    return block.mlp if target in ("W_in", "W_out") else block.attn


def _parameter_name(module: nn.Module, target: str) -> str:
    """The parameter a target names: under grouped-query attention TransformerLens keeps one K/V
    per K/V head as `_W_K`/`_W_V` ([n_key_value_heads, d_model, d_head]) and `W_K`/`W_V` are read-only
    properties repeating them per query head, so the adapter goes on the stored weight."""
    private = f"_{target}"
    return private if target in ("W_K", "W_V") and isinstance(getattr(module, private, None), nn.Parameter) else target


def add_lora(model: HookedTransformer, rank: int, alpha: float, targets: Sequence[str] = LORA_TARGETS,
             generator: torch.Generator | None = None) -> HookedTransformer:
    """Freeze every weight of `model` and add a rank-`rank` LoRA with scale α/r to each of `targets`
    in every block (in place; returns `model`). Only the adapters then require gradients. A is drawn
    from `generator` (default: torch's global RNG); B = 0, so the model computes as before, exactly."""
    targets = tuple(targets)
    unknown = [t for t in targets if t not in LAYOUTS]
    if unknown or not targets:
        raise ConfigError(f"lora_targets: must be names from {','.join(LORA_TARGETS)}; got {','.join(targets)!r}")
    if lora_config(model) is not None:
        raise ValueError("add_lora: the model already has adapters (merge_lora them first)")
    first = {t: _adapted_module(model.blocks[0], t) for t in targets}
    smallest = min(min(to_matrix(getattr(first[t], _parameter_name(first[t], t)), t).shape) for t in targets)
    if rank < 1 or rank > smallest:
        raise ConfigError(f"lora_rank: must be in 1..{smallest} (the smallest adapted matrix's side: a larger rank "
                          f"adds parameters, not expressiveness); got {rank}")
    base_hash = base_sha256(model)
    model.requires_grad_(False)
    for block in model.blocks:
        for target in targets:
            module = _adapted_module(block, target)
            name = _parameter_name(module, target)
            weight = getattr(module, name)
            lora = LoRA(target, weight.shape, rank, alpha, generator).to(weight.device, weight.dtype)
            parametrize.register_parametrization(module, name, lora)
    model.lora_config = LoRAConfig(rank, float(alpha), targets, base_hash)
    return model


def lora_config(model: nn.Module) -> LoRAConfig | None:
    """The `LoRAConfig` of the HookedTransformer in `model` (itself, or PPO's trunk); None without adapters."""
    for module in model.modules():
        if isinstance(module, HookedTransformer):
            return module.__dict__.get("lora_config")
    return None


def adapters(model: nn.Module) -> list[LoRA]:
    """Every LoRA parametrization in `model`, in module order."""
    return [m for m in model.modules() if isinstance(m, LoRA)]


def lora_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The adapters' factors, A and B of each: what a LoRA run trains (with a policy's extras)."""
    return [p for lora in adapters(model) for p in (lora.A, lora.B)]


def lora_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The adapters' factors under their names in `model.state_dict()` (…attn.parametrizations.W_Q.0.A)."""
    factors = {id(p) for p in lora_parameters(model)}
    return {name: p.detach() for name, p in model.named_parameters() if id(p) in factors}


@contextmanager
def adapters_off(model: nn.Module) -> Iterator[nn.Module]:
    """Inside the block `model` computes as its base: every ΔW is switched off (not zeroed — the
    factors, their gradients and the optimizer are untouched) and restored on exit, whatever
    happens. On a model without adapters (a frozen reference copy) it changes nothing, so a
    reference forward can always be written `with adapters_off(ref_model): ...`."""
    switched = adapters(model)
    before = [lora.enabled for lora in switched]
    for lora in switched:
        lora.enabled = False
    try:
        yield model
    finally:
        for lora, enabled in zip(switched, before):
            lora.enabled = enabled


def merge_lora(model: HookedTransformer) -> HookedTransformer:
    """Bake every ΔW into its weight, W ← W + ΔW, and remove the parametrizations (in place; returns
    `model`): a plain HookedTransformer again, every weight trainable as a freshly loaded one. The
    merged weights are the very tensors the LoRA forward used, so the logits do not move at all."""
    for lora in adapters(model):
        lora.enabled = True  # (merging inside adapters_off would bake in nothing)
    for module in list(model.modules()):
        if parametrize.is_parametrized(module):
            for name in list(module.parametrizations):
                if isinstance(module.parametrizations[name][0], LoRA):
                    parametrize.remove_parametrizations(module, name, leave_parametrized=True)
    model.__dict__.pop("lora_config", None)
    model.requires_grad_(True)
    return model


def base_sha256(model: nn.Module) -> str:
    """sha256 of the base weights: each parameter's name, shape, dtype and bytes, in name order, the
    adapters left out and each adapted weight's frozen original under its own name — the same
    number before and after `add_lora`, and for any training of the adapters."""
    h = hashlib.sha256()
    named = {}
    for name, p in model.named_parameters():
        if ".parametrizations." in name:
            if not name.endswith(".original"):
                continue  # an adapter's factor
            module, _, rest = name.partition(".parametrizations.")
            name = f"{module}.{rest.removesuffix('.original')}"
        named[name] = p
    for name in sorted(named):
        p = named[name].detach().cpu().contiguous()
        h.update(f"{name} {tuple(p.shape)} {p.dtype}\n".encode())
        h.update(p.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


LORA_STATE_KEYS = ("lora", "base_sha256", "trainable")


def policy_state_dict(policy: nn.Module) -> dict:
    """What a checkpoint and a run's policy.pt hold of the policy: its whole `state_dict()`, or, for
    a policy with adapters, only what trains — the adapters and the policy's extras — and the base's hash:

        {"lora": {"rank", "alpha", "targets"}, "base_sha256": "…", "trainable": {name: tensor}}

    The base itself is the model the run names (config.json's `model`), loaded again."""
    config = lora_config(policy)
    if config is None:
        return policy.state_dict()
    settings = {k: v for k, v in asdict(config).items() if k != "base_sha256"}
    trainable = {name: p.detach() for name, p in policy.named_parameters() if p.requires_grad}
    return {"lora": {**settings, "targets": list(config.targets)}, "base_sha256": config.base_sha256,
            "trainable": trainable}


def load_policy_state_dict(policy: nn.Module, state: dict) -> None:
    """Put back what `policy_state_dict` returned. For a policy with adapters the saved base hash must
    be this base's (else one line: the adapters were trained on other weights), and the saved tensors
    exactly its trainable ones."""
    config = lora_config(policy)
    if config is None:
        if set(LORA_STATE_KEYS) <= set(state):
            raise ConfigError("lora_rank: the saved policy holds LoRA adapters, but this policy has none")
        policy.load_state_dict(state)
        return
    if not set(LORA_STATE_KEYS) <= set(state):
        raise ConfigError("lora_rank: the saved policy holds full weights, not LoRA adapters")
    if state["base_sha256"] != config.base_sha256:
        raise ConfigError(f"lora: the adapters were trained on a base with weights sha256 {state['base_sha256'][:12]}…, "
                          f"but the base loaded now has {config.base_sha256[:12]}…: load the model the run started from")
    params = {name: p for name, p in policy.named_parameters() if p.requires_grad}
    if set(state["trainable"]) != set(params):
        raise ConfigError(f"lora: the saved adapters ({state['lora']}) do not fit this policy's "
                          f"(rank {config.rank}, targets {','.join(config.targets)})")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(state["trainable"][name])
