"""Reading the device once (issue 57, item 4): `core.host.read_once` and `read_per_version`, the reads
they replace (`kept_token_ids`, `attention_mask_or_none(of=...)`, `clip_and_step`'s deferred finite
check), and the counter of benchmarks/host_reads.py that the recorded count rests on."""

import importlib.util
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from rlhf_scratch.core.host import read_once, read_per_version
from rlhf_scratch.core.objectives import explained_variance
from rlhf_scratch.engine.optim import clip_and_step, get_optimizer
from rlhf_scratch.rollout.generation import attention_mask_or_none, kept_token_ids

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("host_reads", ROOT / "benchmarks" / "host_reads.py")
host_reads = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(host_reads)


def counted(fn):
    """fn() inside the benchmark's counter: (its result, the counter)."""
    with host_reads.HostReadCounter() as counter:
        out = fn()
    return out, counter


# --- the counter ------------------------------------------------------------------------------

def test_the_counter_counts_each_kind_of_read_once_and_not_a_move_to_the_run_device():
    x, flag = torch.tensor([1.5, -2.0]), torch.tensor(True)
    device = torch.device("cpu")

    def reads():
        x.sum().item(), bool(flag), float(x[0]), int(x[1]), x.tolist(), x.numpy(), x.cpu(), x.to("cpu")
        x.to(device), x.to(torch.float64)  # a move to the run's device, a cast: no read on a GPU
        list(range(3))[flag.long()]  # operator.index

    _, counter = counted(reads)
    assert dict(counter.kinds) == {"item": 1, "__bool__": 1, "__float__": 1, "__int__": 1, "tolist": 1, "numpy": 1,
                                   "cpu": 1, "to(cpu)": 1, "__index__": 1}
    assert counter.total == 9
    _, outside = counted(lambda: None)
    assert outside.total == 0 and torch.Tensor.item is not None  # and the methods are put back
    assert float(torch.tensor(2.5)) == 2.5


def test_a_read_inside_a_counted_read_is_not_counted_again():
    _, counter = counted(lambda: torch.tensor([1.0, 2.0]).__array__())  # __array__ calls .numpy() inside
    assert dict(counter.kinds) == {"__array__": 1}


# --- read_once ---------------------------------------------------------------------------------

def test_read_once_gives_the_floats_item_gives_in_one_read():
    g = torch.Generator().manual_seed(0)
    values = {"f32": torch.randn(7, generator=g).mean(), "bf16": torch.randn(3, generator=g).bfloat16().sum(),
              "int": torch.tensor(7), "bool": torch.tensor(True), "nan": torch.tensor(float("nan"))}
    expected = {k: v.item() for k, v in values.items()}
    (out, other), counter = counted(lambda: read_once(values, {"lr": 1e-3, "t": torch.tensor(-0.1)}))
    assert counter.total == 1, "every tensor of every group comes over in one read"
    assert {k: out[k] for k in ("f32", "bf16", "int")} == {k: expected[k] for k in ("f32", "bf16", "int")}
    assert out["bool"] == 1.0 and math.isnan(out["nan"])
    assert other == {"lr": 1e-3, "t": torch.tensor(-0.1).item()}, "a number stays as it was"
    assert isinstance(values["f32"], torch.Tensor), "the groups given are not changed"


def test_read_once_of_numbers_alone_reads_nothing():
    out, counter = counted(lambda: read_once({"a": 1.0}, {}))
    assert out == [{"a": 1.0}, {}] and counter.total == 0


def test_read_per_version_asks_once_per_version_of_the_tensor():
    b = torch.zeros(4)
    asked = []

    def nonzero(t):
        asked.append(1)
        return bool(t.any())

    assert [read_per_version(b, "test", nonzero) for _ in range(3)] == [False] * 3
    assert len(asked) == 1, "a tensor that did not change is not read again"
    b[2] = 0.5  # an in-place change moves its version
    assert read_per_version(b, "test", nonzero) is True and len(asked) == 2
    other = torch.zeros(4)  # equal values, another tensor: asked on its own
    assert read_per_version(other, "test", nonzero) is False and len(asked) == 3


# --- the reads it replaces ----------------------------------------------------------------------

def test_kept_token_ids_by_hand_in_one_read():
    ids = torch.tensor([[5, 7, 9, 0], [4, 0, 0, 3], [0, 2, 8, 6]])
    keep = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 1], [1, 0, 1, 1]]).bool()
    out, counter = counted(lambda: kept_token_ids(ids, keep))
    assert out == [[5, 7], [4, 3], [0, 8, 6]], "token 0 is a token: only the dropped positions go"
    assert counter.total == 1


def test_attention_mask_or_none_reads_an_unpadded_whole_once_and_a_padded_one_per_part():
    whole = torch.ones(6, 5, dtype=torch.bool)
    parts = [whole[s : s + 2] for s in range(0, 6, 2)]
    out, counter = counted(lambda: [attention_mask_or_none(p, of=whole) for p in parts])
    assert out == [None, None, None] and counter.total == 1, "no padding in the whole: none in a part, one read"
    padded = whole.clone()
    padded[3, :2] = False  # row 3, in the second part only
    out, counter = counted(lambda: [attention_mask_or_none(padded[s : s + 2], of=padded) for s in range(0, 6, 2)])
    assert out[0] is None and out[2] is None and torch.equal(out[1], padded[2:4].long())
    assert counter.total == 1 + 3, "the whole, then each part"
    assert torch.equal(attention_mask_or_none(padded), padded.long()) and attention_mask_or_none(whole) is None


def test_explained_variance_is_the_number_the_division_of_the_items_gave():
    g = torch.Generator().manual_seed(3)
    values, returns = torch.randn(5, 7, generator=g), torch.randn(5, 7, generator=g)
    mask = torch.rand(5, 7, generator=g) > 0.3
    v, r = values[mask], returns[mask]
    before = 1.0 - (r - v).float().var(unbiased=False).item() / r.float().var(unbiased=False).item()
    assert explained_variance(values, returns, mask=mask).item() == before  # exactly: float64 on both sides
    assert math.isnan(explained_variance(torch.randn(4), torch.ones(4)))


@pytest.mark.parametrize("fused", [True, False])
def test_clip_and_step_skips_a_non_finite_step_without_a_read_when_fused(fused):
    """A NaN objective: weights, Adam's moments and its step count stay; found_inf says 1. Fused AdamW
    takes the flag on the device (no read); the unfused one is checked on the host (one bool() a step;
    torch's unfused Adam reads its own step counts besides, a taken step only)."""
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    optimizer = get_optimizer(model, 1e-2)
    if not fused:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, maximize=True)
    x = torch.randn(4, 3)
    J = model(x).sum()
    J.backward()
    flag, counter = counted(lambda: clip_and_step(optimizer, model, J, 1.0))
    assert flag.item() == 0.0
    assert (counter.total == 0) if fused else (counter.kinds["__bool__"] == 1)
    weight, moment = model.weight.detach().clone(), optimizer.state[model.weight]["exp_avg"].clone()
    step = float(optimizer.state[model.weight]["step"])
    optimizer.zero_grad()
    J = model(x).sum() * float("nan")
    J.backward()
    flag, counter = counted(lambda: clip_and_step(optimizer, model, J, 1.0))
    assert flag.item() == 1.0 and counter.total == (0 if fused else 1)
    assert torch.equal(model.weight, weight) and torch.equal(optimizer.state[model.weight]["exp_avg"], moment)
    assert float(optimizer.state[model.weight]["step"]) == step == 1.0, "a skipped step is not counted by Adam"
    assert not hasattr(optimizer, "found_inf"), "the flag is not left on the optimizer"
