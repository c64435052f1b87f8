"""The whole measurement: every estimator against its true gradient, under each reward, the GRPO
length lesson, the one-token KL check, Online DPO at the start. `measure(args)` returns the dict
that `exact.json` holds:

    {"settings", "environment", "truths", "estimators", "by_reward", "length_lesson", "one_token", "off_policy", "seconds"}

("off_policy": `offpolicy_run.measure_off_policy`, the sampler is not the learner.) With `--env arithmetic`
(`microscope.arithmetic`: one-digit sums, the rule accuracy reward) the same estimators are measured on
that environment, "by_reward" holds the format reward, "exact_groups" each group estimator's exact
expectation (`microscope.groups`), and "one_token" and "off_policy" are None (the letters' sections).

A `Scene` is one policy under one reward, ready to measure any estimator (the tests and notebook 07
use it directly). Monte-Carlo draws are made once per policy and shared by every batch estimator
(common random numbers: their differences are measured on the same batches).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm

from rlhf_scratch.config import ConfigError
from rlhf_scratch.microscope.arithmetic import (
    arithmetic_policies,
    make_arithmetic_environment,
    one_digit_sums,
    set_p_answer,
)
from rlhf_scratch.microscope.env import (
    EOS,
    Environment,
    make_environment,
    make_policies,
    prefix_values,
    probabilities,
    rewards_of,
    set_p_right,
)
from rlhf_scratch.microscope.estimators import Estimator, Knobs, all_estimators
from rlhf_scratch.microscope.groups import GROUP_ESTIMATORS, coefficient, exact_group_estimator
from rlhf_scratch.microscope.measure import (
    Moments,
    directions,
    dpo_moments,
    draw_batches,
    exact_moments,
    monte_carlo_moments,
    summary,
)
from rlhf_scratch.microscope.offpolicy_run import measure_off_policy, off_policy_scene
from rlhf_scratch.microscope.truth import Truth, truths

LESSON = ("rloo", "grpo_grpo", "grpo_dr_grpo", "grpo_dapo")
"""The length lesson's estimators (GRPO's three aggregations and RLOO), under the right/wrong reward."""
KL_TRUTHS = ("kl_reverse", "kl_forward")
REWARD_ABOUT = {
    "correct": "right/wrong, blind to length: 1 if the first token is 'a'",
    "length": "pays for length: |y| / max_len",
    "sentiment": "sentiment-like: σ(Σ_t valence(y_t)), valence a +1, b −1, c +½, d −½, …",
    "accuracy": "the rule: accuracy_reward, 1 for the ground truth written one way only (then EOS)",
    "format": "the rule's shape: format_reward, 1 for any integer written one way only",
}
ENV_REWARDS = {"letters": ("correct", "length", "sentiment"), "arithmetic": ("accuracy", "format")}
"""Each environment's rewards, its main one first (the others are the by-reward table)."""
COMPACT = ("true", "cos_to_true", "zero_mean", "norm_ratio", "norm_ratio_along_true", "norm_ratio_along_true_se", "rel_error",
           "bias_se", "d_length", "d_length_se", "exact", "n")
"""The fields the by-reward table keeps of each estimator."""


def compared_with(est: Estimator) -> tuple[str, ...]:
    """The other true gradients an estimator is also measured against."""
    if est.true.startswith("kl_"):
        return KL_TRUTHS
    return {"policy": ("J",), "top_k": ("J", "J_topk"), "temperature": ("J", "J_T")}[est.sampling]


TRUTH_FIELDS = {"J_topk": "top_k", "J_T": "temperature"}
"""The setting that makes each true gradient what it is beyond the policy (`check_truths` names it)."""


def check_truths(sc: Scene, estimators: list[Estimator], where: str) -> None:
    """Every true gradient `estimators` are measured against is non-zero in `sc`; else one ConfigError
    line naming the setting. ∇F = 0 leaves every ratio to ‖∇F‖ undefined: an objective that θ does
    not move, as top_k 1 (one completion, whatever θ) or a top-k that never samples the rewarded token."""
    for name in dict.fromkeys(n for e in estimators for n in (e.true, *compared_with(e))):
        if sc.truths[name].grad.norm() == 0:
            field = TRUTH_FIELDS.get(name, "p_right")
            raise ConfigError(f"{field}: ∇{name} is exactly 0 here ({where}, top_k {sc.knobs.top_k}, temperature "
                              f"{sc.knobs.temperature}): no sampled completion's reward moves with θ, so there is no "
                              f"true gradient to measure the estimators against; choose another --{field.replace('_', '-')}")


def length_parts(env: Environment) -> dict[str, Tensor]:
    """Masks of θ's parameters: every row after the first token, the rows after a right first token
    ('a…', or the answer's first digit), the rows after a wrong one. The right/wrong reward moves only
    the roots; how long an answer goes on is decided in these rows."""
    return {
        "after_first": env.param_rows(lambda p: len(p) >= 2),
        "after_right": env.param_rows(lambda p: len(p) >= 2 and p[1] == env.right_first(p[0])),
        "after_wrong": env.param_rows(lambda p: len(p) >= 2 and p[1] != env.right_first(p[0])),
    }


def set_p(env: Environment, theta: Tensor, p_right: tuple[float, ...]) -> Tensor:
    """θ with π(right | x) = p_right[x]: the first token 'a' (letters), the whole answer (arithmetic)."""
    return set_p_answer(env, theta, p_right) if env.ground_truth else set_p_right(theta, p_right)


@dataclass
class Scene:
    """One policy θ (and its reference) under one reward: everything an estimator is measured with."""

    env: Environment
    theta: Float[Tensor, "prefixes vocab"]
    theta_ref: Float[Tensor, "prefixes vocab"]
    reward: str
    knobs: Knobs
    rewards: Float[Tensor, " n"]
    values: Float[Tensor, " rows"]
    truths: dict[str, Truth]
    parts: dict[str, Tensor]

    def draws(self, n: int, seed: int) -> Int[Tensor, "batches batch"]:
        """n batches (G completions of each prompt) sampled from π, seeded."""
        return draw_batches(self.env, self.theta, self.knobs.num_generations, n, torch.Generator().manual_seed(seed))

    def moments(self, est: Estimator, draws: Tensor | None = None, progress=None) -> Moments:
        """E[g] and Var[g]: exact where a draw is one completion, Monte-Carlo over `draws` otherwise."""
        if est.unit == "completion":
            scoring = {"policy": {}, "top_k": {"top_k": self.knobs.top_k},
                       "temperature": {"temperature": self.knobs.temperature}}[est.sampling]
            q = probabilities(self.env, self.theta, **scoring)
            return exact_moments(self.env, est, self.theta, self.theta_ref, self.rewards, self.values, self.knobs, q)
        dirs = directions(self.truths[est.true].grad.double(), self.truths["length"].grad.double(), self.parts)
        return monte_carlo_moments(self.env, est, self.theta, self.theta_ref, self.rewards, self.values, self.knobs,
                                   draws, dirs, progress=progress)

    def measure(self, est: Estimator | str, draws: Tensor | None = None, progress=None) -> dict:
        """One estimator's `summary` (by name, or an `Estimator` of your own)."""
        if isinstance(est, str):
            est = {e.name: e for e in all_estimators()}[est]
        return {"about": est.about, "unit": est.unit, "sampling": est.sampling,
                **summary(self.moments(est, draws, progress), self.truths, est.true, compared_with(est),
                          self.truths["length"].grad, self.parts)}

    def measure_dpo(self, beta: float, loss_type: str) -> dict:
        """Online DPO at the START of training: its update at π = π_ref (h = 0), exactly over every pair,
        against ∇J there (`dpo_moments`)."""
        at_ref = make_scene(self.env, self.theta_ref, self.theta_ref, self.reward, self.knobs)
        moments = dpo_moments(self.env, self.theta_ref, self.rewards, self.knobs, beta, loss_type)
        return {"about": f"Online DPO ({loss_type}, β = {beta}) at the start, π = π_ref: every pair, exactly",
                "unit": "pair", "sampling": "policy",
                **summary(moments, at_ref.truths, "J", (), at_ref.truths["length"].grad, self.parts), "true": "J_at_ref"}


def make_scene(env: Environment, theta: Tensor, theta_ref: Tensor, reward: str, knobs: Knobs) -> Scene:
    """The Scene of θ under `reward`: rewards, exact values, every true gradient, the length parts."""
    rewards = rewards_of(env, reward)
    return Scene(env, theta, theta_ref, reward, knobs, rewards, prefix_values(env, theta, rewards),
                 truths(env, theta, theta_ref, rewards, knobs.temperature, knobs.top_k), length_parts(env))


def scene(vocab: int = 5, max_len: int = 5, p_right: tuple[float, ...] = (0.1, 0.5), reward: str = "correct",
          seed: int = 0, drift: float = 0.5, **knobs) -> Scene:
    """A Scene from scratch: the environment, seeded policies with π(first = a | x) = p_right[x]."""
    env = make_environment(vocab, max_len, len(p_right))
    theta, theta_ref = make_policies(env, seed, tuple(p_right), drift=drift)
    return make_scene(env, theta, theta_ref, reward, Knobs(max_len=max_len, **knobs))


def arithmetic_scene(p_right: tuple[float, ...] = (0.1, 0.5), reward: str = "accuracy", seed: int = 0,
                     drift: float = 0.5, **knobs) -> Scene:
    """The arithmetic Scene from scratch: len(p_right) one-digit sums drawn with `seed`, π(right answer | x)
    = p_right[x] (`microscope.arithmetic`)."""
    env = make_arithmetic_environment(one_digit_sums(len(p_right), seed))
    theta, theta_ref = arithmetic_policies(env, seed, tuple(p_right), drift)
    return make_scene(env, theta, theta_ref, reward, Knobs(max_len=env.max_len, **knobs))


def measure_all(sc: Scene, draws: Tensor, dpo_beta: float, bar=None) -> dict:
    """Every estimator (and Online DPO at the start) in one scene: {name: summary}."""
    entries = {}
    for est in all_estimators():
        if bar is not None:
            bar.set_postfix_str(f"{sc.reward} {est.name}")
        entries[est.name] = sc.measure(est, draws, bar)
    for loss_type in ("sigmoid", "ipo"):
        entries[f"online_dpo_{loss_type}"] = sc.measure_dpo(dpo_beta, loss_type)
    return entries


def true_length_effect(sc: Scene) -> dict:
    """The true gradient's own effect on length: ∇E[len]·∇J (per part of θ), and per unit of J gained (÷ ‖∇J‖²)."""
    grad, length = sc.truths["J"].grad, sc.truths["length"].grad
    out = {"d_length": (length @ grad).item(), "length_per_gain": (length @ grad).item() / grad.pow(2).sum().item()}
    for name, keep in sc.parts.items():
        d = ((length * keep) @ grad).item()
        out[f"d_length_{name}"], out[f"length_per_gain_{name}"] = d, d / grad.pow(2).sum().item()
    return out


def policy_facts(sc: Scene) -> dict:
    """A policy's exact numbers: J, P(right first token) per prompt, E[len] (also given right / wrong), both KLs."""
    env = sc.env
    q = probabilities(env, sc.theta).double()
    comps = env.completions
    right = env.right()
    lengths = comps.lengths.double()
    return {
        "J": sc.truths["J"].value,
        "p_right": [(q[(comps.prompt == x) & right].sum() * env.num_prompts).item() for x in range(env.num_prompts)],
        "E_length": sc.truths["length"].value,
        "E_length_right": ((q * lengths)[right].sum() / q[right].sum()).item(),
        "E_length_wrong": ((q * lengths)[~right].sum() / q[~right].sum()).item(),
        "kl_reverse": sc.truths["kl_reverse"].value,
        "kl_forward": sc.truths["kl_forward"].value,
    }


def length_lesson(sc: Scene, p_right: float, draws: int, seed: int, bar=None) -> dict:
    """The lesson at one policy: every prompt's π(right) set to p_right, the right/wrong reward;
    the true gradient's effect on length and each `LESSON` estimator's."""
    right_wrong = "accuracy" if sc.env.ground_truth else "correct"
    at = make_scene(sc.env, set_p(sc.env, sc.theta, (p_right,) * sc.env.num_prompts), sc.theta_ref, right_wrong, sc.knobs)
    check_truths(at, [e for e in all_estimators() if e.name in LESSON], f"the length lesson at p_right {p_right}")
    batches = at.draws(draws, seed)
    rows = {"true": true_length_effect(at)}
    for name in LESSON:
        if bar is not None:
            bar.set_postfix_str(f"lesson p={p_right} {name}")
        rows[name] = at.measure(name, batches, bar)
    return {"policy": policy_facts(at), "estimators": rows}


def length_lessons(main: Scene, args, bar=None) -> dict:
    """The length lesson at each of `args.lesson_p_right` (`length_lesson`), `args.draws` batches each,
    seeded as `measure` seeds them: {"p_right=0.2": …, …}, exactly exact.json's `length_lesson`."""
    return {f"p_right={p}": length_lesson(main, p, args.draws, args.seed + 2 + i, bar)
            for i, p in enumerate(args.lesson_p_right)}


def knobs_of(args) -> Knobs:
    """The estimators' settings of `args` (an `ExactArgs`)."""
    return Knobs(num_generations=args.num_generations, clip=args.clip, gae_lambda=args.gae_lambda,
                 temperature=args.temperature, top_k=args.top_k, max_len=args.max_len)


def main_scene(args) -> Scene:
    """The scene every table of `args` starts from: its environment, the seeded policies, its reward."""
    if args.env == "arithmetic":
        env = make_arithmetic_environment(one_digit_sums(len(args.p_right), args.seed))
        theta, theta_ref = arithmetic_policies(env, args.seed, tuple(args.p_right), args.drift)
    else:
        env = make_environment(args.vocab, args.max_len, len(args.p_right))
        theta, theta_ref = make_policies(env, args.seed, tuple(args.p_right), drift=args.drift)
    return make_scene(env, theta, theta_ref, args.reward, dataclasses.replace(knobs_of(args), max_len=env.max_len))


def exact_groups(sc: Scene, entries: dict) -> dict:
    """Each reducible group estimator's exact expectation under the 0/1 reward (`groups`), beside its
    Monte-Carlo one in `entries`: cos, size along ∇J and the error exactly, c_x per prompt (sequence
    surrogates), and z = (MC size − exact size) / MC s.e. (|z| ≲ 2: the two agree)."""
    p = tuple(policy_facts(sc)["p_right"])
    G = sc.knobs.num_generations
    out = {}
    for name, (advantage, weight) in GROUP_ESTIMATORS.items():
        e = sc.measure(exact_group_estimator(name, p, G))
        mc = entries[name]
        out[name] = {
            "advantage": advantage, "token_weight": weight,
            "cos_to_true": e["cos_to_true"], "norm_ratio": e["norm_ratio"],
            "norm_ratio_along_true": e["norm_ratio_along_true"], "rel_error": e["rel_error"],
            "c_per_prompt": [coefficient(advantage, G, px) for px in p] if weight == "sequence" else None,
            "mc_cos_to_true": mc["cos_to_true"], "mc_norm_ratio_along_true": mc["norm_ratio_along_true"],
            "mc_norm_ratio_along_true_se": mc["norm_ratio_along_true_se"], "mc_n": mc["n"],
            "z": (mc["norm_ratio_along_true"] - e["norm_ratio_along_true"]) / mc["norm_ratio_along_true_se"],
        }
    return out


def measure_one_token(args, knobs: Knobs) -> dict:
    """The KL estimators where a completion is ONE token (max_len = 1): there k2 as a loss is exactly
    ∇KL(π ‖ π_ref) and k3 as a loss exactly ∇KL(π_ref ‖ π), in expectation."""
    one = {k: v for k, v in dataclasses.asdict(knobs).items() if k != "max_len"}
    sc = scene(args.vocab, 1, tuple(args.p_right), args.reward, args.seed, args.drift, **one)
    return {est.name: sc.measure(est) for est in all_estimators() if est.true.startswith("kl_")}


def measure(args, progress: bool = True) -> dict:
    """Everything `exact.json` holds, for `args` (an `ExactArgs`)."""
    start = time.perf_counter()
    torch.manual_seed(args.seed)
    main = main_scene(args)
    env, theta, theta_ref, knobs = main.env, main.theta, main.theta_ref, main.knobs
    letters = args.env == "letters"
    others = [r for r in ENV_REWARDS[args.env] if r != args.reward]
    for sc in [main, *(make_scene(env, theta, theta_ref, r, knobs) for r in others)]:  # before any Monte-Carlo
        check_truths(sc, all_estimators(), f"p_right {' '.join(map(str, args.p_right))}, reward {sc.reward}")
    off_policy = off_policy_scene(args) if letters else None  # its own checks, before any Monte-Carlo too
    num_batch = sum(e.unit == "batch" for e in all_estimators())
    total = (args.draws * (num_batch + len(LESSON) * len(args.lesson_p_right))
             + args.draws_by_reward * num_batch * len(others))
    bar = tqdm(total=total, desc="Monte-Carlo batches", unit="batch", disable=not progress, mininterval=1.0)
    # drawn once, shared by every estimator and reward (the first `draws` of them, or `draws_by_reward`)
    draws = main.draws(max(args.draws, args.draws_by_reward), args.seed + 1)

    entries = measure_all(main, draws[: args.draws], args.dpo_beta, bar)
    by_reward = {}
    for reward in others:
        full = measure_all(make_scene(env, theta, theta_ref, reward, knobs), draws[: args.draws_by_reward],
                           args.dpo_beta, bar)
        by_reward[reward] = {name: {k: e[k] for k in COMPACT if k in e} for name, e in full.items()}
    lesson = length_lessons(main, args, bar)
    bar.close()
    groups = exact_groups(main, entries) if args.reward == "accuracy" else None  # a 0/1 reward (the letters' keep their table)

    return {
        "settings": dataclasses.asdict(args),
        "environment": {
            "name": args.env, "problems": [f"{p}{t}" for p, t in zip(env.prompt_text, env.ground_truth)],
            "vocab": ["<eos>", *env.words[: env.vocab - 1]], "eos": EOS, "max_len": env.max_len,
            "prompts": env.num_prompts, "completions": len(env.completions),
            "completions_per_prompt": len(env.completions) // env.num_prompts, "prefixes": env.num_prefixes,
            "parameters": env.num_params, "reward": args.reward, "reward_about": REWARD_ABOUT[args.reward],
            "rewards": REWARD_ABOUT,
            "batch": f"{env.num_prompts} prompts x G={args.num_generations} = {env.num_prompts * args.num_generations} completions",
            "value_function": "the exact V(prefix) = E[r | prefix] (the *_zero_value entries: V = 0)",
            "policy": policy_facts(main),
        },
        "truths": {k: {"about": t.about, "value": t.value, "grad_norm": t.grad.norm().item()} for k, t in main.truths.items()},
        "estimators": entries,
        "by_reward": by_reward,
        "length_lesson": lesson,
        "exact_groups": groups,
        "one_token": measure_one_token(args, knobs) if letters else None,
        "off_policy": measure_off_policy(args, progress, off_policy) if letters else None,
        "seconds": time.perf_counter() - start,
    }
