"""`python -m rlhf_scratch.sample`: reference and tuned completions side by side, offline."""

import io

import torch
from test_logger import one_sample_rollout

from rlhf_scratch.commands.sample import main, sample_both, sequence_kl
from rlhf_scratch.engine.runs import LoadedRun, load_run


def test_sequence_kl_sums_kept_tokens_only():
    rollout = one_sample_rollout()
    rollout.kl = torch.tensor([[0.25, 99.0]])
    rollout.completion_mask = torch.tensor([[True, False]])
    assert sequence_kl(rollout).tolist() == [0.25], "Σ over kept tokens: the padded one is not an action"


def test_same_weights_and_seed_give_the_same_samples_and_zero_kl(tuned_ppo_run):
    run = load_run(tuned_ppo_run)
    same = LoadedRun(policy=run.reference, reference=run.reference, args=run.args, path=run.path)
    reference, tuned = sample_both(same, ["I expected"], n=3, gen_len=6, temperature=1.0, top_k=10,
                                   stop_at_eos=False, seed=5)
    assert reference.completions == tuned.completions, "one seed for both models"
    assert sequence_kl(tuned).abs().max() < 1e-5
    reference2, tuned2 = sample_both(run, ["I expected"], n=3, gen_len=6, temperature=1.0, top_k=10,
                                     stop_at_eos=False, seed=5)
    assert reference2.completions == reference.completions, "the seed fixes the samples"
    assert (sequence_kl(tuned2) > 0).all(), "the tuned model differs from the reference"


def test_cli_prompts_from_arguments_and_stdin(tuned_ppo_run, capsys, monkeypatch):
    assert main([str(tuned_ppo_run), "I expected", "The plot", "-n", "2", "--gen-len", "5"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("| I expected") or line.startswith("| The plot")]
    assert len(table) == 4, out
    assert "mean reward: reference" in out and "nats" in out
    monkeypatch.setattr("sys.stdin", io.StringIO("Two hours of\n\n"))
    assert main([str(tuned_ppo_run), "-n", "1", "--gen-len", "4"]) == 0
    assert capsys.readouterr().out.count("| Two hours of") == 1


def test_cli_bad_input_is_one_line(tuned_ppo_run, tmp_path, capsys):
    assert main([str(tmp_path), "x"]) == 2
    assert main([str(tuned_ppo_run), "x", "-n", "0"]) == 2
    assert main([str(tuned_ppo_run), "x", "--gen-len", "200"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and all(e.startswith("error: ") for e in errors), errors
    assert "config.json" in errors[0] and "-n" in errors[1] and "context" in errors[2]


def test_a_newline_in_a_completion_stays_on_its_row():
    from rlhf_scratch.commands.sample import side_by_side

    reference, tuned = one_sample_rollout(), one_sample_rollout()
    tuned.completions = [" great\nfilm"]
    rows = side_by_side(reference, tuned).splitlines()
    assert len(rows) == 3, "header, rule, one row"
    assert "great\\nfilm" in rows[2]
