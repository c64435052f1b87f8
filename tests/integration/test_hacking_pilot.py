"""The reward-hacking pilot (studies/hacking/pilot.py): its bad flags, and a run end to end at tiny size."""

import json

import pytest

from rlhf_scratch.studies.hacking.pilot import main

TINY = ["--rm-pairs", "8", "--test-pairs", "6", "--rm-epochs", "1", "--total-phases", "2", "--eval-every", "1",
        "--eval-prompts", "2", "--eval-per-prompt", "2", "--gen-len", "4", "--batch-size", "8"]


@pytest.mark.parametrize("argv, message", [
    (["--raters", "lazy"], "error: raters: "),
    (["--total-phases", "0"], "error: total_phases: must be >= 1; got 0"),
    (["--beta", "-1"], "error: beta: must be >= 0; got -1.0"),
])
def test_bad_flags_are_one_line_and_exit_2(argv, message, tmp_path, capsys):
    assert main(["--out", str(tmp_path / "p"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err
    assert not (tmp_path / "p").exists()


@pytest.mark.slow
def test_the_pilot_runs_end_to_end_and_continues_with_another_seed(tmp_path, capsys):
    out = tmp_path / "hack"
    assert main(["--out", str(out), "--raters", "token", "--seeds", "1", *TINY]) == 0
    result = json.loads((out / "pilot-ppo.json").read_text())
    accuracy = result["accuracy"]["token"]
    assert accuracy["low"] <= accuracy["accuracy"] <= accuracy["high"] and accuracy["n"] <= 6
    rows = [json.loads(x) for x in (out / "pairs-token.jsonl").read_text().splitlines()]
    assert len(rows) == 14 and rows[0]["rater"] == {"name": "token", "token": "and", "bonus": 2.0}
    curve = result["curves"]["token"]["1"]
    assert [p["phase"] for p in curve] == [0, 1, 2] and curve[0]["d"] == 0.0
    assert {"gold", "proxy", "word_count", "length", "repeated_3grams"} <= set(curve[-1])
    assert result["summary"]["token"]["fall"]["n"] == 1 and (out / "pilot-ppo.png").is_file()
    proxy_weights = (out / "rm-token" / "reward_model.pt").stat().st_mtime_ns
    assert main(["--out", str(out), "--raters", "token", "--seeds", "1,2", *TINY]) == 0
    assert (out / "rm-token" / "reward_model.pt").stat().st_mtime_ns == proxy_weights, "the proxy is not retrained"
    summary = json.loads((out / "pilot-ppo.json").read_text())["summary"]["token"]
    assert summary["seeds"] == [1, 2] and summary["fall_held_out_peak"]["n"] == 2
