"""A catalogue of bad inputs a new user can give: each is answered with exit code 2 and one line
naming the field or file, no traceback, and nothing in an existing run folder is touched (an
unreachable Hub is a failure, not bad input: exit 1)."""

import json
import shutil

import pytest

from rlhf_scratch.commands.train import main
from rlhf_scratch.models.loading import asset_path


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    (root / "empty").mkdir()
    (root / "corrupt").mkdir()
    (root / "corrupt" / "config.json").write_text("{ not json")
    (root / "bert").mkdir()
    (root / "bert" / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertForMaskedLM"]}))
    shutil.copytree(asset_path("tiny_lm"), root / "causal_lm")
    shutil.copytree(asset_path("tiny_reward"), root / "classifier")
    for name, asset in (("truncated_lm", "tiny_lm"), ("truncated_rm", "tiny_reward")):  # a copy cut short
        shutil.copytree(asset_path(asset), root / name)
        weights = root / name / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    (root / "a_file.txt").write_text("x")
    (root / "empty_prompts.txt").write_text("\n")
    (root / "long_prompts.txt").write_text("ok\n" + "great " * 200 + "\n")
    (root / "taken").mkdir()
    (root / "taken" / "metrics.jsonl").write_text('{"phase": 1}\n')
    (root / "no_ckpt").mkdir()
    (root / "no_ckpt" / "config.json").write_text(json.dumps({"algo": "ppo", "task": "sentiment"}))
    for name, saved in {"wrong_type": {"batch_size": "sixty-four"}, "bad_value": {"batch_size": 30},
                        "not_object": [1, 2]}.items():  # config.json edited by hand
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps({"algo": "ppo", "task": "sentiment", **saved}
                                                            if isinstance(saved, dict) else saved))
    return root


SECONDS = ["--total-phases", "1", "--batch-size", "4", "--num-minibatches", "2", "--gen-len", "2",
           "--run-dir", "{root}/accepted"]
CASES = [
    # (argv, the one line on stderr, after "error: ")
    (["poetry"], "task: must be one of sentiment, vader, periods, first_token, arithmetic; got 'poetry'"),
    ([], "task: required, one of sentiment, vader, periods, first_token, arithmetic (or --resume RUN_DIR)"),
    (["sentiment", "--algo", "a2c"], "algo: must be one of ppo, rloo, online_dpo, grpo; got 'a2c'"),
    (["sentiment", "--preset", "gpt5"], "preset: must be one of tiny, gpt2; got 'gpt5'"),
    (["sentiment", "--kl-coeff", "1"], "unrecognized arguments: --kl-coeff 1"),
    (["sentiment", "--kl-coef", "abc"], "argument --kl-coef: invalid float value: 'abc'"),
    (["sentiment", "--kl-coef", "nan"], "beta: must be a finite number >= 0; got nan"),
    (["sentiment", "--base-lr", "inf"], "base_lr: must be a finite number >= 0; got inf"),
    (["sentiment", "--temperature", "0"], "temperature: must be > 0; got 0.0"),
    (["sentiment", "--top-k", "-1"], "top_k: must be >= 0 (0 = the whole vocabulary); got -1"),
    (["sentiment", "--clip-coef", "1.5"], "clip_coef: must be in (0, 1); got 1.5"),
    (["sentiment", "--total-phases", "0"], "total_phases: must be >= 1; got 0"),
    (["sentiment", "--seed", "-1"], "seed: must be >= 0; got -1"),
    # (cases the command once accepted carry SECONDS: were they accepted again, the run would take seconds)
    (["sentiment", "--seed", "99999999999999999999", *SECONDS], "seed: must be at most 4294967295 (numpy's seed range)"),
    (["sentiment", "--lora-targets", "W_Q", *SECONDS], "lora_targets: needs --lora-rank R > 0 (0, the default, is "
     "full fine-tuning, which has no adapters); got lora_targets 'W_Q' with lora_rank 0"),
    (["sentiment", "--lora-alpha", "8", *SECONDS], "lora_alpha: needs --lora-rank R > 0"),
    (["sentiment", "--threads", "-2"], "threads: must be >= 0 (0 = torch's default); got -2"),
    (["sentiment", "--save-every", "-1"], "save_every: must be >= 0 (0 = only at the end); got -1"),
    (["arithmetic", "--env", "abacus"], "env: must be one of calculator (or empty: no environment); got 'abacus'"),
    (["arithmetic", "--max-turns", "2", *SECONDS], "max_turns: needs --env NAME (without an environment an episode is one turn)"),
    (["sentiment", "--batch-size", "30"], "batch_size: must be divisible by num_minibatches (30 % 4 != 0)"),
    (["sentiment", "--algo", "rloo", "--batch-size", "64", "--num-generations", "3"],
     "batch_size: must be divisible by num_generations (64 % 3 != 0)"),
    (["sentiment", "--batch-size", "4", "--num-minibatches", "4", "--gen-len", "1"],
     "batch_size: a minibatch must hold at least 2 tokens to normalise advantages; batch_size / num_minibatches "
     "x gen_len = 1 x 1 = 1"),
    (["sentiment", "--algo", "online_dpo", "--loss-type", "hinge"], "loss_type: must be one of sigmoid, ipo; got 'hinge'"),
    (["sentiment", "--algo", "online_dpo", "--judge", "gpt4"], "judge: must be one of tiny, vader, rule; got 'gpt4'"),
    (["sentiment", "--device", "bogus"], "device: must be auto, cpu, cuda[:N] or mps; got 'bogus'"),
    (["sentiment", "--gen-len", "100000"], "gen_len: 100000 leaves no room for a prompt in the model's context n_ctx=128"),
    (["sentiment", "--prefix", "great " * 200], "prefix: 203 tokens with gen_len 30 exceed the model's context n_ctx=128"),
    (["sentiment", "--model", "{root}/missing"], "model: {root}/missing: no such folder"),
    (["sentiment", "--model", "{root}/empty"], "model: {root}/empty has no config.json (not a Hugging Face model folder)"),
    (["sentiment", "--model", "{root}/corrupt"], "model: {root}/corrupt/config.json is not valid JSON ("),
    (["sentiment", "--model", "{root}/bert"], "model: {root}/bert is a bert model; a local --model folder must be one of the families tested offline here"),
    (["sentiment", "--model", "{root}/classifier"], "model: {root}/classifier is a sequence classifier"),
    (["sentiment", "--model", "{root}/a_file.txt"], "model: {root}/a_file.txt is a file, not a model folder"),
    (["sentiment", "--reward-model", "{root}/causal_lm"], "reward_model: {root}/causal_lm is not a sequence classifier"),
    (["sentiment", "--reward-model", "{root}/missing"], "reward_model: {root}/missing: no such folder"),
    (["sentiment", "--model", "{root}/truncated_lm", *SECONDS], "model: {root}/truncated_lm/model.safetensors: "
     "unreadable weights (Error while deserializing header: incomplete metadata, file not fully covered); the file is "
     "truncated or not a safetensors file"),
    (["sentiment", "--reward-model", "{root}/truncated_rm", *SECONDS],
     "reward_model: {root}/truncated_rm/model.safetensors: unreadable weights ("),
    (["sentiment", "--prompts", "{root}/none.txt"], "prompts: {root}/none.txt: not found"),
    (["sentiment", "--prompts", "{root}/empty_prompts.txt"], "prompts: {root}/empty_prompts.txt: no prompts (file is empty)"),
    (["sentiment", "--prompts", "{root}/long_prompts.txt"], "prompts: {root}/long_prompts.txt line 2: 202 tokens with gen_len 30"),
    (["sentiment", "--run-dir", "{root}/taken"], "run_dir: {root}/taken exists and is not empty; choose another --run-dir"),
    (["sentiment", "--run-dir", "{root}/a_file.txt"], "run_dir: {root}/a_file.txt is a file, not a folder; choose another --run-dir"),
    (["sentiment", "--run-dir", "/proc/rlhf_scratch_run"], "run_dir: cannot write to /proc/rlhf_scratch_run ("),
    (["--resume", "{root}/nowhere"], "{root}/nowhere/config.json: not found (is {root}/nowhere a run folder?)"),
    # a run killed before its first checkpoint: neither resumed nor rerun, and the line says the way out
    (["--resume", "{root}/no_ckpt"], "resume: {root}/no_ckpt has no checkpoint: it stopped before its first "
     "checkpoint, so there is nothing to resume: to start it over in {root}/no_ckpt, remove the folder "
     "(rm -r {root}/no_ckpt) and run the command that began it again, or give it another --run-dir"),
    # the same through the controller (the kill sweep's train-controller case got a worker's "has no checkpoints"
    # instead, so the way out was never said), refused before Ray starts
    (["--resume", "{root}/no_ckpt", "--controller", "ray"], "resume: {root}/no_ckpt has no checkpoint: it stopped "
     "before its first checkpoint, so there is nothing to resume: to start it over in {root}/no_ckpt, remove the folder "
     "(rm -r {root}/no_ckpt) and run the command that began it again, or give it another --run-dir"),
    (["sentiment", "--run-dir", "{root}/no_ckpt"], "run_dir: {root}/no_ckpt holds a run that stopped before its "
     "first checkpoint, so there is nothing to resume: to start it over"),
    (["--resume", "{root}/wrong_type"],
     "{root}/wrong_type/config.json: unreadable config (batch_size: must be an integer; got 'sixty-four')"),
    (["--resume", "{root}/bad_value"],
     "{root}/bad_value/config.json: batch_size: must be divisible by num_minibatches (30 % 4 != 0)"),
    (["--resume", "{root}/not_object"], "{root}/not_object/config.json: unreadable config (not a JSON object)"),
]


@pytest.mark.parametrize("argv, message", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_bad_input_exits_2_with_one_line(folders, capsys, argv, message):
    before = (folders / "taken" / "metrics.jsonl").read_text()
    argv = [a.replace("{root}", str(folders)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith("error: " + message.replace("{root}", str(folders))), err
    assert (folders / "taken" / "metrics.jsonl").read_text() == before, "an existing run folder was touched"


def test_an_unreachable_hub_is_a_failure_exit_1_not_a_bad_flag(capsys):
    """The same --model works online: the environment failed, not the flag (config.command: exit 1)."""
    assert main(["sentiment", "--model", "gpt2"]) == 1  # conftest: HF_HUB_OFFLINE=1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: cannot download 'gpt2' from the Hugging Face Hub"), err


def test_cuda_without_a_gpu(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the error path cannot be reached")  # never on the CPU CI
    assert main(["sentiment", "--device", "cuda"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: device: 'cuda' requested but no CUDA GPU is available")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    from rlhf_scratch.algorithms.ppo import RLHFTrainer
    from rlhf_scratch.config import make_args

    run_dir = tmp_path_factory.mktemp("report") / "run"
    args = make_args("tiny", total_phases=1, batch_size=4, num_minibatches=2, gen_len=4, run_dir=str(run_dir))
    RLHFTrainer(args, quiet=True).train(run_dir)
    return run_dir


def _copy_run(src, dst, **replace):
    shutil.copytree(src, dst)
    for name, content in replace.items():
        (dst / name.replace("_pt", ".pt").replace("_json", ".json")).write_bytes(content)
    return dst


def test_interp_report_bad_inputs(finished_run, tmp_path, capsys):
    from interp.report import main as report

    cases = [
        ([str(tmp_path / "nope")], f"{tmp_path / 'nope'}: no such run folder"),
        ([str(tmp_path)], f"{tmp_path} is not a run folder (no config.json)"),
        ([str(finished_run), "--n-samples", "0"], "--n-samples: must be >= 1; got 0"),
        ([str(finished_run), "--gen-len", "0"], "--gen-len: must be >= 1; got 0"),
        ([str(finished_run), "--gen-len", "500", "--no-reward"], "--gen-len: 500 + the longest prompt"),
        ([str(finished_run), "--out", str(finished_run / "config.json")], f"--out: {finished_run / 'config.json'} is a file"),
        ([str(_copy_run(finished_run, tmp_path / "corrupt", policy_pt=b"\x00garbage"))],
         f"{tmp_path / 'corrupt'}: {tmp_path / 'corrupt' / 'policy.pt'}: unreadable (UnpicklingError)"),
        ([str(_copy_run(finished_run, tmp_path / "badkey",
                        config_json=json.dumps({"algo": "ppo", "kl_coeff": 1}).encode()))],
         "unreadable config (kl_coeff: is not an RLHFArgs field)"),
    ]
    half = _copy_run(finished_run, tmp_path / "half")
    (half / "policy.pt").unlink()
    (half / "status.json").write_text('{"status": "interrupted", "phase": 3}')
    cases.append(([str(half)], f"{half}: no policy.pt yet: the run was interrupted after phase 3; "))
    for argv, message in cases:
        assert report(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and message in err, (argv, err)


@pytest.mark.parametrize("folder, message", [
    ("wrong_type", "wrong_type/config.json: unreadable config (batch_size: must be an integer; got 'sixty-four')"),
    ("bad_value", "bad_value/config.json: batch_size: must be divisible by num_minibatches (30 % 4 != 0)"),
])
def test_sample_refuses_a_run_config_the_command_line_would_refuse(folders, capsys, folder, message):
    from rlhf_scratch.commands.sample import main as sample

    assert sample([str(folders / folder), "hello"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err == f"error: {folders}/{message}", err


STUDY_CASES = [
    # (study, argv, the one line): values only a study's run would have refused, before the fix after the
    # folder was written with the bad plan in it (a rerun failed the same way; the corrected one was refused)
    ("compare", ["sentiment", "--quick", "--seeds", "-1"], "seeds: must be >= 0; got -1"),
    ("compare", ["sentiment", "--quick", "--seeds", "99999999999999999999"], "seeds: must be at most 4294967295"),
    ("compare", ["sentiment", "--quick", "--algos", "rloo", "--", "--lora-rank", "999"],
     "run rloo-s1: lora_rank: must be in 1..128 (the smallest adapted matrix's side"),
    ("compare", ["sentiment", "--quick", "--algos", "rloo", "--", "--num-generations", "3"],
     "run rloo-s1: batch_size: must be divisible by num_generations (8 % 3 != 0)"),
    ("length", ["--quick", "--seeds", "-3"], "seeds: must be >= 0; got -3"),
    ("length", ["--quick", "--methods", "rloo", "--gen-len", "500"],
     "run rloo-s1: gen_len: 500 leaves no room for a prompt in the model's context n_ctx=128"),
    ("overoptimization", ["--quick", "--seeds", "-2"], "seeds: must be >= 0; got -2"),
    ("overoptimization", ["--quick", "--algos", "grpo,bon", "--batch-size", "12"],
     "run grpo-s1-rm10: batch_size: must be divisible by num_generations (12 % 8 != 0)"),
]


@pytest.mark.parametrize("study, argv, message", STUDY_CASES, ids=[f"{c[0]} {' '.join(c[1])}"[:60] for c in STUDY_CASES])
def test_a_study_refuses_what_its_runs_would_refuse_before_writing_its_folder(tmp_path, capsys, study, argv, message):
    import importlib

    main = importlib.import_module({"compare": "rlhf_scratch.studies.compare", "length": "rlhf_scratch.studies.length",
                                    "overoptimization": "rlhf_scratch.studies.overoptimization"}[study]).main
    cut = argv.index("--") if "--" in argv else len(argv)
    assert main([*argv[:cut], "--out", str(tmp_path / "study"), *argv[cut:]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {message}"), err
    assert not (tmp_path / "study").exists(), "a plan that cannot run was saved: the corrected command would be refused"


@pytest.mark.parametrize("content, argv, why", [
    (b"garbage", ["--check"], "NotJSONError: Notebook does not appear to be JSON: 'garbage'"),
    (b"", ["--check"], "NotJSONError"),
    (b"[1]", ["--check"], "AttributeError"),
    (b"\xff\xfe", [], "UnicodeDecodeError"),
    (b"garbage", [], "NotJSONError"),  # executing: refused before a kernel starts, the file left as it was
])
def test_execute_notebooks_refuses_a_file_that_is_not_a_notebook(tmp_path, capsys, content, argv, why):
    from rlhf_scratch.course.execute_notebooks import main as execute_notebooks

    path = tmp_path / "not.ipynb"
    path.write_bytes(content)
    assert execute_notebooks([*argv, str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"error: {path}: not a Jupyter notebook ({why}"), err
    assert path.read_bytes() == content


def test_execute_notebooks_refuses_a_timeout_below_one_second(tmp_path, capsys):
    from rlhf_scratch.course.execute_notebooks import main as execute_notebooks

    path = tmp_path / "empty.ipynb"
    path.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    assert execute_notebooks(["--timeout", "-5", str(path)]) == 2
    assert capsys.readouterr().err.strip() == "error: --timeout -5: at least 1 (seconds a cell may run)"


SMALL_EXACT = ["--draws", "20", "--draws-by-reward", "20", "--off-policy-draws", "20"]


@pytest.mark.parametrize("argv", [["--p-right", "0.1"], ["--top-k", "1"]])
def test_the_microscope_refuses_settings_with_no_true_gradient_in_one_line(tmp_path, capsys, argv):
    from rlhf_scratch.microscope.cli import main as exact

    assert exact(["--out", str(tmp_path / "out"), *argv, *SMALL_EXACT]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: top_k: ∇J_topk is exactly 0 here (p_right "), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [["--stale-step", "1e6"], ["--staleness", "64"]])
def test_the_microscope_refuses_an_off_policy_learner_at_float_precision_in_one_line(tmp_path, capsys, argv):
    """A history whose learner is deterministic to float precision (∇J 0, or rounding): one line naming
    --stale-step and --staleness, exit 2, nothing written; not a RuntimeError or a TypeError in the advice."""
    from rlhf_scratch.microscope.cli import main as exact

    assert exact(["--out", str(tmp_path / "out"), *argv, *SMALL_EXACT]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: stale_step, staleness: the learner at the end of "), err
    assert not (tmp_path / "out").exists()


def test_the_microscope_computes_the_one_token_setting_its_docs_use(tmp_path, capsys):
    """max_len 1 (docs/exact.md's one-token table): no length to gain, so the length-per-gain ratios
    are undefined (null in exact.json), not a ZeroDivisionError."""
    import json

    from rlhf_scratch.microscope.cli import main as exact

    assert exact(["--out", str(tmp_path / "out"), "--vocab", "3", "--max-len", "1", *SMALL_EXACT]) == 0
    result = json.loads((tmp_path / "out" / "exact.json").read_text())
    assert result["environment"]["max_len"] == 1 and result["estimators"]


OTHER_COMMANDS = [
    # (module, argv, the one line): a seed every command takes by train's rule (numpy's range); a
    # --vocab-size 0 that was "the default"; pairs that are not text
    ("rlhf_scratch.reward_model", ["--pairs", "{root}/x.jsonl", "--seed", "-1"], "seed: must be >= 0; got -1"),
    ("rlhf_scratch.preferences", ["--out", "{root}/p.jsonl", "--num-pairs", "2", "--gen-len", "2", "--seed", "-1"],
     "seed: must be >= 0; got -1"),
    ("rlhf_scratch.sample", ["{root}/no_ckpt", "--seed", "99999999999999999999"], "seed: must be at most 4294967295"),
    ("rlhf_scratch.models.families", ["gpt2", "{root}/fam", "--seed", "-1"], "seed: must be >= 0; got -1"),
    ("rlhf_scratch.models.families", ["gpt2", "{root}/fam", "--vocab-size", "0"],
     "vocab_size: 0 is below the tokenizer's 8192 ids (gpt2)"),
    ("rlhf_scratch.reward_model", ["--pairs", "{root}/binary.jsonl", "--run-dir", "{root}/rm"],
     "pairs: {root}/binary.jsonl: not UTF-8 text (byte 0)"),
]


@pytest.mark.parametrize("module, argv, message", OTHER_COMMANDS, ids=[f"{c[0]} {' '.join(c[1])}"[13:70] for c in OTHER_COMMANDS])
def test_other_commands_refuse_in_one_line(folders, capsys, module, argv, message):
    import importlib

    (folders / "binary.jsonl").write_bytes(b"\xff\xfe\x00")
    main = importlib.import_module(module).main
    assert main([a.replace("{root}", str(folders)) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: " + message.replace("{root}", str(folders))), err
    assert not any((folders / name).exists() for name in ("p.jsonl", "fam", "rm")), "a refused command wrote something"
