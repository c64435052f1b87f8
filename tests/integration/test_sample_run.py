"""`python -m rlhf_scratch.sample` on a trained run (`tuned_ppo_run`): same seed, same samples; prompts
from arguments and stdin; bad input in one line (its run-free parts: tests/unit/test_sample_cli.py)."""

import io

from rlhf_scratch.commands.sample import main, sample_both, sequence_kl
from rlhf_scratch.engine.runs import LoadedRun, load_run


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
