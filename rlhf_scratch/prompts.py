"""Where a run's prompts come from (`--prompts`), and the order they are used in.

Sources:
- `prefix`: the blog's single prompt, `--prefix` ("This movie was really"): every sample
  continues the same text;
- `rt`: review openings — the first 2–8 words (seeded) of each snippet of the Rotten Tomatoes
  TRAIN split the tiny preset was built from, as TRL's classic gpt2-sentiment example used IMDB
  review openings. Never the validation or test split;
- a local `.txt` (one prompt per line; blank lines skipped) or `.jsonl` (a string `prompt` field
  per line) file;
- anything else: a Hugging Face `datasets` dataset id or folder with a `prompt` column (the Hub
  when online; offline, the same one-line error as a Hub model).

A `PromptIterator` shuffles the prompts with the run's seed and cycles through them epoch by
epoch, each epoch a fresh permutation, so every prompt is used equally often and a resumed run
continues exactly where it stopped (`state_dict`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

from rlhf_scratch.config import PROMPT_PREFIX

RT = "rt"


class PromptError(ValueError):
    """A bad prompt source: one line naming the file (and line) or the dataset."""


def review_openings(seed: int) -> list[str]:
    """The first k words of each train-split snippet, k ~ U{2..8} from `random.Random(seed)`;
    snippets of fewer than 2 words are dropped, duplicates kept once (first occurrence)."""
    from rlhf_scratch.tiny_preset.corpus import CorpusUnavailableError, get_splits

    try:
        train = get_splits()["train"]
    except CorpusUnavailableError as e:
        raise PromptError(f"prompts: rt: {e}") from None
    rng = random.Random(seed)
    openings: dict[str, None] = {}
    for review in train:
        words = review.text.split()
        k = rng.randint(2, 8)
        if len(words) >= 2:
            openings.setdefault(" ".join(words[:k]), None)
    return list(openings)


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise PromptError(f"prompts: {path}: not found")
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise PromptError(f"prompts: {path}: unreadable ({type(e).__name__})") from None


def prompts_from_txt(path: Path) -> list[str]:
    """One prompt per line; blank lines skipped, surrounding whitespace stripped."""
    return [line.strip() for line in _read_lines(path) if line.strip()]


def prompts_from_jsonl(path: Path) -> list[str]:
    """One JSON object per non-blank line, each with a string `prompt` field."""
    prompts = []
    for number, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise PromptError(f"prompts: {path} line {number}: not valid JSON ({e.msg})") from None
        if not isinstance(record, dict) or "prompt" not in record:
            raise PromptError(f'prompts: {path} line {number}: no "prompt" field')
        if not isinstance(record["prompt"], str):
            raise PromptError(f'prompts: {path} line {number}: "prompt" is {type(record["prompt"]).__name__}, not a string')
        prompts.append(record["prompt"])
    return prompts


def prompts_from_dataset(name: str) -> list[str]:
    """The `prompt` column of a `datasets` dataset: a folder saved with `save_to_disk`, or an id /
    data folder for `load_dataset` (train split)."""
    import datasets

    from rlhf_scratch.loading import _hub_errors

    path = Path(name).expanduser()
    with _hub_errors(name):
        try:
            if (path / "dataset_info.json").is_file() or (path / "state.json").is_file():
                data = datasets.load_from_disk(str(path))
                data = data["train"] if isinstance(data, datasets.DatasetDict) else data
            else:
                data = datasets.load_dataset(name, split="train")
        except FileNotFoundError as e:
            if not path.exists() and "/" not in name:
                raise PromptError(f"prompts: {name}: no such file, folder or dataset") from None
            raise PromptError(f"prompts: {name}: {str(e).splitlines()[0]}") from None
    if "prompt" not in data.column_names:
        raise PromptError(f"prompts: {name}: no 'prompt' column (columns: {', '.join(data.column_names)})")
    return [str(p) for p in data["prompt"]]


def load_prompts(source: str, prefix: str = "This movie was really", seed: int = 0) -> list[str]:
    """The prompts of `source` (see the module docstring), in file/dataset order (not shuffled)."""
    if source == PROMPT_PREFIX:
        prompts = [prefix]
    elif source == RT:
        prompts = review_openings(seed)
    elif source.endswith(".txt"):
        prompts = prompts_from_txt(Path(source))
    elif source.endswith(".jsonl"):
        prompts = prompts_from_jsonl(Path(source))
    else:
        prompts = prompts_from_dataset(source)
    if not prompts:
        raise PromptError(f"prompts: {source}: no prompts (file is empty)")
    return prompts


def check_prompt_lengths(
    prompts: list[str], count_tokens: Callable[[str], int], n_ctx: int, gen_len: int, source: str
) -> None:
    """Every prompt must have ≥ 1 token and leave room for `gen_len` new ones in the context.

    The error names the 1-based line (item) of the first bad prompt, or the `prefix` field."""
    for number, prompt in enumerate(prompts, start=1):
        n = count_tokens(prompt)
        where = "prefix" if source == PROMPT_PREFIX else f"prompts: {source} line {number}"
        if n == 0:
            raise PromptError(f"{where}: an empty prompt has no token to continue (use --prepend-bos)")
        if n + gen_len > n_ctx:
            raise PromptError(f"{where}: {n} tokens with gen_len {gen_len} exceed the model's context n_ctx={n_ctx}")


class PromptIterator:
    """Prompts shuffled with the run's seed and cycled epoch by epoch (each a fresh permutation)."""

    def __init__(self, prompts: list[str], seed: int):
        self.prompts, self.seed = list(prompts), seed
        self.epoch, self.position = 0, 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(len(self.prompts)))
        random.Random(f"{self.seed}-{epoch}").shuffle(order)
        return order

    def next_batch(self, n: int) -> list[str]:
        """The next `n` prompts; a batch may run over into the next epoch."""
        batch = []
        while len(batch) < n:
            if self.position == len(self.prompts):
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            take = min(n - len(batch), len(self.prompts) - self.position)
            batch += [self.prompts[i] for i in self._order[self.position : self.position + take]]
            self.position += take
        return batch

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self._order = self._permutation(self.epoch)

    def __len__(self) -> int:
        return len(self.prompts)
