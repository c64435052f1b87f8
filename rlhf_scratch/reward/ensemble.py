"""A reward-model ensemble (Coste et al. 2023, "Reward Model Ensembles Help Mitigate
Overoptimization"): k proxies score every sample and one reduction makes their k scores one reward.

    --reward-model min:RM_A,RM_B,RM_C      # worst case of three reward-model runs (WCO)
    --reward-model mean:RM_A,RM_B,RM_C     # their mean
    --reward-model uwo=0.5:RM_A,RM_B       # mean − 0.5 · their variance (UWO)

With r_j(x) member j's score of sample x (j = 1 … k):

    mean  (the ensemble's average)          R(x) = (1/k) Σ_j r_j(x)
    min   (worst-case optimisation, WCO)    R(x) = min_j r_j(x)
    uwo   (uncertainty-weighted, UWO)       R(x) = (1/k) Σ_j r_j(x) − λ · (1/k) Σ_j (r_j(x) − r̄(x))²

Why it can help: the policy climbs wherever the proxy is wrong upward. Members trained apart are
wrong in different places, so a sample only one member overrates gains little under `mean` and
nothing under `min`. What it cannot do: a flaw every member learned from the same raters (all
blind to repetition, say) is a place where they agree, and no reduction of agreeing scores
removes it.

The members here are run folders of `python -m rlhf_scratch.reward_model` on the same base model;
each scores through the same path as task `sentiment` (`functions.SentimentReward`), so a
one-member "ensemble" would score exactly as `--reward-model RM`. The spec lives in
`--reward-model` of task sentiment (`tasks.sentiment_reward`), so a run's config.json carries it
and `--resume` rebuilds it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from jaxtyping import Float
from torch import Tensor

REDUCTIONS = ("mean", "min", "uwo")


def ensemble_mean(scores: Float[Tensor, "k batch"]) -> Float[Tensor, " batch"]:
    """R(x) = (1/k) Σ_j r_j(x): the members' mean score of each sample."""
    return scores.mean(dim=0)


def ensemble_min(scores: Float[Tensor, "k batch"]) -> Float[Tensor, " batch"]:
    """R(x) = min_j r_j(x): the worst case over members (Coste et al.'s WCO)."""
    return scores.min(dim=0).values


def ensemble_uwo(scores: Float[Tensor, "k batch"], lam: float) -> Float[Tensor, " batch"]:
    """R(x) = (1/k) Σ_j r_j(x) − λ · (1/k) Σ_j (r_j(x) − r̄(x))²: the mean less λ times the members'
    variance (the population variance, 1/k), Coste et al.'s uncertainty-weighted optimisation."""
    return scores.mean(dim=0) - lam * scores.var(dim=0, unbiased=False)


@dataclass(frozen=True)
class EnsembleSpec:
    """`REDUCTION:MEMBER,MEMBER,…` read apart: the reduction, UWO's λ (0 otherwise) and the members."""

    reduction: str
    members: tuple[str, ...]
    lam: float = 0.0

    def reduce(self, scores: Float[Tensor, "k batch"]) -> Float[Tensor, " batch"]:
        if self.reduction == "uwo":
            return ensemble_uwo(scores, self.lam)
        return {"mean": ensemble_mean, "min": ensemble_min}[self.reduction](scores)

    def text(self) -> str:
        head = f"uwo={self.lam:g}" if self.reduction == "uwo" else self.reduction
        return f"{head}:{','.join(self.members)}"


def is_ensemble(reward_model: str) -> bool:
    """Does `--reward-model` name an ensemble: a reduction (`mean:`, `min:`, `uwo=λ:`) before the
    members, or any `WORD:A,B` (then `parse_ensemble` says what is wrong with it)?"""
    head, sep, rest = reward_model.partition(":")
    return bool(sep) and (head in REDUCTIONS or head.startswith("uwo=") or "," in rest)


def parse_ensemble(reward_model: str) -> EnsembleSpec:
    """`min:a,b,c` -> EnsembleSpec("min", ("a", "b", "c")); a ValueError of one line, naming
    `reward_model`, for a bad reduction, λ, or fewer than two members."""
    head, sep, rest = reward_model.partition(":")
    if not sep:
        raise ValueError(f"reward_model: an ensemble is REDUCTION:RM,RM,… with REDUCTION one of mean, min, "
                         f"uwo=λ; got {reward_model!r}")
    lam = 0.0
    if head.startswith("uwo="):
        try:
            lam = float(head.removeprefix("uwo="))
        except ValueError:
            lam = math.nan
        if not (math.isfinite(lam) and lam >= 0):
            raise ValueError(f"reward_model: uwo's λ must be a number >= 0 (uwo=0.5:RM,RM); got {head!r}")
        head = "uwo"
    elif head == "uwo":
        raise ValueError("reward_model: uwo needs its λ, as uwo=0.5:RM,RM")
    if head not in REDUCTIONS:
        raise ValueError(f"reward_model: the ensemble's reduction must be one of mean, min, uwo=λ; got {head!r}")
    members = tuple(m.strip() for m in rest.split(",") if m.strip())
    if len(members) < 2:
        raise ValueError(f"reward_model: an ensemble needs at least 2 members, comma-separated; got {len(members)}")
    return EnsembleSpec(head, members, lam)


def check_members(members: Sequence[str]) -> None:
    """Every member a finished reward-model run, all on the same base model; else a ValueError of
    one line naming the first member that is missing or does not match the first."""
    from rlhf_scratch.reward.model import WEIGHTS_FILE, is_reward_model_run

    bases = []
    for m in members:
        if not is_reward_model_run(m) or not (Path(m) / WEIGHTS_FILE).is_file():
            raise ValueError(f"reward_model: ensemble member {m} is not a finished reward-model run folder "
                             f"(python -m rlhf_scratch.reward_model --run-dir {m} makes one)")
        bases.append(json.loads((Path(m) / "config.json").read_text()).get("model", "tiny"))
        if bases[-1] != bases[0]:
            raise ValueError(f"reward_model: ensemble member {m} is on base model {bases[-1]!r}, "
                             f"the first member ({members[0]}) on {bases[0]!r}: members must share one")


class RewardEnsemble:
    """The ensemble as a reward function (the blog's contract): `RewardEnsemble(spec)(samples)`.

    Each member is a `SentimentReward` (its scalar, toward `direction`); the k scores are stacked
    [k, batch] and reduced by the spec's reduction (`EnsembleSpec.reduce`). `last_scores` keeps the
    last call's stack, for a caller that wants to see where the members disagree."""

    def __init__(self, spec: EnsembleSpec | str, direction: str = "pos", device: str = "cpu",
                 member_fn: Callable[[str], Callable] | None = None):
        from rlhf_scratch.reward.functions import SentimentReward

        self.spec = parse_ensemble(spec) if isinstance(spec, str) else spec
        if member_fn is None:
            check_members(self.spec.members)
            member_fn = lambda m: SentimentReward(m, direction=direction, device=device)  # noqa: E731
        self.members = [member_fn(m) for m in self.spec.members]
        self.__name__ = f"RewardEnsemble({self.spec.text()}, {direction})"
        self.last_scores: Tensor | None = None

    def member_scores(self, samples: list[str] | str) -> Float[Tensor, "k batch"]:
        """Every member's score of every sample, stacked."""
        return torch.stack([torch.as_tensor(fn(samples), dtype=torch.float32) for fn in self.members])

    def __call__(self, samples: list[str] | str) -> Float[Tensor, " batch"]:
        self.last_scores = self.member_scores(samples)
        return self.spec.reduce(self.last_scores)

    def __repr__(self) -> str:
        return self.__name__
