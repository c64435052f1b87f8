"""The trainer contract: every trainer meets it, the loop needs nothing beyond it, and the
one-file example algorithm of docs/architecture.md really is a whole algorithm."""

import json
import re
from pathlib import Path

import pytest
import torch
from toy_algorithm import algorithms, registered, small_settings

from rlhf_scratch import RLHFTrainer, RLOOTrainer, make_args
from rlhf_scratch.config import registry
from rlhf_scratch.core.memory import minibatch_rows
from rlhf_scratch.engine.contract import TrainerContract

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(batch_size=8, num_minibatches=2, gen_len=5, total_phases=1, save_every=0, save_model=False)


@pytest.mark.parametrize("algo", algorithms())  # every registered algorithm, and the toy one (tests/toy_algorithm.py)
def test_every_trainer_meets_the_contract_and_names_its_metrics(algo, one_thread):
    with registered(algo):
        trainer = make_trainer(algo, **SMALL, **small_settings(algo))
        assert isinstance(trainer, TrainerContract)
        stats = trainer.learning_phase(trainer.rollout_phase())
        declared = type(trainer).METRICS
        assert set(stats) <= set(declared), f"{algo} logs names its METRICS do not list: {set(stats) - set(declared)}"


def test_smoke_an_object_missing_a_member_is_not_a_trainer():
    """Smoke test only: a runtime Protocol check sees names, not values (members set to None pass).
    The loop's real test is `test_the_loop_needs_nothing_beyond_the_contract`."""

    class NoRecord:
        args = device = None
        skipped_in_a_row, METRICS, quiet = 0, (), True

        def next_prompts(self): ...
        def generate_sequences(self, prompts): ...
        def compute_ref_log_prob(self, rollout): ...
        def compute_log_prob(self, rollout, ref_hidden=None): ...
        def compute_values(self, rollout): ...
        def compute_scores(self, rollout): ...
        def compute_advantages(self, batch): ...
        def update_critic(self, batch): ...
        def update_actor(self, batch): ...
        def learning_rate(self): ...
        def save_policy(self, run_dir): ...
        def progress_state(self): ...
        def weights_state(self): ...
        def steps_taken(self): ...
        def load_state_dict(self, state): ...

    assert not isinstance(NoRecord(), TrainerContract)
    NoRecord.rewarded_by = lambda self: {}
    assert isinstance(NoRecord(), TrainerContract)


def contract_members() -> set[str]:
    """Every attribute and method `TrainerContract` lists."""
    return {name for name in dir(TrainerContract) if not name.startswith("_")} | set(TrainerContract.__annotations__)


class ContractOnly:
    """A trainer seen through the contract alone: any other attribute the loop asks for raises."""

    def __init__(self, trainer):
        object.__setattr__(self, "_trainer", trainer)

    def __getattr__(self, name):
        if name not in contract_members():
            raise AssertionError(f"the loop read trainer.{name}, which TrainerContract does not list")
        return getattr(self._trainer, name)

    def __setattr__(self, name, value):
        if name not in contract_members():
            raise AssertionError(f"the loop set trainer.{name}, which TrainerContract does not list")
        setattr(self._trainer, name, value)


def test_the_loop_needs_nothing_beyond_the_contract(tmp_path, one_thread):
    """A whole run (two phases, a checkpoint, the policy saved, then a resume) through an object
    that has only the contract's members. Turns red when loop.py reads anything else of a trainer
    (the old grep for `hasattr(trainer` could not see a misspelt or unlisted attribute)."""
    from rlhf_scratch.engine.loop import run_training

    args = make_args("tiny", **{**SMALL, "total_phases": 2, "save_every": 1, "save_model": True})
    run_dir = run_training(ContractOnly(RLHFTrainer(args, quiet=True)), tmp_path / "run", quiet=True)
    assert (run_dir / "policy.pt").is_file() and json.loads((run_dir / "status.json").read_text())["status"] == "finished"
    longer = make_args("tiny", **{**SMALL, "total_phases": 3, "save_every": 1})
    run_training(ContractOnly(RLHFTrainer(longer, quiet=True)), run_dir, quiet=True, resume=True)
    assert [json.loads(x)["phase"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_an_undeclared_metric_stops_the_run_naming_it(tmp_path, one_thread):
    """The loop holds learning_phase to its METRICS: a typo'd or forgotten name is an error, not a silent new column."""
    from rlhf_scratch.engine.loop import UndeclaredMetricError

    class Sloppy(RLOOTrainer):
        def update_actor(self, batch):
            return {**super().update_actor(batch), "objective/rlo": 0.0}

    trainer = Sloppy(make_args("tiny", algo="rloo", num_generations=4, **SMALL), quiet=True)
    with pytest.raises(UndeclaredMetricError, match=r"^Sloppy.update_actor returned objective/rlo, not among its METRICS"):
        trainer.train(tmp_path / "run")


@pytest.mark.parametrize("algo", algorithms())
def test_chunk_logits_reaches_every_algorithms_learning_phase(algo, monkeypatch, one_thread):
    """--chunk-logits is a setting of the learning phase: every vocabulary pass with gradient
    (the learning forward's log-probs) must get the run's value. Red when an algorithm scores its
    minibatch without it (RLOO, GRPO and Online DPO did: the flag silently did nothing there)."""
    import rlhf_scratch.algorithms.ppo.objective as ppo_objective  # PPO's objective unembeds ĥ itself
    import rlhf_scratch.rollout.phase as rollout_module
    from rlhf_scratch.core.vocab_terms import token_terms

    seen: list[int] = []

    def recording(*args, chunk_logits, **kwargs):
        if torch.is_grad_enabled():
            seen.append(chunk_logits)
        return token_terms(*args, chunk_logits=chunk_logits, **kwargs)

    monkeypatch.setattr(rollout_module, "token_terms", recording)
    monkeypatch.setattr(ppo_objective, "token_terms", recording)
    with registered(algo):
        trainer = make_trainer(algo, chunk_logits=0, **SMALL, **small_settings(algo))
        trainer.learning_phase(trainer.rollout_phase())
    assert seen and set(seen) == {0}, f"{algo}'s learning phase used chunk_logits {sorted(set(seen))}, not the run's 0"


def make_trainer(algo: str, **fields):
    return registry.get(algo).trainer_class()(make_args("tiny", algo=algo, **fields), quiet=True)


def test_minibatch_rows_cover_each_row_once_per_pass():
    torch.manual_seed(0)
    rows = list(minibatch_rows(6, 3, passes=2))
    assert [len(r) for r in rows] == [2] * 6
    assert sorted(torch.cat(rows[:3]).tolist()) == list(range(6)) == sorted(torch.cat(rows[3:]).tolist())
    with pytest.raises(ValueError, match="6 rows do not split into 4"):
        next(minibatch_rows(6, 4))


@pytest.fixture
def reinforce_example(tmp_path, monkeypatch):
    """The architecture page's example as a user's module, imported as written: it registers
    `reinforce` (taken away after). Its namespace."""
    import importlib
    import sys

    from rlhf_scratch.config import registry

    page = (ROOT / "docs" / "architecture.md").read_text()
    (tmp_path / "reinforce_example.py").write_text(re.search(r"```python\n(.*?)```", page, re.S).group(1))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield vars(importlib.import_module("reinforce_example"))
    finally:
        registry.unregister("reinforce")
        sys.modules.pop("reinforce_example", None)


def test_the_one_file_algorithm_trains_from_the_command_line_through_the_registry_alone(
        reinforce_example, tmp_path, one_thread, capsys):
    """Registering is all it takes: `--algo reinforce` parses, trains a phase, writes its run folder
    with its metrics and a checkpoint, and the folder resumes and is read back as a REINFORCE run."""
    from rlhf_scratch.commands.train import main
    from rlhf_scratch.engine.runs import load_args, read_metrics

    run_dir = tmp_path / "run"
    flags = ["--batch-size", "8", "--num-minibatches", "2", "--gen-len", "5", "--warmup-steps", "0", "--threads", "1"]
    assert main(["sentiment", "--algo", "reinforce", "--total-phases", "1", *flags, "--run-dir", str(run_dir)]) == 0
    assert type(load_args(run_dir)).__name__ == "ReinforceArgs"
    assert main(["--resume", str(run_dir), "--total-phases", "2"]) == 0
    lines = read_metrics(run_dir)
    assert [m["phase"] for m in lines] == [1, 2]
    assert all(set(reinforce_example["REINFORCE_METRICS"]) <= set(m) for m in lines)
    assert lines[0]["reward"] == pytest.approx(lines[0]["rewards/mean"])  # no EOS penalty: scores = rewards
    assert main(["sentiment", "--algo", "reinforce", "--help"]) == 0
    assert "REINFORCE (Williams 1992)" in capsys.readouterr().out


def test_the_one_file_algorithm_learns_from_python(reinforce_example, tmp_path, one_thread):
    trainer = reinforce_example["ReinforceTrainer"](make_args("tiny", algo="reinforce", **{**SMALL, "total_phases": 2}),
                                                    quiet=True)
    assert isinstance(trainer, TrainerContract)
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    run_dir = trainer.train(tmp_path / "run")
    # phase 1 trains at learning rate 0 (warmup), phase 2 does not: the weights moved
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters()))
    assert any(run_dir.glob("checkpoints/phase-*"))


def test_calc_reinforce_objective_of_the_example_by_hand(reinforce_example):
    namespace = reinforce_example
    logp = torch.tensor([-1.0, -2.0, -4.0], requires_grad=True)
    rewards = torch.tensor([3.0, 0.0, 0.0])  # mean 1: advantages [2, -1, -1]
    advantages = namespace["calc_reinforce_advantages"](rewards)
    assert advantages.tolist() == [2.0, -1.0, -1.0]
    objective = namespace["calc_reinforce_objective"](logp, advantages)
    assert objective.item() == pytest.approx((2 * -1 + -1 * -2 + -1 * -4) / 3)
    objective.backward()
    assert logp.grad.tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3])
