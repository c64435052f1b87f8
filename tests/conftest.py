"""Shared test setup: the Hub is never reached, and small random models for unit tests."""

import os

# Before transformers / huggingface_hub are imported anywhere: tests never touch the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("WANDB_MODE", "disabled")

import pytest  # noqa: E402
import torch  # noqa: E402

import rlhf_scratch  # noqa: E402,F401  (silences the HookedTransformer deprecation warning)


@pytest.fixture
def tiny_random_lm():
    """A 2-layer random HookedTransformer (vocab 50) for tests that need no tokenizer."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(
        n_layers=2, d_model=16, n_ctx=32, d_head=4, n_heads=4, d_mlp=64, d_vocab=50,
        act_fn="gelu", normalization_type="LN", seed=0,
    )
    return HookedTransformer(cfg)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def one_thread():
    """Toy-sized matrices: on a shared 2-core CPU extra torch threads cost far more than they save."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
