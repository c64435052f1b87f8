"""The two formulas of `find_steps.py` (issue 46, item 3), apart from the sampling and the model reading:
gold on the proxy's scale (step 1) and the share of the proxy's excess a feature explains (step 3).

    ĝ = μ_p + (g' − μ_g) · σ_p / σ_g        (μ, σ: mean and population s.d. over the reference's samples)

    β_w = Σ_g Σ_{i∈g} (a_i − ā_g)(e_i − ē_g) / Σ_g Σ_{i∈g} (a_i − ā_g)²
    share = β_w (ā₁ − ā₀) / (ē₁ − ē₀)     r²_w = (Σ (a − ā_g)(e − ē_g))² / (Σ (a − ā_g)² Σ (e − ē_g)²)
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float
from torch import Tensor


def standardised_gold(gold: Float[Tensor, " n"], gold_ref: Float[Tensor, " m"],
                      proxy_ref: Float[Tensor, " m"]) -> Float[Tensor, " n"]:
    """ĝ = μ_p + (g' − μ_g) · σ_p / σ_g, moments (population s.d.) over the reference's samples."""
    sd_g = gold_ref.std(unbiased=False)
    if sd_g == 0:
        raise ValueError("standardised_gold: gold is constant on the reference's samples")
    return proxy_ref.mean() + (gold - gold_ref.mean()) * proxy_ref.std(unbiased=False) / sd_g


def explained_share(excess: Float[Tensor, " n"], activation: Float[Tensor, "n f"],
                    policy: Bool[Tensor, " n"]) -> dict[str, Tensor]:
    """Per feature (column): the within-group slope β_w, share = β_w (ā₁ − ā₀) / (ē₁ − ē₀) and r²_w
    (module docstring; group 1 = `policy`). A column constant within both groups has β_w = 0."""
    e, a = excess.double(), activation.double()
    e_c, a_c = e.clone(), a.clone()
    for g in (policy, ~policy):
        e_c[g] -= e[g].mean()
        a_c[g] -= a[g].mean(0)
    cov, var_a, var_e = (a_c * e_c[:, None]).sum(0), (a_c * a_c).sum(0), (e_c * e_c).sum()
    slope = torch.where(var_a > 0, cov / var_a.clamp_min(1e-300), torch.zeros_like(cov))
    gap_a = a[policy].mean(0) - a[~policy].mean(0)
    gap_e = e[policy].mean() - e[~policy].mean()
    r2 = torch.where(var_a > 0, cov * cov / (var_a.clamp_min(1e-300) * var_e), torch.zeros_like(cov))
    return {"slope": slope, "share": slope * gap_a / gap_e, "r2_within": r2, "gap_activation": gap_a, "gap_excess": gap_e}
