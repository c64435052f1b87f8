"""Issue 58, items 1, 2 and 4: the environment contract and its registry (`--env`, `--max-turns`), episodes
token in and token out (`rollout/episodes.py`), and the calculator (`reward/calculator.py`)."""

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformers import AutoTokenizer

from rlhf_scratch.commands.arithmetic_lm import build_tokenizer
from rlhf_scratch.config import ConfigError, make_args, registry
from rlhf_scratch.models.loading import load_lm
from rlhf_scratch.reward.calculator import MAX_CALLS, CalculatorError, CalculatorFactory, evaluate
from rlhf_scratch.rollout.environment import Environment, EnvironmentFactory, Step, make_environment_factory
from rlhf_scratch.rollout.episodes import Episode, generate_episodes, take_turn
from rlhf_scratch.rollout.phase import generate_sequences
from rlhf_scratch.rollout.rl_dataset import Prompt

pytestmark = pytest.mark.usefixtures("one_thread")
SIBLING = build_tokenizer(calculator=True)  # ids 0-14 as the shipped one, then <calc> 15, </calc> 16, ? 17
OPEN, CLOSE, ERR, EOS = 15, 16, 17, 0


def ids(text: str) -> tuple[int, ...]:
    return tuple(SIBLING.encode(text, add_special_tokens=False))


# --- item 1: the contract, the registry, the flags ---------------------------------------------------


def test_env_and_max_turns_are_validated_in_one_line_naming_the_choices():
    assert registry.env_names() == ("calculator",)
    assert make_args("tiny", algo="grpo", task="arithmetic", env="calculator", max_turns=3).env == "calculator"
    for overrides, message in [
        (dict(env="abacus"), "env: must be one of calculator (or empty: no environment); got 'abacus'"),
        (dict(env="calculator", max_turns=0), "max_turns: must be >= 1; got 0"),
        (dict(max_turns=2), "max_turns: needs --env NAME (without an environment an episode is one turn); got max_turns 2"),
        (dict(env="calculator", stop_at_eos=False), "stop_at_eos: must be on with --env"),
    ]:
        with pytest.raises(ConfigError) as err:
            make_args("tiny", algo="grpo", task="arithmetic", **overrides)
        assert "\n" not in str(err.value) and str(err.value).startswith(message), str(err.value)


def test_the_registered_calculator_meets_the_contract():
    args = make_args("tiny", algo="grpo", task="arithmetic", env="calculator")
    factory = make_environment_factory(args, SIBLING)
    assert isinstance(factory, EnvironmentFactory) and factory.stop_ids == (CLOSE,)
    env = factory(Prompt("47*85=", {"ground_truth": "3995"}))
    assert isinstance(env, Environment) and env.reset() == ()
    assert make_environment_factory(make_args("tiny", algo="grpo", task="arithmetic"), SIBLING) is None


# --- item 4: the calculator ----------------------------------------------------------------------------


def test_evaluate_parses_digits_plus_minus_times_itself():
    assert [evaluate(e) for e in ("47*85", "2+3*4-5", "3-10", "7", "0*12+1")] == [3995, 9, -7, 7, 1]
    for bad in ("", "4+", "*2", "2**3", "2+-3", "2 3", "9" * 13, "999999*999999*9", "1/0", "__import__('os')"):
        with pytest.raises(CalculatorError):
            evaluate(bad)


@pytest.mark.parametrize("turn, observation", [
    ("<calc>47*85</calc>", "3995"),
    ("<calc>3-10</calc>", "-7"),
    ("12<calc>2+3*4</calc>", "14"),           # text before the call is the model's; the call is after the last <calc>
    ("<calc>4+</calc>", "?"),                 # malformed
    ("<calc></calc>", "?"),                   # empty
    ("47</calc>", "?"),                       # a close without an open
    ("<calc>999999*999999*9</calc>", "?"),    # too large
])
def test_a_call_is_answered_with_its_result_or_the_error_token(turn, observation):
    env = CalculatorFactory(SIBLING)(Prompt("47*85="))
    step = env.step(ids(turn))
    assert step == Step(observation=ids(observation + "=")) and env.calls == 1 and env.errors == (observation == "?")


def test_an_unclosed_call_is_an_error_an_answer_ends_the_episode_and_calls_are_limited():
    env = CalculatorFactory(SIBLING)(Prompt("47*85="))
    assert env.step(ids("<calc>47*8") + (EOS,)) == Step(observation=(ERR, *ids("="))) and env.errors == 1  # never closes
    assert env.step(ids("3995") + (EOS,)) == Step(done=True) and env.calls == 1
    answers = [env.step(ids("<calc>1+1</calc>")).observation for _ in range(MAX_CALLS)]
    assert answers == [ids("2=")] * (MAX_CALLS - 1) + [ids("?=")]  # the first call (unclosed) counted: 3 calls in all


def test_the_shipped_tokenizer_has_no_call_so_the_calculator_has_no_stop_token():
    shipped = build_tokenizer()
    factory = CalculatorFactory(shipped)
    assert factory.stop_ids == ()
    assert factory(Prompt("47+85=")).step(tuple(shipped.encode("132", add_special_tokens=False)) + (0,)) == Step(done=True)


# --- item 2: token in, token out -----------------------------------------------------------------------


class Echo:
    """A test environment: answers every turn ending in </calc> with a fixed observation."""

    def __init__(self, observation):
        self.observation, self.turns = observation, []

    def reset(self):
        return ()

    def step(self, turn_ids):
        self.turns.append(turn_ids)
        return Step(observation=self.observation) if turn_ids[-1] == CLOSE else Step(done=True, reward=1.5)


def test_take_turn_appends_the_observation_and_ends_at_eos_max_turns_or_the_budget():
    env, episode = Echo(ids("3995")), Episode()
    take_turn(episode, env, ids("<calc>47*85</calc>"), (EOS,), gen_len=20, max_turns=4)
    take_turn(episode, env, ids("3995") + (EOS,), (EOS,), gen_len=20, max_turns=4)
    assert [(s.ids, s.by_model) for s in episode.segments] == [
        (ids("<calc>47*85</calc>"), True), (ids("3995"), False), (ids("3995") + (EOS,), True)]
    assert episode.done and episode.reward == 1.5 and episode.turns == 2
    capped = Episode()
    take_turn(capped, Echo(ids("3995")), ids("<calc>1</calc>"), (EOS,), gen_len=20, max_turns=1)
    assert capped.done and capped.env_tokens == 0, "after the last allowed turn no observation is appended"
    cut = Episode()
    take_turn(cut, Echo(ids("3995")), ids("<calc>1</calc>"), (EOS,), gen_len=5, max_turns=4)
    assert cut.done and cut.ids == ids("<calc>1</calc>") + ids("39"), "the observation is cut at the budget"


def test_a_decode_encode_round_trip_that_changes_tokens_cannot_change_what_is_trained():
    # The model spelled the call's opening one character at a time where the vocabulary also has the whole
    # token: decoded and encoded again, "<calc>" merges into one token (the bug of verl#3960, trl#5145).
    merging = build_tokenizer(calculator=True)
    sampled = ids("1") + ids("<calc>") + ids("2*3") + (CLOSE,)
    spelled = (2, 15, 3, 13, 4, CLOSE)  # 1 <calc> 2 * 3 </calc>, as sampled
    assert sampled == spelled
    reencoded = tuple(merging.encode(merging.decode(list(sampled)), add_special_tokens=False))
    by_hand = (2,) + sampled[1:]
    assert reencoded == by_hand  # this vocabulary round-trips: build one that does not
    merging.add_tokens(["2*3"])  # a merge across what the model sampled as three tokens
    reencoded = tuple(merging.encode(merging.decode(list(sampled)), add_special_tokens=False))
    assert reencoded != sampled and len(reencoded) == len(sampled) - 2  # the data can tell
    env, episode = CalculatorFactory(merging)(Prompt("2*3=")), Episode()
    take_turn(episode, env, sampled, (EOS,), gen_len=20, max_turns=4)
    assert episode.segments[0].ids == sampled and episode.mask[: len(sampled)] == (True,) * len(sampled)
    assert episode.segments[1].ids == tuple(merging.encode("6=", add_special_tokens=False)) and not episode.segments[1].by_model


@pytest.fixture(scope="module")
def sibling_lm(tmp_path_factory):
    """A random 1-layer model over the sibling vocabulary, biased towards calling: every sample is checked."""
    folder = tmp_path_factory.mktemp("sibling_tokenizer")
    SIBLING.save_pretrained(folder)  # TransformerLens wants a tokenizer it can load again
    cfg = HookedTransformerConfig(n_layers=1, d_model=16, n_ctx=32, d_head=4, n_heads=4, d_mlp=32, d_vocab=len(SIBLING),
                                  act_fn="gelu", normalization_type="LN", seed=0)
    lm = HookedTransformer(cfg, tokenizer=AutoTokenizer.from_pretrained(folder))
    with torch.no_grad():
        lm.unembed.b_U[[OPEN, CLOSE]] += 2.0
    return lm


def test_episodes_are_the_sampled_tokens_and_the_environments_in_order(sibling_lm):
    torch.manual_seed(1)
    factory = CalculatorFactory(SIBLING)
    prompts = [Prompt(p, {"ground_truth": "0"}) for p in ("47*85=", "3+4=", "9-2=", "12*3=")]
    rollout, episodes = generate_episodes(sibling_lm, prompts, factory, num_generations=4, gen_len=24, max_turns=3,
                                          temperature=1.5)
    assert len(episodes) == 16 and rollout.completion_ids.shape == (16, 24)
    assert sum(e.env_tokens > 0 for e in episodes) >= 3, "the biased model called the calculator"
    for row, episode in enumerate(episodes):
        n = len(episode.ids)
        assert rollout.completion_ids[row, :n].tolist() == list(episode.ids)
        assert rollout.completion_mask[row].tolist() == list(episode.mask) + [False] * (24 - n)
        replay = factory(prompts[row // 4])  # the same environment, given the model's turns, says the same
        for seg, nxt in zip(episode.segments, episode.segments[1:] + [None]):
            if seg.by_model:
                assert seg.ids[-1] in (EOS, CLOSE) or n == 24 or episode.turns == 3
                obs = replay.step(seg.ids).observation
                if nxt is not None:
                    assert not nxt.by_model and nxt.ids == obs[: len(nxt.ids)]
        assert episode.turns <= 3 and episode.done
        assert rollout.completions[row] == SIBLING.decode([t for t in episode.last_turn if t != EOS])
    assert rollout.lengths.tolist() == [e.model_tokens for e in episodes]


def test_with_no_call_possible_an_episode_is_the_single_turn_rollout_token_for_token():
    lm = load_lm("arithmetic").eval()
    prompts = [Prompt(p, {"ground_truth": g}) for p, g in (("47+85=", "132"), ("93-70=", "23"), ("22+72=", "94"))]
    torch.manual_seed(5)
    single = generate_sequences(lm, prompts, num_generations=4, gen_len=6, stop_at_eos=True)
    torch.manual_seed(5)
    episode, episodes = generate_episodes(lm, prompts, CalculatorFactory(lm.tokenizer), num_generations=4, gen_len=6,
                                          max_turns=4)
    assert all(e.turns == 1 for e in episodes)
    for name in ("prompt_ids", "completion_ids", "completion_mask", "attention_mask"):
        assert torch.equal(getattr(episode, name), getattr(single, name)), name
    assert episode.completions == single.completions and episode.prompts == single.prompts


# --- the sibling model's pieces (commands/arithmetic_lm.py --calculator) ----------------------------------


def test_a_call_demonstration_learns_the_call_and_the_answer_not_the_calculators_reply():
    import random

    from rlhf_scratch.commands.arithmetic_lm import ArithmeticLMArgs, training_batch

    args = ArithmeticLMArgs(batch_size=6, ops="*", calculator=1.0)
    encode = lambda text: SIBLING.encode(text, add_special_tokens=False)  # noqa: E731
    rows, learned = training_batch(random.Random(0), args, set(), EOS, encode, calls=(OPEN, CLOSE))
    text = SIBLING.decode(rows[0].tolist())  # e.g. <|endoftext|>47*85=<calc>47*85</calc>3995=3995<|endoftext|>
    prompt, rest = text.removeprefix("<|endoftext|>").split("=", 1)
    truth = str(evaluate(prompt))
    assert rest.startswith(f"<calc>{prompt}</calc>{truth}={truth}<|endoftext|>")
    n_prompt, n_call, n_result = len(prompt) + 1, len(prompt) + 2, len(truth) + 1  # the reply and its end =, not learned
    assert learned[0, : n_prompt + n_call + n_result + len(truth) + 1].tolist() == (
        [False] * n_prompt + [True] * n_call + [False] * n_result + [True] * (len(truth) + 1))
    plain = ArithmeticLMArgs(batch_size=6, ops="*")  # without --calculator: the stream as shipped, draw for draw
    a, b = training_batch(random.Random(0), plain, set(), EOS, encode), training_batch(random.Random(0), plain, set(), EOS, encode, None)
    assert torch.equal(a[0], b[0]) and OPEN not in a[0].tolist()


class Scripted:
    """A stand-in model that writes `script` after the prompt, whatever the calculator feeds it in between."""

    def __init__(self, script, start):
        self.script, self.start = script, start

    def __call__(self, ids):
        logits = torch.full((ids.shape[0], ids.shape[1], len(SIBLING)), -1e9)
        logits[:, -1, self.script[min(ids.shape[1] - self.start, len(self.script) - 1)]] = 0.0
        return type("Out", (), {"logits": logits})()


def test_the_pretraining_sampler_feeds_the_calculators_reply_and_reads_the_last_turn():
    from rlhf_scratch.commands.arithmetic_lm import sample_answers

    prompt = "4*5="  # <eos> 4 * 5 = : the completion starts at position 5
    script = [OPEN, *ids("4*5"), CLOSE, 1, 1, 1, *ids("20"), EOS]  # the three 1s are where the reply 2 0 = is fed
    out = sample_answers(Scripted(script, 5), SIBLING, [prompt], 2, torch.Generator().manual_seed(0), max_new=12,
                         tools=CalculatorFactory(SIBLING))
    assert out == [["20", "20"]]
    plain = sample_answers(Scripted(script, 5), SIBLING, [prompt], 1, torch.Generator().manual_seed(0), max_new=12)
    assert plain == [["<calc>4*5</calc>00020"]]  # without the calculator the model's own tokens stand there
