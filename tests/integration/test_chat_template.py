"""Instruct models as their users prompt them: --chat-template and the generation config's EOS.

The fixture is a random-init Qwen2 folder whose tokenizer has a ChatML template, `<|im_start|>` and
`<|im_end|>` as added special tokens, and `<|im_end|>` as the generation config's EOS — while the
tokenizer's own EOS stays `<|endoftext|>` (id 0), so a test can tell the two apart.
"""

import contextlib
import json
import shutil

import pytest
import torch

from rlhf_scratch.config import ConfigError, make_args
from rlhf_scratch.models.loading import load_lm
from rlhf_scratch.rollout.generation import (
    decode_completions,
    eos_token_ids,
    generate,
    generation_config_eos,
    is_eos,
    tokenize_prompts,
    use_chat_template,
)
from rlhf_scratch.rollout.phase import make_rollout

PROMPT = "This movie was really"
RENDERED = "<|im_start|>user\nThis movie was really<|im_end|>\n<|im_start|>assistant\n"  # ChatML, by hand


@pytest.fixture(scope="module")
def chat_folder(family_folder):
    return family_folder("qwen2", chat=True)


@pytest.fixture
def chat_lm(chat_folder, one_thread):
    """A fresh load per test: `use_chat_template(lm, "none")` changes the tokenizer it is given."""
    return load_lm(str(chat_folder)).eval()


def token(lm, text: str) -> int:
    return lm.tokenizer.convert_tokens_to_ids(text)


@contextlib.contextmanager
def forced_token_at_step(lm, token_id: int, step: int):
    """Every sample's generated token number `step` (0 = the first) is `token_id`: its logit is set
    to 1e4 in the unembedding's output of that decoding step (prefill = step 0). Other steps are
    the model's own draws."""
    calls = [0]

    def force(module, inputs, logits):
        if calls[0] == step:
            logits = logits.clone()
            logits[..., token_id] = 1e4
        calls[0] += 1
        return logits

    handle = lm.unembed.register_forward_hook(force)
    try:
        yield
    finally:
        handle.remove()


# ---------------------------------------------------------------------------------- the prompt


def test_the_fixture_tells_the_generation_configs_eos_from_the_tokenizers(chat_lm, chat_folder):
    """What every test below relies on: the template exists, and <|im_end|> is the generation
    config's EOS but not the tokenizer's."""
    assert chat_lm.tokenizer.chat_template is not None
    config = json.loads((chat_folder / "generation_config.json").read_text())
    assert config["eos_token_id"] == token(chat_lm, "<|im_end|>") != chat_lm.tokenizer.eos_token_id


def test_a_prompt_is_rendered_through_the_chat_template_with_no_extra_bos(chat_lm):
    """`auto` with a template: the ids are exactly the ChatML text's tokens — <|im_start|> first
    and one token each, no BOS before it (with --prepend-bos on, the default), no plain text."""
    ids, mask = tokenize_prompts(chat_lm, [PROMPT], prepend_bos=True)
    expected = chat_lm.tokenizer.encode(RENDERED, add_special_tokens=False)
    assert ids[0].tolist() == expected, (
        f"got {chat_lm.tokenizer.convert_ids_to_tokens(ids[0].tolist())}, expected the ChatML rendering")
    assert ids[0, 0].item() == token(chat_lm, "<|im_start|>"), "a BOS before the template's first token: a double BOS"
    assert ids[0].tolist().count(token(chat_lm, "<|im_start|>")) == 2, "<|im_start|> must be one special token"
    assert ids[0, -4:].tolist() == chat_lm.tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False), \
        "the prompt must end with the assistant's opening (add_generation_prompt)"
    assert mask.all()


def test_rendered_prompts_of_different_lengths_are_left_padded(chat_lm):
    ids, mask = tokenize_prompts(chat_lm, [PROMPT, "A"], prepend_bos=True)
    short = chat_lm.tokenizer.encode(RENDERED.replace(PROMPT, "A"), add_special_tokens=False)
    assert ids[1, -len(short):].tolist() == short
    assert mask[1].tolist() == [False] * (ids.shape[1] - len(short)) + [True] * len(short)


def test_chat_template_none_gives_the_plain_prompt(chat_lm):
    use_chat_template(chat_lm, "none")
    ids, _ = tokenize_prompts(chat_lm, [PROMPT], prepend_bos=True)
    plain = chat_lm.to_tokens(PROMPT, prepend_bos=True)[0]
    assert ids[0].tolist() == plain.tolist()
    assert token(chat_lm, "<|im_start|>") not in ids[0].tolist()


def test_a_model_without_a_template_is_prompted_as_before(one_thread):
    """The tiny preset (as GPT-2) has no template: `auto` changes nothing, BOS included."""
    lm = load_lm("tiny").eval()
    assert lm.tokenizer.chat_template is None
    for prepend_bos in (True, False):
        ids, _ = tokenize_prompts(lm, [PROMPT], prepend_bos=prepend_bos)
        assert ids[0].tolist() == lm.to_tokens(PROMPT, prepend_bos=prepend_bos)[0].tolist()
    assert eos_token_ids(lm) == (lm.tokenizer.eos_token_id,)


def test_the_flag_is_validated():
    """(A bad value set after construction: the test session's type checker refuses it in the constructor.)"""
    args = make_args("tiny")
    args.chat_template = "always"
    with pytest.raises(ConfigError, match="^chat_template: must be one of auto, none; got 'always'$"):
        args.validate()


# ---------------------------------------------------------------------------------- EOS


def test_the_generation_configs_eos_ends_a_completion(chat_lm):
    """<|im_end|> forced at step 2: kept up to and including it, then padding. With the tokenizer's
    EOS (<|endoftext|>) instead, nothing would stop and every position would be kept."""
    im_end = token(chat_lm, "<|im_end|>")
    assert eos_token_ids(chat_lm) == (im_end,)
    ids, mask = tokenize_prompts(chat_lm, [PROMPT] * 3, prepend_bos=True)
    with forced_token_at_step(chat_lm, im_end, step=2):
        completion_ids, completion_mask = generate(chat_lm, ids, mask, gen_len=6, stop_at_eos=True)
    assert completion_ids[:, 2].tolist() == [im_end] * 3
    assert completion_mask.tolist() == [[True, True, True, False, False, False]] * 3, \
        "the completion must end at the generation config's EOS"
    texts = decode_completions(chat_lm, completion_ids, completion_mask, stop_at_eos=True)
    assert texts == [chat_lm.tokenizer.decode(row[:2].tolist()) for row in completion_ids]
    assert all("<|im_end|>" not in t for t in texts)


def test_the_tokenizers_eos_does_not_end_a_chat_completion(chat_lm):
    """As transformers' generate: the generation config's EOS list replaces the tokenizer's EOS."""
    ids, mask = tokenize_prompts(chat_lm, [PROMPT] * 2, prepend_bos=True)
    with forced_token_at_step(chat_lm, chat_lm.tokenizer.eos_token_id, step=1):
        completion_ids, completion_mask = generate(chat_lm, ids, mask, gen_len=4, stop_at_eos=True)
    assert (completion_ids[:, 1] == chat_lm.tokenizer.eos_token_id).all()
    assert completion_mask.all()


def test_a_list_of_eos_ids_ends_a_completion_at_any_of_them(chat_folder, tmp_path, one_thread):
    """generation_config.json with eos_token_id [<|im_end|>, 1234]: 1234, the second, ends it too."""
    folder = shutil.copytree(chat_folder, tmp_path / "model")
    config = json.loads((folder / "generation_config.json").read_text())
    im_end = config["eos_token_id"]
    config["eos_token_id"] = [im_end, 1234]
    (folder / "generation_config.json").write_text(json.dumps(config))
    assert generation_config_eos(str(folder)) == (im_end, 1234)
    lm = load_lm(str(folder)).eval()
    assert eos_token_ids(lm) == (im_end, 1234)
    ids, mask = tokenize_prompts(lm, [PROMPT] * 2, prepend_bos=True)
    with forced_token_at_step(lm, 1234, step=1):
        completion_ids, completion_mask = generate(lm, ids, mask, gen_len=5, stop_at_eos=True)
    assert completion_mask.tolist() == [[True, True, False, False, False]] * 2
    assert is_eos(completion_ids, (im_end, 1234))[:, 1].all()


# ---------------------------------------------------------------------------------- the rollout


def test_the_reward_receives_the_plain_prompt_and_the_completions_own_text(chat_lm):
    """A TRL-style reward records what it is given: the prompt as typed (not its ChatML rendering)
    and the generated tokens before <|im_end|>, decoded — no template token, no EOS. The rollout
    keeps the rendered ids, the generation config's EOS, and counts the completions as ended."""
    received = {}

    def reward(prompts, completions, completion_ids, **kwargs):
        received.update(prompts=prompts, completions=completions, completion_ids=completion_ids)
        return [0.0] * len(completions)

    im_end = token(chat_lm, "<|im_end|>")
    torch.manual_seed(3)
    with forced_token_at_step(chat_lm, im_end, step=3):
        rollout = make_rollout(chat_lm, None, [PROMPT, "I expected"], reward, num_generations=2, gen_len=6,
                               stop_at_eos=True, missing_eos_penalty=1.0)
    assert received["prompts"] == [PROMPT, PROMPT, "I expected", "I expected"]
    generated = [row[:3].tolist() for row in rollout.completion_ids]
    assert received["completions"] == [chat_lm.tokenizer.decode(g) for g in generated]
    assert received["completion_ids"] == [g + [im_end] for g in generated], "TRL's completion_ids end with the EOS"
    for text in received["completions"]:
        assert "<|im_start|>" not in text and "<|im_end|>" not in text and not text.startswith("user")
    assert rollout.texts[0] == PROMPT + received["completions"][0], "logs show the prompt as typed"
    assert rollout.prompt_ids[0, -len(chat_lm.tokenizer.encode(RENDERED, add_special_tokens=False)):].tolist() \
        == chat_lm.tokenizer.encode(RENDERED, add_special_tokens=False)
    assert rollout.eos_token_id == (im_end,)
    assert rollout.is_terminated.all() and torch.equal(rollout.rewards, rollout.scores), \
        "every completion ended with <|im_end|>: no missing-EOS penalty"


@pytest.mark.parametrize("chat_template", ["auto", "none"])
def test_a_trainers_rollouts_follow_the_flag(chat_template, chat_folder, one_thread):
    """The run setup applies --chat-template to the policy: its rollouts' prompt ids are the ChatML
    rendering (auto) or the plain text with BOS (none)."""
    from rlhf_scratch.config import registry

    args = make_args("tiny", "grpo", model=str(chat_folder), chat_template=chat_template, batch_size=4,
                     num_generations=2, num_minibatches=1, gen_len=3, threads=1, seed=0)
    trainer = registry.get("grpo").trainer_class()(args, quiet=True)
    rollout = trainer.rollout_phase()
    tok = trainer.lm.tokenizer
    if chat_template == "auto":
        expected = tok.encode(RENDERED, add_special_tokens=False)
    else:
        expected = trainer.lm.to_tokens(PROMPT, prepend_bos=True)[0].tolist()
    assert rollout.prompt_ids[0].tolist() == expected
    assert rollout.prompts[0] == PROMPT


# ---------------------------------------------------------------------------------- end to end


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_two_phases_train_an_instruct_model(algo, chat_folder, tmp_path, one_thread):
    """`--model FOLDER` with a chat template trains end to end; its samples show the plain prompt."""
    from rlhf_scratch.commands.train import main

    run_dir = tmp_path / "run"
    code = main(["sentiment", "--algo", algo, "--model", str(chat_folder), "--total-phases", "2",
                 "--batch-size", "8", "--gen-len", "6", "--stop-at-eos", "--threads", "1", "--run-dir", str(run_dir)])
    assert code == 0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    no_reference = algo == "grpo"  # GRPO at β = 0 runs no reference: its KL and ref log-probs are NaN
    assert all(torch.isfinite(torch.tensor(float(v))) for r in rows for k, v in r.items()
               if isinstance(v, (int, float)) and "time" not in k and not (no_reference and ("kl" in k or "ref" in k)))
    assert json.loads((run_dir / "config.json").read_text())["chat_template"] == "auto"
    samples = (run_dir / "samples.md").read_text()
    assert PROMPT in samples and "<|im_start|>" not in samples
