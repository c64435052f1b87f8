"""Exercises 07 (the value head module, the generation loop, the replay memory): each solution written to be
read (course/solutions_parts.py) gives the package's numbers, each check names every mistake it plants, a few
mistakes written out as a learner writes them are named too, and the KV cache is optional.

The generic tests (each check passes its solution, no mistake gives the answer, the notebooks are what the
generators write, the solutions notebook passes) are in test_course_checks.py and test_course_solutions.py.
"""

from unittest import mock

import pytest
import torch
from test_course_checks import fails_with

from rlhf_scratch.course import checks_parts, solutions_parts
from rlhf_scratch.course.checks_parts import PAD, _generate_planted, _greedy, _MemoryPlanted, _ValueHeadPlanted

# --- the solutions are the package's -----------------------------------------------------------


def test_the_value_head_solution_is_the_packages(one_thread):
    from rlhf_scratch.algorithms.ppo import TransformerWithValueHead

    ids, mask = checks_parts._left_padded()
    for detach in (True, False):
        base = checks_parts.random_model()
        package, mine = TransformerWithValueHead(base, detach), solutions_parts.TransformerWithValueHead(base, detach)
        mine.value_head.load_state_dict(package.value_head.state_dict())
        (logits, values), (my_logits, my_values) = package(ids, mask.long()), mine(ids, mask.long())
        assert torch.equal(logits, my_logits) and torch.equal(values, my_values)
        values[mask].sum().backward()
        trunk = [p.grad for p in base.parameters()]
        assert all(g is None for g in trunk) == detach  # the trunk learns from V only when not detached


@pytest.mark.parametrize("use_cache", [False, True])
def test_the_generation_solution_writes_the_packages_tokens(use_cache, one_thread):
    """Greedy (sample_next_token replaced by argmax in the package's loop), with an EOS each row says: the same
    ids and masks as rollout.generation.generate on the same left-padded prompts."""
    from rlhf_scratch.rollout import generation

    model, eos = checks_parts.random_model(), checks_parts._eos()
    model.tokenizer = mock.Mock(pad_token_id=PAD, eos_token_id=eos, name_or_path="")
    ids, mask, completion_mask = solutions_parts.generate(model, checks_parts.prompts(), 6, _greedy, PAD, eos, use_cache)
    with mock.patch.object(generation, "sample_next_token", lambda logits, *args: logits.argmax(-1)):
        package_ids, package_mask = generation.generate(model, ids[:, :5], mask[:, :5], 6, stop_at_eos=True,
                                                        kv_cache="transformer_lens")
    assert torch.equal(ids[:, 5:], package_ids) and torch.equal(completion_mask, package_mask)
    assert completion_mask.sum(1).tolist() == [2, 3, 1]  # each row ends with the EOS, at its own step


def test_the_replay_memory_solution_is_the_packages():
    from rlhf_scratch.core.memory import ReplayMemory

    inputs = checks_parts._rollout()
    package = list(ReplayMemory(*inputs).get_minibatches(torch.Generator().manual_seed(3)))
    mine = list(solutions_parts.ReplayMemory(*inputs).get_minibatches(torch.Generator().manual_seed(3)))
    assert len(mine) == len(package) == 6
    for a, b in zip(mine, package):
        for field in checks_parts.FIELDS:
            assert torch.equal(getattr(a, field), getattr(b, field)), field


# --- every planted mistake is named -------------------------------------------------------------

HEAD_MISTAKES = {"wrong_hook": "BEFORE the final LayerNorm", "mask_dropped": "attention mask was not passed on",
                 "not_detached": "must read resid.detach()", "always_detached": "detach only when detach_value_head",
                 "hook_left": "a hook stayed on the base model", "graph_kept": "the values stayed on the module"}
GENERATE_MISTAKES = {"right_pad": "padded on the RIGHT", "positions_unshifted": "positions not shifted for left padding",
                     "positions_from_one": "positions off by one", "pads_attended": "the pads are attended",
                     "cache_position_repeated": "KV cache position off by one",
                     "cache_position_padded": "counted from the padded width", "cache_refed": "feed only the new token",
                     "eos_dropped": "the EOS left out of the completion mask", "after_eos": "a row that said EOS kept going"}
MEMORY_MISTAKES = {"same_order": "the same shuffle in every epoch", "overlapping": "the minibatches overlap",
                   "not_shuffled": "the rows were not shuffled", "size_for_count": "num_minibatches is how MANY",
                   "rows_dropped": "rows dropped", "generator_ignored": "the generator was ignored",
                   "fields_misaligned": "come from different rows", "returns_next_state": "returns off by one",
                   "returns_prompt": "the returns read the prompt's values",
                   "returns_advantages": "the returns are the advantages alone",
                   "returns_values": "the returns are the old values alone", "graph_kept": "keeps the gradient graph"}


@pytest.mark.parametrize("mistake", HEAD_MISTAKES)
def test_the_value_head_check_names_each_planted_mistake(mistake):
    class Planted(_ValueHeadPlanted):
        def __init__(self, base, detach_value_head=True):
            super().__init__(base, detach_value_head, mistake)

    fails_with("TransformerWithValueHead", Planted, HEAD_MISTAKES[mistake])


@pytest.mark.parametrize("mistake", GENERATE_MISTAKES)
def test_the_generation_check_names_each_planted_mistake(mistake):
    def planted(model, prompts, gen_len, next_token, pad_id, eos_id=None, use_cache=False):
        return _generate_planted(model, prompts, gen_len, next_token, pad_id, eos_id, use_cache, mistake=mistake)

    fails_with("generate", planted, GENERATE_MISTAKES[mistake])


@pytest.mark.parametrize("mistake", MEMORY_MISTAKES)
def test_the_replay_memory_check_names_each_planted_mistake(mistake):
    class Planted(_MemoryPlanted):
        def __init__(self, sample_ids, attention_mask, completion_mask, logprobs, advantages, values,
                     num_minibatches, batches_per_learning_phase):
            super().__init__(sample_ids, attention_mask, completion_mask, logprobs, advantages, values,
                             num_minibatches, batches_per_learning_phase, mistake=mistake)

    fails_with("ReplayMemory", Planted, MEMORY_MISTAKES[mistake])


# --- mistakes as a learner writes them ----------------------------------------------------------


def test_a_value_head_on_the_logits_is_named():
    class OnLogits(solutions_parts.TransformerWithValueHead):
        def forward(self, input_ids, attention_mask=None):
            logits = self.base(input_ids, attention_mask=attention_mask)
            return logits, self.value_head(logits).squeeze(-1)

    fails_with("TransformerWithValueHead", OnLogits, "applied to the final logits")


def test_values_not_squeezed_are_named():
    class Unsqueezed(solutions_parts.TransformerWithValueHead):
        def forward(self, input_ids, attention_mask=None):
            logits, values = super().forward(input_ids, attention_mask)
            return logits, values[..., None]

    fails_with("TransformerWithValueHead", Unsqueezed, "squeeze the head's last dimension")


def test_a_value_head_of_another_shape_is_named():
    class OneLayer(solutions_parts.TransformerWithValueHead):
        def __init__(self, base, detach_value_head=True):
            super().__init__(base, detach_value_head)
            self.value_head = torch.nn.Linear(base.cfg.d_model, 1)

    fails_with("TransformerWithValueHead", OneLayer, "nn.Sequential(nn.Linear(d_model, 4 * d_model)")


def test_a_loop_written_with_pad_sequence_is_named_as_right_padding():
    """torch's pad_sequence pads on the right: the learner's first try, positions and all otherwise right."""
    def right_padded(model, prompts, gen_len, next_token, pad_id, eos_id=None, use_cache=False):
        ids = torch.nn.utils.rnn.pad_sequence(prompts, batch_first=True, padding_value=pad_id)
        mask = torch.nn.utils.rnn.pad_sequence([torch.ones(len(p), dtype=torch.bool) for p in prompts], batch_first=True)
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        completion_mask = torch.ones((len(prompts), gen_len), dtype=torch.bool)
        for _ in range(gen_len):
            token = next_token(checks_parts.forward_at(model, ids, positions, mask)[:, -1])
            ids = torch.cat([ids, token[:, None]], 1)
            positions = torch.cat([positions, positions[:, -1:] + 1], 1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
        return ids, mask, completion_mask

    fails_with("generate", right_padded, "padded on the RIGHT")


def test_a_generator_reused_across_epochs_is_named():
    class OneShuffle(solutions_parts.ReplayMemory):
        def get_minibatches(self, generator=None):
            order = torch.randperm(self.sample_ids.shape[0], generator=generator)  # drawn once, before the epochs
            for _ in range(self.batches_per_learning_phase):
                for rows in order.view(self.num_minibatches, -1):
                    yield checks_parts.ReplayMinibatch(self.sample_ids[rows], self.attention_mask[rows],
                                                       self.completion_mask[rows], self.logprobs[rows],
                                                       self.advantages[rows], self.returns[rows])

    fails_with("ReplayMemory", OneShuffle, "the same shuffle in every epoch")


# --- the KV cache is optional ------------------------------------------------------------------


def test_a_loop_without_the_cache_passes_and_the_line_says_the_cache_was_not_run(capsys):
    def without_cache(model, prompts, gen_len, next_token, pad_id, eos_id=None, use_cache=False):
        if use_cache:
            raise NotImplementedError("the cache is optional")
        return solutions_parts.generate(model, prompts, gen_len, next_token, pad_id, eos_id)

    checks_parts.check_generate(without_cache)
    assert capsys.readouterr().out == ("check_generate: all 2 cases pass\n  (the KV cache, optional, is not written: "
                                       "use_cache=True raised NotImplementedError; its 2 cases not run)\n")


def test_a_stub_still_raises_not_implemented():
    def stub(model, prompts, gen_len, next_token, pad_id, eos_id=None, use_cache=False):
        raise NotImplementedError

    with pytest.raises(NotImplementedError):
        checks_parts.check_generate(stub)


# --- notebook 06 trains with the learner's parts --------------------------------------------------


def test_notebook_06_takes_the_learners_parts_where_their_checks_pass_and_says_whose_each_is(capsys):
    from rlhf_scratch.algorithms.ppo import TransformerWithValueHead
    from rlhf_scratch.core.memory import ReplayMemory
    from rlhf_scratch.course.learner_parts import learner_parts

    shipped = learner_parts("exercises/07_parts_exercises.ipynb")  # the stubs: nothing written yet
    assert shipped.TransformerWithValueHead is TransformerWithValueHead and shipped.ReplayMemory is ReplayMemory
    assert shipped.generate is solutions_parts.generate
    assert capsys.readouterr().out.splitlines() == [
        "TransformerWithValueHead: the package's (yours is not written)",
        "generate: the course's solution, solutions_parts.generate (yours is not written)",
        "ReplayMemory: the package's (yours is not written)"]
    solved = learner_parts("exercises/solutions/07_parts_solutions.ipynb")
    assert solved.whose == dict.fromkeys(("TransformerWithValueHead", "generate", "ReplayMemory"), "yours")
    assert solved.TransformerWithValueHead is not solutions_parts.TransformerWithValueHead  # the notebook's own class
    assert capsys.readouterr().out.splitlines()[-1] == "ReplayMemory: yours (its check passes)"


def test_a_rollout_made_with_the_parts_is_the_packages_rollout(one_thread):
    """The same seed, the tiny preset: rollout_with_parts (the solutions' generate and the package's value head)
    samples the tokens make_rollout samples, and scores them alike."""
    from dataclasses import replace

    from rlhf_scratch.algorithms.ppo import TransformerWithValueHead
    from rlhf_scratch.config import make_args
    from rlhf_scratch.core.memory import ReplayMemory
    from rlhf_scratch.course.learner_parts import Parts, rollout_with_parts
    from rlhf_scratch.models.loading import load_lm
    from rlhf_scratch.reward.functions import reward_fn_sentiment_imdb
    from rlhf_scratch.rollout.phase import make_rollout

    args = replace(make_args("tiny"), gen_len=6)
    torch.manual_seed(0)
    lm, ref = load_lm("tiny").eval(), load_lm("tiny").eval()
    policy = TransformerWithValueHead(lm)
    prompts = ["This movie was really", "I", "The film"]
    parts = Parts(TransformerWithValueHead, solutions_parts.generate, ReplayMemory, {})
    torch.manual_seed(1)
    mine = rollout_with_parts(parts, policy, lm, ref, prompts, reward_fn_sentiment_imdb, args)
    torch.manual_seed(1)
    package = make_rollout(policy, ref, prompts, reward_fn_sentiment_imdb, gen_len=6, top_k=args.top_k)
    assert torch.equal(mine.sample_ids, package.sample_ids) and torch.equal(mine.attention_mask, package.attention_mask)
    assert mine.prompt_ids.shape[1] == package.prefix_len == 5  # the longest prompt: BOS and four words
    for field in ("logprobs", "ref_logprobs", "kl", "entropy", "values", "rewards"):
        assert torch.allclose(getattr(mine, field), getattr(package, field), atol=1e-4), field
