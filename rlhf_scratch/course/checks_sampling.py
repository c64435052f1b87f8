"""The checks of exercises 04, part one: sampling (the next token's distribution, the completion mask,
left padding, position ids) and the replay memory's minibatches.

Built as `checks.py` is (read its docstring): each case's answer worked out by hand in a comment
beside it, each classic mistake recognised by the number it gives on the same inputs. The minibatch
check is the exception: a shuffle's answer is a draw, so its expected rows are the package's own
`core.memory.minibatch_rows` with the same seeded generator, and each mistake's rows are the mistake
run with that generator too.
"""

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from rlhf_scratch.course.checks import DTYPE_HINTS, Case, Mistake, Reference, _describe, _run

SOLUTIONS = "rlhf_scratch.course.solutions"
REFERENCES: dict[str, Reference] = {
    "next_token_probs": Reference(SOLUTIONS, "(logits, temperature=1.0, top_k=0, top_p=1.0)"),
    "completion_mask": Reference(SOLUTIONS, "(completion_ids, eos_id)"),
    "left_pad": Reference(SOLUTIONS, "(prompts, pad_id)"),
    "position_ids": Reference(SOLUTIONS, "(attention_mask)"),
    "minibatch_rows": Reference(SOLUTIONS, "(batch, num_minibatches, passes=1, generator=None)"),
}
"""The solution of each exercise (written to be read; the package's own is named in each check)."""

LN = math.log


def _row(values: list[float]) -> Tensor:
    return torch.tensor([values], dtype=torch.float32)


# --- next_token_probs -------------------------------------------------------------------------


def _next_token_probs_cases() -> list[Case]:
    s2, s3 = 2**0.5, 3**0.5
    return [
        Case("temperature 0.5",
             lambda fn: fn(_row([0.0, LN(2), LN(3)]), temperature=0.5),
             # z / T = 2z: softmax ∝ exp(2 ln [1, 2, 3]) = [1, 4, 9]
             [[1 / 14, 4 / 14, 9 / 14]],
             (Mistake([[1 / 6, 2 / 6, 3 / 6]], "the temperature was ignored: draw from softmax(logits / T)"),
              Mistake([[1 / (1 + s2 + s3), s2 / (1 + s2 + s3), s3 / (1 + s2 + s3)]],
                      "divide the logits by the temperature, don't multiply: T < 1 sharpens the distribution"),
              Mistake([[0.0, 2 * LN(2), 2 * LN(3)]], "those are the scaled logits: return their softmax, the "
                                                     "probabilities the token is drawn from"))),
        Case("top_k = 2 (the logits unsorted)",
             lambda fn: fn(_row([LN(3), 0.0, LN(2), LN(4)]), top_k=2),
             # the two largest are ln 4 and ln 3: softmax over them ∝ [3, 4], the others 0
             [[3 / 7, 0.0, 0.0, 4 / 7]],
             (Mistake([[3 / 9, 0.0, 2 / 9, 4 / 9]], "top-k keeps k tokens: you kept k + 1 (ties aside, those whose "
                                                    "logit is >= the k-th largest)"),
              Mistake([[0.3, 0.0, 0.0, 0.4]], "renormalise: zeroing the probabilities outside the top k leaves a "
                                              "distribution that sums to less than 1; set their LOGITS to -inf "
                                              "before the softmax"),
              Mistake([[1 / 3, 1 / 9, 1 / 9, 4 / 9]], "the left-out logits were set to 0, which exp() makes 1: set "
                                                      "them to -inf, which exp() makes 0"),
              Mistake([[0.0, 1 / 3, 2 / 3, 0.0]], "those are the k SMALLEST logits: topk returns the largest"),
              Mistake([[0.0, 0.0, 0.0, 1.0]], "top-k keeps k tokens: you kept k - 1 (masking logits <= the k-th "
                                              "largest drops the k-th itself; mask those < it)"),
              Mistake([[4 / 7, 3 / 7]], "return a probability for every token of the vocabulary (0 outside the "
                                        "top k), in the vocabulary's order, not the k sorted values"))),
        Case("top_p = 0.6",
             lambda fn: fn(_row([LN(1), LN(2), LN(3), LN(4)]), top_p=0.6),
             # p = [.1, .2, .3, .4]; from the top: .4 (mass above it 0 < .6: in), .3 (.4 < .6: in),
             # .2 (.7 >= .6: out). The token that crosses top_p is in: ∝ [0, 0, 3, 4]
             [[0.0, 0.0, 3 / 7, 4 / 7]],
             (Mistake([[0.0, 0.0, 0.0, 1.0]], "the token that CROSSES top_p is in the nucleus: keep a token while "
                                              "the tokens more likely than it hold less than top_p"),
              Mistake([[1 / 6, 2 / 6, 3 / 6, 0.0]], "the nucleus is the MOST likely tokens: sort descending (or "
                                                    "drop from the bottom while the cumulative mass <= 1 - top_p)"),
              Mistake([[0.0, 0.0, 0.3, 0.4]], "renormalise the nucleus: its probabilities must sum to 1"))),
        Case("temperature 0.5 and top_p = 0.5",
             lambda fn: fn(_row([LN(1), LN(2), LN(3), LN(4)]), temperature=0.5, top_p=0.5),
             # T first: ∝ [1, 4, 9, 16] / 30; from the top 16/30 (in), 9/30 (mass above 16/30 >= .5: out)
             [[0.0, 0.0, 0.0, 1.0]],
             (Mistake([[0.0, 0.0, 9 / 25, 16 / 25]], "the nucleus was cut before the temperature: transformers (and "
                                                     "the package) apply temperature, then top-k, then top-p, so the "
                                                     "nucleus is measured on the tempered distribution"),
              Mistake([[0.0, 0.0, 3 / 7, 4 / 7]], "the temperature was ignored"))),
    ]


def check_next_token_probs(fn: Callable) -> None:
    """Check `next_token_probs(logits, temperature=1.0, top_k=0, top_p=1.0) -> [batch, d_vocab]`: the
    distribution `rlhf_scratch.rollout.generation.sample_next_token` draws from (the solution:
    `rlhf_scratch.course.solutions.next_token_probs`).

    Recognises: the temperature ignored or multiplied, scaled logits for probabilities; k + 1 tokens
    kept, the top k zeroed without renormalising or masked to 0 instead of -inf, the smallest k, the k
    values alone; the crossing token left out of the nucleus, the least likely tokens kept, the nucleus
    not renormalised or cut before the temperature.
    """
    _run("next_token_probs", fn, _next_token_probs_cases(), REFERENCES["next_token_probs"])


# --- completion_mask --------------------------------------------------------------------------


def _completion_mask_cases() -> list[Case]:
    T, F = True, False
    # eos 0 (GPT-2's EOS is also its pad: after the first EOS the rows hold 0s); row 1 has a later token 7
    # after its EOS (generation without stop_at_eos), row 2 never ends
    ids = [[5, 0, 0, 0], [3, 4, 0, 7], [1, 2, 3, 4]]
    return [
        Case("three rows, EOS = 0",
             lambda fn: fn(torch.tensor(ids), 0),
             [[T, T, F, F], [T, T, T, F], [T, T, T, T]],
             (Mistake([[T, F, F, F], [T, T, F, F], [T, T, T, T]],
                      "the EOS itself is kept: it is the policy's last action (the reward arrives there and its "
                      "log-prob is trained); only what FOLLOWS it is padding"),
              Mistake([[T, F, F, F], [T, T, F, T], [T, T, T, T]],
                      "ids != eos is not the mask: it drops the EOS and keeps tokens after it; mark everything up "
                      "to and including the FIRST EOS (a cumulative count of EOS before each position)"),
              Mistake([[T, T, T, T], [T, T, T, F], [T, T, T, T]],
                      "the completion ends at its FIRST EOS, not its last"),
              Mistake([[T, T, F, F], [T, T, T, T], [T, T, T, T]],
                      "a count of EOS <= 1 keeps what follows the first EOS until a second one (the 7 of row 1): "
                      "keep the positions with no EOS BEFORE them (the count up to and including t, minus is_eos)"),
              Mistake([[T, T, F, F], [T, T, T, F], [T, F, F, F]],
                      "a row with no EOS keeps every token (argmax of an all-False row is 0, not 'none')"))),
    ]


def check_completion_mask(fn: Callable) -> None:
    """Check `completion_mask(completion_ids, eos_id) -> Bool[batch, gen_len]`, True up to and including
    each row's first EOS: the mask `rlhf_scratch.rollout.generation.generate` returns (the solution:
    `rlhf_scratch.course.solutions.completion_mask`).

    Recognises: the EOS left out, ids != eos, the last EOS for the first, a row without EOS cut at 0.
    """
    _run("completion_mask", fn, _completion_mask_cases(), REFERENCES["completion_mask"])


# --- left_pad ---------------------------------------------------------------------------------


def _ids_and_mask(out: Any) -> Any:
    """(ids, mask) as one [2, batch, width] tensor the judge compares; anything else as it came. A mask that
    is not bool is refused here (the judge sees the stacked integers): ~ of a long 1 is -2, not False."""
    if isinstance(out, tuple) and len(out) == 2 and all(isinstance(t, Tensor) for t in out) \
            and out[0].shape == out[1].shape:
        if out[1].dtype != torch.bool:
            raise AssertionError(f"your mask is {_describe(out[1])}: {DTYPE_HINTS['a bool']} (~mask of a long "
                                 "tensor is -2 and -1, not False and True)")
        return torch.stack([out[0].long(), out[1].long()])
    return out


def _left_pad_cases() -> list[Case]:
    # GPT-2 style: BOS = EOS = pad = id 0, so a prompt's own first token has the pad id
    prompts = [[0, 5, 6], [0, 7]]
    return [
        Case("two prompts, BOS = pad = 0",
             lambda fn: _ids_and_mask(fn([torch.tensor(p) for p in prompts], 0)),
             [[[0, 5, 6], [0, 0, 7]],   # ids: the short prompt right-aligned, pad before it
              [[1, 1, 1], [0, 1, 1]]],  # mask: its BOS is real (id 0 and all)
             (Mistake([[[0, 5, 6], [0, 7, 0]], [[1, 1, 1], [1, 1, 0]]],
                      "that is RIGHT padding: left-pad, so every prompt ends at the last column, where the next "
                      "token is drawn (with right padding a short prompt's next token follows a pad)"),
              Mistake([[[0, 5, 6], [0, 0, 7]], [[0, 1, 1], [0, 0, 1]]],
                      "the mask came from ids != pad_id, which drops the BOS (GPT-2's BOS, EOS and pad are one "
                      "id): build the mask from the prompts' lengths"),
              Mistake([[[0, 5, 6], [0, 0, 7]], [[0, 0, 0], [1, 0, 0]]],
                      "the mask is upside down: True marks the REAL tokens (the ones attended to)"))),
    ]


def check_left_pad(fn: Callable) -> None:
    """Check `left_pad(prompts, pad_id) -> (ids [batch, width], mask [batch, width])`: the prompts
    right-aligned behind pad_id and the mask of real tokens, as `interp.sampling.left_padded` and the
    rollout's `tokenize_prompts` build them (the solution: `rlhf_scratch.course.solutions.left_pad`).

    Recognises: right padding, the mask from ids != pad_id (BOS lost), the mask inverted.
    """
    _run("left_pad", fn, _left_pad_cases(), REFERENCES["left_pad"])


# --- position_ids -----------------------------------------------------------------------------


def _position_ids_cases() -> list[Case]:
    return [
        Case("a full row and a row with two pads",
             lambda fn: fn(torch.tensor([[True, True, True, True], [False, False, True, True]])),
             # cumsum - 1: [0, 1, 2, 3] and [-1, -1, 0, 1] -> the pads clamped to 0
             [[0, 1, 2, 3], [0, 0, 0, 1]],
             (Mistake([[0, 1, 2, 3], [0, 1, 2, 3]], "positions ignored the padding: a padded prompt must get the "
                                                    "positions it would have alone, counted from its first real "
                                                    "token (cumsum of the mask, minus 1)"),
              Mistake([[1, 2, 3, 4], [0, 0, 1, 2]], "off by one: the first real token is position 0 (cumsum - 1)"),
              Mistake([[0, 1, 2, 3], [-1, -1, 0, 1]], "the pads hold -1, not a valid index into the positional "
                                                      "embedding: clamp them to 0 (they are never attended)"))),
    ]


def check_position_ids(fn: Callable) -> None:
    """Check `position_ids(attention_mask) -> Int[batch, seq]`: each real token's position from its row's
    first real token, 0 on the padding, as TransformerLens computes them for a left-padded batch
    (`transformer_lens.utils.get_offset_position_ids`; the solution:
    `rlhf_scratch.course.solutions.position_ids`).

    Recognises: plain arange, positions from 1, -1 left on the padding.
    """
    _run("position_ids", fn, _position_ids_cases(), REFERENCES["position_ids"])


# --- minibatch_rows ---------------------------------------------------------------------------


def _rows(fn: Callable, batch: int, num_minibatches: int, passes: int, seed: int) -> Any:
    """fn's minibatches, drawn with a generator seeded `seed`, stacked [passes * num_minibatches, size]."""
    out = list(fn(batch, num_minibatches, passes, generator=torch.Generator().manual_seed(seed)))
    return torch.stack([torch.as_tensor(r) for r in out]) if out and all(len(r) == len(out[0]) for r in out) else out


def _one_permutation_for_every_pass(batch, num_minibatches, passes=1, generator=None):
    order = torch.randperm(batch, generator=generator)
    for _ in range(passes):
        yield from order.view(num_minibatches, -1)


def _a_permutation_per_minibatch(batch, num_minibatches, passes=1, generator=None):
    for _ in range(passes * num_minibatches):
        yield torch.randperm(batch, generator=generator)[: batch // num_minibatches]


def _no_shuffle(batch, num_minibatches, passes=1, generator=None):
    for _ in range(passes):
        yield from torch.arange(batch).view(num_minibatches, -1)


def _minibatches_of_size_num_minibatches(batch, num_minibatches, passes=1, generator=None):
    for _ in range(passes):
        yield from torch.randperm(batch, generator=generator).view(-1, num_minibatches)


def _minibatch_rows_cases() -> list[Case]:
    from rlhf_scratch.core.memory import minibatch_rows  # the package's: the same draws as the trainers

    def case(name: str, batch: int, num_minibatches: int, passes: int, seed: int) -> Case:
        def rows(f: Callable) -> Any:
            return _rows(f, batch, num_minibatches, passes, seed)

        return Case(name, rows, rows(minibatch_rows),
                    (Mistake(rows(_one_permutation_for_every_pass), "each pass draws a NEW permutation (when the "
                                                                    "pass begins): with one for all, every pass "
                                                                    "repeats the same minibatches"),
                     Mistake(rows(_a_permutation_per_minibatch), "one permutation per PASS, cut into minibatches: "
                                                                 "a permutation per minibatch uses some rows twice "
                                                                 "in a pass and others never"),
                     Mistake(rows(_no_shuffle), "the rows were not shuffled: draw torch.randperm(batch, "
                                                "generator=generator)"),
                     Mistake(rows(_minibatches_of_size_num_minibatches), "num_minibatches is how MANY minibatches "
                                                                         "(each of batch // num_minibatches rows), "
                                                                         "not their size: view(num_minibatches, -1)")),
                    atol=0.0, rtol=0.0)

    return [case("6 rows, 3 minibatches, 2 passes", 6, 3, 2, seed=0),
            case("8 rows, 2 minibatches, 3 passes", 8, 2, 3, seed=1)]


def check_minibatch_rows(fn: Callable) -> None:
    """Check `minibatch_rows(batch, num_minibatches, passes=1, generator=None) -> Iterator[row indices]`
    against the package's `rlhf_scratch.core.memory.minibatch_rows` with the same seeded generator (the
    solution: `rlhf_scratch.course.solutions.minibatch_rows`).

    Recognises: one permutation for every pass, a permutation per minibatch, no shuffle,
    num_minibatches taken as the minibatch size.
    """
    _run("minibatch_rows", fn, _minibatch_rows_cases(), REFERENCES["minibatch_rows"])


CASES: dict[str, Callable[[], list[Case]]] = {
    "next_token_probs": _next_token_probs_cases,
    "completion_mask": _completion_mask_cases,
    "left_pad": _left_pad_cases,
    "position_ids": _position_ids_cases,
    "minibatch_rows": _minibatch_rows_cases,
}
"""Each exercise's cases, by function name."""
