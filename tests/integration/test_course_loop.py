"""`check_learning_phase` (rlhf_scratch/course/loop_check.py): it passes the package's own PPO learning
phase (bit for bit) and a correct one written from the blog's functions (within its tolerance,
`course.mistakes_loop.hand_written_phase`), and its rollout (EOS, padding, prompts of mixed lengths) lets a
mask bug show. The mistakes a learner makes when writing the loop by hand — the mask ignored in J or in the
advantages and the value head detached among them — are the course's catalogue (`course/mistakes_loop.py`),
each named by the check in tests/integration/test_course_mistakes_run.py.

Notebook 06 and its solutions (notebooks/make_06_build_the_ppo_loop.py writes both): the learner's
three stubs raise as shipped, the solutions' pass the check, and with them swapped in the notebook's
loop trains. The cells are executed here one by one, not the notebooks (the solutions notebook is
executed whole by tests/slow/test_notebooks.py)."""

import importlib.util
from dataclasses import replace
from pathlib import Path

import matplotlib
import nbformat
import pytest
import torch

from rlhf_scratch.algorithms.ppo import RLHFTrainer
from rlhf_scratch.core.advantages import compute_advantages
from rlhf_scratch.course.loop_check import (
    CHECK_LENGTHS,
    CHECK_PROMPTS,
    UPDATE_RTOL,
    LearningPhaseMismatch,
    check_learning_phase,
    starting_state,
)
from rlhf_scratch.course.mistakes_loop import hand_written_phase
from rlhf_scratch.reward.functions import normalize_reward


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """The check runs one torch thread (as the suite's workers do)."""


def package_phase(policy, ref_model, rollout, args, optimizer, scheduler):
    """`RLHFTrainer.learning_phase` on the pieces it is handed: a trainer holding exactly them."""
    trainer = object.__new__(RLHFTrainer)
    vars(trainer).update(args=args, policy=policy, learner=policy, lm=policy.base, ref_model=ref_model,
                         optimizer=optimizer, scheduler=scheduler, beta=args.beta, kl_ctl=None, device="cpu",
                         quiet=True, skipped_in_a_row=0, critic=None)
    return trainer.learning_phase(rollout)


@pytest.mark.parametrize("fn, phrase", [
    (None, "check_learning_phase: pass your function itself, learning_phase(policy, ref_model, rollout, args, "
           "optimizer, scheduler); got NoneType 'None'"),
    (42, "check_learning_phase: pass your function itself, learning_phase(policy, ref_model, rollout, args, "
         "optimizer, scheduler); got int '42'"),
    (lambda policy, rollout: {}, "check_learning_phase: fn is called as learning_phase(policy, ref_model, rollout, "
                                 "args, optimizer, scheduler), every argument by position; yours is (policy, rollout)"),
])
def test_something_not_a_learning_phase_is_named_before_the_trainer_is_built(fn, phrase):
    """As a notebook calls it (the suite's beartype would refuse None itself: the unwrapped function)."""
    with pytest.raises(AssertionError) as err:
        getattr(check_learning_phase, "__wrapped__", check_learning_phase)(fn)
    assert str(err.value).startswith(phrase), str(err.value)


def test_the_learners_own_error_and_a_statistic_that_is_no_number_are_named():
    def raises(policy, ref_model, rollout, args, optimizer, scheduler):
        raise KeyError("advantages")

    with pytest.raises(LearningPhaseMismatch) as err:
        check_learning_phase(raises)
    assert str(err.value) == "check_learning_phase failed:\n  your learning_phase raised KeyError: 'advantages'"
    assert isinstance(err.value.__cause__, KeyError)

    with pytest.raises(LearningPhaseMismatch, match=r"stats\['objective/total'\] is str 'high': each statistic is one number"):
        check_learning_phase(lambda policy, ref_model, rollout, args, optimizer, scheduler: {"objective/total": "high"})


def test_the_packages_own_learning_phase_passes_bit_for_bit_and_the_rng_is_given_back():
    rng = torch.get_rng_state()
    report = check_learning_phase(package_phase)
    assert set(report.update_errors) == {"trunk", "value head"}
    assert all(e == 0.0 for e in report.update_errors.values()), report
    assert "objective/total" in report.stat_errors and all(e == 0.0 for e in report.stat_errors.values()), report
    assert "bit for bit" in str(report)
    assert torch.equal(torch.get_rng_state(), rng), "the check must give torch's global RNG back as it found it"


def test_a_correct_phase_on_full_logits_passes_within_the_tolerance_but_not_bit_for_bit():
    """Another order of float32 operations (full logits, autograd, a reference forward): the check's
    tolerance must pass it — and the differences are really there, so the tolerance is what passes it."""
    report = check_learning_phase(hand_written_phase())
    assert 0 < max(report.update_errors.values()) <= UPDATE_RTOL / 5, report
    assert report.stat_errors["objective/total"] < 1e-6, report


def test_the_check_rollout_has_eos_padding_and_mixed_prompt_lengths_so_a_mask_bug_shows():
    """The rollout the check compares on (`loop_check.check_rollout`): completions of the lengths
    `CHECK_LENGTHS`, each under 8 ended by EOS with the pad token after it, prompts left-padded by
    different amounts; and on it the advantages with and without the mask differ at kept tokens (the
    check's own data can tell the right loop from the mask bug: on the old 16 × 8 rollout they did not)."""
    start = starting_state()
    rollout, eos = start.rollout, start.rollout.eos_token_id
    assert rollout.completion_mask.sum(1).tolist() == list(CHECK_LENGTHS)
    assert len(set(CHECK_PROMPTS)) == len(CHECK_PROMPTS) == len(rollout) == 16
    left_pad = (~rollout.attention_mask[:, :rollout.prefix_len]).sum(1)
    assert left_pad.min() == 0 and len(set(left_pad.tolist())) >= 5, left_pad
    assert not rollout.attention_mask[:, rollout.prefix_len:].logical_not().any(), "completions are never attention-masked"
    for row, length in enumerate(CHECK_LENGTHS):
        ends = rollout.completion_ids[row, length - 1].item() in (eos if isinstance(eos, tuple) else (eos,))
        assert ends == (length < 8), (row, length)
        assert bool(rollout.is_terminated[row]) == (length < 8)
    assert int((~rollout.completion_mask).sum()) == 51
    kept = rollout.completion_mask
    rewards = normalize_reward(rollout.rewards)
    masked = compute_advantages(rollout.values, rewards, rollout.prefix_len, mask=kept)
    unmasked = compute_advantages(rollout.values, rewards, rollout.prefix_len)
    ended = torch.tensor([length < 8 for length in CHECK_LENGTHS])
    assert not torch.allclose(masked[kept & ended[:, None]], unmasked[kept & ended[:, None]])
    assert torch.equal(masked[~ended], unmasked[~ended]), "a completion cut at gen_len has the same advantages either way"


# --- notebook 06 and its solutions --------------------------------------------------------------

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
STUB_NOTEBOOK = NOTEBOOKS / "06_build_the_ppo_loop.ipynb"
SOLUTIONS_NOTEBOOK = NOTEBOOKS / "solutions" / "06_build_the_ppo_loop_solutions.ipynb"
WRITTEN_BY_THE_LEARNER = ("phase_advantages", "minibatch_objective", "learning_phase")
RUN_METADATA = ("rlhf_scratch", "execution", "ExecuteTime")  # added when a notebook is executed


def _generator():
    spec = importlib.util.spec_from_file_location("make_06", NOTEBOOKS / "make_06_build_the_ppo_loop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _source_metadata(cell) -> dict:
    return {k: v for k, v in cell.metadata.items() if k not in RUN_METADATA}


def _cells(path: Path) -> dict[str, nbformat.NotebookNode]:
    return {cell.id: cell for cell in nbformat.read(path, as_version=4).cells}


def _run(cells: dict, ids: list[str], namespace: dict | None = None) -> dict:
    """Execute the cells `ids` in order in one namespace, as a kernel would."""
    namespace = {} if namespace is None else namespace
    for cell_id in ids:
        exec(compile(cells[cell_id].source, f"<cell {cell_id}>", "exec"), namespace)
    return namespace


FUNCTIONS = ["imports", "parts", "setup", "phase_advantages-{}", "minibatch_objective-{}", "learning_phase-{}"]


def test_notebook_06_and_its_solutions_are_what_the_generator_writes_and_differ_only_in_the_three_functions():
    generator = _generator()
    assert {p.resolve() for p in generator.NOTEBOOKS} == {STUB_NOTEBOOK, SOLUTIONS_NOTEBOOK}
    for path, solved in generator.NOTEBOOKS.items():
        on_disk, built = nbformat.read(path, as_version=4), generator.notebook(solved)
        assert [(c.id, c.cell_type, c.source, _source_metadata(c)) for c in on_disk.cells] == \
               [(c.id, c.cell_type, c.source, c.metadata) for c in built.cells], \
               f"{path.name}: run python notebooks/make_06_build_the_ppo_loop.py"
    stub, solved = nbformat.read(STUB_NOTEBOOK, as_version=4), nbformat.read(SOLUTIONS_NOTEBOOK, as_version=4)
    differ = [a.id for a, b in zip(stub.cells, solved.cells, strict=True) if a.source != b.source]
    assert differ == ["title", "parts", "phase_advantages-stub", "minibatch_objective-stub", "learning_phase-stub",
                      "check-note"]


def test_notebook_06_ships_its_three_functions_as_stubs_that_raise_and_no_solution():
    cells = _cells(STUB_NOTEBOOK)
    stubs = [c for c in cells.values() if c.metadata.get("exercise")]
    assert [c.metadata["exercise"] for c in stubs] == list(WRITTEN_BY_THE_LEARNER)
    shipped = {line.strip() for c in cells.values() if c.cell_type == "code" for line in c.source.splitlines()}
    solution_lines = [line.strip() for ex in _generator().EXERCISES for line in ex.body.splitlines()]
    assert len(solution_lines) > 30 and "J.backward()" in solution_lines
    assert not shipped & set(solution_lines), f"notebook 06 ships solution lines: {shipped & set(solution_lines)}"
    namespace = _run(cells, [i.format("stub") for i in FUNCTIONS])
    for name in WRITTEN_BY_THE_LEARNER:  # each raises, whatever it is given, and says what to write
        with pytest.raises(NotImplementedError, match=f"^write {name}, rows "):
            namespace[name](*[None] * namespace[name].__code__.co_argcount)
    with pytest.raises(NotImplementedError, match="^write learning_phase"):
        namespace["check_learning_phase"](namespace["learning_phase"])


def test_notebook_06s_solutions_pass_check_learning_phase_within_its_tolerance():
    namespace = _run(_cells(SOLUTIONS_NOTEBOOK), [i.format("solution") for i in FUNCTIONS])
    report = namespace["check_learning_phase"](namespace["learning_phase"])
    assert 0 < max(report.update_errors.values()) <= UPDATE_RTOL / 5, report
    assert set(report.stat_errors) >= {"objective/total", "losses/kl_penalty", "losses/clipfrac"}, report
    assert max(report.stat_errors.values()) < 1e-6, report


def test_notebook_06_with_the_solutions_swapped_in_trains_plots_and_predicts(monkeypatch):
    """The learner's notebook, its stubs replaced by the solutions' cells, run past the check: three short
    phases of the loop. The warmup over 2 phases is worked by hand: learning rate 0, then half, then the
    last phase's final_scale; at rate 0 nothing moves, so the second rollout is the reference's own
    (KL exactly 0 and every ratio exactly 1 in phase 1)."""
    matplotlib.use("Agg")
    monkeypatch.setattr("matplotlib.pyplot.show", lambda *a, **k: None)
    cells, solved = _cells(STUB_NOTEBOOK), _cells(SOLUTIONS_NOTEBOOK)
    for name in WRITTEN_BY_THE_LEARNER:
        cells[f"{name}-stub"] = solved[f"{name}-solution"]
    namespace = _run(cells, [i.format("stub") for i in FUNCTIONS])
    args = namespace["args"] = replace(namespace["args"], total_phases=3, batch_size=4, num_minibatches=2, gen_len=4)
    assert (args.warmup_steps, args.base_lr, args.final_scale) == (2, 3e-4, 0.1)
    _run(cells, ["loop", "plot", "predict-code"], namespace)  # BETA = None: the prediction cell trains nothing
    history = namespace["history"]
    assert [h["phase"] for h in history] == [1, 2, 3]
    assert [h["lr"] for h in history] == pytest.approx([0.0, 1.5e-4, 3e-5], abs=1e-12)
    assert history[0]["kl"] == 0.0 and history[1]["kl"] == 0.0 and history[2]["kl"] > 0, history
    assert history[0]["losses/clipfrac"] == 0.0 and history[1]["losses/clipfrac"] > 0, history
    assert namespace["policy"] is not None and "BETA" in namespace and "beta_history" not in namespace
