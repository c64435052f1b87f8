"""The page of `find.py` (`python -m rlhf_scratch.studies.hacking.find`): the verdict over seeds
(`summarise`) and find.html (`write_page`, built from `rlhf_scratch.pages.html`): the verdict
sentence first, the seeds' table, then per run the decomposition of the proxy–gold gap, the top
movers, the finding's contexts and description, the causal check, and what was not checked.

Over seeds: each run's reduction of the mean excess by ablating its finding, ē(policy) − ē(ablated),
against the mean reduction of its random candidates, paired by run (`stats.paired_difference`), and
the reductions' own 95 % interval (`stats.mean_interval`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rlhf_scratch.pages.html import esc, page, rounded, table
from rlhf_scratch.studies.stats import finite_or_none, mean_interval, paired_difference

NOT_CHECKED = (
    "SAE or crosscoder features (interp.sae needs SAE Lens and minutes of training per site); the candidates "
    "are the policy's MLP neurons, its heads' output norms, one mean-difference direction per layer and the top movers.",
    "Combinations: each candidate explains the excess alone; the causal check ablates the one top finding.",
    "Other proxies (length, token) and other algorithms: this page reads the runs it was given.",
    "Random neurons are of the finding's layer with their own mean ablated, not rescaled to the finding's output norm; "
    "random directions are unit vectors, as the finding's is.",
)


def _interval(values: list[float]) -> dict:
    i = mean_interval(values)
    return {"mean": i.mean, "low": finite_or_none(i.low), "high": finite_or_none(i.high), "n": i.n}


def _span(x: dict) -> str:
    if x.get("low") is None:
        return f"{x['mean']:+.3f} (one seed, no interval)"
    return f"{x['mean']:+.3f} (95 % interval {x['low']:+.3f} to {x['high']:+.3f}, n = {x['n']})"


def summarise(per_run: dict[str, dict]) -> dict:
    """The seeds' findings, how many are about repetition, and the causal check over seeds."""
    names = list(per_run)
    themes = [(r["finding"]["description"]["best"] or {}).get("theme", "none") for r in per_run.values()]
    stats = [(r["finding"]["description"]["best"] or {}).get("name", "none") for r in per_run.values()]
    out = {"runs": names, "themes": themes, "statistics": stats,
           "excess": _interval([r["policy"]["excess"] for r in per_run.values()]),
           "repetition_runs": sum(t == "repetition" for t in themes)}
    for key in CAUSAL:
        causal = [r[key] for r in per_run.values() if key in r]
        if causal:
            out[key] = causal_over_runs(causal)
    out["verdict"] = verdict(out)
    return out


CAUSAL = {"causal": "the top finding", "causal_top": "the top internal candidates together",
          "causal_direction": "the top direction"}
"""The causal checks: the finding alone, the top `FindSettings.n_ablate` internal candidates together,
and the layer direction u_L with the largest share (against random unit directions at its layer)."""


def causal_over_runs(causal: list[dict]) -> dict:
    """Reductions of the excess by the ablation and by the random ones, their intervals, and
    reduction − random paired by run; the share of each run's excess removed."""
    red, rnd = [c["reduction"] for c in causal], [c["random_reduction"] for c in causal]
    share = [c["reduction"] / c["before"]["excess"] for c in causal]
    diff = paired_difference(red, rnd)
    return {"reduction": _interval(red), "random_reduction": _interval(rnd), "share_removed": _interval(share),
            "paired": {"mean": diff.mean, "low": finite_or_none(diff.low), "high": finite_or_none(diff.high),
                       "n": diff.a.n, "p": finite_or_none(diff.p), "resolved": diff.resolved}}


def verdict(s: dict) -> str:
    """The page's first sentence: what was found, on how many seeds, and how sure the causal check is."""
    n = len(s["runs"])
    common, k = Counter(s["statistics"]).most_common(1)[0]
    found = (f"on {s['repetition_runs']} of {n} runs the feature that explains most of the proxy's excess over gold "
             f"tracks repetition" if s["repetition_runs"] else f"on none of {n} runs does the top finding track repetition")
    text = (f"Interpretability, not told the flaw: {found} (the commonest best-matching statistic: {common}, {k} of {n}); "
            f"the policies' mean excess over gold is {_span(s['excess'])} in proxy units.")
    for key, what in CAUSAL.items():
        if key in s:
            c, d = s[key], s[key]["paired"]
            sure = "resolved (the interval excludes 0)" if d["resolved"] else f"not resolved at n = {d['n']}"
            text += (f" Mean-ablating {what} lowers the excess by {_span(c['reduction'])}, random candidates of the same "
                     f"kinds by {_span(c['random_reduction'])}; paired, ablation − random = {_span(d)}: {sure}.")
    return text


def _rows_table(rows: list[dict], keys: list[tuple[str, str]]) -> str:
    return table([[r[k] if isinstance(r[k], str) else f"{r[k]:+.3f}" for k, _ in keys] for r in rows],
                 [h for _, h in keys], row_headers=False)


def _run_section(name: str, r: dict) -> list[str]:
    f, p = r["finding"], r["policy"]
    best = f["description"]["best"]
    parts = [f"<h2>{esc(name)} (seed {r['seed']})</h2>",
             f"<p>Reference: proxy {r['reference']['proxy']:+.3f}, gold g′ {r['reference']['gold']:+.3f}, rep₃ "
             f"{r['reference']['rep3']:.3f} (n = {r['n_reference']}). Policy: proxy {p['proxy']:+.3f}, gold g′ "
             f"{p['gold']:+.3f}, rep₃ {p['rep3']:.3f}, excess ē = {p['excess']:+.3f} ± {1.96 * p['excess_se']:.3f} "
             f"(n = {r['n_policy']}). Gold on the proxy's scale: ĝ = {r['gold_scale']['mu_p']:+.3f} + (g′ − "
             f"{r['gold_scale']['mu_g']:+.3f}) · {r['gold_scale']['sd_p']:.3f} / {r['gold_scale']['sd_g']:.3f}.</p>",
             "<h3>The decomposition: candidates by the share of the excess they explain</h3>",
             _rows_table(r["decomposition"], [("label", "candidate"), ("kind", "kind"), ("share", "share of ē"),
                                              ("r2_within", "r² within groups"), ("slope", "β_w"),
                                              ("gap_activation", "ā₁ − ā₀")]),
             "<h3>Top movers (Δp on the policy's own samples)</h3>",
             table([[t, f"{v:+.4f}"] for t, v in r["movers"]["promoted"]], ["promoted token", "Δp"], row_headers=False),
             table([[m["label"], f"{m['share']:+.3f}", f"{m['r2_within']:.3f}"] for m in r["movers"]["rows"]],
                   ["mover as a candidate", "share of ē", "r² within"], row_headers=False),
             f"<h3>The finding: {esc(f['label'])} (share {f['share']:+.2f}, r² within {f['r2_within']:.2f})</h3>",
             f"<p>Best-matching surface statistic: <b>{esc(best['name'] if best else 'none')}</b>"
             + (f" (r = {best['r']:+.2f}, theme {esc(best['theme'])})" if best else "")
             + f"; the same describer on the finding's activation shuffled over samples: "
             f"{esc((f['description_shuffled'] or {}).get('name', 'none'))}.</p>",
             table([[t["name"], t["theme"], f"{t['r']:+.3f}", f"{t['p']:.1e}"]
                    for t in f["description"]["table"][:8]], ["statistic", "theme", "r", "p"], row_headers=False),
             "<p>Where it is most active (policy's samples; the token in [[ ]]):</p>",
             table([[f"{v:.2f}", c] for v, c in f["contexts"]], ["activation", "context"], row_headers=False),
             "<p>Tokens its output direction promotes: " + esc(", ".join(f"{t!r} {v:+.2f}" for t, v in f["promotes"])) + "</p>",
             "<p>Policy samples: " + esc(" | ".join(r["samples"]["policy"])) + "</p>"]
    for key, what in CAUSAL.items():
        if key not in r:
            continue
        c = r[key]

        def row(name: str, x: dict, reduction: str) -> list[str]:
            return [name, f"{x['excess']:+.3f}", f"{x['proxy']:+.3f}", f"{x['gold']:+.3f}", f"{x['rep3']:.3f}", reduction]
        rows = [row("policy", c["before"], ""), row(f"{', '.join(c['ablated_candidates'])} ablated", c["ablated"],
                                                    f"{c['reduction']:+.3f}")]
        rows += [row(f"as many random ones ablated ({i + 1})", x, f"{x['reduction']:+.3f}") for i, x in enumerate(c["random"])]
        parts += [f"<h3>The causal check: {esc(what)} mean-ablated while sampling (same prompts and seed)</h3>",
                  table(rows, ["condition", "excess ē", "proxy", "gold g′", "rep₃", "reduction"], row_headers=False)]
    return parts


def write_page(result: dict, path: Path) -> Path:
    """find.html: the verdict, the seeds' table, each run's sections, what was not checked."""
    s, runs = result["summary"], result["runs"]
    title = "Finding the hack with interpretability"
    head = [[n, str(r["seed"]), f"{r['policy']['excess']:+.3f}", r["finding"]["label"], f"{r['finding']['share']:+.2f}",
             (r["finding"]["description"]["best"] or {}).get("name", "none"),
             *[f"{r[k]['reduction']:+.3f} / {r[k]['random_reduction']:+.3f}" if k in r else "" for k in CAUSAL]]
            for n, r in runs.items()]
    parts = [f"<h1>{esc(title)}</h1>", f"<p><b>{esc(s['verdict'])}</b></p>",
             table(head, ["run", "seed", "excess ē", "top finding", "share of ē", "it tracks",
                          "reduction: finding / random", "reduction: top internal / random",
                          "reduction: top direction / random"], row_headers=False),
             "<p>e = proxy − ĝ per sample, ĝ gold g′ = g − c·rep₃ put on the proxy's scale with the mean and s.d. of the "
             "reference's samples (so ē = 0 on them). A candidate's share of ē is β_w (ā₁ − ā₀) / (ē₁ − ē₀), β_w the "
             "slope of e on its activation fitted within each group (reference's samples, policy's samples).</p>"]
    for name, r in runs.items():
        parts += _run_section(name, rounded(r))
    parts += ["<h2>What was not checked</h2>", "<ul>" + "".join(f"<li>{esc(x)}</li>" for x in NOT_CHECKED) + "</ul>"]
    Path(path).write_text(page(title, parts))
    return Path(path)
