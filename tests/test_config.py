"""Config validation: one line naming the field and the rule."""

import dataclasses

import pytest

from rlhf_scratch.config import PRESETS, ConfigError, RLHFArgs, make_args


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(batch_size=10, num_minibatches=4), "batch_size: must be divisible by num_minibatches (10 % 4 != 0)"),
        (dict(kl_coef=-1.0), "kl_coef: must be >= 0; got -1.0"),
        (dict(vf_coef=-0.1), "vf_coef: must be >= 0; got -0.1"),
        (dict(ent_coef=-0.001), "ent_coef: must be >= 0; got -0.001"),
        (dict(clip_coef=1.5), "clip_coef: must be in (0, 1); got 1.5"),
        (dict(temperature=0.0), "temperature: must be > 0; got 0.0"),
        (dict(task="poetry"), "task: must be one of sentiment, vader, periods; got 'poetry'"),
        (dict(direction="up"), "direction: must be 'pos' or 'neg'; got 'up'"),
        (dict(total_phases=0), "total_phases: must be >= 1; got 0"),
        (dict(advantage="mc"), "advantage: must be one of one_step, gae; got 'mc'"),
        (dict(gae_lambda=1.5), "gae_lambda: must be in [0, 1]; got 1.5"),
        (dict(prefix="", prepend_bos=False), "prefix: must be non-empty when prepend_bos is False"),
    ],
)
def test_bad_values_fail_with_one_line_naming_the_field(overrides, message):
    with pytest.raises(ConfigError) as err:
        make_args("tiny", **overrides)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(message), text


def test_unknown_preset_and_unknown_field():
    with pytest.raises(ConfigError, match=r"^preset: must be one of tiny, gpt2; got 'gpt5'$"):
        make_args("gpt5")
    with pytest.raises(ConfigError, match=r"^kl_coeff: is not an RLHFArgs field$"):
        make_args("tiny", kl_coeff=1.0)


def test_presets_and_overrides():
    tiny = make_args("tiny")
    assert (tiny.model, tiny.reward_model, tiny.preset) == ("tiny", "tiny", "tiny")
    gpt2 = make_args("gpt2", kl_coef=1.0)
    assert (gpt2.model, gpt2.reward_model) == ("gpt2", "lvwerra/distilbert-imdb")
    assert gpt2.kl_coef == 1.0, "a command-line value must win over the preset"
    assert gpt2.batch_size == PRESETS["gpt2"]["batch_size"]
    # None means "not given on the command line": the preset/default stays
    assert make_args("tiny", kl_coef=None).kl_coef == RLHFArgs().kl_coef


def test_dict_round_trip():
    args = make_args("tiny", seed=7, direction="neg")
    assert RLHFArgs.from_dict(args.to_dict()) == args
    with pytest.raises(ConfigError, match="^bogus: is not an RLHFArgs field$"):
        RLHFArgs.from_dict({**args.to_dict(), "bogus": 1})


def test_every_field_is_documented():
    from rlhf_scratch.train import field_docs

    docs = field_docs(RLHFArgs)
    missing = [f.name for f in dataclasses.fields(RLHFArgs) if not docs.get(f.name)]
    assert missing == [], f"fields without a docstring: {missing}"
