"""Two switches that make the learning phase's forward faster on a GPU, shared by every trainer.

    learner = compiled(policy, args)              # torch.compile, or the policy itself
    with learning_autocast(args, device):         # bf16 autocast, or nothing
        logits = learner(tokens)

Only the learning forward changes: generation and the rollout's scoring run the eager float32
policy, so the rollout's log-probs (π_old) are the same with or without either switch. The
compiled module shares the policy's parameters, so the optimizer, the checkpoints and the run
folder never see the difference.
"""

from __future__ import annotations

import contextlib

import torch

from rlhf_scratch.config import CommonArgs


def compiled(module: torch.nn.Module, args: CommonArgs) -> torch.nn.Module:
    """`torch.compile(module, mode=args.compile_mode)` when `args.compile`, else `module` unchanged."""
    return torch.compile(module, mode=args.compile_mode) if args.compile else module


CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
"""The torch.compile modes that replay the compiled code as CUDA graphs (max-autotune turns on
inductor's cudagraphs as reduce-overhead does)."""


def begin_step(args: CommonArgs) -> None:
    """Before each minibatch's learning forward: under `--compile-mode reduce-overhead` (or max-autotune) tell torch's
    cudagraph trees that a new step begins (`torch.compiler.cudagraph_mark_step_begin`), so the
    replay may reuse the last step's output memory — the last step's ĥ is dead by then, its
    statistics already copied out by eager operations. Nothing otherwise."""
    if args.compile and args.compile_mode in CUDA_GRAPH_MODES:
        torch.compiler.cudagraph_mark_step_begin()


def learning_autocast(args: CommonArgs, device: str) -> contextlib.AbstractContextManager:
    """bfloat16 autocast on `device` when `args.bf16`, else a context that does nothing.

    Under autocast the matmuls run in bf16; torch keeps log_softmax, exp and the reductions in
    float32 (its autocast op lists), so the objective's terms are float32 sums."""
    if not args.bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
