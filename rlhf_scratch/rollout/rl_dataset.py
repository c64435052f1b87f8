"""Data as verl prepares it (verl/utils/dataset/rl_dataset.py's RLHFDataset, in the package's terms):
a run's prompts read from its source, chat messages rendered through the model's chat template,
and every prompt held to `max_prompt_length` tokens.

    rows       load_prompt_rows(--prompts, --prompt-key)       strings, or lists of chat messages
    ids        prompt_ids(tokenizer, row)                      the tokens the model is given
    too long?  len(ids) > --max-prompt-length
                 --filter-overlong-prompts   dropped (how many is said once)
                 --truncation error          one line naming the row and its length (the default)
                 --truncation left           the last max_prompt_length ids kept (verl: ids[-L:])
                 --truncation right          the first max_prompt_length ids kept (verl: ids[:L])

A prompt whose tokens this module fixed (messages, or truncated) travels as a `TokenizedPrompt`: a
string carrying the ids the model is given (`generation.prompt_tokens` returns them as they are).
The string is what the reward, the logs and samples.md read: for a cut prompt, its kept ids decoded
without special tokens (what the model continued: verl's reward manager decodes the same); for chat
messages, the last message's content (as a string prompt's text is the prompt, not its rendering).
Every other prompt stays the plain string it was, tokenized where it is sampled, as before.

`run_prompts(args)` is the one data object both controllers use: the in-process trainer calls it
with its model's tokenizer (`engine.run_setup.make_prompt_iterator`), the single controller's driver
with the tokenizer alone (loaded only when a prompt needs one: verl's driver holds a tokenizer, not
a model), so the driver's prompts are the workers' prompts, id for id.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from rlhf_scratch.config import PROMPT_PREFIX, TRUNCATIONS, CommonArgs
from rlhf_scratch.rollout.prompts import Messages, PromptError, load_prompt_table, locate


class Prompt(str):
    """A prompt with its row's other columns (`prompts.PromptTable`): the string is its text, `columns`
    what the reward function is given beside each of its completions (`prompt_columns`: TRL passes a
    dataset's columns so; here the arithmetic task's `ground_truth`). A `str`, so every `list[str]` of
    prompts carries it as it is (the PromptIterator, the rollout, a DataProto's non-tensor column, a Ray pickle)."""

    columns: dict[str, Any]

    def __new__(cls, text: str, columns: dict[str, Any] | None = None) -> Prompt:
        prompt = super().__new__(cls, text)
        prompt.columns = dict(columns or {})
        return prompt

    def __reduce__(self):  # pickled with its columns, not as a bare string
        return (Prompt, (str(self), self.columns))


class TokenizedPrompt(Prompt):
    """A prompt whose token ids are fixed: the string is its text (what the reward and the logs
    read), `ids` what the model is given (and, as every Prompt, its row's `columns`)."""

    ids: tuple[int, ...]

    def __new__(cls, text: str, ids: list[int] | tuple[int, ...], columns: dict[str, Any] | None = None) -> TokenizedPrompt:
        prompt = super().__new__(cls, text, columns)
        prompt.ids = tuple(int(i) for i in ids)
        return prompt

    def __reduce__(self):  # pickled as (text, ids, columns), not as a bare string
        return (TokenizedPrompt, (str(self), self.ids, self.columns))


def with_columns(prompt: str, columns: dict[str, Any] | None) -> str:
    """`prompt` carrying `columns` (a `Prompt`), or the plain string when there are none."""
    return Prompt(prompt, columns) if columns else prompt


def prompt_columns(prompts: list[str]) -> dict[str, list[Any]]:
    """The columns every one of `prompts` carries, as TRL gives them to a reward function: one list per
    column, one entry per prompt (`{"ground_truth": ["132", "23", ...]}`). A column some prompt lacks is
    left out; plain strings carry none."""
    names = [dict.fromkeys(getattr(p, "columns", {})) for p in prompts]
    common = [k for k in (names[0] if names else {}) if all(k in n for n in names)]
    return {k: [p.columns[k] for p in prompts] for k in common}


def note(text: str) -> None:
    """A line for the user beside the run's output, as the trainer's notes are written."""
    print(f"note: {text}", file=sys.stderr)


def has_template(tokenizer) -> bool:
    return getattr(tokenizer, "chat_template", None) is not None


def prompt_ids(tokenizer, prompt: str | Messages, prepend_bos: bool) -> list[int]:
    """The ids the model is given for `prompt`, as `generation.prompt_tokens` makes them:

        messages                 tokens(apply_chat_template(messages, add_generation_prompt=True))
        a string, with template  the same, of [{"role": "user", "content": prompt}]
        a string, no template    [BOS if prepend_bos] + tokens(prompt)

    The template's text is tokenized with no special token added: it wrote its own."""
    if isinstance(prompt, str) and not has_template(tokenizer):
        return [tokenizer.bos_token_id] * prepend_bos + tokenizer.encode(prompt, add_special_tokens=False)
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


def truncate(ids: list[int], max_length: int, side: str) -> list[int]:
    """verl's `truncation`: `left` keeps the last `max_length` ids (the end of the prompt, next to
    the completion), `right` the first `max_length`."""
    if side not in ("left", "right"):
        raise ValueError(f"truncation: must be left or right to cut; got {side!r}")
    return ids[-max_length:] if side == "left" else ids[:max_length]


def prepare_prompts(
    rows: list[str | Messages], tokenizer, *, prepend_bos: bool, max_prompt_length: int = 0,
    truncation: str = "error", filter_overlong: bool = False, source: str = "prompts",
    say: Callable[[str], None] | None = note, columns: list[dict[str, Any] | None] | None = None,
) -> list[str]:
    """The prompts the run samples from (see the module docstring); `max_prompt_length` 0: no limit.
    `columns` (one per row, or None) ride on each prompt (`Prompt`), through any cut; a dropped row drops its own.
    An error names the row (1-based, as the source counts it: `prompts.locate`)."""
    if truncation not in TRUNCATIONS:
        raise PromptError(f"truncation: must be one of {', '.join(TRUNCATIONS)}; got {truncation!r}")
    prompts: list[str] = []
    columns = columns or [None] * len(rows)
    for index, (row, cols) in enumerate(zip(rows, columns), start=1):
        if not isinstance(row, str) and not has_template(tokenizer):
            raise PromptError(f"{locate(source, index)}: chat messages need a chat template, and the "
                              f"model's tokenizer has none (or --chat-template none was given)")
        if not max_prompt_length and isinstance(row, str):
            prompts.append(with_columns(row, cols))  # nothing to fix: tokenized where it is sampled, as always
            continue
        ids = prompt_ids(tokenizer, row, prepend_bos)
        if max_prompt_length and len(ids) > max_prompt_length:
            if filter_overlong:
                continue
            if truncation == "error":
                raise PromptError(f"{locate(source, index)}: {len(ids)} tokens exceed max_prompt_length "
                                  f"{max_prompt_length} (--truncation left|right cuts it, --filter-overlong-prompts drops it)")
            kept = truncate(ids, max_prompt_length, truncation)
            prompts.append(TokenizedPrompt(tokenizer.decode(kept, skip_special_tokens=True), kept, cols))
        else:
            prompts.append(with_columns(row, cols) if isinstance(row, str) else TokenizedPrompt(row[-1]["content"], ids, cols))
    dropped = len(rows) - len(prompts)
    if not prompts:
        raise PromptError(f"{source}: all {len(rows)} prompts are longer than max_prompt_length {max_prompt_length}")
    if dropped and say is not None:
        say(f"prompts: dropped {dropped} of {len(rows)} longer than max_prompt_length {max_prompt_length} "
            f"(--filter-overlong-prompts)")
    return prompts


def run_prompts(args: CommonArgs, tokenizer=None, say: Callable[[str], None] | None = note, source: str | None = None) -> list[str]:
    """The run's prompts — of `source`, by default `args.prompts` (the validation's: `args.val_prompts`) —
    prepared (`prepare_prompts`) with `tokenizer` — the model's — or, when none is given and a prompt
    needs one (messages, or --max-prompt-length), the tokenizer of args.model with --chat-template
    applied. Each carries its row's other columns (`Prompt`). In source order; `PromptIterator` shuffles them."""
    source = args.prompts if source is None else source
    table = load_prompt_table(source, prefix=args.prefix, seed=args.seed, key=args.prompt_key)
    rows, columns = table.rows, table.columns or [None] * len(table.rows)
    if not args.max_prompt_length and all(isinstance(row, str) for row in rows):
        return [with_columns(row, cols) for row, cols in zip(rows, columns)]  # nothing to prepare, no tokenizer loaded
    if tokenizer is None:
        from rlhf_scratch.models.loading import load_tokenizer

        tokenizer = load_tokenizer(args.model)
        if args.chat_template == "none":  # as generation.use_chat_template does to the model's
            tokenizer.chat_template = None
    named = "prefix" if source == PROMPT_PREFIX else source
    return prepare_prompts(rows, tokenizer, prepend_bos=args.prepend_bos, max_prompt_length=args.max_prompt_length,
                           truncation=args.truncation, filter_overlong=args.filter_overlong_prompts,
                           source=named, say=say, columns=columns)
