"""The checks of exercises 06, the capstones: a whole trainer, an estimator graded exactly, a verdict over seeds.

Built as `checks.py` is (read its docstring): each `check_<name>(fn)` runs cases and names the classic
mistake by the number it produced.

- `check_make_rloo_algorithm`: your registry entry's trainer against the package's `RLOOTrainer` on
  the tiny preset. Both start from the same state, one learning phase into training (so the policy is
  off the reference and the KL in the reward is not 0), and take the same rollout with torch's RNG in
  the same state (the minibatches are shuffled with it). The learning phase steps plain SGD
  (`LR`, no momentum) in place of the trainer's Adam, so that an update is the gradient times the
  learning rate: float rounding stays at rounding's size instead of Adam's g/√v blowing up an entry
  near 0. Compared: the advantages your `compute_advantages` sets, then the parameter update of
  your whole learning phase as two numbers, its projection on the package's update (1) and its
  relative error (0). Each mistake's numbers are the same runs with the mistake planted (`_phase`).
- `check_calc_k3_kl`: the exact-gradient microscope grades your KL estimator. Its environment lists
  every completion with its exact probability, so E_π[Σ_t k(y_t)] is a weighted sum, not a sample:
  the check says "unbiased" or "biased by X (exact)". Then three tokens worked by hand.
- `check_paired_difference_interval`: cases worked by hand. Student's t quantiles at 1, 2 and 4
  degrees of freedom have closed forms (`t_quantile_closed_form`); the two a mistake needs beside
  them (n degrees of freedom for n − 1, at n = 3 and 5) are printed-table values (`T_TABLE`), so the
  check needs no scipy; tests/unit/test_capstone_checks.py compares both with `studies.stats.t_quantile`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
from torch import Tensor

from rlhf_scratch.course.checks import Case, Mistake, Reference, _run, _t

SOLUTIONS = "rlhf_scratch.course.solutions_capstones"
REFERENCES: dict[str, Reference] = {
    "make_rloo_algorithm": Reference(SOLUTIONS, "(name='my_rloo')"),
    "calc_k3_kl": Reference("rlhf_scratch.algorithms.grpo", "(logprobs, ref_logprobs)"),
    "paired_difference_interval": Reference(SOLUTIONS, "(a, b, confidence=0.95)"),
}
"""The solution of each exercise (`calc_k3_kl` is the package's own: GRPO's KL term)."""


# --- make_rloo_algorithm ----------------------------------------------------------------------

CHECK_NAME = "my_rloo"
"""The --algo name the check registers your entry under while it runs."""
SETTINGS: dict[str, Any] = dict(
    batch_size=8, num_generations=4, gen_len=8, num_minibatches=2, num_iterations=1, base_lr=1e-3,
    warmup_steps=0, total_phases=4, seed=0, threads=1, device="cpu",
)
"""RLOO on the tiny preset: 2 prompts × G = 4, two minibatches, one pass (two steps a phase)."""
LR = 0.1
"""The check's SGD step (the first phase, which moves the policy off the reference, uses the trainer's Adam)."""


@dataclass
class Start:
    """The state both phases start from: the package's trainer (restored before each run) and its rollout."""

    trainer: Any
    rollout: Any
    policy_state: dict[str, Tensor]
    rng: Tensor


@lru_cache(maxsize=1)
def starting_state() -> Start:
    """An `RLOOTrainer` one phase into training and its next rollout (built once per process)."""
    from rlhf_scratch.algorithms.rloo import RLOOTrainer
    from rlhf_scratch.config import make_args

    trainer = RLOOTrainer(make_args("tiny", "rloo", **SETTINGS), quiet=True)
    trainer.learning_phase(trainer.rollout_phase())
    rollout = trainer.rollout_phase()
    return Start(trainer, rollout, copy.deepcopy(trainer.policy.state_dict()), torch.get_rng_state())


def _restore(trainer: Any, start: Start) -> None:
    """The starting parameters, a fresh SGD (maximize: the trainers ascend J) with a constant schedule,
    and the starting RNG."""
    trainer.policy.load_state_dict(start.policy_state)
    trainer.policy.zero_grad(set_to_none=True)
    trainer.optimizer = torch.optim.SGD(trainer.policy.parameters(), lr=LR, maximize=True)
    trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lambda _: 1.0)
    torch.set_rng_state(start.rng)


def _update(trainer: Any, start: Start) -> Tensor:
    """Every parameter's change since the start, flattened (float64)."""
    return torch.cat([(p.detach() - start.policy_state[n]).flatten().double()
                      for n, p in trainer.policy.named_parameters()])


def _agreement(update: Tensor, package: Tensor) -> list[float]:
    """[projection of `update` on the package's / its squared norm, ‖update − package‖ / ‖package‖]: [1, 0] when equal."""
    norm2 = package.dot(package)
    return [(update.dot(package) / norm2).item(), ((update - package).norm() / norm2.sqrt()).item()]


def _loo(r: Tensor, G: int, divide: float | None = None, axis_wrong: bool = False) -> Tensor:
    """r − (Σ_group − r) / divide (G − 1 by default), groups of G consecutive rows (or, wrongly, every n/G-th)."""
    grouped = r.view(G, -1).T if axis_wrong else r.view(-1, G)
    out = grouped - (grouped.sum(dim=1, keepdim=True) - grouped) / (G - 1 if divide is None else divide)
    return (out.T if axis_wrong else out).flatten()


def _phase(trainer: Any, batch: Any, sign: float = 1.0, clip: bool = True, token_level: bool = False,
           mean_ratio: bool = False) -> None:
    """RLOO's update written out, or with one mistake: the objective minimised (`sign` −1), no clip,
    the ratio and clip per token (PPO's) with the sequence advantage, the sequence's ratio from the
    per-token MEAN log-ratio (exp of mean_t, GSPO's geometric mean, in place of exp of the sum). (A sum
    over rows in place of the mean is not among them: the gradient-norm clip of `SETTINGS` takes it
    back to the same step.)"""
    from rlhf_scratch.core.memory import minibatch_rows
    from rlhf_scratch.core.objectives import sequence_log_probs

    args, rollout, A = trainer.args, batch.rollout, batch.local_advantages
    mask = rollout.completion_mask

    def objective(rows: Tensor):
        if token_level:
            ratio = (trainer.token_log_probs(rollout, rows) - rollout.logprobs[rows]).exp()
            adv = A[rows, None].expand_as(ratio)
        elif mean_ratio:
            log_ratio = trainer.token_log_probs(rollout, rows) - rollout.logprobs[rows]
            kept = mask[rows]
            ratio = ((log_ratio * kept).sum(-1) / kept.sum(-1)).exp()
            adv = A[rows]
        else:
            ratio = (trainer.sequence_log_probs(rollout, rows) - sequence_log_probs(rollout.logprobs, mask)[rows]).exp()
            adv = A[rows]
        terms = ratio * adv
        if clip:
            terms = torch.minimum(terms, ratio.clamp(1 - args.epsilon_low, 1 + args.epsilon_high) * adv)
        J = terms[mask[rows]].mean() if token_level else terms.mean()
        return sign * J, {}

    trainer.ascend(minibatch_rows(len(rollout), args.num_minibatches, args.num_iterations), objective)


@lru_cache(maxsize=1)
def _package_results() -> dict[str, Any]:
    """The package's advantages and update, and each mistake's (advantages from its shaped rewards,
    updates from `_phase` with the mistake) on the starting state."""
    from rlhf_scratch.engine.batch import gather_batch

    start = starting_state()
    trainer, G = start.trainer, SETTINGS["num_generations"]
    batch = gather_batch(copy.deepcopy(start.rollout))
    trainer.compute_advantages(batch)
    shaped, raw = trainer.shaped_rewards(batch), batch.everyone.rewards
    lengths = batch.everyone.completion_mask.sum(-1)  # β Σ_t kl = raw − shaped, so β mean_t kl = (raw − shaped) / |o|
    advantages = {
        "right": batch.advantages,
        "mean": (shaped.view(-1, G) - shaped.view(-1, G).mean(1, keepdim=True)).flatten(),
        "axis": _loo(shaped, G, axis_wrong=True),
        "sum": _loo(shaped, G, divide=1.0),
        "G": _loo(shaped, G, divide=float(G)),
        "no_kl": _loo(raw, G),
        "plus_kl": _loo(2 * raw - shaped, G),  # R + β KL
        "mean_kl": _loo(raw - (raw - shaped) / lengths, G),  # R − β mean_t KL
    }
    _restore(trainer, start)
    trainer.learning_phase(copy.deepcopy(start.rollout))
    package = _update(trainer, start)
    updates = {}
    planted = {"minimised": dict(sign=-1.0), "unclipped": dict(clip=False), "token": dict(token_level=True),
               "mean_ratio": dict(mean_ratio=True)}
    for key, mistake in planted.items():
        _restore(trainer, start)
        b = gather_batch(copy.deepcopy(start.rollout))
        trainer.compute_advantages(b)
        _phase(trainer, b, **mistake)
        updates[key] = _agreement(_update(trainer, start), package)
    return {"advantages": advantages, "package": package, "updates": updates}


_LEARNER: dict[str, Any] = {}
"""The learner's trainer of the last check (fn → trainer), so that both cases use one."""


def _learner_trainer(fn: Callable) -> Any:
    """Your entry registered under CHECK_NAME, its trainer built with the package's RLOO settings and
    put in the starting state."""
    from rlhf_scratch.config import registry
    from rlhf_scratch.config.registry import Algorithm

    if _LEARNER.get("fn") is fn:
        return _LEARNER["trainer"]
    entry = fn(CHECK_NAME)
    if not isinstance(entry, Algorithm):
        raise AssertionError(f"check_make_rloo_algorithm: return the registry entry, Algorithm({CHECK_NAME!r}, label, "
                             f"args=YourArgs, trainer=YourTrainer); got {type(entry).__name__}")
    if entry.name != CHECK_NAME:
        raise AssertionError(f"check_make_rloo_algorithm: the entry's name is the --algo it answers to: use the "
                             f"`name` argument ({CHECK_NAME!r}); got {entry.name!r}")
    start = starting_state()
    registry.unregister(CHECK_NAME)
    registry.register(entry)  # until the check ends (`check_make_rloo_algorithm`): the loop reads the entry
    args_class, trainer_class = entry.args_class(), entry.trainer_class()
    package_args = start.trainer.args
    values = {f.name: getattr(package_args, f.name) for f in dataclasses.fields(args_class)
              if f.init and hasattr(package_args, f.name)}
    trainer = trainer_class(args_class(**values).validate(), quiet=True)
    if trainer.num_generations != SETTINGS["num_generations"]:
        raise AssertionError(f"check_make_rloo_algorithm: your trainer samples {trainer.num_generations} completion(s) "
                             f"per prompt; RLOO samples G = args.num_generations: define the static method "
                             "`generations(args)` to return it (the base class says 1)")
    _LEARNER.update(fn=fn, trainer=trainer)
    return trainer


def _learner_advantages(fn: Callable) -> Tensor:
    from rlhf_scratch.engine.batch import gather_batch

    trainer, start = _learner_trainer(fn), starting_state()
    _restore(trainer, start)
    batch = gather_batch(copy.deepcopy(start.rollout))
    trainer.compute_advantages(batch)
    if batch.advantages is None:
        raise AssertionError("check_make_rloo_algorithm: compute_advantages must set batch.advantages "
                             "(one number per completion, over batch.everyone's rows)")
    return batch.advantages.detach()


def _learner_update(fn: Callable) -> Tensor:
    trainer, start = _learner_trainer(fn), starting_state()
    _restore(trainer, start)
    trainer.learning_phase(copy.deepcopy(start.rollout))
    return torch.tensor(_agreement(_update(trainer, start), _package_results()["package"]))


OWN_SAMPLE = ("the baseline includes the completion's own reward: that is the group MEAN (GRPO's, without the std), "
              "which shrinks every advantage by (G − 1)/G; leave-one-out subtracts the mean of the OTHER G − 1")


def _make_rloo_algorithm_cases() -> list[Case]:
    results = _package_results()
    adv, upd = results["advantages"], results["updates"]
    return [
        Case("the advantages of one rollout (batch.advantages after your compute_advantages)",
             _learner_advantages, adv["right"],
             (Mistake(adv["mean"], OWN_SAMPLE),
              Mistake(adv["axis"], "wrong group axis: a prompt's G completions are CONSECUTIVE rows, "
                                   "rewards.view(-1, G) is [prompts, G]; view(G, -1) groups every (batch/G)-th row"),
              Mistake(adv["sum"], "no /(G − 1): the baseline is the MEAN of the other G − 1 rewards, not their sum"),
              Mistake(adv["G"], "divided by G: there are G − 1 others, so their mean is (Σ − r_i) / (G − 1)"),
              Mistake(adv["no_kl"], "the KL is missing from the reward: r = R − β Σ_t (log π_old − log π_ref) "
                                    "(batch.everyone.logprobs, .ref_logprobs, summed over the completion mask)"),
              Mistake(adv["plus_kl"], "the KL's sign: the reward is R MINUS β · KL (the penalty pulls toward the reference)"),
              Mistake(adv["mean_kl"], "the KL AVERAGED over the completion's tokens: the sequence's KL is the SUM, "
                                      "Σ_t (log π_old − log π_ref) = log π_old(o|q) − log π_ref(o|q), so β · KL "
                                      "grows with the length (a mean would charge a long completion as a short one)")),
             atol=1e-6),
        Case("one learning phase, SGD: [your update's projection on the package's, its relative error]",
             _learner_update, [1.0, 0.0],
             (Mistake(upd["minimised"], "the objective was minimised: the trainer ASCENDS (hand J to ascend, not −J)"),
              Mistake(upd["unclipped"], "the clip is missing: J = mean min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high) A); the "
                                        "second minibatch's ρ ≠ 1 (the policy has stepped), and there it binds"),
              Mistake(upd["token"], "the ratio per TOKEN (PPO's): RLOO's ρ is the whole sequence's, "
                                    "exp(log π(o|q) − log π_old(o|q)) with log π(o|q) = self.sequence_log_probs(rollout, rows)"),
              Mistake(upd["mean_ratio"], "the ratio from the MEAN per-token log-ratio, exp(mean_t (log π − log π_old)) "
                                         "(GSPO's geometric mean): RLOO's ρ is the whole sequence's, exp of the SUM, "
                                         "exp(log π(o|q) − log π_old(o|q)) with self.sequence_log_probs(rollout, rows)")),
             atol=1e-4),
    ]


def check_make_rloo_algorithm(fn: Callable) -> None:
    """Check `make_rloo_algorithm(name) -> Algorithm`: RLOO written from the contract, a registry entry
    whose trainer's learning phase equals the package's `RLOOTrainer` (see the module docstring).

    Recognises: the baseline including the own sample, the wrong group axis, no /(G − 1), /G, the KL
    missing from the reward, added or averaged over tokens; the objective minimised, no clip, a
    per-token ratio, a ratio from the per-token mean log-ratio.
    """
    from rlhf_scratch.config import registry

    _LEARNER.clear()
    try:
        _run("make_rloo_algorithm", fn, _make_rloo_algorithm_cases(), REFERENCES["make_rloo_algorithm"])
    finally:
        _LEARNER.clear()
        registry.unregister(CHECK_NAME)


# --- calc_k3_kl: the microscope as a grader ----------------------------------------------------

MICROSCOPE = dict(vocab=4, max_len=4, seed=0, p_right=(0.6,))
"""The environment and the policies the estimator is graded on (3 words and EOS, up to 4 tokens: 121 completions)."""


@lru_cache(maxsize=1)
def _microscope() -> tuple[Any, Tensor, Tensor, Tensor, float, float]:
    """(env, π(y) of every completion, log π and log π_ref of every token, KL(π ‖ π_ref), E|y|): exact."""
    from rlhf_scratch.microscope.env import gathered_logits, make_environment, make_policies, token_log_probs
    from rlhf_scratch.microscope.truth import expected_length, reverse_kl

    env = make_environment(MICROSCOPE["vocab"], MICROSCOPE["max_len"])
    theta, theta_ref = make_policies(env, MICROSCOPE["seed"], MICROSCOPE["p_right"])
    comps = env.completions
    with torch.no_grad():
        logp = token_log_probs(gathered_logits(theta, comps), comps)
        ref = token_log_probs(gathered_logits(theta_ref, comps, reference=True), comps)
        pi = torch.where(comps.mask, logp, torch.zeros_like(logp)).sum(-1).exp()
        kl, length = reverse_kl(env, theta, theta_ref).item(), expected_length(env, theta).item()
    return env, pi.double(), logp, ref, kl, length


def exact_mean(estimator: Callable[[Tensor, Tensor], Tensor]) -> float:
    """E_{y~π}[Σ_t k(y_t)] over every completion of the microscope's environment: Σ_y π(y) Σ_{t kept} k_t."""
    env, pi, logp, ref, _, _ = _microscope()
    k = estimator(logp.clone(), ref.clone())
    per_sequence = torch.where(env.completions.mask, k, torch.zeros_like(k)).sum(-1).double()
    return (pi * per_sequence).sum().item()


def exact_kl() -> float:
    """KL(π ‖ π_ref) over whole completions of the microscope's environment, exactly (`microscope.truth.reverse_kl`)."""
    return _microscope()[4]


def _k(x: Tensor) -> dict[str, Tensor]:
    """Each estimator (and mistake) from x = log π_ref − log π at each token."""
    r = x.exp()
    return {"k1": -x, "k2": 0.5 * x**2, "k3": r - 1 - x, "inverted": (-x).exp() - 1 + x, "no_minus_one": r - x,
            "sign": x - r + 1}


def _k3_cases() -> list[Case]:
    _, _, _, _, kl, length = _microscope()
    means = {name: exact_mean(lambda lp, rf, n=name: _k(rf - lp)[n]) for name in ("k2", "inverted", "no_minus_one", "sign")}

    def biased(name: str, why: str) -> Mistake:
        return Mistake(means[name], f"biased by {means[name] - kl:+.6g} (exact): {why}")

    # by hand: π = [1/2, 1/4, 1/5], π_ref = [1/4, 1/2, 1/5], so r = π_ref/π = [1/2, 2, 1]
    lp, rf = [[math.log(1 / 2), math.log(1 / 4), math.log(1 / 5)]], [[math.log(1 / 4), math.log(1 / 2), math.log(1 / 5)]]
    ln2 = math.log(2)
    return [
        Case(f"E_π[Σ_t k(y_t)] = KL(π ‖ π_ref) over all {len(_microscope()[0].completions)} completions of the "
             "microscope, weighted by their exact π: unbiased",
             lambda fn: torch.tensor(exact_mean(fn)), kl,
             (biased("k2", "that is k2 = ½ (log r)²: ≥ 0 and close for nearby policies, but not unbiased "
                           "(its GRADIENT is the KL's, its value is not)"),
              biased("inverted", "the ratio is upside down: r = π_ref / π (then E_π[r] = 1, which is what cancels)"),
              biased("no_minus_one", f"the −1 is missing: E_π[r] = 1 per token, so the bias is E|y| = {length:.6g} tokens"),
              biased("sign", "the sign: k3 = (r − 1) − log r, never negative")),
             atol=1e-6),
        Case("three tokens by hand, r = π_ref/π = [1/2, 2, 1]: every sample ≥ 0",
             lambda fn: fn(_t(lp), _t(rf)),
             [[ln2 - 0.5, 1 - ln2, 0.0]],  # r − 1 − ln r: −½ + ln 2;  1 − ln 2;  0
             (Mistake([[ln2, -ln2, 0.0]], "that is k1 = log π − log π_ref: unbiased too (the microscope passed it), but "
                                          "negative where π_ref > π; k3 adds r − 1, whose mean under π is 0, and that "
                                          "makes every sample ≥ 0 (and its variance smaller near π_ref)"),
              Mistake([[ln2**2 / 2, ln2**2 / 2, 0.0]], "that is k2 = ½ (log r)²"),
              Mistake([[1 - ln2, ln2 - 0.5, 0.0]], "the ratio is upside down: r = π_ref / π"))),
    ]


def check_calc_k3_kl(fn: Callable) -> None:
    """Check `calc_k3_kl(logprobs, ref_logprobs) -> [batch, gen_len]`: Schulman's k3 per token, graded by the
    exact-gradient microscope (its bias computed exactly, over every completion) and by hand.

    Recognises: k2, the ratio inverted, the −1 missing, the sign (each with its exact bias); k1.
    """
    try:
        _run("calc_k3_kl", fn, _k3_cases(), REFERENCES["calc_k3_kl"])
    except AssertionError as e:
        try:
            bias = exact_mean(fn) - _microscope()[4]
        except Exception:  # fn raised, or returned no per-token numbers: the case's message says which
            bias = None
        if bias is None or not math.isfinite(bias):
            raise
        verdict = "unbiased" if abs(bias) <= 1e-6 else f"biased by {bias:+.6g}"
        raise AssertionError(f"{e}\n  the microscope: your estimator is {verdict} (exact: E_π[Σ_t k] − KL over "
                             "every completion)") from None


# --- paired_difference_interval ---------------------------------------------------------------


def t_quantile_closed_form(p: float, df: int) -> float:
    """Student's t quantile where it has a closed form (Hill 1970): df 1 (Cauchy), 2 and 4."""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    if df == 4:
        alpha = 4 * p * (1 - p)
        q = math.cos(math.acos(math.sqrt(alpha)) / 3) / math.sqrt(alpha)
        return math.copysign(2 * math.sqrt(q - 1), p - 0.5)
    raise ValueError(f"t_quantile_closed_form: df must be 1, 2 or 4; got {df}")


T_TABLE: dict[tuple[float, int], float] = {(0.975, 3): 3.182446305284263, (0.95, 5): 2.015048372669157}
"""Student's t quantiles t_{p, df} without a closed form that the cases need (a t table's, to 16 digits)."""


def t_quantile_by_hand(p: float, df: int) -> float:
    """t_{p, df} from the closed form (df 1, 2, 4) or `T_TABLE`."""
    return T_TABLE[(p, df)] if (p, df) in T_TABLE else t_quantile_closed_form(p, df)


def _mean_sd(x: list[float], ddof: int = 1) -> tuple[float, float]:
    m = sum(x) / len(x)
    return m, math.sqrt(sum((v - m) ** 2 for v in x) / (len(x) - ddof))


def _intervals(a: list[float], b: list[float], confidence: float) -> dict[str, list[float]]:
    """The answer and each mistake's (d̄, low, high) on a, b."""
    n, q = len(a), (1 + confidence) / 2
    d = [x - y for x, y in zip(a, b)]
    mean, s = _mean_sd(d)
    _, s_pop = _mean_sd(d, ddof=0)
    s_unpaired = math.sqrt(_mean_sd(a)[1] ** 2 / n + _mean_sd(b)[1] ** 2 / n)
    z = math.sqrt(2) * torch.erfinv(torch.tensor(2 * q - 1, dtype=torch.float64)).item()
    t = t_quantile_closed_form(q, n - 1)

    def around(half: float) -> list[float]:
        return [mean, mean - half, mean + half]

    out = {"right": around(t * s / math.sqrt(n)), "z": around(z * s / math.sqrt(n)),
           "n": around(t * s_pop / math.sqrt(n)), "sd": around(t * s), "unpaired": around(t * s_unpaired),
           "df_n": around(t_quantile_by_hand(q, n) * s / math.sqrt(n))}
    if 2 * n - 2 in (1, 2, 4):
        out["unpaired_pooled"] = around(t_quantile_closed_form(q, 2 * n - 2) * s_unpaired)
    return out


def _paired_cases() -> list[Case]:
    # PPO vs Online DPO, three seeds (made up, asymmetric): d = [0.2, 0.05, 0.25], d̄ = 1/6,
    # s_d² = (0.0333² + 0.1167² + 0.0833²) / 2 = 0.0108333, s_d = 0.10408, s_d/√3 = 0.0600925,
    # t_{0.975, 2} = 0.95 / √(2 · 0.975 · 0.025) = 4.302653: half-width 0.258557 (with t_{0.975, 3} = 3.182446: 0.191241)
    a3, b3 = [0.9, 0.8, 0.85], [0.7, 0.75, 0.6]
    # five seeds at 90 %: d = [0.3, −0.1, 0.2, 0.4, 0.0], d̄ = 0.16, s_d = 0.207364, t_{0.95, 4} = 2.131847
    a5, b5 = [1.3, 0.9, 1.0, 1.6, 0.5], [1.0, 1.0, 0.8, 1.2, 0.5]
    # two seeds: d = [0.5, 0.1], s_d = 0.282843, t_{0.975, 1} = tan(0.475 π) = 12.706205
    a2, b2 = [2.0, 1.5], [1.5, 1.4]

    def case(name: str, a: list[float], b: list[float], confidence: float) -> Case:
        iv = _intervals(a, b, confidence)
        hints = {"z": "you used the normal's z (1.96 at 95 %): with n seeds the spread is estimated, so it is Student's "
                      "t with n − 1 degrees of freedom (t_{0.975, 2} = 4.30), wider for small n",
                 "n": "the standard deviation divided by n: the deviations are from the sample's own mean, so divide "
                      "by n − 1 (Bessel; statistics.stdev, torch's default std)",
                 "sd": "that is ± t · s: the interval of the MEAN is ± t · s / √n",
                 "df_n": "t with n degrees of freedom: s_d is estimated from the n differences around their own "
                         "mean, which uses one up, so t has n − 1 (t_{0.975, 2} = 4.30 for three seeds, not "
                         "t_{0.975, 3} = 3.18)",
                 "unpaired": "unpaired: you compared the two means as independent samples (√(s_a²/n + s_b²/n)); the "
                             "seeds are shared, so take d_i = a_i − b_i seed by seed and the spread of d",
                 "unpaired_pooled": "unpaired: a two-sample t interval (pooled, 2n − 2 degrees of freedom); the seeds "
                                    "are shared, so take d_i = a_i − b_i seed by seed and the spread of d"}
        return Case(name, lambda fn: torch.tensor([float(v) for v in fn(list(a), list(b), confidence=confidence)]),
                    iv["right"], tuple(Mistake(iv[k], hint) for k, hint in hints.items() if k in iv))

    return [
        case("three seeds, 95 %", a3, b3, 0.95),
        case("five seeds, 90 %", a5, b5, 0.90),
        case("two seeds, 95 %", a2, b2, 0.95),
        Case("one seed: no spread, so no interval",
             lambda fn: torch.tensor([float(v) for v in fn([0.8], [0.6], confidence=0.95)]),
             [0.2, -math.inf, math.inf],
             (Mistake([0.2, math.nan, math.nan], "one seed has no spread (s is 0/0): the interval is (−inf, +inf), "
                                                 "and a verdict over it is never resolved"),
              Mistake([0.2, 0.2, 0.2], "one seed has no spread, not zero spread: the interval is (−inf, +inf)")),
             if_not_finite="one seed has no spread: the interval is (−inf, +inf), not NaN"),
    ]


def check_paired_difference_interval(fn: Callable) -> None:
    """Check `paired_difference_interval(a, b, confidence=0.95) -> (d̄, low, high)`: the paired difference of
    two methods over the same seeds with Student's t interval (the solution:
    `rlhf_scratch.course.solutions_capstones`; the package's with a verdict: `studies.stats.difference`).

    Recognises: unpaired (independent-samples) intervals, z for t, t with n degrees of freedom for n − 1,
    the std over n, ± t·s, NaN for one seed.
    """
    _run("paired_difference_interval", fn, _paired_cases(), REFERENCES["paired_difference_interval"])


CASES: dict[str, Callable[[], list[Case]]] = {
    "make_rloo_algorithm": _make_rloo_algorithm_cases,
    "calc_k3_kl": _k3_cases,
    "paired_difference_interval": _paired_cases,
}
"""Each exercise's cases, by function name."""
