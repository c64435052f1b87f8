"""Every family a user brings, offline: GPT-2, Pythia (GPT-NeoX), Llama, Qwen2 and Gemma as random-init
HF folders (`rlhf_scratch.model_families`), loaded through `--model FOLDER` and run end to end.

Which bug turns each red:
- loading: a wrong config conversion (rotary base/dim, GQA heads, Gemma's √d embedding scale or
  (1 + w) norm, NeoX's partial rotary) changes the log-probs against the family's own HF class;
- left padding: rotary positions counted from the pad columns instead of from the first real token
  (a padded prompt's log-probs would then differ from the same prompt alone);
- the decoder: a KV-cache step that disagrees with the full forward (the static cache used on a
  family it cannot run, or a fallback with wrong positions);
- training: any algorithm that cannot run a family's model (value head on RMSNorm's
  `ln_final.hook_normalized`, the vocabulary terms, GQA parameter shapes under AdamW, resume).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlhf_scratch.generation import TransformerLensCacheDecoder, make_decoder
from rlhf_scratch.loading import LOCAL_FAMILIES, ModelFolderError, check_model_folder, load_lm
from rlhf_scratch.model_families import FAMILIES
from rlhf_scratch.registry import names as algorithm_names
from rlhf_scratch.static_cache import StaticCacheDecoder, unsupported_reason

pytestmark = pytest.mark.usefixtures("one_thread")


def test_every_local_family_has_a_fixture_and_back():
    """The families a folder may be (loading.LOCAL_FAMILIES) are exactly those the matrix builds."""
    assert sorted(FAMILIES[f].model_type for f in FAMILIES) == sorted(LOCAL_FAMILIES)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_loaded_model_equals_its_hf_class(family, family_folder):
    folder = family_folder(family)
    lm = load_lm(str(folder)).eval()
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.randint(1, 500, (3, 11), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ours, theirs = lm(ids).log_softmax(-1), hf(ids).logits.log_softmax(-1)
    assert (ours - theirs).abs().max() < 1e-4
    assert lm.cfg.original_architecture == hf.config.architectures[0]


def test_family_features_are_switched_on(family_folder):
    """The fixtures really carry the features the matrix claims to cover."""
    cfg = {f: load_lm(str(family_folder(f))).cfg for f in FAMILIES}
    assert cfg["gpt2"].positional_embedding_type == "standard"
    assert cfg["pythia"].parallel_attn_mlp and cfg["pythia"].rotary_dim == cfg["pythia"].d_head // 4
    for f in ("llama", "qwen2", "gemma"):
        assert cfg[f].positional_embedding_type == "rotary" and cfg[f].gated_mlp
        assert cfg[f].normalization_type == "RMSPre"
    assert cfg["llama"].n_key_value_heads == 2 and cfg["gemma"].n_key_value_heads == 1


@pytest.mark.parametrize("family", list(FAMILIES))
def test_left_padding_does_not_move_a_prompt(family, family_folder):
    """The same prompt alone and left-padded next to a longer one: the same next-token log-probs."""
    lm = load_lm(str(family_folder(family))).eval()
    short, long = torch.tensor([[7, 99, 300, 41]]), torch.tensor([[5, 8, 13, 21, 34, 55, 89]])
    pad = 3
    ids = torch.cat([torch.cat([torch.full((1, 3), pad), short], 1), long])
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    with torch.no_grad():
        alone = lm(short).log_softmax(-1)[0]
        padded = lm(ids, attention_mask=mask).log_softmax(-1)[0, 3:]
    assert (alone - padded).abs().max() < 1e-4


@pytest.mark.parametrize("family", list(FAMILIES))
def test_decoder_equals_the_full_forward(family, family_folder):
    """Prefill + 4 cached steps give the full forward's logits at each position, left padding included;
    the static cache runs GPT-2 and says why it falls back on the others."""
    lm = load_lm(str(family_folder(family))).eval()
    reason = unsupported_reason(lm)
    assert (reason is None) == (family == "gpt2"), reason
    prompt = torch.tensor([[3, 3, 17, 250], [12, 19, 400, 31]])
    prompt_mask = torch.tensor([[False, False, True, True], [True, True, True, True]])
    steps = torch.tensor([[44, 45, 46, 47], [60, 61, 62, 63]])
    decoder = make_decoder(lm, prompt, prompt_mask, gen_len=5, cuda_graph=False)
    assert isinstance(decoder, TransformerLensCacheDecoder if reason else StaticCacheDecoder)
    with torch.no_grad():
        cached = [decoder.prefill()] + [decoder.step(steps[:, t]) for t in range(steps.shape[1])]
        ids = torch.cat([prompt, steps], 1)
        mask = torch.cat([prompt_mask, torch.ones_like(steps, dtype=torch.bool)], 1).long()
        full = lm(ids, attention_mask=mask)[:, prompt.shape[1] - 1:]
    assert (torch.stack(cached, 1) - full).abs().max() < 1e-4


def test_a_family_not_in_the_matrix_is_refused_in_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba", "architectures": ["MambaForCausalLM"]}))
    with pytest.raises(ModelFolderError, match="mamba model; a local --model folder must be one of the families"):
        check_model_folder(tmp_path, "model", classifier=False)


# Logged as NaN on purpose: GRPO measures no full-vocabulary KL without --measure-kl (docs/grpo.md).
NOT_MEASURED = {"grpo": {"rollout/kl_full_vocab", "eval/ref_logprob_per_token"}}


def train(folder, run_dir, algo, *extra):
    cmd = [sys.executable, "-m", "rlhf_scratch.train", "sentiment", "--model", str(folder), "--algo", algo,
           "--total-phases", "2", "--batch-size", "8", "--gen-len", "6", "--threads", "1",
           "--run-dir", str(run_dir), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "gpt2"])  # GPT-2 folders: test_train et al.
@pytest.mark.parametrize("algo", algorithm_names())
def test_every_algorithm_trains_every_family(family, algo, family_folder, tmp_path):
    """Two phases, every algorithm, every family: the run finishes, logs finite numbers, and its
    saved policy reloads (runs.load_run) and differs from the reference (it learned something)."""
    from rlhf_scratch.runs import load_run

    done = train(family_folder(family), tmp_path / "run", algo)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    not_finite = {k for r in rows for k, v in r.items() if isinstance(v, (int, float)) and not math.isfinite(v)}
    assert not_finite <= NOT_MEASURED.get(algo, set()), not_finite
    run = load_run(tmp_path / "run")
    moved = [(p - q).abs().max() for p, q in zip(run.tuned.parameters(), run.reference.parameters())]
    assert max(moved) > 0


@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_lora_on_grouped_query_attention(family, family_folder):
    """Under GQA W_K/W_V are read-only per-query-head views of _W_K/_W_V: the adapter goes on the stored
    K/V weight (one per K/V head), B = 0 leaves the model exact, and a trained ΔW reaches the forward
    and survives merge_lora (same logits before and after the merge)."""
    from rlhf_scratch.lora import LORA_TARGETS, adapters, add_lora, merge_lora

    lm = load_lm(str(family_folder(family))).eval()
    ids = torch.randint(1, 500, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        before = lm(ids)
        add_lora(lm, rank=2, alpha=4.0, targets=LORA_TARGETS, generator=torch.Generator().manual_seed(0))
        assert (lm(ids) - before).abs().max() == 0
        kv = [a for a in adapters(lm) if a.target in ("W_K", "W_V")]
        assert kv and all(a.shape[0] == lm.cfg.n_key_value_heads for a in kv)
        for a in adapters(lm):
            a.B.normal_(0, 0.5)
        adapted = lm(ids)
        assert (adapted - before).abs().max() > 1e-3
        merge_lora(lm)
        assert (lm(ids) - adapted).abs().max() < 1e-4
