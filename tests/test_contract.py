"""The trainer contract: every trainer meets it, the loop needs nothing beyond it, and the
one-file example algorithm of docs/architecture.md really is a whole algorithm."""

import json
import re
from pathlib import Path

import pytest
import torch

from rlhf_scratch import GRPOTrainer, OnlineDPOTrainer, RLHFTrainer, RLOOTrainer, make_args
from rlhf_scratch.contract import TrainerContract
from rlhf_scratch.memory import minibatch_rows

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(batch_size=8, num_minibatches=2, gen_len=5, total_phases=1, save_every=0, save_model=False)


@pytest.mark.parametrize("cls, algo", [(RLHFTrainer, "ppo"), (RLOOTrainer, "rloo"), (OnlineDPOTrainer, "online_dpo"),
                                       (GRPOTrainer, "grpo")])
def test_every_trainer_meets_the_contract_and_names_its_metrics(cls, algo, one_thread):
    extra = {"num_generations": 4} if algo in ("rloo", "grpo") else {}
    trainer = cls(make_args("tiny", algo=algo, **SMALL, **extra), quiet=True)
    assert isinstance(trainer, TrainerContract)
    stats = trainer.learning_phase(trainer.rollout_phase())
    assert set(stats) <= set(cls.METRICS), f"{algo} logs names its METRICS do not list: {set(stats) - set(cls.METRICS)}"


def test_an_object_missing_a_member_is_not_a_trainer():
    class NoJudge:
        args = device = policy = optimizer = scheduler = prompts = reward_fn = None
        skipped_in_a_row, METRICS = 0, ()

        def rollout_phase(self): ...
        def learning_phase(self, rollout): ...
        def extra_state(self): ...
        def load_extra_state(self, state): ...

    assert not isinstance(NoJudge(), TrainerContract)
    NoJudge.judge = None
    assert isinstance(NoJudge(), TrainerContract)


def test_the_loop_probes_no_trainer_attribute():
    source = (ROOT / "rlhf_scratch" / "loop.py").read_text()
    assert not re.search(r"(hasattr|getattr)\(trainer", source), "the loop must use the contract, not probe"


def test_minibatch_rows_cover_each_row_once_per_pass():
    torch.manual_seed(0)
    rows = list(minibatch_rows(6, 3, passes=2))
    assert [len(r) for r in rows] == [2] * 6
    assert sorted(torch.cat(rows[:3]).tolist()) == list(range(6)) == sorted(torch.cat(rows[3:]).tolist())
    with pytest.raises(ValueError, match="6 rows do not split into 4"):
        next(minibatch_rows(6, 4))


def test_the_one_file_algorithm_of_the_architecture_page_runs_and_learns_its_objective(tmp_path, one_thread):
    """The example is executed as written: a run folder, metrics with its names, a checkpoint."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    code = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/architecture.md", "exec"), namespace)
    trainer = namespace["ReinforceTrainer"](make_args("tiny", **{**SMALL, "total_phases": 2}), quiet=True)
    assert isinstance(trainer, TrainerContract)
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    run_dir = trainer.train(tmp_path / "run")
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["phase"] for m in lines] == [1, 2]
    assert all(set(namespace["REINFORCE_METRICS"]) <= set(m) for m in lines)
    assert lines[0]["reward"] == pytest.approx(lines[0]["rewards/mean"])  # no EOS penalty: scores = rewards
    # phase 1 trains at learning rate 0 (warmup), phase 2 does not: the weights moved
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters()))
    assert (run_dir / "checkpoints").exists() or any(run_dir.glob("**/phase-*"))


def test_calc_reinforce_objective_of_the_example_by_hand():
    page = (ROOT / "docs" / "architecture.md").read_text()
    namespace: dict = {}
    exec(compile(re.search(r"```python\n(.*?)```", page, re.S).group(1), "docs/architecture.md", "exec"), namespace)
    logp = torch.tensor([-1.0, -2.0, -4.0], requires_grad=True)
    rewards = torch.tensor([3.0, 0.0, 0.0])  # mean 1: advantages [2, -1, -1]
    objective = namespace["calc_reinforce_objective"](logp, rewards)
    assert objective.item() == pytest.approx((2 * -1 + -1 * -2 + -1 * -4) / 3)
    objective.backward()
    assert logp.grad.tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3])
