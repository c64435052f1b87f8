"""Pairwise judges for Online DPO: "AI feedback" in its plainest form.

A judge is any callable

    judge(prompts: list[str], pairs: list[tuple[str, str]]) -> list[int]

returning, for each pair of completions of a prompt, 0 if the first is better, 1 if the second
is, or -1 if it cannot tell (the trainer then skips that pair and counts it). A TRL user's judge
fits unchanged. The three shipped here run offline: two read the whole text, prompt + completion;
the rule judge reads the completions against the prompt's ground truth (a verifiable task's).
"""

from __future__ import annotations

from collections.abc import Callable

from rlhf_scratch.reward.functions import SentimentReward, reward_fn_vader

Judge = Callable[[list[str], list[tuple[str, str]]], list[int]]
"""judge(prompts, pairs) -> per pair 0 (first better), 1 (second better) or -1 (cannot tell)."""


def _prefer(first: list[float], second: list[float], margin: float) -> list[int]:
    """0 where first beats second by more than `margin`, 1 where second does, -1 otherwise."""
    return [0 if a - b > margin else 1 if b - a > margin else -1 for a, b in zip(first, second)]


class ClassifierJudge:
    """Prefers the completion the sentiment classifier finds more `direction` (P(label)).

    Pairs whose probabilities differ by at most `margin` (default 1e-3) are "cannot tell" (-1):
    a classifier's coin-flip preferences would only teach the policy noise."""

    def __init__(self, direction: str = "pos", reward_model: str = "tiny", device: str = "cpu", margin: float = 1e-3):
        self.reward = SentimentReward(reward_model, direction=direction, device=device)
        self.margin = margin

    def __call__(self, prompts: list[str], pairs: list[tuple[str, str]]) -> list[int]:
        first = self.reward([p + a for p, (a, _) in zip(prompts, pairs)]).tolist()
        second = self.reward([p + b for p, (_, b) in zip(prompts, pairs)]).tolist()
        return _prefer(first, second, self.margin)


class VaderJudge:
    """Prefers the completion VADER's lexicon scores more `direction`; an exact tie is -1
    (VADER gives many texts with no sentiment word exactly the same score)."""

    def __init__(self, direction: str = "pos"):
        self.direction = direction

    def __call__(self, prompts: list[str], pairs: list[tuple[str, str]]) -> list[int]:
        first = reward_fn_vader([p + a for p, (a, _) in zip(prompts, pairs)], self.direction).tolist()
        second = reward_fn_vader([p + b for p, (_, b) in zip(prompts, pairs)], self.direction).tolist()
        return _prefer(first, second, 0.0)


class RuleJudge:
    """A verifiable task's rule as a pairwise judge: the completion `accuracy_reward` calls right (against
    the prompt's own `ground_truth` column, `rl_dataset.Prompt`) wins; both right or both wrong is -1,
    weighted out of the loss. Picking by reward instead would send a tie to the first completion (TRL's
    rule), teaching the policy a coin's preference on every pair of two right or two wrong answers."""

    def __call__(self, prompts: list[str], pairs: list[tuple[str, str]]) -> list[int]:
        from rlhf_scratch.reward.verifiable import accuracy_reward

        if any("ground_truth" not in getattr(p, "columns", {}) for p in prompts):
            raise ValueError("judge rule: every prompt needs its ground_truth column (task arithmetic, or rows with "
                             "reward_model.ground_truth)")
        truths = [p.columns["ground_truth"] for p in prompts]
        first = accuracy_reward(completions=[a for a, _ in pairs], ground_truth=truths)
        second = accuracy_reward(completions=[b for _, b in pairs], ground_truth=truths)
        return _prefer(first, second, 0.0)


def make_judge(name: str | None, direction: str, device: str = "cpu") -> Judge | None:
    """`tiny` → ClassifierJudge, `vader` → VaderJudge, `rule` → RuleJudge (a verifiable task's), None → no
    judge (the reward picks)."""
    if name is None:
        return None
    if name == "tiny":
        judge = ClassifierJudge(direction, "tiny", device)
    elif name == "vader":
        judge = VaderJudge(direction)
    elif name == "rule":
        judge = RuleJudge()
    else:
        raise ValueError(f"judge: unknown judge {name!r}")
    judge.made_for = (name, direction)  # so the run folder records it by name (tasks.rewarded_by)
    return judge
