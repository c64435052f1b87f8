"""Where a run's prompts come from (`--prompts`), and the order they are used in.

Sources:
- `prefix`: the blog's single prompt, `--prefix` ("This movie was really"): every sample
  continues the same text;
- `rt`: review openings — the first k words, k ~ U{2..8} (seeded), of each snippet of the
  Rotten Tomatoes TRAIN split the tiny preset was built from, as TRL's classic gpt2-sentiment
  example used IMDB review openings. Never the validation or test split;
- a local `.txt` (one prompt per line; blank lines skipped) or `.jsonl` (a `prompt` field per
  line) file;
- a local `.parquet` file (verl's data files), read with pyarrow: its `prompt` column;
- anything else: a Hugging Face `datasets` dataset id, or a local folder (saved with
  `save_to_disk`, or of data files), with a `prompt` column: train split; a Hub id offline gives
  the same one-line `HubUnreachableError` as a Hub model.

The column (or field) is `--prompt-key` (verl's `data.prompt_key`, default `prompt`). A prompt is a
string, or, in the .jsonl, .parquet and dataset sources, verl's chat format: a list of
{"role", "content"} messages (`load_prompt_rows`; `rl_dataset.run_prompts` renders them through the
model's chat template). `load_prompts` gives strings only, for the commands that take no messages.

Why shuffle and cycle: a rollout phase takes a batch of prompts. Taking them in file order would
give phases whose prompts are correlated (a file sorted by topic trains on one topic at a time);
sampling with replacement would use some prompts twice before others once. A `PromptIterator`
instead walks a seeded permutation of all prompts and starts a fresh one when it runs out (an
epoch), so every prompt is used equally often, and a resumed run continues exactly where it
stopped (`state_dict` is two integers: the permutation is recomputed from `(seed, epoch)`).

Every bad source is one `PromptError` line naming the file and its 1-based line (or the dataset
and its row), e.g. `prompts: data/p.jsonl line 3: no "prompt" field`, or its missing column with
the columns it has.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlhf_scratch.config import PROMPT_PREFIX, registry

RT = "rt"
FILE_SUFFIXES = (".txt", ".jsonl")  # sources named by line
PARQUET = ".parquet"
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


Messages = list[dict[str, str]]
"""verl's chat format: [{"role": "system"|"user"|..., "content": "..."}, ...]."""


def _prompt_value(value: object, place: str, key: str) -> str | Messages:
    """`value` as a prompt: a string, or a non-empty list of {"role", "content"} string messages
    (extra keys dropped); anything else is one PromptError line starting with `place`."""
    if isinstance(value, str):
        return value
    if not isinstance(value, (list, tuple)) or not value:
        kind = "an empty list" if isinstance(value, (list, tuple)) else type(value).__name__
        raise PromptError(f'{place}: "{key}" is {kind}, not a string or a list of chat messages')
    for number, message in enumerate(value, start=1):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str) and isinstance(message.get("content"), str)):
            raise PromptError(f'{place}: "{key}" message {number} needs a "role" and a "content" string')
    return [{"role": m["role"], "content": m["content"]} for m in value]


@dataclass
class PromptTable:
    """A source's prompts and, row for row, the row's other columns: what TRL passes a reward
    function beside the completions (`reward_kwargs`), verl's non-tensor fields of a row
    (`data_source`, `reward_model`, `extra_info`)."""

    rows: list[str | Messages]
    columns: list[dict[str, Any]] | None = None
    """One dict per row (None: the source has no other column: prefix, rt, .txt)."""


def reward_columns(record: dict[str, Any], key: str) -> dict[str, Any]:
    """A row's columns other than its prompt, as a reward function receives them: every one as it
    is (TRL passes a dataset's columns so), and verl's `reward_model.ground_truth` also as
    `ground_truth` when the row has no column of that name (verl's reward manager reads it there)."""
    columns = {k: v for k, v in record.items() if k != key}
    judged = columns.get("reward_model")
    if isinstance(judged, dict) and "ground_truth" in judged and "ground_truth" not in columns:
        columns["ground_truth"] = judged["ground_truth"]
    return columns


GSM8K_ANSWER = "####"
"""GSM8K's answer column ends in `#### 72`: the final answer after the marker (verl's gsm8k.py extracts it so)."""


def is_gsm8k(columns: list[str], key: str) -> bool:
    """A GSM8K-style source: no `key` column (the default one), but `question` and `answer`."""
    return key == "prompt" and key not in columns and "question" in columns and "answer" in columns


def gsm8k_record(record: dict[str, Any], place: str) -> dict[str, Any]:
    """A GSM8K row as the package reads a row: `prompt` the question, `ground_truth` the answer after
    `####` with its thousands commas removed (verl's examples/data_preprocess/gsm8k.py `extract_solution`)."""
    question, answer = record.get("question"), record.get("answer")
    if not isinstance(question, str) or not isinstance(answer, str) or GSM8K_ANSWER not in answer:
        raise PromptError(f'{place}: a GSM8K row needs a "question" string and an "answer" string ending in "#### ANSWER"')
    truth = answer.rsplit(GSM8K_ANSWER, 1)[1].strip().replace(",", "")
    if not truth:
        raise PromptError(f'{place}: the "answer" has nothing after "####"')
    return {**record, "prompt": question, "ground_truth": truth}


def table_from_records(records: list[dict[str, Any]], key: str, place: Callable[[int], str]) -> PromptTable:
    """Rows (dicts) as a PromptTable: each row's `key` its prompt (`_prompt_value`), the rest its
    columns (`reward_columns`); a GSM8K-style source (`is_gsm8k`) read as question / `#### answer`.
    `place(i)` names the i-th (0-based) row in an error."""
    if records and is_gsm8k(list(records[0]), key):
        records = [gsm8k_record(r, place(i)) for i, r in enumerate(records)]
    rows, columns = [], []
    for i, record in enumerate(records):
        if key not in record:
            raise PromptError(f'{place(i)}: no "{key}" field')
        rows.append(_prompt_value(record[key], place(i), key))
        columns.append(reward_columns(record, key))
    return PromptTable(rows, columns)


def prompts_from_jsonl(path: Path, key: str = "prompt") -> list[str | Messages]:
    """One JSON object per non-blank line, each with a `key` field (other fields ignored)."""
    return table_from_jsonl(path, key).rows


def table_from_jsonl(path: Path, key: str = "prompt") -> PromptTable:
    """`prompts_from_jsonl` with each line's other fields (`PromptTable`)."""
    records, places = [], []
    for number, line in _nonblank_lines(path):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise PromptError(f"prompts: {path} line {number}: not valid JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise PromptError(f'prompts: {path} line {number}: no "{key}" field')
        records.append(record)
        places.append(f"prompts: {path} line {number}")
    return table_from_records(records, key, places.__getitem__)


def prompts_from_parquet(path: Path, key: str = "prompt") -> list[str | Messages]:
    """The `key` column of a parquet file (verl's `data.train_files`), read with pyarrow: strings
    or lists of messages; the error names the 1-based row."""
    return table_from_parquet(path, key).rows


def table_from_parquet(path: Path, key: str = "prompt") -> PromptTable:
    """`prompts_from_parquet` with each row's other columns (`PromptTable`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.is_dir():
        raise PromptError(f"prompts: {path}: is a folder, not a .parquet file")
    if not path.is_file():
        raise PromptError(f"prompts: {path}: not found")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        first_line = (str(e).strip().splitlines() or [""])[0]
        raise PromptError(f"prompts: {path}: not a readable parquet file ({first_line})") from None
    if key not in table.column_names and not is_gsm8k(table.column_names, key):
        raise PromptError(f"prompts: {path}: no '{key}' column (columns: {', '.join(table.column_names)}); "
                          f"name it with --prompt-key")
    return table_from_records(table.to_pylist(), key, lambda i: f"prompts: {path} row {i + 1}")


def prompts_from_dataset(name: str, key: str = "prompt") -> list[str | Messages]:
    """The `key` column of a `datasets` dataset's train split: a folder written by `save_to_disk`
    (`load_from_disk`), else a Hub id or a folder of data files (`load_dataset`)."""
    return table_from_dataset(name, key).rows


def table_from_dataset(name: str, key: str = "prompt") -> PromptTable:
    """`prompts_from_dataset` with each row's other columns (`PromptTable`)."""
    import datasets

    from rlhf_scratch.models.loading import hub_errors, is_offline_error

    path = Path(name).expanduser()
    if path.is_file():
        raise PromptError(f"prompts: {name}: a prompt file must be .txt, .jsonl or .parquet")
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
    if key not in data.column_names and not is_gsm8k(data.column_names, key):
        raise PromptError(f"prompts: {name}: no '{key}' column (columns: {', '.join(data.column_names)})")
    return table_from_records(data.to_list(), key, lambda i: f"prompts: {name} row {i + 1}")


def load_prompt_rows(source: str, prefix: str = "This movie was really", seed: int = 0,
                     key: str = "prompt") -> list[str | Messages]:
    """The prompts of `source` (see the module docstring), in file/dataset order (not shuffled):
    strings, and lists of chat messages where the source has them."""
    return load_prompt_table(source, prefix, seed, key).rows


def load_prompt_table(source: str, prefix: str = "This movie was really", seed: int = 0,
                      key: str = "prompt") -> PromptTable:
    """`load_prompt_rows` with each row's other columns: what a reward function is given beside its
    completion (`PromptTable`); none for the prefix, `rt` and .txt sources."""
    suffix = Path(source).suffix.lower()
    if source == PROMPT_PREFIX:
        return PromptTable([prefix])
    task, _, split = source.partition(":")
    if source == RT:
        table = PromptTable(list(review_openings(seed)))
    elif suffix == ".txt":
        table = PromptTable(list(prompts_from_txt(Path(source).expanduser())))
    elif suffix == ".jsonl":
        table = table_from_jsonl(Path(source).expanduser(), key)
    elif suffix == PARQUET:
        table = table_from_parquet(Path(source).expanduser(), key)
    elif task in registry.problem_sources():
        table = task_problems(task, split or "train", key)
    else:
        table = table_from_dataset(source, key)
    if not table.rows:
        what = "file" if suffix in (*FILE_SUFFIXES, PARQUET) else "dataset"
        raise PromptError(f"prompts: {source}: no prompts ({what} is empty)")
    return table


def task_problems(task: str, split: str, key: str = "prompt") -> PromptTable:
    """A task's own problems (`--prompts TASK` its train split, `--prompts TASK:test` its test split):
    the rows its registry entry's `data` makes, in verl's columns, as `rlhf data TASK` writes them. An
    environment with problems of its own (`--prompts calculator`) is read alike."""
    entry = registry.problem_sources()[task]
    if split not in entry.splits:
        kind = "task" if isinstance(entry, registry.Task) else "environment"
        raise PromptError(f"prompts: {task}:{split}: {kind} {task} has the splits {', '.join(entry.splits)}")
    records = registry.resolve(entry.data)(split)
    return table_from_records(records, key, lambda i: f"prompts: {task}:{split} row {i + 1}")


def load_prompts(source: str, prefix: str = "This movie was really", seed: int = 0, key: str = "prompt") -> list[str]:
    """The prompts of `source` as strings (`load_prompt_rows`); a row of chat messages is one
    PromptError line (they need a model's chat template: `rl_dataset.run_prompts`, as train does)."""
    prompts = load_prompt_rows(source, prefix, seed, key)
    for index, prompt in enumerate(prompts, start=1):
        if not isinstance(prompt, str):
            raise PromptError(f"{locate(source, index)}: chat messages need a model's chat template "
                              f"(python -m rlhf_scratch.train renders them); this command takes strings")
    return prompts  # type: ignore[return-value]


def locate(source: str, index: int) -> str:
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
    new ones: tokens + gen_len ≤ n_ctx. The error names the first bad prompt (see `locate`)."""
    for index, prompt in enumerate(prompts, start=1):
        n = count_tokens(prompt)
        if n == 0:
            raise PromptError(f"{locate(source, index)}: an empty prompt has no token to continue (use --prepend-bos)")
        if n + gen_len > n_ctx:
            raise PromptError(
                f"{locate(source, index)}: {n} tokens with gen_len {gen_len} exceed the model's context n_ctx={n_ctx}")


def check_context(lm, prompts: list[str], gen_len: int, source: str) -> None:
    """Room in `lm`'s context for `gen_len` new tokens after every prompt (counted as `lm.to_tokens`
    gives them, BOS included), said before anything is sampled: a PromptError of one line starting
    `gen_len:` (it leaves no room for any prompt, or the first prompt it overflows, `check_prompt_lengths`)."""
    n_ctx = lm.cfg.n_ctx
    if gen_len >= n_ctx:
        raise PromptError(f"gen_len: {gen_len} leaves no room for a prompt in the model's context n_ctx={n_ctx}")
    try:
        check_prompt_lengths(prompts, lambda p: lm.to_tokens(p, truncate=False).shape[1], n_ctx, gen_len, source)
    except PromptError as e:
        raise PromptError(f"gen_len: {e}") from None


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
