"""`python -m rlhf_scratch.compare` and `interp.across_runs`."""

import json

import pytest
import torch

from interp.across_runs import InsideChange, change_similarity, inside_changes
from interp.toy import perturb_head, toy_model, toy_tokenizer
from rlhf_scratch.compare import RunSpec, main, markdown_table, plan_runs

SMALL = ["--", "--batch-size", "8", "--gen-len", "6", "--num-minibatches", "2"]


def change(label, values):
    return InsideChange(label, ["s"], torch.zeros(1), torch.tensor(values, dtype=torch.float32).view(1, -1), 0.0)


def test_change_similarity_by_hand():
    sim = change_similarity([change("a", [1, 0]), change("b", [0, 2]), change("c", [-3, 0]), change("z", [0, 0])])
    assert sim[0, 0].item() == pytest.approx(1.0) and sim[0, 1].item() == pytest.approx(0.0)
    assert sim[0, 2].item() == pytest.approx(-1.0), "opposite changes: −1, whatever their size"
    assert torch.isnan(sim[3]).all(), "a model that changed nothing has no direction"


def test_a_run_compared_with_itself_is_1():
    ref = toy_model(seed=0, tokenizer=toy_tokenizer())
    tuned = perturb_head(ref, 1, 2, scale=3.0)
    changes = inside_changes(ref, {"x": tuned, "same x": tuned}, ["This movie was really", "The plot"])
    sim = change_similarity(changes)
    assert sim[0, 1].item() == pytest.approx(1.0, abs=1e-6)
    assert changes[0].drift[0].item() == pytest.approx(0.0, abs=1e-6), "the embeddings did not change"


def test_plan_and_names():
    specs = plan_runs(["ppo", "rloo"], [0, 1], [0.1])
    assert [s.name for s in specs] == ["ppo-s0-b0.1", "ppo-s1-b0.1", "rloo-s0-b0.1", "rloo-s1-b0.1"]
    assert RunSpec("online_dpo", 3).name == "online_dpo-s3" and RunSpec("online_dpo", 3).group == "Online DPO"


@pytest.mark.parametrize("argv, message", [
    (["sentiment", "--algos", "ppo,sac"], "algos: unknown sac"),
    (["sentiment", "--kl-coefs", "0.1,x"], "kl_coefs: expected a comma-separated list"),
    (["sentiment", "--seeds", ""], "seeds: empty list"),
])
def test_bad_input_is_one_line(argv, message, tmp_path, capsys):
    assert main([*argv, "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {message}")
    assert not (tmp_path / "c").exists()


def test_an_existing_folder_is_never_taken_over(tmp_path, capsys):
    (tmp_path / "mine.txt").write_text("keep")
    assert main(["sentiment", "--out", str(tmp_path)]) == 2
    assert "not a comparison folder" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


@pytest.mark.slow
def test_comparison_writes_every_file_and_does_not_redo_finished_runs(tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["sentiment", "--algos", "ppo,rloo", "--total-phases", "2", "--out", str(out), *SMALL]
    assert main(argv) == 0
    for name in ("reward_vs_phase.png", "frontier.png", "heldout.png", "inside.png", "table.md", "table.json",
                 "index.html", "compare.json", "results.json"):
        assert (out / name).is_file(), name
    table = json.loads((out / "table.json").read_text())
    assert set(table["runs"]) == {"ppo-s1", "rloo-s1"}
    row = table["runs"]["ppo-s1"]
    assert row["peak_mib"] > 100 and row["wall_s"] > 0 and "eval/vader_final" in row
    assert table["inside"]["dla_change_cosine"][0][0] == pytest.approx(1.0)
    html = (out / "index.html").read_text()
    assert html.count("data:image/png;base64,") == 4 and "Last samples" in html
    metrics = out / "runs" / "ppo-s1" / "metrics.jsonl"
    before = (metrics.stat().st_mtime_ns, (out / "results.json").read_text())
    assert main(argv) == 0  # again: both runs finished, nothing is retrained
    assert (metrics.stat().st_mtime_ns, (out / "results.json").read_text()) == before
    changed = [a if a != "ppo,rloo" else "ppo" for a in argv]
    assert main(changed) == 2, "a different plan in the same folder is refused"
    assert "holds a different comparison" in capsys.readouterr().err


def test_table_shows_held_out_scores_from_phase_1_to_the_end():
    row = {"reward_start": 0.5, "reward_final": 0.91, "kl_final": 0.25, "eval/vader_start": 0.6, "eval/vader_final": 0.55,
           "wall_s": 12.4, "peak_mib": 1234.5, "tokens_per_s": 100.0}
    table = markdown_table({"ppo-s1": {"phases": 5, "averaged": 5, **row}}).splitlines()
    assert table[0].startswith("| run | reward, phase 1 | reward, last 5 of 5 phases | KL, last 5 of 5 phases | "
                               "VADER (held out) |"), "says what was averaged: a 5-phase run has no last 10"
    assert table[2] == "| ppo-s1 | 0.500 | 0.910 | 0.250 | 0.600 → 0.550 |  |  | 12 | 1,234 | 100 |"


@pytest.mark.slow
def test_an_interrupted_comparison_continues_the_interrupted_run(tmp_path, monkeypatch):
    """Ctrl-C reaches the training run after its first phase; the same command again resumes that run
    from its checkpoint (`train --resume`): the phases already done are kept, not retrained."""
    import signal
    import subprocess
    import threading
    import time

    from rlhf_scratch import compare
    from rlhf_scratch.runs import read_status

    out = tmp_path / "cmp"
    argv = ["sentiment", "--algos", "rloo", "--total-phases", "12", "--no-interp", "--out", str(out), *SMALL]
    metrics = out / "runs" / "rloo-s1" / "metrics.jsonl"
    real_popen, commands = subprocess.Popen, []

    def popen_then_ctrl_c(cmd, **kwargs):
        commands.append(cmd)
        proc = real_popen(cmd, **kwargs)
        if len(commands) > 1:
            return proc

        def after_first_phase():
            while proc.poll() is None and not (metrics.is_file() and metrics.read_text().count("\n") >= 1):
                time.sleep(0.01)
            proc.send_signal(signal.SIGINT)

        threading.Thread(target=after_first_phase, daemon=True).start()
        return proc

    monkeypatch.setattr(compare.subprocess, "Popen", popen_then_ctrl_c)
    assert main(argv) == 1, "the interrupted run stops the comparison, which says how to continue"
    status = read_status(out / "runs" / "rloo-s1")
    assert status["status"] == "interrupted" and 1 <= status["phase"] < 12
    done = metrics.read_text().splitlines()
    assert main(argv) == 0
    assert commands[0][3:5] == ["sentiment", "--algo"] and commands[1][3:] == ["--resume", str(out / "runs" / "rloo-s1")]
    lines = metrics.read_text().splitlines()
    assert lines[: len(done)] == done, "the phases done before Ctrl-C are kept"
    assert [json.loads(line)["phase"] for line in lines] == list(range(1, 13))
    assert read_status(out / "runs" / "rloo-s1")["status"] == "finished"
    assert "rloo-s1" in json.loads((out / "results.json").read_text())


def test_help_shows_every_default(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("(default: 100)", "(default: 1)", "(default: ppo,rloo,online_dpo"):
        assert default in text, default


def test_a_running_comparison_shows_each_runs_phase(tmp_path, monkeypatch):
    """`run_one` reports the run's completed phases (status.json) while its process runs."""
    import subprocess
    import sys

    from rlhf_scratch import compare

    run_dir = tmp_path / "ppo-s1"
    fake_train = ("import json, os, sys, time\n"
                  f"d = {str(run_dir)!r}; os.makedirs(d, exist_ok=True)\n"
                  "for phase in (1, 2, 3):\n"
                  "    time.sleep(0.7)\n"
                  "    open(os.path.join(d, 'status.json'), 'w').write(json.dumps({'status': 'running', 'phase': phase}))\n")
    real_popen = subprocess.Popen
    monkeypatch.setattr(compare.subprocess, "Popen", lambda cmd, **kw: real_popen([sys.executable, "-c", fake_train], **kw))
    seen = []
    measured = compare.run_one(RunSpec("ppo", 1), "sentiment", run_dir, [], progress=seen.append)
    assert seen[-1] == 3 and {1, 2} & set(seen), seen
    assert seen == sorted(seen), "phases only go forward"
    assert measured["wall_s"] > 2 and measured["peak_mib"] > 0


def test_grpo_is_compared_with_its_kl_measured(tmp_path):
    """GRPO's default β = 0 logs a NaN KL; a comparison runs it with --measure-kl, so it has a frontier point."""
    import math

    out = tmp_path / "cmp"
    argv = ["sentiment", "--algos", "grpo", "--total-phases", "2", "--no-interp", "--out", str(out), *SMALL]
    assert main(argv) == 0
    assert json.loads((out / "runs" / "grpo-s1" / "config.json").read_text())["measure_kl"] is True
    row = json.loads((out / "table.json").read_text())["runs"]["grpo-s1"]
    assert math.isfinite(row["kl_final"]), "no KL: the run was not given --measure-kl"
    assert "<h1>GRPO</h1>" in (out / "index.html").read_text()
