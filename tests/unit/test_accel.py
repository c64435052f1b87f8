"""accel: torch.compile and bf16 autocast of the learning forward, off by default."""

import torch

from rlhf_scratch.algorithms.rloo import RLOOTrainer
from rlhf_scratch.config import make_args
from rlhf_scratch.core.objectives import get_log_probs
from rlhf_scratch.engine import accel
from rlhf_scratch.engine.accel import begin_step, compiled, learning_autocast


def test_off_by_default_is_the_module_itself_and_no_autocast():
    args = make_args("tiny")
    module = torch.nn.Linear(2, 2)
    assert compiled(module, args) is module
    with learning_autocast(args, "cpu"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_compile_wraps_the_same_parameters():
    module = torch.nn.Linear(2, 2)
    wrapped = compiled(module, make_args("tiny", compile=True))
    assert wrapped is not module and wrapped._orig_mod is module  # lazy: nothing compiled until called
    assert [p is q for p, q in zip(wrapped.parameters(), module.parameters())] == [True, True], (
        "the optimizer steps the policy's parameters: the compiled module must share them"
    )


def test_compile_mode_is_torch_compiles_mode_and_reduce_overhead_marks_each_step(monkeypatch):
    """--compile-mode reaches torch.compile as its `mode`; the modes that replay CUDA graphs
    (reduce-overhead, max-autotune) tell the cudagraph trees a step begins, default does not."""
    seen, marks = [], []
    monkeypatch.setattr(accel.torch, "compile", lambda module, mode: seen.append(mode) or module)
    monkeypatch.setattr(accel.torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    for mode, expected_marks in (("default", 0), ("reduce-overhead", 1), ("max-autotune", 1)):  # both replay graphs
        args = make_args("tiny", compile=True, compile_mode=mode)
        compiled(torch.nn.Linear(2, 2), args)
        marks.clear()
        begin_step(args)
        assert len(marks) == expected_marks, mode
    assert seen == ["default", "reduce-overhead", "max-autotune"]
    marks.clear()
    begin_step(make_args("tiny"))
    assert marks == [], "without --compile nothing is marked"


def test_bf16_runs_matmuls_in_bf16_and_log_probs_stay_float32():
    args = make_args("tiny", bf16=True)
    logits = torch.randn(1, 3, 5)
    with learning_autocast(args, "cpu"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
        lp = get_log_probs(logits.bfloat16(), torch.tensor([[0, 1, 2]]))
    assert lp.dtype == torch.float32


def test_a_bf16_learning_phase_trains(tmp_path):
    args = make_args("tiny", "rloo", bf16=True, batch_size=8, num_generations=2, gen_len=6, num_minibatches=2,
                     total_phases=1, device="cpu", seed=0)
    trainer = RLOOTrainer(args, quiet=True)
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    stats = trainer.learning_phase(trainer.rollout_phase())
    assert stats["charts/skipped_steps"] == 0 and torch.isfinite(torch.tensor(stats["objective/rloo"]))
    assert all(p.dtype == torch.float32 for p in trainer.policy.parameters()), "weights stay float32"
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters())), "a step was taken"


def test_bf16_first_pass_ratios_are_one_and_nothing_is_clipped(one_thread):
    """π_old is scored under the learning phase's autocast: before any step, the learning forward
    (bf16) must give back the rollout's log-probs. Scored in float32 (as before), RLOO's sequence
    ratio sums the rounding of ~gen_len tokens and clips sequences for rounding alone."""
    from rlhf_scratch.core.objectives import sequence_log_probs

    args = make_args("tiny", "rloo", bf16=True, batch_size=8, num_generations=2, gen_len=12, num_minibatches=1,
                     total_phases=1, device="cpu", seed=0, temperature=0.7, epsilon_low=0.001, epsilon_high=0.001)
    trainer = RLOOTrainer(args, quiet=True)
    rollout = trainer.rollout_phase()
    old = sequence_log_probs(rollout.logprobs, rollout.completion_mask)
    with torch.no_grad():
        fp32 = trainer.sequence_log_probs(rollout, torch.arange(len(rollout)))
    rows = torch.randperm(len(rollout))
    with torch.no_grad(), learning_autocast(args, "cpu"):
        new = trainer.sequence_log_probs(rollout, rows)
    ratio = (new - old[rows]).exp()
    assert (ratio - 1).abs().max().item() < 1e-3, f"first-pass ratios {ratio.tolist()}"
    assert (fp32 - old).abs().max().item() > 1e-3, "a float32 learning forward would not match: the test can tell"
    # the trainer's own first pass (one minibatch = before any step): clipped at ε = 0.001 for rounding alone?
    stats = trainer.learning_phase(rollout)
    assert stats["clip_ratio/region_mean"] == 0.0
