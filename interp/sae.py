"""The sparse autoencoder the feature analyses read through: trained on the REFERENCE, cached, judged.

An SAE of one of SAE Lens's architectures (`ARCHITECTURES`: BatchTopK by default, Matryoshka
BatchTopK, or the standard L1 SAE; SAE Lens's `LanguageModelSAETrainingRunner`, our HookedTransformer
and a `datasets.Dataset` of texts passed in — no Hub) is trained on the reference model's activations
at one site (`blocks.{L}.hook_{hook}`); SAE Lens saves the BatchTopK kinds as JumpReLU SAEs. `load_or_train` keeps it
under `<cache root>/<reference hash>-<site>-<settings hash>/`, so a second call (another run from
the same reference, `compare --features`) loads it. Its quality is SAE Lens's `run_evals` on held-out
texts: explained variance, MSE, L0, dead features (density 0 on the eval tokens) and the CE loss
with the reconstruction spliced in, against the clean and the zero-ablated model.

The texts come in as an argument (`texts(split)`): which corpus, and where the cache lives by
default, is the command's business (`interp.features`). Needs SAE Lens: `pip install -e ".[sae]"`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from transformer_lens import HookedTransformer

from interp.families import require_site
from interp.settings import ARCHITECTURES, SAESettings  # (torch-free: the command's flags)

Texts = Callable[[str], list[str]]
"""split -> texts: "train" (what the SAE trains on) and "val" (its evals)."""


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


def special_token_ids(model: HookedTransformer) -> list[int]:
    """BOS, EOS and pad ids: positions whose activations are outliers the SAE is neither trained nor read on."""
    tok = model.tokenizer
    if tok is None:
        return []
    return sorted({i for i in (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) if i is not None})


def model_hash(model: HookedTransformer) -> str:
    """sha256 of the model's parameters (names, shapes and values): the SAE cache key's first part."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(str(tuple(tensor.shape)).encode())
        h.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def training_config(settings: SAESettings, d_in: int):
    """SAE Lens's training config of `settings.architecture`."""
    from sae_lens.saes.batchtopk_sae import BatchTopKTrainingSAEConfig
    from sae_lens.saes.matryoshka_batchtopk_sae import MatryoshkaBatchTopKTrainingSAEConfig
    from sae_lens.saes.standard_sae import StandardTrainingSAEConfig

    common = {"d_in": d_in, "d_sae": settings.d_sae, "normalize_activations": "expected_average_only_in"}
    if settings.architecture == "batchtopk":
        return BatchTopKTrainingSAEConfig(k=settings.k, **common)
    if settings.architecture == "matryoshka_batchtopk":
        widths = sorted({w for w in (settings.d_sae // 8, settings.d_sae // 4, settings.d_sae // 2, settings.d_sae) if w > 0})
        return MatryoshkaBatchTopKTrainingSAEConfig(k=settings.k, matryoshka_widths=widths, **common)
    if settings.architecture == "standard":
        return StandardTrainingSAEConfig(l1_coefficient=settings.l1_coefficient, **common)
    raise FeaturesError(f"--dictionary: one of {', '.join(ARCHITECTURES)}; got {settings.architecture!r}")


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
            exclude_special_tokens=torch.tensor(special_token_ids(model), dtype=torch.long))


def train_sae(model: HookedTransformer, hook_name: str, texts: list[str], settings: SAESettings,
              out_dir: str | Path, progress: bool = True):
    """Train an SAE of `settings.architecture` on `model`'s activations at `hook_name` over `texts`
    with SAE Lens's runner (model and dataset passed in, nothing from the Hub) and save it (as SAE
    Lens's inference SAE: JumpReLU for the BatchTopK kinds) in `out_dir`. Returns the loaded SAE."""
    require_sae_lens()
    from datasets import Dataset
    from sae_lens import SAE, LanguageModelSAERunnerConfig, LanguageModelSAETrainingRunner, LoggingConfig

    context = min(settings.context_size, model.cfg.n_ctx)
    cfg = LanguageModelSAERunnerConfig(
        sae=training_config(settings, model.cfg.d_model),
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
                                         exclude_special_tokens=special_token_ids(model))
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


OWNER_FILE = "owner"
"""In an SAE being trained into the cache: `HOST PID` of the process writing it."""
STALE_AFTER_S = 24 * 3600
"""A temp folder with no readable owner (or another host's) is stale after this long."""


def clean_stale_temp_folders(root: Path) -> list[Path]:
    """Remove the cache's half-written SAE folders (`.KEY-XXXX`) whose writer is gone — a process
    killed while it trained or saved one (kill -9, a power cut) leaves its folder behind — and return
    them. The writer is the folder's `owner` (HOST PID): on this host, the folder goes as soon as that
    process is gone; another host's folder, or one without a readable owner (the instant between
    its creation and its owner line, or a cache written before owners were recorded), once it is
    older than STALE_AFTER_S."""
    removed = []
    for tmp in root.glob(".*-*"):
        try:
            if not tmp.is_dir():
                continue
            old = time.time() - tmp.stat().st_mtime >= STALE_AFTER_S
        except OSError:  # removed meanwhile
            continue
        try:
            host, pid = (tmp / OWNER_FILE).read_text().split()
            stale = not _alive(int(pid)) if host == socket.gethostname() else old
        except (OSError, ValueError):
            stale = old
        if stale:
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    """Whether process `pid` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def load_or_train(reference: HookedTransformer, hook_name: str, settings: SAESettings, cache_root: str | Path,
                  texts: Texts, progress: bool = True) -> tuple[Any, dict, Path, bool]:
    """The SAE for (reference, site, settings) from `cache_root`, or trained on `texts("train")`,
    judged on `texts("val")` and cached now (`texts` is called only then). The key does not name
    the texts: keep one cache root per corpus.

    Returns (sae, quality, cache folder, whether it was loaded from the cache)."""
    require_site(reference, hook_name)  # e.g. no resid_mid in a parallel block (Pythia): one line
    require_sae_lens()
    from sae_lens import SAE

    root = Path(cache_root)
    folder = root / f"{model_hash(reference)[:16]}-{hook_name}-{settings.key()}"
    quality_file = folder / "quality.json"
    if quality_file.is_file():
        return SAE.load_from_disk(folder, device=str(reference.cfg.device)), json.loads(quality_file.read_text()), folder, True
    root.mkdir(parents=True, exist_ok=True)
    clean_stale_temp_folders(root)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=root))
    (tmp / OWNER_FILE).write_text(f"{socket.gethostname()} {os.getpid()}\n")
    try:
        sae = train_sae(reference, hook_name, texts("train"), settings, tmp, progress)
        quality = evaluate_sae(sae, reference, texts("val"), settings)
        quality["settings"] = asdict(settings)
        (tmp / "quality.json").write_text(json.dumps(quality, indent=2) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return SAE.load_from_disk(folder, device=str(reference.cfg.device)), quality, folder, False
