"""Run setup, before the first phase: validate the config, seed every RNG, pick the device and the
CPU threads, join the process group under torchrun, load the policy (with adapters when asked,
`models.policy.trainable_lm`) and the reference, and load the prompts (in the model's prompt format, checked against its context).
`check_against_model` makes setup's checks against the model without a run (a study, before it
writes its folder)."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import torch
from transformer_lens import HookedTransformer

from rlhf_scratch.config import PROMPT_PREFIX, CommonArgs, ConfigError
from rlhf_scratch.engine import distributed as dist
from rlhf_scratch.models.loading import load_lm
from rlhf_scratch.models.policy import ADAPTER_FIELDS, trainable_lm
from rlhf_scratch.rollout.generation import prompt_tokens, use_chat_template
from rlhf_scratch.rollout.prompts import PromptIterator, check_prompt_lengths
from rlhf_scratch.rollout.rl_dataset import run_prompts


def resolve_device(device: str) -> str:
    """`auto` → cuda if available, else cpu; a device this torch cannot use is one ConfigError line."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device: {device!r} requested but no CUDA GPU is available to this torch "
                          f"(torch {torch.__version__}); use --device cpu or auto")
    if device == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("device: 'mps' requested but the MPS backend is not available; use --device cpu or auto")
    return device


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def setup_torch(args: CommonArgs) -> str:
    """Validate the args, seed every RNG, set the CPU threads; return the device to run on."""
    args.validate()
    device = resolve_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = dist.init(device)  # under torchrun: join the process group, one GPU per rank
    args.check_world_size(dist.world_size())
    set_seed(args.seed + dist.rank())  # each rank samples its own completions (DDP syncs the weights)
    return device


def load_policy(model: str, device: str) -> HookedTransformer:
    """The model to tune, in training mode."""
    return load_lm(model, device=device).train()


def make_prompt_iterator(args: CommonArgs, model: HookedTransformer, say: Callable[[str], None] | None = None) -> PromptIterator:
    """The run's prompts, shuffled with the run's seed, in the format `model` will be given them:
    --chat-template is applied to it here (`generation.use_chat_template`: with `none` its tokenizer
    loses its template, for every rollout and evaluation of this run), and each prompt is checked
    against the context length as the model will see it (template tokens included). Chat messages,
    --max-prompt-length and its truncation: `rl_dataset.run_prompts`, with the model's tokenizer;
    `say` hears how many over-long prompts it dropped."""
    if args.gen_len >= model.cfg.n_ctx:
        raise ConfigError(f"gen_len: {args.gen_len} leaves no room for a prompt in the model's context n_ctx={model.cfg.n_ctx}")
    if args.max_prompt_length + args.gen_len > model.cfg.n_ctx:  # (then no prompt it lets through overflows)
        raise ConfigError(f"max_prompt_length: {args.max_prompt_length} with gen_len {args.gen_len} exceeds the "
                          f"model's context n_ctx={model.cfg.n_ctx}")
    use_chat_template(model, args.chat_template)
    prompts = run_prompts(args, model.tokenizer, say=say)
    check_prompt_lengths(
        prompts, lambda p: prompt_tokens(model, p, args.prepend_bos).shape[0],
        model.cfg.n_ctx, args.gen_len, "prefix" if args.prompts == PROMPT_PREFIX else args.prompts,
    )
    return PromptIterator(prompts, args.seed)


MODEL_CHECKED = ("model", *ADAPTER_FIELDS, "gen_len", "prompts", "prefix", "prepend_bos",
                 "chat_template", "prompt_key", "max_prompt_length", "truncation", "filter_overlong_prompts")
"""The fields `check_against_model` reads: runs equal in these need the check once."""


def check_against_model(args: CommonArgs) -> None:
    """Setup's checks against the model, without a run: the model loads (on the CPU), the adapters'
    rank fits its matrices (`trainable_lm`), and every prompt with gen_len tokens fits its context
    (`make_prompt_iterator`). The caller's RNG is left as it was. Raises what setup would raise."""
    args = args.with_local_paths_resolved()
    with torch.random.fork_rng(devices=[]):  # trainable_lm draws the adapters' A from torch's RNG
        make_prompt_iterator(args, trainable_lm(load_policy(args.model, "cpu"), args))
