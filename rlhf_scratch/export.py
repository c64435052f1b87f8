"""Export a tuned policy to a Hugging Face `GPT2LMHeadModel` folder that loads with no custom code.

    python -m rlhf_scratch.export runs/<run> exported/           # config, model.safetensors, tokenizer
    python -m rlhf_scratch.export runs/<run> exported/ --value-head   # + PPO's value head, separately
    python -m rlhf_scratch.export runs/<run> exported/ --push-to-hub you/my-model
    python -m rlhf_scratch.export runs/rm rm_hf/    # a reward-model run -> GPT2ForSequenceClassification

    from transformers import pipeline
    pipeline("text-generation", model="exported/")("This movie was really")

A run folder of `python -m rlhf_scratch.reward_model` (config.json's algo is reward_model, the rule
`loading.load_reward_model` uses) is exported by `export_reward_model` instead; see `to_hf_reward_model`.

TransformerLens loaded the model with its default processing (`loading.PROCESSING`): every
LayerNorm's weight and bias are folded into the layer that reads it (the LayerNorms become bare
normalisations, `LNPre`), the weights that write to the residual stream are centred, the value
biases are folded into the output bias, and the unembedding is centred. The exported model must
give the same next-token log-probs, so each piece is re-expressed in GPT-2's own layout:

- LayerNorms before attention and MLP: weight 1, bias 0 (folded) or the model's own (unfolded);
  the folded weights and biases go into `c_attn`, `c_proj`, `c_fc` as they are.
- Centred writing weights need nothing: a LayerNorm subtracts the mean of the residual stream
  before anything reads it, so a stream without its mean component normalises to the same vector.
- The final LayerNorm and the unembedding: TransformerLens computes `n̂ · W_U + b_U` (n̂ the
  normalised residual). GPT-2's `lm_head` has no bias, and a trained `b_U` is not in the span of
  W_U's rows. The way round: n̂ has mean zero over d_model (n̂ · 1 = 0), so adding `1 cᵀ / d` to
  W_U changes nothing n̂ sees. Give `ln_f` bias 1 (the all-ones vector) and weight 1:

      (n̂ + 1) · (W_U + 1 cᵀ/d) = n̂ · W_U + 1 · W_U + c  =  n̂ · W_U + b_U     for  c = b_U − 1 · W_U

  exact algebra; an unfolded final LayerNorm (weight w, bias b) is first folded into
  W_U ← diag(w) W_U, b_U ← b · W_U + b_U.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import einops
import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens import HookedTransformer

VALUE_HEAD_FILE = "value_head.safetensors"


def final_norm_and_unembed(
    model: HookedTransformer,
) -> tuple[Float[Tensor, "d_model"], Float[Tensor, "d_model"], Float[Tensor, "d_vocab d_model"]]:
    """GPT-2's `ln_f.weight`, `ln_f.bias` and untied `lm_head.weight` giving the model's logits
    (see the module docstring: bias 1, W_U + 1 cᵀ/d with c = b_U − 1·W_U)."""
    W_U, b_U = model.unembed.W_U.detach(), model.unembed.b_U.detach()
    d_model = W_U.shape[0]
    ln = model.ln_final
    if hasattr(ln, "w"):  # an unfolded final LayerNorm: fold it into the unembedding first
        b_U = ln.b.detach() @ W_U + b_U
        W_U = ln.w.detach()[:, None] * W_U
    ones = torch.ones(d_model, dtype=W_U.dtype, device=W_U.device)
    c = b_U - ones @ W_U
    lm_head = W_U + torch.outer(ones, c) / d_model
    return ones, ones.clone(), lm_head.T.contiguous()


def _layer_norm(ln, d_model: int) -> tuple[Tensor, Tensor]:
    """A block LayerNorm's weight and bias in GPT-2's layout (1 and 0 where TransformerLens folded them)."""
    if hasattr(ln, "w"):
        return ln.w.detach(), ln.b.detach()
    return torch.ones(d_model), torch.zeros(d_model)


def gpt2_state_dict(model: HookedTransformer) -> dict[str, Tensor]:
    """The HookedTransformer's weights under GPT2LMHeadModel's names and shapes (Conv1D: x @ W + b)."""
    cfg = model.cfg
    sd: dict[str, Tensor] = {
        "transformer.wte.weight": model.embed.W_E.detach(),
        "transformer.wpe.weight": model.pos_embed.W_pos.detach(),
    }
    for layer, block in enumerate(model.blocks):
        p = f"transformer.h.{layer}."
        attn, mlp = block.attn, block.mlp
        sd[p + "ln_1.weight"], sd[p + "ln_1.bias"] = _layer_norm(block.ln1, cfg.d_model)
        qkv = [einops.rearrange(w.detach(), "n d h -> d (n h)") for w in (attn.W_Q, attn.W_K, attn.W_V)]
        sd[p + "attn.c_attn.weight"] = torch.cat(qkv, dim=1)
        sd[p + "attn.c_attn.bias"] = torch.cat([b.detach().flatten() for b in (attn.b_Q, attn.b_K, attn.b_V)])
        sd[p + "attn.c_proj.weight"] = einops.rearrange(attn.W_O.detach(), "n h d -> (n h) d")
        sd[p + "attn.c_proj.bias"] = attn.b_O.detach()
        sd[p + "ln_2.weight"], sd[p + "ln_2.bias"] = _layer_norm(block.ln2, cfg.d_model)
        sd[p + "mlp.c_fc.weight"], sd[p + "mlp.c_fc.bias"] = mlp.W_in.detach(), mlp.b_in.detach()
        sd[p + "mlp.c_proj.weight"], sd[p + "mlp.c_proj.bias"] = mlp.W_out.detach(), mlp.b_out.detach()
    sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"], sd["lm_head.weight"] = final_norm_and_unembed(model)
    return {k: v.float().cpu().contiguous() for k, v in sd.items()}


def check_exportable(model: HookedTransformer) -> None:
    """What GPT2LMHeadModel can express: learned absolute positions, LayerNorm, one MLP per block."""
    cfg = model.cfg
    problems = [
        f"{name}={value!r}" for name, value, ok in [
            ("positional_embedding_type", cfg.positional_embedding_type, cfg.positional_embedding_type == "standard"),
            ("normalization_type", cfg.normalization_type, cfg.normalization_type in ("LN", "LNPre")),
            ("act_fn", cfg.act_fn, cfg.act_fn in ("gelu_new", "gelu", "relu", "gelu_fast")),
            ("attn_only", cfg.attn_only, not cfg.attn_only),
            ("parallel_attn_mlp", cfg.parallel_attn_mlp, not cfg.parallel_attn_mlp),
        ] if not ok
    ]
    if problems:
        raise ValueError(f"cannot export to GPT2LMHeadModel: {', '.join(problems)}")


def to_hf_gpt2(model: HookedTransformer):
    """A `transformers.GPT2LMHeadModel` computing the same next-token distribution as `model`."""
    from transformers import GPT2Config, GPT2LMHeadModel

    check_exportable(model)
    cfg, tok = model.cfg, model.tokenizer
    config = GPT2Config(
        vocab_size=cfg.d_vocab, n_positions=cfg.n_ctx, n_ctx=cfg.n_ctx, n_embd=cfg.d_model, n_layer=cfg.n_layers, n_head=cfg.n_heads,
        n_inner=cfg.d_mlp, activation_function=cfg.act_fn, layer_norm_epsilon=cfg.eps, tie_word_embeddings=False,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=getattr(tok, "bos_token_id", None), eos_token_id=getattr(tok, "eos_token_id", None),
        pad_token_id=getattr(tok, "pad_token_id", None), architectures=["GPT2LMHeadModel"],
    )
    hf = GPT2LMHeadModel(config)
    missing, unexpected = hf.load_state_dict(gpt2_state_dict(model), strict=False)
    missing = [k for k in missing if not k.endswith((".attn.bias", ".attn.masked_bias"))]  # causal-mask buffers
    if missing or unexpected:
        raise RuntimeError(f"GPT-2 layout mismatch: missing {missing}, unexpected {unexpected}")
    return hf.eval()


def export(run_dir: str | Path, out_dir: str | Path, value_head: bool = False) -> Path:
    """Write the tuned policy of `run_dir` to `out_dir` as a Hugging Face GPT-2 folder."""
    from safetensors.torch import save_file

    from rlhf_scratch.loading import no_weight_loading_bars
    from rlhf_scratch.runs import load_run

    out_dir = Path(out_dir)
    run = load_run(run_dir)
    if value_head and not hasattr(run.policy, "value_head"):
        raise ValueError(f"--value-head: {run_dir} is a {run.args.algo} run; only PPO runs have a value head")
    hf = to_hf_gpt2(run.tuned)
    out_dir.mkdir(parents=True, exist_ok=True)
    with no_weight_loading_bars():
        hf.save_pretrained(out_dir)  # config.json + model.safetensors
    tokenizer = run.tuned.tokenizer
    tokenizer.model_max_length = run.tuned.cfg.n_ctx  # the model's real limit (a GPT-2 tokenizer says 1024)
    tokenizer.save_pretrained(out_dir)
    if value_head:
        head = {k: v.detach().contiguous() for k, v in run.policy.value_head.state_dict().items()}
        save_file(head, str(out_dir / VALUE_HEAD_FILE), metadata={"reads": "ln_final.hook_normalized"})
    return out_dir


def to_hf_reward_model(model):
    """A `transformers.GPT2ForSequenceClassification` (num_labels=1) giving the same scalar as a
    `reward_modeling.RewardModel`, whose head reads n̂ = ln_final.hook_normalized.

    The trunk is `to_hf_gpt2`'s, whose final LayerNorm has weight 1 and bias 1, so the hidden
    state the `score` head reads is n̂ + 1. `score` has no bias; since n̂ · 1 = 0, the weight

        w' = w + (b − w · 1) / d · 1      gives      w' · (n̂ + 1) = w · n̂ + b,

    exactly the RewardModel's r = w · n̂ + b. Both read the last non-pad token.
    """
    from transformers import GPT2ForSequenceClassification

    lm = to_hf_gpt2(model.base)
    config = lm.config
    config.architectures, config.num_labels = ["GPT2ForSequenceClassification"], 1
    config.pad_token_id = model.pad_token_id
    hf = GPT2ForSequenceClassification(config)
    w, b = model.score.weight.detach().float().cpu()[0], model.score.bias.detach().float().cpu()[0]
    d_model = w.shape[0]
    score = w + (b - w.sum()) / d_model
    state = {f"transformer.{k}": v for k, v in lm.transformer.state_dict().items()}
    state["score.weight"] = score[None, :].contiguous()
    missing, unexpected = hf.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith((".attn.bias", ".attn.masked_bias"))]
    if missing or unexpected:
        raise RuntimeError(f"GPT-2 classifier layout mismatch: missing {missing}, unexpected {unexpected}")
    return hf.eval()


def export_reward_model(run_dir: str | Path, out_dir: str | Path) -> Path:
    """Write the reward model of a `python -m rlhf_scratch.reward_model` run folder to `out_dir`
    as a `GPT2ForSequenceClassification` folder (config, model.safetensors, tokenizer) that
    `AutoModelForSequenceClassification.from_pretrained` loads and `--reward-model` accepts."""
    from rlhf_scratch.loading import no_weight_loading_bars
    from rlhf_scratch.reward_modeling import load_reward_model_run
    from rlhf_scratch.runs import refuse_if_training

    out_dir = Path(out_dir)
    refuse_if_training(run_dir)  # its reward_model.pt may be old, or half-written
    model = load_reward_model_run(run_dir)
    hf = to_hf_reward_model(model)
    out_dir.mkdir(parents=True, exist_ok=True)
    with no_weight_loading_bars():
        hf.save_pretrained(out_dir)
    model.base.tokenizer.save_pretrained(out_dir)
    return out_dir


def push_to_hub(out_dir: Path, repo: str) -> str:
    """Upload the exported folder to the Hub (needs network and a token: `huggingface-cli login`)."""
    from huggingface_hub import HfApi

    from rlhf_scratch.loading import hub_reachable

    if not hub_reachable():
        raise ConnectionError(f"--push-to-hub {repo}: the Hugging Face Hub is unreachable (offline); "
                              f"the export is in {out_dir}, push it later with huggingface-cli upload")
    api = HfApi()
    api.create_repo(repo, exist_ok=True)
    return api.upload_folder(folder_path=str(out_dir), repo_id=repo).commit_url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlhf_scratch.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a finished run folder: a policy run (policy.pt) or a reward-model run "
                                        "(reward_model.pt); refused while a process trains it")
    parser.add_argument("out_dir", help="new or empty folder for the Hugging Face model")
    parser.add_argument("--value-head", action="store_true", help=f"also write PPO's value head to {VALUE_HEAD_FILE}")
    parser.add_argument("--push-to-hub", metavar="REPO", help="then upload the folder to this Hub repo (online)")
    opts = parser.parse_args(argv)
    out = Path(opts.out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"error: {out} exists and is not an empty folder; choose a new one (nothing was overwritten)",
              file=sys.stderr)
        return 2
    from rlhf_scratch.reward_modeling import is_reward_model_run

    try:
        if is_reward_model_run(opts.run_dir):  # the rule loading.load_reward_model uses
            if opts.value_head:
                raise ValueError(f"--value-head: {opts.run_dir} is a reward-model run; only PPO runs have a value head")
            export_reward_model(opts.run_dir, out)
            auto_class = "AutoModelForSequenceClassification"
        else:
            export(opts.run_dir, out, opts.value_head)
            auto_class = "AutoModelForCausalLM"
        print(f"exported {opts.run_dir} -> {out}  ({auto_class}.from_pretrained({str(out)!r}))")
        if opts.push_to_hub:
            print(f"pushed: {push_to_hub(out, opts.push_to_hub)}")
    except (ValueError, OSError, RuntimeError) as e:  # RunFolderError, ConnectionError, HF errors
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
