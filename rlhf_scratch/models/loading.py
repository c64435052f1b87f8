"""The one place models are loaded: the policy LM, its tokenizer and the reward classifier.

Each loader takes a `name` that is one of
- `"tiny"`: the offline preset shipped inside this package (`rlhf_scratch/assets/`), trained by
  `python -m rlhf_scratch.pretrain` on Rotten Tomatoes review snippets;
- a local folder in Hugging Face format (e.g. the output of `python -m rlhf_scratch.pretrain`);
- a Hugging Face Hub id (`gpt2`, `lvwerra/distilbert-imdb`, ...), downloaded when the Hub is
  reachable or already cached. When it is neither, a one-line `HubUnreachableError` names the
  offline preset instead of a stack trace.

The shipped LM is stored as a Hugging Face `GPT2LMHeadModel` folder and turned into a
`HookedTransformer` by TransformerLens's own loading code (config conversion, GPT-2 weight
conversion, `load_and_process_state_dict` with `from_pretrained`'s defaults: fold_ln,
center_writing_weights, center_unembed, fold_value_biases), so `tiny` and `gpt2` are processed
alike. The reward classifier is loaded by `AutoModelForSequenceClassification.from_pretrained`
whatever its origin.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from importlib.resources import as_file, files
from pathlib import Path

import torch
from transformer_lens import HookedTransformer
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from rlhf_scratch.core.quiet import quiet_hooked_transformer

TINY = "tiny"
TINY_LM_DIR = "tiny_lm"
TINY_REWARD_DIR = "tiny_reward"
ARITHMETIC = "arithmetic"
ARITHMETIC_LM_DIR = "arithmetic_lm"
"""The arithmetic task's shipped model (`commands/arithmetic_lm.py` builds it)."""
ARITHMETIC_CALC = "arithmetic_calc"
ARITHMETIC_CALC_LM_DIR = "arithmetic_calc_lm"
"""Its sibling that can call the calculator (`--env calculator`'s model; `rlhf pretrain-arithmetic --calculator P`)."""
SHIPPED_LMS = {ARITHMETIC: ARITHMETIC_LM_DIR, ARITHMETIC_CALC: ARITHMETIC_CALC_LM_DIR}
"""The shipped LMs besides `tiny`: a `--model` name -> its folder in the package's assets."""
# What from_pretrained does by default, for the Hub path and the local path alike.
PROCESSING = dict(fold_ln=True, center_writing_weights=True, center_unembed=True,
                  fold_value_biases=True)


class HubUnreachableError(RuntimeError):
    """A Hub id was asked for, it is not cached and the Hub cannot be reached."""

    def __init__(self, name: str):
        super().__init__(
            f"cannot download {name!r} from the Hugging Face Hub (unreachable or "
            f"HF_HUB_OFFLINE=1); use the offline preset: --preset tiny"
        )
        self.name = name


def asset_path(subdir: str) -> Path:
    """Folder of a shipped asset, found with importlib.resources (not relative to a checkout)."""
    resource = files("rlhf_scratch") / "assets" / subdir
    # The package is installed as plain files (not a zip), so this path stays valid.
    with as_file(resource) as path:
        return Path(path)


def _local_folder(name: str, tiny_subdir: str, field: str = "model") -> Path | None:
    """`tiny` -> the shipped folder; `arithmetic` or `arithmetic_calc` (an LM) -> the arithmetic task's shipped
    model or its calculator sibling; an existing folder -> itself; a path that does not exist (starting with /,
    ./, ../ or ~) -> a one-line error; else None (a Hub id)."""
    if name in SHIPPED_LMS and tiny_subdir == TINY_LM_DIR:
        path = asset_path(SHIPPED_LMS[name])
        if not (path / "config.json").exists():
            rebuild = "" if name == ARITHMETIC else " --calculator 0.25 --ops '+-*' (benchmarks/arithmetic_calc_lm_2026-11-29.json)"
            raise FileNotFoundError(f"the {name} model is missing from {path}; rebuild it with "
                                    f"`rlhf pretrain-arithmetic{rebuild} --install --force`")
        return path
    if name == TINY:
        path = asset_path(tiny_subdir)
        if not (path / "config.json").exists() and not (path / "tokenizer.json").exists():
            raise FileNotFoundError(
                f"the tiny preset is missing from {path}; rebuild it with "
                f"`python -m rlhf_scratch.pretrain --install`"
            )
        return path
    path = Path(name).expanduser()
    if path.exists() and not path.is_dir():
        raise ModelFolderError(f"{field}: {name} is a file, not a model folder")
    if not path.exists() and name.startswith(("/", "./", "../", "~")):
        raise ModelFolderError(f"{field}: {name}: no such folder")
    return path if path.is_dir() else None


def is_offline_error(err: BaseException) -> bool:
    """Does this exception (or its cause chain) mean "the Hub could not be reached and the files
    are not cached"? A repository the Hub says does not exist, or is gated, is not that."""
    from huggingface_hub import errors as hub_errors

    def types(*names):
        return tuple(t for t in (getattr(hub_errors, n, None) for n in names) if isinstance(t, type))

    answered = types("RepositoryNotFoundError", "GatedRepoError", "RevisionNotFoundError")
    offline = types("LocalEntryNotFoundError", "OfflineModeIsEnabled")
    markers = ("couldn't connect", "offline", "internet connection", "outgoing traffic")
    chain, seen = [], set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        chain.append(err)
        err = err.__cause__ or err.__context__
    if any(isinstance(e, answered) for e in chain):
        return False
    return any(
        isinstance(e, offline + (ConnectionError, TimeoutError))
        or (isinstance(e, OSError) and any(m in str(e).lower() for m in markers))
        for e in chain
    )


def hub_reachable(timeout: float = 3.0) -> bool:
    """Can a TCP connection to the Hub be opened within `timeout` s? (DNS included: run in a thread,
    since name resolution ignores socket timeouts.) Without this check, huggingface_hub retries
    with back-off for ~30 s before a machine with no network gives up."""
    import os
    import socket
    import threading
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    ok = []

    def probe():
        try:
            socket.create_connection((host, 443), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(ok)


def _in_hub_cache(name: str) -> bool:
    """Is anything of the Hub repo `name` in the local Hugging Face cache (so it may load offline)?"""
    from huggingface_hub.constants import HF_HUB_CACHE

    cache = Path(HF_HUB_CACHE)
    leaf = name.split("/")[-1]
    return cache.is_dir() and any(p.name.endswith(f"--{leaf}") for p in cache.glob("*--*"))


@contextlib.contextmanager
def hub_errors(name: str):
    """Turn "the Hub is unreachable" failures while loading `name` into HubUnreachableError
    (at once, when the Hub cannot be reached and nothing of `name` is cached)."""
    remote = name not in (TINY, *SHIPPED_LMS) and not Path(name).expanduser().exists()
    if remote and not _in_hub_cache(name) and not hub_reachable():
        raise HubUnreachableError(name)
    try:
        yield
    except HubUnreachableError:
        raise
    except Exception as err:  # noqa: BLE001 - classified below, re-raised if not network
        if is_offline_error(err):
            raise HubUnreachableError(name) from err
        raise


@contextlib.contextmanager
def no_weight_loading_bars():
    """Hide transformers' per-load "Loading weights" bar (restored afterwards)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


class ModelFolderError(ValueError):
    """A local model folder that cannot be what it is asked to be (one line naming the field)."""


def check_model_folder(folder: Path, field: str, classifier: bool) -> None:
    """Refuse, in one line, a folder that is empty, has a broken config.json, or holds the wrong
    kind of model: `--model` needs a GPT-2 causal LM (what TransformerLens converts here),
    `--reward-model` a sequence classifier (anything else would load with a randomly
    initialised classification head and silently train on noise)."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelFolderError(f"{field}: {folder} has no config.json (not a Hugging Face model folder)")
    try:
        config = json.loads(config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelFolderError(f"{field}: {config_path} is not valid JSON ({getattr(e, 'msg', e)})") from None
    if not isinstance(config, dict):
        raise ModelFolderError(f"{field}: {config_path} is not a JSON object")
    architectures = config.get("architectures") or []
    is_classifier = any(a.endswith("ForSequenceClassification") for a in architectures)
    if classifier and not is_classifier:
        raise ModelFolderError(
            f"{field}: {folder} is not a sequence classifier (architectures: {', '.join(architectures) or 'none'}); "
            "loading it would give a randomly initialised classification head")
    if not classifier:
        if is_classifier:
            raise ModelFolderError(f"{field}: {folder} is a sequence classifier ({', '.join(architectures)}), "
                                   "not a causal LM; did you mean --reward-model?")
        if config.get("model_type") not in LOCAL_FAMILIES:
            raise ModelFolderError(
                f"{field}: {folder} is a {config.get('model_type') or 'unknown'} model; a local --model folder must be "
                f"one of the families tested offline here ({', '.join(LOCAL_FAMILIES)}; docs/models.md)")
        inner, width = config.get("n_inner"), config.get("n_embd")
        if config.get("model_type") == "gpt2" and inner is not None and width and inner != 4 * width:
            raise ModelFolderError(f"{field}: {folder} has n_inner {inner} != 4 × n_embd; TransformerLens' GPT-2 "
                                   "conversion assumes the MLP is 4 × d_model wide")


@contextlib.contextmanager
def unreadable_weights(folder: Path, field: str):
    """A safetensors file of `folder` that cannot be read (cut short by a copy or a kill, or not
    safetensors at all) as one ModelFolderError line naming the file and `field`, instead of
    safetensors' traceback. (A broken .bin is transformers' OSError, already one line.)"""
    from safetensors import SafetensorError

    try:
        yield
    except SafetensorError as e:
        files = sorted(folder.glob("*.safetensors"))
        where = files[0] if len(files) == 1 else f"{folder}'s .safetensors files"
        raise ModelFolderError(f"{field}: {where}: unreadable weights ({str(e).splitlines()[0]}); the file is truncated "
                               "or not a safetensors file") from None


# model_type of a local --model folder -> its family, as docs/models.md names it. Each is tested
# offline (tests/integration/test_model_families.py): loaded, equal to the HF model's log-probs, trained.
LOCAL_FAMILIES = {"gpt2": "GPT-2", "gpt_neox": "GPT-NeoX (Pythia)", "llama": "Llama", "qwen2": "Qwen2",
                  "gemma": "Gemma"}


WEIGHT_FILES = ("*.safetensors", "*.bin", "reward_model.pt", "policy.pt")


def weights_digest(folder: str | Path) -> str | None:
    """sha256 over the weight files of a local model folder (a HF folder's safetensors/bin, a
    reward-model run's reward_model.pt), names and bytes, in name order: the identity a run records
    for the reward model it was trained against. None if `folder` is not a local folder with weights."""
    import hashlib

    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return None
    files = sorted({f for pattern in WEIGHT_FILES for f in folder.glob(pattern) if f.is_file()})
    if not files:
        return None
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def load_tokenizer(name: str = TINY) -> PreTrainedTokenizerBase:
    """The LM's tokenizer: `tiny` (shipped), a local folder, or a Hub id."""
    folder = _local_folder(name, TINY_LM_DIR)
    with hub_errors(name):
        return AutoTokenizer.from_pretrained(str(folder) if folder else name)


def gemma_config_dict(hf: dict) -> dict:
    """TransformerLens' config for a Gemma (1) folder, from its HF config.

    TransformerLens picks Gemma's config by checkpoint name (google/gemma-2b, -7b), not from a
    folder's config.json; these are the entries of its gemma-2b branch, read from `hf` instead.
    """
    return {
        "d_model": hf["hidden_size"], "d_head": hf["head_dim"], "n_heads": hf["num_attention_heads"],
        "d_mlp": hf["intermediate_size"], "n_layers": hf["num_hidden_layers"],
        "n_ctx": hf["max_position_embeddings"], "eps": hf["rms_norm_eps"], "d_vocab": hf["vocab_size"],
        "act_fn": hf.get("hidden_activation") or hf.get("hidden_act") or "gelu_pytorch_tanh",
        "initializer_range": hf["initializer_range"], "normalization_type": "RMS",
        "rotary_base": (hf.get("rope_parameters") or {}).get("rope_theta", hf.get("rope_theta", 10000.0)),
        "rotary_dim": hf["head_dim"], "positional_embedding_type": "rotary", "use_attn_scale": True,
        "n_key_value_heads": hf["num_key_value_heads"], "gated_mlp": True, "final_rms": True,
        "original_architecture": "GemmaForCausalLM",
    }


def tl_config_of_folder(folder: Path, hf_config: dict, device: str | torch.device):
    """The HookedTransformerConfig of a local HF folder, by TransformerLens' own conversion.

    TransformerLens reads a folder's config.json by its `architectures` entry, except that a path
    containing "llama" or "gemma" is taken for a checkpoint name; the config is therefore handed
    over from a neutrally named copy. Gemma, which it only knows by name, gets `gemma_config_dict`
    and the steps `get_pretrained_model_config` applies after its conversion.
    """
    from transformer_lens import HookedTransformerConfig
    from transformer_lens import loading_from_pretrained as tl_loading

    config = json.loads((folder / "config.json").read_text())
    if config.get("model_type") == "gemma":
        cfg = gemma_config_dict(hf_config)
        cfg.update(model_name=folder.name, init_weights=False, dtype=torch.float32, device=device,
                   n_devices=1, from_checkpoint=False, default_prepend_bos=True,
                   normalization_type="RMSPre" if PROCESSING["fold_ln"] else "RMS")
        return HookedTransformerConfig.from_dict(cfg)
    if "n_ctx" not in config and "n_positions" in config:
        # TransformerLens reads GPT-2's n_ctx, which a GPT2Config saved today no longer writes
        config["n_ctx"] = config["n_positions"]
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "hf_config"
        source.mkdir()
        (source / "config.json").write_text(json.dumps(config))
        cfg = tl_loading.get_pretrained_model_config(
            str(source), hf_cfg=hf_config, fold_ln=PROCESSING["fold_ln"], device=device, dtype=torch.float32)
    cfg.model_name = folder.name
    return cfg


def hooked_from_hf_folder(
    folder: str | Path, device: str | torch.device = "cpu"
) -> HookedTransformer:
    """A local Hugging Face causal-LM folder (GPT-2, Pythia, Llama, Qwen2, Gemma) -> a float32
    HookedTransformer.

    The same steps as `HookedTransformer.from_pretrained`, which only accepts names it knows:
    TransformerLens builds the config from the folder's config.json (`tl_config_of_folder`),
    converts the weights with its architecture's converter (`convert_gpt2_weights`,
    `convert_llama_weights`, ...) and applies the default processing (`PROCESSING`).
    """
    from transformer_lens import loading_from_pretrained as tl_loading

    folder = Path(folder).resolve()
    with no_weight_loading_bars():
        hf_model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    cfg = tl_config_of_folder(folder, hf_model.config.to_dict(), device)
    state_dict = tl_loading.get_pretrained_state_dict(str(folder), cfg, hf_model, dtype=torch.float32)
    with quiet_hooked_transformer():
        model = HookedTransformer(cfg, tokenizer, move_to_device=False)
    model.load_and_process_state_dict(state_dict, **PROCESSING)
    model.move_model_modules_to_device()
    return model


def load_lm(name: str = TINY, device: str | torch.device = "cpu") -> HookedTransformer:
    """The policy LM as a float32 HookedTransformer.

    `tiny` -> the shipped 4-layer GPT-2-architecture model; a local folder -> converted like
    `tiny`; anything else -> `HookedTransformer.from_pretrained(name)` (e.g. `gpt2`).
    """
    folder = _local_folder(name, TINY_LM_DIR)
    if folder is not None:
        check_model_folder(folder, "model", classifier=False)
        with unreadable_weights(folder, "model"):
            model = hooked_from_hf_folder(folder, device)
    else:
        from transformer_lens import loading_from_pretrained as tl_loading

        try:  # a name TransformerLens does not know needs no network to be refused
            tl_loading.get_official_model_name(name)
        except ValueError:
            raise ValueError(  # TransformerLens's message lists every model: keep one line
                f"{name!r} is neither 'tiny', a local model folder, nor a TransformerLens "
                f"pretrained model name (see transformer_lens.loading.OFFICIAL_MODEL_NAMES)"
            ) from None
        with hub_errors(name), quiet_hooked_transformer(), contextlib.redirect_stdout(io.StringIO()):
            model = HookedTransformer.from_pretrained(name, device=device, dtype="float32")
    model.train()  # trainable; callers switch to eval() where they need determinism
    return model


def load_classifier(
    name: str = TINY, device: str | torch.device = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A sentiment classifier and its tokenizer, by the same call whatever the origin.

    `tiny` -> the shipped classifier; a local folder or a Hub id (e.g. `lvwerra/distilbert-imdb`)
    -> `AutoModelForSequenceClassification.from_pretrained`. Convention (as the IMDB model):
    label index 1 = positive, 0 = negative. A reward model (one label, e.g. a folder written by
    `python -m rlhf_scratch.reward_model`'s export) gives a scalar score instead (a reward-model
    run folder itself is loaded by `reward.model.reward_model_classifier`).
    Returned in eval mode, float32, on `device`.
    """
    folder = _local_folder(name, TINY_REWARD_DIR, "reward_model")
    if folder is not None:
        check_model_folder(folder, "reward_model", classifier=True)
    source = str(folder) if folder else name
    with hub_errors(name), no_weight_loading_bars(), unreadable_weights(Path(source), "reward_model"):
        model = AutoModelForSequenceClassification.from_pretrained(source, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(source)
    return as_classifier(model, tokenizer, name, device)


def as_classifier(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str,
                  device: str | torch.device) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Check that `model` is a sequence classifier, give it a pad token, eval mode, float32 on `device`."""
    architectures = getattr(model.config, "architectures", None) or []
    if not any(a.endswith("ForSequenceClassification") for a in architectures):
        raise ModelFolderError(f"reward_model: {name} is not a sequence classifier (architectures: "
                               f"{', '.join(architectures) or 'none'}); its classification head would be random")
    if tokenizer.pad_token is None:  # GPT-2-style tokenizers have no pad token
        tokenizer.pad_token = tokenizer.eos_token
    if model.config.pad_token_id is None:  # so GPT2ForSequenceClassification finds the last token
        model.config.pad_token_id = tokenizer.pad_token_id
    return model.to(device).eval(), tokenizer
