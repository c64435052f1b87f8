"""The calculator environment of the arithmetic task (issue 58, `--env calculator`): the model may write a
call, `<calc>47*85</calc>`, and the environment appends the result's tokens, `3995`; the model then
writes its answer.

    prompt     <|endoftext|>47*85=
    model      <calc>47*85</calc>          a turn ends at the stop token </calc>
    calculator 3995=                       the observation: the result and the reply's end `=`, as tokens (not trained on)
    model      3995<|endoftext|>           the answer the reward reads (the model's last turn)

The reply ends with a marker the model reads (`REPLY_END`, `=`), because the answer that follows copies it:
without one, `</calc>3995|3995` is a digit string whose half the model must find to know where the reply
ended and when its copy is done; with one, the copy is "what followed the same digits in the reply", and
the `=` after the reply's last digit says where to write EOS. Measured on two calculator siblings built alike
but for it (one build each, 500 held-out problems x 8 samples, docs/environments.md): products right in
about 0.86 of the episodes that called with the marker against 0.73 without; held-out pass@1 with the
calculator 0.577 against 0.480.

The expression is read by a parser of its own (`evaluate`), never `eval`: non-negative integers of at most
`MAX_DIGITS` digits, `+ - *`, `*` binding tighter; a result (or a product on the way) beyond
`MAX_MAGNITUDE` is refused. Whatever goes wrong — a malformed expression, an empty one, a `</calc>`
without `<calc>`, a call that never closes, a number too large, a call over `max_calls` — the observation
is the error token `?` (then `=`), counted in `errors`; nothing raises.

The tokens are the tokenizer's: `<calc>`, `</calc>` and `?` must each be one token of its vocabulary. The
shipped arithmetic model's character tokenizer has none of them (docs/verifiable.md), so under it the
environment has no stop token: the model cannot call, every episode is one turn, and the run is the
single-turn run token for token. A sibling model whose vocabulary has them, pretrained with
demonstrations of the call, is what RL can teach when to call (issue 58, item 4).
"""

from __future__ import annotations

import re

from rlhf_scratch.rollout.environment import Step

OPEN, CLOSE, ERROR = "<calc>", "</calc>", "?"
MAX_DIGITS = 12
"""The most digits of a number in a call."""
MAX_MAGNITUDE = 10**12
"""The largest |value| a call may produce, its products on the way included (a larger one is an error)."""
MAX_CALLS = 3
"""Calls per episode; a call beyond them is answered with the error token."""
REPLY_END = "="
"""The end of every reply (a result or the error token): the marker the model's answer starts after."""

_TOKEN = re.compile(r"\d+|[+\-*]")


class CalculatorError(ValueError):
    """Why an expression cannot be evaluated (the environment answers `?`)."""


def evaluate(expression: str) -> int:
    """The value of `expression`: integers and `+ - *`, `*` before `+ -`, left to right; no spaces, no
    unary minus, no parentheses. A CalculatorError for anything else, or for a number or value too large.

        evaluate("47*85") = 3995,  evaluate("2+3*4-5") = 9,  evaluate("3-10") = -7
        evaluate("4+"), evaluate("*2"), evaluate("2**3"), evaluate("9"*13), evaluate("")  -> CalculatorError"""
    tokens = _TOKEN.findall(expression)
    if not expression or "".join(tokens) != expression:
        raise CalculatorError(f"not an expression of digits and + - *: {expression!r}")
    if len(tokens) % 2 == 0:
        raise CalculatorError(f"an expression alternates numbers and operators, starting and ending with a number: {expression!r}")
    numbers, operators = tokens[0::2], tokens[1::2]
    for number in numbers:
        if not number.isdigit():
            raise CalculatorError(f"an operator where a number should be: {expression!r}")
        if len(number) > MAX_DIGITS:
            raise CalculatorError(f"a number of more than {MAX_DIGITS} digits: {number[:MAX_DIGITS]}…")
    if any(op.isdigit() for op in operators):
        raise CalculatorError(f"a number where an operator should be: {expression!r}")
    total, product = 0, int(numbers[0])
    sign = 1
    for op, number in zip(operators, numbers[1:]):
        if op == "*":
            product = _bounded(product * int(number))
            continue
        total = _bounded(total + sign * product)
        sign, product = (1 if op == "+" else -1), int(number)
    return _bounded(total + sign * product)


def _bounded(value: int) -> int:
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError(f"a value beyond {MAX_MAGNITUDE:.0e}")
    return value


def reply_text(value: int) -> str:
    """The calculator's reply to a call of value `value`: `3995=` (the value, then `REPLY_END`)."""
    return f"{value}{REPLY_END}"


class Calculator:
    """One episode's calculator (the `rollout.environment.Environment` contract). `calls` and `errors`
    count this episode's calls and the ones answered with `?`."""

    def __init__(self, tokenizer, open_id: int, close_id: int, error_id: int, max_calls: int = MAX_CALLS):
        self.tokenizer, self.open_id, self.close_id, self.error_id = tokenizer, open_id, close_id, error_id
        self.max_calls, self.calls, self.errors = max_calls, 0, 0

    def reset(self) -> tuple[int, ...]:
        return ()  # the prompt is the problem: the model speaks first

    def step(self, turn_ids: tuple[int, ...]) -> Step:
        """A turn ending at `</calc>` is a call: the result's tokens, or `?`. A turn with a `<calc>` that
        never closes (it ended at EOS or the budget) is an error too (the episode is over anyway). Any
        other turn is the model's answer: done."""
        turn = list(turn_ids)
        closes = bool(turn) and turn[-1] == self.close_id
        if not closes and self.open_id not in turn:
            return Step(done=True)
        self.calls += 1
        result = self._result(turn[:-1]) if closes else None
        if result is None:
            self.errors += 1
            return Step(observation=(self.error_id, *self._encode(REPLY_END)))
        return Step(observation=self._encode(reply_text(result)))

    def _encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text, add_special_tokens=False))

    def _result(self, body: list[int]) -> int | None:
        """The value of the call whose tokens (without `</calc>`) are `body`, or None for an error."""
        if self.calls > self.max_calls or self.open_id not in body:
            return None
        expression = body[len(body) - body[::-1].index(self.open_id):]  # after the last <calc>
        if self.close_id in expression:
            return None
        try:
            return evaluate(self.tokenizer.decode(expression))
        except CalculatorError:
            return None


class CalculatorFactory:
    """`make(prompt) -> Calculator` for every prompt row of a run (`rollout.environment.EnvironmentFactory`);
    `stop_ids` is `</calc>`'s id, or () when the tokenizer lacks one of the three tokens (then nobody calls)."""

    def __init__(self, tokenizer, max_calls: int = MAX_CALLS):
        vocab = tokenizer.get_vocab()
        self.tokenizer, self.max_calls = tokenizer, max_calls
        self.ids = tuple(vocab[t] for t in (OPEN, CLOSE, ERROR)) if all(t in vocab for t in (OPEN, CLOSE, ERROR)) else None
        self.stop_ids: tuple[int, ...] = () if self.ids is None else (self.ids[1],)

    def __call__(self, prompt: str) -> Calculator:
        open_id, close_id, error_id = self.ids or (-1, -1, -1)  # -1: no token is ever that (no call, ever)
        return Calculator(self.tokenizer, open_id, close_id, error_id, self.max_calls)


def make_calculator(args, tokenizer) -> CalculatorFactory:
    """The registry's factory for `--env calculator` (`config.registry.register_env`)."""
    return CalculatorFactory(tokenizer)
