"""The over-optimisation study's report, from what is in its folder: each run's curve (gold and
proxy gain over the reference against d = √KL), the table (a row per method and proxy size, mean ±
95 % interval over seeds at matched d, the Gao fit), the verdicts, the KL-penalty sweep against early
stopping, the figures and the samples; written as table.md, table.json and index.html.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from rlhf_scratch.pages.html import esc, figure, new_figure, save_figure, table
from rlhf_scratch.studies.overoptimization.formulas import at_d, fit_gao, unsupported_fit
from rlhf_scratch.studies.overoptimization.plan import BON, SWEEP_ALGO, StudyArgs, bon_file, label
from rlhf_scratch.studies.overoptimization.run import SAMPLES_FILE, START_FILE
from rlhf_scratch.studies.runner import (
    INTERVAL_NOTE,
    Unit,
    draw_band,
    interval_cell,
    markdown_table,
    verdict_html,
    write_report,
)
from rlhf_scratch.studies.stats import finite_or_none, mean_interval, paired_difference, verdict

ACCURACY_FILE = "proxy_accuracy.json"
"""OUT/proxy_accuracy.json: each proxy's accuracy against gold on the common test pairs."""


def write_study_report(args: StudyArgs, out: Path, accuracy: dict[str, float], times: dict[str, float]) -> Path:
    """table.md, table.json and index.html from what is in OUT: the verdicts, the curves, their fits,
    the samples."""
    sizes, methods, seeds = args.sizes(), args.methods(), args.seed_list()
    curves = collect_curves(out, sizes, methods, seeds)
    rows = make_table(curves, accuracy, sizes, methods)
    verdicts = study_verdicts(rows, sizes)
    sweep = sweep_curves(out, args)
    sweep_rows = kl_sweep_rows(sweep)
    sweep_verdicts = kl_sweep_verdicts(sweep_rows, min(sizes))
    precision = evaluation_precision(curves, sweep)
    precision_note = "" if not precision else (
        f" Each RL point: {args.eval_prompts} held-out prompts × {args.eval_per_prompt} samples; its gold's 95 % "
        f"sampling interval (prompts held fixed) is at most ± {precision['max']:.3f} (median ± {precision['median']:.3f}, "
        f"{precision['points']} points).")
    header, cells = table_cells(rows)
    body = ["<h1>Reward-model over-optimisation (Gao et al. 2022), tiny preset</h1>", verdict_html(verdicts),
            "<p>Gold = the tiny classifier's log-odds; proxies = Bradley–Terry reward models trained on "
            f"gold-labelled pairs. Gains are over the reference policy, d = √KL. Seeds: {', '.join(map(str, seeds))} "
            "(the first made the pairs and the proxies). Matched d: the largest d every run against that proxy "
            f"reached; each run's gold there, read off its curve.{esc(precision_note)} {esc(INTERVAL_NOTE)}</p>",
            figure(plot_study(curves, sizes, methods, out)), "<h2>Table</h2>", table(cells, header=header),
            *sweep_section(sweep, sweep_rows, sweep_verdicts, min(sizes), out),
            f"<h2>Wall time (s)</h2><pre>{esc(json.dumps(times, indent=1))}</pre>",
            f"<h2>Samples at the gold peak and at the end (seed {args.data_seed})</h2>",
            *samples_section(out, [u for u in args.rl_units() if u.seed == args.data_seed and u.setting[0] == "rm"])]
    return write_report(out, title="Reward-model over-optimisation",
                        table_md=markdown_table(header, cells) + f"\n\n{INTERVAL_NOTE}{precision_note}",
                        data={"verdicts": verdicts, "rows": rows, "proxy_accuracy": accuracy, "times_s": times,
                              "curves": curves, "evaluation_precision": precision,
                              "kl_sweep": {"proxy": min(sizes), "verdicts": sweep_verdicts, "rows": sweep_rows,
                                           "curves": sweep}}, body=body)


def reference_means(out: Path, size: int, seeds: list[int]) -> tuple[float, float] | None:
    """Mean gold and proxy of the reference policy on the held-out prompts, from best-of-n's
    samples of every seed that has them (bon_max per prompt and seed: a far tighter estimate than
    one phase's evaluation), or None."""
    files = [bon_file(out, seed) for seed in seeds if bon_file(out, seed).is_file()]
    if not files:
        return None
    firsts = [json.loads(f.read_text())["sizes"][str(size)] for f in files]
    return statistics.fmean(s["gold"][0] for s in firsts), statistics.fmean(s["proxy"][0] for s in firsts)


def collect_curves(out: Path, sizes: list[int], methods: list[str], seeds: list[int]) -> dict:
    """{method: {size: {seed: {"d": [...], "gold": [...], "proxy": [...]}}}} of every run there is,
    gold and proxy as gains over the reference policy (its best-of-n samples' means when there are
    any, pooled over the seeds: the same policy; else each run's phase 0)."""
    curves: dict = {}
    for method in methods:
        curves[method] = {}
        for n in sizes:
            reference = reference_means(out, n, seeds)
            runs = {}
            for seed in seeds:
                if method == BON:
                    if not bon_file(out, seed).is_file():
                        continue
                    bon = json.loads(bon_file(out, seed).read_text())
                    s = bon["sizes"][str(n)]
                    gold0, proxy0 = reference
                    runs[str(seed)] = {"d": bon["d"], "gold": [g - gold0 for g in s["gold"]],
                                       "proxy": [p - proxy0 for p in s["proxy"]], "n": bon["n"]}
                    continue
                curve = run_curve(out / "runs" / Unit(method, seed, ("rm", n)).name, reference)
                if curve:
                    runs[str(seed)] = curve
            if runs:
                curves[method][str(n)] = runs
    return curves


def run_curve(run_dir: Path, reference: tuple[float, float] | None) -> dict | None:
    """One RL run's evaluated points, phase 0 (the reference) first: d, gold and proxy as gains over
    `reference` (else over its own phase 0), gold's standard error, the phase; None if not started."""
    if not (run_dir / START_FILE).is_file():  # not started (--report)
        return None
    start = json.loads((run_dir / START_FILE).read_text())
    phases = [m for m in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "study/d" in m]
    points = [start] + phases
    gold0, proxy0 = reference or (start["study/gold"], start["study/proxy"])
    return {"d": [m["study/d"] for m in points], "gold": [m["study/gold"] - gold0 for m in points],
            "proxy": [m["study/proxy"] - proxy0 for m in points],
            "gold_se": [m.get("study/gold_se", math.nan) for m in points], "phase": [0] + [m["phase"] for m in phases]}


def sweep_curves(out: Path, args: StudyArgs) -> dict[str, dict[str, dict]]:
    """{β: {seed: curve}} of the KL-penalty sweep's runs there are, against the smallest proxy; the
    grid's PPO run against that proxy joins at the β its config.json holds (PPO's default)."""
    n, seeds = min(args.sizes()), args.seed_list()
    reference = reference_means(out, n, seeds)
    sweep: dict[str, dict[str, dict]] = {}
    planned = args.rl_units()
    units = [u for u in planned if u.setting[0] == "b"]
    if SWEEP_ALGO in args.methods() and units:
        units += [u for u in planned if u.method == SWEEP_ALGO and u.setting == ("rm", n)]
    for unit in units:
        run_dir = out / "runs" / unit.name
        curve = run_curve(run_dir, reference)
        if curve:
            beta = unit.value if unit.setting[0] == "b" else json.loads((run_dir / "config.json").read_text())["beta"]
            sweep.setdefault(f"{beta:g}", {})[str(unit.seed)] = curve
    return dict(sorted(sweep.items(), key=lambda kv: float(kv[0])))


def kl_sweep_rows(sweep: dict[str, dict[str, dict]]) -> list[dict]:
    """A row per β > 0 of the sweep: each seed's final d and gold, and the β = 0 run's gold where that
    run of the same seed first reached the same d (its early-stopped checkpoint there, `at_d`); the
    gap = final gold − that, paired over the seeds where β = 0 reached the d (`stats.paired_difference`)."""
    zero = sweep.get("0", {})
    rows = []
    for beta, runs in sweep.items():
        if float(beta) == 0:
            continue
        final_d = {seed: c["d"][-1] for seed, c in runs.items()}
        final_gold = {seed: c["gold"][-1] for seed, c in runs.items()}
        stopped = {seed: at_d(zero[seed]["d"], zero[seed]["gold"], final_d[seed]) for seed in runs if seed in zero}
        paired = [seed for seed, g in stopped.items() if g is not None]
        row = {"beta": float(beta), "seeds": [int(x) for x in runs], "n": len(runs),
               "final_d": {**mean_interval(list(final_d.values())).as_json(), "values": list(final_d.values())},
               "final_gold": {**mean_interval(list(final_gold.values())).as_json(), "values": list(final_gold.values())},
               "paired_seeds": [int(x) for x in paired], "beyond_beta0": sorted(int(x) for x in set(runs) - set(paired))}
        if paired:
            diff = paired_difference([final_gold[x] for x in paired], [stopped[x] for x in paired])
            row["stopped_gold"] = [stopped[x] for x in paired]
            row["gap"] = {"mean": diff.mean, "low": finite_or_none(diff.low), "high": finite_or_none(diff.high),
                          "half_width": finite_or_none(diff.half_width), "p": finite_or_none(diff.p), "n": len(paired),
                          "resolved": diff.resolved}
        rows.append(row)
    return rows


def kl_sweep_verdicts(rows: list[dict], n: int) -> list[str]:
    """A sentence per β > 0: is its final point on the early-stopping curve (β = 0 at the same KL)?"""
    out = []
    for r in rows:
        head = (f"PPO with β = {r['beta']:g} against the {n}-pair proxy ends at d = {r['final_d']['mean']:.2f}, "
                f"gold {r['final_gold']['mean']:+.3f}")
        gap = r.get("gap")
        if not gap:
            out.append(f"{head}: further than the β = 0 run ever went, so no early-stopped checkpoint to hold it against.")
            continue
        spread = (f"{gap['mean']:+.3f} (95 % interval {gap['low']:+.3f} to {gap['high']:+.3f}, n = {gap['n']} seeds, "
                  f"p = {gap['p']:.2g})" if gap["half_width"] is not None else f"{gap['mean']:+.3f} (n = 1 seed)")
        if gap["resolved"]:
            side = "above" if gap["mean"] > 0 else "below"
            what = "better" if gap["mean"] > 0 else "worse"
            out.append(f"{head}: {side} the β = 0 run's checkpoint at the same KL by {spread}; the penalty did "
                       f"{what} than stopping early.")
        else:
            out.append(f"{head}: not distinguishable from the β = 0 run stopped at the same KL, gap {spread}: "
                       "not resolved, whether the penalty did better or worse than stopping early.")
    return out


def plot_kl_sweep(sweep: dict[str, dict[str, dict]], rows: list[dict], out: Path) -> Path:
    """Gold gain against d: the β = 0 run's checkpoints (its band over seeds) and each β > 0 run's
    final point (mean over seeds, with its 95 % intervals in d and in gold)."""
    fig, axes = new_figure(1, 1, figsize=(5.5, 4.2), squeeze=False)
    ax = axes[0][0]
    zero = list(sweep.get("0", {}).values())
    if zero:
        draw_band(ax, [c["d"] for c in zero], [c["gold"] for c in zero], color="black", marker="o", ms=3,
                  label=f"β = 0, its checkpoints ({len(zero)} seeds)")
        draw_band(ax, [c["d"] for c in zero], [c["proxy"] for c in zero], band=False, color="black", linestyle="--",
                  alpha=0.5, label="β = 0, proxy")
    for r in rows:
        d, g = r["final_d"], r["final_gold"]
        ax.errorbar([d["mean"]], [g["mean"]], xerr=[[d["half_width"] or 0]], yerr=[[g["half_width"] or 0]],
                    fmt="s", capsize=3, label=f"β = {r['beta']:g}, final ({r['n']} seeds)")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set(title="KL penalty or early stopping (PPO)", xlabel="d = √KL(π‖π_ref)  (nats^½)", ylabel="gold gain over π_ref")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save_figure(fig, out / "kl_sweep.png")


def sweep_section(sweep: dict, rows: list[dict], verdicts: list[str], n: int, out: Path) -> list[str]:
    """The page's KL-penalty section: the verdicts, the figure, the table (a sweep of β = 0 alone: its
    curve, further in KL, and no table)."""
    if not sweep:
        return []
    header = ["β", "n", "final d", "final gold Δ", "β = 0 at that d", "gap (paired)"]
    cells = [[f"{r['beta']:g}", str(r["n"]), interval_cell(r["final_d"]["values"], "{:.2f}"),
              interval_cell(r["final_gold"]["values"]), interval_cell(r.get("stopped_gold", [])),
              (f"{r['gap']['mean']:+.3f}" + (f" ± {r['gap']['half_width']:.3f}, p = {r['gap']['p']:.2g}"
                                             if r["gap"]["half_width"] is not None else "")) if r.get("gap") else "—"]
             for r in rows]
    return [f"<h2>KL penalty or early stopping: PPO against the {n}-pair proxy</h2>", verdict_html(verdicts),
            figure(plot_kl_sweep(sweep, rows, out)), *([table(cells, header=header)] if rows else [])]


def evaluation_precision(curves: dict, sweep: dict) -> dict | None:
    """Over every evaluated RL point after phase 0: the largest and the median 95 % half-width of its
    gold (1.96 · its standard error, prompts held fixed: `overoptimization_run.gold_standard_error`)."""
    runs = [c for by_size in curves.values() for runs in by_size.values() for c in runs.values() if "gold_se" in c]
    runs += [c for runs in sweep.values() for c in runs.values()]
    widths = [1.96 * se for c in runs for se in c["gold_se"][1:] if math.isfinite(se)]
    if not widths:
        return None
    return {"max": max(widths), "median": statistics.median(widths), "points": len(widths)}




def matched_d(curves: dict, size: int) -> float | None:
    """The largest d that every run against the `size`-pair proxy reached (each method, each seed)."""
    reach = [max(c["d"]) for runs in curves.values() for c in runs.get(str(size), {}).values()]
    return min(reach) if reach else None


PER_SEED = ("gold_at_matched_d", "gold_at_rl_matched_d", "peak_gold", "peak_d", "final_gold", "final_proxy", "final_d")
"""What a row measures once per seed (its mean, interval and n in the table; a row where a seed has
no value, best-of-n beyond its largest n, leaves that measure out)."""


def run_numbers(c: dict, d_match: float, d_rl: float | None) -> dict[str, float | None]:
    """One run's numbers: gold at the matched d and at the RL-matched d, its highest gold and where,
    and where it ended."""
    peak = max(range(len(c["gold"])), key=lambda i: c["gold"][i])
    return {"gold_at_matched_d": at_d(c["d"], c["gold"], d_match),
            "gold_at_rl_matched_d": None if d_rl is None else at_d(c["d"], c["gold"], d_rl),
            "peak_gold": c["gold"][peak], "peak_d": c["d"][peak],
            "final_gold": c["gold"][-1], "final_proxy": c["proxy"][-1], "final_d": c["d"][-1]}


def rl_matched_d(curves: dict, size: int) -> float | None:
    """The largest d that every RL run against the `size`-pair proxy reached: best-of-n stops at
    --bon-max, and the RL algorithms are compared again where they all went further."""
    return matched_d({m: runs for m, runs in curves.items() if m != BON}, size)


def make_table(curves: dict, accuracy: dict, sizes: list[int], methods: list[str]) -> list[dict]:
    """A row per (method, proxy size) with runs: its seeds, each of `PER_SEED` as its mean, 95 %
    interval and per-seed values, and the Gao fit through the points of every seed."""
    d_match = {n: matched_d(curves, n) for n in sizes}
    d_rl = {n: rl_matched_d(curves, n) for n in sizes}
    rows = []
    for method in methods:
        for n in sizes:
            runs = curves[method].get(str(n))
            if not runs:
                continue
            ds = [d for c in runs.values() for d in c["d"]]
            fit = fit_gao(ds, [g for c in runs.values() for g in c["gold"]], "bon" if method == BON else "rl") or {}
            why_not = unsupported_fit(fit, ds)
            if why_not:
                fit = {}
            per_seed = [run_numbers(c, d_match[n], d_rl[n]) for c in runs.values()]
            row = {"method": method, "rm_pairs": n, "rm_gold_accuracy": accuracy.get(str(n)),
                   "seeds": [int(seed) for seed in runs], "n": len(runs), "matched_d": d_match[n],
                   "rl_matched_d": d_rl[n]}
            for key in PER_SEED:
                values = [numbers[key] for numbers in per_seed]
                row[key] = None if None in values else {**mean_interval(values).as_json(), "values": values}
            rows.append({**row, **{k: fit.get(k) for k in ("alpha", "beta", "d_star", "R_star")},
                         "fit": why_not or "fitted", "points": len(ds)})
    return rows


def study_verdicts(rows: list[dict], sizes: list[int]) -> list[str]:
    """The page's first lines, one per proxy size: which method's gold gain is highest at the matched
    d, named only when the seeds resolve it (`stats.verdict`, paired over seeds)."""
    sentences = []
    for n in sizes:
        mine = [r for r in rows if r["rm_pairs"] == n]
        if not mine:
            continue
        what = f"gold gain at matched KL (d = {mine[0]['matched_d']:.2f}) against the {n}-pair proxy"
        groups = {label(r["method"]): dict(zip(r["seeds"], r["gold_at_matched_d"]["values"])) for r in mine}
        sentences.append(verdict(groups, what).sentence)
        rl = [r for r in mine if r["method"] != BON and r["gold_at_rl_matched_d"]]
        if len(rl) > 1 and rl[0]["rl_matched_d"] > mine[0]["matched_d"] + 1e-9:
            what = (f"gold gain among the RL algorithms at matched KL (d = {rl[0]['rl_matched_d']:.2f}, the largest every "
                    f"RL run reached) against the {n}-pair proxy")
            groups = {label(r["method"]): dict(zip(r["seeds"], r["gold_at_rl_matched_d"]["values"])) for r in rl}
            sentences.append(verdict(groups, what).sentence)
    return sentences




def _f(x, digits: int = 3) -> str:
    return "—" if x is None else ("∞" if x == math.inf else f"{x:.{digits}f}")


def table_cells(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the table, formatted: the same in table.md and on the page. A measured cell is
    the mean over the row's n seeds ± its 95 % interval (`runner.interval_cell`)."""
    def cell(r: dict, key: str, digits: int = 3) -> str:
        return interval_cell(r[key]["values"], f"{{:.{digits}f}}")

    def rl_cell(r: dict) -> str:
        return "—" if not r.get("gold_at_rl_matched_d") else f"{cell(r, 'gold_at_rl_matched_d')} (d {r['rl_matched_d']:.2f})"

    header = ["method", "RM pairs", "RM acc. vs gold", "n", "gold Δ at matched d", "gold Δ at RL-matched d",
              "peak gold Δ (at d)", "final gold Δ", "final proxy Δ", "final d", "α", "β", "d* (fit)", "R* (fit)", "fit"]
    return header, [[label(r["method"]), str(r["rm_pairs"]), _f(r["rm_gold_accuracy"]), str(r["n"]),
                     f"{cell(r, 'gold_at_matched_d')} (d {r['matched_d']:.2f})", rl_cell(r),
                     f"{cell(r, 'peak_gold')} ({_f(r['peak_d']['mean'], 2)})", cell(r, "final_gold"),
                     cell(r, "final_proxy"), cell(r, "final_d", 2), _f(r["alpha"]), _f(r["beta"]), _f(r["d_star"], 2),
                     _f(r["R_star"]), r["fit"]] for r in rows]


def plot_study(curves: dict, sizes: list[int], methods: list[str], out: Path) -> Path:
    """One panel per method: gold gain (solid, with its 95 % band over seeds) and proxy gain (dashed)
    against d = √KL, one colour per proxy size, the fitted Gao form dotted. Over seeds each point is
    the mean of the seeds' d and gain at that phase (at that n for best-of-n); one seed draws its line."""
    import numpy as np
    from matplotlib import colormaps

    fig, axes = new_figure(1, len(methods), figsize=(4.2 * len(methods), 3.8), squeeze=False)
    colours = colormaps["viridis"](np.linspace(0.1, 0.85, len(sizes)))
    for ax, method in zip(axes[0], methods):
        for colour, n in zip(colours, sizes):
            runs = list(curves[method].get(str(n), {}).values())
            if not runs:
                continue
            seeds = f", {len(runs)} seeds" if len(runs) > 1 else ""
            ds = [c["d"] for c in runs]
            draw_band(ax, ds, [c["gold"] for c in runs], color=colour, marker="o", ms=2.5,
                      label=f"gold, RM {n} pairs{seeds}")
            draw_band(ax, ds, [c["proxy"] for c in runs], band=False, color=colour, linestyle="--", alpha=0.8,
                      label=f"proxy, RM {n} pairs")
            all_d = [d for c in runs for d in c["d"]]
            fit = fit_gao(all_d, [g for c in runs for g in c["gold"]], "bon" if method == BON else "rl")
            if fit and not unsupported_fit(fit, all_d):
                d = np.linspace(1e-3, max(all_d) or 1e-3, 60)
                r = d * (fit["alpha"] - fit["beta"] * (d if method == BON else np.log(d)))
                ax.plot(d, r, ":", color=colour, lw=1)
        ax.axhline(0, color="grey", lw=0.6)
        ax.set(title=label(method), xlabel="d = √KL(π‖π_ref)  (nats^½)", ylabel="reward gain over π_ref")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return save_figure(fig, out / "overoptimization.png")


def samples_section(out: Path, units: list[Unit]) -> list[str]:
    """The page's samples of each RL run: at its gold peak and at its end."""
    parts = []
    for unit in units:
        path = out / "runs" / unit.name / SAMPLES_FILE
        if not path.is_file():
            continue
        evals = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        peak = max(evals, key=lambda e: e["study/gold"])
        parts.append(f"<h3>{esc(label(unit.method))}, RM {unit.value} pairs, seed {unit.seed}</h3>")
        for title, e in (("gold peak", peak), ("end", evals[-1])):
            lines = "\n".join(f"[gold {s['gold']:+.2f} proxy {s['proxy']:+.2f}] {s['prompt']}|{s['completion']}"
                              for s in e["samples"])
            parts.append(f"<p><b>{title}</b>: phase {e['phase']}, gold {e['study/gold']:.3f}, proxy "
                         f"{e['study/proxy']:.3f}, d {e['study/d']:.2f}</p><pre>{esc(lines)}</pre>")
    return parts
