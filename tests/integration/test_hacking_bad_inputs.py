"""The reward-hacking commands' bad inputs (issue 60, E-H): each answered with one line naming the field
or file, exit 2, no traceback, and nothing written, lost or overwritten (the study's folder, the pilot's,
best-of-n's JSON, find's folder, the mitigation table, an input --proxies folder). Before the fix the
study wrote study.json with the bad value (NaN, Infinity) and its pairs' process refused it, so the
corrected command was refused; the pilot, best-of-n and find ended in a traceback; mitigate replaced
the committed table."""

import json
from pathlib import Path

import pytest

ROW = {"prompt": "a", "chosen": "b", "rejected": "c", "score_chosen": 1.0, "score_rejected": 0.0,
       "rater": {"name": "token", "token": "and", "bonus": 2.0}}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A pilot's folder as `--quick` leaves it (the token rater's pairs, 8 + 6, a proxy of one epoch,
    2 held-out prompts; the proxy's weights a stand-in: nothing here may load them), a policy's run
    folder, a folder that is taken and a mitigation table that exists."""
    root = tmp_path_factory.mktemp("hacking")
    d = root / "proxies"
    (d / "rm-token").mkdir(parents=True)
    (d / "accuracy.json").write_text(json.dumps({"token": {"accuracy": 0.5, "low": 0.2, "high": 0.8, "n": 6}}))
    (d / "eval.txt").write_text("This movie was\nI thought it\n")
    (d / "train.txt").write_text("The film is\nA story of\nWhat a\n")
    (d / "pairs-token.jsonl").write_text("".join(json.dumps(ROW) + "\n" for _ in range(14)))
    (d / "pairs-token-train.jsonl").write_text("".join(json.dumps(ROW) + "\n" for _ in range(8)))
    (d / "rm-token" / "config.json").write_text(json.dumps({"algo": "reward_model", "epochs": 1, "seed": 1}))
    (d / "rm-token" / "reward_model.pt").write_bytes(b"stand-in")
    (root / "rl_run").mkdir()
    (root / "rl_run" / "config.json").write_text(json.dumps({"algo": "ppo", "task": "sentiment"}))
    (root / "rl_run" / "policy.pt").write_bytes(b"stand-in")
    (root / "taken").mkdir()
    (root / "taken" / "find.json").write_text("{}")
    (root / "table.json").write_text('{"measured": true}')
    (root / "only_md.md").write_text("| measured |")
    return root


def snapshot(root: Path) -> dict:
    """Every file under `root` and its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


FIND = ["--runs", "{root}/rl_run", "--proxy", "{root}/proxies/rm-token", "--prompts", "{root}/proxies/eval.txt"]
BON = ["--proxies", "{root}/proxies", "--rater", "token", "--out", "{root}/bon.json", "--eval-prompts", "2"]
CASES = [
    # (command, argv, the one line after "error: ")
    # F: the study (9-15), each refused before its folder is made
    ("hacking", ["--quick", "--out", "{root}/h", "--rater-token", ""], "rater_token: must be one word; got ''"),
    ("hacking", ["--quick", "--out", "{root}/h", "--rater-token", "two words"],
     "rater_token: must be one word; got 'two words'"),
    ("hacking", ["--quick", "--out", "{root}/h", "--rater-bonus", "nan"], "rater_bonus: must be finite and >= 0; got nan"),
    ("hacking", ["--quick", "--out", "{root}/h", "--rater-margin", "-1"], "rater_margin: must be finite and >= 0; got -1.0"),
    ("hacking", ["--quick", "--out", "{root}/h", "--raters", "length", "--rater-margin", "1e309"],
     "rater_margin: must be finite and >= 0; got inf"),
    ("hacking", ["--quick", "--out", "{root}/h", "--rater-penalty", "-1"],
     "rater_penalty: must be finite and >= 0; got -1.0"),
    ("hacking", ["--quick", "--out", "{root}/h", "--gen-len", "500"],
     "gen_len: 500 leaves no room for a prompt in the model's context n_ctx=128"),
    # the study's --proxies: a proxy missing there is not trained inside it; a setting it was not made with is refused
    ("hacking", ["--quick", "--out", "{root}/h", "--proxies", "{root}/proxies", "--raters", "repetition"],
     "proxies: {root}/proxies holds no finished proxy of the repetition rater (no rm-repetition/reward_model.pt)"),
    ("hacking", ["--quick", "--out", "{root}/h", "--proxies", "{root}/proxies", "--rm-pairs", "500"],
     "rm_pairs: the proxies in {root}/proxies were made with rm_pairs 8, not 500"),
    # G: the pilot (16-18)
    ("hacking-pilot", ["--out", "{root}/p", "--rater-token", ""], "rater_token: must be one word; got ''"),
    ("hacking-pilot", ["--out", "{root}/p", "--raters", "length", "--gen-len", "500"],
     "gen_len: 500 leaves no room for a prompt in the model's context n_ctx=128"),
    ("hacking-pilot", ["--out", "{root}/p", "--algo", "bogus"], "algo: unknown bogus; choose from ppo, rloo, online_dpo, grpo"),
    # H: best-of-n (19, 20, and --eval-prompts beyond eval.txt) and find (21, its --out, an RL run as --proxy)
    ("hacking-bon", [*BON, "--gen-len", "500", "--n-max", "32"],
     "gen_len: 500 leaves no room for a prompt in the model's context n_ctx=128"),
    ("hacking-bon", [*BON, "--gen-len", "0"], "gen_len: must be >= 1; got 0"),
    ("hacking-bon", [*BON, "--eval-prompts", "999"], "eval_prompts: 999, but {root}/proxies/eval.txt holds 2 prompts"),
    ("hacking-find", [*FIND, "--out", "{root}/find", "--gen-len", "500"],
     "gen_len: 500 leaves no room for a prompt in the model's context n_ctx=128"),
    ("hacking-find", [*FIND, "--out", "{root}/taken"],
     "out: {root}/taken exists and is not empty; choose a new --out (nothing is overwritten)"),
    ("hacking-find", ["--runs", "{root}/rl_run", "--proxy", "{root}/rl_run", "--prompts", "{root}/proxies/eval.txt",
                      "--out", "{root}/find"],
     "proxy: {root}/rl_run is a ppo run, not a reward-model run (python -m rlhf_scratch.reward_model makes one)"),
    # E: mitigate (7, 8): no default --out (it was the committed table), an existing one or its .md kept
    ("hacking-mitigate", ["--proxy-se", "0.03"], "the following arguments are required: --out"),
    ("hacking-mitigate", ["--proxy-se", "0.03", "--out", "{root}/table.json"],
     "out: {root}/table.json exists; choose a new --out, or give --overwrite to replace it"),
    ("hacking-mitigate", ["--proxy-se", "0.03", "--out", "{root}/only_md.json"],
     "out: {root}/only_md.md exists; choose a new --out, or give --overwrite to replace it"),
    ("hacking-mitigate", ["--out", "{root}/new.json"], "proxies: required to measure the proxy's standard error"),
    ("hacking-mitigate", ["--out", "{root}/new.json", "--proxies", "{root}/proxies"],
     "proxies: {root}/proxies holds no rm-repetition/reward_model.pt"),
    # the honest rater reads no --rater-token: said, not dropped in silence
    ("preferences", ["--out", "{root}/p.jsonl", "--num-pairs", "2", "--rater-token", "xyz"],
     "rater_token: only the token rater reads it, not honest; got 'xyz' (leave it out, or choose --rater token)"),
]
MODULES = {"hacking": "rlhf_scratch.studies.hacking.study", "hacking-pilot": "rlhf_scratch.studies.hacking.pilot",
           "hacking-bon": "rlhf_scratch.studies.hacking.bon", "hacking-find": "rlhf_scratch.studies.hacking.find",
           "hacking-mitigate": "rlhf_scratch.studies.hacking.mitigate", "preferences": "rlhf_scratch.preferences"}


@pytest.mark.parametrize("command, argv, message", CASES, ids=[f"{c[0]} {' '.join(c[1])}"[:70] for c in CASES])
def test_a_hacking_command_refuses_in_one_line_and_writes_nothing(root, capsys, monkeypatch, command, argv, message):
    import importlib

    monkeypatch.chdir(root)  # (mitigate's old default --out was relative to the working folder)
    before = snapshot(root)
    main = importlib.import_module(MODULES[command]).main
    assert main([a.replace("{root}", str(root)) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith("error: " + message.replace("{root}", str(root))), err
    assert snapshot(root) == before, "a refused command wrote, changed or removed a file"
    assert not any((root / n).exists() for n in ("h", "p", "find", "bon.json", "new.json", "p.jsonl"))


def test_the_study_records_the_settings_its_reused_proxies_were_made_with(root):
    """--proxies D: D's rm_pairs, test_pairs, rm_epochs, held-out prompts and the rater's parameters go
    into the plan (study.json), not the flags' defaults the proxies never used (--rm-pairs 1000 was
    recorded for proxies of 8 pairs)."""
    from rlhf_scratch.studies.hacking.study import STUDY

    args = STUDY.parse(["--out", str(root / "h"), "--proxies", str(root / "proxies"), "--raters", "token",
                        "--algos", "rloo", "--total-phases", "2", "--eval-every", "1", "--batch-size", "8", "--gen-len", "4"])
    plan = args.plan()
    assert (plan["rm_pairs"], plan["test_pairs"], plan["rm_epochs"], plan["eval_prompts"]) == (8, 6, 1, 2)
    assert (plan["rater_token"], plan["rater_bonus"]) == ("and", 2.0)
    assert not (root / "h").exists()


def test_a_failed_step_of_the_pilot_is_one_line_and_exit_1(capsys):
    """A step's process that fails (a pairs' or proxy's process) ends the pilot with its last line, not a
    21-line RuntimeError traceback (G, 16-17, before the inputs were checked up front)."""
    import sys

    from rlhf_scratch.config.command import command
    from rlhf_scratch.studies.hacking.pilot import step

    def run(_):
        step([sys.executable, "-c", "import sys; sys.exit('error: gen_len: the last line')"], "pairs-length")

    assert command(lambda argv: None, run, []) == 1
    assert capsys.readouterr().err.strip() == "error: pairs-length failed: error: gen_len: the last line"
