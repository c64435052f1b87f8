"""`rlhf calculator-study` (studies/calculator.py): --quick end to end — both arms trained in segments, the base,
each segment's policy and the final ones measured, the tables written — then continued without redoing a unit,
and a different plan refused in one line."""

import json

from rlhf_scratch.commands.main import main as rlhf


def test_quick_calculator_study_writes_its_tables_and_continues_without_redoing_a_unit(tmp_path, capsys):
    out = tmp_path / "calc"
    assert rlhf(["calculator-study", "--quick", "--seeds", "1", "--out", str(out)]) == 0
    data = json.loads((out / "table.json").read_text())
    assert data["settings"]["seeds"] == [1] and data["problems"] == {"all": 12, "products": 4, "sums and differences": 8}
    assert set(data["tool_vs_no_tool"]) == {"all", "products", "sums and differences"}
    for arm in ("tool", "no_tool"):
        assert list(data["curves"][arm]["1"]) == ["0", "1", "2"]  # the base, then each segment's policy
        final = json.loads((out / f"runs/{arm}-s1/outcomes.json").read_text())["final"]
        assert len(final) == 12 and all(len(per) == 2 for per in final)  # 12 problems x 2 samples, [called, right]
        for name in ("policy-0001.pt", "policy-0002.pt"):
            assert (out / f"runs/{arm}-s1" / name).is_file()
    base = data["base"]
    assert base["no_tool"]["1"]["products"]["pass@1"] < base["tool"]["1"]["products"]["pass@1"]  # the tool solves products
    for name in ("index.html", "table.md", "curves.png", "base-s1.json"):
        assert (out / name).is_file(), name
    assert capsys.readouterr().out.startswith("Over 1 seed (95 % paired intervals), at equal GRPO phases, all: ")
    times = (out / "times.json").read_text()
    assert set(json.loads(times)) == {"tool-s1@1", "tool-s1@2", "no_tool-s1@1", "no_tool-s1@2"}
    assert rlhf(["calculator-study", "--quick", "--seeds", "1", "--out", str(out)]) == 0  # the same study: nothing redone
    assert (out / "times.json").read_text() == times
    capsys.readouterr()
    assert rlhf(["calculator-study", "--quick", "--seeds", "1", "--samples", "4", "--out", str(out)]) == 2
    assert "samples" in capsys.readouterr().err
