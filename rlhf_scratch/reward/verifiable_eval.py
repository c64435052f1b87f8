"""What RLVR users read of a held-out validation rollout (the arithmetic task's registry `evaluate`):
n samples of each held-out problem, scored by the rule, summed up as `eval/...` metrics.

    eval/pass@1                  mean over problems of c/n: the unbiased pass@1 (c right among n samples)
    eval/pass@k                  mean over problems of 1 − C(n−c, k)/C(n, k), for k = 4, 16, 64, 256 up to n and k = n
    eval/format_rate             the fraction of samples whose first line is an integer (`format_reward`)
    eval/mean_length             kept tokens per sample (its EOS included)
    eval/pass@1/digits=D         pass@1 over the problems of each difficulty cell the rows record in
    eval/pass@1/op=+               `extra_info` (`reward.arithmetic.verl_row`): digits, op, carry
    eval/pass@1/carry=yes
    eval/problems                how many problems were validated; eval/samples_per_problem is n

The n samples of a problem are consecutive (`generate_sequences` repeats each prompt n times), the same
problem's `ground_truth` on each.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rlhf_scratch.reward.pass_at_k import pass_at_k
from rlhf_scratch.reward.verifiable import accuracy_reward, format_reward
from rlhf_scratch.rollout.rl_dataset import prompt_columns

PASS_AT = (1, 4, 16, 64, 256)
"""The k of pass@k a validation logs (those up to its n, and n itself)."""
DIFFICULTY = ("digits", "op", "carry")
"""The fields of a row's `extra_info` that pass@1 is broken down by, when the rows have them."""


def correct_per_problem(prompts: list[str], completions: list[str], n: int) -> list[int]:
    """c of each problem: how many of its `n` consecutive samples `accuracy_reward` calls right against
    the problem's `ground_truth` column."""
    truths = prompt_columns(prompts).get("ground_truth")
    if truths is None:
        raise ValueError("verifiable_metrics: the held-out prompts carry no ground_truth column "
                         "(--val-prompts must name rows with reward_model.ground_truth or a ground_truth column)")
    right = accuracy_reward(completions=completions, ground_truth=truths)
    return [int(sum(right[i : i + n])) for i in range(0, len(right), n)]


def difficulty_cells(prompts: list[Any], n: int) -> list[dict[str, str]]:
    """Each problem's difficulty, {field: value} from its row's `extra_info` (`DIFFICULTY`), one per problem."""
    cells = []
    for prompt in prompts[::n]:
        info = getattr(prompt, "columns", {}).get("extra_info") or {}
        cells.append({k: ("yes" if info[k] else "no") if isinstance(info[k], bool) else str(info[k])
                      for k in DIFFICULTY if k in info})
    return cells


def verifiable_metrics(*, prompts: list[str], completions: list[str], lengths: list[int], num_generations: int,
                       **kwargs: Any) -> dict[str, float]:
    """The `eval/...` metrics of a validation's samples (`engine.dataflow.validate`: each held-out prompt
    `num_generations` times in a row, its completion and its length in tokens; see the module docstring)."""
    n = num_generations
    counts = correct_per_problem(prompts, completions, n)
    metrics = {"eval/problems": float(len(counts)), "eval/samples_per_problem": float(n)}
    for k in sorted({k for k in PASS_AT if k <= n} | {n}):
        metrics[f"eval/pass@{k}"] = sum(pass_at_k(n, c, k) for c in counts) / len(counts)
    metrics["eval/format_rate"] = sum(format_reward(completions=completions)) / len(completions)
    metrics["eval/mean_length"] = sum(lengths) / len(lengths)
    by: dict[str, list[int]] = defaultdict(list)
    for c, cell in zip(counts, difficulty_cells(prompts, n)):
        for field, value in cell.items():
            by[f"eval/pass@1/{field}={value}"].append(c)
    for key in sorted(by):
        metrics[key] = sum(pass_at_k(n, c, 1) for c in by[key]) / len(by[key])
    return metrics
