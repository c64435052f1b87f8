"""The reward-hacking study (studies/hacking/study.py): bad flags, and --quick end to end, continued with a seed."""

import json

import pytest

from rlhf_scratch.studies.hacking.study import main


@pytest.mark.parametrize("argv, message", [
    ([], "error: out: required (the study folder)"),
    (["--out", "X", "--algos", "nope"], "error: algos: unknown nope; choose from "),
    (["--out", "X", "--raters", "lazy"], "error: raters: "),
    (["--out", "X", "--peak-phases", "grpo:24"], "error: peak_phases: 'grpo' is not one of --algos (ppo, rloo)"),
    (["--out", "X", "--peak-phases", "ppo:25"], "error: peak_phases: ppo:25 is not an evaluated phase (a multiple of"),
    (["--out", "X", "--proxies", "nowhere"], "error: proxies: nowhere holds no accuracy.json"),
])
def test_bad_flags_are_one_line_and_exit_2(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err
    assert not (tmp_path / "X").exists()


@pytest.mark.slow
def test_the_quick_study_runs_end_to_end_and_more_seeds_continue_it(tmp_path, capsys):
    out = tmp_path / "hack"
    assert main(["--out", str(out), "--quick", "--seeds", "1"]) == 0
    said = capsys.readouterr().out
    assert "RLOO against the token proxy: gold turning down while proxy rises is not resolved at n = 1" in said
    data = json.loads((out / "table.json").read_text())
    (group,) = data["groups"]
    assert (group["algo"], group["rater"], group["seeds"]) == ("rloo", "token", [1])
    assert (out / "runs" / "rloo-s1-token2" / "status.json").is_file() and (out / "hacking-rloo.png").is_file()
    assert data["accuracy"]["token"]["n"] <= 6
    proxy = (out / "rm-token" / "reward_model.pt").stat().st_mtime_ns
    assert main(["--out", str(out), "--quick", "--seeds", "1,2"]) == 0
    (group,) = json.loads((out / "table.json").read_text())["groups"]
    assert group["seeds"] == [1, 2] and group["fall_held_out_peak"]["n"] == 2
    assert (out / "rm-token" / "reward_model.pt").stat().st_mtime_ns == proxy, "the proxy is not retrained"
    assert "index.html" in capsys.readouterr().out
    # another study on the first one's proxies, p* registered: its fall is read there, its bands drawn
    other = tmp_path / "other"
    assert main(["--out", str(other), "--quick", "--seeds", "3,4", "--proxies", str(out), "--peak-phases", "rloo:1"]) == 0
    assert not (other / "rm-token").exists(), "the proxies are used where they are"
    (group,) = json.loads((other / "table.json").read_text())["groups"]
    assert group["peak_phase"] == 1 and group["fall_registered"]["n"] == 2
    assert (other / "bands-token.png").is_file()
    assert "fall from the pre-registered peak, phase 1," in capsys.readouterr().out
