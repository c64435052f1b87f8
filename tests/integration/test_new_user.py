"""What a new user hit on the newer commands (issue 32): each case fails on the old behaviour.

Wrong input is one line and a non-zero exit, with no traceback and nothing lost; a finished
training is never thrown away by an evaluation error; every path and reward a run records
resolves the same way on resume; loading a reward model does not consume the run's randomness.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rlhf_scratch.models.loading import asset_path

ROOT = Path(__file__).resolve().parents[2]
TINY_RUN = ["--total-phases", "1", "--batch-size", "8", "--num-minibatches", "2", "--gen-len", "5",
            "--warmup-steps", "0", "--threads", "1", "--save-every", "1"]


def write_pairs(path: Path, n: int, gold: bool = True) -> Path:
    """n marker pairs (chosen holds " great"), with gold scores 1 / 0 when `gold`."""
    rows = [{"prompt": f"Review {i}:", "chosen": " great fun.", "rejected": " table seven.",
             **({"score_chosen": 1.0, "score_rejected": 0.0} if gold else {})} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def tiny_reward_model_run(folder: Path) -> Path:
    """A reward-model run folder as `train_reward_model` leaves it, without training: config.json
    and an untrained RewardModel's weights (its head is random; enough to load and score)."""
    from rlhf_scratch.models.loading import load_lm
    from rlhf_scratch.reward.model import KIND, WEIGHTS_FILE, RewardModel

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"algo": KIND, "model": "tiny", "pairs": "x.jsonl"}))
    torch.save(RewardModel(load_lm("tiny")).state_dict(), folder / WEIGHTS_FILE)
    return folder


# --- 1. gold scores on some rows only --------------------------------------------------------------


@pytest.mark.parametrize("bad_row, message", [
    ({"prompt": "p", "chosen": "a", "rejected": "b"}, "score_chosen is missing"),
    ({"prompt": "p", "chosen": "a", "rejected": "b", "score_chosen": 1.0, "score_rejected": None},
     "score_rejected is None"),
    ({"prompt": "p", "chosen": "a", "rejected": "b", "score_chosen": float("nan"), "score_rejected": 0.0},
     "score_chosen is nan"),
])
def test_gold_scores_on_some_rows_only_are_refused_before_training(bad_row, message, tmp_path, capsys):
    """Used to train to the end, then crash in gold_accuracy with a KeyError/TypeError (no weights kept)."""
    from rlhf_scratch.commands.reward_model import main

    pairs = write_pairs(tmp_path / "pairs.jsonl", 4)
    lines = pairs.read_text().splitlines()
    lines[2] = json.dumps(bad_row).replace("NaN", "NaN")
    pairs.write_text("\n".join(lines) + "\n")
    assert main(["--pairs", str(pairs), "--run-dir", str(tmp_path / "rm")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: pairs: {pairs} row 3: {message}") and "\n" not in err
    assert not (tmp_path / "rm").exists(), "nothing is written for a refused input"


def test_an_evaluation_that_fails_never_discards_the_finished_training(tmp_path, monkeypatch, one_thread):
    """The last epoch's evaluation raising used to leave no weights and no checkpoint: now the last
    step is checkpointed before anything is evaluated, and resuming finishes the run."""
    import rlhf_scratch.engine.reward_model as run
    import rlhf_scratch.reward.model as rm
    from rlhf_scratch.engine.runs import read_status

    pairs = write_pairs(tmp_path / "pairs.jsonl", 12)
    args = rm.RewardModelArgs(pairs=str(pairs), run_dir=str(tmp_path / "rm"), epochs=2, batch_size=4,
                              eval_fraction=0.25, save_every=0, quiet=True)
    evaluate = rm.evaluate_pairs
    calls = []

    def broken_second_evaluation(model, rows, *a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the evaluation broke")
        return evaluate(model, rows, *a, **k)

    monkeypatch.setattr(run, "evaluate_pairs", broken_second_evaluation)
    with pytest.raises(RuntimeError, match="the evaluation broke"):
        run.train_reward_model(args)
    status = read_status(tmp_path / "rm")
    assert (status["status"], status["phase"]) == ("failed", 6), "the 6th (last) step is done and recorded"
    assert (tmp_path / "rm" / "checkpoints" / "phase-0006").is_dir(), "the finished training is kept"
    monkeypatch.setattr(run, "evaluate_pairs", evaluate)
    run.train_reward_model(rm.RewardModelArgs(**{**vars(args), "run_dir": str(tmp_path / "rm")}), resume=True)
    assert (tmp_path / "rm" / rm.WEIGHTS_FILE).is_file() and read_status(tmp_path / "rm")["status"] == "finished"


# --- 2. a device that is not there ----------------------------------------------------------------


def test_reward_model_on_a_missing_gpu_is_one_line(tmp_path, monkeypatch, capsys):
    from rlhf_scratch.commands.reward_model import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    pairs = write_pairs(tmp_path / "pairs.jsonl", 4)
    assert main(["--pairs", str(pairs), "--device", "cuda", "--run-dir", str(tmp_path / "rm")]) == 2
    assert capsys.readouterr().err.strip().startswith("error: device: 'cuda' requested but no CUDA GPU is available")


# --- 4. --reward-model where the task reads none --------------------------------------------------


@pytest.mark.parametrize("task", ["vader", "periods"])
def test_a_reward_model_for_a_task_that_reads_none_is_refused(task, capsys):
    """Used to be recorded in config.json and silently ignored (`rewarded_by` said `task vader`)."""
    from rlhf_scratch.commands.train import main

    assert main([task, "--reward-model", "runs/rm"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: reward_model: only task sentiment reads a reward model") and "\n" not in err


# --- 5. a recorded path means the same file on resume ---------------------------------------------


def test_a_relative_reward_model_path_is_recorded_absolute_and_its_weights_checked(tmp_path, monkeypatch, capsys):
    """Resumed from another folder holding its own `rm`, a run used to continue silently with that
    other reward model. Now config.json holds the absolute path and rewarded_by a hash of its
    weights: changed weights refuse the resume in one line."""
    from transformers import AutoModelForSequenceClassification

    from rlhf_scratch.commands.train import main

    first, second = tmp_path / "a", tmp_path / "b"
    for folder in (first, second):
        shutil.copytree(asset_path("tiny_reward"), folder / "rm")
    monkeypatch.chdir(first)
    assert main(["sentiment", "--reward-model", "rm", *TINY_RUN, "--run-dir", str(tmp_path / "run")]) == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["reward_model"] == str(first / "rm"), "recorded absolute, not relative to the folder it ran in"
    assert len(config["rewarded_by"]["reward_model_sha256"]) == 64
    capsys.readouterr()

    monkeypatch.chdir(second)  # another `rm` here: it must not be picked up
    assert main(["--resume", str(tmp_path / "run"), "--total-phases", "2"]) == 0

    model = AutoModelForSequenceClassification.from_pretrained(first / "rm")
    with torch.no_grad():
        next(model.parameters()).add_(0.01)
    model.save_pretrained(first / "rm")  # the same path, other weights
    capsys.readouterr()
    assert main(["--resume", str(tmp_path / "run"), "--total-phases", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: resume: {tmp_path / 'run'} was rewarded by task sentiment (reward model weights")
    assert "\n" not in err


# --- 6. the reward-model trainer has train's care ---------------------------------------------------


def test_sigterm_finishes_the_reward_model_step_checkpoints_and_resumes(tmp_path):
    """Used to die at once: no checkpoint, status.json left at running, phase 0."""
    pairs = write_pairs(tmp_path / "pairs.jsonl", 40)
    run = tmp_path / "rm"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "rlhf_scratch.reward_model", "--pairs", str(pairs), "--run-dir",
                             str(run), "--epochs", "50", "--batch-size", "4", "--save-every", "0", "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    deadline = time.time() + 240
    while time.time() < deadline:
        status = json.loads((run / "status.json").read_text()) if (run / "status.json").is_file() else {}
        if status.get("phase", 0) >= 2:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "interrupted" and status["phase"] >= 2
    assert (run / "checkpoints" / f"phase-{status['phase']:04d}").is_dir()
    assert f"python -m rlhf_scratch.reward_model --resume {run}" in err.strip().splitlines()[-1]


def test_a_reward_model_folder_given_to_train_sample_or_report_says_what_it_is(tmp_path, capsys):
    """They used to say "unreadable config"."""
    from interp.report import main as report
    from rlhf_scratch.commands.sample import main as sample
    from rlhf_scratch.commands.train import main as train

    run = tiny_reward_model_run(tmp_path / "rm")
    for command, argv in ((train, ["--resume", str(run)]), (sample, [str(run), "I expected"]), (report, [str(run)])):
        assert command(argv) == 2
        err = capsys.readouterr().err.strip()
        assert f"{run} is a reward-model run, not a policy's: resume it with python -m rlhf_scratch.reward_model" in err
        assert "\n" not in err


# --- 8. the reward shown is named -----------------------------------------------------------------


def test_sample_names_the_reward_model_it_shows(tmp_path):
    """`sample` and `interp.report` used to say "reward shown: task sentiment" for a run trained
    against a reward model, whose scores are unbounded and which was not named."""
    from rlhf_scratch.config import make_args
    from rlhf_scratch.engine.runs import reward_shown

    rm = tiny_reward_model_run(tmp_path / "rm")
    run = tmp_path / "run"
    run.mkdir()
    args = make_args("tiny", reward_model=str(rm))
    (run / "config.json").write_text(json.dumps({**args.to_dict(), "rewarded_by": {"reward": "task sentiment",
                                                                                     "judge": None}}))
    shown = reward_shown(run, args)
    assert shown.startswith(f"reward shown: {rm}, a Bradley–Terry reward model's scalar score (unbounded")


# --- 9. loading a reward model leaves the run's randomness alone ----------------------------------


def test_loading_a_reward_model_run_does_not_consume_the_global_rng(tmp_path):
    """`--reward-model runs/rm` and its export gave different samples under the same seed: building
    the classifier drew from the global RNG after seeding (the head's and the HF model's init)."""
    from rlhf_scratch.reward.model import reward_model_classifier

    rm = tiny_reward_model_run(tmp_path / "rm")
    torch.manual_seed(0)
    before = torch.get_rng_state().clone()
    reward_model_classifier(rm)
    assert torch.equal(before, torch.get_rng_state())


# --- 12. what the commands print ------------------------------------------------------------------


def test_train_help_has_one_usage_line(capsys):
    from rlhf_scratch.commands.train import main

    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert sum(line.startswith("usage:") for line in text.splitlines()) == 1
    assert "rlhf_scratch.reward_model` run folder" in " ".join(text.replace("│", " ").split()), "--reward-model names its run folders"


def test_no_nested_minibatch_bar_when_the_output_is_not_a_terminal(tmp_path, capsys):
    from rlhf_scratch.commands.train import main

    assert main(["sentiment", *TINY_RUN, "--run-dir", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "phases" in err and "minibatches" not in err


def test_reward_model_ends_with_the_next_commands(tmp_path, capsys, one_thread):
    from rlhf_scratch.commands.reward_model import main

    pairs = write_pairs(tmp_path / "pairs.jsonl", 6)
    assert main(["--pairs", str(pairs), "--run-dir", str(tmp_path / "rm"), "--epochs", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"python -m rlhf_scratch.train sentiment --reward-model {tmp_path / 'rm'}" in out


# --- 3. the model's context, checked before anything is sampled -----------------------------------


@pytest.mark.parametrize("flags, message", [
    (["--gen-len", "128"], "error: gen_len: 128 leaves no room for a prompt in the model's context n_ctx=128"),
    (["--gen-len", "100"], "tokens with gen_len 100 exceed the model's context n_ctx=128"),
])
def test_preferences_checks_the_context_length_in_one_line(flags, message, tmp_path, capsys):
    """Used to crash with `IndexError: index 128 is out of bounds` mid-generation."""
    from rlhf_scratch.commands.preferences import main

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("A short one.\n" + "a long review opening that goes on " * 8 + "\n")
    out = tmp_path / "pairs.jsonl"
    assert main(["--out", str(out), "--num-pairs", "2", "--prompts", str(prompts), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not out.exists()


def test_the_overoptimization_study_checks_the_context_before_making_its_folder(tmp_path, capsys):
    """A --gen-len that overflows the model crashed mid-study with an IndexError, and the half-made
    folder then refused the corrected command ("holds a different study")."""
    from rlhf_scratch.commands.overoptimization import main

    assert main(["--out", str(tmp_path / "study"), "--gen-len", "120"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: gen_len: prompts: rt row") and "exceed the model's context n_ctx=128" in err
    assert not (tmp_path / "study").exists()


@pytest.mark.parametrize("ds, gold, verdict", [
    ([0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.25, 0.3], "not enough points (4 < 6)"),
    ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0.10, 0.19, 0.27, 0.34, 0.40, 0.45], "peak outside the data"),
    ([0.2, 0.4, 0.6, 0.8, 1.0, 1.2], [0.2, 0.32, 0.36, 0.34, 0.28, 0.18], None),
])
def test_a_gao_fit_is_reported_only_where_the_data_support_it(ds, gold, verdict):
    """The study printed R* = 162 from 4 points that stayed within ±1. Red if a fit from too few
    points, or one whose peak lies far beyond the last measured d, is reported as a finding."""
    from rlhf_scratch.studies.overoptimization import fit_gao, unsupported_fit

    why = unsupported_fit(fit_gao(ds, gold, "rl"), ds)
    assert (why is None) if verdict is None else why.startswith(verdict), why


def test_the_features_page_opens_with_its_causal_verdict():
    """features.html never said when the top features recover almost none of the reward gain
    (0.652 → 0.657 against the tuned model's 0.882): the verdict is its first line."""
    from interp.features_page import causal_verdict

    c = {"top_n": 10, "reference": {"reward": 0.652}, "tuned": {"reward": 0.882}, "steered": {"reward": 0.657},
         "steered_random_mean": {"reward": 0.650}, "ablated": {"reward_drop": 0.046},
         "ablated_random_mean": {"reward_drop": 0.023}}
    verdict = causal_verdict(c)
    assert verdict.startswith("Verdict: the top 10 features recover almost none of the reward gain")
    assert "recovers 2% of the gap 0.652 → 0.882 (random features: -1%)" in verdict  # (0.657−0.652)/0.230
    assert "removes 20% (random: 10%)" in verdict  # 0.046 / 0.230, 0.023 / 0.230
