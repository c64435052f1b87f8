"""The raters' parameters, checked once for every command that takes them (`reward.preferences.check_rater_params`:
`preferences`, and the hacking pilot and study before they start a `preferences` process)."""

import pytest

from rlhf_scratch.config import ConfigError
from rlhf_scratch.reward.preferences import RATER_DEFAULTS, RATERS, check_rater_params, rater_record


@pytest.mark.parametrize("change, message", [
    ({"token": ""}, "rater_token: must be one word; got ''"),
    ({"token": "two words"}, "rater_token: must be one word; got 'two words'"),
    ({"bonus": float("nan")}, "rater_bonus: must be finite and >= 0; got nan"),
    ({"margin": float("inf")}, "rater_margin: must be finite and >= 0; got inf"),
    ({"penalty": -1.0}, "rater_penalty: must be finite and >= 0; got -1.0"),
])
def test_a_bad_parameter_is_one_line_naming_it(change, message):
    with pytest.raises(ConfigError, match=f"^{message}$".replace("(", r"\(").replace(")", r"\)")):
        check_rater_params({**RATER_DEFAULTS, **change})


def test_a_parameter_the_single_rater_ignores_is_refused_and_one_it_reads_is_not():
    with pytest.raises(ConfigError, match=r"^rater_token: only the token rater reads it, not honest; got 'xyz'"):
        check_rater_params({**RATER_DEFAULTS, "token": "xyz"}, ["honest"])
    with pytest.raises(ConfigError, match=r"^rater_penalty: only the repetition rater reads it, not length"):
        check_rater_params({**RATER_DEFAULTS, "penalty": 2.0}, ["length"])
    check_rater_params({**RATER_DEFAULTS, "token": "xyz", "bonus": 3.0}, ["token"])
    check_rater_params({**RATER_DEFAULTS, "token": "xyz"}, RATERS)  # several raters (a study): each reads its own


def test_a_rater_records_the_parameters_it_reads():
    assert rater_record("token", RATER_DEFAULTS) == {"name": "token", "token": "and", "bonus": 2.0}
    assert rater_record("length", RATER_DEFAULTS) == {"name": "length", "margin": 1.0}
