"""Export to the family's own Hugging Face class (GPT-2, Pythia, Llama, Qwen2, Gemma): the same
next-token log-probs to 1e-5 for any weights, or a one-line refusal naming what has no place.

Which bug turns each red:
- perturbed export: any layout slip (NeoX's per-head q|k|v interleave, the K/V head a query head reads,
  W_O's transpose), a norm weight off by Gemma's 1, Gemma's √d embedding scale applied twice or not
  undone, TransformerLens' b_in (added after act ⊙ up) put on up_proj, a bias flag left off so a
  trained bias is silently dropped, Qwen2's b_O dropped instead of moved into the value biases, a
  constant b_U refused (it changes no log-prob), partial rotary or parallel residual misconfigured;
- refusals: an export that drops a bias its class lacks and writes a silently different model;
- fresh config: a freshly loaded Llama or Gemma exported with bias flags its own config does not have;
- the CLI: `export` still writing GPT-2 for every run, a refused export that leaves a folder behind,
  a LoRA run exported without its adapters merged.
"""

from __future__ import annotations

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformers import AutoModelForCausalLM

from rlhf_scratch.commands.export import main
from rlhf_scratch.models.hf_format import to_hf_causal_lm, value_bias_for_output_bias
from rlhf_scratch.models.loading import load_lm

pytestmark = pytest.mark.usefixtures("one_thread")

CLASS = {"gpt2": "GPT2LMHeadModel", "pythia": "GPTNeoXForCausalLM", "llama": "LlamaForCausalLM",
         "qwen2": "Qwen2ForCausalLM", "gemma": "GemmaForCausalLM"}
# TransformerLens parameters each class has no place for once trained (beyond what the export can move).
NO_PLACE = {"gpt2": (), "pythia": (), "llama": ("unembed.b_U",),
            "qwen2": ("unembed.b_U", "attn.b_O", "mlp.b_in", "mlp.b_out"),
            "gemma": ("unembed.b_U", "mlp.b_in", "mlp.b_out")}
TOL = 1e-5


def token_batches(d_vocab: int) -> list[torch.Tensor]:
    """Two plain batches of random ids, of different shapes (3 × 17 and 2 × 6)."""
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(0, d_vocab, shape, generator=gen) for shape in [(3, 17), (2, 6)]]


def max_logprob_gap(tl: HookedTransformer, hf) -> float:
    gap = 0.0
    for ids in token_batches(tl.cfg.d_vocab):
        with torch.no_grad():
            a, b = tl(ids).log_softmax(-1), hf(ids).logits.log_softmax(-1)
        gap = max(gap, (a - b).abs().max().item())
    return gap


def perturb(model: HookedTransformer, family: str, scale: float = 0.05) -> HookedTransformer:
    """Seeded noise on every parameter the family's class can hold, as training would move them;
    b_U in the RMSNorm families moves by a constant (a shift of every logit), and Qwen2's b_O within
    the span a value bias reaches through W_O (so it must be moved into v_proj.bias, not dropped)."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith(NO_PLACE[family]):
                p.add_(scale * torch.randn(p.shape, generator=gen))
        if "unembed.b_U" in NO_PLACE[family]:
            model.unembed.b_U.add_(3.0)
        if family == "qwen2":
            n_kv = model.cfg.n_key_value_heads
            for block in model.blocks:
                delta = torch.randn(n_kv, model.cfg.d_head, generator=gen)  # a value bias per K/V head
                W_O = block.attn.W_O.reshape(n_kv, -1, model.cfg.d_head, model.cfg.d_model).sum(1)
                block.attn.b_O.copy_(torch.einsum("gh,ghd->d", delta, W_O))
    return model


@pytest.mark.parametrize("family", list(CLASS))
def test_a_perturbed_model_exports_to_its_own_class(family, family_folder):
    fresh = load_lm(str(family_folder(family))).eval()
    model = perturb(load_lm(str(family_folder(family))).eval(), family)
    hf = to_hf_causal_lm(model)
    assert type(hf).__name__ == CLASS[family]
    assert max_logprob_gap(model, hf) <= TOL
    assert max_logprob_gap(fresh, hf) > 1e-3, "the noise moved the model: the test is not trivially passing"


@pytest.mark.parametrize("family", ["pythia", "llama", "qwen2", "gemma"])
def test_a_loaded_model_exports_with_its_familys_own_config(family, family_folder):
    model = load_lm(str(family_folder(family))).eval()
    hf = to_hf_causal_lm(model)
    assert max_logprob_gap(model, hf) <= TOL
    if family in ("llama", "gemma"):
        assert not hf.config.attention_bias, "no attention bias to hold: the family's plain config"
    if family == "llama":
        assert not hf.config.mlp_bias


@pytest.mark.parametrize("family,param", [(f, p) for f in CLASS for p in NO_PLACE[f]])
def test_a_trained_weight_the_class_has_no_place_for_is_refused_in_one_line(family, param, family_folder):
    model = load_lm(str(family_folder(family))).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(param):
                p.add_(1e-3 * torch.randn(p.shape, generator=gen))  # about 100 Adam steps at lr 1e-5
    with pytest.raises(ValueError) as refused:
        to_hf_causal_lm(model)
    message = str(refused.value)
    named = {"unembed.b_U": "unembed.b_U", "attn.b_O": "attn.b_O", "mlp.b_in": "b_in·W_out", "mlp.b_out": "+ b_out"}
    assert message.startswith(f"cannot export to {CLASS[family]}") and "\n" not in message, message
    assert named[param] in message and message.count("|·|") == 1, message


def test_value_bias_for_output_bias_by_hand():
    """Two query heads sharing one K/V head of width 1, d_model 2: W_O[0] = [1, 0], W_O[1] = [0, 1],
    so a value bias δ reaches the residual as δ·(W_O[0] + W_O[1]) = [δ, δ]."""
    W_O = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])  # [n_heads 2, d_head 1, d_model 2]
    delta, residual = value_bias_for_output_bias(W_O, torch.tensor([2.0, 2.0]), n_kv=1)
    assert delta.tolist() == [[2.0]] and residual < 1e-12
    delta, residual = value_bias_for_output_bias(W_O, torch.tensor([1.0, 0.0]), n_kv=1)
    assert delta.item() == pytest.approx(0.5) and residual == pytest.approx(0.5)  # [1, 0] is no [δ, δ]
    delta, residual = value_bias_for_output_bias(W_O, torch.tensor([1.0, 0.0]), n_kv=2)  # a K/V head each
    assert delta.flatten().tolist() == pytest.approx([1.0, 0.0]) and residual < 1e-12


def test_llama3_rope_scaling_exports(family_folder):
    """Llama 3.1's NTK-by-parts rotary (TransformerLens' use_NTK_by_parts_rope) -> rope_type llama3."""
    plain = perturb(load_lm(str(family_folder("llama"))).eval(), "llama")
    config = plain.cfg.to_dict()
    config.update(use_NTK_by_parts_rope=True, NTK_original_ctx_len=32, NTK_by_parts_factor=8.0)
    model = HookedTransformer(HookedTransformerConfig.from_dict(config), plain.tokenizer).eval()
    model.load_state_dict({k: v for k, v in plain.state_dict().items() if "rotary" not in k}, strict=False)
    hf = to_hf_causal_lm(model)
    assert hf.config.rope_parameters["rope_type"] == "llama3"
    assert max_logprob_gap(model, hf) <= TOL
    assert max_logprob_gap(plain, hf) > 1e-3, "the scaling changes the model: the test can tell"


def test_an_architecture_or_feature_without_an_export_is_refused_in_one_line(family_folder):
    model = load_lm(str(family_folder("llama"))).eval()
    model.cfg.rotary_adjacent_pairs = True  # GPT-J's rotary pairs: no HF Llama computes them
    with pytest.raises(ValueError, match=r"^cannot export to LlamaForCausalLM: rotary_adjacent_pairs=True$"):
        to_hf_causal_lm(model)
    model.cfg.original_architecture = "MistralForCausalLM"
    with pytest.raises(ValueError, match=r"^cannot export a MistralForCausalLM model: the exports are to GPT2LMHead"):
        to_hf_causal_lm(model)


def train_run(folder, run_dir, *extra: str):
    from rlhf_scratch.commands import train

    assert train.main(["sentiment", "--model", str(folder), "--total-phases", "1", "--batch-size", "8",
                       "--num-minibatches", "1", "--gen-len", "4", "--base-lr", "1e-2", "--warmup-steps", "1",
                       "--threads", "1", "--run-dir", str(run_dir), *extra]) == 0
    return run_dir


@pytest.mark.parametrize("family,extra", [("pythia", ()), ("llama", ("--lora-rank", "4", "--lora-targets",
                                                                     "W_Q,W_O,W_in,W_out"))],
                         ids=["pythia-full", "llama-lora"])
def test_export_cli_writes_the_familys_class_with_matching_log_probs(family, extra, family_folder, tmp_path, capsys):
    from rlhf_scratch.engine.runs import load_run

    run_dir = train_run(family_folder(family), tmp_path / "run", *extra)
    out = tmp_path / "hf"
    assert main([str(run_dir), str(out)]) == 0, capsys.readouterr().err
    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(hf).__name__ == CLASS[family]
    run = load_run(run_dir)
    assert max_logprob_gap(run.tuned.eval(), hf) <= TOL
    assert max_logprob_gap(load_lm(str(family_folder(family))).eval(), hf) > 1e-4, "the tuned model, not the base"


def test_export_cli_refuses_a_full_fine_tune_of_llama_in_one_line(family_folder, tmp_path, capsys):
    """A full fine-tune trains b_U, and LlamaForCausalLM's lm_head has no bias: refused, nothing written."""
    run_dir = train_run(family_folder("llama"), tmp_path / "run")
    capsys.readouterr()
    out = tmp_path / "hf"
    assert main([str(run_dir), str(out)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(errors) == 1 and errors[0].startswith("error: cannot export to LlamaForCausalLM"), errors
    assert "unembed.b_U" in errors[0] and not out.exists()
