"""Where a run's prompts come from (`--prompts`), and the order they are used in.

Sources:
- `prefix`: the blog's single prompt, `--prefix` ("This movie was really"): every sample
  continues the same text;
- `rt`: review openings — the first k words, k ~ U{2..8} (seeded), of each snippet of the
  Rotten Tomatoes TRAIN split the tiny preset was built from, as TRL's classic gpt2-sentiment
  example used IMDB review openings. Never the validation or test split;
- a local `.txt` (one prompt per line; blank lines skipped) or `.jsonl` (a string `prompt` field
  per line) file;
- anything else: a Hugging Face `datasets` dataset id, or a local folder (saved with
  `save_to_disk`, or of data files), with a `prompt` column: train split; a Hub id offline gives
  the same one-line `HubUnreachableError` as a Hub model.

Why shuffle and cycle: a rollout phase takes a batch of prompts. Taking them in file order would
give phases whose prompts are correlated (a file sorted by topic trains on one topic at a time);
sampling with replacement would use some prompts twice before others once. A `PromptIterator`
instead walks a seeded permutation of all prompts and starts a fresh one when it runs out (an
epoch), so every prompt is used equally often, and a resumed run continues exactly where it
stopped (`state_dict` is two integers: the permutation is recomputed from `(seed, epoch)`).

Every bad source is one `PromptError` line naming the file and its 1-based line (or the dataset
and its row), e.g. `prompts: data/p.jsonl line 3: no "prompt" field`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

from rlhf_scratch.config import PROMPT_PREFIX

RT = "rt"
FILE_SUFFIXES = (".txt", ".jsonl")
OPENING_WORDS = (2, 8)  # an `rt` prompt is the first k words of a snippet, k uniform in this range
SAVED_DATASET_FILES = ("dataset_info.json", "state.json", "dataset_dict.json")  # what save_to_disk writes


class PromptError(ValueError):
    """A bad prompt source: one line naming the file (and line) or the dataset (and row)."""


def review_openings(seed: int) -> list[str]:
    """The first k words of each TRAIN-split snippet, k ~ U{2..8} from `random.Random(seed)`,
    capped at the snippet's length; snippets of fewer than 2 words are dropped, and duplicate
    openings kept once (at their first occurrence)."""
    from rlhf_scratch.rollout.corpus import CorpusUnavailableError, get_splits

    try:
        train = get_splits()["train"]
    except CorpusUnavailableError as e:
        raise PromptError(f"prompts: rt: {e}") from None
    rng = random.Random(seed)
    openings: dict[str, None] = {}  # an ordered set
    for review in train:
        words = review.text.split()
        k = rng.randint(*OPENING_WORDS)  # drawn for every snippet, kept or not: published runs reproduce
        if len(words) >= OPENING_WORDS[0]:
            openings.setdefault(" ".join(words[:k]), None)
    return list(openings)


def _nonblank_lines(path: Path) -> list[tuple[int, str]]:
    """(1-based line number, text) of every line of `path` that is not blank."""
    if path.is_dir():
        raise PromptError(f"prompts: {path}: is a folder, not a {path.suffix} file")
    if not path.is_file():
        raise PromptError(f"prompts: {path}: not found")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise PromptError(f"prompts: {path}: unreadable ({type(e).__name__})") from None
    return [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]


def prompts_from_txt(path: Path) -> list[str]:
    """One prompt per line; blank lines skipped, surrounding whitespace stripped."""
    return [line.strip() for _, line in _nonblank_lines(path)]


def prompts_from_jsonl(path: Path) -> list[str]:
    """One JSON object per non-blank line, each with a string `prompt` field (other fields ignored)."""
    prompts = []
    for number, line in _nonblank_lines(path):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise PromptError(f"prompts: {path} line {number}: not valid JSON ({e.msg})") from None
        if not isinstance(record, dict) or "prompt" not in record:
            raise PromptError(f'prompts: {path} line {number}: no "prompt" field')
        if not isinstance(record["prompt"], str):
            kind = type(record["prompt"]).__name__
            raise PromptError(f'prompts: {path} line {number}: "prompt" is {kind}, not a string')
        prompts.append(record["prompt"])
    return prompts


def prompts_from_dataset(name: str) -> list[str]:
    """The `prompt` column of a `datasets` dataset's train split: a folder written by
    `save_to_disk` (`load_from_disk`), else a Hub id or a folder of data files (`load_dataset`)."""
    import datasets

    from rlhf_scratch.models.loading import hub_errors, is_offline_error

    path = Path(name).expanduser()
    if path.is_file():
        raise PromptError(f"prompts: {name}: a prompt file must be .txt or .jsonl")
    if not path.exists() and name.startswith(("/", "./", "../", "~")):
        raise PromptError(f"prompts: {name}: no such file or folder")
    with hub_errors(name):  # offline and not cached -> HubUnreachableError, at once
        try:
            if any((path / f).is_file() for f in SAVED_DATASET_FILES):
                data = datasets.load_from_disk(str(path))
                if isinstance(data, datasets.DatasetDict):
                    if "train" not in data:
                        raise PromptError(f"prompts: {name}: no 'train' split (splits: {', '.join(data)})")
                    data = data["train"]
            else:
                data = datasets.load_dataset(name, split="train")
        except Exception as e:  # noqa: BLE001 - not found, no train split, no data files, datasets' own failures
            if isinstance(e, PromptError) or is_offline_error(e):
                raise  # (the Hub's absence is HubUnreachableError's job)
            first_line = (str(e).strip().splitlines() or [""])[0]
            raise PromptError(f"prompts: {name}: {type(e).__name__}: {first_line}".rstrip(": ")) from None
    if "prompt" not in data.column_names:
        raise PromptError(f"prompts: {name}: no 'prompt' column (columns: {', '.join(data.column_names)})")
    prompts = list(data["prompt"])
    for row, prompt in enumerate(prompts, start=1):
        if not isinstance(prompt, str):
            raise PromptError(f"prompts: {name} row {row}: prompt is {type(prompt).__name__}, not a string")
    return prompts


def load_prompts(source: str, prefix: str = "This movie was really", seed: int = 0) -> list[str]:
    """The prompts of `source` (see the module docstring), in file/dataset order (not shuffled)."""
    suffix = Path(source).suffix.lower()
    if source == PROMPT_PREFIX:
        return [prefix]
    if source == RT:
        prompts = review_openings(seed)
    elif suffix == ".txt":
        prompts = prompts_from_txt(Path(source).expanduser())
    elif suffix == ".jsonl":
        prompts = prompts_from_jsonl(Path(source).expanduser())
    else:
        prompts = prompts_from_dataset(source)
    if not prompts:
        what = "file" if suffix in FILE_SUFFIXES else "dataset"
        raise PromptError(f"prompts: {source}: no prompts ({what} is empty)")
    return prompts


def _where(source: str, index: int) -> str:
    """How an error names the `index`-th (1-based) prompt of `source`: the `prefix` field, a
    file's line number (blank lines count, as an editor shows them), or a dataset's row."""
    if source == PROMPT_PREFIX:
        return "prefix"
    if Path(source).suffix.lower() in FILE_SUFFIXES:
        try:
            return f"prompts: {source} line {_nonblank_lines(Path(source).expanduser())[index - 1][0]}"
        except (PromptError, IndexError):  # the file changed since it was read
            return f"prompts: {source} prompt {index}"
    return f"prompts: {source} row {index}"


def check_prompt_lengths(
    prompts: list[str], count_tokens: Callable[[str], int], n_ctx: int, gen_len: int, source: str
) -> None:
    """Every prompt needs ≥ 1 token (something to continue) and must leave room for `gen_len`
    new ones: tokens + gen_len ≤ n_ctx. The error names the first bad prompt (see `_where`)."""
    for index, prompt in enumerate(prompts, start=1):
        n = count_tokens(prompt)
        if n == 0:
            raise PromptError(f"{_where(source, index)}: an empty prompt has no token to continue (use --prepend-bos)")
        if n + gen_len > n_ctx:
            raise PromptError(
                f"{_where(source, index)}: {n} tokens with gen_len {gen_len} exceed the model's context n_ctx={n_ctx}")


class PromptIterator:
    """Prompts shuffled with the run's seed and cycled epoch by epoch, each epoch a fresh
    permutation drawn from `random.Random(f"{seed}-{epoch}")`: reproducible, and resumable from
    (epoch, position) alone. A batch may run over from one epoch into the next."""

    def __init__(self, prompts: list[str], seed: int):
        if not prompts:
            raise PromptError("prompts: none to iterate over")
        self.prompts, self.seed = list(prompts), seed
        self.epoch, self.position = 0, 0  # position: prompts of this epoch already handed out
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(len(self.prompts)))
        random.Random(f"{self.seed}-{epoch}").shuffle(order)
        return order

    def next_batch(self, n: int) -> list[str]:
        """The next `n` prompts (with one prompt: `[p] * n`)."""
        batch: list[str] = []
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
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position <= len(self.prompts):
            raise PromptError(f"prompts: saved position {position} (epoch {epoch}) is outside the "
                              f"{len(self.prompts)} prompts of this source; were they changed since the run started?")
        self.epoch, self.position = epoch, position
        self._order = self._permutation(epoch)

    def __len__(self) -> int:
        return len(self.prompts)
