"""`python -m rlhf_scratch.pretrain --smoke`: every stage end to end on a few hundred snippets."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json
import math

import torch

from rlhf_scratch.commands.pretrain import main, parse_args
from rlhf_scratch.commands.tiny_preset import build as pretrain
from rlhf_scratch.models.loading import load_classifier, load_lm
from rlhf_scratch.reward.functions import SentimentReward


def test_lr_schedule_by_hand():
    args = pretrain.PretrainArgs(lm_lr=1.0, lm_warmup=10, lm_steps=110)
    assert pretrain.lr_at(0, args) == 0.1  # warmup: (0 + 1) / 10
    assert pretrain.lr_at(10, args) == 1.0  # peak after warmup
    assert math.isclose(pretrain.lr_at(60, args), 0.1 + 0.9 * 0.5)  # half-way down the cosine
    assert math.isclose(pretrain.lr_at(110, args), 0.1)  # floor: 10% of peak


def test_pack_puts_endoftext_before_every_snippet():
    from rlhf_scratch.models.loading import load_tokenizer

    tok = load_tokenizer("tiny")
    stream, starts = pretrain.pack(["Great fun.", "Dull."], tok)
    first, second = tok("Great fun.")["input_ids"], tok("Dull.")["input_ids"]
    assert stream.tolist() == [0, *first, 0, *second]
    assert starts.tolist() == [0, 1 + len(first)]


def test_parse_args_smoke_and_overrides():
    args = parse_args(["--smoke", "--out", "x", "--lm-steps", "3"])
    assert args.limit == 300 and args.out == "x" and args.lm_steps == 3
    assert parse_args([]) == pretrain.PretrainArgs()
    zero = parse_args(["--dropout", "0", "--install"])
    assert zero.dropout == 0.0 and zero.install, "a flag given as 0 must not fall back to the default"


def test_smoke_pretraining_runs_end_to_end(tmp_path):
    args = pretrain.PretrainArgs.smoke(out=str(tmp_path), threads=1)
    metrics = pretrain.pretrain(args)
    for key in ("lm_val_loss", "clf_test_accuracy", "bow_logreg_test_accuracy",
                "headroom_mean_pos_reward"):
        assert math.isfinite(metrics[key]), key
    assert math.isclose(metrics["lm_val_perplexity"], math.exp(metrics["lm_val_loss"]))
    assert json.loads((tmp_path / "metrics.json").read_text())["args"]["limit"] == 300
    # What it wrote loads through the same functions as the shipped preset and the Hub models.
    lm = load_lm(str(tmp_path / "tiny_lm"))
    assert lm.cfg.d_model == 32 and lm.cfg.d_vocab == 400
    model, _ = load_classifier(str(tmp_path / "tiny_reward"))
    assert model.config.num_labels == 2
    r = SentimentReward(str(tmp_path / "tiny_reward"))(["Fine.", "Awful!"])
    assert r.shape == (2,) and ((r >= 0) & (r <= 1)).all()
    # Seeded: the same arguments give the same weights.
    again = tmp_path / "again"
    pretrain.pretrain(pretrain.PretrainArgs.smoke(out=str(again), threads=1))
    a = load_lm(str(again / "tiny_lm")).state_dict()
    for name, tensor in lm.state_dict().items():
        torch.testing.assert_close(tensor, a[name], msg=f"{name} differs between two runs")


def test_pretrain_refuses_to_overwrite(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["--smoke", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: out: {tmp_path} exists and is not empty; choose another --out"
    assert (tmp_path / "keep.txt").read_text() == "mine"
    assert main(["--smoke", "--install", "--out", str(tmp_path / "new")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: install: would replace the shipped preset in ") and err.endswith("add --force (the current one is kept as <name>.bak)")
    assert not (tmp_path / "new").exists(), "nothing is written before the refusal"
