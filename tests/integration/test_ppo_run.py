"""A whole PPO run on the tiny preset, trained once for the module: its folder, a frozen reference and a
moved policy, load_run, and a folder never overwritten (PPO's formulas and one phase: tests/unit/test_ppo.py)."""

import json

import pytest
import torch

from rlhf_scratch.algorithms.ppo import PPO_METRICS, RLHFTrainer
from rlhf_scratch.commands.train import main
from rlhf_scratch.config import make_args
from rlhf_scratch.core.timing import PARTS
from rlhf_scratch.engine.loop import SHARED_METRICS
from rlhf_scratch.engine.runs import RunFolderError, load_run, read_metrics

PHASE_METRICS = SHARED_METRICS + PPO_METRICS


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "smoke"
    args = make_args(
        "tiny", total_phases=2, batch_size=8, num_minibatches=2, batches_per_learning_phase=1,
        gen_len=8, warmup_steps=1, base_lr=1e-3, final_scale=0.5, run_dir=str(run_dir), seed=3,
    )
    trainer = RLHFTrainer(args, quiet=True)
    ref_before = {k: v.clone() for k, v in trainer.ref_model.state_dict().items()}
    policy_before = {k: v.clone() for k, v in trainer.model.base.state_dict().items()}
    trainer.train(run_dir)
    return trainer, run_dir, ref_before, policy_before


def test_run_folder_contents(finished_run):
    trainer, run_dir, _, _ = finished_run
    for name in ("config.json", "metrics.jsonl", "samples.md", "curves.png", "policy.pt"):
        assert (run_dir / name).is_file(), f"run folder lacks {name}"
    metrics = read_metrics(run_dir)
    assert [m["phase"] for m in metrics] == [1, 2]
    for m in metrics:
        assert set(PHASE_METRICS) <= set(m), f"missing metrics: {set(PHASE_METRICS) - set(m)}"
        assert 0.0 <= m["rewards/mean"] <= 1.0
        assert m["rollout/kl_full_vocab"] >= 0.0
        parts = [m[f"time/{part}"] for part in PARTS if part != "logging"]
        assert all(t > 0 for t in parts), f"PPO uses every part: {parts}"
        assert sum(parts) + m["time/other"] == pytest.approx(m["charts/phase_time"]), "the parts split the phase"
    assert metrics[1]["time/logging"] > 0, "phase 1's sample table and curves were drawn"
    assert metrics[0]["charts/learning_rate"] == 0.0, "phase 1 is the first warmup step: lr multiplier 0"
    assert metrics[1]["charts/learning_rate"] == pytest.approx(1e-3 * 0.5), "the last phase trains at base_lr * final_scale"
    assert json.loads((run_dir / "config.json").read_text())["total_phases"] == 2
    samples = (run_dir / "samples.md").read_text()
    assert "## phase 1" in samples and "## phase 2" in samples and "ref logprob" in samples


def test_reference_frozen_and_policy_moved(finished_run):
    trainer, _, ref_before, policy_before = finished_run
    for k, v in trainer.ref_model.state_dict().items():
        torch.testing.assert_close(v, ref_before[k], msg=f"reference parameter {k} changed")
    moved = [k for k, v in trainer.model.base.state_dict().items() if not torch.equal(v, policy_before[k])]
    assert moved, "no policy parameter changed in a phase with lr > 0"


def test_load_run_gives_back_the_tuned_policy_and_the_reference(finished_run):
    trainer, run_dir, ref_before, _ = finished_run
    run = load_run(run_dir)
    assert run.args == trainer.args
    for k, v in trainer.model.state_dict().items():
        torch.testing.assert_close(run.policy.state_dict()[k], v, msg=f"policy parameter {k} not restored")
    for k, v in run.reference.state_dict().items():
        torch.testing.assert_close(v, ref_before[k], msg=f"reference parameter {k} differs from the original")
    ids = run.reference.to_tokens(trainer.args.prefix)
    assert run.tuned is run.policy.base
    logits, values = run.policy(ids)
    assert logits.shape[:2] == values.shape


def test_existing_run_folder_is_never_overwritten(finished_run, capsys):
    _, run_dir, _, _ = finished_run
    before = (run_dir / "metrics.jsonl").read_text()
    assert main(["sentiment", "--run-dir", str(run_dir), "--total-phases", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: run_dir: {run_dir} exists and is not empty; choose another --run-dir"
    assert (run_dir / "metrics.jsonl").read_text() == before
    with pytest.raises(RunFolderError, match="not found"):
        load_run(run_dir / "nope")
