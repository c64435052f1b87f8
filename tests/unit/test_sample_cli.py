"""`python -m rlhf_scratch.sample`: reference and tuned completions side by side, offline (on a trained
run: tests/integration/test_sample_run.py)."""

import torch
from test_logger import one_sample_rollout

from rlhf_scratch.commands.sample import sequence_kl


def test_sequence_kl_sums_kept_tokens_only():
    rollout = one_sample_rollout()
    rollout.kl = torch.tensor([[0.25, 99.0]])
    rollout.completion_mask = torch.tensor([[True, False]])
    assert sequence_kl(rollout).tolist() == [0.25], "Σ over kept tokens: the padded one is not an action"


def test_a_newline_in_a_completion_stays_on_its_row():
    from rlhf_scratch.commands.sample import side_by_side

    reference, tuned = one_sample_rollout(), one_sample_rollout()
    tuned.completions = [" great\nfilm"]
    rows = side_by_side(reference, tuned).splitlines()
    assert len(rows) == 3, "header, rule, one row"
    assert "great\\nfilm" in rows[2]
