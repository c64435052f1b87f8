"""The written-out forwards for the families beyond GPT-2 (`models/fast_forward.py`, `models/static_cache.py`,
`models/rotary.py`) compute TransformerLens' forward: the same ĥ at every position, left-padded or not,
the same gradients, the same decoder logits, and one seed gives the same sampled tokens as
TransformerLens' own cache.

Each family is a random HookedTransformerConfig with its features switched on, at a small shape,
every weight, bias and norm scale drawn at random (so a zero bias or unit scale hides nothing):
Pythia's partial rotary (4 of 16 features) with parallel attention and MLP and LayerNorm; Llama's
rotary, RMSNorm and grouped K/V (4 heads, 2 K/V) with a gated SiLU MLP; Qwen2's the same with Q/K/V
biases and rotary base 10⁶; Gemma's folded RMSNorm (`RMSPre`), one K/V head and gated tanh-GELU
(its √d embedding scale and (1 + w) norm live in the weights TL loads: tests/integration/test_fast_forward.py
runs the HF-folder families); GPT-J's rotary on neighbouring pairs (`rotary_adjacent_pairs`).

Which bug turns each red:
- rotary applied to v, or the halves rotated the wrong way (flip = [x₂, −x₁]), or rotary_dim taken
  as d_head: ĥ differs. (Positions counted from the pad columns do not: RoPE depends on position
  differences only, and within a row every real token is shifted alike. They matter where the prompt
  and the decoded tokens are numbered apart: a decode step numbered by its column, not by the row's
  real tokens, turns the decoder test red on the padded rows);
- K/V heads matched to query heads by `repeat` (i % n_kv) instead of TL's `repeat_interleave` (i // group):
  Llama's and Qwen2's ĥ differ (Gemma's single K/V head cannot tell);
- the parallel block computed sequentially (the MLP reading x + attn): Pythia's ĥ differs;
- the gate and the linear half of the gated MLP swapped, or b_in added before the product: ĥ differs;
- RMSNorm with a mean subtracted, or ε outside the root: ĥ differs;
- the static cache sized n_heads for K/V, or writing k before rotating it: the decoder's logits differ;
- `_W_K` read as the repeated `W_K` under LoRA: the adapters' ΔW on K is lost.
"""

from __future__ import annotations

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from rlhf_scratch.models import static_cache
from rlhf_scratch.models.fast_forward import fast_final_hidden, fast_path_note, fast_path_reason
from rlhf_scratch.models.lora import adapters, add_lora
from rlhf_scratch.models.static_cache import StaticCacheDecoder, unsupported_reason
from rlhf_scratch.rollout.generation import generate

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPE = dict(n_layers=2, d_model=64, d_head=16, n_heads=4, d_mlp=128, n_ctx=64, seed=0)
ROTARY = dict(positional_embedding_type="rotary", rotary_dim=16)
RMS_GATED = dict(normalization_type="RMS", gated_mlp=True, final_rms=True, eps=1e-6, act_fn="silu")
FAMILIES = {
    "pythia": dict(ROTARY, rotary_dim=4, act_fn="gelu", normalization_type="LN", parallel_attn_mlp=True,
                   original_architecture="GPTNeoXForCausalLM"),
    "llama": dict(ROTARY, **RMS_GATED, n_key_value_heads=2, original_architecture="LlamaForCausalLM"),
    "qwen2": dict(ROTARY, **RMS_GATED, n_key_value_heads=2, rotary_base=1_000_000,
                  original_architecture="Qwen2ForCausalLM"),
    "gemma": dict(ROTARY, **dict(RMS_GATED, normalization_type="RMSPre", act_fn="gelu_pytorch_tanh"),
                  n_key_value_heads=1, original_architecture="GemmaForCausalLM"),
    "gptj": dict(ROTARY, rotary_dim=8, rotary_adjacent_pairs=True, act_fn="gelu_new", normalization_type="LN",
                 parallel_attn_mlp=True, original_architecture="GPTJForCausalLM"),
}
TOL = 1e-5  # the GPT-2 fast path's tolerance (float32, CPU)


def random_family(name: str, d_vocab: int = 101, tokenizer=None) -> HookedTransformer:
    """A random model of family `name`: weights and biases ~ N(0, 0.2²), norm scales ~ 1 + N(0, 0.3²)."""
    model = HookedTransformer(HookedTransformerConfig(**SHAPE, d_vocab=d_vocab, **FAMILIES[name]),
                              tokenizer=tokenizer).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g) if pname.endswith(".w")
                    else 0.2 * torch.randn(p.shape, generator=g))
    return model


def left_padded_batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(1, vocab, (4, 13), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :5], mask[2, :1] = 0, 0  # two rows left-padded by different amounts
    return ids, mask


def hooked_final_hidden(model, ids, mask):
    """ĥ through TransformerLens' own forward: the reference."""
    return model.ln_final(model(ids, attention_mask=mask, stop_at_layer=model.cfg.n_layers))


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("padded", [False, True], ids=["no padding", "left padding"])
def test_fast_hidden_equals_transformer_lens_at_every_position(family, padded):
    model = random_family(family)
    assert fast_path_reason(model) is None and fast_path_note(model) is None
    ids, mask = left_padded_batch(model.cfg.d_vocab)
    mask = mask if padded else None
    with torch.no_grad():
        ours, theirs = fast_final_hidden(model, ids, mask), hooked_final_hidden(model, ids, mask)
    assert torch.isfinite(ours).all(), "a pad query that sees no key must not give NaN"
    assert theirs.abs().max() > 1.0, "ĥ of order 1: a tolerance of 1e-5 is float rounding, not the signal"
    assert (ours - theirs).abs().max().item() < TOL


@pytest.mark.parametrize("family", ["pythia", "qwen2"])
def test_gradients_reach_the_models_own_parameters_as_through_transformer_lens(family):
    """Pythia (parallel, partial rotary, LayerNorm) and Qwen2 (grouped K/V's `_W_K`, RMSNorm, gated)."""
    model = random_family(family)
    ids, mask = left_padded_batch(model.cfg.d_vocab)
    weights = torch.randn(model.cfg.d_model, generator=torch.Generator().manual_seed(3))
    grads = []
    for forward in (fast_final_hidden, hooked_final_hidden):
        model.zero_grad()
        (forward(model, ids, mask)[mask.bool()] @ weights).sin().sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys(), "some parameter got no gradient on one path"
    assert any("_W_K" in n for n in grads[1]) == (family == "qwen2")
    scale = max(g.abs().max().item() for g in grads[1].values())
    for name in grads[1]:
        assert (grads[0][name] - grads[1][name]).abs().max().item() <= TOL * scale, name


def test_lora_on_grouped_kv_is_read_through_the_parametrized_weights():
    model = add_lora(random_family("llama"), rank=2, alpha=4.0)
    for a in adapters(model):
        torch.nn.init.normal_(a.B, std=0.5)  # B = 0 at init would hide a missing ΔW
    ids, mask = left_padded_batch(model.cfg.d_vocab)
    with torch.no_grad():
        diff = (fast_final_hidden(model, ids, mask) - hooked_final_hidden(model, ids, mask)).abs().max().item()
    assert diff < TOL


@pytest.mark.parametrize("family", list(FAMILIES))
def test_static_cache_logits_equal_transformer_lens_full_forward(family):
    """Prefill + 6 steps over a cache filled with garbage first, three prompt lengths left-padded:
    the logits of TransformerLens' forward over the whole sequence at each position."""
    model = random_family(family)
    assert unsupported_reason(model) is None
    ids, _ = left_padded_batch(model.cfg.d_vocab)
    prompt_ids, completion = ids[:, :6], ids[:, 6:]
    prompt_mask = torch.ones_like(prompt_ids, dtype=torch.bool)
    prompt_mask[0, :5], prompt_mask[2, :2] = False, False
    with torch.inference_mode():
        decoder = StaticCacheDecoder(model, prompt_ids, prompt_mask, completion.shape[1], cuda_graph=False)
        decoder.cache.keys.fill_(1e4)
        decoder.cache.values.fill_(-1e4)
        cached = [decoder.prefill().clone()] + [decoder.step(completion[:, t]).clone() for t in range(completion.shape[1] - 1)]
        mask = torch.cat([prompt_mask, torch.ones_like(completion, dtype=torch.bool)], dim=1).long()
        full = model(ids, attention_mask=mask)[:, prompt_ids.shape[1] - 1 : -1]
    assert decoder.cache.keys.shape[2] == (model.cfg.n_key_value_heads or model.cfg.n_heads)
    assert (torch.stack(cached, dim=1) - full).abs().max().item() < TOL


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from rlhf_scratch.models.loading import TINY_LM_DIR, asset_path

    return AutoTokenizer.from_pretrained(asset_path(TINY_LM_DIR))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_static_and_transformer_lens_caches_sample_the_same_tokens_under_one_seed(family, tokenizer):
    model = random_family(family, d_vocab=len(tokenizer), tokenizer=tokenizer)
    ids, mask = left_padded_batch(200)
    prompt_ids, prompt_mask = ids[:, :6], mask[:, :6].bool()
    out = {}
    for kv_cache in ("static", "transformer_lens"):
        torch.manual_seed(1)
        out[kv_cache] = generate(model, prompt_ids, prompt_mask, 8, temperature=1.0, top_k=20, kv_cache=kv_cache)
    assert torch.equal(out["static"][0], out["transformer_lens"][0])
    assert len(set(out["static"][0].flatten().tolist())) > 8, "the samples vary: equal tokens are not a constant"


def test_a_family_on_cuda_is_no_default_until_run_on_a_gpu(monkeypatch):
    """A path never run on a GPU is not a default: on CUDA (the device read as "cuda" here) a rotary,
    grouped-K/V model takes TransformerLens' forward and cache, and the reason says why; GPT-2's set
    does not change; on the CPU the exactness tests above decide."""
    llama = random_family("llama")
    gpt2 = HookedTransformer(HookedTransformerConfig(**SHAPE, d_vocab=101, act_fn="gelu_new", normalization_type="LN"))
    with monkeypatch.context() as patch:
        patch.setattr(static_cache, "device_type", lambda model: "cuda")
        reason = fast_path_reason(llama)
        assert reason is not None and "not yet run on a GPU" in reason and "rotary positions, grouped K/V" in reason
        assert "no CUDA graph" in fast_path_note(llama, device="cuda")
        assert fast_path_reason(gpt2) is None
        patch.setattr(static_cache, "GPU_CHECKED", True)
        assert fast_path_reason(llama) is None
    assert fast_path_reason(llama) is None


def test_a_model_the_forwards_do_not_write_out_names_its_reason():
    alibi = HookedTransformer(HookedTransformerConfig(**SHAPE, d_vocab=101, act_fn="gelu", normalization_type="LN",
                                                      positional_embedding_type="alibi"))
    assert "positional_embedding_type='alibi'" in fast_path_reason(alibi)
    ntk = HookedTransformer(HookedTransformerConfig(**SHAPE, d_vocab=101, **FAMILIES["llama"] | {"use_dynamic_ntk_rope": True}))
    assert "dynamic NTK" in unsupported_reason(ntk)
