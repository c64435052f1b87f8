"""The features page's other levels of the diff, beside the SAE: weights, mean activations, crosscoder.

`other_levels(reference, tuned, sae, hook_name, tokens, attend, levels)` returns, as plain numbers,

- "weights":    per parameter ‖ΔW‖_F / ‖W‖_F and the rank of ΔW (`interp.model_diff.weight_diffs`);
- "adl":        the Activation Difference Lens on `levels.adl_texts` (`interp.model_diff`), read through
                the tuned model's logit lens, the SAE's decoder and (with a crosscoder) its decoder
                differences d^tuned − d^ref;
- "crosscoder": with `levels.crosscoder` set, a BatchTopK crosscoder (`interp.crosscoder`) trained on
                both models' activations at the site over `levels.crosscoder_texts` plus the diff's
                sequences, judged on the diff's sequences plus the snippet texts: counts of shared /
                reference-only / tuned-only latents, every latent's Δ_norm and scaling ratios ν_ε, ν_r,
                and the top latents of each model with their top-activating snippets and logit effect;
- "heads":      with `levels.heads` set, the directions PPO's value head and a reward model built on
                this LM read in ln_final.hook_normalized (`interp.head_reads`), through the tuned
                model's unembedding and the dictionaries at a site that reads the same vector, and one
                line for each reward that reads text, not this model's residual.

`levels_headline(S)` and `levels_html(S)` turn them into the page's lines and sections.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Int
from torch import Tensor
from transformer_lens import HookedTransformer

from interp.crosscoder import (
    REF,
    TUNED,
    CrosscoderSettings,
    classify_latents,
    crosscoder_counts,
    delta_norm,
    firing_stats,
    latent_scaling,
    paired_activations,
    paired_text_activations,
    scaling_confirms,
    train_crosscoder,
)
from interp.feature_diff import final_ln_scale, promoted_tokens, real_positions, site_activations, top_activating
from interp.head_reads import HEAD_SITE, HeadReads, head_reads
from interp.model_diff import activation_difference_lens, weight_diffs, weight_summary
from interp.settings import ADL_K, CROSSCODER_POSITIONS
from rlhf_scratch.pages.html import Html, esc, table


@dataclass
class DiffLevels:
    """What the other levels read (`python -m interp.features` fills it from its flags)."""

    adl_texts: Sequence[str] = ()
    """Unrelated texts for the Activation Difference Lens (none: no ADL)."""
    adl_k: int = ADL_K
    """First real tokens of each text the ADL averages over."""
    crosscoder: CrosscoderSettings | None = None
    """None: no crosscoder."""
    crosscoder_texts: Sequence[str] = ()
    """Texts whose positions (up to crosscoder_positions) the crosscoder trains on, besides the diff's sequences."""
    crosscoder_positions: int = CROSSCODER_POSITIONS
    heads: HeadReads | None = None
    """The value head and the reward model to read (None: not read)."""


@torch.no_grad()
def other_levels(reference: HookedTransformer, tuned: HookedTransformer, sae, hook_name: str,
                 tokens: Int[Tensor, "batch pos"], attend: Bool[Tensor, "batch pos"], levels: DiffLevels,
                 snippet_texts: Sequence[str] = (), top_n: int = 10, progress: bool = True,
                 sae_alive: Bool[Tensor, " d_sae"] | None = None) -> dict:
    """Weights, ADL and (optionally) the crosscoder for the features page (module docstring).
    `sae_alive` leaves the SAE's dead features out of the ADL's matches."""
    out: dict = {"weights": weight_summary(weight_diffs(reference, tuned))}
    dictionaries: dict = {"SAE": (sae.W_dec.detach(), sae_alive) if sae_alive is not None else sae.W_dec.detach()}
    at_site = {"SAE": (sae.W_dec.detach(), sae_alive, hook_name)}
    if levels.crosscoder is not None:
        t0 = time.time()
        cc_out, cc = _crosscoder(reference, tuned, hook_name, tokens, attend, levels, list(snippet_texts), top_n, progress)
        cc_out["seconds"] = time.time() - t0
        out["crosscoder"] = cc_out
        alive = torch.tensor([lab != "dead" for lab in cc_out["per_latent"]["label"]])
        dictionaries["crosscoder d^tuned − d^ref"] = ((cc.W_dec[TUNED] - cc.W_dec[REF]).detach(), alive)
        at_site["crosscoder d^tuned"] = (cc.W_dec[TUNED].detach(), alive, hook_name)
    if levels.adl_texts:
        out["adl"] = activation_difference_lens(reference, tuned, hook_name, list(levels.adl_texts), levels.adl_k,
                                                dictionaries=dictionaries)
    if levels.heads is not None:
        hidden = site_activations(tuned, HEAD_SITE, tokens, attend)[real_positions(tuned, tokens, attend)]
        out["heads"] = head_reads(tuned, levels.heads, hidden, at_site)
    return out


def _crosscoder(reference, tuned, hook_name, tokens, attend, levels: DiffLevels, snippet_texts: list[str],
                top_n: int, progress: bool):
    diff_x = paired_activations(reference, tuned, hook_name, tokens, attend)
    parts = [diff_x]
    if levels.crosscoder_texts:
        parts.insert(0, paired_text_activations(reference, tuned, hook_name, list(levels.crosscoder_texts),
                                                levels.crosscoder_positions))
    if progress:
        print(f"crosscoder: {sum(p.shape[0] for p in parts)} positions cached, training", file=sys.stderr)
    cc, log = train_crosscoder(torch.cat(parts), levels.crosscoder, progress)
    judge = [diff_x]
    if snippet_texts:
        judge.append(paired_text_activations(reference, tuned, hook_name, snippet_texts, 10**9))
    x = torch.cat(judge)
    freq, mean = firing_stats(cc, x)
    dn = delta_norm(cc.W_dec.detach())
    labels = classify_latents(dn, freq > 0)
    scaling = latent_scaling(cc, x)
    scale = {REF: final_ln_scale(reference, tokens, attend), TUNED: final_ln_scale(tuned, tokens, attend)}
    models = {REF: reference, TUNED: tuned}

    def encode(toks: Tensor) -> Tensor:
        pair = torch.stack([site_activations(reference, hook_name, toks), site_activations(tuned, hook_name, toks)], -2)
        return cc.encode(pair.flatten(0, 1)).view(*toks.shape, -1)

    top: dict[str, list[int]] = {}
    for label in ("tuned-only", "reference-only", "shared"):
        members = [j for j, lab in enumerate(labels) if lab == label]
        top[label] = sorted(members, key=lambda j: -float(freq[j]))[: top_n if label != "shared" else 3]
    shown = [j for js in top.values() for j in js]
    snippets = top_activating(reference, encode, snippet_texts, shown) if snippet_texts and shown else {}

    def latent(j: int) -> dict:
        m = int(scaling.own[j])
        return {"latent": j, "label": labels[j], "delta_norm": float(dn[j]), "freq": float(freq[j]),
                "mean_activation": float(mean[j]), "own": "tuned" if m == TUNED else "reference",
                "nu_error": float(scaling.nu_error[j]), "nu_recon": float(scaling.nu_recon[j]),
                "confirmed_by_scaling": scaling_confirms(scaling, j),
                "promotes": promoted_tokens(models[m], cc.W_dec[m, j].detach(), scale[m]),
                "snippets": snippets.get(j, [])}

    counts = crosscoder_counts(labels)
    specific = [j for j, lab in enumerate(labels) if lab in ("tuned-only", "reference-only")]
    return {
        "settings": log.pop("settings"), "training": log, "positions_judged": x.shape[0], "counts": counts,
        "confirmed_by_scaling": {lab: sum(scaling_confirms(scaling, j) for j in specific if labels[j] == lab)
                                 for lab in ("tuned-only", "reference-only")},
        "top": {lab: [latent(j) for j in js] for lab, js in top.items()},
        "per_latent": {"label": labels, "delta_norm": dn, "freq": freq, "nu_error": scaling.nu_error,
                       "nu_recon": scaling.nu_recon, "beta_error": scaling.beta_error, "beta_recon": scaling.beta_recon},
    }, cc


# --- the page --------------------------------------------------------------------------------------


def _num(x: float | None, spec: str) -> str:
    """`x` formatted, or "n/a" for what the JSON holds as null (nan, ±inf: a relative update from a zero weight)."""
    return "n/a" if x is None or x != x or x in (float("inf"), float("-inf")) else format(x, spec)


def levels_headline(S: dict) -> list[str]:
    """One line per level for the page's findings."""
    lines = []
    w = S["weights"]
    if w["top"]:
        t = w["top"][0]
        lines.append(f"Weights: {w['n_matrices_moved']} matrices moved; the largest relative update is {t['name']} "
                     f"({_num(t['relative_update'], '.3g')}); over the moved matrices the median share of min(m, n) needed for 99 % "
                     f"of ‖ΔW‖² is {_num(w['median_rank_99_fraction'], '.2f')} (1: full-rank updates, near 0: low-rank).")
    if "adl" in S:
        a = S["adl"]
        lines.append(f"Activation Difference Lens (first {a['k']} tokens of {a['n_texts']} unrelated texts): |δ̄| = "
                     f"{a['mean_delta_norm']:.3f}; through the tuned logit lens it promotes "
                     + ", ".join(repr(tok) for tok, _ in a["logit_lens"]["promoted"][:6]) + " and suppresses "
                     + ", ".join(repr(tok) for tok, _ in a["logit_lens"]["suppressed"][:6]) + ".")
    if "crosscoder" in S:
        c = S["crosscoder"]
        n = c["counts"]
        lines.append(f"Crosscoder ({c['settings']['d_latent']} latents, k {c['settings']['k']}): {n['shared']} shared, "
                     f"{n['reference-only']} reference-only ({c['confirmed_by_scaling']['reference-only']} confirmed by latent "
                     f"scaling), {n['tuned-only']} tuned-only ({c['confirmed_by_scaling']['tuned-only']} confirmed), "
                     f"{n['other']} in between, {n['dead']} dead; fraction of variance unexplained "
                     f"{c['training']['fvu_ref']:.3f} (reference) / {c['training']['fvu_tuned']:.3f} (tuned).")
    if "heads" in S:
        for h in S["heads"]["heads"]:
            ll = h["logit_lens"]
            lines.append(f"The {h['name']} reads ({h['method']}) a direction that promotes "
                         + ", ".join(repr(tok) for tok, _ in ll["promoted"][:6]) + " and suppresses "
                         + ", ".join(repr(tok) for tok, _ in ll["suppressed"][:6]) + " in the tuned unembedding"
                         + "".join(f"; closest {name} feature {m[0]['feature']} (cosine {m[0]['cosine']:+.3f})"
                                   for name, m in h["dictionaries"].items() if m)
                         + "".join(f"; the {name} is at {site}, not at {S['heads']['site']}: logit lens only"
                                   for name, site in h["other_sites"].items()) + ".")
        lines += S["heads"]["notes"]
    return lines


def levels_html(S: dict) -> list[str]:
    """The page's sections for the other levels."""
    parts = []
    w = S["weights"]
    parts.append(
        "<h2>Weights: how much each matrix moved, and in how many directions</h2>"
        "<p>Relative update ‖ΔW‖_F / ‖W_ref‖_F; effective rank exp(H) of the normalised singular values of ΔW "
        "(Roy &amp; Vetterli); r90 / r99: singular values holding 90 % / 99 % of ‖ΔW‖²; numerical rank against "
        "min(m, n). Attention weights as the layer's whole map.</p>"
        + table([(d["name"], "×".join(map(str, d["shape"])), _num(d["relative_update"], ".3g"),
                  "" if d["effective_rank"] is None else f"{d['effective_rank']:.1f}",
                  d["rank_90"] if d["rank_90"] is not None else "", d["rank_99"] if d["rank_99"] is not None else "",
                  "" if d["full_rank"] is None else f"{d['numerical_rank']} / {d['full_rank']}") for d in w["top"]],
                header=["parameter", "shape", "relative update", "effective rank", "r90", "r99", "numerical rank"]))
    if "adl" in S:
        a = S["adl"]
        ll = a["logit_lens"]
        parts.append(
            f"<h2>Activation Difference Lens</h2><p>δ̄: the mean of h_tuned − h_ref at {esc(a['site'])} over the first "
            f"{a['k']} real tokens of {a['n_texts']} texts (|δ_j| by position: "
            + ", ".join(f"{v:.3f}" for v in a["delta_norms"]) + "), through the tuned model's unembedding at its mean "
            "final-norm scale, and its closest dictionary directions.</p>"
            + table([(f"{p[0]!r} {p[1]:+.2f}", f"{s[0]!r} {s[1]:+.2f}") for p, s in zip(ll["promoted"], ll["suppressed"])],
                    header=["promoted", "suppressed"], row_headers=False)
            + "".join(f"<h3>{esc(name)}</h3>" + table(
                [(m["feature"], f"{m['cosine']:+.3f}", f"{m['projection']:+.3f}") for m in rows],
                header=["feature", "cosine with δ̄", "projection δ̄ · d / |d|"]) for name, rows in a["dictionaries"].items()))
    if "crosscoder" in S:
        c = S["crosscoder"]
        parts.append(
            "<h2>Crosscoder: shared, reference-only and tuned-only latents</h2>"
            f"<p>Counts: {esc(c['counts'])}. Δ_norm = ½((|d^tuned| − |d^ref|) / max + 1): reference-only &lt; 0.1, "
            "shared 0.4–0.6, tuned-only &gt; 0.9. Latent scaling (Minder et al. 2025): ν_ε and ν_r near 0 mean the other "
            "model truly lacks the latent's direction; near 1, a shrinkage or decoupling artifact. Confirmed: both &lt; 0.5 "
            "(our cut).</p>")
        for label, rows in c["top"].items():
            if not rows:
                continue
            parts.append(f"<h3>{esc(label)}</h3>" + table(
                [(r["latent"], _num(r["delta_norm"], ".3f"), _num(r["nu_error"], ".3f"), _num(r["nu_recon"], ".3f"),
                  "yes" if r["confirmed_by_scaling"] else "no", f"{r['freq']:.3f}",
                  ", ".join(f"{tok!r} {v:+.2f}" for tok, v in r["promotes"]),
                  Html("<br>".join(esc(f"{a:.2f}: {snip}") for a, snip in r["snippets"]))) for r in rows],
                header=["latent", "Δ_norm", "ν_ε", "ν_r", "confirmed", "fires", "promotes (its own model's unembedding)",
                        "top-activating snippets"]))
    if "heads" in S:
        parts += _heads_html(S["heads"])
    return parts


def _heads_html(H: dict) -> list[str]:
    parts = [f"<h2>The value head and the reward model: which directions they read</h2><p>Both read "
             f"<code>{esc(H['site'])}</code> (ĥ, what the unembedding reads). A linear head reads its weight w exactly; "
             "PPO's MLP value head is read by its mean gradient g = mean ∇_ĥ V over the tuned model's real positions on "
             "the diff's sequences, with its spread (mean cosine of the per-position gradients with g; 1: one direction "
             "everywhere). Logit lens: the tuned model's logit change per unit of ĥ along the direction. Dictionary: its "
             "features closest by cosine, where it reads ĥ or the last block's residual (there the direction is c(g), "
             "centred as the final norm centres).</p>"]
    parts += [f"<p>{esc(note)}</p>" for note in H["notes"]]
    for h in H["heads"]:
        ll = h["logit_lens"]
        parts.append(f"<h3>{esc(h['name'])}</h3><p>{esc(h['reads'])}; direction: {esc(h['method'])}, |direction| "
                     f"{h['norm']:.3g}, spread {h['spread']:.3f}.</p>"
                     + table([(f"{p[0]!r} {p[1]:+.2f}", f"{q[0]!r} {q[1]:+.2f}") for p, q in zip(ll["promoted"], ll["suppressed"])],
                             header=["promoted", "suppressed"], row_headers=False))
        for name, rows in h["dictionaries"].items():
            parts.append(f"<h4>{esc(name)}</h4>" + table(
                [(m["feature"], f"{m['cosine']:+.3f}", f"{m['projection']:+.3f}") for m in rows],
                header=["feature", "cosine with the direction", "projection direction · d / |d|"]))
        for name, site in h["other_sites"].items():
            parts.append(f"<p>The {esc(name)} reads <code>{esc(site)}</code>, another vector than ĥ: this head is read "
                         "through the logit lens only.</p>")
    return parts
