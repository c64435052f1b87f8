"""The interp report as a pipeline (`make_report`): both models on the prompts, every step of
`interp.report_steps.ANALYSES` in order, then the page — findings, key numbers, the figures — from the
rounded summary. Takes models, not a run folder: `python -m interp.report RUN_DIR` (`interp.report`)
loads a run and calls it; any pair of HookedTransformers with one config and tokenizer works too.

    out_dir/report.html   self-contained (figures embedded), with the key numbers
    out_dir/*.png         the same figures as files
    out_dir/summary.json  the key numbers, machine-readable

The progress bar names each step after its function: `analyse_logit_lens` shows as "logit lens".
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from interp import logits
from interp.report_steps import ANALYSES, Context, run_steps
from rlhf_scratch.pages.html import esc, figures_html, findings_html, generated_in, page, rounded, table


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
    t0 = time.time()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    reference.eval()
    tuned.eval()
    run_prompt = run_prompt or prompts[0]
    prompts = [run_prompt] + [p for p in prompts if p != run_prompt]
    st = sentiment or logits.sentiment_tokens(reference)
    tokens, last = logits.prompt_tokens(reference, prompts)
    ref_logits, ref_cache = reference.run_with_cache(tokens)
    tuned_logits, tuned_cache = tuned.run_with_cache(tokens)
    ctx = Context(reference, tuned, prompts, tokens, last, st, ref_logits, tuned_logits, ref_cache, tuned_cache,
                  out_dir, reward_fn, n_samples, gen_len, k_heads, seed,
                  summary={"prompts": prompts, "sentiment_words": {"pos": list(st.pos_words), "neg": list(st.neg_words)}})
    bar = run_steps(ANALYSES, ctx, progress)
    ctx.summary["headline"] = _headline(ctx.summary)
    ctx.summary["seconds"] = time.time() - t0
    summary = rounded(ctx.summary)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out_dir / "report.html").write_text(_html(title, summary, ctx.figures, ctx.attention_html))
    bar.update()
    bar.close()
    return summary


# --- the page -------------------------------------------------------------------------------------


# Below this |tuned − reference| logit-difference gap (nats), "fraction of the gap recovered" divides
# by a number no larger than the run-to-run wobble of the measurement: the headline says so instead.
NOISE_GAP = 0.05


def _headline(summary: dict) -> list[str]:
    """The key findings as sentences."""
    ld = summary["logit_diff"]
    sentences = [f"Logit difference (mean of {len(summary['prompts'])} prompts, last token): reference "
             f"{ld['reference']:.3f}, tuned {ld['tuned']:.3f} nats (gap {ld['tuned'] - ld['reference']:+.3f})."]
    sentences.append(f"Next-token KL(tuned || reference): {summary['kl_next_token']['mean_all_positions']:.4f} nats per "
                 f"position; sentiment-direction cosine {summary['sentiment_direction_cosine']:.4f}.")
    jumps = summary["residual_patching"]["block_contribution"]
    gap = ld["tuned"] - ld["reference"]
    if abs(gap) < NOISE_GAP:
        sentences.append(f"Residual patching: the logit-difference gap ({gap:+.3f} nats) is below {NOISE_GAP} nats, so "
                     "fractions of it are noise (a fraction like 106 % would mean nothing); see the effects in nats.")
    elif not torch.isnan(jumps).all():
        block = int(jumps.nan_to_num(nan=-1e9).argmax())
        final = summary["residual_patching"]["fraction"][-1].item()
        sentences.append(f"Residual patching: block {block} adds the most ({jumps[block].item():.0%} of the gap); "
                     f"patching the final residual recovers {final:.0%}"
                     + (" (the rest is the change in ln_final and the unembedding)." if abs(final - 1) > 0.01 else "."))
    else:
        sentences.append("Residual patching: no logit-difference gap to recover (fractions undefined).")

    def names(heads: list[dict]) -> str:
        return ", ".join(h["head"] for h in heads) or "none"

    sentences.append(f"Heads with the largest change — DLA: {names(summary['head_dla']['top_diff'])}; "
                 f"weights: {names(summary['head_weight_change_relative']['all'])}; "
                 f"patching: {names(summary['head_patching']['top'])}.")
    if "reward" in summary:
        r = summary["reward"]
        sentences.append(f"Reward (n={r['n_samples']}): reference {r['reference']:.3f}, tuned {r['tuned']:.3f}.")
    return sentences


def _key_numbers(summary: dict) -> list[tuple[str, str]]:
    """The page's table of key numbers, from the rounded `summary`."""
    def heads(items: list[dict]) -> str:
        return ", ".join(f"{h['head']} {h['value']:+.3f}" for h in items) or "none"

    def fmt(values) -> str:
        return ", ".join("nan" if v is None else f"{v:.3f}" for v in values)

    rows = [
        ("prompts", " | ".join(summary["prompts"])),
        ("positive words", " ".join(summary["sentiment_words"]["pos"])),
        ("negative words", " ".join(summary["sentiment_words"]["neg"])),
        ("logit diff reference (nats)", fmt(summary["logit_diff"]["per_prompt_reference"])),
        ("logit diff tuned (nats)", fmt(summary["logit_diff"]["per_prompt_tuned"])),
        ("KL(tuned||ref), last token (nats)", f"{summary['kl_next_token']['mean_last_position']:.4f}"),
        ("most promoted tokens (Δ log-prob, nats)", ", ".join(f"{t!r} {v:+.2f}" for t, v in summary["top_promoted"])),
        ("most demoted tokens (Δ log-prob, nats)", ", ".join(f"{t!r} {v:+.2f}" for t, v in summary["top_demoted"])),
        ("logit lens sites", ", ".join(summary["logit_lens"]["sites"])),
        ("logit lens reference", fmt(summary["logit_lens"]["reference"])),
        ("logit lens tuned", fmt(summary["logit_lens"]["tuned"])),
        ("residual cosine per site", fmt(summary["residual_drift"]["cosine"])),
        ("patching: fraction recovered per site", fmt(summary["residual_patching"]["fraction"])),
        ("top heads by DLA change (nats)", heads(summary["head_dla"]["top_diff"])),
        ("top heads by ablation effect (nats)", heads(summary["head_ablation"]["top"])),
        ("top heads by patching effect (nats)", heads(summary["head_patching"]["top"])),
        ("top neurons by DLA change (nats; reference → tuned)",
         ", ".join(f"{d['neuron']} {d['reference']:+.3f} → {d['tuned']:+.3f}" for d in summary["neurons"]["top_dla_change"])),
        ("top neurons by mean activation change", ", ".join(f"{d['neuron']} {d['value']:+.3f}"
                                                          for d in summary["neurons"]["top_activation_change"])),
        ("where the top neuron fires most (tuned; activation, token in context)",
         "; ".join(f"{d['activation']:.2f} {d['context']!r}" for d in summary["neurons"].get("top_neuron_tokens", []))),
    ]
    if "reward" in summary:
        r = summary["reward"]
        rows += [("reward reference / tuned", f"{r['reference']:.3f} / {r['tuned']:.3f}"),
                 ("reward patching fraction per site", fmt(r["patching_fraction"])),
                 ("reward change with a head ablated (tuned)",
                  ", ".join(f"{a['head']} {a['change']:+.3f}" for a in r["ablation"]))]
    return rows


def _html(title: str, summary: dict, figures: list[tuple[str, Path, str]], attention_html: Path | None) -> str:
    """The report page from the rounded `summary`: findings, key numbers, the figures embedded."""
    parts = [
        f"<h1>{esc(title)}</h1>" + findings_html(summary["headline"]),
        "<p><a href='features.html'>Features: what RLHF changed in sparse-autoencoder features</a> "
        "(written by <code>python -m interp.features RUN_DIR</code>)</p>",
        "<h2>Key numbers</h2>" + table(_key_numbers(summary)),
        "<p>Units: logit differences and attributions in nats of log-odds (mean logit of the positive words minus "
        "the negative ones, at the last token); KL in nats; patching fractions: (patched − reference) / (tuned − "
        "reference), nan when there is no gap. Each model is read with its own cache, final norm and sentiment "
        "direction.</p>",
    ]
    parts += figures_html(figures)
    if attention_html is not None:
        parts.append(f"<p>Interactive attention view (circuitsvis): {esc(attention_html.name)}</p>")
    parts.append(generated_in(summary["seconds"]))
    return page(title, parts)


# --- command line ---------------------------------------------------------------------------------

