"""The off-policy section of exact.json: every sampler (`offpolicy.Sampler`), every estimator and
correction against the exact gradients of the learner, the bias–variance curve of each IS mode over
its clip C, the KL estimators under staleness, and the advice read off those numbers.

    {"settings", "learner", "samplers", "estimators", "curves", "kl", "advice", "seconds"}

`OffPolicyScene` is the learner (the end of `offpolicy.history`) with its truths; `measure` gives one
estimator's `measure.summary` under one sampler, exact where a draw is one completion and Monte-Carlo
over batches drawn from the sampler where it is a group.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from rlhf_scratch.config import ConfigError
from rlhf_scratch.microscope.env import Environment, make_environment, make_policies, prefix_values, rewards_of
from rlhf_scratch.microscope.estimators import Estimator, Knobs, all_estimators, grpo_loss, rloo
from rlhf_scratch.microscope.measure import directions, draw_batches, exact_moments, monte_carlo_moments, summary
from rlhf_scratch.microscope.offpolicy import (
    VLLM_IS_MODES,
    Sampler,
    bf16_logits,
    clipped_estimators,
    correction,
    history,
    k1_reward_is,
    k1_reward_sampler,
    sampler_probabilities,
    sampler_token_log_probs,
)
from rlhf_scratch.microscope.truth import Truth, expected_reward, truths

TRL_DEFAULT = ("sequence_mask", 3.0)
"""TRL 1.16's GRPOConfig defaults: vllm_importance_sampling_mode, vllm_importance_sampling_clip_max."""
EXACT = 1e-4
"""An exact row's error ‖E g − ∇J‖/‖∇J‖ below this is 0 (float32 rounding); the advice reads "exact" by it."""


@dataclass
class OffPolicyScene:
    """The learner θ_K at the end of its history, under one reward, with its exact truths."""

    env: Environment
    path: list[Float[Tensor, "prefixes vocab"]]
    """θ_0 … θ_K (`offpolicy.history`); the learner is the last."""
    theta_ref: Float[Tensor, "prefixes vocab"]
    reward: str
    knobs: Knobs
    rewards: Float[Tensor, " n"]
    truths: dict[str, Truth]

    @property
    def theta(self) -> Float[Tensor, "prefixes vocab"]:
        return self.path[-1]

    def stale(self, k: int) -> Sampler:
        """The policy k updates ago (k = 0: the learner itself)."""
        about = f"the policy {k} update{'s' * (k != 1)} ago" if k else "the learner itself (on-policy)"
        return Sampler(f"stale_{k}", about, self.path[-1 - k], staleness=k)

    def mismatches(self, top_k: int, top_p: float) -> list[Sampler]:
        """The learner's weights, other numbers: bf16-rounded logits, a top-k and a top-p the learner does not score with."""
        return [Sampler("bf16", "the learner's logits rounded to bf16 before the softmax", bf16_logits(self.theta)),
                Sampler(f"top_k_{top_k}", f"the learner sampled with top-k {top_k}, scored with the full softmax",
                        self.theta, top_k=top_k),
                Sampler(f"top_p_{top_p:g}", f"the learner sampled with top-p {top_p:g}, scored with the full softmax",
                        self.theta, top_p=top_p)]

    def sampling(self, sampler: Sampler) -> tuple[Float[Tensor, " n"], Float[Tensor, "n gen"], Float[Tensor, " rows"]]:
        """(q(x, y) of every completion, log q of every token, the sampler's exact value V_q of every prefix)."""
        with torch.no_grad():
            lq = sampler_token_log_probs(sampler, self.env.completions)
            q = sampler_probabilities(self.env, lq)
        return q, lq, prefix_values(self.env, sampler.theta, self.rewards, pi=q * self.env.num_prompts)

    def draws(self, q: Tensor, n: int, seed: int) -> Int[Tensor, "batches batch"]:
        """n batches of G completions of each prompt drawn from q, seeded."""
        return draw_batches(self.env, self.theta, self.knobs.num_generations, n, torch.Generator().manual_seed(seed), q=q)

    def measure(self, est: Estimator, sampler: Sampler, draws: Tensor | None = None, compare: tuple[str, ...] = ()) -> dict:
        """One estimator under one sampler against the learner's `est.true`: exact for a one-completion
        estimator (q as the weights), Monte-Carlo over `draws` (from q) for a batch one."""
        q, lq, values = self.sampling(sampler)
        if est.unit == "completion":
            moments = exact_moments(self.env, est, self.theta, self.theta_ref, self.rewards, values, self.knobs, q, lq)
        else:
            dirs = directions(self.truths[est.true].grad.double(), self.truths["length"].grad.double(), {})
            moments = monte_carlo_moments(self.env, est, self.theta, self.theta_ref, self.rewards, values, self.knobs,
                                          draws, dirs, sampler_logprobs=lq)
        out = summary(moments, self.truths, est.true, compare, self.truths["length"].grad, {})
        if not moments.exact:  # how many s.e. the size along the truth is from 1
            out["bias_in_se"] = in_se(out["norm_ratio_along_true"] - 1, out["norm_ratio_along_true_se"])
        return {"about": est.about, "unit": est.unit, **out}


def in_se(bias: float, se: float) -> float:
    """`bias` in standard errors. Every draw can give the same gradient (s.e. 0): under the right/wrong
    reward a learner that is always right gives RLOO's every advantage 0. Then a bias of 0 is 0 s.e.
    and any other is ±∞ (written to exact.json as null)."""
    if se > 0:
        return bias / se
    return 0.0 if bias == 0 else math.copysign(math.inf, bias)


def off_policy_scene(args) -> OffPolicyScene:
    """The learner of `args`: the main scene's θ (its seed, p_right, drift) under `args.off_policy_reward`,
    moved `max(args.staleness)` steps of `args.stale_step` along its true gradient; checked
    (`check_learner`): a ConfigError naming the flags where its numbers would be float32 rounding."""
    env = make_environment(args.vocab, args.max_len, len(args.p_right))
    theta, theta_ref = make_policies(env, args.seed, tuple(args.p_right), drift=args.drift)
    rewards = rewards_of(env, args.off_policy_reward)
    path = history(env, theta, rewards, args.stale_step, max(args.staleness))
    knobs = Knobs(num_generations=args.num_generations, clip=args.clip, gae_lambda=args.gae_lambda,
                  temperature=args.temperature, top_k=args.top_k, max_len=args.max_len)
    where = (f"the learner at the end of {max(args.staleness)} steps of {args.stale_step:g} along ∇J "
             f"({args.off_policy_reward} reward)")
    if not all(bool(torch.isfinite(t).all()) for t in path):
        raise ConfigError(f"stale_step, staleness: {where} is undefined: a step reached a policy deterministic to "
                          f"float precision (∇J = 0 there), and the next step is along ∇J/‖∇J‖; choose a smaller "
                          f"--stale-step or a smaller largest --staleness")
    sc = OffPolicyScene(env, path, theta_ref, args.off_policy_reward, knobs, rewards,
                        truths(env, path[-1], theta_ref, rewards, args.temperature, args.top_k))
    check_learner(sc, args.staleness, where)
    return sc


def check_learner(sc: OffPolicyScene, staleness: tuple[int, ...], where: str) -> None:
    """Full sequence IS is ∇J exactly under any stale sampler (the module's theory); where float32 measures
    it off by `EXACT` or more, the learner is so near its optimum that ∇J is rounding, and every row's
    ratio to it would be too: one ConfigError line naming the flags that put it there."""
    grad = sc.truths["J"].grad.norm().item()
    full_is = correction("sequence_truncate", math.inf)
    for k in staleness:
        err = sc.measure(full_is, sc.stale(k))["rel_error"] if grad > 0 else math.inf
        if not err < EXACT:
            raise ConfigError(f"stale_step, staleness: {where} is too near its optimum to measure in float32 "
                              f"(‖∇J‖ = {grad:.2g}; full IS from the policy {k} steps back, exact in theory, is off "
                              f"by {err:.2g}); choose a smaller --stale-step or a smaller largest --staleness")


def sampler_facts(sc: OffPolicyScene, sampler: Sampler) -> dict:
    """How far a sampler is from the learner, exactly, with w(y) = π(y)/q(y) the sequence weight:
    KL(q ‖ π) and KL(π ‖ q) over whole completions (∞ where q misses part of π's support), π's mass on
    q's support (= E_q[w]), E_q[w²] (1 + the χ² divergence: full IS's variance factor), the largest w,
    the probability under q that w > 3 (what TRL's default sequence_mask drops), and the share of
    tokens whose ratio ρ_t leaves [1 − ε, 1 + ε]."""
    q, lq, _ = sc.sampling(sampler)
    comps = sc.env.completions
    with torch.no_grad():
        lp = sampler_token_log_probs(Sampler("learner", "", sc.theta), comps)
    pi = sampler_probabilities(sc.env, lp).double()
    q = q.double()
    on = q > 0
    w = pi[on] / q[on]
    token_ratio = (lp - lq)[on].exp()
    mask = comps.mask[on]
    eps = sc.knobs.clip
    outside = ((token_ratio < 1 - eps) | (token_ratio > 1 + eps)) & mask
    qw = q[on][:, None].expand_as(mask)
    return {
        "about": sampler.about, "staleness": sampler.staleness, "top_k": sampler.top_k, "top_p": sampler.top_p,
        "kl_sampler_learner": (q[on] * (q[on] / pi[on]).log()).sum().item(),
        "kl_learner_sampler": (pi * (pi / q).log()).sum().item() if bool(on.all()) else math.inf,
        "support_mass": pi[on].sum().item(),
        "w_second_moment": (q[on] * w * w).sum().item(),
        "w_max": w.max().item(),
        "p_w_above_3": q[on][w > 3].sum().item(),
        "token_clip_share": ((qw * outside).sum() / (qw * mask).sum()).item(),
    }


def main_estimators() -> list[Estimator]:
    """The exact rows of each sampler's table: no correction, full and per-token IS, TIS at 2, MIS at 3
    (TRL's default among them), then PPO's, GRPO's, GSPO's and RLOO's clipped ratios."""
    return [correction(None, None), correction("sequence_truncate", math.inf), correction("token_truncate", math.inf),
            correction("token_truncate", 2.0), correction("sequence_truncate", 2.0), correction("token_mask", 3.0),
            correction(*TRL_DEFAULT), *clipped_estimators()]


def group_estimators() -> list[Estimator]:
    """The Monte-Carlo rows under staleness: the package's RLOO (leave-one-out, clipped sequence ratio),
    GRPO (TRL's defaults: loss_type grpo, scale_rewards group, token ratio) and GSPO, each ratio
    against the sampler."""
    B = "batch"
    return [Estimator("rloo_group", rloo, B, "J", "RLOO, G completions: leave-one-out A, sequence ratio clipped"),
            Estimator("grpo_group", grpo_loss("grpo"), B, "J", "GRPO, TRL's defaults (grpo, group std), token ratio clipped"),
            Estimator("gspo_group", grpo_loss("grpo", level="sequence"), B, "J", "GSPO, group std, sequence ratio clipped")]


def kl_estimators() -> list[Estimator]:
    """The KL penalties under a sampler: the main table's (k1, k2, k3 and ρ k3 in the loss, ρ = π/q off-policy;
    PPO's full-vocabulary term; the learner's k1 in the reward), then k1 in the reward as the rollout
    recorded it (the sampler's) and the learner's k1 weighted by π(y)/q(y)."""
    C = "completion"
    return [*(e for e in all_estimators() if e.true.startswith("kl_")),
            Estimator("k1_reward_sampler", k1_reward_sampler, C, "kl_reverse", "the sampler's k1 in the reward (as sampled)"),
            Estimator("k1_reward_is", k1_reward_is, C, "kl_reverse", "the learner's k1 in the reward × π(y)/q(y)")]


CURVE_FIELDS = ("cos_to_true", "norm_ratio_along_true", "rel_error", "variance")


def curves(sc: OffPolicyScene, sampler: Sampler, clips: tuple[float, ...]) -> dict:
    """Each of TRL's four modes over C_max ∈ clips ∪ {∞}: {mode: [{C, cos, size, rel_error, variance}, …]}.
    At C = ∞ truncation and masking change nothing: token_* is per-token IS, sequence_* full IS."""
    out = {}
    for mode in VLLM_IS_MODES:
        points = []
        for c in (*clips, math.inf):
            e = sc.measure(correction(mode, c), sampler)
            points.append({"C": None if math.isinf(c) else c, **{k: e[k] for k in CURVE_FIELDS}})
        out[mode] = points
    return out


def measure_off_policy(args, progress: bool = True, scene: OffPolicyScene | None = None) -> dict:
    """Everything exact.json's "off_policy" holds, for `args` (an `ExactArgs`); `scene`: its
    `off_policy_scene`, when the caller has checked it already."""
    start = time.perf_counter()
    sc = off_policy_scene(args) if scene is None else scene
    samplers = [sc.stale(k) for k in (0, *args.staleness)] + sc.mismatches(args.top_k, args.top_p)
    facts, entries, kl, curve = {}, {}, {}, {}
    for i, s in enumerate(samplers):
        if progress:
            print(f"off-policy: {s.name} ({i + 1}/{len(samplers)})", flush=True)
        facts[s.name] = sampler_facts(sc, s)
        entries[s.name] = {e.name: sc.measure(e, s) for e in main_estimators()}
        if s.name.startswith("stale_"):
            q, _, _ = sc.sampling(s)
            batches = sc.draws(q, args.off_policy_draws, args.seed + 100 + s.staleness)
            entries[s.name].update({e.name: sc.measure(e, s, batches) for e in group_estimators()})
        kl[s.name] = {e.name: sc.measure(e, s, compare=("kl_reverse", "kl_forward")) for e in kl_estimators()}
        curve[s.name] = curves(sc, s, tuple(args.is_clips))
    result = {
        "settings": {"reward": args.off_policy_reward, "stale_step": args.stale_step, "staleness": list(args.staleness),
                     "is_clips": list(args.is_clips), "draws": args.off_policy_draws, "seed": args.seed,
                     "draw_seeds": {f"stale_{k}": args.seed + 100 + k for k in (0, *args.staleness)},
                     "top_k": args.top_k, "top_p": args.top_p, "clip": args.clip, "num_generations": args.num_generations},
        "learner": {"J_path": [truths_value(sc, t) for t in sc.path], "J": sc.truths["J"].value,
                    "kl_reverse": sc.truths["kl_reverse"].value, "kl_forward": sc.truths["kl_forward"].value,
                    "grad_norm": sc.truths["J"].grad.norm().item()},
        "samplers": facts, "estimators": entries, "curves": curve, "kl": kl,
    }
    result["advice"] = advice(result)
    result["seconds"] = time.perf_counter() - start
    return result


def truths_value(sc: OffPolicyScene, theta: Tensor) -> float:
    """J at a point of the history."""
    with torch.no_grad():
        return expected_reward(sc.env, theta, sc.rewards).item()


def _g(x: float | None, nd: int = 3) -> str:
    """A number for a sentence: `nd` significant digits, scientific below 1e-3; "undefined" for None (a
    cos of a zero expected update) and for NaN."""
    if x is None or math.isnan(x):
        return "undefined"
    return f"{x:.{nd - 1}e}" if x != 0 and abs(x) < 1e-3 else f"{x:.{nd}g}" if abs(x) >= 1 else f"{x:.{nd}f}"


def advice(result: dict) -> list[str]:
    """One line per knob, each number read from a row of `result`, the row named at the end of the
    line ([sampler · estimator], in off_policy.estimators / .kl / .curves / .samplers)."""
    est, kl, facts, curve = result["estimators"], result["kl"], result["samplers"], result["curves"]
    ks = result["settings"]["staleness"]
    stale = [f"stale_{k}" for k in ks]
    last, first = stale[-1], stale[0]
    K = ks[-1]
    lines = []

    none = [est[s]["no_correction"] for s in stale]
    lines.append("Staleness without a correction: the expected update is "
                 + "; ".join(f"k = {k}: cos {_g(e['cos_to_true'], 4)}, error {_g(e['rel_error'])}" for k, e in zip(ks, none))
                 + " off ∇J of the learner (‖E g − ∇J‖/‖∇J‖; KL(q‖π) "
                 + ", ".join(_g(facts[s]["kl_sampler_learner"]) for s in stale) + ") [stale_k · no_correction].")
    full0, fullK = est["stale_0"]["sequence_truncate_Cinf"], est[last]["sequence_truncate_Cinf"]
    lines.append(f"Full sequence IS (w = π(y)/q(y)) is ∇J exactly at every staleness (error ≤ "
                 f"{_g(max(est[s]['sequence_truncate_Cinf']['rel_error'] for s in stale))}), at a variance per completion "
                 f"of {_g(fullK['variance'])} at k = {K} against {_g(full0['variance'])} on-policy "
                 f"(×{_g(fullK['variance'] / full0['variance'])}; E_q[w²] = {_g(facts[last]['w_second_moment'])}) "
                 f"[stale_k · sequence_truncate_Cinf].")
    trl = "sequence_mask_C3"
    exact_until = [k for k, s in zip(ks, stale) if est[s][trl]["rel_error"] < EXACT]
    lines.append(f"TRL's default (sequence_mask, C_max 3) is exact while no sequence weight exceeds 3 "
                 f"(here k ≤ {max(exact_until) if exact_until else 0}: max w "
                 + ", ".join(f"{_g(facts[s]['w_max'])}" for s in stale)
                 + f"); at k = {K} it drops the {_g(100 * facts[last]['p_w_above_3'])} % of draws with w > 3 — the ones the "
                 f"learner favours most — and its expected update is cos {_g(est[last][trl]['cos_to_true'], 4)}, error "
                 f"{_g(est[last][trl]['rel_error'])}, against no correction's cos {_g(none[-1]['cos_to_true'], 4)} "
                 f"[{last} · {trl}].")
    for mode, name in (("token_truncate", "TIS per token"), ("sequence_truncate", "TIS per sequence")):
        for s, k in ((stale[min(1, len(stale) - 1)], ks[min(1, len(ks) - 1)]), (last, K)):
            at2 = next((p for p in curve[s][mode] if p["C"] == 2.0), None)
            if at2 is None:
                continue
            base = est[s]["no_correction"]
            removed = 1 - at2["rel_error"] / base["rel_error"] if base["rel_error"] > 0 else math.nan
            lines.append(f"{name} at C = 2, staleness {k}: removes {_g(100 * removed)} % of no correction's error "
                         f"({_g(base['rel_error'])} → {_g(at2['rel_error'])}) at {_g(at2['variance'] / base['variance'])}× "
                         f"its variance [{s} · curves.{mode}].")
    tok = est[last]["token_truncate_Cinf"]
    lines.append(f"Per-token weights correct each token, not the prefix that led to it: per-token IS without a cap "
                 f"leaves error {_g(tok['rel_error'])} at k = {K} (no correction {_g(none[-1]['rel_error'])}) "
                 f"[{last} · token_truncate_Cinf].")
    clip = ", ".join(f"{n} cos {_g(est[first][n]['cos_to_true'], 3)}" for n in ("ppo_clip", "grpo_token_clip", "rloo_clip"))
    group = est[first].get("rloo_group")
    lines.append(f"The clipped ratios are a trust region, not a correction: at k = {ks[0]} (KL(q‖π) "
                 f"{_g(facts[first]['kl_sampler_learner'])}, {_g(100 * facts[first]['token_clip_share'])} % of tokens "
                 f"outside 1 ± ε) {clip} with ∇J — the clip zeroes the completions the learner already pushed up"
                 + (f"; the package's RLOO with G = {result['settings']['num_generations']}: cos "
                    f"{_g(group['cos_to_true'], 3)}, size {_g(group['norm_ratio_along_true'])} ± "
                    f"{_g(group['norm_ratio_along_true_se'])} (Monte-Carlo, n = {group['n']:,}, seed "
                    f"{result['settings']['draw_seeds'][first]})" if group else "") + f" [{first} · ppo_clip, …].")
    mism = [s for s in est if not s.startswith("stale_")]
    for s in mism:
        f, e = facts[s], est[s]
        if s == "bf16":
            lines.append(f"bf16-rounded logits alone barely move the sampler: KL(q‖π) {_g(f['kl_sampler_learner'])}, max w "
                         f"{_g(f['w_max'], 4)}; no correction's error {_g(e['no_correction']['rel_error'])}, TRL's "
                         f"default exact (error {_g(e[trl]['rel_error'])}) [bf16 · no_correction].")
        else:
            lines.append(f"{f['about'].capitalize()}: no IS mode can correct it — π's mass outside its support is "
                         f"{_g(100 * (1 - f['support_mass']))} %; full IS leaves cos "
                         f"{_g(e['sequence_truncate_Cinf']['cos_to_true'], 4)} (error {_g(e['sequence_truncate_Cinf']['rel_error'])}), "
                         f"no correction cos {_g(e['no_correction']['cos_to_true'], 4)} [{s} · sequence_truncate_Cinf].")
    k0, kK = kl["stale_0"], kl[last]
    lines.append(f"KL in the reward at k = {K}: the learner's k1 unweighted gives error {_g(kK['k1_reward']['rel_error'])} "
                 f"against ∇KL(π‖π_ref), the sampler's k1 as the rollout recorded it {_g(kK['k1_reward_sampler']['rel_error'])}; "
                 f"weighted by π(y)/q(y) it is exact (error {_g(kK['k1_reward_is']['rel_error'])}) [{last} · kl.k1_reward*].")
    lines.append(f"KL in the loss at k = {K}: TRL's ρ k3 (ρ = π/q) error {_g(kK['k3_loss_rho']['rel_error'])} (on-policy "
                 f"{_g(k0['k3_loss_rho']['rel_error'])}), k2 {_g(kK['k2_loss']['rel_error'])} (on-policy "
                 f"{_g(k0['k2_loss']['rel_error'])}), PPO's full-vocabulary term {_g(kK['kl_full_vocab_loss']['rel_error'])} "
                 f"[{last} · kl.k3_loss_rho, k2_loss, kl_full_vocab_loss].")
    return lines
