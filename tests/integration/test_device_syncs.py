"""A learning step a CUDA graph can hold: no operation inside torch that waits for the device (a
boolean index and its gradient, `nonzero`, `.item()` …: benchmarks/device_syncs.py) in the
minibatch's objective or its optimizer step, for PPO, RLOO, GRPO and Online DPO (pairs decided by reward:
a judge's undecided pairs are read), with the masked statistics in the form a GPU runs (`objectives.SYNC_FREE`). A `.item()` of a clip ratio per minibatch, or a
boolean index in a loss, turns it red."""

import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def device_syncs():
    spec = importlib.util.spec_from_file_location("device_syncs", ROOT / "benchmarks" / "device_syncs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_counter_sees_a_boolean_index_and_its_gradient_and_not_the_sync_free_mean(device_syncs, monkeypatch):
    from rlhf_scratch.core import objectives

    x = torch.tensor([[1.0, 2.0, 4.0]], requires_grad=True)
    mask = torch.tensor([[True, False, True]])
    for form, expected in ((False, 2), (True, 0)):  # x[mask] forward (index) and backward (index_put)
        monkeypatch.setattr(objectives, "SYNC_FREE", form)
        with device_syncs.DeviceSyncCounter() as counter:
            objectives.masked_mean(x, mask).backward()
        assert counter.total == expected, dict(counter.sites)


@pytest.mark.parametrize("algo, overrides", [("ppo", {}), ("rloo", {}), ("grpo", {}), ("grpo", {"beta": 0.04}),
                                             ("online_dpo", {})], ids=["ppo", "rloo", "grpo", "grpo-kl", "online_dpo"])
def test_a_learning_step_waits_on_nothing_in_the_gpus_form(device_syncs, algo, overrides, one_thread):
    step, phase = device_syncs.count_learning_phase(algo, sync_free=True, batch_size=16, gen_len=8, **overrides)
    assert step.total == 0, f"{algo}: {step.total} waits inside the learning step:\n" + "\n".join(
        f"{n:>4}  {site}" for site, n in step.sites.most_common())
    if algo == "ppo":
        assert phase.total == 0, dict(phase.sites)  # the advantages' whitening and explained variance too
