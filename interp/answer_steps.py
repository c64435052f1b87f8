"""The interp report's steps on a task with its own problems (`interp.answer_page.make_answer_report` runs
them in order): each reads the one `AnswerContext` — both models on the held-out problems with their
answers (`interp.answers.AnswerBatch`), their logits and caches — adds its figures and returns its
sections of the summary. Every number is exact on the problems given: log-probs, attention and
attributions under teacher forcing, no sampling. Reads no files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens import ActivationCache, HookedTransformer

from interp import answers, attention, neurons, residual
from interp.answers import AnswerBatch
from interp.figures import bars, heatmaps, lines


@dataclass
class AnswerContext:
    """Everything an answer step reads, and the figures it adds (as `interp.report_steps.Context`)."""

    reference: HookedTransformer
    tuned: HookedTransformer
    batch: AnswerBatch
    ref_logits: Float[Tensor, "batch pos d_vocab"]
    tuned_logits: Float[Tensor, "batch pos d_vocab"]
    ref_cache: ActivationCache
    tuned_cache: ActivationCache
    out_dir: Path
    k_heads: int = 4  # heads (and neurons) listed per ranking
    summary: dict = field(default_factory=dict)
    figures: list[tuple[str, Path, str]] = field(default_factory=list)

    def add_figure(self, title: str, path: Path, caption: str) -> None:
        self.figures.append((title, path, caption))


def _heads(scores: Tensor, k: int, absolute: bool = True) -> list[dict]:
    """The top-k heads by (|)score(|) as {"head": "L1H2", "value": ...}."""
    return [{"head": f"L{l}H{h}", "value": float(scores[l, h])} for l, h in attention.top_heads(scores, k, absolute)]


def analyse_answers(ctx: AnswerContext) -> dict:
    """Expected pass@1 at temperature 1 and greedy accuracy, exact, overall and by group (op, carry)."""
    b = ctx.batch
    lp_ref, lp_tuned = answers.answer_logprob(ctx.ref_logits, b), answers.answer_logprob(ctx.tuned_logits, b)
    p_ref, p_tuned = lp_ref.exp(), lp_tuned.exp()
    g_ref = answers.greedy_right(ctx.ref_logits, b).float()
    g_tuned = answers.greedy_right(ctx.tuned_logits, b).float()
    groups = {"all": torch.ones_like(g_ref, dtype=torch.bool), **b.groups}
    return {"answers": {
        "n_problems": len(b.tokens),
        "by_group": {name: {"n": int(m.sum()),
                            "pass1_reference": p_ref[m].mean().item(), "pass1_tuned": p_tuned[m].mean().item(),
                            "greedy_reference": g_ref[m].mean().item(), "greedy_tuned": g_tuned[m].mean().item()}
                     for name, m in groups.items()},
        "mean_logprob_reference": lp_ref.mean().item(), "mean_logprob_tuned": lp_tuned.mean().item(),
    }}


def analyse_answer_lens(ctx: AnswerContext) -> dict:
    """The logit lens on the answer's tokens: where the right token becomes the top token."""
    lens = {name: answers.answer_lens(cache, ctx.batch) for name, cache in
            (("reference", ctx.ref_cache), ("tuned", ctx.tuned_cache))}
    ref = lens["reference"]
    series = {f"{name} {slot}": lens[name].top1[:, k].tolist()
              for k, slot in enumerate(ref.slots) for name in lens}
    ctx.add_figure(
        "Logit lens on the answer",
        lines(ref.sites, series, ctx.out_dir, "answer_logit_lens.png",
              "logit lens: share of answer tokens whose right token is on top", "share of problems"),
        f"Each model's residual at each site through its own ln_final and unembedding, at the positions that "
        f"write each slot of the answer ({', '.join(f'{s} n={int(c)}' for s, c in zip(ref.slots, ref.count))}). "
        "At the last site it is the model's own output.")
    return {"answer_lens": {
        "sites": ref.sites, "slots": ref.slots, "count": ref.count,
        **{name: {"top1": l.top1, "logprob": l.logprob, "first_top": l.first_top,
                  "final_matches_model": (l.final_logprobs - answers.target_logprobs(
                      logits.log_softmax(-1), ctx.batch)).abs().max().item()}
           for (name, l), logits in zip(lens.items(), (ctx.ref_logits, ctx.tuned_logits))},
    }}


def analyse_operand_attention(ctx: AnswerContext) -> dict:
    """Which heads read the operands from the positions that write a digit, and which RL changed most."""
    op_ref, col_ref = answers.operand_attention(ctx.ref_cache, ctx.batch)
    op_tuned, col_tuned = answers.operand_attention(ctx.tuned_cache, ctx.batch)
    n_queries = int(ctx.batch.digit.sum())
    for name, ref, tuned, what in (("operand_attention.png", op_ref, op_tuned, "the operands' digits"),
                                   ("column_attention.png", col_ref, col_tuned, "the written column's digits")):
        ctx.add_figure(
            f"Attention to {what}",
            heatmaps([("reference", ref), ("tuned", tuned), ("tuned - reference", tuned - ref)], ctx.out_dir, name,
                     "share of attention", own_scale=(2,)),
            f"Each head's attention from the {n_queries} positions that write a digit of the answer to {what}, "
            "mean over positions and problems. The difference panel has its own colour scale.")
    return {"operand_attention": {
        "n_queries": n_queries, "operand_reference": op_ref, "operand_tuned": op_tuned,
        "column_reference": col_ref, "column_tuned": col_tuned,
        "top_operand": _heads(op_tuned, ctx.k_heads, absolute=False),
        "top_column": _heads(col_tuned, ctx.k_heads, absolute=False),
        "top_operand_change": _heads(op_tuned - op_ref, ctx.k_heads),
        "top_column_change": _heads(col_tuned - col_ref, ctx.k_heads),
    }}


def analyse_answer_weights(ctx: AnswerContext) -> dict:
    """How much each head's weights moved, relative to the reference's."""
    change = attention.head_weight_change(ctx.reference, ctx.tuned, relative=True)
    ctx.add_figure(
        "Per-head weight change",
        heatmaps(list(change.items()), ctx.out_dir, "head_weight_change.png", "|ΔW| / |W_ref|", diverging=False),
        "Frobenius norm of each head's weight change, relative to the reference's.")
    return {"head_weight_change_relative": {k: _heads(v, ctx.k_heads) for k, v in change.items()}}


def analyse_answer_patching(ctx: AnswerContext) -> dict:
    """The tuned residual (then one head's output) patched into the reference, and each head mean-ablated in
    the tuned model, on the mean log P(answer then EOS)."""
    b, metric = ctx.batch, answers.mean_answer_logprob(ctx.batch)
    patch = residual.residual_patching_metric(ctx.reference, ctx.tuned, b.tokens, metric)
    effect, fraction = attention.head_patching_metric(ctx.reference, ctx.tuned, b.tokens, metric)
    ablation = attention.head_ablation_metric(ctx.tuned, b.tokens, attention.head_means(ctx.tuned, b.tokens, b.last),
                                              metric)
    ctx.add_figure(
        "Residual patching, log P(answer)",
        bars(patch.labels, {"log P(answer)": patch.fraction.nan_to_num().tolist()}, ctx.out_dir,
             "answer_patching_layers.png", "tuned residual patched into the reference at one site (all positions)",
             "fraction of gap recovered"),
        f"0 = none of the gap in mean log P(answer then EOS) ({patch.ref_logit_diff:.3f} → {patch.tuned_logit_diff:.3f} "
        f"nats over {len(b.tokens)} problems), 1 = all of it.")
    ctx.add_figure(
        "Heads: patching and mean-ablation, log P(answer)",
        heatmaps([("patched into the reference: fraction", fraction.nan_to_num()),
                  ("ablated in the tuned model: Δ nats", ablation)], ctx.out_dir, "answer_heads.png", "",
                 own_scale=(0, 1)),
        "Left: one head's tuned output (z·W_O) put into the reference, one head at a time, as a fraction of the gap. "
        "Right: one head's z replaced by its mean over the problems' positions in the tuned model.")
    return {"answer_patching": {
        "reference": patch.ref_logit_diff, "tuned": patch.tuned_logit_diff,
        "sites": patch.labels, "site_fraction": patch.fraction, "site_effect": patch.effect,
        "head_fraction": fraction, "top_heads": _heads(effect, ctx.k_heads),
        "ablation": ablation, "top_ablation": _heads(ablation, ctx.k_heads),
    }}


def analyse_answer_neurons(ctx: AnswerContext) -> dict:
    """Per-neuron direct attribution to the right token at the answer positions, its change, and the activation change."""
    n_ref = answers.answer_neuron_dla(ctx.ref_cache, ctx.batch)
    n_tuned = answers.answer_neuron_dla(ctx.tuned_cache, ctx.batch)
    act = answers.answer_activation_change(ctx.ref_cache, ctx.tuned_cache, ctx.batch)
    top = neurons.top_neurons(n_tuned - n_ref, ctx.k_heads)
    ctx.add_figure(
        "Neurons: direct attribution to the right token",
        bars([f"L{l}N{n}" for l, n in top], {"reference": [float(n_ref[l, n]) for l, n in top],
                                             "tuned": [float(n_tuned[l, n]) for l, n in top]},
             ctx.out_dir, "answer_neuron_dla.png", f"the {len(top)} MLP neurons whose attribution changed most", "nats"),
        "Each neuron's activation times its W_out row through its model's own final-norm scale, on the right "
        "token's unembedding minus the mean unembedding, mean over the answer positions.")
    return {"answer_neurons": {
        "top_dla_change": [{"neuron": f"L{l}N{n}", "reference": float(n_ref[l, n]), "tuned": float(n_tuned[l, n]),
                            "activation_change": float(act[l, n])} for l, n in top],
        "top_activation_change": [{"neuron": f"L{l}N{n}", "value": float(act[l, n])}
                                  for l, n in neurons.top_neurons(act, ctx.k_heads)],
        "dla_reference_by_layer": n_ref.sum(-1), "dla_tuned_by_layer": n_tuned.sum(-1),
    }}


ANSWER_ANALYSES: tuple[Callable[[AnswerContext], dict], ...] = (
    analyse_answers, analyse_answer_lens, analyse_operand_attention, analyse_answer_weights, analyse_answer_patching,
    analyse_answer_neurons,
)
"""The steps in report order."""
