"""Notebook 11's checks (`course/checks_episodes.py`): each passes the course's solution AND the package's own
function, and fails, naming the mistake, on a planted classic bug written out as a learner would; the course's
solutions equal the package's `rollout.episodes`, `core.objectives` and `algorithms.grpo.loss`.

Fast (seconds): here beside the other test_course_*.py files because test_course_checks.py looks here for
every check's planted bug.
"""

import pytest
import torch
from graded_notebooks import (
    assert_predictions_answered,
    assert_stubs_raise_and_solutions_pass,
    assert_written_by,
    load_generator,
)

from rlhf_scratch.algorithms.grpo.loss import aggregate_grpo_terms, calc_k3_kl
from rlhf_scratch.core.objectives import masked_mean
from rlhf_scratch.core.objectives import sequence_log_probs as package_sequence_log_probs
from rlhf_scratch.course import catalogue
from rlhf_scratch.course import checks_episodes as C
from rlhf_scratch.course import solutions_episodes as S
from rlhf_scratch.rollout.environment import Step
from rlhf_scratch.rollout.episodes import Episode, Segment, take_turn
from rlhf_scratch.rollout.episodes import assemble_completions as package_assemble


def fails_with(name: str, bug, phrase: str) -> str:
    with pytest.raises(AssertionError) as err:
        catalogue.CHECKS[name](bug)
    assert phrase in str(err.value), f"check_{name} on {bug.__name__} said:\n{err.value}\nexpected {phrase!r}"
    return str(err.value)


# --- the solutions are the package's ------------------------------------------------------------


def random_episodes(generator: torch.Generator, n: int, gen_len: int) -> list[list[tuple[tuple[int, ...], bool]]]:
    """n episodes of alternating authors (either first), random lengths, each within gen_len."""
    episodes = []
    for _ in range(n):
        segments, length, by_model = [], 0, bool(torch.randint(2, (1,), generator=generator))
        while length < gen_len - 1 and torch.rand(1, generator=generator) < 0.8:
            size = int(torch.randint(1, gen_len - length, (1,), generator=generator))
            segments.append((tuple(torch.randint(0, 20, (size,), generator=generator).tolist()), by_model))
            length, by_model = length + size, not by_model
        episodes.append(segments)
    return episodes


def test_assemble_completions_is_the_packages():
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        episodes = random_episodes(generator, 5, 12)
        package = package_assemble([Episode([Segment(ids, m) for ids, m in e]) for e in episodes], 12, 7)
        ours = S.assemble_completions(episodes, 12, 7)
        assert torch.equal(ours[0], package[0]) and torch.equal(ours[1], package[1])
        assert ours[1].dtype == torch.bool and ours[0].dtype == torch.long


def test_the_loss_terms_are_the_packages_on_random_masks():
    generator = torch.Generator().manual_seed(1)
    for _ in range(20):
        logprobs, ref = -torch.rand(4, 9, generator=generator) * 5, -torch.rand(4, 9, generator=generator) * 5
        mask = torch.rand(4, 9, generator=generator) < 0.6
        mask[:, 0] = True  # every episode has a model token
        attention = mask | (torch.rand(4, 9, generator=generator) < 0.5)
        assert torch.equal(S.sequence_log_probs(logprobs, mask, attention), package_sequence_log_probs(logprobs, mask))
        assert torch.allclose(S.grpo_loss(logprobs, mask, attention), aggregate_grpo_terms(logprobs, mask, "grpo", 9))
        assert torch.allclose(S.masked_kl_mean(logprobs, ref, mask, attention), masked_mean(calc_k3_kl(logprobs, ref), mask))


class Replies:
    """An environment that answers each turn with the next of `replies` (ids), and says done after the last."""

    def __init__(self, replies):
        self.replies = list(replies)

    def reset(self):
        return ()

    def step(self, turn_ids):
        return Step(observation=self.replies.pop(0)) if self.replies else Step(done=True)


def test_add_turn_is_what_take_turn_records():
    tokenizer = C.merging_tokenizer()
    turns = [(15, 3, 13, 4, 16), (15, 2, 11, 2, 16), (7, 0)]
    replies = ["6", "2"]
    episode = Episode()
    env = Replies([tuple(tokenizer.encode(r, add_special_tokens=False)) for r in replies])
    for turn in turns:
        take_turn(episode, env, turn, (0,), gen_len=30, max_turns=4)
    ours = []
    for turn, reply in zip(turns, [*replies, ""]):
        ours = S.add_turn(ours, turn, reply, tokenizer)
    assert ours == [(s.ids, s.by_model) for s in episode.segments]


def test_every_episode_check_passes_the_packages_own_functions(capsys):
    def assemble(episodes, gen_len, pad):
        return package_assemble([Episode([Segment(tuple(ids), m) for ids, m in e]) for e in episodes], gen_len, pad)

    def sequence_log_probs(logprobs, completion_mask, attention_mask):
        return package_sequence_log_probs(logprobs, completion_mask)

    def grpo_loss(per_token_loss, completion_mask, attention_mask):
        return aggregate_grpo_terms(per_token_loss, completion_mask, "grpo", per_token_loss.shape[1])

    def masked_kl_mean(logprobs, ref_logprobs, completion_mask, attention_mask):
        return masked_mean(calc_k3_kl(logprobs, ref_logprobs), completion_mask)

    for name, fn in (("assemble_completions", assemble), ("sequence_log_probs", sequence_log_probs),
                     ("grpo_loss", grpo_loss), ("masked_kl_mean", masked_kl_mean)):
        fn.__name__ = name
        catalogue.CHECKS[name](fn)
    assert capsys.readouterr().out.splitlines() == [
        "check_assemble_completions: all 2 cases pass", "check_sequence_log_probs: all 2 cases pass",
        "check_grpo_loss: all 1 cases pass", "check_masked_kl_mean: all 1 cases pass"]


# --- assemble_completions: each mistake as a learner writes it -------------------------------------


def assemble_with(mark):
    """assemble_completions whose mask is set by `mark(mask_row, start, end, by_model, gen_len)` per segment."""
    def assemble_completions(episodes, gen_len, pad):
        ids = torch.full((len(episodes), gen_len), pad, dtype=torch.long)
        mask = torch.zeros((len(episodes), gen_len), dtype=torch.bool)
        for row, segments in enumerate(episodes):
            start = 0
            for seg_ids, by_model in segments:
                end = start + len(seg_ids)
                ids[row, start:end] = torch.tensor(seg_ids)
                mark(mask[row], start, end, by_model, gen_len)
                start = end
        return ids, mask
    return assemble_completions


def every_token(row, start, end, by_model, gen_len):
    row[start:end] = True


def inverted(row, start, end, by_model, gen_len):
    row[start:end] = not by_model


def end_included(row, start, end, by_model, gen_len):
    if by_model:
        row[start:end + 1] = True


def last_dropped(row, start, end, by_model, gen_len):
    if by_model:
        row[start:end - 1] = True


def first_dropped(row, start, end, by_model, gen_len):
    if by_model:
        row[start + 1:end] = True


def test_assemble_completions_names_the_tool_trained_on_and_each_off_by_one():
    fails_with("assemble_completions", assemble_with(every_token), "the tool's reply is trained on")
    fails_with("assemble_completions", assemble_with(inverted), "the mask is upside down")
    fails_with("assemble_completions", assemble_with(end_included), "the first token of the tool's reply")
    fails_with("assemble_completions", assemble_with(last_dropped), "the LAST token of each turn is dropped")
    fails_with("assemble_completions", assemble_with(first_dropped), "the FIRST token of each turn is dropped")


def shifted(offset):
    """The right mask moved `offset` positions: +1, each position gets the author of the token before it."""
    def assemble_completions(episodes, gen_len, pad):
        ids, mask = S.assemble_completions(episodes, gen_len, pad)
        out = torch.zeros_like(mask)
        if offset > 0:
            out[:, 1:] = mask[:, :-1]
        else:
            out[:, :-1] = mask[:, 1:]
        return ids, out
    return assemble_completions


def padding_counted(episodes, gen_len, pad):
    ids, mask = S.assemble_completions(episodes, gen_len, pad)
    lengths = torch.tensor([sum(len(s) for s, _ in e) for e in episodes])
    return ids, mask | (torch.arange(gen_len)[None, :] >= lengths[:, None])


def mask_from_pad_id(episodes, gen_len, pad):
    ids, mask = S.assemble_completions(episodes, gen_len, pad)
    return ids, mask & (ids != pad)


def reply_dropped(episodes, gen_len, pad):
    return S.assemble_completions([[(i, m) for i, m in e if m] for e in episodes], gen_len, pad)


def left_padded(episodes, gen_len, pad):
    ids, mask = S.assemble_completions(episodes, gen_len, pad)
    lengths = [sum(len(s) for s, _ in e) for e in episodes]
    rolled = [(torch.roll(i, gen_len - n), torch.roll(m, gen_len - n)) for i, m, n in zip(ids, mask, lengths)]
    return torch.stack([i for i, _ in rolled]), torch.stack([m for _, m in rolled])


def zero_padded(episodes, gen_len, pad):
    return S.assemble_completions(episodes, gen_len, 0)


def float_mask(episodes, gen_len, pad):
    ids, mask = S.assemble_completions(episodes, gen_len, pad)
    return ids, mask.float()


def test_assemble_completions_names_a_shift_the_padding_and_the_ids_mistakes():
    fails_with("assemble_completions", shifted(-1), "the mask is one position off its tokens")  # author of t + 1
    fails_with("assemble_completions", shifted(1), "the mask is one position off its tokens")   # author of t - 1
    fails_with("assemble_completions", padding_counted, "the padding is counted")
    fails_with("assemble_completions", mask_from_pad_id, "the mask came from ids != pad")
    fails_with("assemble_completions", reply_dropped, "the tool's reply is left out of completion_ids")
    fails_with("assemble_completions", left_padded, "that is LEFT padding")
    assert "case 2/2" in fails_with("assemble_completions", zero_padded, "pad with the `pad` id given")
    fails_with("assemble_completions", float_mask, "completion_mask is a bool tensor")


# --- the loss terms ----------------------------------------------------------------------------------


def summed_with_attention(logprobs, completion_mask, attention_mask):
    return torch.where(attention_mask, logprobs, torch.zeros_like(logprobs)).sum(-1)


def summed_without_mask(logprobs, completion_mask, attention_mask):
    return logprobs.sum(-1)


def mean_not_sum(logprobs, completion_mask, attention_mask):
    return S.sequence_log_probs(logprobs, completion_mask, attention_mask) / completion_mask.sum(-1)


def times_mask(logprobs, completion_mask, attention_mask):
    return (logprobs * completion_mask).sum(-1)


def test_sequence_log_probs_names_the_reply_summed_a_mean_and_inf_times_zero():
    fails_with("sequence_log_probs", summed_with_attention, "log π(o|q) summed the tool's reply")
    fails_with("sequence_log_probs", summed_without_mask, "no mask at all")
    fails_with("sequence_log_probs", mean_not_sum, "that is a mean")
    assert "case 2/2" in fails_with("sequence_log_probs", times_mask, "-inf * 0 = NaN")


def grpo_length_with_attention(per_token_loss, completion_mask, attention_mask):
    return ((per_token_loss * completion_mask).sum(-1) / attention_mask.sum(-1)).mean()


def grpo_trained_on_reply(per_token_loss, completion_mask, attention_mask):
    return S.grpo_loss(per_token_loss, attention_mask, attention_mask)


def grpo_over_gen_len(per_token_loss, completion_mask, attention_mask):
    return ((per_token_loss * completion_mask).sum(-1) / per_token_loss.shape[1]).mean()


def grpo_token_mean(per_token_loss, completion_mask, attention_mask):
    return (per_token_loss * completion_mask).sum() / completion_mask.sum()


def grpo_no_mask(per_token_loss, completion_mask, attention_mask):
    return per_token_loss.mean()


def grpo_summed(per_token_loss, completion_mask, attention_mask):
    return ((per_token_loss * completion_mask).sum(-1) / completion_mask.sum(-1)).sum()


def grpo_detached(per_token_loss, completion_mask, attention_mask):
    return torch.tensor(S.grpo_loss(per_token_loss, completion_mask, attention_mask).item())


def test_grpo_loss_names_the_length_counting_the_reply_and_the_other_aggregations():
    fails_with("grpo_loss", grpo_length_with_attention, "the length |o| counted the tool's reply")
    fails_with("grpo_loss", grpo_trained_on_reply, "and counted in the length")
    fails_with("grpo_loss", grpo_over_gen_len, "that is Dr. GRPO's aggregation")
    fails_with("grpo_loss", grpo_token_mean, "DAPO's")
    fails_with("grpo_loss", grpo_no_mask, "no mask at all")
    fails_with("grpo_loss", grpo_summed, "the episodes' losses were summed")
    fails_with("grpo_loss", grpo_detached, "carries no gradient")


def k3(logprobs, ref_logprobs):
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1


def kl_with_attention(logprobs, ref_logprobs, completion_mask, attention_mask):
    return k3(logprobs, ref_logprobs)[attention_mask].mean()


def kl_no_mask(logprobs, ref_logprobs, completion_mask, attention_mask):
    return k3(logprobs, ref_logprobs).mean()


def kl_zeroed_mean(logprobs, ref_logprobs, completion_mask, attention_mask):
    return (k3(logprobs, ref_logprobs) * completion_mask).mean()


def kl_episode_means(logprobs, ref_logprobs, completion_mask, attention_mask):
    return ((k3(logprobs, ref_logprobs) * completion_mask).sum(-1) / completion_mask.sum(-1)).mean()


def kl_reversed(logprobs, ref_logprobs, completion_mask, attention_mask):
    return k3(ref_logprobs, logprobs)[completion_mask].mean()


def kl_k1(logprobs, ref_logprobs, completion_mask, attention_mask):
    return (logprobs - ref_logprobs)[completion_mask].mean()


def test_masked_kl_mean_names_the_kl_over_the_tools_tokens_and_the_estimator_mistakes():
    fails_with("masked_kl_mean", kl_with_attention, "the KL counted the environment's tokens")
    fails_with("masked_kl_mean", kl_no_mask, "no mask at all")
    fails_with("masked_kl_mean", kl_zeroed_mean, "then the mean taken over all of them")
    fails_with("masked_kl_mean", kl_episode_means, "the mean of each episode's mean")
    fails_with("masked_kl_mean", kl_reversed, "k3 the wrong way round")
    fails_with("masked_kl_mean", kl_k1, "that is k1")


# --- add_turn ------------------------------------------------------------------------------------------


def reply(observation, tokenizer):
    return [(tuple(tokenizer.encode(observation, add_special_tokens=False)), False)] if observation else []


def retokenised(segments, turn_ids, observation, tokenizer):
    again = tokenizer.encode(tokenizer.decode(list(turn_ids)), add_special_tokens=False)
    return list(segments) + [(tuple(again), True)] + reply(observation, tokenizer)


def reply_as_model(segments, turn_ids, observation, tokenizer):
    return list(segments) + [(tuple(turn_ids), True)] + [(ids, True) for ids, _ in reply(observation, tokenizer)]


def reply_first(segments, turn_ids, observation, tokenizer):
    return list(segments) + reply(observation, tokenizer) + [(tuple(turn_ids), True)]


def history_dropped(segments, turn_ids, observation, tokenizer):
    return [(tuple(turn_ids), True)] + reply(observation, tokenizer)


def eos_dropped(segments, turn_ids, observation, tokenizer):
    kept = tuple(t for t in turn_ids if t != tokenizer.eos_token_id)
    return list(segments) + [(kept, True)] + reply(observation, tokenizer)


def text_kept(segments, turn_ids, observation, tokenizer):
    return list(segments) + [(tuple(turn_ids), True)] + ([(observation, False)] if observation else [])


def empty_reply_added(segments, turn_ids, observation, tokenizer):
    return list(segments) + [(tuple(turn_ids), True), (tuple(tokenizer.encode(observation, add_special_tokens=False)), False)]


def by_model_as_int(segments, turn_ids, observation, tokenizer):
    return [(ids, int(m)) for ids, m in S.add_turn(segments, turn_ids, observation, tokenizer)]


def test_add_turn_names_the_round_trip_and_the_reply_mistakes():
    message = fails_with("add_turn", retokenised, "the model's turn was re-tokenised")
    assert "case 1/3" in message and "got      [[15.0, 18.0, 16.0, 7.0], [1.0, 1.0, 1.0, 0.0]]" in message
    fails_with("add_turn", reply_as_model, "the reply was marked as the model's")
    fails_with("add_turn", reply_first, "the reply comes AFTER the turn")
    assert "case 2/3" in fails_with("add_turn", history_dropped, "return the whole episode so far")
    assert "case 3/3" in fails_with("add_turn", eos_dropped, "the turn's EOS is gone")
    fails_with("add_turn", text_kept, "encode the tool's text")
    assert "case 3/3" in fails_with("add_turn", empty_reply_added, "add the tool's reply only when it has tokens")
    fails_with("add_turn", by_model_as_int, "True for the model's turn")


# --- notebook 11 and its solutions -----------------------------------------------------------------

SCRIPT = "make_11_multi_turn_episodes.py"


@pytest.fixture
def make_11(monkeypatch):
    return load_generator(monkeypatch, SCRIPT)  # as `python notebooks/make_11_multi_turn_episodes.py` runs it


def test_notebook_11_and_its_solutions_are_what_the_generator_writes(make_11):
    assert_written_by(make_11, SCRIPT)


def test_notebook_11_ships_stubs_that_raise_with_the_solutions_signature_and_the_solutions_pass(make_11, capsys):
    """Each stub raises NotImplementedError inside its check (the signature test passed), each solution cell
    is the course's solution and passes; every check of checks_episodes has one stub."""
    assert_stubs_raise_and_solutions_pass(make_11, C, capsys)


def test_every_prediction_of_notebook_11_is_answered_after_code(make_11):
    assert_predictions_answered(make_11, 2)
