"""Export to a Hugging Face GPT2LMHeadModel: the same next-token log-probs, loadable with no custom code."""

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

from rlhf_scratch.algorithms.rloo import RLOOTrainer
from rlhf_scratch.commands.export import VALUE_HEAD_FILE, final_norm_and_unembed, main, to_hf_gpt2
from rlhf_scratch.config import make_args
from rlhf_scratch.models.loading import load_lm, load_tokenizer

REVIEWS = ["This movie was really", "A tedious, overlong mess that never finds its footing.",
           "The best film of the year, and the funniest."]


def max_logprob_gap(tl: HookedTransformer, hf, prompts=REVIEWS) -> float:
    gap = 0.0
    for prompt in prompts:
        ids = tl.to_tokens(prompt)
        with torch.no_grad():
            a, b = tl(ids).log_softmax(-1), hf(ids).logits.log_softmax(-1)
        gap = max(gap, (a - b).abs().max().item())
    return gap


def test_final_norm_trick_by_hand():
    """d_model 2, vocab 3; b_U is not in the row space of W_U (rank 1), so lm_head alone cannot
    give it: ln_f's bias of ones and W_U + 1 cᵀ/d must."""
    model = load_lm("tiny")
    W_U = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])  # [d_model 2, vocab 3], rank 1
    b_U = torch.tensor([0.5, -1.0, 2.0])
    model.unembed.W_U, model.unembed.b_U = torch.nn.Parameter(W_U), torch.nn.Parameter(b_U)
    weight, bias, lm_head = final_norm_and_unembed(model)
    assert weight.tolist() == [1.0, 1.0] and bias.tolist() == [1.0, 1.0]
    # c = b_U − 1·W_U = [0.5 − 2, −1 − 4, 2 − 6] = [−1.5, −5, −4];  W_U + 1 cᵀ / 2
    expected = W_U + torch.tensor([[-1.5, -5.0, -4.0]]) / 2
    torch.testing.assert_close(lm_head, expected.T)
    for n_hat in (torch.tensor([1.0, -1.0]), torch.tensor([-0.3, 0.3])):  # normalised: mean zero
        torch.testing.assert_close((n_hat + bias) @ lm_head.T, n_hat @ W_U + b_U)


def test_a_perturbed_tiny_model_exports_exactly():
    """Training moves b_U out of W_U's row space; perturb every weight to make sure."""
    model = load_lm("tiny").eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    hf = to_hf_gpt2(model)
    assert max_logprob_gap(model, hf) <= 1e-4
    assert not hf.config.tie_word_embeddings, "the unembedding is not the embedding after folding"


def test_gpt2_small_shape_with_unfolded_layernorms_exports_exactly():
    tok = load_tokenizer("tiny")
    tok.add_tokens([f"<x{i}>" for i in range(50257 - len(tok))])
    cfg = HookedTransformerConfig(n_layers=12, d_model=768, n_heads=12, d_head=64, d_mlp=3072, n_ctx=1024,
                                  d_vocab=50257, act_fn="gelu_new", normalization_type="LN", seed=0)
    model = HookedTransformer(cfg, tokenizer=tok).eval()
    with torch.no_grad():  # LayerNorm weights and biases that are not 1 and 0
        for name, p in model.named_parameters():
            if "ln" in name or name.endswith("b_U"):
                p.add_(0.1 * torch.randn_like(p))
    assert max_logprob_gap(model, to_hf_gpt2(model), REVIEWS[:2]) <= 1e-4


@pytest.fixture
def ppo_run(tuned_ppo_run):
    return tuned_ppo_run


def test_export_cli_reloads_in_transformers_with_matching_log_probs(ppo_run, tmp_path, capsys):
    out = tmp_path / "hf"
    assert main([str(ppo_run), str(out), "--value-head"]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", VALUE_HEAD_FILE} <= names
    from rlhf_scratch.engine.runs import load_run

    tuned = load_run(ppo_run).tuned
    reference = load_lm("tiny").eval()
    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    assert max_logprob_gap(tuned, hf) <= 1e-4
    assert max_logprob_gap(reference, hf) > 1e-3, "it is the tuned model, not the reference"
    generated = pipeline("text-generation", model=str(out))("This movie was really", max_new_tokens=5,
                                                            do_sample=False)[0]["generated_text"]
    assert generated.startswith("This movie was really") and len(generated) > len("This movie was really")


def test_export_refuses_bad_inputs_in_one_line(ppo_run, tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    assert main([str(ppo_run), str(taken)]) == 2
    assert (taken / "keep.txt").read_text() == "mine" and len(list(taken.iterdir())) == 1, "nothing overwritten"
    assert main([str(tmp_path / "nowhere"), str(tmp_path / "a")]) == 2
    assert main([str(ppo_run), str(tmp_path / "b"), "--push-to-hub", "me/model"]) == 1  # conftest: offline (a failure: exit 1)
    errors = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(errors) == 3 and all(e.startswith("error: ") for e in errors), errors
    assert "not an empty folder" in errors[0] and "not found" in errors[1] and "unreachable" in errors[2]


def test_value_head_only_for_ppo(tmp_path, one_thread, capsys):
    run_dir = tmp_path / "rloo"
    args = make_args("tiny", "rloo", total_phases=1, batch_size=4, num_generations=2, num_minibatches=1, gen_len=4,
                     run_dir=str(run_dir))
    RLOOTrainer(args, quiet=True).train(run_dir)
    assert main([str(run_dir), str(tmp_path / "out"), "--value-head"]) == 2
    assert "only PPO runs have a value head" in capsys.readouterr().err


def test_training_continues_from_an_export(ppo_run, tmp_path, capsys):
    """export → `train --model EXPORT`; the tokenizer says the model's real context (128), not GPT-2's 1024."""
    import json

    from rlhf_scratch.commands import train
    from rlhf_scratch.engine.runs import read_metrics

    out = tmp_path / "hf"
    assert main([str(ppo_run), str(out)]) == 0
    assert json.loads((out / "tokenizer_config.json").read_text())["model_max_length"] == 128
    assert AutoTokenizer.from_pretrained(out).model_max_length == 128
    again = tmp_path / "again"
    assert train.main(["periods", "--model", str(out), "--total-phases", "1", "--batch-size", "4", "--num-minibatches",
                       "1", "--gen-len", "4", "--threads", "1", "--run-dir", str(again)]) == 0, capsys.readouterr().err
    assert [m["phase"] for m in read_metrics(again)] == [1]
    config = json.loads((out / "config.json").read_text())
    del config["n_ctx"]  # as a GPT2Config saved by transformers today writes it: n_positions only
    (out / "config.json").write_text(json.dumps(config))
    assert load_lm(str(out)).cfg.n_ctx == 128
