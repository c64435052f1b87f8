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

from rlhf_scratch.config import PROMPT_PREFIX, TRUNCATIONS, CommonArgs
from rlhf_scratch.rollout.prompts import Messages, PromptError, load_prompt_rows, locate


class TokenizedPrompt(str):
    """A prompt whose token ids are fixed: the string is its text (what the reward and the logs
    read), `ids` what the model is given. A `str`, so every `list[str]` of prompts carries it as it
    is (the rollout, a DataProto's non-tensor column, a Ray pickle)."""

    ids: tuple[int, ...]

    def __new__(cls, text: str, ids: list[int] | tuple[int, ...]) -> TokenizedPrompt:
        prompt = super().__new__(cls, text)
        prompt.ids = tuple(int(i) for i in ids)
        return prompt

    def __reduce__(self):  # pickled as (text, ids), not as a bare string
        return (TokenizedPrompt, (str(self), self.ids))


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
    say: Callable[[str], None] | None = note,
) -> list[str]:
    """The prompts the run samples from (see the module docstring); `max_prompt_length` 0: no limit.
    An error names the row (1-based, as the source counts it: `prompts.locate`)."""
    if truncation not in TRUNCATIONS:
        raise PromptError(f"truncation: must be one of {', '.join(TRUNCATIONS)}; got {truncation!r}")
    prompts: list[str] = []
    for index, row in enumerate(rows, start=1):
        if not isinstance(row, str) and not has_template(tokenizer):
            raise PromptError(f"{locate(source, index)}: chat messages need a chat template, and the "
                              f"model's tokenizer has none (or --chat-template none was given)")
        if not max_prompt_length and isinstance(row, str):
            prompts.append(row)  # nothing to fix: tokenized where it is sampled, as always
            continue
        ids = prompt_ids(tokenizer, row, prepend_bos)
        if max_prompt_length and len(ids) > max_prompt_length:
            if filter_overlong:
                continue
            if truncation == "error":
                raise PromptError(f"{locate(source, index)}: {len(ids)} tokens exceed max_prompt_length "
                                  f"{max_prompt_length} (--truncation left|right cuts it, --filter-overlong-prompts drops it)")
            kept = truncate(ids, max_prompt_length, truncation)
            prompts.append(TokenizedPrompt(tokenizer.decode(kept, skip_special_tokens=True), kept))
        else:
            prompts.append(row if isinstance(row, str) else TokenizedPrompt(row[-1]["content"], ids))
    dropped = len(rows) - len(prompts)
    if not prompts:
        raise PromptError(f"{source}: all {len(rows)} prompts are longer than max_prompt_length {max_prompt_length}")
    if dropped and say is not None:
        say(f"prompts: dropped {dropped} of {len(rows)} longer than max_prompt_length {max_prompt_length} "
            f"(--filter-overlong-prompts)")
    return prompts


def run_prompts(args: CommonArgs, tokenizer=None, say: Callable[[str], None] | None = note) -> list[str]:
    """The run's prompts, prepared (`prepare_prompts`) with `tokenizer` — the model's — or, when none
    is given and a prompt needs one (messages, or --max-prompt-length), the tokenizer of args.model
    with --chat-template applied. In source order; `PromptIterator` shuffles them."""
    rows = load_prompt_rows(args.prompts, prefix=args.prefix, seed=args.seed, key=args.prompt_key)
    if not args.max_prompt_length and all(isinstance(row, str) for row in rows):
        return rows  # type: ignore[return-value]  (strings: nothing to prepare, no tokenizer loaded)
    if tokenizer is None:
        from rlhf_scratch.models.loading import load_tokenizer

        tokenizer = load_tokenizer(args.model)
        if args.chat_template == "none":  # as generation.use_chat_template does to the model's
            tokenizer.chat_template = None
    source = "prefix" if args.prompts == PROMPT_PREFIX else args.prompts
    return prepare_prompts(rows, tokenizer, prepend_bos=args.prepend_bos, max_prompt_length=args.max_prompt_length,
                           truncation=args.truncation, filter_overlong=args.filter_overlong_prompts,
                           source=source, say=say)
