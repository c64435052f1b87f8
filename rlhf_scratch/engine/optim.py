"""The optimiser (two learning rates: the LM and a policy's extras) and the per-phase LR schedule."""

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from rlhf_scratch.config import CommonArgs
from rlhf_scratch.models.policy import PolicyWithExtras


def get_optimizer(model: nn.Module, base_lr: float, extras_lr: float | None = None) -> torch.optim.AdamW:
    """AdamW over the parameters of `model` that require gradients — all of them in full fine-tuning;
    with adapters only those (and the policy's extras), nothing of the frozen base, so it keeps Adam's
    moments for those alone. Two parameter groups when `extras_lr` is given: `model.base`'s at base_lr,
    the modules of `model.extras()` at extras_lr (a `models.policy.PolicyWithExtras`, PPO's); without it
    (RLOO, Online DPO, GRPO: the LM is the policy) one group at base_lr.

    `maximize=True` because every trainer here ascends its objective (PPO's clipped surrogate
    - value loss + entropy bonus - KL penalty; RLOO's clipped sequence surrogate; minus the DPO
    loss). Freshly initialised extras (PPO's critic) get a much larger learning rate than the
    pretrained LM. The fused implementation (one kernel for all parameters) is used where
    this torch has it for the parameters' device.
    """
    fused = _fused_adamw_available(model)
    if extras_lr is None:
        return torch.optim.AdamW(trainable(model), lr=base_lr, maximize=True, fused=fused)
    base_params = trainable(model.base)
    extra_params = [p for module in model.extras().values() for p in trainable(module)]
    grouped = {id(p) for p in base_params} | {id(p) for p in extra_params}
    stray = [name for name, p in model.named_parameters() if p.requires_grad and id(p) not in grouped]
    if stray:
        raise ValueError(f"get_optimizer: parameters outside model.base and model.extras() would not be trained: {stray}")
    return torch.optim.AdamW(
        [{"params": base_params, "lr": base_lr}, {"params": extra_params, "lr": extras_lr}],
        maximize=True,
        fused=fused,
    )


def trainable(model: nn.Module) -> list[nn.Parameter]:
    """The parameters of `model` that require gradients (an adapted model's frozen base does not)."""
    return [p for p in model.parameters() if p.requires_grad]


def _fused_adamw_available(model: nn.Module) -> bool | None:
    """True where fused AdamW runs on the parameters' device (CPU and CUDA on recent torch)."""
    device = next(model.parameters()).device
    try:
        torch.optim.AdamW([torch.zeros(1, device=device, requires_grad=True)], fused=True, maximize=True)
    except (RuntimeError, ValueError):
        return None
    return True


def get_lr_scheduler(warmup_steps: int, total_steps: int, final_scale: float) -> Callable[[int], float]:
    """The learning-rate multiplier for `torch.optim.lr_scheduler.LambdaLR`:

        m(step) = step / warmup_steps                                              step < warmup_steps
                = 1 - (1 - final_scale) * (step - warmup_steps) / (total_steps - warmup_steps)
                                                                     warmup_steps <= step < total_steps
                = final_scale                                                      step >= total_steps

    i.e. linear warmup 0 -> 1, then linear decay 1 -> final_scale, reached at `total_steps` and
    held after it. No division by zero: warmup_steps = 0 skips the warmup, and if
    warmup_steps >= total_steps the warmup is cut short by the jump to final_scale.
    """

    def lr_lambda(step: int) -> float:
        if step >= total_steps:
            return final_scale
        if step < warmup_steps:
            return step / warmup_steps
        return 1 - (1 - final_scale) * (step - warmup_steps) / (total_steps - warmup_steps)

    return lr_lambda


def get_optimizer_and_scheduler(
    args: CommonArgs, model: nn.Module, base_lr: float | None = None
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW plus a LambdaLR stepped once per phase.

    Phase p (0-based) trains at lr * m(p); call `scheduler.step()` once after each phase's
    learning. The schedule ends at total_steps = total_phases - 1, so the last phase trains at
    exactly final_scale (and the first, with warmup, at 0 - as in the blog and ARENA).
    `base_lr` is the rate of `model`'s LM (default --base-lr; PPO's separate critic passes --critic-lr).
    """
    extras_lr = model.extras_lr(args) if isinstance(model, PolicyWithExtras) else None  # PPO's critic: its own rate
    optimizer = get_optimizer(model, args.base_lr if base_lr is None else base_lr, extras_lr)
    lr_lambda = get_lr_scheduler(args.warmup_steps, args.total_phases - 1, args.final_scale)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lr_lambda)
    return optimizer, scheduler


class Learner(NamedTuple):
    """What one optimizer step needs: the module it trains (its gradient norm is clipped), its AdamW and
    its schedule. A trainer has one (its policy's); PPO's separate critic is a second."""

    module: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler


def clip_and_step(optimizer: torch.optim.Optimizer, model: nn.Module, objective: torch.Tensor,
                  max_grad_norm: float) -> torch.Tensor:
    """Clip the global gradient norm to `max_grad_norm` and take the optimizer step — unless the
    objective or the gradient norm is not finite (NaN or ±inf), in which case the step is skipped,
    so one bad minibatch cannot poison the weights or Adam's moments. Call after `objective.backward()`.

    Returns `found_inf`, a 0-dim float32 tensor on the device: 1.0 where the step was skipped, 0.0
    where it was taken. It is not read here. With fused AdamW (`get_optimizer`'s, wherever torch has
    it) the check is fused and deferred as GradScaler's is: the optimizer is handed `found_inf` and
    its kernel leaves weights, moments and step count alone where it is 1, so the host never waits
    on the device here; the caller reads the flags once a phase (`Trainer.ascend`). An optimizer
    that cannot take the flag (not fused) is checked on the host, one read a step, as before."""
    grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    found_inf = (~(torch.isfinite(objective) & torch.isfinite(grad_norm))).float()
    if takes_found_inf(optimizer):
        optimizer.found_inf = found_inf  # read by torch's fused Adam/AdamW step, as GradScaler sets it
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf
    elif not bool(found_inf):
        optimizer.step()
    return found_inf


def takes_found_inf(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer.step()` skips itself on a `found_inf` flag: torch's fused Adam and AdamW."""
    return isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW) and bool(optimizer.defaults.get("fused"))
