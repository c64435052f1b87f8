"""What RLHF changed, in sparse-autoencoder features: train an SAE on the reference, diff, steer.

    python -m interp.features RUN_DIR [--layer L] [--hook resid_post]

writes RUN_DIR/interp/features.html (figures embedded), RUN_DIR/interp/features/*.png and
RUN_DIR/interp/features/features.json. Needs SAE Lens: `pip install -e ".[sae]"`.

1. **The SAE.** A BatchTopK SAE (SAE Lens's `LanguageModelSAETrainingRunner`, our
   HookedTransformer and a `datasets.Dataset` of review snippets passed in — no Hub), trained
   on the REFERENCE model's activations at one site (`blocks.{L}.hook_{hook}`) on the train
   split of the preset's review corpus; SAE Lens saves it as a JumpReLU SAE. It is cached under
   `<cache>/saes/<reference hash>-<site>-<settings hash>/`, so a second run (or another run
   from the same reference) loads it. Its quality is SAE Lens's `run_evals` on the validation
   split: explained variance, MSE, L0, dead features (density 0 on the eval tokens) and the CE
   loss with the reconstruction spliced in, against the clean and the zero-ablated model.
2. **Feature diffing.** The same token sequences (the run's prompts, completions sampled from
   both models) go through the reference and the tuned model; the SAE (one SAE for both)
   encodes each one's activations at the site. Per feature f, over real positions p:

       mean_m(f) = mean_p a_f(x_m[p]),   freq_m(f) = mean_p [a_f(x_m[p]) > 0],   m ∈ {ref, tuned}
       Δa(f)     = mean_tuned(f) − mean_ref(f)          (features ranked by |Δa|)

   Each top feature comes with its top-activating review snippets (reference, validation
   split) and the tokens its decoder direction d_f promotes through the TUNED model's
   unembedding at the tuned model's own mean final-LayerNorm scale s:
   logits_f = ((d_f − mean(d_f)) / s) · W_U.
3. **How much of the change the features explain.** With Δx[p] = x_tuned[p] − x_ref[p] and
   Δa_f[p] the per-position activation change, the top-k features (by |Δa|) explain

       1 − Σ_p |Δx[p] − Σ_{f ∈ top k} Δa_f[p] d_f|² / Σ_p |Δx[p]|²

   of it (k = 1, 10, 100, all). With all features the rest is the change in the SAE's
   reconstruction error, Σ_p |Δerr[p]|² / Σ_p |Δx[p]|² (reported beside it).
4. **Causal checks.** Steering: add v = Σ_{f ∈ top n} Δa(f) d_f to the REFERENCE's activations
   at the site, at every position, sample with `rlhf_scratch.generation.generate`, and measure
   the task reward and the sampled KL(steered ‖ reference); against random features (the same
   coefficients on random live features, rescaled to |v|). Ablation: zero the top features
   that RLHF turned up (Δa > 0) in the TUNED model, x ← x − Σ_f a_f(x) d_f, and measure the
   reward drop; against as many random live features. Same prompts and seed for every model.

Units: feature activations in SAE units (a_f · |d_f| is a residual-stream norm); rewards in the
task's units; KL in nats per sample (summed over its completion tokens).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor
from transformer_lens import HookedTransformer

from interp.figures import bars
from interp.pages import Html, esc, figure, page, pyplot, rounded, save_figure, table

HOOKS = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")
EXPLAINED_KS = (1, 10, 100)
OUT_NAME = "features"  # RUN_DIR/interp/features.html and RUN_DIR/interp/features/
STEPS = ("diff", "explained", "snippets", "causal", "write")


class FeaturesError(ValueError):
    """Bad input or a missing dependency: one line."""


def require_sae_lens():
    """Import SAE Lens, or fail in one line naming the extra that installs it."""
    try:
        import sae_lens  # noqa: F401
    except ImportError:
        raise FeaturesError("interp.features needs SAE Lens: pip install -e \".[sae]\" (the `sae` extra)") from None
    logging.getLogger("sae_lens").setLevel(logging.ERROR)  # its warnings about our overrides are expected
    return sae_lens


def site_hook(layer: int, hook: str = "resid_post") -> str:
    """The TransformerLens hook name of a site: `blocks.{layer}.hook_{hook}`."""
    return f"blocks.{layer}.hook_{hook}"


def model_hash(model: HookedTransformer) -> str:
    """sha256 of the model's parameters (names, shapes and values): the SAE cache key's first part."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(str(tuple(tensor.shape)).encode())
        h.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


@dataclass
class SAESettings:
    """How the SAE is trained (all of it goes into the cache key)."""

    d_sae: int = 1024
    """Number of features (8x the tiny preset's d_model = 128)."""
    k: float = 16
    """BatchTopK: mean number of active features per token during training."""
    training_tokens: int = 400_000
    """Activations to train on (about one pass over the train split; a few minutes on 2 CPU cores)."""
    context_size: int = 128
    """Tokens per sequence (review snippets concatenated, BOS-separated); capped at the model's n_ctx."""
    batch_tokens: int = 1024
    lr: float = 1e-3
    seed: int = 0
    eval_batches: int = 8
    """Batches of 16 sequences for SAE Lens's evals on the validation split."""

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


def default_cache_root() -> Path:
    """`$RLHF_SCRATCH_CACHE/saes` (default ~/.cache/rlhf_scratch/saes), beside the corpus."""
    from rlhf_scratch.corpus import cache_dir

    return cache_dir() / "saes"


def review_texts(split: str) -> list[str]:
    """The preset's review snippets of one split, or one line saying the corpus is unavailable."""
    from rlhf_scratch.corpus import CorpusUnavailableError, lm_texts

    try:
        return lm_texts(split)
    except CorpusUnavailableError as e:
        raise FeaturesError(f"review corpus: {e}") from None


@contextlib.contextmanager
def _quiet():
    """SAE Lens warns that an in-memory dataset is not pre-tokenized and that it is reused for
    more than one epoch: both expected here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _activation_store(model: HookedTransformer, hook_name: str, texts: list[str], context_size: int,
                      d_in: int, batch_prompts: int, total_tokens: int):
    from datasets import Dataset
    from sae_lens import ActivationsStore

    with _quiet():
        return ActivationsStore(
            model=model, dataset=Dataset.from_dict({"text": texts}), streaming=False, hook_name=hook_name,
            hook_head_index=None, context_size=context_size, d_in=d_in, n_batches_in_buffer=8,
            total_training_tokens=total_tokens, store_batch_size_prompts=batch_prompts,
            train_batch_size_tokens=1024, prepend_bos=True, normalize_activations="none",
            device=torch.device(model.cfg.device), dtype="float32",
            exclude_special_tokens=torch.tensor(_special_ids(model), dtype=torch.long))


def train_sae(model: HookedTransformer, hook_name: str, texts: list[str], settings: SAESettings,
              out_dir: str | Path, progress: bool = True):
    """Train a BatchTopK SAE on `model`'s activations at `hook_name` over `texts` with SAE Lens's
    runner (model and dataset passed in, nothing from the Hub) and save it (as SAE Lens's JumpReLU
    inference SAE) in `out_dir`. Returns the loaded inference SAE."""
    require_sae_lens()
    from datasets import Dataset
    from sae_lens import SAE, LanguageModelSAERunnerConfig, LanguageModelSAETrainingRunner, LoggingConfig
    from sae_lens.saes.batchtopk_sae import BatchTopKTrainingSAEConfig

    context = min(settings.context_size, model.cfg.n_ctx)
    cfg = LanguageModelSAERunnerConfig(
        sae=BatchTopKTrainingSAEConfig(d_in=model.cfg.d_model, d_sae=settings.d_sae, k=settings.k,
                                       normalize_activations="expected_average_only_in"),
        model_name="reference", hook_name=hook_name, dataset_path="", streaming=False,
        is_dataset_tokenized=False, context_size=context, prepend_bos=True, exclude_special_tokens=True,
        training_tokens=settings.training_tokens, train_batch_size_tokens=settings.batch_tokens,
        store_batch_size_prompts=16, n_batches_in_buffer=8, n_batches_for_norm_estimate=10,
        lr=settings.lr, lr_warm_up_steps=20, seed=settings.seed, device=str(model.cfg.device),
        dead_feature_window=500, feature_sampling_window=1000,
        logger=LoggingConfig(log_to_wandb=False), checkpoint_path=None, output_path=None, verbose=False,
        model_from_pretrained_kwargs={},  # our model is already loaded and processed
    )
    torch.manual_seed(settings.seed)
    # enable_grad: callers often analyse under no_grad / set_grad_enabled(False); training needs gradients
    with _quiet(), torch.enable_grad(), open(os.devnull, "w") as devnull, \
            contextlib.redirect_stderr(sys.stderr if progress else devnull):
        runner = LanguageModelSAETrainingRunner(cfg, override_dataset=Dataset.from_dict({"text": texts}),
                                                override_model=model)
        trained = runner.run()
    trained.save_inference_model(out_dir)
    return SAE.load_from_disk(out_dir, device=str(model.cfg.device))


def evaluate_sae(sae, model: HookedTransformer, texts: list[str], settings: SAESettings) -> dict[str, float]:
    """SAE Lens's `run_evals` on `texts` (special tokens excluded): the numbers a reader needs to
    judge whether the features mean anything."""
    from sae_lens import run_evals
    from sae_lens.evals import EvalConfig
    from sae_lens.training.activation_scaler import ActivationScaler

    hook_name = sae.cfg.metadata.hook_name
    context = min(settings.context_size, model.cfg.n_ctx)
    store = _activation_store(model, hook_name, texts, context, model.cfg.d_model, 16, 10**9)
    config = EvalConfig(batch_size_prompts=16, n_eval_reconstruction_batches=settings.eval_batches,
                        n_eval_sparsity_variance_batches=settings.eval_batches, compute_kl=True,
                        compute_ce_loss=True, compute_l2_norms=True, compute_sparsity_metrics=True,
                        compute_variance_metrics=True, compute_featurewise_density_statistics=True)
    with _quiet():
        metrics, per_feature = run_evals(sae, store, model, ActivationScaler(), config,
                                         exclude_special_tokens=_special_ids(model))
    density = torch.tensor(per_feature["feature_density"])
    perf, recon = metrics["model_performance_preservation"], metrics["reconstruction_quality"]
    return {
        "explained_variance": recon["explained_variance"], "mse": recon["mse"], "cossim": recon["cossim"],
        "l0": metrics["sparsity"]["l0"], "d_sae": sae.cfg.d_sae,
        "dead_features": int((density == 0).sum()), "dead_fraction": float((density == 0).float().mean()),
        "ce_loss_clean": perf["ce_loss_without_sae"], "ce_loss_with_sae": perf["ce_loss_with_sae"],
        "ce_loss_zero_ablated": perf["ce_loss_with_ablation"],
        "ce_loss_increase": perf["ce_loss_with_sae"] - perf["ce_loss_without_sae"],
        "ce_loss_score": perf["ce_loss_score"], "kl_with_sae": metrics["model_behavior_preservation"]["kl_div_with_sae"],
        "eval_tokens": metrics["token_stats"]["total_tokens_eval_sparsity_variance"],
    }


def load_or_train_sae(reference: HookedTransformer, hook_name: str, settings: SAESettings,
                      cache_root: str | Path | None = None, progress: bool = True) -> tuple[Any, dict, Path, bool]:
    """The SAE for (reference, site, settings) from the cache, or trained and cached now.

    Returns (sae, quality, cache folder, whether it was loaded from the cache)."""
    require_sae_lens()
    from sae_lens import SAE

    root = Path(cache_root) if cache_root is not None else default_cache_root()
    folder = root / f"{model_hash(reference)[:16]}-{hook_name}-{settings.key()}"
    quality_file = folder / "quality.json"
    if quality_file.is_file():
        return SAE.load_from_disk(folder, device=str(reference.cfg.device)), json.loads(quality_file.read_text()), folder, True
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=root))
    try:
        sae = train_sae(reference, hook_name, review_texts("train"), settings, tmp, progress)
        quality = evaluate_sae(sae, reference, review_texts("val"), settings)
        quality["settings"] = asdict(settings)
        (tmp / "quality.json").write_text(json.dumps(quality, indent=2) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return SAE.load_from_disk(folder, device=str(reference.cfg.device)), quality, folder, False


# --- feature diffing ------------------------------------------------------------------------------


def _special_ids(model: HookedTransformer) -> list[int]:
    tok = model.tokenizer
    if tok is None:
        return []
    return sorted({i for i in (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) if i is not None})


def real_positions(model: HookedTransformer, tokens: Int[Tensor, "batch pos"],
                   attention_mask: Bool[Tensor, "batch pos"] | None = None) -> Bool[Tensor, "batch pos"]:
    """Positions that hold a real token: attended (not padding) and not BOS / EOS / pad, whose
    activations are outliers an SAE is not trained on."""
    mask = torch.ones_like(tokens, dtype=torch.bool) if attention_mask is None else attention_mask.bool().clone()
    for i in _special_ids(model):
        mask &= tokens != i
    return mask


@torch.no_grad()
def site_activations(model: HookedTransformer, hook_name: str, tokens: Int[Tensor, "batch pos"],
                     attention_mask: Bool[Tensor, "batch pos"] | None = None) -> Float[Tensor, "batch pos d_model"]:
    """The model's activations at `hook_name` (left padding handled by the attention mask)."""
    kw = {} if attention_mask is None or bool(attention_mask.all()) else {"attention_mask": attention_mask.long()}
    _, cache = model.run_with_cache(tokens, names_filter=hook_name, **kw)
    return cache[hook_name]


@dataclass
class FeatureDiff:
    """Per-feature statistics of the reference and the tuned model on the same tokens (see the
    module docstring); `ranked` orders the features by |change|, largest first."""

    mean_ref: Float[Tensor, "d_sae"]
    mean_tuned: Float[Tensor, "d_sae"]
    freq_ref: Float[Tensor, "d_sae"]
    freq_tuned: Float[Tensor, "d_sae"]
    change: Float[Tensor, "d_sae"]
    ranked: Int[Tensor, "d_sae"]
    resid_change: Float[Tensor, "n d_model"] = field(repr=False)
    """x_tuned − x_ref at each real position."""
    act_change: Float[Tensor, "n d_sae"] = field(repr=False)
    """a(x_tuned) − a(x_ref) at each real position."""
    recon_change: Float[Tensor, "n d_model"] = field(repr=False)
    """x̂_tuned − x̂_ref (the SAE's reconstructions) at each real position."""


@torch.no_grad()
def feature_diff(reference: HookedTransformer, tuned: HookedTransformer, sae, hook_name: str,
                 tokens: Int[Tensor, "batch pos"], attention_mask: Bool[Tensor, "batch pos"] | None = None) -> FeatureDiff:
    """Encode both models' activations at `hook_name` on the same `tokens` with one SAE and compare."""
    mask = real_positions(reference, tokens, attention_mask)
    x_ref = site_activations(reference, hook_name, tokens, attention_mask)[mask]  # [n, d_model]
    x_tuned = site_activations(tuned, hook_name, tokens, attention_mask)[mask]
    a_ref, a_tuned = sae.encode(x_ref), sae.encode(x_tuned)  # [n, d_sae]
    change = a_tuned.mean(0) - a_ref.mean(0)
    return FeatureDiff(
        mean_ref=a_ref.mean(0), mean_tuned=a_tuned.mean(0),
        freq_ref=(a_ref > 0).float().mean(0), freq_tuned=(a_tuned > 0).float().mean(0),
        change=change, ranked=change.abs().argsort(descending=True, stable=True),
        resid_change=x_tuned - x_ref, act_change=a_tuned - a_ref,
        recon_change=sae.decode(a_tuned) - sae.decode(a_ref),
    )


def explained_fraction(diff: FeatureDiff, W_dec: Float[Tensor, "d_sae d_model"],
                       ks: tuple[int, ...] = EXPLAINED_KS) -> dict[str, float]:
    """Share of the residual-stream change explained by the top-k features' decoder directions
    (per position, see the module docstring), for each k and for all features; and the change in
    the SAE's reconstruction error. nan when the residual did not change at all."""
    total = diff.resid_change.pow(2).sum().item()

    def frac(rest: Tensor) -> float:
        return float("nan") if total == 0 else 1 - rest.pow(2).sum().item() / total

    out = {}
    for k in ks:
        top = diff.ranked[:k]
        out[f"top_{k}"] = frac(diff.resid_change - diff.act_change[:, top] @ W_dec[top])
    out["all_features"] = frac(diff.resid_change - diff.act_change @ W_dec)
    out["error_change"] = float("nan") if total == 0 else (diff.resid_change - diff.recon_change).pow(2).sum().item() / total
    return out


@torch.no_grad()
def final_ln_scale(model: HookedTransformer, tokens: Int[Tensor, "batch pos"],
                   attention_mask: Bool[Tensor, "batch pos"] | None = None) -> float:
    """The model's mean final-LayerNorm scale (ln_final.hook_scale) over the real positions."""
    scale = site_activations(model, "ln_final.hook_scale", tokens, attention_mask)[..., 0]
    return scale[real_positions(model, tokens, attention_mask)].mean().item()


def direction_logits(model: HookedTransformer, direction: Float[Tensor, "d_model"], scale: float) -> Float[Tensor, "d_vocab"]:
    """What adding `direction` to the final residual does to `model`'s logits at final-LN scale
    `scale`: ((d − mean d) / scale) · w_ln · W_U (w_ln = 1 when the LayerNorm weights are folded in)."""
    d = (direction - direction.mean()) / scale
    if getattr(model.ln_final, "w", None) is not None:
        d = d * model.ln_final.w
    return d @ model.W_U


@torch.no_grad()
def promoted_tokens(model: HookedTransformer, direction: Float[Tensor, "d_model"], scale: float,
                    k: int = 8) -> list[tuple[str, float]]:
    """The k tokens whose logits `direction` raises most (token, logit change)."""
    logits = direction_logits(model, direction, scale)
    top = logits.topk(k)
    return [(model.to_string(torch.tensor([int(i)])), float(v)) for v, i in zip(top.values, top.indices)]


@torch.no_grad()
def top_activating_snippets(model: HookedTransformer, sae, hook_name: str, texts: list[str],
                            features: list[int], k: int = 5, batch: int = 32) -> dict[int, list[tuple[float, str]]]:
    """For each feature, the k (activation, snippet) where it fires most on `texts`; the snippet
    is the text up to the token, the token in [[ ]], and three tokens after it."""
    acts, rows = [], []
    for start in range(0, len(texts), batch):
        chunk = texts[start : start + batch]
        toks = [model.to_tokens(t, truncate=True)[0] for t in chunk]
        width = max(len(t) for t in toks)
        tokens = torch.zeros(len(toks), width, dtype=torch.long, device=model.cfg.device)
        attend = torch.zeros(len(toks), width, dtype=torch.bool, device=model.cfg.device)
        for i, t in enumerate(toks):  # right padding: exact at the real positions (causal attention)
            tokens[i, : len(t)], attend[i, : len(t)] = t, True
        x = site_activations(model, hook_name, tokens)
        a = sae.encode(x)[..., features]  # [b, pos, n]
        a = a.masked_fill(~real_positions(model, tokens, attend)[..., None], float("-inf"))
        acts.append(a.flatten(0, 1))
        rows += [(tokens[i], p) for i in range(len(toks)) for p in range(width)]
    table = torch.cat(acts)  # [rows, n]
    out = {}
    for j, f in enumerate(features):
        best = table[:, j].topk(min(k, table.shape[0]))
        out[f] = []
        for v, r in zip(best.values.tolist(), best.indices.tolist()):
            if v <= 0:
                break
            t, p = rows[r]
            before, tok, after = model.to_string(t[max(1, p - 12) : p]), model.to_string(t[p : p + 1]), model.to_string(t[p + 1 : p + 4])
            out[f].append((v, f"{before}[[{tok}]]{after}".replace("<|endoftext|>", "")))
    return out


# --- causal checks: steering and ablation ---------------------------------------------------------


def steering_vector(W_dec: Float[Tensor, "d_sae d_model"], features: list[int],
                    coefficients: Float[Tensor, "n"]) -> Float[Tensor, "d_model"]:
    """v = Σ_i coefficients[i] · W_dec[features[i]]."""
    return coefficients.to(W_dec) @ W_dec[features]


def add_vector_hook(vector: Float[Tensor, "d_model"]):
    """A hook adding `vector` to the activations at every position."""
    def hook(x: Tensor, hook) -> Tensor:
        return x + vector.to(x)
    return hook


def ablate_features_hook(sae, features: list[int]):
    """A hook that zero-ablates `features`: x ← x − Σ_f a_f(x) W_dec[f] (the SAE's error term and
    every other feature stay)."""
    def hook(x: Tensor, hook) -> Tensor:
        a = sae.encode(x)[..., features]
        return x - a @ sae.W_dec[features].to(x)
    return hook


@dataclass
class SampleSettings:
    """How the causal checks sample: the run's own settings by default (`from_args`)."""

    n_samples: int = 64
    gen_len: int = 20
    temperature: float = 1.0
    top_k: int = 0
    prepend_bos: bool = True
    stop_at_eos: bool = False
    seed: int = 0

    @classmethod
    def from_args(cls, args, n_samples: int, seed: int = 0) -> SampleSettings:
        return cls(n_samples, args.gen_len, args.temperature, args.top_k, args.prepend_bos, args.eos_stops(), seed)

    def for_diff(self, n_diff: int) -> SampleSettings:
        """The same sampling with `n_diff` samples per model and the next seed: the diff's sequences
        are not the causal checks' samples."""
        return replace(self, n_samples=n_diff, seed=self.seed + 1)


@torch.no_grad()
def sample(model: HookedTransformer, prompts: list[str], s: SampleSettings, fwd_hooks: list = ()):
    """`s.n_samples` completions of `prompts` (cycled) with `rlhf_scratch.generation.generate`, with
    `fwd_hooks` in place. Returns (prompts used, prompt ids, prompt mask, completion ids, completion mask)."""
    from rlhf_scratch.generation import generate, tokenize_prompts

    used = [prompts[i % len(prompts)] for i in range(s.n_samples)]
    prompt_ids, prompt_mask = tokenize_prompts(model, used, s.prepend_bos)
    torch.manual_seed(s.seed)
    with model.hooks(fwd_hooks=list(fwd_hooks)):
        ids, mask = generate(model, prompt_ids, prompt_mask, s.gen_len, s.temperature, s.top_k, s.stop_at_eos)
    return used, prompt_ids, prompt_mask, ids, mask


@torch.no_grad()
def diff_tokens(models: list[HookedTransformer], prompts: list[str], s: SampleSettings
                ) -> tuple[Int[Tensor, "seqs pos"], Bool[Tensor, "seqs pos"]]:
    """The sequences a diff reads: `s.n_samples` completions of `prompts` sampled from each model in
    turn (same prompts, same seed), stacked, as (tokens, attention mask). Every model then reads all
    of them, so a feature's activation change is a change in the model, not in the text it reads."""
    batches = [sample(m, prompts, s) for m in models]
    prompt_ids = torch.cat([b[1] for b in batches])
    prompt_mask = torch.cat([b[2] for b in batches])
    completions = torch.cat([b[3] for b in batches])
    return torch.cat([prompt_ids, completions], 1), torch.cat([prompt_mask, torch.ones_like(completions, dtype=torch.bool)], 1)


@torch.no_grad()
def completion_logprobs(model: HookedTransformer, prompt_ids, prompt_mask, ids, mask,
                        fwd_hooks: list = ()) -> Float[Tensor, "batch"]:
    """Σ_t log p(completion token t) under `model` (with `fwd_hooks`), over the kept tokens."""
    seq = torch.cat([prompt_ids, ids], 1)
    attend = torch.cat([prompt_mask, torch.ones_like(mask)], 1)
    kw = {} if bool(attend.all()) else {"attention_mask": attend.long()}
    with model.hooks(fwd_hooks=list(fwd_hooks)):
        logits = model(seq, **kw)
    P = prompt_ids.shape[1]
    logp = logits[:, P - 1 : -1].log_softmax(-1).gather(-1, ids[..., None])[..., 0]
    return (logp * mask).sum(1)


def sampled_reward_and_kl(model: HookedTransformer, reference: HookedTransformer, prompts: list[str],
                          reward_fn, s: SampleSettings, fwd_hooks: list = ()) -> tuple[float, float, float]:
    """(mean reward, its standard error, mean sampled KL(model+hooks ‖ reference) in nats per sample)
    of samples from `model` with `fwd_hooks`. The reward is called by the trainer's contract; the KL
    is the log-ratio Σ_t log p_model − log p_ref summed over each sample's completion tokens."""
    from rlhf_scratch.generation import decode_completions
    from rlhf_scratch.reward.tasks import score_completions

    used, prompt_ids, prompt_mask, ids, mask = sample(model, prompts, s, fwd_hooks)
    completions = decode_completions(model, ids, mask, s.stop_at_eos)
    rewards = score_completions(reward_fn, used, completions, [row[k].tolist() for row, k in zip(ids, mask)])
    kl = (completion_logprobs(model, prompt_ids, prompt_mask, ids, mask, fwd_hooks)
          - completion_logprobs(reference, prompt_ids, prompt_mask, ids, mask))
    se = rewards.std().item() / len(rewards) ** 0.5 if len(rewards) > 1 else float("nan")
    return rewards.mean().item(), se, kl.mean().item()


def _random_live(alive: Tensor, exclude: list[int], n: int, generator: torch.Generator) -> list[int]:
    pool = [int(i) for i in alive.nonzero()[:, 0] if int(i) not in set(exclude)]
    order = torch.randperm(len(pool), generator=generator)[:n]
    return [pool[int(i)] for i in order]


def causal_checks(reference: HookedTransformer, tuned: HookedTransformer, sae, hook_name: str, diff: FeatureDiff,
                  prompts: list[str], reward_fn, s: SampleSettings, top_n: int = 10, n_random: int = 3,
                  progress=None) -> dict:
    """Steering the reference with the top changed features and ablating them from the tuned model,
    each against random live features (see the module docstring)."""
    W_dec = sae.W_dec.detach()
    top = [int(f) for f in diff.ranked[:top_n]]
    coeff = diff.change[top]
    v = steering_vector(W_dec, top, coeff)
    alive = (diff.freq_ref > 0) | (diff.freq_tuned > 0)
    gen = torch.Generator().manual_seed(s.seed)
    tick = progress or (lambda: None)

    def run(model, hooks):
        tick()
        return sampled_reward_and_kl(model, reference, prompts, reward_fn, s, hooks)

    ref_r, ref_se, ref_kl = run(reference, [])
    tuned_r, tuned_se, tuned_kl = run(tuned, [])
    steer_r, steer_se, steer_kl = run(reference, [(hook_name, add_vector_hook(v))])
    random_steer = []
    for _ in range(n_random):
        feats = _random_live(alive, top, len(top), gen)
        u = steering_vector(W_dec, feats, coeff[torch.randperm(len(feats), generator=gen)])
        u = u * (v.norm() / u.norm().clamp_min(1e-12))
        r, se, kl = run(reference, [(hook_name, add_vector_hook(u))])
        random_steer.append({"features": feats, "reward": r, "reward_se": se, "kl": kl})
    up = [f for f in top if float(diff.change[f]) > 0]
    abl_r, abl_se, abl_kl = run(tuned, [(hook_name, ablate_features_hook(sae, up))]) if up else (tuned_r, tuned_se, tuned_kl)
    random_abl = []
    for _ in range(n_random if up else 0):
        feats = _random_live(alive, top, len(up), gen)
        r, se, kl = run(tuned, [(hook_name, ablate_features_hook(sae, feats))])
        random_abl.append({"features": feats, "reward": r, "reward_se": se, "kl": kl})

    def mean(rows, key):
        return sum(r[key] for r in rows) / len(rows) if rows else float("nan")

    return {
        "n_samples": s.n_samples, "gen_len": s.gen_len, "top_n": len(top), "steering_norm": v.norm().item(),
        "reference": {"reward": ref_r, "reward_se": ref_se, "kl": ref_kl},
        "tuned": {"reward": tuned_r, "reward_se": tuned_se, "kl": tuned_kl},
        "steered": {"features": top, "reward": steer_r, "reward_se": steer_se, "kl": steer_kl},
        "steered_random": random_steer,
        "steered_random_mean": {"reward": mean(random_steer, "reward"), "kl": mean(random_steer, "kl")},
        "ablated": {"features": up, "reward": abl_r, "reward_se": abl_se, "kl": abl_kl, "reward_drop": tuned_r - abl_r},
        "ablated_random": random_abl,
        "ablated_random_mean": {"reward": mean(random_abl, "reward"), "kl": mean(random_abl, "kl"),
                                "reward_drop": tuned_r - mean(random_abl, "reward")},
    }


# --- the page ---------------------------------------------------------------------------------


@torch.no_grad()
def make_features_report(reference: HookedTransformer, tuned: HookedTransformer, sae, quality: dict,
                         prompts: list[str], out_dir: str | Path, reward_fn=None, samples: SampleSettings | None = None,
                         n_diff: int = 64, top_n: int = 10, n_snippets: int = 300, title: str = "What did RLHF change? Features",
                         progress: bool = True, extra: dict | None = None) -> dict:
    """Diff, explain, steer and ablate, and write `out_dir/features.html` (+ `out_dir/features/`).

    `n_diff` completions are sampled from each model on `prompts`; both models then read all of
    them. reward_fn=None skips the causal checks. Returns the summary (also features.json)."""
    from tqdm.auto import tqdm

    out_dir = Path(out_dir)
    fig_dir = out_dir / OUT_NAME
    fig_dir.mkdir(parents=True, exist_ok=True)
    s = samples or SampleSettings()
    hook_name = sae.cfg.metadata.hook_name
    t0 = time.time()
    bar = tqdm(STEPS, desc="interp features", disable=not progress, file=sys.stderr)
    step = iter(bar)
    S: dict = {"site": hook_name, "sae": quality, "prompts": prompts[:5], **(extra or {})}

    # diff on the same sequences: completions from each model, read by both
    bar.set_postfix_str(next(step))
    tokens, attend = diff_tokens([reference, tuned], prompts, s.for_diff(n_diff))
    diff = feature_diff(reference, tuned, sae, hook_name, tokens, attend)
    top = [int(f) for f in diff.ranked[:top_n]]
    scale = final_ln_scale(tuned, tokens, attend)
    W_dec = sae.W_dec.detach()
    S["diff"] = {"n_sequences": tokens.shape[0], "n_positions": diff.resid_change.shape[0],
                 "tuned_final_ln_scale": scale,
                 "alive_ref": int((diff.freq_ref > 0).sum()), "alive_tuned": int((diff.freq_tuned > 0).sum()),
                 "mean_abs_change": diff.change.abs().mean().item(),
                 "resid_change_norm": diff.resid_change.norm(dim=-1).mean().item()}

    bar.set_postfix_str(next(step))
    S["explained"] = explained_fraction(diff, W_dec)

    bar.set_postfix_str(next(step))
    snippets = top_activating_snippets(reference, sae, hook_name, review_texts("val")[:n_snippets], top) if n_snippets else {}
    S["top_features"] = [
        {"feature": f, "change": float(diff.change[f]), "mean_ref": float(diff.mean_ref[f]),
         "mean_tuned": float(diff.mean_tuned[f]), "freq_ref": float(diff.freq_ref[f]),
         "freq_tuned": float(diff.freq_tuned[f]), "decoder_norm": float(W_dec[f].norm()),
         "promotes": promoted_tokens(tuned, W_dec[f], scale), "snippets": snippets.get(f, [])}
        for f in top]

    bar.set_postfix_str(next(step))
    if reward_fn is not None:
        S["causal"] = causal_checks(reference, tuned, sae, hook_name, diff, prompts, reward_fn, s, top_n)

    bar.set_postfix_str(next(step))
    figures = []
    labels = [f"F{f}" for f in top]
    figures.append(("Top changed features", bars(
        labels, {"reference": [t["mean_ref"] for t in S["top_features"]],
                 "tuned": [t["mean_tuned"] for t in S["top_features"]]},
        fig_dir, "features_top_changed.png", f"the {len(top)} features whose mean activation changed most",
        "mean activation"), "Mean SAE activation over the real positions of the same sequences, per model."))
    figures.append(("Firing frequency", _frequency_scatter(diff, top, fig_dir / "features_frequency.png"),
                    "Each point a feature: how often it fires in the reference vs the tuned model "
                    "(log scale; features that never fire in a model sit on its axis floor)."))
    ks = [k for k in EXPLAINED_KS] + ["all"]
    figures.append(("Explained change", bars(
        [f"top {k}" for k in ks], {"fraction": [S["explained"][f"top_{k}"] if k != "all" else S["explained"]["all_features"]
                                               for k in ks]},
        fig_dir, "features_explained.png", "share of the residual-stream change explained by the top-k features",
        "fraction"), f"Per position; the change in the SAE's reconstruction error is "
                      f"{S['explained']['error_change']:.3f} of it."))
    if "causal" in S:
        c = S["causal"]
        names = ["reference", "steered (top)", "steered (random)", "tuned", "ablated (top)", "ablated (random)"]
        rewards = [c["reference"]["reward"], c["steered"]["reward"], c["steered_random_mean"]["reward"],
                   c["tuned"]["reward"], c["ablated"]["reward"], c["ablated_random_mean"]["reward"]]
        figures.append(("Steering and ablation", bars(
            names, {"reward": rewards}, fig_dir, "features_causal.png", "mean reward of samples", "reward"),
            f"{c['n_samples']} samples of {c['gen_len']} tokens per bar, one seed for all; random bars: mean of "
            f"{len(c['steered_random'])} draws."))
    S["headline"] = _headline(S)
    S["seconds"] = time.time() - t0
    summary = rounded(S)
    (fig_dir / "features.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out_dir / "features.html").write_text(_html(title, summary, figures))
    bar.close()
    return summary


def _frequency_scatter(diff: FeatureDiff, top: list[int], path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    floor = 1e-5
    x, y = diff.freq_ref.clamp_min(floor).cpu(), diff.freq_tuned.clamp_min(floor).cpu()
    ax.scatter(x, y, s=5, alpha=0.4, label="all features")
    ax.scatter(x[top], y[top], s=18, color="C3", label="top changed")
    ax.plot([floor, 1], [floor, 1], color="grey", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("firing frequency, reference")
    ax.set_ylabel("firing frequency, tuned")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def _headline(S: dict) -> list[str]:
    q, e = S["sae"], S["explained"]
    lines = [f"SAE at {S['site']} ({q['d_sae']} features): explained variance {q['explained_variance']:.3f}, "
             f"L0 {q['l0']:.1f}, dead {q['dead_features']} ({q['dead_fraction']:.0%}); CE loss {q['ce_loss_clean']:.3f} → "
             f"{q['ce_loss_with_sae']:.3f} with the reconstruction spliced in (+{q['ce_loss_increase']:.3f} nats; "
             f"zero-ablated {q['ce_loss_zero_ablated']:.3f})."]
    lines.append(f"Residual change explained by the top 1 / 10 / 100 features: {e['top_1']:.3f} / {e['top_10']:.3f} / "
                 f"{e['top_100']:.3f}; all features {e['all_features']:.3f}, reconstruction-error change {e['error_change']:.3f}.")
    if S["top_features"]:
        t = S["top_features"][0]
        lines.append(f"Largest change: feature {t['feature']} ({t['mean_ref']:.3f} → {t['mean_tuned']:.3f}, fires "
                     f"{t['freq_ref']:.1%} → {t['freq_tuned']:.1%} of positions); its decoder direction promotes "
                     + ", ".join(repr(tok) for tok, _ in t["promotes"][:5]) + ".")
    if "causal" in S:
        c = S["causal"]
        lines.append(f"Steering the reference with the top {c['top_n']} features: reward {c['reference']['reward']:.3f} → "
                     f"{c['steered']['reward']:.3f} ± {c['steered']['reward_se']:.3f} s.e. (KL {c['steered']['kl']:.3f}); "
                     "random features of equal norm: "
                     f"{c['steered_random_mean']['reward']:.3f} (KL {c['steered_random_mean']['kl']:.3f}); "
                     f"tuned model {c['tuned']['reward']:.3f} (KL {c['tuned']['kl']:.3f}).")
        lines.append(f"Ablating the {len(c['ablated']['features'])} top features RLHF turned up from the tuned model: reward "
                     f"drop {c['ablated']['reward_drop']:+.3f}; as many random features: {c['ablated_random_mean']['reward_drop']:+.3f}.")
    return lines


def _html(title: str, S: dict, figures: list[tuple[str, Path, str]]) -> str:
    quality = table([(k, v) for k, v in S["sae"].items() if k != "settings"])
    features = table(
        [(f"F{t['feature']}", f"{t['mean_ref']:.3f} → {t['mean_tuned']:.3f}", f"{t['freq_ref']:.3f} → {t['freq_tuned']:.3f}",
          ", ".join(f"{tok!r} {v:+.2f}" for tok, v in t["promotes"]),
          Html("<br>".join(esc(f"{a:.2f}: {snip}") for a, snip in t["snippets"])))
         for t in S["top_features"]],
        header=["feature", "mean activation ref → tuned", "firing frequency ref → tuned",
                "tokens its decoder direction promotes (tuned unembedding; logit change per unit of activation)",
                "top-activating review snippets (reference; activation: text, token in [[ ]])"],
        row_headers=False)
    parts = [
        f"<h1>{esc(title)}</h1><p><a href='report.html'>← the interp report</a></p><h2>Findings</h2><ul>"
        + "".join(f"<li>{esc(line)}</li>" for line in S["headline"]) + "</ul>",
        "<h2>The SAE (SAE Lens evals, validation split)</h2>" + quality,
        "<p>Explained variance: 1 − E|x − x̂|² / Var(x). CE loss in nats per token with the SAE's reconstruction "
        "spliced in at the site; zero-ablated: the site's activations set to 0. Dead: never fires on the eval tokens. "
        "If explained variance is low or the CE increase is a large part of the zero-ablation increase, the features "
        "below are a coarse view.</p>",
        "<h2>Top changed features</h2>" + features,
    ]
    parts += [figure(path, fig_title, caption) for fig_title, path, caption in figures]
    parts.append(f"<p><small>Generated in {S['seconds']:.1f} s.</small></p>")
    return page(title, parts)


# --- command line ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m interp.features",
        description="What did RLHF change, in SAE features? Trains (or loads from the cache) an SAE on the reference "
                    "model's activations at one site, diffs the tuned model's features against the reference's, "
                    "steers and ablates; writes RUN_DIR/interp/features.html. Needs the `sae` extra.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder written by `python -m rlhf_scratch.train`")
    parser.add_argument("--layer", type=int, default=None, help="block of the site (default n_layers // 2)")
    parser.add_argument("--hook", default="resid_post", choices=HOOKS, help="the site's hook (default resid_post)")
    parser.add_argument("--out", default=None, help="output folder (default RUN_DIR/interp)")
    parser.add_argument("--cache-dir", default=None, help="SAE cache (default $RLHF_SCRATCH_CACHE/saes or ~/.cache/rlhf_scratch/saes)")
    parser.add_argument("--d-sae", type=int, default=SAESettings.d_sae, help="SAE features (default %(default)s)")
    parser.add_argument("--k", type=float, default=SAESettings.k, help="BatchTopK mean active features (default %(default)s)")
    parser.add_argument("--training-tokens", type=int, default=SAESettings.training_tokens, help="default %(default)s")
    parser.add_argument("--eval-batches", type=int, default=SAESettings.eval_batches, help="default %(default)s")
    parser.add_argument("--top-n", type=int, default=10, help="top changed features shown, steered and ablated (default 10)")
    parser.add_argument("--n-samples", type=int, default=64, help="samples per steering/ablation condition (default 64)")
    parser.add_argument("--n-diff", type=int, default=64, help="completions per model for the diff (default 64)")
    parser.add_argument("--n-snippets", type=int, default=300, help="validation snippets searched for examples (default 300)")
    parser.add_argument("--no-reward", action="store_true", help="skip steering and ablation")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1; 0 = torch's default)")
    args = parser.parse_args(argv)

    def fail(message: str) -> int:
        print(f"interp.features: error: {message}", file=sys.stderr)
        return 2

    run_dir = Path(args.run_dir)
    for name in ("d_sae", "training_tokens", "top_n", "n_samples", "n_diff", "eval_batches"):
        if getattr(args, name) < 1:
            return fail(f"--{name.replace('_', '-')}: must be >= 1; got {getattr(args, name)}")
    if args.k <= 0 or args.k > args.d_sae:
        return fail(f"--k: must be in (0, --d-sae]; got {args.k}")
    if args.n_snippets < 0 or args.threads < 0:
        return fail("--n-snippets and --threads: must be >= 0")
    if not run_dir.is_dir():
        return fail(f"{run_dir}: no such run folder")
    if not (run_dir / "config.json").is_file():
        return fail(f"{run_dir} is not a run folder (no config.json)")
    out = Path(args.out) if args.out else run_dir / "interp"
    if out.exists() and not out.is_dir():
        return fail(f"--out: {out} is a file, not a folder")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        require_sae_lens()
        from rlhf_scratch.prompts import load_prompts
        from rlhf_scratch.runs import load_run

        run = load_run(run_dir, device=args.device)
        n_layers = run.reference.cfg.n_layers
        layer = n_layers // 2 if args.layer is None else args.layer
        if not 0 <= layer < n_layers:
            return fail(f"--layer: must be in 0..{n_layers - 1}; got {layer}")
        hook_name = site_hook(layer, args.hook)
        prompts = load_prompts(run.args.prompts, run.args.prefix, run.args.seed)[:256]
        reward_fn = None
        if not args.no_reward:
            from rlhf_scratch.reward.tasks import make_reward_fn

            reward_fn = make_reward_fn(run.args, device=args.device)
        settings = SAESettings(d_sae=args.d_sae, k=args.k, training_tokens=args.training_tokens,
                               eval_batches=args.eval_batches)
        sae, quality, folder, cached = load_or_train_sae(run.reference, hook_name, settings, args.cache_dir)
        print(f"SAE {'loaded from' if cached else 'trained and cached in'} {folder}", file=sys.stderr)
        out.mkdir(parents=True, exist_ok=True)
        summary = make_features_report(
            run.reference, run.tuned, sae, quality, prompts, out, reward_fn,
            SampleSettings.from_args(run.args, args.n_samples, run.args.seed), n_diff=args.n_diff,
            top_n=args.top_n, n_snippets=args.n_snippets, title=f"What did RLHF change? Features: {run_dir.name}",
            extra={"run": str(run_dir), "algo": run.args.algo, "sae_cache": str(folder)})
    except (FeaturesError, ValueError, OSError, RuntimeError) as err:  # RunFolderError, PromptError, corpus, Hub
        print(f"interp.features: error: {str(err).splitlines()[0] if str(err) else type(err).__name__}", file=sys.stderr)
        return 2
    for line in summary["headline"]:
        print(line)
    print(f"wrote {out / 'features.html'} in {summary['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
