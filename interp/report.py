"""`python -m interp.report RUN_DIR`: what did RLHF change? An HTML report of interp's analyses.

Loads the run's reference and tuned models (`rlhf_scratch.runs.load_run`), runs logits,
residual and attention analyses on the run's prompt and a few fixed review prompts, and writes

    RUN_DIR/interp/report.html   self-contained (figures embedded), with the key numbers
    RUN_DIR/interp/*.png         the same figures as files
    RUN_DIR/interp/summary.json  the key numbers, machine-readable

`make_report(reference, tuned, prompts, out_dir, reward_fn=...)` is the same thing for any pair
of HookedTransformers with one config and tokenizer, without a run folder.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import os
import shutil
import tempfile
import sys
import time
from pathlib import Path

import torch

from interp import attention, logits, neurons, residual
from interp.probes import REVIEW_PROMPTS


# The CSS of every interp page (this report, interp.features' page).
PAGE_STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}"
              "table{border-collapse:collapse;font-size:90%}"
              "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}"
              "img{max-width:100%;border:1px solid #eee}figure{margin:1.5em 0}figcaption{color:#555;font-size:90%}")

STEPS = ("logits", "logit lens", "decomposition", "residual drift", "residual patching",
         "head DLA", "weight change", "head ablation", "head patching", "neurons", "attention patterns",
         "reward", "write")


# --- figures --------------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out_dir: Path, name: str) -> Path:
    path = out_dir / name
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def _heatmaps(
    panels: list[tuple[str, torch.Tensor]], out_dir: Path, name: str, unit: str,
    diverging: bool = True, own_scale: tuple[int, ...] = (),
) -> Path:
    """One layer x head heatmap per panel, sharing one colour scale except the panels in `own_scale`.

    Diverging colormaps are centred at 0.
    """
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels) + 0.8, 3.2), squeeze=False)

    def peak(i_s: list[int]) -> float:
        return max([float(panels[i][1].abs().nan_to_num().max()) for i in i_s] + [0.0]) or 1.0

    shared = peak([i for i in range(len(panels)) if i not in own_scale])
    for i, (ax, (title, data)) in enumerate(zip(axes[0], panels)):
        vmax = peak([i]) if i in own_scale else shared
        data = data.detach().cpu().numpy()
        kw = dict(cmap="RdBu", vmin=-vmax, vmax=vmax) if diverging else dict(cmap="viridis", vmin=0, vmax=vmax)
        im = ax.imshow(data, aspect="auto", **kw)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_xticks(range(data.shape[1]))
        ax.set_yticks(range(data.shape[0]))
        fig.colorbar(im, ax=ax, label=unit, shrink=0.85)
    return _save(fig, out_dir, name)


def _lines(x_labels: list[str], series: dict[str, list[float]], out_dir: Path, name: str, title: str, unit: str) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for label, values in series.items():
        ax.plot(range(len(values)), values, marker="o", label=label)
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xticks(range(len(x_labels)), x_labels, rotation=45, fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, out_dir, name)


def _bars(x_labels: list[str], series: dict[str, list[float]], out_dir: Path, name: str, title: str, unit: str) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.8, 3.4))
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series.items()):
        ax.bar([j + i * width for j in range(len(values))], values, width, label=label)
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(x_labels))], x_labels, rotation=45, fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, out_dir, name)


def _position_heatmap(fraction: torch.Tensor, sites: list[str], str_tokens: list[str], out_dir: Path, name: str) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(0.5 * len(str_tokens) + 2.5, 0.45 * len(sites) + 1.8))
    im = ax.imshow(fraction.nan_to_num().numpy(), cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
    ax.set_xticks(range(len(str_tokens)), [repr(t)[1:-1] for t in str_tokens], rotation=90, fontsize=7)
    ax.set_yticks(range(len(sites)), sites, fontsize=8)
    ax.set_title("fraction of the logit-diff gap recovered, patching one (site, position)", fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.85)
    return _save(fig, out_dir, name)


# --- the report -----------------------------------------------------------------------------------


def _round(x, nd: int = 4):
    """Floats rounded for JSON (nan -> None); recurses into lists and dicts."""
    if isinstance(x, torch.Tensor):
        x = x.tolist()
    if isinstance(x, float):
        return None if x != x else round(x, nd)
    if isinstance(x, (list, tuple)):
        return [_round(v, nd) for v in x]
    if isinstance(x, dict):
        return {k: _round(v, nd) for k, v in x.items()}
    return x


def _head_list(scores: torch.Tensor, k: int) -> list[dict]:
    """The top-k heads by |score| as {"head": "L1H2", "value": ...}; heads scoring exactly 0 are left out."""
    return [{"head": f"L{l}H{h}", "value": float(scores[l, h])} for l, h in attention.top_heads(scores, k)
            if float(scores[l, h]) != 0.0]


@torch.no_grad()
def make_report(
    reference,
    tuned,
    prompts: list[str],
    out_dir: str | Path,
    reward_fn=None,
    run_prompt: str | None = None,
    sentiment: logits.SentimentTokens | None = None,
    n_samples: int = 16,
    gen_len: int = 20,
    k_heads: int = 4,
    seed: int = 0,
    title: str = "What did RLHF change?",
    progress: bool = True,
) -> dict:
    """Run every analysis on `prompts` (the first is `run_prompt` when given) and write the report.

    Returns the summary (also written as summary.json). reward_fn=None skips the reward parts.
    """
    from tqdm.auto import tqdm

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    reference.eval()
    tuned.eval()
    run_prompt = run_prompt or prompts[0]
    prompts = [run_prompt] + [p for p in prompts if p != run_prompt]
    st = sentiment or logits.sentiment_tokens(reference)
    tokens, last = logits.prompt_tokens(reference, prompts)
    one = tokens[:1, : int(last[0]) + 1]
    str_one = reference.to_str_tokens(one[0])
    figures: list[tuple[str, Path, str]] = []  # (title, path, caption)
    S: dict = {"prompts": prompts, "sentiment_words": {"pos": list(st.pos_words), "neg": list(st.neg_words)}}
    t0 = time.time()
    bar = tqdm(STEPS, desc="interp report", disable=not progress, file=sys.stderr)
    step = iter(bar)

    def next_step():
        bar.set_postfix_str(next(step))

    def add(fig_title: str, path: Path, caption: str):
        figures.append((fig_title, path, caption))

    # 1. logits
    next_step()
    ref_logits, ref_cache = reference.run_with_cache(tokens)
    tuned_logits, tuned_cache = tuned.run_with_cache(tokens)
    ref_ld = logits.logit_diff(ref_logits, st, last)
    tuned_ld = logits.logit_diff(tuned_logits, st, last)
    kl = logits.next_token_kl(ref_logits, tuned_logits)
    mask = residual.real_position_mask(tokens, last)
    change = logits.logprob_change(ref_logits, tuned_logits, last)
    promoted, demoted = logits.top_token_changes(reference, change, 10)
    S["logit_diff"] = {"reference": ref_ld.mean().item(), "tuned": tuned_ld.mean().item(),
                       "per_prompt_reference": ref_ld, "per_prompt_tuned": tuned_ld}
    S["kl_next_token"] = {"mean_all_positions": ((kl * mask).sum() / mask.sum()).item(),
                          "mean_last_position": logits.at_last_pos(kl, last).mean().item()}
    S["sentiment_direction_cosine"] = logits.direction_cosine(reference, tuned, st)
    S["top_promoted"], S["top_demoted"] = promoted, demoted

    # 2. logit lens
    next_step()
    lens_ref, sites = residual.logit_lens_logit_diff(ref_cache, st, last)
    lens_tuned, _ = residual.logit_lens_logit_diff(tuned_cache, st, last)
    S["logit_lens"] = {"sites": sites, "reference": lens_ref.mean(1), "tuned": lens_tuned.mean(1)}
    series = {"reference": lens_ref.mean(1).tolist(), "tuned": lens_tuned.mean(1).tolist()}
    add("Logit lens",
        _lines(sites, series, out_dir, "logit_lens.png",
               "logit lens: the logit difference if the residual stopped here", "logit diff (nats)"),
        "Each model's accumulated residual at each site through its own ln_final and unembedding, "
        "on its own sentiment direction; mean over prompts, last token.")

    # 3. decomposition
    next_step()
    comp_ref, comp_labels = residual.component_logit_diff(ref_cache, st, last)
    comp_tuned, _ = residual.component_logit_diff(tuned_cache, st, last)
    S["decomposition"] = {"components": comp_labels, "reference": comp_ref.mean(1), "tuned": comp_tuned.mean(1)}
    series = {"reference": comp_ref.mean(1).tolist(), "tuned": comp_tuned.mean(1).tolist(),
              "tuned - reference": (comp_tuned - comp_ref).mean(1).tolist()}
    add("Residual decomposition",
        _bars(comp_labels, series, out_dir, "decomposition.png",
              "direct logit attribution of each component", "logit diff (nats)"),
        "The final residual split into embeddings, each attention layer and each MLP, plus the "
        "unembedding bias; a model's bars sum to its logit difference.")

    # 4. residual drift
    next_step()
    drift = residual.residual_drift(ref_cache, tuned_cache, tokens, last)
    S["residual_drift"] = {"sites": drift.labels, "cosine": drift.cosine, "diff_norm": drift.diff_norm,
                           "ref_norm": drift.ref_norm}
    series = {"|tuned - ref| / |ref|": (drift.diff_norm / drift.ref_norm).tolist(),
              "1 - cosine": (1 - drift.cosine).tolist()}
    add("Residual drift",
        _lines(drift.labels, series, out_dir, "residual_drift.png",
               "how far the tuned residual moved from the reference", "fraction"),
        "Per site, mean over prompts and positions.")

    # 5. residual patching
    next_step()
    patch = residual.residual_patching(reference, tuned, tokens, st, last)
    patch_pos = residual.residual_patching(reference, tuned, one, st, per_position=True)
    jumps = patch.fraction[1:] - patch.fraction[:-1]  # what block l adds: site l+1 minus site l
    S["residual_patching"] = {"sites": patch.labels, "fraction": patch.fraction, "effect": patch.effect,
                              "block_contribution": jumps}
    add("Residual patching",
        _bars(patch.labels, {"logit diff": patch.fraction.nan_to_num().tolist()}, out_dir,
              "patching_layers.png", "tuned residual patched into the reference at one site (all positions)",
              "fraction of gap recovered"),
        "0 = none of the tuned - reference logit-diff gap, 1 = all of it. At the final site the "
        "reference's unembedding reads the tuned residual: what is missing there is the unembedding's share.")
    add("Residual patching by position",
        _position_heatmap(patch_pos.fraction, patch_pos.labels, str_one, out_dir, "patching_positions.png"),
        f"Run prompt {run_prompt!r}, one (site, position) at a time.")

    # 6. head DLA
    next_step()
    dla_ref = attention.head_dla(ref_cache, st, last)
    dla_tuned = attention.head_dla(tuned_cache, st, last)
    dla_diff = dla_tuned - dla_ref
    S["head_dla"] = {"reference": dla_ref, "tuned": dla_tuned, "top_diff": _head_list(dla_diff, k_heads)}
    panels = [("reference", dla_ref), ("tuned", dla_tuned), ("tuned - reference", dla_diff)]
    add("Per-head direct logit attribution",
        _heatmaps(panels, out_dir, "head_dla.png", "nats", own_scale=(2,)),
        "Each head's output at the last token, through its model's own final-LN scale, on its own "
        "sentiment direction. The difference panel has its own colour scale. Heads whose weights did not "
        "change still differ a little when the final-LN scale changed.")

    # 7. weight change
    next_step()
    change = attention.head_weight_change(reference, tuned, relative=True)
    S["head_weight_change_relative"] = {k: _head_list(v, k_heads) for k, v in change.items()}
    add("Per-head weight change",
        _heatmaps(list(change.items()), out_dir, "head_weight_change.png", "|ΔW| / |W_ref|", diverging=False),
        "Frobenius norm of each head's weight change, relative to the reference's.")

    # 8. head ablation (tuned)
    next_step()
    means = attention.head_means(tuned, tokens, last)
    ablation = attention.head_ablation_effects(tuned, tokens, st, means, last)
    S["head_ablation"] = {"effect": ablation, "top": _head_list(ablation, k_heads)}
    add("Mean-ablation in the tuned model",
        _heatmaps([("Δ logit diff when ablated", ablation)], out_dir, "head_ablation.png", "nats"),
        "Each head's z replaced by its mean over the prompts, one head at a time.")

    # 9. head patching
    next_step()
    hp_effect, hp_fraction = attention.head_patching(reference, tuned, tokens, st, last)
    S["head_patching"] = {"fraction": hp_fraction, "top": _head_list(hp_effect, k_heads)}
    add("Head-output patching",
        _heatmaps([("fraction of gap recovered", hp_fraction.nan_to_num())], out_dir, "head_patching.png",
                  "fraction"),
        "One head's output (z·W_O) of the tuned model put into the reference, one head at a time.")

    # 9b. neurons: DLA per MLP neuron, activation change, what the most changed neuron reads
    next_step()
    n_ref, n_tuned = neurons.neuron_dla(ref_cache, st, last), neurons.neuron_dla(tuned_cache, st, last)
    n_diff = n_tuned - n_ref
    act_change = neurons.neuron_activation_change(ref_cache, tuned_cache, tokens, last)
    top_n = neurons.top_neurons(n_diff, k_heads)
    S["neurons"] = {
        "top_dla_change": [{"neuron": f"L{l}N{n}", "reference": float(n_ref[l, n]), "tuned": float(n_tuned[l, n]),
                            "change": float(n_diff[l, n]), "activation_change": float(act_change[l, n])}
                           for l, n in top_n],
        "top_activation_change": [{"neuron": f"L{l}N{n}", "value": float(act_change[l, n])}
                                  for l, n in neurons.top_neurons(act_change, k_heads)],
        "dla_change_by_layer": n_diff.abs().sum(-1),
    }
    if top_n:
        S["neurons"]["top_neuron_tokens"] = [
            {"activation": a, "token": t, "context": c}
            for a, t, c in neurons.top_activating_tokens(tuned, tokens, top_n[0], last, k=5)]
    labels = [f"L{l}N{n}" for l, n in top_n]
    add("Neurons: direct logit attribution",
        _bars(labels, {"reference": [float(n_ref[l, n]) for l, n in top_n],
                       "tuned": [float(n_tuned[l, n]) for l, n in top_n]},
              out_dir, "neuron_dla.png", f"the {len(top_n)} MLP neurons whose DLA changed most", "nats"),
        "Each neuron's post-GELU activation times its W_out row, through its model's own final-LN scale, "
        "on its own sentiment direction (the neurons of a layer plus b_out add up to the layer's MLP DLA).")

    # 10. attention patterns of the heads that changed most
    next_step()
    heads = attention.top_heads(dla_diff, min(k_heads, 4))
    sample = logits.sample_continuations(tuned, one, 1, gen_len, seed)
    _, sample_cache = tuned.run_with_cache(sample)
    sample_str = tuned.to_str_tokens(sample[0])
    add("Attention patterns",
        attention.plot_attention_patterns(sample_cache, heads, sample_str, out_dir / "attention_patterns.png",
                                          title="tuned model, heads with the largest DLA change"),
        "The tuned model on one of its own samples from the run prompt.")
    html_view = attention.attention_patterns_html(sample_cache, heads[0][0], sample_str,
                                                  out_dir / "attention_patterns.html")
    S["attention_heads_shown"] = [f"L{layer}H{head}" for layer, head in heads]

    # 11. reward (sampled, coarser)
    next_step()
    if reward_fn is not None:
        rewards, fraction, ref_r, tuned_r = residual.residual_patching_reward(
            reference, tuned, run_prompt, reward_fn, n_samples, gen_len, seed)
        abl_heads = attention.top_heads(ablation, k_heads)
        abl_rewards, clean = attention.head_ablation_reward(
            tuned, abl_heads, means, run_prompt, reward_fn, n_samples, gen_len, seed)
        S["reward"] = {
            "reference": ref_r, "tuned": tuned_r, "n_samples": n_samples, "gen_len": gen_len,
            "patching_sites": patch.labels, "patching_fraction": fraction,
            "ablation": [{"head": f"L{layer}H{head}", "reward": r, "change": r - clean}
                         for (layer, head), r in zip(abl_heads, abl_rewards)],
        }
        series = {"reward": fraction.nan_to_num().tolist(), "logit diff": patch.fraction.nan_to_num().tolist()}
        add("Residual patching, reward",
            _bars(patch.labels, series, out_dir, "patching_reward.png",
                  "fraction of the gap recovered: reward vs logit diff", "fraction"),
            f"Mean reward of {n_samples} samples of {gen_len} tokens from the hybrid (tuned below the site, "
            "reference above). One seed for every model, but still noisy: coarser than the logit difference.")

    # 12. write
    next_step()
    S["headline"] = _headline(S)
    S["seconds"] = time.time() - t0
    summary = _round(S)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out_dir / "report.html").write_text(_html(title, summary, figures, html_view))
    bar.close()
    return summary


# Below this |tuned − reference| logit-difference gap (nats), "fraction of the gap recovered" divides
# by a number no larger than the run-to-run wobble of the measurement: the headline says so instead.
NOISE_GAP = 0.05


def _headline(S: dict) -> list[str]:
    """The key findings as sentences."""
    ld = S["logit_diff"]
    lines = [f"Logit difference (mean of {len(S['prompts'])} prompts, last token): reference {ld['reference']:.3f}, "
             f"tuned {ld['tuned']:.3f} nats (gap {ld['tuned'] - ld['reference']:+.3f})."]
    lines.append(f"Next-token KL(tuned || reference): {S['kl_next_token']['mean_all_positions']:.4f} nats per position; "
                 f"sentiment-direction cosine {S['sentiment_direction_cosine']:.4f}.")
    jumps = S["residual_patching"]["block_contribution"]
    gap = ld["tuned"] - ld["reference"]
    if abs(gap) < NOISE_GAP:
        lines.append(f"Residual patching: the logit-difference gap ({gap:+.3f} nats) is below {NOISE_GAP} nats, so "
                     "fractions of it are noise (a fraction like 106 % would mean nothing); see the effects in nats.")
    elif not torch.isnan(jumps).all():
        block = int(jumps.nan_to_num(nan=-1e9).argmax())
        final = S["residual_patching"]["fraction"][-1].item()
        lines.append(f"Residual patching: block {block} adds the most ({jumps[block].item():.0%} of the gap); "
                     f"patching the final residual recovers {final:.0%}"
                     + (" (the rest is the change in ln_final and the unembedding)." if abs(final - 1) > 0.01 else "."))
    else:
        lines.append("Residual patching: no logit-difference gap to recover (fractions undefined).")
    def names(heads: list[dict]) -> str:
        return ", ".join(h["head"] for h in heads) or "none"

    lines.append(f"Heads with the largest change — DLA: {names(S['head_dla']['top_diff'])}; "
                 f"weights: {names(S['head_weight_change_relative']['all'])}; "
                 f"patching: {names(S['head_patching']['top'])}.")
    if "reward" in S:
        r = S["reward"]
        lines.append(f"Reward (n={r['n_samples']}): reference {r['reference']:.3f}, tuned {r['tuned']:.3f}.")
    return lines


def _html(title: str, S: dict, figures: list[tuple[str, Path, str]], attention_html: Path | None) -> str:
    esc = html.escape

    def img(path: Path) -> str:
        return f'<img src="data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}" alt="{esc(path.name)}">'

    def table(rows: list[tuple[str, str]]) -> str:
        return "<table>" + "".join(f"<tr><th>{esc(a)}</th><td>{esc(b)}</td></tr>" for a, b in rows) + "</table>"

    def heads(items: list[dict]) -> str:
        return ", ".join(f"{h['head']} {h['value']:+.3f}" for h in items) or "none"

    def fmt(values) -> str:
        return ", ".join("nan" if v is None else f"{v:.3f}" for v in values)

    rows = [
        ("prompts", " | ".join(S["prompts"])),
        ("positive words", " ".join(S["sentiment_words"]["pos"])),
        ("negative words", " ".join(S["sentiment_words"]["neg"])),
        ("logit diff reference (nats)", fmt(S["logit_diff"]["per_prompt_reference"])),
        ("logit diff tuned (nats)", fmt(S["logit_diff"]["per_prompt_tuned"])),
        ("KL(tuned||ref), last token (nats)", f"{S['kl_next_token']['mean_last_position']:.4f}"),
        ("most promoted tokens (Δ log-prob, nats)", ", ".join(f"{t!r} {v:+.2f}" for t, v in S["top_promoted"])),
        ("most demoted tokens (Δ log-prob, nats)", ", ".join(f"{t!r} {v:+.2f}" for t, v in S["top_demoted"])),
        ("logit lens sites", ", ".join(S["logit_lens"]["sites"])),
        ("logit lens reference", fmt(S["logit_lens"]["reference"])),
        ("logit lens tuned", fmt(S["logit_lens"]["tuned"])),
        ("residual cosine per site", fmt(S["residual_drift"]["cosine"])),
        ("patching: fraction recovered per site", fmt(S["residual_patching"]["fraction"])),
        ("top heads by DLA change (nats)", heads(S["head_dla"]["top_diff"])),
        ("top heads by ablation effect (nats)", heads(S["head_ablation"]["top"])),
        ("top heads by patching effect (nats)", heads(S["head_patching"]["top"])),
        ("top neurons by DLA change (nats; reference → tuned)",
         ", ".join(f"{d['neuron']} {d['reference']:+.3f} → {d['tuned']:+.3f}" for d in S["neurons"]["top_dla_change"])),
        ("top neurons by mean activation change", ", ".join(f"{d['neuron']} {d['value']:+.3f}"
                                                          for d in S["neurons"]["top_activation_change"])),
        ("where the top neuron fires most (tuned; activation, token in context)",
         "; ".join(f"{d['activation']:.2f} {d['context']!r}" for d in S["neurons"].get("top_neuron_tokens", []))),
    ]
    if "reward" in S:
        r = S["reward"]
        rows += [("reward reference / tuned", f"{r['reference']:.3f} / {r['tuned']:.3f}"),
                 ("reward patching fraction per site", fmt(r["patching_fraction"])),
                 ("reward change with a head ablated (tuned)",
                  ", ".join(f"{a['head']} {a['change']:+.3f}" for a in r["ablation"]))]
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title><style>{PAGE_STYLE}</style></head><body>",
        f"<h1>{esc(title)}</h1><h2>Findings</h2><ul>"
        + "".join(f"<li>{esc(line)}</li>" for line in S["headline"]) + "</ul>",
        "<p><a href='features.html'>Features: what RLHF changed in sparse-autoencoder features</a> "
        "(written by <code>python -m interp.features RUN_DIR</code>)</p>",
        "<h2>Key numbers</h2>" + table(rows),
        "<p>Units: logit differences and attributions in nats of log-odds (mean logit of the positive words minus "
        "the negative ones, at the last token); KL in nats; patching fractions: (patched − reference) / (tuned − "
        "reference), nan when there is no gap. Each model is read with its own cache, final LayerNorm and sentiment "
        "direction.</p>",
    ]
    for fig_title, path, caption in figures:
        parts.append(f"<figure><h3>{esc(fig_title)}</h3>{img(path)}<figcaption>{esc(caption)}</figcaption></figure>")
    if attention_html is not None:
        parts.append(f"<p>Interactive attention view (circuitsvis): {esc(attention_html.name)}</p>")
    parts.append(f"<p><small>Generated in {S['seconds']:.1f} s.</small></p></body></html>")
    return "\n".join(parts)


# --- command line ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m interp.report",
        description="Interpret what RLHF changed in a run: writes RUN_DIR/interp/report.html, PNG figures and "
                    "summary.json. The output folder is derived data: an existing one is overwritten.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder written by `python -m rlhf_scratch.train`")
    parser.add_argument("--out", default=None, help="output folder (default RUN_DIR/interp)")
    parser.add_argument("--n-samples", type=int, default=16, help="samples per reward estimate (default 16)")
    parser.add_argument("--gen-len", type=int, default=20, help="tokens per sample (default 20)")
    parser.add_argument("--no-reward", action="store_true", help="skip the sampled reward analyses")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: the tiny model's matrices are too small to gain from "
                             "more, and on a busy CPU extra threads made it 30x slower; 0 = torch's default)")
    args = parser.parse_args(argv)

    def fail(message: str) -> int:
        print(f"interp.report: error: {message}", file=sys.stderr)
        return 2

    run_dir = Path(args.run_dir)
    out = Path(args.out) if args.out else run_dir / "interp"
    if args.n_samples < 1:
        return fail(f"--n-samples: must be >= 1; got {args.n_samples}")
    if args.gen_len < 1:
        return fail(f"--gen-len: must be >= 1; got {args.gen_len}")
    if args.threads < 0:
        return fail(f"--threads: must be >= 0; got {args.threads}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        return fail(f"--device: {args.device!r} requested but no CUDA GPU is available; use --device cpu")
    if out.exists() and not out.is_dir():
        return fail(f"--out: {out} is a file, not a folder")
    if not run_dir.is_dir():
        return fail(f"{run_dir}: no such run folder")
    if not (run_dir / "config.json").is_file():
        return fail(f"{run_dir} is not a run folder (no config.json)")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        from rlhf_scratch.runs import load_run, reward_shown

        run = load_run(run_dir, device=args.device)
        reward_fn = None
        if not args.no_reward:
            from rlhf_scratch.tasks import make_reward_fn

            reward_fn = make_reward_fn(run.args, device=args.device)
    except (ValueError, OSError, RuntimeError) as err:  # RunFolderError (still training: what to do), Hub offline
        message = str(err).splitlines()[0]
        print(f"interp.report: error: {'' if message.startswith(str(run_dir)) else f'{run_dir}: '}{message}",
              file=sys.stderr)
        return 2
    shown = reward_shown(run_dir, run.args)  # a Python reward the command line cannot load: said so
    if reward_fn is not None:
        print(shown)
    longest = max(len(run.reference.to_tokens(p)[0]) for p in [run.args.prefix, *REVIEW_PROMPTS])
    if longest + args.gen_len > run.reference.cfg.n_ctx:
        return fail(f"--gen-len: {args.gen_len} + the longest prompt ({longest} tokens) exceeds the model's "
                    f"context n_ctx={run.reference.cfg.n_ctx}")
    # Write into a fresh temporary folder and move it into place, so an interrupted report never
    # leaves old and new files mixed.
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        summary = make_report(run.reference, run.tuned, list(REVIEW_PROMPTS), tmp, reward_fn=reward_fn,
                              run_prompt=run.args.prefix, n_samples=args.n_samples, gen_len=args.gen_len,
                              title=f"What did RLHF change? {run_dir.name}"
                              + (f" ({shown})" if reward_fn is not None else ""))
        for kept in ("features.html", "features"):  # interp.features' page lives beside the report: keep it
            if (out / kept).exists():
                os.replace(out / kept, tmp / kept)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for line in summary["headline"]:
        print(line)
    print(f"wrote {out / 'report.html'} in {summary['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
