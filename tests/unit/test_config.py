"""Config validation: one line naming the field and the rule."""

import dataclasses

import pytest
from toy_algorithm import algorithms, registered

from rlhf_scratch.config import PRESETS, ConfigError, RLHFArgs, make_args


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(batch_size=10, num_minibatches=4), "batch_size: must be divisible by num_minibatches (10 % 4 != 0)"),
        (dict(kl_coef=-1.0), "beta: must be a finite number >= 0; got -1.0"),
        (dict(kl_coef=float("nan")), "beta: must be a finite number >= 0; got nan"),
        (dict(base_lr=float("inf")), "base_lr: must be a finite number >= 0; got inf"),
        (dict(vf_coef=-0.1), "vf_coef: must be a finite number >= 0; got -0.1"),
        (dict(ent_coef=-0.001), "ent_coef: must be a finite number >= 0; got -0.001"),
        (dict(top_k=-1), "top_k: must be >= 0 (0 = the whole vocabulary); got -1"),
        (dict(seed=-1), "seed: must be >= 0; got -1"),
        (dict(batch_size=4, num_minibatches=4, gen_len=1),
         "batch_size: a minibatch must hold at least 2 tokens to normalise advantages; "
         "batch_size / num_minibatches x gen_len = 1 x 1 = 1"),
        (dict(clip_coef=1.5), "clip_coef: must be in (0, 1); got 1.5"),
        (dict(temperature=0.0), "temperature: must be > 0; got 0.0"),
        (dict(task="poetry"), "task: must be one of sentiment, vader, periods, first_token, arithmetic; got 'poetry'"),
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
    with pytest.raises(ConfigError, match=r"^algo: must be one of ppo, rloo, online_dpo, grpo; got 'a2c'$"):
        make_args("tiny", algo="a2c")
    with pytest.raises(ConfigError, match=r"^kl_coef: is not an RLOOArgs field$"):
        make_args("tiny", algo="rloo", kl_coef=1.0)


@pytest.mark.parametrize(
    "algo, overrides, message",
    [
        ("rloo", dict(num_generations=1), "num_generations: must be >= 2"),
        ("rloo", dict(batch_size=64, num_generations=3), "batch_size: must be divisible by num_generations (64 % 3 != 0)"),
        ("rloo", dict(epsilon_low=1.0), "epsilon_low: must be in (0, 1); got 1.0"),
        ("rloo", dict(beta=float("nan")), "beta: must be a finite number >= 0; got nan"),
        ("online_dpo", dict(batch_size=8, num_minibatches=8), "num_minibatches: must keep whole pairs in a minibatch"),
        ("online_dpo", dict(loss_type="hinge"), "loss_type: must be one of sigmoid, ipo; got 'hinge'"),
        ("online_dpo", dict(judge="gpt4"), "judge: must be one of tiny, vader, rule; got 'gpt4'"),
        ("online_dpo", dict(beta=0.0), "beta: must be > 0; got 0.0"),
    ],
)
def test_rloo_and_dpo_fields_are_validated(algo, overrides, message):
    with pytest.raises(ConfigError) as err:
        make_args("tiny", algo=algo, **overrides)
    assert str(err.value).startswith(message), str(err.value)


def test_presets_apply_only_the_fields_an_algorithm_has():
    rloo = make_args("gpt2", algo="rloo")
    assert (rloo.model, rloo.batch_size, rloo.base_lr) == ("gpt2", 128, 2e-5)
    assert not hasattr(rloo, "kl_coef")


def test_stop_at_eos_default_depends_on_the_prompt_source():
    assert make_args("tiny").eos_stops() is False, "the blog's single prefix: fixed-length samples"
    assert make_args("tiny", prompts="rt").eos_stops() is True
    assert make_args("tiny", prompts="rt", stop_at_eos=False).eos_stops() is False


def test_presets_and_overrides():
    tiny = make_args("tiny")
    assert (tiny.model, tiny.reward_model, tiny.preset) == ("tiny", "tiny", "tiny")
    gpt2 = make_args("gpt2", kl_coef=1.0)
    assert (gpt2.model, gpt2.reward_model) == ("gpt2", "lvwerra/distilbert-imdb")
    assert gpt2.beta == 1.0, "a command-line value must win over the preset"
    assert gpt2.batch_size == PRESETS["gpt2"]["batch_size"]
    # None means "not given on the command line": the preset/default stays
    assert make_args("tiny", kl_coef=None).beta == RLHFArgs().beta


def test_dict_round_trip():
    args = make_args("tiny", seed=7, direction="neg")
    assert RLHFArgs.from_dict(args.to_dict()) == args
    rloo = make_args("tiny", algo="rloo", num_generations=8)
    assert rloo.to_dict()["algo"] == "rloo"
    from rlhf_scratch.config import CommonArgs

    assert CommonArgs.from_dict(rloo.to_dict()) == rloo, "the saved algo picks the args class"
    with pytest.raises(ConfigError, match="^bogus: is not an RLHFArgs field$"):
        RLHFArgs.from_dict({**args.to_dict(), "bogus": 1})


@pytest.mark.parametrize("algo", algorithms())  # every registered algorithm, and the toy one
def test_every_field_is_documented(algo, capsys):
    """Each flag's help (tyro reads the docstring under each field) says more than its default."""
    import re

    from rlhf_scratch.commands.train import main
    from rlhf_scratch.config import args_class

    with registered(algo):
        assert main(["--algo", algo, "--help"]) == 0
        fields = dataclasses.fields(args_class(algo))
    text = " ".join(capsys.readouterr().out.replace("│", " ").replace("╰", " ").split())
    missing = []
    for f in fields:
        flag = "--" + f.name.replace("_", "-")
        after = re.split(re.escape(flag) + r"(?:, --no-" + re.escape(flag[2:]) + r")? ", text, maxsplit=1)
        words = re.sub(r"^[A-Z|{},]+ ", "", after[1] if len(after) > 1 else "").split(" --")[0]
        if len(after) == 1 or len(re.sub(r"\(default: [^)]*\)", "", words).strip()) < 10:
            missing.append(f.name)
    assert missing == [], f"fields without a docstring in --help: {missing}"


def test_chunk_logits_auto_is_8_mib_on_a_cpu_and_512_mib_on_a_gpu_and_a_given_number_wins():
    """--chunk-logits -1 (the default): 2**21 float32 logits a chunk on a CPU, 2**27 on a GPU (where
    41-position chunks of GPT-2's vocabulary left the H200 idle: docs/speed.md); a number given is used
    as given on either device, 0 included; below -1 is refused."""
    args = make_args()
    assert args.chunk_logits == -1
    assert (args.logits_per_chunk("cpu"), args.logits_per_chunk("cuda"), args.logits_per_chunk("cuda:1")) == (2**21, 2**27, 2**27)
    assert make_args(chunk_logits=0).logits_per_chunk("cuda") == 0 and make_args(chunk_logits=5).logits_per_chunk("cpu") == 5
    with pytest.raises(ConfigError, match=r"chunk_logits: must be >= 0 \(0 = no chunking\) or -1 \(auto\); got -2"):
        make_args(chunk_logits=-2).validate()
