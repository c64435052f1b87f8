"""Writes notebook 10 and its solutions: the cells are the strings below.

    notebooks/10_verifiable_rewards.ipynb                          the learner's: four stubs to write
    notebooks/solutions/10_verifiable_rewards_solutions.ipynb      the same cells with the stubs written out

    python notebooks/make_10_verifiable_rewards.py             # write both, then execute the solutions (about a minute)
    python notebooks/make_10_verifiable_rewards.py --no-run    # write only

As notebook 09 (`notebook_generator.exercise_cells`): each stub is one function of
`rlhf_scratch/course/solutions_verifiable.py`, its signature and docstring read from there (one definition),
its body `raise NotImplementedError`; the solution cell is the function's source. Stub cells carry
`metadata["exercise"] = name` and the tag `exercise`, each followed by its check cell (tag `check`). The
learner's notebook is not executed as shipped (`EXCLUDED` in rlhf_scratch/course/execute_notebooks.py); the
solutions are: GRPO trains the shipped arithmetic model for 300 phases with the learner's `accuracy_reward`
(about 30 s), and pass@k of the base and the tuned model is read with the learner's `pass_at_k`.

Edit the text here, not in the notebooks, then run this file.
"""

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell
from notebook_generator import exercise_cells, graded_notebook, write_graded

HERE = Path(__file__).parent
NOTEBOOK = HERE / "10_verifiable_rewards.ipynb"
SOLUTIONS = HERE / "solutions" / "10_verifiable_rewards_solutions.ipynb"
SOURCE = HERE.parent / "rlhf_scratch" / "course" / "solutions_verifiable.py"
"""The solutions, read as text (this file runs without the package on the path)."""

TITLE = r"""# 10 · RL with verifiable rewards: a rule for the reward, pass@k, and GRPO on arithmetic

So far the reward was a classifier's opinion of a completion. RL for language models now mostly runs on **verifiable rewards**: the completion states an answer and a rule checks it against the ground truth, 1 if right and 0 if not (TRL's quickstart trains GRPO on math this way, verl's examples on GSM8K, DeepSeek-R1 on both math and code). A rule cannot be flattered the way a learned reward can, but it can be *wrong*: too lenient, and the policy is paid for answers written in a form the task never asked for; too strict, and a right answer scores 0. And what a rule measures, accuracy, is read as **pass@k**, the chance that one of k samples is right, which has an unbiased estimator and a plausible biased one.

You write four short functions, each checked (a check names the classic mistake it recognises): `parse_answer` (the answer read from a completion, or None: the format check), the two reward functions as TRL writes them, `accuracy_reward` and `format_reward`, and `pass_at_k`. Then GRPO trains the package's small arithmetic model with **your** reward, and you read pass@k of the base and the tuned model with **your** estimator. Once written, the notebook runs in about a minute on a 2-core CPU.

You need GRPO's group advantages (exercises 02) and a run of the package (notebook 02). Stuck, or done: [the solutions](solutions/10_verifiable_rewards_solutions.ipynb). The task, its data and its metrics in the package: [docs/verifiable.md](../docs/verifiable.md)."""

SOLUTIONS_TITLE = r"""# 10 · RL with verifiable rewards: the solutions

[Notebook 10](../10_verifiable_rewards.ipynb) with its four functions written out in plain Python (they are `rlhf_scratch/course/solutions_verifiable.py`, tested equal to the package's `reward.verifiable` and `reward.pass_at_k`). Every other cell is notebook 10's."""

IMPORTS = r"""import json
import tempfile
from math import comb
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from rlhf_scratch import GRPOTrainer
from rlhf_scratch.config import make_args
from rlhf_scratch.course import check_accuracy_reward, check_format_reward, check_parse_answer, check_pass_at_k
from rlhf_scratch.engine.dataflow import validate
from rlhf_scratch.engine.validation import Validation

torch.set_num_threads(1)"""

TASK_MD = r"""## 1 · The task and the model

A prompt is a problem such as `47+85=` and its ground truth is the answer, `132` (`rlhf_scratch/reward/arithmetic.py`: two-digit sums and differences, a difference's operands ordered so that it is never negative). The model is the package's shipped `arithmetic` model: a 2-layer GPT-2 with a 15-character vocabulary (the ten digits, `+ - * =` and the end-of-text token), pretrained from scratch on such lines by `rlhf pretrain-arithmetic` and stopped while it is only partly right, so that RL has room. The 500 held-out problems (never trained on, in pretraining or here) are the task's test split, `arithmetic:test`; each carries its row's columns, its ground truth among them, as a dataset row reaches TRL's reward functions. Four samples of each of the first four:"""

MODEL = r"""run_dir = Path(tempfile.mkdtemp()) / "rlvr"
args = make_args("tiny", "grpo", task="arithmetic", total_phases=300, test_freq=100, run_dir=str(run_dir),
                 table_every=1000)
base = GRPOTrainer(args, quiet=True)  # the shipped model as pretrained: only sampled in this notebook
held_out = Validation(args).prompts   # the task's 500 test problems, with their columns
print(f"{len(held_out)} held-out problems; the first, {str(held_out[0])!r}, has the columns {held_out[0].columns}")
look = validate(base, held_out[:4], 4, "look", 64)  # 4 samples of each of the first 4 problems
for prompt, completion in zip(look["prompts"], look["completions"]):
    print(f"{prompt}{completion:<4s} (ground truth {prompt.columns['ground_truth']})")"""

PARSE_MD = r"""## 2 · Exercise: read the answer

A reward function gets each completion as text (the rollout has cut it at the end-of-text token). Before it can compare anything it must read the answer, and that reading *is* the format check: a completion that states no answer gives None. The package's rule (`rlhf_scratch/reward/verifiable.py`), exactly:

| step | | so |
|---|---|---|
| the completion's **first line** | the text before the first `"\n"` | `"132\n47+85="` answers 132: a model that goes on with another problem has still answered; `"\n132"` answers nothing |
| **stripped** of surrounding whitespace | `str.strip()` | `" 132"`, `"132 "` read 132: a tokenizer may put a space before the answer |
| an integer **written one way only** | `0` or `-?[1-9][0-9]*`, the whole line | `132`, `-5`, `0` are answers; `081`, `81.0`, `+81`, `-0`, `00`, `1 32`, `132 apples` and `""` are not |

Why so strict about the digits? The ground truth is one string, `"81"`. `081` and `81.0` are answers in a form the task did not ask for, and a reward that pays for them teaches the policy that form. Why so lenient about whitespace and what follows the first line? Because a rule stricter than the task refuses right answers: 0 for `" 132"` is as wrong a reward as 1 for `"081"`, and RL amplifies whichever the rule gets wrong.

This model's vocabulary has no space and no new line, so its own completions never need those two steps; a larger LM's do, and the same rule scores a GSM8K-style file with `#### answer` rows (`--prompts`). Write `parse_answer(completion)` → the answer's text (`"132"`) or None. `re.fullmatch(pattern, line)` matches the *whole* line."""

PARSE_APPLY = r"""samples = validate(base, held_out, 8, "base-8", 512)  # 8 samples of each held-out problem: 4,000
malformed = [f"{p}{c!r}" for p, c in zip(samples["prompts"], samples["completions"]) if parse_answer(c) is None]
print(f"{len(malformed)} of {len(samples['completions'])} samples of the base model give no answer: {', '.join(malformed)}")"""

REWARDS_MD = r"""## 3 · Exercise: the reward functions, as TRL writes them

TRL's contract for a reward function, which the package's rollout follows (`rlhf_scratch/rollout/reward_call.py`): it is called **by keyword**, with `prompts=`, `completions=`, `completion_ids=` and every column of the dataset by its name (here `ground_truth=`, one per completion: each completion's own row's), and it returns one float per completion. `**kwargs` takes whatever it does not read. TRL logs each function's mean under its name (`rewards/accuracy_reward/mean`).

Write `accuracy_reward(completions, ground_truth, **kwargs)` → 1.0 where a completion's answer equals its own ground truth, else 0.0 (a ground truth may come as text, `"132"`, or as a number, `132`, as a column read from JSON may hold it), and `format_reward(completions, **kwargs)` → 1.0 where a completion gives an answer at all, right or wrong. Both read the answer with your `parse_answer`."""

REWARDS_APPLY = r"""truths = [p.columns["ground_truth"] for p in samples["prompts"]]
right = accuracy_reward(prompts=samples["prompts"], completions=samples["completions"], ground_truth=truths)
answered = format_reward(prompts=samples["prompts"], completions=samples["completions"], ground_truth=truths)
print(f"the base model, {len(right)} samples: accuracy {sum(right) / len(right):.3f}, "
      f"format {sum(answered) / len(answered):.3f}")"""

REWARDS_SEE = r"""The format is learned already: pretraining wrote every answer as a number, so a format reward would pay for what the model does anyway (`--format-weight w` adds w × `format_reward` to the task's reward, TRL's `reward_weights`). Accuracy, about a third, is the room RL has. The training below uses accuracy alone, as the task does."""

PASS_MD = r"""## 4 · Exercise: pass@k

Sample n completions of a problem and count the c right ones. **pass@k** is the chance that at least one of k samples is right: pass@1 is the accuracy, and pass@k for a large k asks whether the model can solve the problem *at all*. For a problem the model solves with probability p it is 1 − (1 − p)^k. The plug-in estimate puts p̂ = c/n into that formula. Chen et al. (2021, the Codex paper) instead draw k of the n samples **without replacement**: every k-subset is equally likely, and a subset fails only when all k are among the n − c wrong ones, so

    pass@k = 1 − C(n − c, k) / C(n, k)          (1 ≤ k ≤ n)

A benchmark's pass@k is the mean of this over its problems.

**Predict**: n = 5 samples, c = 2 right, k = 2. What does each estimate give? Which one is right on average over the draw of the n samples, and is the other too high or too low?

Write `pass_at_k(n, c, k)`. `math.comb(a, b)` is C(a, b) in exact integers (0 when b > a)."""

PASS_SEE = r"""p, n, k = 0.35, 8, 4
chance = [comb(n, c) * p**c * (1 - p) ** (n - c) for c in range(n + 1)]  # P(c right among n samples)
print(f"n = 5, c = 2, k = 2: unbiased {pass_at_k(5, 2, 2):.3f}, plug-in 1 - (1 - c/n)^k = {1 - (1 - 2 / 5) ** 2:.3f}")
print(f"a problem solved with p = {p}, n = {n} samples, k = {k}:")
print(f"  the truth 1 - (1 - p)^k                  {1 - (1 - p) ** k:.6f}")
print(f"  the unbiased estimate, its expectation   {sum(w * pass_at_k(n, c, k) for c, w in enumerate(chance)):.6f}")
print(f"  the plug-in estimate, its expectation    {sum(w * (1 - (1 - c / n) ** k) for c, w in enumerate(chance)):.6f}")"""

PASS_ANSWER = r"""<details><summary>Answer</summary>

1 − C(3, 2)/C(5, 2) = 1 − 3/10 = 0.7, and the plug-in 1 − (3/5)² = 0.64. The expectations above are exact (a sum over the binomial's n + 1 outcomes, no simulation): the unbiased estimate's equals the truth to rounding, for any p, and the plug-in's is **too low**. The plug-in draws its k samples with replacement, so it can draw the same wrong sample twice; in expectation, (1 − c/n)^k is a convex function of c/n, so its mean is above (1 − p)^k (Jensen) and one minus it is below. The gap grows as k nears n: at k = n the unbiased estimate is 1 for every problem solved once, the plug-in only 1 − (1 − 1/n)^n ≈ 0.63 for a single right sample.
</details>"""

TRAIN_MD = r"""## 5 · Train with GRPO on your reward

GRPO (exercises 02) samples G = 8 completions of each prompt, scores them, and takes each one's advantage against its own group: (r − mean) / std over the 8. A group whose 8 rewards are equal, all right or all wrong, has advantage 0 everywhere and teaches nothing: a 0/1 reward learns from the problems the model *sometimes* solves. The package's trainer takes your `accuracy_reward` as it is (`reward_fn=`: TRL's contract). Every 100 phases it samples each held-out problem 8 times and logs `eval/pass@1`, pass@k, the format rate and pass@1 by difficulty to the run folder's validation.jsonl; phase 0 is the model before training. From the command line, with the package's reward: `python -m rlhf_scratch.train arithmetic --total-phases 300 --test-freq 100`."""

TRAIN = r"""trainer = GRPOTrainer(args, reward_fn=accuracy_reward, quiet=True)  # your reward
trainer.train()
print(f"{'phase':>5} {'pass@1':>7} {'pass@4':>7} {'pass@8':>7} {'format':>7} {'pass@1 of +':>12} {'of -':>6}")
for line in (run_dir / "validation.jsonl").read_text().splitlines():
    v = json.loads(line)
    print(f"{v['phase']:5d} {v['eval/pass@1']:7.3f} {v['eval/pass@4']:7.3f} {v['eval/pass@8']:7.3f} "
          f"{v['eval/format_rate']:7.3f} {v['eval/pass@1/op=+']:12.3f} {v['eval/pass@1/op=-']:6.3f}")"""

TRAIN_SEE = r"""Held-out pass@1 rises within 300 phases (the task's default run, 1,000 phases, takes about a minute on 2 cores; `docs/verifiable.md` gives what it reaches). The sums gain far more than the differences: the base model rarely gets a difference right, so few of their groups hold a right sample to learn from. These are the package's numbers, computed with its own `pass_at_k`; the next section reads the same question with yours."""

PASSK_MD = r"""## 6 · Read pass@k: did RL teach the model something new?

pass@1 rose. **Predict**: sample 32 completions of each held-out problem from the base model and from the tuned one. As k grows from 1 to 32, does the tuned model's lead in pass@k grow, stay the same, or shrink? Are there problems the base model solves at least once in 32 tries and the tuned model never does?"""

PASSK = r"""n = 32

def correct_counts(model, key):
    # c of each held-out problem: right answers among its n samples (validate returns them n in a row)
    s = validate(model, held_out, n, key, 512)
    right = accuracy_reward(completions=s["completions"], ground_truth=[p.columns["ground_truth"] for p in s["prompts"]])
    return [int(sum(right[i:i + n])) for i in range(0, len(right), n)]

counts = {"base": correct_counts(base, "base-32"), "GRPO, 300 phases": correct_counts(trainer, "tuned-32")}
ks = [1, 2, 4, 8, 16, 32]
curves = {name: [sum(pass_at_k(n, c, k) for c in cs) / len(cs) for k in ks] for name, cs in counts.items()}
plt.figure(figsize=(5, 3.2))
for name, curve in curves.items():
    plt.plot(ks, curve, marker="o", label=name)
plt.xscale("log", base=2)
plt.xlabel("k")
plt.ylabel("pass@k")
plt.title(f"{len(held_out)} held-out problems, n = {n} samples each", fontsize=10)
plt.legend()
plt.show()
print(f"{'k':18s}" + "".join(f"{k:>7d}" for k in ks))
for name, curve in curves.items():
    print(f"{name:18s}" + "".join(f"{v:7.3f}" for v in curve))
print(f"{'the lead':18s}" + "".join(f"{t - b:+7.3f}" for b, t in zip(*curves.values())))
base_c, tuned_c = counts.values()
print(f"solved at least once in {n}: base {sum(c > 0 for c in base_c)}, tuned {sum(c > 0 for c in tuned_c)} of "
      f"{len(base_c)}; by the base only {sum(b > 0 and t == 0 for b, t in zip(base_c, tuned_c))}, by the tuned "
      f"model only {sum(t > 0 and b == 0 for b, t in zip(base_c, tuned_c))}")"""

PASSK_ANSWER = r"""<details><summary>Answer</summary>

In this run (one seed, 500 problems, 32 samples of each) the lead **shrinks** as k grows, to a fraction of its k = 1 value at k = 32, but it does not vanish: the tuned model solves, at least once in 32 tries, problems the base model never did, and the base model a few that the tuned one now never does. Most of what RL did here is to make the model give, more often, answers it could already reach; some of it is reach it did not have at this k. Yue et al. (2025, *Does Reinforcement Learning Really Incentivize Reasoning Capacity in LLMs Beyond the Base Model?*) report that on large models the base model catches up and overtakes at large k (hundreds of samples); 32 samples of one 300-phase run cannot say whether it would here. Over seeds, with intervals and k up to 256, that is the package's pass@k study of issue 56 ([docs/verifiable.md](../docs/verifiable.md)).
</details>"""

NEXT = r"""## Where next

- The whole run from the command line: `python -m rlhf_scratch.train arithmetic` (1,000 phases, about a minute on 2 cores); `--format-weight 0.1` adds the format reward, `--val-n 64` logs pass@64.
- The data as verl prepares it: `rlhf data arithmetic --out DIR` writes verl's parquet columns (`reward_model.ground_truth`), and `--prompts DIR/train.parquet` trains on them.
- [docs/verifiable.md](../docs/verifiable.md): the task, the rule, pass@k and the metrics as the package has them; [docs/grpo.md](../docs/grpo.md): GRPO's loss types and the length lesson, which a 0/1 reward meets too."""


EXERCISES = ("parse_answer", "accuracy_reward", "format_reward", "pass_at_k")


def cells(solved: bool) -> list:
    ex = {name: exercise_cells(SOURCE, name, solved) for name in EXERCISES}
    md, code = new_markdown_cell, new_code_cell
    return [
        md(SOLUTIONS_TITLE if solved else TITLE, id="title"),
        code(IMPORTS, id="setup"),
        md(TASK_MD, id="task-note"),
        code(MODEL, id="model"),
        md(PARSE_MD, id="parse-note"),
        *ex["parse_answer"],
        code(PARSE_APPLY, id="parse-apply"),
        md(REWARDS_MD, id="rewards-note"),
        *ex["accuracy_reward"], *ex["format_reward"],
        code(REWARDS_APPLY, id="rewards-apply"),
        md(REWARDS_SEE, id="rewards-see"),
        md(PASS_MD, id="pass-note"),
        *ex["pass_at_k"],
        code(PASS_SEE, id="pass-see"),
        md(PASS_ANSWER, id="pass-answer"),
        md(TRAIN_MD, id="train-note"),
        code(TRAIN, id="train"),
        md(TRAIN_SEE, id="train-see"),
        md(PASSK_MD, id="passk-note"),
        code(PASSK, id="passk"),
        md(PASSK_ANSWER, id="passk-answer"),
        md(NEXT, id="next"),
    ]


def notebook(solved: bool) -> nbformat.NotebookNode:
    return graded_notebook(cells(solved))


NOTEBOOKS = {NOTEBOOK: False, SOLUTIONS: True}
"""Each notebook this file writes, and whether its four functions are written out."""


def main(argv: list[str]) -> None:
    write_graded(NOTEBOOKS, notebook, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
