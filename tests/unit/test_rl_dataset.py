"""Data as verl prepares it (rollout/rl_dataset.py): parquet prompts under --prompt-key, chat messages
through the model's chat template, --max-prompt-length with --truncation error|left|right and
--filter-overlong-prompts, and one-line errors for bad input.

The tiny preset's tokenizer, worked once here: "This movie was really" is [718, 398, 683, 956] and
"Hi" is [40, 73]; BOS is 0. Cut to 3 tokens, with BOS, the first is [0, 718, 398] (right) and the
second [398, 683, 956] (left): the two sides give different ids, so swapping them fails a test.
"""

import pickle
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlhf_scratch.commands.train import main
from rlhf_scratch.config import ConfigError, make_args
from rlhf_scratch.models.families import CHATML_TEMPLATE
from rlhf_scratch.models.loading import load_tokenizer
from rlhf_scratch.rollout.generation import tokenize_prompts
from rlhf_scratch.rollout.prompts import PromptError, load_prompt_rows, load_prompts
from rlhf_scratch.rollout.rl_dataset import TokenizedPrompt, prepare_prompts, prompt_ids, run_prompts

MOVIE, HI = "This movie was really", "Hi"
MOVIE_IDS, HI_IDS = [718, 398, 683, 956], [40, 73]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": MOVIE}]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny")


@pytest.fixture
def chat_tok():
    """The tiny tokenizer as an instruct model ships it (models.families.build_folder's chat=True)."""
    tokenizer = load_tokenizer("tiny")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def parquet(path, **columns):
    pq.write_table(pa.table(columns), path)
    return str(path)


def test_the_worked_ids_are_the_tokenizers(tok):
    assert tok.encode(MOVIE, add_special_tokens=False) == MOVIE_IDS
    assert tok.encode(HI, add_special_tokens=False) == HI_IDS and tok.bos_token_id == 0


# ---- reading parquet ---------------------------------------------------------------------------


def test_parquet_column_named_by_prompt_key_in_row_order(tmp_path):
    path = parquet(tmp_path / "p.parquet", question=[MOVIE, HI, "Third"], answer=["a", "b", "c"])
    assert load_prompts(path, key="question") == [MOVIE, HI, "Third"]


def test_parquet_chat_messages_are_read_as_messages(tmp_path):
    rows = [CHAT, [{"role": "user", "content": HI, "name": "x"}]]
    path = parquet(tmp_path / "chat.parquet", prompt=rows)
    assert load_prompt_rows(path) == [CHAT, [{"role": "user", "content": HI}]]  # extra keys dropped


@pytest.mark.parametrize("make, message", [
    (lambda d: str(d / "nope.parquet"), "prompts: {d}/nope.parquet: not found"),
    (lambda d: parquet(d / "p.parquet", text=["a"], label=[1]),
     "prompts: {d}/p.parquet: no 'prompt' column (columns: text, label); name it with --prompt-key"),
    (lambda d: parquet(d / "e.parquet", prompt=pa.array([], pa.string())), "prompts: {d}/e.parquet: no prompts (file is empty)"),
    (lambda d: parquet(d / "n.parquet", prompt=["a", None]),
     'prompts: {d}/n.parquet row 2: "prompt" is NoneType, not a string or a list of chat messages'),
    (lambda d: parquet(d / "m.parquet", prompt=[[{"role": "user", "content": "a"}], [{"role": "user"}]]),
     'prompts: {d}/m.parquet row 2: "prompt" message 1 needs a "role" and a "content" string'),
])
def test_bad_parquet_is_one_line_naming_the_file_and_field(tmp_path, make, message):
    source = make(tmp_path)
    with pytest.raises(PromptError) as err:
        load_prompt_rows(source)
    assert str(err.value) == message.format(d=tmp_path)


def test_a_file_that_is_not_parquet_is_one_line(tmp_path):
    (tmp_path / "x.parquet").write_text("prompt\nnot parquet\n")
    with pytest.raises(PromptError) as err:
        load_prompt_rows(str(tmp_path / "x.parquet"))
    assert str(err.value).startswith(f"prompts: {tmp_path}/x.parquet: not a readable parquet file (")
    assert "\n" not in str(err.value)


def test_commands_that_take_strings_refuse_messages_naming_the_row(tmp_path):
    path = parquet(tmp_path / "chat.parquet", prompt=[[{"role": "user", "content": HI}]])
    with pytest.raises(PromptError, match=rf"^prompts: {tmp_path}/chat.parquet row 1: chat messages need a model's chat template"):
        load_prompts(path)


# ---- max_prompt_length -------------------------------------------------------------------------


def prepare(rows, tokenizer, **kw):
    return prepare_prompts(rows, tokenizer, prepend_bos=True, source="data.parquet", **kw)


@pytest.mark.parametrize("side, kept, text", [("left", [398, 683, 956], " movie was really"),
                                              ("right", [0, 718, 398], "This movie")])
def test_truncation_keeps_the_end_or_the_start(tok, side, kept, text):
    """BOS + MOVIE is 5 ids, cut to 3; BOS + HI is 3, within the limit: untouched, a plain string."""
    prompts = prepare([MOVIE, HI], tok, max_prompt_length=3, truncation=side)
    assert list(prompts[0].ids) == kept
    assert prompts[0] == text and isinstance(prompts[0], TokenizedPrompt)  # the text: what the model continues
    assert prompts[1] == HI and type(prompts[1]) is str


def test_truncation_error_is_one_line_naming_the_row_and_its_length(tok):
    with pytest.raises(PromptError) as err:
        prepare([HI, MOVIE, MOVIE + MOVIE], tok, max_prompt_length=3)
    assert str(err.value) == ("prompts: data.parquet row 2: 5 tokens exceed max_prompt_length 3 "
                              "(--truncation left|right cuts it, --filter-overlong-prompts drops it)")


def test_filter_drops_the_overlong_and_says_how_many(tok):
    said = []
    prompts = prepare([MOVIE, HI, "A", MOVIE], tok, max_prompt_length=3, truncation="left",
                      filter_overlong=True, say=said.append)
    assert prompts == [HI, "A"] and all(type(p) is str for p in prompts)
    assert said == ["prompts: dropped 2 of 4 longer than max_prompt_length 3 (--filter-overlong-prompts)"]
    with pytest.raises(PromptError, match="^data.parquet: all 2 prompts are longer than max_prompt_length 2$"):
        prepare([MOVIE, MOVIE], tok, max_prompt_length=2, filter_overlong=True)


def test_no_limit_leaves_strings_as_they_were(tok):
    prompts = prepare([MOVIE, HI], tok)
    assert prompts == [MOVIE, HI] and all(type(p) is str for p in prompts)


# ---- the chat template -------------------------------------------------------------------------


def test_messages_are_rendered_through_the_chat_template(chat_tok):
    expected = chat_tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True)["input_ids"]
    [prompt] = prepare([CHAT], chat_tok)
    assert list(prompt.ids) == expected and prompt == MOVIE  # the text: the last message's content
    assert chat_tok.decode(expected).endswith("<|im_end|>\n<|im_start|>assistant\n")
    cut = prepare([CHAT], chat_tok, max_prompt_length=5, truncation="left")[0]
    assert list(cut.ids) == expected[-5:]  # the assistant's opening is kept


def test_a_string_prompt_with_a_template_is_one_user_turn(chat_tok):
    one_turn = chat_tok.apply_chat_template([{"role": "user", "content": HI}], add_generation_prompt=True, tokenize=True)
    assert prompt_ids(chat_tok, HI, prepend_bos=True) == one_turn["input_ids"]


def test_messages_without_a_template_are_one_line_naming_the_row(tok):
    with pytest.raises(PromptError) as err:
        prepare([HI, CHAT], tok)
    assert str(err.value) == ("prompts: data.parquet row 2: chat messages need a chat template, and the "
                              "model's tokenizer has none (or --chat-template none was given)")


# ---- what the model is given, on either controller ---------------------------------------------


def test_a_tokenized_prompt_reaches_the_model_as_its_ids_and_survives_a_pickle(tiny_random_lm):
    prompt = TokenizedPrompt(MOVIE, [7, 8, 9])
    again = pickle.loads(pickle.dumps([prompt]))[0]  # as Ray sends it to a worker
    assert type(again) is TokenizedPrompt and again == MOVIE and again.ids == (7, 8, 9)
    tiny_random_lm.tokenizer = SimpleNamespace(pad_token_id=3)  # the ids are used as they are: only the pad is asked
    ids, mask = tokenize_prompts(tiny_random_lm, [again, TokenizedPrompt(HI, [5])], prepend_bos=True)
    assert ids.tolist() == [[7, 8, 9], [3, 3, 5]]
    assert mask.tolist() == [[True, True, True], [False, False, True]]


def test_the_driver_prepares_the_prompts_the_model_would(tmp_path, tok):
    """run_prompts without a tokenizer (the single controller's driver) loads args.model's and gives
    the ids the in-process trainer's run_prompts(args, model.tokenizer) gives."""
    path = parquet(tmp_path / "p.parquet", text=[MOVIE, HI])
    args = make_args(prompts=path, prompt_key="text", max_prompt_length=3, truncation="left")
    driver, in_process = run_prompts(args, say=None), run_prompts(args, tok, say=None)
    assert driver == in_process == [" movie was really", HI]
    assert driver[0].ids == in_process[0].ids == (398, 683, 956)


def test_truncation_flags_need_a_limit():
    with pytest.raises(ConfigError, match="^truncation: needs --max-prompt-length N > 0; got truncation 'left' with no limit$"):
        make_args(truncation="left")
    with pytest.raises(ConfigError, match="^max_prompt_length: must be >= 0"):
        make_args(max_prompt_length=-1)


def test_train_refuses_a_bad_parquet_in_one_line_exit_2(tmp_path, capsys):
    path = parquet(tmp_path / "p.parquet", text=[MOVIE])
    assert main(["sentiment", "--prompts", path, "--run-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: prompts: {path}: no 'prompt' column (columns: text); name it with --prompt-key")
    assert main(["sentiment", "--prompts", path, "--prompt-key", "text", "--max-prompt-length", "3",
                 "--run-dir", str(tmp_path / "run2")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: prompts: {path} row 1: 5 tokens exceed max_prompt_length 3 "
        "(--truncation left|right cuts it, --filter-overlong-prompts drops it)")


def test_a_limit_that_leaves_no_room_for_the_completion_is_refused(capsys, tmp_path):
    """The tiny LM's context is 128 tokens: 120 + gen_len 30 do not fit."""
    assert main(["sentiment", "--max-prompt-length", "120", "--run-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: max_prompt_length: 120 with gen_len 30 exceeds the model's context n_ctx=128")
