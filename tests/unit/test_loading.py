"""Loading the shipped `tiny` preset from package data, and the Hub path when it is offline."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import huggingface_hub.constants
import pytest
import torch
from transformer_lens import HookedTransformer
from transformers import AutoModelForCausalLM

from rlhf_scratch.models import loading
from rlhf_scratch.models.loading import (
    HubUnreachableError,
    asset_path,
    load_classifier,
    load_lm,
    load_tokenizer,
)

SENTENCE = "This movie was really funny, but the ending dragged."


@pytest.fixture(scope="module")
def lm() -> HookedTransformer:
    return load_lm("tiny")


def test_assets_are_package_data_and_small():
    for name in ("tiny_lm", "tiny_reward"):
        folder = asset_path(name)
        assert folder.parent.parent.name == "rlhf_scratch" and (folder / "config.json").exists()
    total = sum(f.stat().st_size for f in asset_path("").rglob("*") if f.is_file())
    assert total <= 15 * 2**20, f"shipped assets are {total / 2**20:.1f} MB > 15 MB"


def test_tiny_lm_is_a_trainable_float32_hooked_transformer(lm):
    assert isinstance(lm, HookedTransformer)
    assert (lm.cfg.n_layers, lm.cfg.n_heads, lm.cfg.d_model) == (4, 4, 128)
    assert lm.cfg.normalization_type == "LNPre", "fold_ln, as from_pretrained does by default"
    assert lm.cfg.positional_embedding_type == "standard" and lm.cfg.act_fn == "gelu_new"
    assert all(p.dtype == torch.float32 and p.requires_grad for p in lm.parameters())
    assert lm.tokenizer.bos_token_id == 0 and lm.cfg.d_vocab == len(lm.tokenizer)


def test_tiny_lm_matches_the_hugging_face_model(lm):
    """The TransformerLens conversion computes the same distribution as the stored HF model."""
    hf = AutoModelForCausalLM.from_pretrained(str(asset_path("tiny_lm")), dtype=torch.float32).eval()
    tokens = lm.to_tokens(SENTENCE, prepend_bos=True)
    lm.eval()
    with torch.no_grad():
        ours = lm(tokens).log_softmax(-1)
        theirs = hf(tokens).logits.log_softmax(-1)
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
    # And the model has learned English review text: far better than uniform (ln 8192 = 9.0).
    loss = lm(tokens, return_type="loss").item()
    assert loss < 6.0, f"per-token loss {loss:.2f} on a review sentence: is the LM trained?"


def test_tiny_lm_greedy_continuation_is_the_hugging_face_models(lm):
    """The loaded HookedTransformer's greedy continuation (TransformerLens' `generate`, KV cache on)
    is, token for token and as text, the argmax loop of the stored HF model run on the whole
    sequence each step (no cache), from [BOS] + the prompt tokenised by `load_tokenizer`.

    Red if: the conversion or weight processing changes the distribution (the ten steps' top-2
    logit margins are 0.03 to 0.7, against the 1e-4 the two models agree to), BOS is dropped or
    doubled, the KV cache misplaces a position, or the text is not prompt + decoded new tokens."""
    prompt = "This movie was really"
    hf = AutoModelForCausalLM.from_pretrained(str(asset_path("tiny_lm")), dtype=torch.float32).eval()
    tok = load_tokenizer("tiny")
    ids = [tok.bos_token_id] + tok(prompt)["input_ids"]
    with torch.no_grad():
        for _ in range(10):
            ids.append(int(hf(torch.tensor([ids])).logits[0, -1].argmax()))
    lm.eval()
    tokens = lm.generate(lm.to_tokens(prompt, prepend_bos=True), max_new_tokens=10, do_sample=False,
                         stop_at_eos=False, verbose=False)
    assert tokens[0].tolist() == ids, "TransformerLens' greedy tokens differ from the HF model's"
    text = lm.generate(prompt, max_new_tokens=10, do_sample=False, stop_at_eos=False, verbose=False, prepend_bos=True)
    assert text == tok.decode(ids[1:]), "the string is not the prompt followed by the decoded greedy tokens"


def test_tokenizer_of_lm_and_load_tokenizer_agree(lm):
    tok = load_tokenizer("tiny")
    assert tok(SENTENCE)["input_ids"] == lm.to_tokens(SENTENCE, prepend_bos=False)[0].tolist()


def test_tiny_reward_model_follows_the_imdb_label_convention():
    model, tokenizer = load_classifier("tiny")
    assert type(model).__name__ == "GPT2ForSequenceClassification"
    assert model.config.id2label == {0: "NEGATIVE", 1: "POSITIVE"}
    assert model.config.pad_token_id == tokenizer.pad_token_id == 0
    assert not model.training and next(model.parameters()).dtype == torch.float32


@pytest.fixture
def hub_offline(tmp_path, monkeypatch):
    """No network and an empty Hugging Face cache, whatever this machine has cached."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))


@pytest.mark.parametrize("loader, name", [
    (load_lm, "gpt2"),
    (load_tokenizer, "gpt2"),
    (load_classifier, "lvwerra/distilbert-imdb"),
])
def test_hub_id_without_hub_gives_one_line_error(hub_offline, loader, name):
    with pytest.raises(HubUnreachableError) as err:
        loader(name)
    message = str(err.value)
    assert "\n" not in message, "the CLI prints this message: one line, no stack trace"
    assert repr(name) in message and "Hub" in message and "tiny" in message


def test_unknown_lm_name_gives_one_line_error():
    with pytest.raises(ValueError) as err:
        load_lm("definitely-not-a-model")
    assert "\n" not in str(err.value) and len(str(err.value)) < 300


def test_offline_error_classification():
    try:
        try:
            raise ConnectionError("Max retries exceeded")
        except ConnectionError as cause:
            raise OSError("We couldn't load this model") from cause
    except OSError as err:
        assert loading.is_offline_error(err)
    assert not loading.is_offline_error(ValueError("shapes do not match"))
