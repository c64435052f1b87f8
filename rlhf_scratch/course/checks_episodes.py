"""The checks of notebook 11, multi-turn episodes: the segments assembled into a rollout, the loss terms over
the model's tokens only, the model's turn kept as sampled.

Built as `checks.py` is (read its docstring): each `check_<name>(fn)` runs cases worked out by hand and
names the classic mistake by the numbers it produced. Every case is a two-turn episode (the model's turn,
the tool's reply, the model's turn) beside a shorter one, and the tool's tokens carry numbers far from
the model's, so that training on the reply, counting it in the KL or the length, or moving the boundary
by one position each gives another number. The answers are the package's (`rollout.episodes`,
`core.objectives`, `algorithms.grpo.loss`), which tests/integration/test_course_episodes.py runs through
every check.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from rlhf_scratch.course.checks import Case, Mistake, Reference, _describe, _run, _t

SOLUTIONS = "rlhf_scratch.course.solutions_episodes"
REFERENCES: dict[str, Reference] = {
    "assemble_completions": Reference(SOLUTIONS, "(episodes, gen_len, pad)"),
    "sequence_log_probs": Reference(SOLUTIONS, "(logprobs, completion_mask, attention_mask)"),
    "grpo_loss": Reference(SOLUTIONS, "(per_token_loss, completion_mask, attention_mask)"),
    "masked_kl_mean": Reference(SOLUTIONS, "(logprobs, ref_logprobs, completion_mask, attention_mask)"),
    "add_turn": Reference(SOLUTIONS, "(segments, turn_ids, observation, tokenizer)"),
}
"""The solution of each exercise (written to be read; the package's own is named in its check)."""

LN2, LN3 = math.log(2), math.log(3)
T, F = True, False

TOOL_TRAINED = ("the tool's reply is trained on: its tokens are the environment's, not the model's choice (the "
                "model read them, it never sampled them), so the mask is False there")


# --- assemble_completions -------------------------------------------------------------------------


def _ids_and_mask(out: Any) -> Tensor:
    """(completion_ids, completion_mask) as one [2, batch, gen_len] tensor of integers for the judge, or the
    one line that says why the return is not a rollout's pair."""
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(t, Tensor) for t in out)):
        raise AssertionError(f"return (completion_ids, completion_mask), two tensors; got {_describe(out)}")
    ids, mask = out
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise AssertionError(f"completion_ids are token ids, a long tensor (an embedding indexes with them); got {_describe(ids)}")
    if mask.dtype != torch.bool:
        raise AssertionError(f"completion_mask is a bool tensor (True on the model's tokens: the losses index and select "
                             f"with it); got {_describe(mask)}")
    if ids.shape != mask.shape:
        raise AssertionError(f"completion_ids {tuple(ids.shape)} and completion_mask {tuple(mask.shape)}: one shape, "
                             "[batch, gen_len]")
    return torch.stack([ids.long(), mask.long()])


def _assemble_case(name: str, episodes: list, gen_len: int, pad: int, expected: list, mistakes: tuple) -> Case:
    def run(fn: Callable) -> Tensor:
        fresh = [[(tuple(ids), by_model) for ids, by_model in segments] for segments in episodes]
        return _ids_and_mask(fn(fresh, gen_len, pad))

    return Case(f"{name} (ids, then the mask as 1/0)", run, expected, mistakes)


EVERY_TOKEN = TOOL_TRAINED + ": set the mask from each segment's by_model"
INVERTED = "the mask is upside down: True marks what is TRAINED, the model's tokens; False the tool's and the padding"
END_INCLUDED = ("off by one at the segment boundary: a segment of n tokens starting at s covers s .. s+n-1 "
                "(mask[s:s+n]); you marked s+n too, the first token of the tool's reply (and the padding after "
                "the last turn) counted as the model's")
LAST_DROPPED = ("off by one at the segment boundary: the LAST token of each turn is dropped (mask[s:s+n-1]); it is "
                "the model's choice too, the </calc> or EOS that ends its turn, the token that decides when the "
                "tool is called")
FIRST_DROPPED = ("off by one at the segment boundary: the FIRST token of each turn is dropped (mask[s+1:s+n]); the "
                 "model sampled it as surely as the rest")
SHIFTED = ("off by one at the segment boundary: the mask is one position off its tokens (mask[t] must be the "
           "author of completion_ids[t] itself, not of the token before or after it; the shift between logits "
           "and tokens is get_log_probs' business, not the mask's)")
PADDING = ("the padding is counted: positions after the episode's last token are no one's, False in the mask "
           "(the ids there are `pad`)")
BY_PAD_ID = ("the mask came from ids != pad: the model's EOS has the pad's id (0 here, as GPT-2's BOS = EOS = pad), "
             "and it is the model's token; mark the mask by each segment's author and position, never by id")
REPLY_DROPPED = ("the tool's reply is left out of completion_ids: the model read it before its next turn, so the "
                 "scoring forward must see it in place; keep it in the ids and False in the mask")
LEFT_PADDED = ("that is LEFT padding: a completion starts right after its prompt, so its tokens come first and the "
               "padding after them (right padding, as the rollout's completions)")
PAD_ID = "pad with the `pad` id given (9 here), not 0"


def _assemble_completions_cases() -> list[Case]:
    two_turns = [((5, 6, 7), T), ((8, 9), F), ((4, 0), T)]  # model · tool · model, its EOS id 0 = the pad id
    one_turn = [((3, 0), T)]
    ids = [[5, 6, 7, 8, 9, 4, 0, 0], [3, 0, 0, 0, 0, 0, 0, 0]]

    def with_mask(a: list[int], b: list[int], ids: list = ids) -> list:
        return [ids, [a, b]]

    # the second case: an episode that fills gen_len exactly, and one that starts with a first observation
    full = [((1, 2), T), ((3,), F), ((4, 5), T)]
    reset_first = [((6,), F), ((7,), T)]
    ids_9 = [[1, 2, 3, 4, 5], [6, 7, 9, 9, 9]]
    return [
        _assemble_case("a two-turn episode (5 6 7 | 8 9 | 4 EOS) and a one-turn one (3 EOS), gen_len 8, pad 0",
                       [two_turns, one_turn], 8, 0,
                       with_mask([1, 1, 1, 0, 0, 1, 1, 0], [1, 1, 0, 0, 0, 0, 0, 0]),
                       (Mistake(with_mask([1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0, 0, 0]), EVERY_TOKEN),
                        Mistake(with_mask([0, 0, 0, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0]), INVERTED),
                        Mistake(with_mask([0, 0, 0, 1, 1, 0, 0, 1], [0, 0, 1, 1, 1, 1, 1, 1]), INVERTED),
                        Mistake(with_mask([1, 1, 1, 1, 0, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0, 0]), END_INCLUDED),
                        Mistake(with_mask([1, 1, 0, 0, 0, 1, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0]), LAST_DROPPED),
                        Mistake(with_mask([0, 1, 1, 0, 0, 0, 1, 0], [0, 1, 0, 0, 0, 0, 0, 0]), FIRST_DROPPED),
                        Mistake(with_mask([1, 1, 0, 0, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0]), SHIFTED),  # mask[t] = author of t+1
                        Mistake(with_mask([0, 1, 1, 1, 0, 0, 1, 1], [0, 1, 1, 0, 0, 0, 0, 0]), SHIFTED),  # author of t-1
                        Mistake(with_mask([1, 1, 1, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]), PADDING),
                        Mistake(with_mask([1, 1, 1, 0, 0, 1, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0]), BY_PAD_ID),
                        Mistake([[[5, 6, 7, 4, 0, 0, 0, 0], [3, 0, 0, 0, 0, 0, 0, 0]],
                                 [[1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0]]], REPLY_DROPPED),
                        Mistake([[[0, 5, 6, 7, 8, 9, 4, 0], [0, 0, 0, 0, 0, 0, 3, 0]],
                                 [[0, 1, 1, 1, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 1, 1]]], LEFT_PADDED))),
        _assemble_case("an episode that fills gen_len 5 (1 2 | 3 | 4 5) and one whose environment speaks first (6 | 7), "
                       "pad 9", [full, reset_first], 5, 9,
                       [ids_9, [[1, 1, 0, 1, 1], [0, 1, 0, 0, 0]]],
                       (Mistake([[[1, 2, 3, 4, 5], [6, 7, 0, 0, 0]], [[1, 1, 0, 1, 1], [0, 1, 0, 0, 0]]], PAD_ID),
                        Mistake([ids_9, [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]], EVERY_TOKEN),
                        Mistake([ids_9, [[1, 1, 1, 1, 1], [0, 1, 1, 0, 0]]], END_INCLUDED),
                        Mistake([ids_9, [[1, 0, 0, 1, 0], [0, 0, 0, 0, 0]]], LAST_DROPPED),
                        Mistake([ids_9, [[0, 1, 0, 0, 1], [0, 0, 0, 0, 0]]], FIRST_DROPPED),
                        Mistake([ids_9, [[1, 1, 0, 1, 1], [0, 1, 1, 1, 1]]], PADDING))),
    ]


def check_assemble_completions(fn: Callable) -> None:
    """Check `assemble_completions(episodes, gen_len, pad) -> (completion_ids, completion_mask)`: each episode's
    segments (ids, by_model) one after another, right-padded with `pad` to gen_len, the mask True on the model's
    tokens only (the package's: `rlhf_scratch.rollout.episodes.assemble_completions`, over `Episode`s).

    Recognises: the mask True on the tool's reply, or upside down; off by one at the segment boundary (the
    reply's first token counted, a turn's last or first token dropped, the mask shifted a position); the padding
    counted; the mask from ids != pad (the model's EOS lost); the reply left out of the ids; left padding; 0 for
    the pad id.
    """
    _run("assemble_completions", fn, _assemble_completions_cases(), REFERENCES["assemble_completions"])


# --- the batch of the loss terms: two episodes, two masks ------------------------------------------
#
#   position          0      1      2      3      4      5
#   episode 0         model  model  tool   tool   model  model        completion_mask  T T F F T T
#                                                                      attention_mask   T T T T T T
#   episode 1         model  tool   tool   model  pad    pad          completion_mask  T F F T F F
#                                                                      attention_mask   T T T T F F

COMPLETION_MASK = [[T, T, F, F, T, T], [T, F, F, T, F, F]]
ATTENTION_MASK = [[T, T, T, T, T, T], [T, T, T, T, F, F]]


def _masks() -> tuple[Tensor, Tensor]:
    return torch.tensor(COMPLETION_MASK), torch.tensor(ATTENTION_MASK)


# --- sequence_log_probs ---------------------------------------------------------------------------

REPLY_SUMMED = ("log π(o|q) summed the tool's reply: the attention mask was read, True on the tool's tokens too "
                "(what the forward reads); " + TOOL_TRAINED + "; sum over completion_mask only")
EVERYTHING_SUMMED = ("no mask at all: the tool's reply and the padding were summed; log π(o|q) is the sum over "
                     "completion_mask only")
MEAN_NOT_SUM = ("that is a mean: log π(o|q) of a whole episode is a SUM over its tokens (a product of "
                "probabilities), not divided by a length")
INF_TIMES_ZERO = ("not finite: a position outside the mask holds -inf (a token the model could not have sampled, "
                  "here the tool's) and -inf * 0 = NaN; select with torch.where(completion_mask, logprobs, 0) "
                  "(or logprobs[mask]), don't multiply by the mask")


def _sequence_log_probs_cases() -> list[Case]:
    logprobs = [[-1.0, -2.0, -9.0, -9.0, -0.5, -0.25], [-0.5, -7.0, -7.0, -1.5, -4.0, -4.0]]
    inf = -math.inf
    return [
        # episode 0: -1 - 2 - 0.5 - 0.25 = -3.75; episode 1: -0.5 - 1.5 = -2
        Case("the batch above, the tool's reply at -9 and -7",
             lambda fn: fn(_t(logprobs, grad=True), *_masks()),
             [-3.75, -2.0],
             (Mistake([-21.75, -16.0], REPLY_SUMMED),        # with the reply: -3.75 - 18, -2 - 14
              Mistake([-21.75, -24.0], EVERYTHING_SUMMED),   # and episode 1's padding, -8
              Mistake([-3.75 / 4, -1.0], MEAN_NOT_SUM),      # / |o| = 4, 2
              Mistake([-3.75 / 6, -0.5], MEAN_NOT_SUM)),     # / 6, 4 (the attention's count)
             needs_grad=True),
        # -0.5 - 1 = -1.5; the model gave the tool's tokens no chance (top-k sampling: -inf outside the top k)
        Case("a log-prob of -inf at the tool's reply",
             lambda fn: fn(_t([[-0.5, inf, inf, -1.0, -3.0]]), torch.tensor([[T, F, F, T, F]]),
                           torch.tensor([[T, T, T, T, F]])),
             [-1.5], if_not_finite=INF_TIMES_ZERO),
    ]


def check_sequence_log_probs(fn: Callable) -> None:
    """Check `sequence_log_probs(logprobs, completion_mask, attention_mask) -> [batch]`: log π(o|q) of each
    episode, the sum over the model's tokens only (the package's: `rlhf_scratch.core.objectives.sequence_log_probs`,
    which takes the one mask; RLOO's ratio and DPO's loss are built on it).

    Recognises: the tool's reply summed (the attention mask read), no mask at all, a mean for the sum, -inf * 0.
    """
    _run("sequence_log_probs", fn, _sequence_log_probs_cases(), REFERENCES["sequence_log_probs"])


# --- grpo_loss ------------------------------------------------------------------------------------

LENGTH_COUNTS_REPLY = ("the length |o| counted the tool's reply: GRPO divides each episode's sum by the number of "
                       "the MODEL's tokens (completion_mask.sum(-1)), not by its tokens read (attention_mask.sum(-1)); "
                       "counted, an episode that called a tool weighs less per token than one that did not")
REPLY_TRAINED = f"{TOOL_TRAINED}, and counted in the length: numerator and denominator read completion_mask"
DIVIDED_BY_GEN_LEN = ("each episode's sum was divided by gen_len, the padding and the reply counted in the length "
                      "(a constant: that is Dr. GRPO's aggregation); GRPO's divides by the episode's own |o|, the "
                      "model's tokens")
TOKEN_MEAN = ("that is a token-level mean over the whole batch (DAPO's): GRPO averages each episode over its own "
              "model tokens first, then the episodes")
NO_MASK = "no mask at all: the tool's reply and the padding are counted, in the sums and in the lengths"
BATCH_SUM = "the episodes' losses were summed: the loss is their MEAN over the batch"


def _grpo_loss_cases() -> list[Case]:
    terms = [[1.0, 2.0, 100.0, 100.0, 3.0, 4.0], [6.0, 50.0, 50.0, 2.0, 30.0, 30.0]]
    return [
        # episode 0: (1 + 2 + 3 + 4) / 4 = 2.5; episode 1: (6 + 2) / 2 = 4; mean 3.25
        Case("the batch above, the tool's reply at 100 and 50",
             lambda fn: fn(_t(terms, grad=True), *_masks()),
             3.25,
             (Mistake((10 / 6 + 8 / 4) / 2, LENGTH_COUNTS_REPLY),   # / 6, / 4: 1.8333
              Mistake((210 / 6 + 108 / 4) / 2, REPLY_TRAINED),      # 35, 27: 31
              Mistake((10 / 6 + 8 / 6) / 2, DIVIDED_BY_GEN_LEN),    # 1.5
              Mistake(18 / 6, TOKEN_MEAN),                          # 3
              Mistake((210 / 6 + 168 / 6) / 2, NO_MASK),            # 35, 28: 31.5
              Mistake(6.5, BATCH_SUM)),
             needs_grad=True),
    ]


def check_grpo_loss(fn: Callable) -> None:
    """Check `grpo_loss(per_token_loss, completion_mask, attention_mask) -> scalar`: GRPO's aggregation, each
    episode's sum over the model's tokens divided by their number, then the mean over episodes (the package's:
    `rlhf_scratch.algorithms.grpo.loss.aggregate_grpo_terms(..., "grpo", ...)`; TRL's loss_type "grpo").

    Recognises: the length counting the tool's reply; the reply trained on; gen_len for the length (Dr. GRPO);
    a token-level mean (DAPO); no mask; a sum over the batch.
    """
    _run("grpo_loss", fn, _grpo_loss_cases(), REFERENCES["grpo_loss"])


# --- masked_kl_mean -------------------------------------------------------------------------------

KL_OVER_TOOL = ("the KL counted the environment's tokens: the policy did not choose the tool's reply, so how far "
                "it moved from the reference THERE is not a cost of its choices (a reply the reference finds "
                "unlikely would pull the penalty up whatever the model did); average over completion_mask only")
KL_NO_MASK = "no mask at all: the tool's reply and the padding are in the KL's mean; average over completion_mask only"
KL_PADDED_MEAN = ("the positions outside the mask were zeroed, then the mean taken over all of them: divide by the "
                  "number of the model's tokens, completion_mask.sum()")
KL_EPISODE_MEANS = ("that is the mean of each episode's mean: the KL is a mean over all the model's tokens of the "
                    "batch, Σ m·kl / Σ m, as TRL logs it")
K3_REVERSED = ("k3 the wrong way round: with r = π_ref / π, kl = r − log r − 1, i.e. delta = ref_logprobs − logprobs "
               "(it is an estimate of KL(π || π_ref), whose samples come from π)")
K1 = ("that is k1 (the log-ratio itself), which can be negative on a token; the KL here is TRL's k3, "
      "exp(delta) − delta − 1 with delta = ref_logprobs − logprobs")


def _masked_kl_mean_cases() -> list[Case]:
    # delta = ref − logprobs, chosen so that k3 = e^d − d − 1 is exact:
    #   k3(0) = 0, k3(ln 2) = 1 − ln 2, k3(ln 4) = 3 − 2 ln 2, k3(−ln 2) = ln 2 − 1/2, k3(ln 3) = 2 − ln 3
    # episode 0: d = [0, ln 2, ln 4, ln 4, −ln 2, ln 3]      (the tool's reply at ln 4)
    # episode 1: d = [ln 2, ln 4, ln 4, 0, ln 3, ln 3]       (the reply at ln 4, the padding at ln 3)
    ln4 = 2 * LN2
    logprobs = [[-1.0, -2.0, -3.0, -3.0, -0.5, -1.5], [-1.0, -4.0, -4.0, -0.25, -2.0, -2.0]]
    delta = [[0.0, LN2, ln4, ln4, -LN2, LN3], [LN2, ln4, ln4, 0.0, LN3, LN3]]
    ref = [[lp + d for lp, d in zip(row_lp, row_d)] for row_lp, row_d in zip(logprobs, delta)]
    # the model's tokens: episode 0 (1 − ln 2) + (ln 2 − 1/2) + (2 − ln 3) = 5/2 − ln 3; episode 1 1 − ln 2
    kept = 3.5 - LN3 - LN2
    reply = 4 * (3 - 2 * LN2)     # four tool tokens at k3(ln 4)
    padding = 2 * (2 - LN3)       # episode 1's two pads at k3(ln 3)
    return [
        Case("the batch above, the tool's reply four times less likely under π than under the reference",
             lambda fn: fn(_t(logprobs, grad=True), _t(ref), *_masks()),
             kept / 6,  # (7/2 − ln 6) / 6 = 0.284707
             (Mistake((kept + reply) / 10, KL_OVER_TOOL),
              Mistake((kept + reply + padding) / 12, KL_NO_MASK),
              Mistake(kept / 12, KL_PADDED_MEAN),
              Mistake(((2.5 - LN3) / 4 + (1 - LN2) / 2) / 2, KL_EPISODE_MEANS),
              # e^−d + d − 1: k(ln 2) = ln 2 − 1/2, k(−ln 2) = 1 − ln 2, k(ln 3) = ln 3 − 2/3 -> (ln 6 − 2/3) / 6
              Mistake((LN2 + LN3 - 2 / 3) / 6, K3_REVERSED),
              Mistake(-(LN2 + LN3) / 6, K1),   # mean of logprobs − ref = −d: −(ln 3 + ln 2) / 6
              Mistake((LN2 + LN3) / 6, K1)),
             needs_grad=True),
    ]


def check_masked_kl_mean(fn: Callable) -> None:
    """Check `masked_kl_mean(logprobs, ref_logprobs, completion_mask, attention_mask) -> scalar`: TRL's k3 per
    token, averaged over the model's tokens of the batch (the package's: `rlhf_scratch.core.objectives.masked_mean`
    of `calc_k3_kl`'s terms; GRPO's KL term reads the same mask).

    Recognises: the KL over the tool's tokens (the attention mask read); no mask; the mean over every position;
    the mean of the episodes' means; k3 the wrong way round; k1.
    """
    _run("masked_kl_mean", fn, _masked_kl_mean_cases(), REFERENCES["masked_kl_mean"])


# --- add_turn -------------------------------------------------------------------------------------


@functools.cache
def merging_tokenizer():
    """The shipped calculator sibling's tokenizer (`--model arithmetic_calc`, as `rlhf pretrain-arithmetic --calculator`
    builds it: `<|endoftext|>`
    0, the characters `0123456789+-*=` 1-14, `<calc>` 15, `</calc>` 16, `?` 17) with one merge added, `2*3` as the
    one token 18, as a BPE vocabulary holds frequent strings whole: a model may still sample 2, *, 3 one at a time,
    and a decode → encode round trip then gives 18 instead."""
    from transformers import AutoTokenizer

    from rlhf_scratch.models.loading import ARITHMETIC_CALC_LM_DIR, asset_path

    tokenizer = AutoTokenizer.from_pretrained(asset_path(ARITHMETIC_CALC_LM_DIR))
    tokenizer.add_tokens(["2*3"])
    return tokenizer


def _segments(out: Any) -> Tensor:
    """The segments returned, as one [2, tokens] tensor (the ids one after another; 1 where the model wrote the
    token, 0 where the tool did), or the one line that says why a return is not a list of segments."""
    if not isinstance(out, (list, tuple)):
        raise AssertionError(f"return the episode's segments, a list of (ids, by_model) pairs; got {_describe(out)}")
    ids, authors = [], []
    for i, segment in enumerate(out):
        if not (isinstance(segment, (list, tuple)) and len(segment) == 2):
            raise AssertionError(f"segment {i} is {_describe(segment)}: each segment is a pair (ids, by_model)")
        seg_ids, by_model = segment
        if isinstance(seg_ids, str):
            raise AssertionError(f"segment {i}'s ids are the text {seg_ids!r}: a segment holds token ids; encode the "
                                 "tool's text with tokenizer.encode(observation, add_special_tokens=False)")
        if not isinstance(by_model, bool):
            raise AssertionError(f"segment {i}'s by_model is {_describe(by_model)}: True for the model's turn, False "
                                 "for the tool's reply")
        seg_ids = seg_ids.tolist() if isinstance(seg_ids, Tensor) else list(seg_ids)
        if not seg_ids:
            raise AssertionError(f"segment {i} is empty: add the tool's reply only when it has tokens (an episode "
                                 "that ended has no reply)")
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in seg_ids):
            raise AssertionError(f"segment {i}'s ids are {seg_ids!r}: token ids are ints")
        ids += seg_ids
        authors += [int(by_model)] * len(seg_ids)
    return torch.tensor([ids, authors], dtype=torch.long)


def _turn_case(name: str, segments: list, turn: tuple, observation: str, expected: list, mistakes: tuple) -> Case:
    def run(fn: Callable) -> Tensor:
        return _segments(fn(list(segments), tuple(turn), observation, merging_tokenizer()))

    return Case(f"{name} (the episode's ids, then 1 where the model wrote them)", run, expected, mistakes)


RETOKENISED = ("the model's turn was re-tokenised: decoded and encoded again, 2 * 3 (three tokens, as sampled) came "
               "back as the one token '2*3', so its log-probs would be of tokens the model never chose "
               "(verl#3960, trl#5145); keep turn_ids exactly as sampled")
REPLY_AS_MODEL = f"the reply was marked as the model's: {TOOL_TRAINED}, by_model False"
ORDER = "the reply comes AFTER the turn that called the tool: segments, then the turn, then the reply"
HISTORY_DROPPED = "return the whole episode so far: the segments given, then the turn, then the reply"
EOS_DROPPED = ("the turn's EOS is gone: the model sampled it (the choice to stop), so it is the model's token; keep "
               "the ids as sampled (decode(..., skip_special_tokens=True) then encode, or filtering EOS, drops it)")


def _add_turn_cases() -> list[Case]:
    call = (15, 3, 13, 4, 16)      # <calc> 2 * 3 </calc>, sampled a character at a time
    merged = [15, 18, 16]          # what encode(decode(call)) gives: <calc> 2*3 </calc>
    six = 7                        # the calculator's reply "6"
    first = [((15, 2, 11, 2, 16), T), ((3,), F)]   # <calc>1+1</calc> answered "2"
    return [
        _turn_case("the first turn, a call the vocabulary would merge, answered '6'", [], call, "6",
                   [[*call, six], [1, 1, 1, 1, 1, 0]],
                   (Mistake([[*merged, six], [1, 1, 1, 0]], RETOKENISED),
                    Mistake([[*call, six], [1, 1, 1, 1, 1, 1]], REPLY_AS_MODEL),
                    Mistake([[six, *call], [0, 1, 1, 1, 1, 1]], ORDER))),
        _turn_case("a second call after '<calc>1+1</calc>' answered '2'", first, call, "6",
                   [[15, 2, 11, 2, 16, 3, *call, six], [1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0]],
                   (Mistake([[15, 2, 11, 2, 16, 3, *merged, six], [1, 1, 1, 1, 1, 0, 1, 1, 1, 0]], RETOKENISED),
                    Mistake([[*call, six], [1, 1, 1, 1, 1, 0]], HISTORY_DROPPED))),
        # the answer "6" and EOS (id 0): the episode is over, the environment has nothing to say
        _turn_case("the answer '6' then EOS, no reply", [(call, T), ((six,), F)], (six, 0), "",
                   [[*call, six, six, 0], [1, 1, 1, 1, 1, 0, 1, 1]],
                   (Mistake([[*call, six, six], [1, 1, 1, 1, 1, 0, 1]], EOS_DROPPED),)),
    ]


def check_add_turn(fn: Callable) -> None:
    """Check `add_turn(segments, turn_ids, observation, tokenizer) -> segments`: the model's turn appended as the
    ids it sampled, then the tool's text encoded on its own, the tool's (the package's:
    `rlhf_scratch.rollout.episodes.take_turn`, whose environment answers in ids).

    Recognises: the turn re-tokenised (a decode → encode round trip that merges 2 * 3); the reply marked as the
    model's; the reply before the turn; the earlier segments dropped; the turn's EOS dropped; the reply's text
    left unencoded; an empty reply appended.
    """
    _run("add_turn", fn, _add_turn_cases(), REFERENCES["add_turn"])


CASES: dict[str, Callable[[], list[Case]]] = {
    "assemble_completions": _assemble_completions_cases,
    "sequence_log_probs": _sequence_log_probs_cases,
    "grpo_loss": _grpo_loss_cases,
    "masked_kl_mean": _masked_kl_mean_cases,
    "add_turn": _add_turn_cases,
}
"""Each exercise's cases, by function name."""
