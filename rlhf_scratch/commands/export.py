"""Export a tuned policy to a Hugging Face folder of its own family that loads with no custom code.

    python -m rlhf_scratch.export runs/<run> exported/           # config, model.safetensors, tokenizer
    python -m rlhf_scratch.export runs/<run> exported/ --value-head   # + PPO's value head, separately
    python -m rlhf_scratch.export runs/<run> exported/ --push-to-hub you/my-model
    python -m rlhf_scratch.export runs/rm rm_hf/    # a reward-model run -> GPT2ForSequenceClassification

    from transformers import pipeline
    pipeline("text-generation", model="exported/")("This movie was really")

The class is the policy's own (`hf_format.to_hf_causal_lm`, by TransformerLens' original_architecture):
GPT2LMHeadModel, GPTNeoXForCausalLM (Pythia), LlamaForCausalLM, Qwen2ForCausalLM or GemmaForCausalLM.
A weight the class has no place for (a trained unembedding bias b_U in the RMSNorm families, Qwen2's
and Gemma's MLP biases, a Qwen2 output bias that is no value bias) is refused in one line, with
nothing written; see each `to_hf_*` for its identities. What follows is GPT-2's.

A run folder of `python -m rlhf_scratch.reward_model` (config.json's algo is reward_model, the rule
`loading.load_classifier` uses) is exported by `export_reward_model` instead; see `to_hf_reward_model`.

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

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

from rlhf_scratch.config import ConfigError
from rlhf_scratch.config.cli import parse_dataclass
from rlhf_scratch.config.command import command

CONVERSIONS = ("EXTRAS_FILE", "final_norm_and_unembed", "to_hf_causal_lm", "to_hf_gemma", "to_hf_gpt2",
               "to_hf_gpt_neox", "to_hf_llama", "to_hf_qwen2", "to_hf_reward_model")
"""`models.hf_format`'s conversions, importable from here too (this module is the command around them)."""

__all__ = ["export", "export_reward_model", "main", "push_to_hub", "VALUE_HEAD_FILE", *CONVERSIONS]  # noqa: F822 (__getattr__)


def __getattr__(name: str):
    """The conversions and VALUE_HEAD_FILE (what --value-head writes for a PPO run: its policy's one
    extra module), imported on first use: torch comes with them, so `--help` and a bad flag answer first."""
    if name == "VALUE_HEAD_FILE":
        from rlhf_scratch.models.hf_format import EXTRAS_FILE

        return EXTRAS_FILE.format(name="value_head")
    if name in CONVERSIONS:
        from rlhf_scratch.models import hf_format

        return getattr(hf_format, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def export(run_dir: str | Path, out_dir: str | Path, value_head: bool = False) -> Path:
    """Write the tuned policy of `run_dir` to `out_dir` as a Hugging Face folder of its own family
    (`to_hf_causal_lm`); a policy its class cannot express exactly raises ValueError before anything is written."""
    from safetensors.torch import save_file

    from rlhf_scratch.engine.runs import load_run
    from rlhf_scratch.models.hf_format import EXTRAS_FILE, to_hf_causal_lm
    from rlhf_scratch.models.loading import no_weight_loading_bars
    from rlhf_scratch.models.policy import PolicyWithExtras, merged_lm

    out_dir = Path(out_dir)
    run = load_run(run_dir)
    extras = run.policy.extras() if isinstance(run.policy, PolicyWithExtras) else {}
    if value_head and not extras:
        if getattr(run.args, "critic", "shared") == "separate":  # (only PPO's args have the field)
            raise ValueError(f"--value-head: {run_dir} trained a separate critic (--critic separate); its value head is "
                             "in the run's checkpoints, not in policy.pt")
        raise ValueError(f"--value-head: {run_dir} is a {run.args.algo} run; only PPO runs have a value head")
    hf = to_hf_causal_lm(merged_lm(run.tuned))  # adapters' ΔW baked in, then a plain model (no-op without adapters)
    source = Path(run.args.model).expanduser()
    if (source / "generation_config.json").is_file():  # its EOS (an instruct model's end of turn) goes along
        from transformers import GenerationConfig

        hf.generation_config = GenerationConfig.from_pretrained(source)
    out_dir.mkdir(parents=True, exist_ok=True)
    with no_weight_loading_bars():
        hf.save_pretrained(out_dir)  # config.json + model.safetensors (+ generation_config.json)
    tokenizer = run.tuned.tokenizer
    tokenizer.model_max_length = run.tuned.cfg.n_ctx  # the model's real limit (a GPT-2 tokenizer says 1024)
    tokenizer.save_pretrained(out_dir)
    if value_head:  # the policy's extras, each in a file of its own (PPO's: value_head.safetensors)
        for name, module in extras.items():
            weights = {k: v.detach().contiguous() for k, v in module.state_dict().items()}
            save_file(weights, str(out_dir / EXTRAS_FILE.format(name=name)), metadata={"reads": "ln_final.hook_normalized"})
    return out_dir


def export_reward_model(run_dir: str | Path, out_dir: str | Path) -> Path:
    """Write the reward model of a `python -m rlhf_scratch.reward_model` run folder to `out_dir`
    as a `GPT2ForSequenceClassification` folder (config, model.safetensors, tokenizer) that
    `AutoModelForSequenceClassification.from_pretrained` loads and `--reward-model` accepts."""
    from rlhf_scratch.engine.runs import refuse_if_training
    from rlhf_scratch.models.hf_format import to_hf_reward_model
    from rlhf_scratch.models.loading import no_weight_loading_bars
    from rlhf_scratch.reward.model import load_reward_model_run

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

    from rlhf_scratch.models.loading import hub_reachable

    if not hub_reachable():
        raise ConnectionError(f"--push-to-hub {repo}: the Hugging Face Hub is unreachable (offline); "
                              f"the export is in {out_dir}, push it later with huggingface-cli upload")
    api = HfApi()
    api.create_repo(repo, exist_ok=True)
    return api.upload_folder(folder_path=str(out_dir), repo_id=repo).commit_url


PROG = "python -m rlhf_scratch.export"


@dataclass
class ExportArgs:
    """Export a tuned policy (or a reward model) to a Hugging Face folder that loads with no custom code."""

    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")] = tyro.MISSING
    """A finished run folder: a policy run (policy.pt) or a reward-model run (reward_model.pt); refused
    while a process trains it."""
    out_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="OUT_DIR")] = tyro.MISSING
    """New or empty folder for the Hugging Face model."""
    value_head: bool = False
    """Also write PPO's value head to value_head.safetensors."""
    push_to_hub: Annotated[str | None, tyro.conf.arg(metavar="REPO")] = None
    """Then upload the folder to this Hub repo (online)."""


def parse(argv: list[str]) -> ExportArgs:
    """The command line; the output folder refused at once if it holds anything."""
    opts = parse_dataclass(ExportArgs, argv, default=None, prog=PROG, description=__doc__.split("\n\n")[0])
    out = Path(opts.out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} exists and is not an empty folder; choose a new one (nothing was overwritten)")
    return opts


def main(argv: list[str] | None = None) -> int:
    """The command: `command()` owns its one-line errors and exit codes."""
    return command(parse, run, argv)


def run(opts: ExportArgs) -> int:
    """Export the run folder (the policy's family, or the reward model), then push it if asked."""
    from rlhf_scratch.reward.model import is_reward_model_run

    out = Path(opts.out_dir)
    if is_reward_model_run(opts.run_dir):  # the rule loading.load_classifier uses
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
