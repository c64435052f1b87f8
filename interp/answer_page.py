"""The interp report on a task with its own problems (`make_answer_report`): both models on the held-out
problems with their answers, every step of `interp.answer_steps.ANSWER_ANALYSES` in order, then the page —
findings said with their n, key numbers, the figures. `python -m interp.report RUN_DIR` calls it for a run
of such a task (`arithmetic`); any pair of HookedTransformers with one config and tokenizer works too.

    out_dir/report.html   self-contained (figures embedded), with the key numbers
    out_dir/*.png         the same figures as files
    out_dir/summary.json  the key numbers, machine-readable
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from interp.answer_steps import ANSWER_ANALYSES, AnswerContext
from interp.answers import answer_batch
from interp.report_steps import run_steps
from rlhf_scratch.pages.html import esc, figures_html, findings_html, generated_in, page, rounded, table


@torch.no_grad()
def make_answer_report(
    reference,
    tuned,
    prompts: Sequence[str],
    truths: Sequence[str],
    out_dir: str | Path,
    columns: Sequence[dict] | None = None,
    source: str = "held-out problems",
    draws: str = "one pair of models",
    k_heads: int = 4,
    title: str = "What did RL change?",
    progress: bool = True,
) -> dict:
    """Run every answer analysis on the problems (`prompts`, each with its ground truth in `truths` and its
    row's other columns in `columns`) and write the report. `source` names the problems and `draws` what the
    pair of models is (a run: one seed) in the findings. Returns the summary (also written as summary.json)."""
    t0 = time.time()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    reference.eval()
    tuned.eval()
    batch = answer_batch(reference, prompts, truths, columns)
    ref_logits, ref_cache = reference.run_with_cache(batch.tokens)
    tuned_logits, tuned_cache = tuned.run_with_cache(batch.tokens)
    ctx = AnswerContext(reference, tuned, batch, ref_logits, tuned_logits, ref_cache, tuned_cache, out_dir, k_heads,
                        summary={"kind": "answers", "source": source, "draws": draws, "examples": list(prompts[:3])})
    bar = run_steps(ANSWER_ANALYSES, ctx, progress)
    ctx.summary["seconds"] = time.time() - t0
    summary = rounded(ctx.summary)
    summary["headline"] = _headline(summary)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out_dir / "report.html").write_text(_html(title, summary, ctx.figures))
    bar.update()
    bar.close()
    return summary


def _arrow(d: dict, key: str, nd: int = 3) -> str:
    return f"{d[key + '_reference']:.{nd}f} → {d[key + '_tuned']:.{nd}f}"


def _names(heads: list[dict], signed: bool = False) -> str:
    return ", ".join(f"{h['head']} {h['value']:{'+' if signed else ''}.3f}" for h in heads) or "none"


def _headline(s: dict) -> list[str]:
    """The findings as sentences, each with its n, from the rounded summary."""
    a, lens, att, patch = s["answers"], s["answer_lens"], s["operand_attention"], s["answer_patching"]
    n, everything = a["n_problems"], a["by_group"]["all"]
    groups = "; ".join(f"{name} (n={g['n']}) {_arrow(g, 'pass1')}" for name, g in a["by_group"].items()
                       if name != "all" and not name.startswith("digits="))
    sentences = [
        f"{n} {s['source']}; {s['draws']}. Every number below is exact on these problems (teacher forcing, "
        "no sampling).",
        f"Expected pass@1 at temperature 1 (mean over the {n} problems of P(answer then EOS)): reference → tuned "
        f"{_arrow(everything, 'pass1')}; greedy decoding right {_arrow(everything, 'greedy')}"
        + (f". By group: {groups}." if groups else "."),
    ]
    ref_top, tuned_top = lens["reference"]["top1"], lens["tuned"]["top1"]
    per_slot = "; ".join(
        f"{slot} (n={count}): " + ", ".join(f"{site} {ref_top[i][k]:.2f} → {tuned_top[i][k]:.2f}"
                                           for i, site in enumerate(lens["sites"]) if i > 0)
        for k, (slot, count) in enumerate(zip(lens["slots"], lens["count"])))
    sentences.append(f"Logit lens, share of answer positions whose right token is the top token, per site, "
                     f"reference → tuned: {per_slot}.")
    sentences.append(f"Heads reading the operands (share of attention from the {att['n_queries']} digit-writing "
                     f"positions to the operands' digits, tuned): {_names(att['top_operand'])}; to the column "
                     f"being written: {_names(att['top_column'])}. Changed most by RL: operands "
                     f"{_names(att['top_operand_change'], True)}; column {_names(att['top_column_change'], True)}.")
    sites = ", ".join(f"{site} {f:.0%}" if f is not None else f"{site} nan"
                      for site, f in zip(patch["sites"], patch["site_fraction"]))
    sentences.append(f"Mean log P(answer then EOS) {patch['reference']:.3f} → {patch['tuned']:.3f} nats; the tuned "
                     f"residual patched into the reference recovers {sites} of the gap. Heads by patching effect "
                     f"(nats): {_names(patch['top_heads'], True)}; by mean-ablation in the tuned model: "
                     f"{_names(patch['top_ablation'], True)}.")
    top = s["answer_neurons"]["top_dla_change"]
    if top:
        sentences.append(f"Neurons: the largest change of direct attribution to the right token is {top[0]['neuron']} "
                         f"({top[0]['reference']:+.3f} → {top[0]['tuned']:+.3f} nats, mean over the answer positions).")
    return sentences


def _key_numbers(s: dict) -> list[tuple[str, str]]:
    """The page's table of key numbers, from the rounded summary."""
    lens, att = s["answer_lens"], s["operand_attention"]
    rows = [("problems", f"{s['answers']['n_problems']} {s['source']} (e.g. {' | '.join(s['examples'])})"),
            ("models", s["draws"])]
    rows += [(f"pass@1 / greedy, {name} (n={g['n']})", f"{_arrow(g, 'pass1')} / {_arrow(g, 'greedy')}")
             for name, g in s["answers"]["by_group"].items()]
    for k, slot in enumerate(lens["slots"]):
        for model in ("reference", "tuned"):
            first = lens[model]["first_top"]
            rows.append((f"logit lens, {slot} (n={lens['count'][k]}), {model}: top-1 share / mean log p per site",
                         ", ".join(f"{site} {lens[model]['top1'][i][k]:.3f} / {lens[model]['logprob'][i][k]:.2f}"
                                   for i, site in enumerate(lens["sites"]))))
            rows.append((f"logit lens, {slot}, {model}: first top for good at",
                         ", ".join(f"{site} {first[i][k]}" for i, site in enumerate([*lens["sites"], "never"]))))
    rows += [("top heads on the operands (tuned share)", _names(att["top_operand"])),
             ("top heads on the written column (tuned share)", _names(att["top_column"])),
             ("heads by |weight change| (W_O, relative)", _names(s["head_weight_change_relative"]["W_O"])),
             ("heads by |weight change| (W_Q, relative)", _names(s["head_weight_change_relative"]["W_Q"])),
             ("top neurons by attribution change (nats; reference → tuned)",
              ", ".join(f"{d['neuron']} {d['reference']:+.3f} → {d['tuned']:+.3f}"
                        for d in s["answer_neurons"]["top_dla_change"])),
             ("top neurons by mean activation change", _names(
                 [{"head": d["neuron"], "value": d["value"]} for d in s["answer_neurons"]["top_activation_change"]], True))]
    return rows


def _html(title: str, summary: dict, figures: list[tuple[str, Path, str]]) -> str:
    parts = [f"<h1>{esc(title)}</h1>" + findings_html(summary["headline"]),
             "<h2>Key numbers</h2>" + table(_key_numbers(summary)),
             "<p>Units: log-probs and attributions in nats; shares of attention sum to 1 over a position's keys. "
             "Each model is read with its own cache, final norm and unembedding. The positions that write a "
             "digit are the <code>=</code> and every answer digit but the last; the EOS is written by the last "
             "digit.</p>"]
    parts += figures_html(figures)
    parts.append(generated_in(summary["seconds"]))
    return page(title, parts)
