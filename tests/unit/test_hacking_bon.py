"""Best-of-n against a flawed proxy (studies/hacking/bon.py): the pick's expectations worked by hand,
the summary over seeds, and bad input refused in one line."""

import json

import pytest

from rlhf_scratch.studies.hacking.bon import main, pick_expectations, summarise


def test_the_proxys_pick_of_n_is_worked_by_hand():
    # one prompt, samples with proxy 1, 3, 2 and gold 10, 30, 20 — the proxy's order; and a second prompt
    # where the proxy's best has the worst gold (5, 1, 9 → gold 0, 6, -3): n = 2 picks over {a,b}, {a,c}, {b,c}
    proxy = [[1.0, 3.0, 2.0], [5.0, 1.0, 9.0]]
    gold = [[10.0, 30.0, 20.0], [0.0, 6.0, -3.0]]
    got = pick_expectations(proxy, {"gold": gold}, [1, 2, 3])
    first = [20.0, (30 + 20 + 30) / 3, 30.0]       # best of {1,3}=30, {1,2}=20, {3,2}=30
    second = [1.0, (0 + -3 + -3) / 3, -3.0]       # best of {5,1}=0, {5,9}=-3, {1,9}=-3
    assert got["gold"] == pytest.approx([(a + b) / 2 for a, b in zip(first, second)])
    assert got["proxy"] == pytest.approx([(2 + 5) / 2, ((3 + 2 + 3) / 3 + (5 + 9 + 9) / 3) / 2, (3 + 9) / 2])


def test_the_summary_pairs_gold_from_n_1_to_n_max_over_seeds():
    per_seed = {1: {"gold": [1.0, 2.0, 4.0]}, 2: {"gold": [0.5, 1.0, 1.5]}, 3: {"gold": [2.0, 2.0, 2.5]}}
    got = summarise(per_seed, [1, 2, 4])
    change = got["gold_change_1_to_n_max"]
    assert change["mean"] == pytest.approx((3.0 + 1.0 + 0.5) / 3) and change["n"] == 3
    assert got["points"]["gold"][2]["mean"] == pytest.approx((4.0 + 1.5 + 2.5) / 3)
    assert change["low"] < change["mean"] < change["high"]


def test_bad_input_is_one_line(tmp_path, capsys):
    (tmp_path / "eval.txt").write_text("a\n")
    assert main(["--proxies", str(tmp_path), "--out", str(tmp_path / "o.json"), "--n-max", "6"]) == 2
    assert "n_max: must be a power of 2" in capsys.readouterr().err
    assert main(["--proxies", str(tmp_path), "--out", str(tmp_path / "o.json")]) == 2
    assert "rm-repetition/reward_model.pt" in capsys.readouterr().err
    (tmp_path / "o.json").write_text(json.dumps({"kept": 1}))
    (tmp_path / "rm-repetition").mkdir()
    (tmp_path / "rm-repetition" / "reward_model.pt").write_text("x")
    assert main(["--proxies", str(tmp_path), "--out", str(tmp_path / "o.json")]) == 2
    assert "exists" in capsys.readouterr().err and json.loads((tmp_path / "o.json").read_text()) == {"kept": 1}
