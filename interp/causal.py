"""Causal checks of a feature diff: do the features RLHF moved carry the reward?

Steering: add v = Σ_{f ∈ top n} Δa(f) d_f to the REFERENCE's activations at the SAE's site, at
every position, sample (`interp.sampling`), and measure the task reward and the sampled
KL(steered ‖ reference); against random features (the same coefficients on random live features,
rescaled to |v|). Ablation: zero the top features that RLHF turned up (Δa > 0) in the TUNED model,
x ← x − Σ_f a_f(x) d_f, and measure the reward drop; against as many random live features. Same
prompts and seed for every model (common random numbers).

Units: rewards in the reward function's units; KL in nats per sample (summed over its completion tokens).
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float
from torch import Tensor
from transformer_lens import HookedTransformer

from interp.feature_diff import FeatureDiff
from interp.logits import RewardFn
from interp.sampling import SampleSettings, sampled_reward_and_kl


def steering_vector(W_dec: Float[Tensor, "d_sae d_model"], features: list[int],
                    coefficients: Float[Tensor, " n"]) -> Float[Tensor, " d_model"]:
    """v = Σ_i coefficients[i] · W_dec[features[i]]."""
    return coefficients.to(W_dec) @ W_dec[features]


def add_vector_hook(vector: Float[Tensor, " d_model"]):
    """A hook adding `vector` to the activations at every position."""
    def hook(x: Tensor, hook) -> Tensor:
        return x + vector.to(x)
    return hook


def ablate_features_hook(sae, features: list[int]):
    """A hook that zero-ablates `features`: x ← x − Σ_f a_f(x) W_dec[f] (the SAE's error term and
    every other feature stay)."""
    def hook(x: Tensor, hook) -> Tensor:
        a = sae.encode(x)[..., features]
        return x - a @ sae.W_dec[features].to(x)
    return hook


def _random_live(alive: Bool[Tensor, " d_sae"], exclude: list[int], n: int, generator: torch.Generator) -> list[int]:
    pool = [int(i) for i in alive.nonzero()[:, 0] if int(i) not in set(exclude)]
    order = torch.randperm(len(pool), generator=generator)[:n]
    return [pool[int(i)] for i in order]


def causal_checks(reference: HookedTransformer, tuned: HookedTransformer, sae, hook_name: str, diff: FeatureDiff,
                  prompts: list[str], reward_fn: RewardFn, s: SampleSettings, top_n: int = 10, n_random: int = 3,
                  progress=None) -> dict:
    """Steering the reference with the top changed features and ablating them from the tuned model,
    each against random live features (see the module docstring). `reward_fn(texts)` scores
    prompt + completion strings, one number each."""
    W_dec = sae.W_dec.detach()
    top = [int(f) for f in diff.ranked[:top_n]]
    coeff = diff.change[top]
    v = steering_vector(W_dec, top, coeff)
    alive = (diff.freq_ref > 0) | (diff.freq_tuned > 0)
    gen = torch.Generator().manual_seed(s.seed)
    tick = progress or (lambda: None)

    def run(model, hooks):
        tick()
        return sampled_reward_and_kl(model, reference, prompts, reward_fn, s, hooks)

    ref_r, ref_se, ref_kl = run(reference, [])
    tuned_r, tuned_se, tuned_kl = run(tuned, [])
    steer_r, steer_se, steer_kl = run(reference, [(hook_name, add_vector_hook(v))])
    random_steer = []
    for _ in range(n_random):
        feats = _random_live(alive, top, len(top), gen)
        u = steering_vector(W_dec, feats, coeff[torch.randperm(len(feats), generator=gen)])
        u = u * (v.norm() / u.norm().clamp_min(1e-12))
        r, se, kl = run(reference, [(hook_name, add_vector_hook(u))])
        random_steer.append({"features": feats, "reward": r, "reward_se": se, "kl": kl})
    up = [f for f in top if float(diff.change[f]) > 0]
    abl_r, abl_se, abl_kl = run(tuned, [(hook_name, ablate_features_hook(sae, up))]) if up else (tuned_r, tuned_se, tuned_kl)
    random_abl = []
    for _ in range(n_random if up else 0):
        feats = _random_live(alive, top, len(up), gen)
        r, se, kl = run(tuned, [(hook_name, ablate_features_hook(sae, feats))])
        random_abl.append({"features": feats, "reward": r, "reward_se": se, "kl": kl})

    def mean(rows, key):
        return sum(r[key] for r in rows) / len(rows) if rows else float("nan")

    return {
        "n_samples": s.n_samples, "gen_len": s.gen_len, "top_n": len(top), "steering_norm": v.norm().item(),
        "reference": {"reward": ref_r, "reward_se": ref_se, "kl": ref_kl},
        "tuned": {"reward": tuned_r, "reward_se": tuned_se, "kl": tuned_kl},
        "steered": {"features": top, "reward": steer_r, "reward_se": steer_se, "kl": steer_kl},
        "steered_random": random_steer,
        "steered_random_mean": {"reward": mean(random_steer, "reward"), "kl": mean(random_steer, "kl")},
        "ablated": {"features": up, "reward": abl_r, "reward_se": abl_se, "kl": abl_kl, "reward_drop": tuned_r - abl_r},
        "ablated_random": random_abl,
        "ablated_random_mean": {"reward": mean(random_abl, "reward"), "kl": mean(random_abl, "kl"),
                                "reward_drop": tuned_r - mean(random_abl, "reward")},
    }
