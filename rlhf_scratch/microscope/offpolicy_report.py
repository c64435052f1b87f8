"""The off-policy section of exact.md and exact.html, and its figure exact_offpolicy.png, from
`offpolicy_run.measure_off_policy`'s dict (exact.json's "off_policy")."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rlhf_scratch.pages.html import fmt, new_figure, save_figure


def _cell(e: dict) -> str:
    """'error (cos)': ‖E g − ∇‖/‖∇‖ and cos(E g, ∇); where Monte-Carlo also the size along ∇ ± s.e. and
    how many s.e. it is from 1 (the bias in s.e.)."""
    cos = "—" if e.get("cos_to_true") is None else fmt(e["cos_to_true"])
    se = e.get("norm_ratio_along_true_se")
    mc = f", size {fmt(e['norm_ratio_along_true'])} ± {fmt(se)} ({e['bias_in_se']:+.1f} s.e.)" if se else ""
    return f"{fmt(e['rel_error'])} ({cos})" + mc


SAMPLER_HEADER = ("sampler", "what it is", "KL(q‖π)", "KL(π‖q)", "π's mass on q's support", "E_q[w²]", "max w",
                  "P_q(w > 3)", "tokens outside 1 ± ε")


def sampler_rows(off: dict) -> list[list[str]]:
    """How far each sampler is from the learner (exact; w = π(y)/q(y))."""
    return [[name, f["about"], fmt(f["kl_sampler_learner"]), fmt(f["kl_learner_sampler"]), fmt(f["support_mass"]),
             fmt(f["w_second_moment"]), fmt(f["w_max"]), fmt(f["p_w_above_3"]), fmt(f["token_clip_share"])]
            for name, f in off["samplers"].items()]


def matrix(table: dict, cell) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one row per estimator, one column per sampler (blank where not measured there)."""
    samplers = list(table)
    names = list(dict.fromkeys(n for s in samplers for n in table[s]))
    rows = [[n, next(table[s][n]["about"] for s in samplers if n in table[s]),
             *(cell(table[s][n]) if n in table[s] else "" for s in samplers)] for n in names]
    return ["estimator", "what it is", *samplers], rows


def variance_cell(e: dict) -> str:
    return fmt(e["variance"])


def curve_header(off: dict) -> list[str]:
    first = next(iter(next(iter(off["curves"].values())).values()))
    return ["sampler", "mode", *("C = ∞" if p["C"] is None else f"C = {p['C']:g}" for p in first)]


def curve_rows(off: dict, samplers: list[str] | None = None) -> list[list[str]]:
    """Each mode's 'error / variance per completion' over C, for each sampler."""
    rows = []
    for s in samplers or list(off["curves"]):
        for mode, points in off["curves"][s].items():
            rows.append([s, mode, *(f"{fmt(p['rel_error'])} / {fmt(p['variance'])}" for p in points)])
    return rows


def intro(off: dict) -> list[str]:
    s, learner = off["settings"], off["learner"]
    return [
        f"The learner is the main policy moved {max(s['staleness'])} steps of length {s['stale_step']} along the true "
        f"gradient of the {s['reward']} reward (J {' → '.join(f'{j:.3f}' for j in learner['J_path'])}); staleness k samples "
        f"from the policy k steps back. Every estimator's expectation under the sampler q is exact (a sum over every "
        f"completion, q as the weights) but for the group rows (Monte-Carlo, n = {s['draws']:,} batches of G = "
        f"{s['num_generations']} per prompt, seeds {', '.join(f'{k} {v}' for k, v in s['draw_seeds'].items())}). "
        f"A = r − V_q(x) (PPO: A_t from V_q per prefix); ε = {s['clip']}; w = π(y)/q(y). Cells: ‖E g − ∇‖/‖∇‖ (cos).",
    ]


def sections(off: dict) -> list[tuple[str, Sequence[str], list[list[str]]]]:
    """(title, header, rows) of every off-policy table, in the page's order."""
    est_header, est_rows = matrix(off["estimators"], _cell)
    var_header, var_rows = matrix(off["estimators"], variance_cell)
    kl_header, kl_rows = matrix(off["kl"], _cell)
    return [
        ("Off-policy: the samplers", SAMPLER_HEADER, sampler_rows(off)),
        ("Off-policy: every estimator against ∇J of the learner, error (cos)", est_header, est_rows),
        ("Off-policy: variance per draw (one completion; the group rows: one batch)", var_header, var_rows),
        ("Off-policy: the IS modes over C_max, error / variance per completion", curve_header(off), curve_rows(off)),
        ("Off-policy: the KL estimators against ∇KL(π‖π_ref) of the learner (k3_loss: ∇KL(π_ref‖π)), error (cos)",
         kl_header, kl_rows),
    ]


CURVES = {"no_correction": "no correction", "sequence_truncate_Cinf": "full IS", "token_truncate_Cinf": "per-token IS",
          "token_truncate_C2": "TIS per token, C 2", "sequence_mask_C3": "TRL default: sequence_mask, C 3",
          "ppo_clip": "PPO clip", "grpo_token_clip": "GRPO token clip", "rloo_clip": "RLOO clip",
          "rloo_group": "RLOO, G = 8 (MC)", "grpo_group": "GRPO, TRL defaults (MC)"}
KL_CURVES = {"k1_reward": "learner's k1 in the reward", "k1_reward_sampler": "sampler's k1 in the reward",
             "k1_reward_is": "k1 in the reward × π/q", "k2_loss": "k2 loss", "k3_loss_rho": "ρ k3 loss (TRL)"}


def plot(off: dict, path: Path) -> Path:
    """Three panels: each estimator's error against ∇J over staleness; each IS mode's error against its
    variance as C_max grows, at the largest staleness; the KL estimators' error over staleness."""
    fig, (ax_k, ax_c, ax_kl) = new_figure(1, 3, figsize=(17.0, 5.2))
    ks = [0, *off["settings"]["staleness"]]
    stale = [f"stale_{k}" for k in ks]
    for name, label in CURVES.items():
        err = [off["estimators"][s][name]["rel_error"] for s in stale]
        ax_k.plot(ks, err, marker="o", label=label, ls="--" if name.endswith("group") else "-")
    ax_k.set_xlabel("staleness k (updates)")
    ax_k.set_ylabel("‖E g − ∇J‖ / ‖∇J‖")
    ax_k.set_title("error against the learner's ∇J over staleness\n(exact; dashed: Monte-Carlo)", fontsize=10)
    ax_k.legend(fontsize=7)
    last = stale[-1]
    for mode, points in off["curves"][last].items():
        ax_c.plot([p["variance"] for p in points], [p["rel_error"] for p in points], marker="o", label=mode)
        for p in points:
            ax_c.annotate("∞" if p["C"] is None else f"{p['C']:g}", (p["variance"], p["rel_error"]), fontsize=7,
                          textcoords="offset points", xytext=(3, 3))
    base = off["estimators"][last]["no_correction"]
    ax_c.scatter([base["variance"]], [base["rel_error"]], color="k", zorder=3, label="no correction")
    ax_c.set_xlabel("variance per completion")
    ax_c.set_ylabel("‖E g − ∇J‖ / ‖∇J‖")
    ax_c.set_title(f"the IS modes over C_max at staleness {ks[-1]} (labels: C)", fontsize=10)
    ax_c.legend(fontsize=7)
    for name, label in KL_CURVES.items():
        ax_kl.plot(ks, [off["kl"][s][name]["rel_error"] for s in stale], marker="o", label=label)
    ax_kl.set_xlabel("staleness k (updates)")
    ax_kl.set_ylabel("‖E g − ∇KL‖ / ‖∇KL‖")
    ax_kl.set_title("the KL penalty's gradient under staleness\nagainst ∇KL(π‖π_ref) of the learner", fontsize=10)
    ax_kl.legend(fontsize=7)
    return save_figure(fig, path)
