"""Prompt sources (prefix, rt, .txt, .jsonl, datasets) and the shuffled, cycled, resumable order."""

import pytest

from rlhf_scratch.loading import HubUnreachableError
from rlhf_scratch.prompts import PromptError, PromptIterator, check_prompt_lengths, load_prompts


def test_prefix_txt_and_jsonl(tmp_path):
    assert load_prompts("prefix", prefix="Hello there") == ["Hello there"]
    txt = tmp_path / "p.txt"
    txt.write_text("First one\n\n  Second  \n")
    assert load_prompts(str(txt)) == ["First one", "Second"]
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "A film"}\n\n{"prompt": "The plot", "id": 2}\n')
    assert load_prompts(str(jsonl)) == ["A film", "The plot"]


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("empty.txt", "\n\n", "prompts: {path}: no prompts (file is empty)"),
        ("bad.jsonl", '{"prompt": "ok"}\n{oops\n', "prompts: {path} line 2: not valid JSON ("),
        ("nofield.jsonl", '{"prompt": "a"}\n{"prompt": "b"}\n{"text": "c"}\n', 'prompts: {path} line 3: no "prompt" field'),
        ("notstr.jsonl", '{"prompt": 7}\n', 'prompts: {path} line 1: "prompt" is int, not a string'),
    ],
)
def test_bad_files_are_one_line_naming_file_and_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(PromptError) as err:
        load_prompts(str(path))
    assert str(err.value).startswith(message.format(path=path)) and "\n" not in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(PromptError, match=r"^prompts: .*nope\.txt: not found$"):
        load_prompts(str(tmp_path / "nope.txt"))


def test_too_long_prompt_names_its_line_and_prefix_names_the_field():
    words = len  # a fake tokenizer: one token per character
    check_prompt_lengths(["abc", "de"], words, n_ctx=10, gen_len=7, source="p.txt")  # 3 + 7 = 10 fits
    with pytest.raises(PromptError, match=r"^prompts: p\.txt line 2: 5 tokens with gen_len 7 exceed the model's context n_ctx=10$"):
        check_prompt_lengths(["abc", "defgh"], words, n_ctx=10, gen_len=7, source="p.txt")
    with pytest.raises(PromptError, match=r"^prefix: 4 tokens with gen_len 7"):
        check_prompt_lengths(["abcd"], words, n_ctx=10, gen_len=7, source="prefix")
    with pytest.raises(PromptError, match=r"^prompts: p\.txt line 1: an empty prompt has no token"):
        check_prompt_lengths([""], words, n_ctx=10, gen_len=7, source="p.txt")


def test_review_openings_come_from_the_train_split():
    from rlhf_scratch.tiny_preset.corpus import get_splits

    prompts = load_prompts("rt", seed=3)
    assert prompts == load_prompts("rt", seed=3), "seeded"
    assert all(2 <= len(p.split()) <= 8 for p in prompts)
    train = {" ".join(r.text.split()[:k]) for r in get_splits()["train"] for k in range(2, 9)}
    assert set(prompts) <= train, "every opening is a word-prefix of a train snippet"
    lengths = {len(p.split()) for p in prompts}
    assert lengths == set(range(2, 9)), "k is drawn from 2..8"


def test_iterator_visits_every_prompt_once_per_epoch_and_reshuffles():
    prompts = [f"p{i}" for i in range(7)]
    it = PromptIterator(prompts, seed=1)
    first, second = it.next_batch(7), it.next_batch(7)
    assert sorted(first) == sorted(second) == sorted(prompts)
    assert first != second, "each epoch is a fresh permutation"
    assert PromptIterator(prompts, seed=2).next_batch(7) != PromptIterator(prompts, seed=1).next_batch(7)
    assert PromptIterator(["only"], seed=0).next_batch(3) == ["only"] * 3


def test_iterator_resumes_exactly():
    prompts = [f"p{i}" for i in range(5)]
    straight = PromptIterator(prompts, seed=4)
    head = [straight.next_batch(3) for _ in range(3)]  # crosses an epoch boundary
    tail = [straight.next_batch(3) for _ in range(3)]
    again = PromptIterator(prompts, seed=4)
    assert [again.next_batch(3) for _ in range(3)] == head
    resumed = PromptIterator(prompts, seed=4)
    resumed.load_state_dict(again.state_dict())
    assert [resumed.next_batch(3) for _ in range(3)] == tail


def test_datasets_folder_and_missing_column(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"prompt": ["x y", "z"]}).save_to_disk(str(tmp_path / "good"))
    assert load_prompts(str(tmp_path / "good")) == ["x y", "z"]
    datasets.Dataset.from_dict({"text": ["x"]}).save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(PromptError, match=r"no 'prompt' column \(columns: text\)$"):
        load_prompts(str(tmp_path / "bad"))


def test_hub_dataset_offline_is_the_one_line_hub_error():
    with pytest.raises(HubUnreachableError, match="from the Hugging Face Hub"):
        load_prompts("stanfordnlp/imdb")
