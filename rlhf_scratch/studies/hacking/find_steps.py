"""The steps of finding the hack with interpretability, without being told the flaw (issue 46, item 3).

The command is `find.py` (`python -m rlhf_scratch.studies.hacking.find`); its settings, `find_settings.py`.
Per hacked run (a policy trained against the proxy), against its reference:

1. **The excess.** Sample completions of the held-out prompts from the reference and the policy
   (`interp.sampling.sample`: temperature 1, whole vocabulary, stop at EOS). Score each text
   (prompt + completion) by the proxy p and by gold g' (= g − c · rep₃ for the repetition rater;
   c = 0: gold g). Gold is put on the proxy's scale with the moments of the REFERENCE's samples,

       ĝ = μ_p + (g' − μ_g) · σ_p / σ_g        (μ, σ: mean and population s.d. over the reference's samples)

   and each sample's excess is e = p − ĝ (`standardised_gold`): 0 on average over the reference's
   samples by construction, and the policy's mean excess ē₁ is how far the proxy rose beyond gold.
2. **Candidates, from the model.** (a) The top movers: the tokens whose next-token probability
   rose most from the reference to the policy, averaged over the positions of the policy's own
   samples (`interp.logits.top_token_changes` of Δp). (b) Features read by the POLICY on every
   sample (the reference's and its own), each a mean over the sample's completion positions:
   every MLP neuron (blocks.L.mlp.hook_post), every head's output norm |z_h W_O^h|, and per layer
   the mean-difference direction u_L (policy samples minus reference samples at resid_post,
   normalised); each top mover's share of the completion's tokens too.
3. **How much of the excess each explains** (`explained_share`): the within-group slope of e on
   the activation a (fitted inside each group, so a feature that merely separates the two groups
   explains nothing), times the gap in a, over the gap in e:

       β_w = Σ_g Σ_{i∈g} (a_i − ā_g)(e_i − ē_g) / Σ_g Σ_{i∈g} (a_i − ā_g)²
       share = β_w (ā₁ − ā₀) / (ē₁ − ē₀)     r²_w = (Σ (a − ā_g)(e − ē_g))² / (Σ (a − ā_g)² Σ (e − ē_g)²)

   The top finding is the model-internal candidate (neuron, head or direction) with the largest share.
4. **Its description** (`describe.py`, after the finding): the surface statistic of text its
   activation tracks, its top-activating contexts and the tokens its output direction promotes.
5. **The causal check** (`causal_check`): sample from the policy with the finding mean-ablated (set
   to its mean over the reference's samples), and with each of k random candidates of the same kind
   mean-ablated (a direction: steered against by the mean change's norm, against random unit
   directions); the reduction of the mean excess, ē(policy) − ē(ablated), same prompts and seed.
   Over runs (seeds): the reductions against the random ones, paired (`stats.paired_difference`).

The page: `find_page.py`. Numbers and verdict: docs/human-feedback.md §4.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from interp.attention import mean_ablation_hooks
from interp.feature_diff import final_ln_scale, promoted_tokens, site_activations, top_activating
from interp.logits import top_token_changes
from interp.sampling import Samples, SampleSettings, completion_texts, sample
from rlhf_scratch.studies.hacking.describe import Texts, describe, per_sample_ngram_fraction
from rlhf_scratch.studies.hacking.excess import explained_share, standardised_gold  # the formulas (steps 1 and 3)
from rlhf_scratch.studies.hacking.find_settings import FindSettings

ScoreFn = Callable[[list[str]], Tensor]
"""texts (prompt + completion) -> one score each: the proxy, or gold g."""
INTERNAL = ("neuron", "head", "direction")


# --- samples and their scores -------------------------------------------------------------------


@dataclass
class Scored:
    """Samples of one model and what they score."""

    samples: Samples
    texts: Texts
    proxy: Float[Tensor, " n"]
    gold: Float[Tensor, " n"]
    """g' = g − c · rep₃."""
    rep3: Float[Tensor, " n"]


def score(model, s: Samples, settings: SampleSettings, proxy_fn: ScoreFn, gold_fn: ScoreFn, penalty: float) -> Scored:
    """The proxy and gold g' = g − c · rep₃ of each sample (both read prompt + completion)."""
    completions = completion_texts(model, s, settings.stop_at_eos)
    texts = [p + c for p, c in zip(s.prompts, completions)]
    rep3 = torch.tensor(per_sample_ngram_fraction(s.completion_ids.cpu(), s.completion_mask.cpu(), 3))
    gold = torch.as_tensor(gold_fn(texts), dtype=torch.float32).cpu() - penalty * rep3
    return Scored(s, Texts(completions, s.completion_ids.cpu(), s.completion_mask.cpu()),
                  torch.as_tensor(proxy_fn(texts), dtype=torch.float32).cpu(), gold, rep3)


def sequences(s: Samples) -> tuple[Int[Tensor, "n pos"], Bool[Tensor, "n pos"], Bool[Tensor, "n pos"]]:
    """(tokens, attention mask, kept completion positions) of prompt + completion, left-padded."""
    tokens = torch.cat([s.prompt_ids, s.completion_ids], 1)
    attend = torch.cat([s.prompt_mask, s.completion_mask], 1)
    keep = torch.cat([torch.zeros_like(s.prompt_mask), s.completion_mask], 1)
    return tokens, attend, keep


def _mean_over(x: Float[Tensor, "batch pos *rest"], keep: Bool[Tensor, "batch pos"]) -> Float[Tensor, " batch *rest"]:
    k = keep.to(x.dtype).reshape(*keep.shape, *([1] * (x.ndim - 2)))
    return (x * k).sum(1) / k.sum(1).clamp_min(1)


# --- the candidates -------------------------------------------------------------------------------


@dataclass
class Candidates:
    """Every candidate's per-sample activation (columns) and its label, kind and where it sits; and
    the policy's per-position means over the reference's samples, which an ablation sets."""

    activation: Float[Tensor, "n f"]
    labels: list[str]
    kinds: list[str]
    where: list[tuple[int, int]] = field(repr=False)
    """(layer, index): the neuron's or head's index, 0 for a layer's direction."""
    directions: Float[Tensor, "n_layers d_model"] = field(repr=False)
    means: dict[str, Tensor] = field(repr=False)
    """neuron [layers, d_mlp], z [layers, heads, d_head]: per-position means over the kept completion
    positions of the reference's samples; gap [layers]: |Δ_L|, the norm of the mean resid_post change."""


@torch.no_grad()
def read_candidates(policy, s_ref: Samples, s_pol: Samples, batch: int = 64) -> Candidates:
    """The policy's neurons, head output norms and per-layer resid_post means on every sample (module docstring)."""
    cfg, n_layers = policy.cfg, policy.cfg.n_layers
    names = {f"blocks.{L}.{h}" for L in range(n_layers) for h in ("mlp.hook_post", "attn.hook_z", "hook_resid_post")}
    neurons, heads, resid, z, counts = [], [], [], [], []
    for s in (s_ref, s_pol):
        tokens, attend, keep = sequences(s)
        for i in range(0, tokens.shape[0], batch):
            t, a, k = tokens[i : i + batch], attend[i : i + batch], keep[i : i + batch]
            kw = {} if bool(a.all()) else {"attention_mask": a.long()}
            _, cache = policy.run_with_cache(t, names_filter=lambda n: n in names, **kw)
            zs = [cache[f"blocks.{L}.attn.hook_z"] for L in range(n_layers)]
            neurons.append(torch.cat([_mean_over(cache[f"blocks.{L}.mlp.hook_post"], k) for L in range(n_layers)], 1))
            heads.append(torch.cat([_mean_over(torch.einsum("bphd,hdm->bphm", zs[L], policy.blocks[L].attn.W_O).norm(dim=-1), k)
                                    for L in range(n_layers)], 1))
            resid.append(torch.stack([_mean_over(cache[f"blocks.{L}.hook_resid_post"], k) for L in range(n_layers)], 1))
            z.append(torch.stack([_mean_over(zs[L], k) for L in range(n_layers)], 1))
            counts.append(k.sum(1))
    neurons, heads, resid, z = (torch.cat(x).cpu().float() for x in (neurons, heads, resid, z))
    n_ref = s_ref.prompt_ids.shape[0]
    w = torch.cat(counts).cpu().float()[:n_ref]
    w = w / w.sum()  # per-sample means weighted by kept positions = per-position means

    def ref_mean(x: Tensor) -> Tensor:
        return torch.einsum("n,n...->...", w, x[:n_ref])
    gap = resid[n_ref:].mean(0) - resid[:n_ref].mean(0)  # [layers, d_model]
    means = {"neuron": ref_mean(neurons).view(n_layers, cfg.d_mlp), "z": ref_mean(z), "gap": gap.norm(dim=-1)}
    u = gap / gap.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    projections = (resid * u).sum(-1)  # [n, layers]
    labels = ([f"neuron L{L}.{i}" for L in range(n_layers) for i in range(cfg.d_mlp)]
              + [f"head L{L}.H{h}" for L in range(n_layers) for h in range(cfg.n_heads)]
              + [f"direction u_{L} (resid_post)" for L in range(n_layers)])
    kinds = ["neuron"] * neurons.shape[1] + ["head"] * heads.shape[1] + ["direction"] * n_layers
    where = ([(L, i) for L in range(n_layers) for i in range(cfg.d_mlp)]
             + [(L, h) for L in range(n_layers) for h in range(cfg.n_heads)] + [(L, 0) for L in range(n_layers)])
    return Candidates(torch.cat([neurons, heads, projections], 1), labels, kinds, where, u, means)


@torch.no_grad()
def top_movers(reference, policy, s_pol: Samples, k: int = 10, batch: int = 64) -> tuple[list, list, list[int]]:
    """(promoted, demoted, promoted ids): the tokens whose probability the policy raised (lowered)
    most, Δp = p_policy − p_ref averaged over the kept completion positions of the policy's samples."""
    tokens, attend, keep = sequences(s_pol)
    total, count = torch.zeros(policy.cfg.d_vocab, dtype=torch.float64), 0
    for i in range(0, tokens.shape[0], batch):
        t, a = tokens[i : i + batch], attend[i : i + batch]
        # the distribution a kept token was drawn from sits one position before it
        drawn = keep[i : i + batch, 1:]
        kw = {} if bool(a.all()) else {"attention_mask": a.long()}
        dp = policy(t, **kw)[:, :-1].softmax(-1) - reference(t, **kw)[:, :-1].softmax(-1)
        total += dp[drawn].double().sum(0).cpu()
        count += int(drawn.sum())
    mean = (total / max(count, 1)).float()
    promoted, demoted = top_token_changes(policy, mean[None], k)
    return promoted, demoted, mean.topk(k).indices.tolist()


def token_shares(texts: list[Texts], ids: list[int]) -> Float[Tensor, "n k"]:
    """Each sample's share of kept completion tokens equal to each of `ids`."""
    rows = []
    for t in texts:
        kept = t.mask.float()
        rows.append(torch.stack([((t.ids == i).float() * kept).sum(1) / kept.sum(1).clamp_min(1) for i in ids], 1))
    return torch.cat(rows)


# --- the causal check ---------------------------------------------------------------------------


def ablation_hooks(kind: str, where: tuple[int, int], means: dict[str, Tensor],
                   direction: Float[Tensor, " d_model"] | None = None) -> list:
    """fwd_hooks removing one candidate: a neuron's activation or a head's z (`interp.attention.
    mean_ablation_hooks`) set to its per-position mean over the reference's samples (`means`); a
    layer's unit `direction` steered against at its resid_post, x ← x − |Δ_L| u, with |Δ_L| the norm
    of the mean change there (policy's samples minus reference's), at every position."""
    layer, index = where
    if kind == "neuron":
        value = float(means["neuron"][layer, index])

        def neuron_hook(x: Tensor, hook) -> Tensor:
            x = x.clone()
            x[..., index] = value
            return x
        return [(f"blocks.{layer}.mlp.hook_post", neuron_hook)]
    if kind == "head":
        return mean_ablation_hooks([(layer, index)], means["z"])
    size = float(means["gap"][layer])

    def steer_hook(x: Tensor, hook) -> Tensor:
        return x - size * direction.to(x)
    return [(f"blocks.{layer}.hook_resid_post", steer_hook)]


def mean_excess(policy, prompts, settings: SampleSettings, proxy_fn, gold_fn, penalty, ref: Scored, hooks=()) -> dict:
    """The mean excess, proxy, gold and rep₃ of samples from `policy` with `hooks`."""
    s = score(policy, sample(policy, prompts, settings, hooks), settings, proxy_fn, gold_fn, penalty)
    e = s.proxy - standardised_gold(s.gold, ref.gold, ref.proxy)
    return {"excess": e.mean().item(), "proxy": s.proxy.mean().item(), "gold": s.gold.mean().item(),
            "rep3": s.rep3.mean().item()}


def random_like(cands: Candidates, j: int, exclude: set[int], gen: torch.Generator, d_model: int) -> list:
    """The hooks of a random candidate of j's kind: a neuron of its layer or another head, mean-ablated,
    or a random unit direction at its layer steered against by the same |Δ_L|."""
    kind, where = cands.kinds[j], cands.where[j]
    if kind == "direction":
        v = torch.randn(d_model, generator=gen)
        return ablation_hooks(kind, where, cands.means, v / v.norm())
    pool = [i for i, (k, w) in enumerate(zip(cands.kinds, cands.where))
            if k == kind and i not in exclude and (kind == "head" or w[0] == where[0])]
    i = pool[int(torch.randint(len(pool), (1,), generator=gen))]
    return ablation_hooks(kind, cands.where[i], cands.means)


def causal_check(policy, prompts, settings: SampleSettings, proxy_fn, gold_fn, penalty, ref: Scored,
                 cands: Candidates, chosen: list[int], n_random: int, seed: int, before: dict | None = None) -> dict:
    """ē(policy) − ē(the `chosen` candidates mean-ablated together), and the same for `n_random`
    draws of as many random candidates, each of its counterpart's kind (`random_like`); `before`:
    the unablated policy's `mean_excess` at these settings, when already measured."""
    run = lambda hooks: mean_excess(policy, prompts, settings, proxy_fn, gold_fn, penalty, ref, hooks)  # noqa: E731
    before = before or run([])
    ablated = run([h for j in chosen for h in ablation_hooks(cands.kinds[j], cands.where[j], cands.means,
                                                             cands.directions[cands.where[j][0]])])
    gen = torch.Generator().manual_seed(seed)
    randoms = []
    for _ in range(n_random):
        r = run([h for j in chosen for h in random_like(cands, j, set(chosen), gen, policy.cfg.d_model)])
        randoms.append({**r, "reduction": before["excess"] - r["excess"]})
    return {"ablated_candidates": [cands.labels[j] for j in chosen], "before": before, "ablated": ablated,
            "reduction": before["excess"] - ablated["excess"], "random": randoms,
            "random_reduction": sum(r["reduction"] for r in randoms) / max(len(randoms), 1)}


# --- one run ------------------------------------------------------------------------------------


def sample_reference(reference, prompts, proxy_fn, gold_fn, f: FindSettings) -> Scored:
    """The reference's scored samples: the standardisation's moments and group 0 of every decomposition."""
    settings = f.sampling(f.n_samples)
    return score(reference, sample(reference, prompts, settings), settings, proxy_fn, gold_fn, f.penalty)


@torch.no_grad()
def find_in_policy(reference, policy, prompts: list[str], proxy_fn: ScoreFn, gold_fn: ScoreFn, f: FindSettings,
                   ref: Scored | None = None, causal: bool = True, n_rows: int = 12) -> dict:
    """Steps 1-5 of the module docstring for one policy against its reference."""
    t0 = time.time()
    ref = ref or sample_reference(reference, prompts, proxy_fn, gold_fn, f)
    settings = f.sampling(f.n_samples)
    pol = score(policy, sample(policy, prompts, settings), settings, proxy_fn, gold_fn, f.penalty)
    e = torch.cat([ref.proxy - standardised_gold(ref.gold, ref.gold, ref.proxy),
                   pol.proxy - standardised_gold(pol.gold, ref.gold, ref.proxy)])
    group = torch.cat([torch.zeros(len(ref.proxy), dtype=torch.bool), torch.ones(len(pol.proxy), dtype=torch.bool)])
    cands = read_candidates(policy, ref.samples, pol.samples)
    promoted, demoted, mover_ids = top_movers(reference, policy, pol.samples, f.top_k_movers)
    movers = token_shares([ref.texts, pol.texts], mover_ids)
    activation = torch.cat([cands.activation, movers], 1)
    labels = cands.labels + [f"token {t!r} share" for t, _ in promoted]
    kinds = cands.kinds + ["mover"] * len(mover_ids)
    ex = explained_share(e, activation, group)
    order = ex["share"].nan_to_num(nan=-1e9).argsort(descending=True).tolist()
    top = next(j for j in order if kinds[j] in INTERNAL)
    rows = [{"label": labels[j], "kind": kinds[j], "share": ex["share"][j].item(), "r2_within": ex["r2_within"][j].item(),
             "slope": ex["slope"][j].item(), "gap_activation": ex["gap_activation"][j].item()} for j in order[:n_rows]]
    mover_rows = [{"label": labels[j], "share": ex["share"][j].item(), "r2_within": ex["r2_within"][j].item()}
                  for j in range(len(cands.labels), len(labels))]
    both = Texts(ref.texts.completions + pol.texts.completions, torch.cat([ref.texts.ids, pol.texts.ids]),
                 torch.cat([ref.texts.mask, pol.texts.mask]))
    described = describe(activation[:, top].tolist(), both)
    shuffled = activation[torch.randperm(len(e), generator=torch.Generator().manual_seed(f.seed)), top]
    described_shuffled = describe(shuffled.tolist(), both)  # the describer's control: a feature that tracks nothing
    kind, (layer, index) = cands.kinds[top], cands.where[top]
    encode, direction = finding_readout(policy, kind, layer, index, cands, pol)
    snippets = top_activating(policy, encode, [p + c for p, c in zip(pol.samples.prompts, pol.texts.completions)], [0], k=6)[0]
    tokens, attend, _ = sequences(pol.samples)
    scale = final_ln_scale(policy, tokens[:64], attend[:64])
    out = {"n_reference": len(ref.proxy), "n_policy": len(pol.proxy),
           "reference": {"proxy": ref.proxy.mean().item(), "gold": ref.gold.mean().item(), "rep3": ref.rep3.mean().item()},
           "policy": {"proxy": pol.proxy.mean().item(), "gold": pol.gold.mean().item(), "rep3": pol.rep3.mean().item(),
                      "excess": e[group].mean().item(),
                      "excess_se": (e[group].std() / len(pol.proxy) ** 0.5).item()},
           "gold_scale": {"mu_g": ref.gold.mean().item(), "sd_g": ref.gold.std(unbiased=False).item(),
                          "mu_p": ref.proxy.mean().item(), "sd_p": ref.proxy.std(unbiased=False).item()},
           "decomposition": rows, "movers": {"promoted": promoted, "demoted": demoted, "rows": mover_rows},
           "finding": {"label": cands.labels[top], "kind": kind, "share": ex["share"][top].item(),
                       "r2_within": ex["r2_within"][top].item(), "description": described,
                       "description_shuffled": described_shuffled["best"],
                       "contexts": snippets, "promotes": promoted_tokens(policy, direction, scale, k=8)},
           "samples": {"reference": ref.texts.completions[:4], "policy": pol.texts.completions[:6]}}
    if causal:
        internal = [j for j in order if kinds[j] in INTERNAL]
        direction = [j for j in order if kinds[j] == "direction"][:1]
        before = None
        for name, chosen in (("causal", internal[:1]), ("causal_top", internal[: f.n_ablate]), ("causal_direction", direction)):
            out[name] = causal_check(policy, prompts, f.sampling(f.n_causal, 1), proxy_fn, gold_fn, f.penalty, ref,
                                     cands, chosen, f.n_random, f.seed, before)
            before = out[name]["before"]
    out["seconds"] = time.time() - t0
    return out


def finding_readout(policy, kind: str, layer: int, index: int, cands: Candidates, pol: Scored):
    """(encode(tokens) -> [b, pos, 1] activation, the d_model direction it writes): for the contexts
    and the promoted tokens."""
    if kind == "neuron":
        return (lambda t: site_activations(policy, f"blocks.{layer}.mlp.hook_post", t)[..., index : index + 1],
                policy.blocks[layer].mlp.W_out[index].detach())
    if kind == "head":
        W_O, hook = policy.blocks[layer].attn.W_O[index].detach(), f"blocks.{layer}.attn.hook_z"

        def head_out(t: Tensor, attend: Tensor | None = None) -> Tensor:  # [b, pos, d_model]: z_h W_O^h
            kw = {} if attend is None or bool(attend.all()) else {"attention_mask": attend.long()}
            _, cache = policy.run_with_cache(t, names_filter=hook, stop_at_layer=layer + 1, **kw)
            return cache[hook][:, :, index] @ W_O
        tokens, attend, keep = sequences(pol.samples)
        return (lambda t: head_out(t).norm(dim=-1, keepdim=True),
                _mean_over(head_out(tokens[:64], attend[:64]), keep[:64]).mean(0))
    u = cands.directions[layer]
    return (lambda t: (site_activations(policy, f"blocks.{layer}.hook_resid_post", t) @ u.to(policy.cfg.device))[..., None], u)
