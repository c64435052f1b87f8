"""exact.json, exact.md (the tables), exact.png and exact_offpolicy.png (the figures) and exact.html (the
page) from `run.measure`'s dict (the off-policy section's tables and figure: `offpolicy_report`).

The figure is a `matplotlib.figure.Figure` made without pyplot (`rlhf_scratch.pages.html.new_figure`), the page
is built from `rlhf_scratch.pages.html` (`page`, `table`, `figure`), like every page of the package.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from rlhf_scratch.microscope import offpolicy_report as off
from rlhf_scratch.pages.html import esc, figure, fmt, new_figure, page, save_figure, table

TRUE_ABOUT = {
    "J": "∇J", "J_topk": "∇J under top-k", "J_T": "∇J under T", "kl_reverse": "∇KL(π‖π_ref)",
    "kl_forward": "∇KL(π_ref‖π)", "J_at_ref": "∇J at π = π_ref",
}


def finite(x):
    """`x` for strict JSON: NaN and ±inf -> None, recursively."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def with_se(entry: dict, key: str, nd: int = 4) -> str:
    """'value ± s.e.' where the entry has a Monte-Carlo s.e. for `key`, else the value."""
    se = entry.get(f"{key}_se")
    return fmt(entry[key], nd) + (f" ± {fmt(se, nd)}" if se is not None else "")


MAIN_HEADER = ("estimator", "what it is", "draw", "compared with", "cos", "‖E g‖/‖∇‖", "E g·∇/‖∇‖² (± s.e.)",
               "variance / draw", "d_length (± s.e.)", "… after the first token")


def cos_cell(e: dict) -> str:
    """cos(E[g], ∇F), or a dash where E[g] is zero to float precision (its direction is rounding noise)."""
    return "— (E g = 0)" if e.get("zero_mean") else fmt(e["cos_to_true"])


def main_rows(entries: dict) -> list[list[str]]:
    """One row per estimator of the main table."""
    rows = []
    for name, e in entries.items():
        draw = {"completion": "1 completion, exact", "pair": "1 pair, exact"}.get(e["unit"], f"1 batch, MC n={e['n']:,}")
        rows.append([name, e["about"], draw, TRUE_ABOUT.get(e["true"], e["true"]), cos_cell(e), fmt(e["norm_ratio"]),
                     with_se(e, "norm_ratio_along_true"), fmt(e["variance"]), with_se(e, "d_length"),
                     with_se(e, "d_length_after_first")])
    return rows


def by_reward_header(result: dict) -> list[str]:
    rewards = [result["environment"]["reward"], *result["by_reward"]]
    return ["estimator", *(f"{r}: cos, E g·∇/‖∇‖²" for r in rewards)]


def by_reward_rows(result: dict) -> list[list[str]]:
    """Each estimator's cos and size along the truth under every reward (the main one first)."""
    tables = [result["estimators"], *result["by_reward"].values()]
    return [[name, *(f"{cos_cell(t[name])}, {with_se(t[name], 'norm_ratio_along_true')}" for t in tables)]
            for name in result["estimators"]]


LESSON_HEADER = ("policy", "estimator", "d_length per unit of J gained (± s.e.)", "… from the rows after a right first token",
                 "… after a wrong first token")


def lesson_rows(lesson: dict) -> list[list[str]]:
    """The length lesson: tokens of expected length per unit of J the expected update gains, by where in θ."""
    rows = []
    for label, block in lesson.items():
        pol = block["policy"]
        head = f"{label} (J {pol['J']:.2f}, E[len] {pol['E_length']:.2f}: right {pol['E_length_right']:.2f}, wrong {pol['E_length_wrong']:.2f})"
        for name, e in block["estimators"].items():
            rows.append([head, name, with_se(e, "length_per_gain"), with_se(e, "length_per_gain_after_right"),
                         with_se(e, "length_per_gain_after_wrong")])
    return rows


KL_HEADER = ("estimator", "what it is", "cos to ∇KL(π‖π_ref)", "‖E g‖/‖∇KL(π‖π_ref)‖", "cos to ∇KL(π_ref‖π)",
             "‖E g‖/‖∇KL(π_ref‖π)‖", "variance / draw")


def kl_rows(entries: dict) -> list[list[str]]:
    """The KL estimators against both KL gradients."""
    return [[name, e["about"], fmt(e["cos_kl_reverse"]), fmt(e["norm_ratio_kl_reverse"]), fmt(e["cos_kl_forward"]),
             fmt(e["norm_ratio_kl_forward"]), fmt(e["variance"])]
            for name, e in entries.items() if "cos_kl_reverse" in e]


def markdown(header, rows) -> str:
    line = lambda cells: "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
    return "\n".join([line(header), "|" + "---|" * len(header), *map(line, rows)])


def plot(result: dict, path: Path) -> Path:
    """Three panels: each estimator's 1 − cos to its true gradient (log scale; a tick at the Monte-Carlo
    noise floor bias_se²/2); its E[g]·∇/‖∇‖² with ± 2 s.e. (1 = unbiased in size along the truth);
    the length lesson (ΔE[len] per unit of J gained, from the rows after the right and after a wrong
    first token, for each policy)."""
    entries = result["estimators"]
    names = list(entries)[::-1]
    fig, (ax_cos, ax_along, ax_len) = new_figure(1, 3, figsize=(16.0, 9.5), gridspec_kw={"width_ratios": [1.1, 0.8, 1.1]})
    y = list(range(len(names)))
    colors = ["tab:blue" if entries[n]["exact"] else "tab:orange" for n in names]
    zero = [entries[n].get("zero_mean", False) for n in names]  # E[g] = 0: no direction to compare
    floor = 1e-7
    gap = [floor if z else max(1 - entries[n]["cos_to_true"], floor) for n, z in zip(names, zero)]
    ax_cos.barh(y, gap, color=colors, left=0)
    for i, (n, z) in enumerate(zip(names, zero)):
        if z:
            ax_cos.text(2 * floor, i, "E[g] = 0", va="center", fontsize=7)
        elif not entries[n]["exact"]:
            ax_cos.plot([max(entries[n]["bias_se"] ** 2 / 2, floor)] * 2, [i - 0.4, i + 0.4], color="k", lw=1.2)
    ax_cos.set_xscale("log")
    ax_cos.set_xlim(floor, 3)
    ax_cos.set_yticks(y, names, fontsize=8)
    ax_cos.set_title("1 − cos(E[g], true gradient): 0 = its direction\nblue exact, orange Monte-Carlo (| noise floor)",
                     fontsize=10)
    along = [entries[n]["norm_ratio_along_true"] for n in names]
    err = [2 * (entries[n].get("norm_ratio_along_true_se") or 0.0) for n in names]
    top = 2.5
    ax_along.barh(y, [min(a, top) for a in along], xerr=err, color=colors)
    for i, a in enumerate(along):
        if a > top:
            ax_along.text(top, i, f" {a:.1f} →", va="center", ha="right", fontsize=7, color="w")
    ax_along.set_yticks(y, [], fontsize=8)
    ax_along.axvline(1.0, color="k", lw=0.8, ls=":")
    ax_along.axvline(0.0, color="k", lw=0.8)
    ax_along.set_xlim(-0.3, top)
    ax_along.set_title("E[g]·∇ / ‖∇‖² (± 2 s.e.)\n1 = the true gradient's size along it", fontsize=10)
    labels, wrong, right, wrong_err, right_err = [], [], [], [], []
    for label, block in reversed(result["length_lesson"].items()):
        for name, e in reversed(block["estimators"].items()):
            labels.append(f"{label}  {name}")
            wrong.append(e["length_per_gain_after_wrong"])
            right.append(e["length_per_gain_after_right"])
            wrong_err.append(2 * (e.get("length_per_gain_after_wrong_se") or 0.0))
            right_err.append(2 * (e.get("length_per_gain_after_right_se") or 0.0))
    z = list(range(len(labels)))
    ax_len.barh([i + 0.2 for i in z], wrong, height=0.4, xerr=wrong_err, color="tab:red", label="after a wrong first token")
    ax_len.barh([i - 0.2 for i in z], right, height=0.4, xerr=right_err, color="tab:green", label="after the right one")
    ax_len.set_yticks(z, labels, fontsize=8)
    ax_len.axvline(0.0, color="k", lw=0.8)
    ax_len.legend(fontsize=8, loc="lower left")
    ax_len.set_title("the length lesson (right/wrong reward): ΔE[len]\nper unit of J gained, rows after the first token",
                     fontsize=10)
    return save_figure(fig, path)


def intro(result: dict) -> list[str]:
    """The settings in a few lines."""
    env, s = result["environment"], result["settings"]
    pol = env["policy"]
    problems = f" (one-digit sums: {', '.join(env['problems'])})" if env.get("problems") else ""
    right = "π(right answer)" if env.get("problems") else "π(first = a)"
    return [
        f"vocabulary {' '.join(env['vocab'])} (EOS = <eos>), max_len {env['max_len']}, {env['prompts']} prompts{problems}: "
        f"{env['completions']:,} completions ({env['completions_per_prompt']:,} per prompt), a table of "
        f"{env['prefixes']} prefixes x {len(env['vocab'])} logits = {env['parameters']:,} parameters.",
        f"reward: {env['reward']} ({env['reward_about']}); {right} per prompt {', '.join(f'{p:.2f}' for p in pol['p_right'])}; "
        f"J {pol['J']:.4f}, E[len] {pol['E_length']:.4f}, KL(π‖π_ref) {pol['kl_reverse']:.4f}, KL(π_ref‖π) {pol['kl_forward']:.4f}.",
        f"batch: {env['batch']}; Monte-Carlo n = {s['draws']:,} batches per estimator (common to all); value function: "
        f"{env['value_function']}; top-k {s['top_k']}, temperature {s['temperature']}, GAE λ {s['gae_lambda']}, ε {s['clip']}, "
        f"DPO β {s['dpo_beta']}, seed {s['seed']}. Run time {result['seconds']:.0f} s.",
    ]


GROUPS_HEADER = ("estimator", "advantage", "token weight", "c per prompt", "cos, exact", "E g·∇/‖∇‖², exact",
                 "‖E g − ∇‖/‖∇‖, exact", "E g·∇/‖∇‖², MC ± s.e.", "z")


def groups_rows(groups: dict) -> list[list[str]]:
    """Each group estimator's exact expectation (0/1 reward, `groups`) beside its Monte-Carlo one."""
    return [[name, g["advantage"], g["token_weight"], ", ".join(fmt(c) for c in g["c_per_prompt"] or []) or "—",
             fmt(g["cos_to_true"]), fmt(g["norm_ratio_along_true"]), fmt(g["rel_error"]),
             f"{fmt(g['mc_norm_ratio_along_true'])} ± {fmt(g['mc_norm_ratio_along_true_se'])}", fmt(g["z"], 2)]
            for name, g in groups.items()]


def sections(result: dict) -> list[tuple[str, Sequence[str], list[list[str]]]]:
    """(title, header, rows) of each table after the main one; an environment's missing section is left out."""
    out = [("Under each reward", by_reward_header(result), by_reward_rows(result))]
    if result.get("exact_groups"):
        out.append(("The group estimators exactly (0/1 reward)", GROUPS_HEADER, groups_rows(result["exact_groups"])))
    out.append(("The KL estimators against both KLs", KL_HEADER, kl_rows(result["estimators"])))
    if result["one_token"] is not None:
        out.append(("… where a completion is one token (max_len = 1)", KL_HEADER, kl_rows(result["one_token"])))
    out.append(("The length lesson", LESSON_HEADER, lesson_rows(result["length_lesson"])))
    return out


def write_outputs(result: dict, out: Path) -> Path:
    """exact.json, exact.md, exact.png, exact_offpolicy.png (where there is an off-policy section),
    exact.html in `out`; returns the page's path."""
    (out / "exact.json").write_text(json.dumps(finite(result), indent=1, ensure_ascii=False))
    md = "\n\n".join([
        "# The exact-gradient microscope", *intro(result),
        "## Every estimator against its true gradient", markdown(MAIN_HEADER, main_rows(result["estimators"])),
        *(f"## {title}\n\n{markdown(header, rows)}" for title, header, rows in sections(result)),
    ])
    png = plot(result, out / "exact.png")
    body = [f"<h1>{esc('The exact-gradient microscope')}</h1>", *(f"<p>{esc(p)}</p>" for p in intro(result)),
            figure(png, "Every estimator against the truth"),
            "<h2>Every estimator against its true gradient</h2>", table(main_rows(result["estimators"]), MAIN_HEADER),
            *(f"<h2>{esc(title)}</h2>" + table(rows, header) for title, header, rows in sections(result))]
    offp = result["off_policy"]
    if offp is not None:
        md, body = with_off_policy(offp, out, md, body)
    (out / "exact.md").write_text(md + "\n")
    path = out / "exact.html"
    path.write_text(page("The exact-gradient microscope", body))
    return path


def with_off_policy(offp: dict, out: Path, md: str, body: list[str]) -> tuple[str, list[str]]:
    """The off-policy section added to the markdown and the page, its figure written."""
    md += "\n\n" + "\n\n".join(["## Off-policy: the sampler is not the learner", *off.intro(offp),
                                  *(f"### {title}\n\n{markdown(header, rows)}" for title, header, rows in off.sections(offp)),
                                  "### Off-policy: one line per knob", "\n".join(f"- {line}" for line in offp["advice"])])
    off_png = off.plot(offp, out / "exact_offpolicy.png")
    body = [*body, "<h2>Off-policy: the sampler is not the learner</h2>", *(f"<p>{esc(p)}</p>" for p in off.intro(offp)),
            figure(off_png, "Off-policy: staleness, the IS modes over C, the KL under staleness"),
            *(f"<h3>{esc(title)}</h3>" + table(rows, header) for title, header, rows in off.sections(offp)),
            "<h3>One line per knob</h3>", "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in offp["advice"]) + "</ul>"]
    return md, body
