"""`rlhf pass-at-k` (studies/rlvr.py): --quick end to end, continued without redoing a unit, a different plan
refused in one line; and the verdict's sentences from hand-made differences."""

import json

import pytest

from rlhf_scratch.commands.main import main as rlhf
from rlhf_scratch.studies.rlvr import differences, pass_curve, verdict_sentences


def test_quick_study_writes_its_tables_and_continues_without_redoing_a_unit(tmp_path, capsys):
    out = tmp_path / "passk"
    assert rlhf(["pass-at-k", "--quick", "--seeds", "1,2", "--out", str(out)]) == 0
    data = json.loads((out / "table.json").read_text())
    assert data["ks"] == [1, 2, 4] and data["settings"]["seeds"] == [1, 2]
    assert set(data["by_difficulty"]) <= {f"op={op} carry={c}" for op in "+-" for c in ("yes", "no")}
    assert sum(v["problems"] for v in data["by_difficulty"].values()) == 8
    for seed in ("1", "2"):
        assert data["base"][seed]["1"] <= data["base"][seed]["2"] <= data["base"][seed]["4"] <= 1
    for name in ("index.html", "table.md", "passk.png", "base-s1.json", "runs/grpo-s2/counts.json"):
        assert (out / name).is_file(), name
    counts = (out / "runs/grpo-s1/counts.json").read_text()
    assert len(json.loads(counts)) == 8 and all(0 <= c <= 4 for c in json.loads(counts))
    printed = capsys.readouterr().out
    assert printed.startswith("Over 2 seeds, RL (GRPO) changes held-out pass@1 by ")
    times = (out / "times.json").read_text()
    assert rlhf(["pass-at-k", "--quick", "--seeds", "1,2", "--out", str(out)]) == 0  # the same study: nothing redone
    assert (out / "times.json").read_text() == times and (out / "runs/grpo-s1/counts.json").read_text() == counts
    capsys.readouterr()
    assert rlhf(["pass-at-k", "--quick", "--seeds", "1,2", "--samples", "8", "--out", str(out)]) == 2
    assert "samples" in capsys.readouterr().err


def test_pass_curve_by_hand():
    # n = 4: c = 1 gives pass@1 1/4, pass@2 1 − C(3,2)/C(4,2) = 1/2, pass@4 1; c = 0 gives 0 at every k
    assert pass_curve([1, 0], 4, [1, 2, 4]) == pytest.approx({1: 0.125, 2: 0.25, 4: 0.5})


def test_the_verdict_says_where_the_base_is_ahead():
    seeds, ks = [1, 2, 3], [1, 256]
    base = {s: {1: 0.35, 256: 0.95 + 0.001 * s} for s in seeds}
    tuned = {s: {1: 0.55 + 0.01 * s, 256: 0.90} for s in seeds}  # RL up at k = 1, down at k = 256, both resolved
    diffs = differences(base, tuned, seeds, ks)
    assert diffs[1]["resolved"] and diffs[1]["difference"]["mean"] == pytest.approx(0.22)
    said = verdict_sentences(diffs, 3)
    assert said[0].startswith("Over 3 seeds, RL (GRPO) changes held-out pass@1 by +0.220 ± ")
    assert said[1].startswith("The base model is resolved ahead at k = 256:")
    same = {s: {1: 0.55 + 0.01 * s, 256: 0.99 + 0.001 * s} for s in seeds}  # RL ahead at every k
    assert verdict_sentences(differences(base, same, seeds, ks), 3)[1].startswith("RL stays resolved ahead up to k = 256")
