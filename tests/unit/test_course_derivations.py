"""docs/derivations.md: every check the page asks the reader to run runs, and its asserts hold.

The page derives DPO, Bradley–Terry and PPO's clip and ends each in a block of plain torch; a block
that stopped running (or whose numbers stopped agreeing with the derivation) turns this red."""

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).parents[2] / "docs" / "derivations.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def test_the_page_has_its_four_checks():
    assert len(BLOCKS) == 4, f"docs/derivations.md has {len(BLOCKS)} python blocks; expected DPO x2, BT, clip"


@pytest.mark.parametrize("block", BLOCKS, ids=["dpo_optimum", "dpo_gradient", "bradley_terry", "clip"])
def test_each_check_on_the_page_runs_and_its_asserts_hold(block, one_thread, capsys):
    exec(compile(block, str(PAGE), "exec"), {"__name__": "derivation"})
    assert capsys.readouterr().out.strip(), "each check prints what it measured"
