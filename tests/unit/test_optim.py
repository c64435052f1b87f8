"""Optimizer param groups and the warmup + linear-decay LR schedule."""

import pytest
from torch import nn

from rlhf_scratch.config import make_args
from rlhf_scratch.engine.optim import get_lr_scheduler, get_optimizer, get_optimizer_and_scheduler


class TinyPolicy(nn.Module):
    """Stand-in for a policy with extras (PPO's): only `.base`, `.extras()` and `.extras_lr` matter."""

    def __init__(self, d_model: int = 8):
        super().__init__()
        self.base = nn.Sequential(nn.Embedding(20, d_model), nn.LayerNorm(d_model), nn.Linear(d_model, d_model))
        self.value_head = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, 1))

    def forward(self, input_ids, attention_mask=None, return_hidden=False): ...

    def extras(self) -> dict[str, nn.Module]:
        return {"value_head": self.value_head}

    def extras_lr(self, args) -> float:
        return args.head_lr


def test_param_groups_are_trunk_and_head():
    model = TinyPolicy()
    optimizer = get_optimizer(model, base_lr=1e-5, extras_lr=1e-3)
    assert len(optimizer.param_groups) == 2
    base_group, head_group = optimizer.param_groups
    assert {id(p) for p in base_group["params"]} == {id(p) for p in model.base.parameters()}, "group 0 must be exactly model.base"
    assert {id(p) for p in head_group["params"]} == {id(p) for p in model.value_head.parameters()}, "group 1 must be exactly model.extras()"
    assert (base_group["lr"], head_group["lr"]) == (1e-5, 1e-3)
    assert all(g["maximize"] for g in optimizer.param_groups), "we ascend the objective: AdamW(maximize=True)"


def test_optimizer_step_increases_objective():
    model = TinyPolicy()
    optimizer = get_optimizer(model, base_lr=0.0, extras_lr=0.1)
    bias = model.value_head[-1].bias
    before = bias.item()
    bias.sum().backward()  # objective = bias: maximising must raise it
    optimizer.step()
    assert bias.item() > before


def test_stray_parameters_are_refused():
    model = TinyPolicy()
    model.extra = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="extra.weight"):
        get_optimizer(model, 1e-5, 1e-3)


def test_lr_multiplier_by_hand():
    m = get_lr_scheduler(warmup_steps=4, total_steps=10, final_scale=0.1)
    assert m(0) == 0.0, "warmup starts at 0"
    assert m(2) == pytest.approx(0.5)
    assert m(4) == pytest.approx(1.0), "the end of warmup is the full learning rate"
    assert m(7) == pytest.approx(1 - 0.9 * 3 / 6)  # halfway through the decay: 0.55
    assert m(10) == pytest.approx(0.1), "the decay ends at final_scale"
    assert m(12) == pytest.approx(0.1), "and stays there"


@pytest.mark.parametrize("warmup,total", [(0, 5), (5, 5), (8, 5), (0, 0)])
def test_lr_multiplier_edge_cases_have_no_division_by_zero(warmup, total):
    m = get_lr_scheduler(warmup, total, 0.25)
    values = [m(step) for step in range(total + 2)]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert values[-1] == 0.25
    if warmup == 0 and total > 0:
        assert values[0] == 1.0, "no warmup: start at the full learning rate"


def test_optimizer_and_scheduler_follow_the_phases():
    args = make_args(total_phases=6, warmup_steps=2, final_scale=0.1, base_lr=1e-4, head_lr=1e-2)
    optimizer, scheduler = get_optimizer_and_scheduler(args, TinyPolicy())
    lrs = []
    for _ in range(args.total_phases):
        lrs.append([g["lr"] for g in optimizer.param_groups])
        optimizer.step()  # (a phase's learning would happen here)
        scheduler.step()
    assert lrs[0] == [0.0, 0.0], "phase 0 is the start of warmup"
    assert lrs[2] == pytest.approx([1e-4, 1e-2]), "phase warmup_steps trains at the full learning rates"
    assert lrs[-1] == pytest.approx([1e-5, 1e-3]), "the last phase trains at final_scale times the learning rates"
