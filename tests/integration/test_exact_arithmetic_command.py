"""The microscope's arithmetic environment, sampled and as a command (`python -m rlhf_scratch.exact --env arithmetic`).

The exact facts are in tests/unit/test_exact_arithmetic.py; here the exact group expectations
(`microscope.groups`) are held against the package's own estimators over sampled batches, and the
command runs end to end on small settings (seconds) and answers bad flags in one line.
"""

import json

import pytest

from rlhf_scratch.microscope.cli import main
from rlhf_scratch.microscope.groups import GROUP_ESTIMATORS, exact_group_estimator
from rlhf_scratch.microscope.run import arithmetic_scene, exact_groups, policy_facts

SMALL = ["--env", "arithmetic", "--num-generations", "4", "--draws", "60", "--draws-by-reward", "20",
         "--lesson-p-right", "0.3", "0.7"]


@pytest.fixture(scope="module")
def sc():
    return arithmetic_scene((0.1, 0.5), num_generations=8)


def test_the_exact_group_expectations_match_the_package_estimators_monte_carlo(sc):
    """Each reducible group estimator as the package computes it (`all_estimators`, 2,000 sampled batches)
    agrees with its exact expectation within 4 s.e. — while the exact one built with the prompts'
    probabilities swapped (0.5, 0.1) does not, for GRPO's std. Red if a loss type's token weight is
    wrong in `groups.GROUP_ESTIMATORS` (1/|y| for 1/L), or the reduction misreads the advantage."""
    draws = sc.draws(2000, seed=1)
    entries = {name: sc.measure(name, draws) for name in GROUP_ESTIMATORS}
    for name, g in exact_groups(sc, entries).items():
        assert abs(g["z"]) < 4, (name, g["z"], g["norm_ratio_along_true"], g["mc_norm_ratio_along_true"])
    p = tuple(policy_facts(sc)["p_right"])
    swapped = sc.measure(exact_group_estimator("grpo_adv_group", p[::-1], 8))
    mc = entries["grpo_adv_group"]
    assert abs(mc["norm_ratio_along_true"] - swapped["norm_ratio_along_true"]) > 4 * mc["norm_ratio_along_true_se"]


def test_the_command_end_to_end(tmp_path, capsys):
    """`--env arithmetic` with small settings: exit 0, four files (no off-policy figure), the one-digit
    sums and the rule in "environment", every estimator of the letters environment measured against
    its truth, the format reward beside accuracy, every reducible group estimator exactly, and no
    off-policy or one-token section. Red if an estimator is dropped for this environment, or the
    settings still say vocab 5 and max_len 5."""
    out = tmp_path / "exact"
    assert main(["--out", str(out), *SMALL]) == 0
    assert {p.name for p in out.iterdir()} == {"exact.json", "exact.md", "exact.png", "exact.html"}
    data = json.loads((out / "exact.json").read_text())
    env, settings = data["environment"], data["settings"]
    assert env["name"] == "arithmetic" and env["problems"] == ["0+4=4", "4+7=11"] and env["completions"] == 2222
    assert env["vocab"] == ["<eos>", *"0123456789"] and env["reward"] == "accuracy"
    assert (settings["vocab"], settings["max_len"], settings["reward"]) == (11, 3, "accuracy")
    assert env["policy"]["p_right"] == pytest.approx([0.1, 0.5], abs=1e-6)
    assert set(data["by_reward"]) == {"format"} and data["one_token"] is None and data["off_policy"] is None
    assert set(data["exact_groups"]) == set(GROUP_ESTIMATORS)
    assert data["exact_groups"]["rloo"]["rel_error"] < 1e-5 and data["exact_groups"]["rloo"]["mc_n"] == 60
    for name, e in data["estimators"].items():
        assert e["pad_leak"] == 0.0, f"{name} moves the logits after EOS"
        for field in ("cos_to_true", "norm_ratio", "bias_se", "variance", "true"):
            assert field in e, (name, field)
    assert data["estimators"]["reinforce"]["rel_error"] < 1e-5
    md = (out / "exact.md").read_text()
    assert "one-digit sums: 0+4=4, 4+7=11" in md and "The group estimators exactly" in md
    assert "exact.json" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--env", "words"], "error: env: must be one of letters, arithmetic; got 'words'"),
    (["--env", "arithmetic", "--vocab", "6"], "error: vocab: --env arithmetic fixes it at 11"),
    (["--env", "arithmetic", "--max-len", "4"], "error: max_len: --env arithmetic fixes it at 3"),
    (["--env", "arithmetic", "--reward", "sentiment"], "error: reward: --env arithmetic is scored by accuracy or format"),
    (["--env", "arithmetic", "--staleness", "2"], "error: staleness: the off-policy section is the letters environment's"),
    (["--reward", "accuracy"], "error: reward: must be one of correct, length, sentiment; got 'accuracy'"),
    (["--env", "arithmetic", "--p-right", *["0.5"] * 19], "error: max_len: 19 prompts x vocab 11 x max_len 3 make 21,109"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    """Each bad flag of the arithmetic environment: exit 2, nothing written, one stderr line (before torch)."""
    out = tmp_path / "x"
    assert main(["--out", str(out), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err
    assert not out.exists()
