"""The checks of exercises 04, part two: the reward model's scalar head and its Bradley–Terry training step.

Built as `checks.py` is (read its docstring). The head's case is worked out by hand. The step's answer
is the parameters after two steps of SGD on a linear scorer, computed here with the package's
`reward.model.calc_reward_model_loss` and the engine's step (zero_grad, backward, step); each mistake's
parameters are that step with the mistake in it, on the same model and pairs.
"""

from collections.abc import Callable

import torch
from torch import Tensor, nn

from rlhf_scratch.course.checks import Case, Mistake, Reference, _run

SOLUTIONS = "rlhf_scratch.course.solutions"
REFERENCES: dict[str, Reference] = {
    "reward_at_last_token": Reference(SOLUTIONS, "(hidden, attention_mask, weight, bias)"),
    "reward_model_step": Reference(SOLUTIONS, "(model, chosen, rejected, optimizer)"),
}
"""The solution of each exercise (written to be read; the package's own is named in each check)."""


# --- reward_at_last_token ---------------------------------------------------------------------


def _reward_head_cases() -> list[Case]:
    # d_model 2, w = [1, −2], b = 0.5: r = h0 − 2 h1 + 0.5
    hidden = [[[1.0, 0.0], [0.0, 1.0], [2.0, 1.0]],   # row 0 keeps 2 tokens: the last kept is [0, 1]
              [[1.0, 1.0], [3.0, 0.0], [0.0, 4.0]]]   # row 1 keeps all 3: the last is [0, 4]
    mask = [[True, True, False], [True, True, True]]
    return [
        Case("row 0 right-padded, row 1 full",
             lambda fn: fn(torch.tensor(hidden), torch.tensor(mask), torch.tensor([1.0, -2.0]), torch.tensor(0.5)),
             [-1.5, -7.5],  # 0 − 2 + 0.5;  0 − 8 + 0.5
             (Mistake([0.5, -7.5], "you read the last POSITION, which is padding in a right-padded row: read each "
                                   "row's last KEPT token (attention_mask.sum() - 1), where GPT2ForSequenceClassification "
                                   "reads its score"),
              Mistake([1.5, -0.5], "you read the first token: in a causal model only the LAST token has seen the "
                                   "whole text"),
              Mistake([0.0, -1.5], "that is the mean over the kept tokens: the head reads the last one alone"),
              Mistake([-2.0, -8.0], "the head's bias b is missing: r = w · h + b"))),
    ]


def check_reward_at_last_token(fn: Callable) -> None:
    """Check `reward_at_last_token(hidden, attention_mask, weight, bias) -> [batch]`: the scalar head of
    `rlhf_scratch.reward.model.RewardModel` on ĥ (ln_final.hook_normalized) at each right-padded row's last
    kept token (the solution: `rlhf_scratch.course.solutions.reward_at_last_token`).

    Recognises: the last position (padding), the first token, the mean over tokens, the bias missing.
    """
    _run("reward_at_last_token", fn, _reward_head_cases(), REFERENCES["reward_at_last_token"])


# --- reward_model_step ------------------------------------------------------------------------


class _LinearScorer(nn.Module):
    """r(x) = w · x + b on feature vectors: the reward model with its trunk left out."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([[0.5, -1.0, 0.25]]))
            self.linear.bias.fill_(0.1)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x).squeeze(-1)


# two steps, each on two pairs (chosen, rejected); the second step would see the first's gradient
# again if it were not zeroed
PAIRS = (([[1.0, 0.0, 2.0], [0.0, 1.0, 1.0]], [[0.0, 2.0, 0.0], [1.0, 1.0, -1.0]]),
         ([[2.0, 1.0, 0.0], [0.0, 0.0, 1.0]], [[1.0, 0.0, 3.0], [0.0, -1.0, 0.0]]))
LR = 0.5


def _parameters_after(step: Callable) -> Tensor:
    """The scorer's [w, b] after `step` ran once per batch of PAIRS with SGD(lr 0.5)."""
    model = _LinearScorer()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for chosen, rejected in PAIRS:
        step(model, torch.tensor(chosen), torch.tensor(rejected), optimizer)
    return torch.cat([model.linear.weight.detach().flatten(), model.linear.bias.detach()])


def _bt_step(zero_grad: bool = True, sign: float = 1.0, swap: bool = False, reduce: str = "mean",
             step_first: bool = False) -> Callable:
    """The engine's step (`engine.reward_model`: loss, zero_grad, backward, step; no clipping here), or
    that step with one mistake."""
    from rlhf_scratch.reward.model import calc_reward_model_loss

    def step(model, chosen, rejected, optimizer):
        r_c, r_r = model(chosen), model(rejected)
        if swap:
            r_c, r_r = r_r, r_c
        loss = calc_reward_model_loss(r_c, r_r) * (len(r_c) if reduce == "sum" else 1)
        if step_first:
            optimizer.step()
        if zero_grad:
            optimizer.zero_grad()
        (sign * loss).backward()
        if not step_first:
            optimizer.step()
        return loss.item()

    return step


def _reward_model_step_cases() -> list[Case]:
    return [
        Case("two SGD steps (lr 0.5) on a linear scorer: its [w, b] afterwards",
             _parameters_after,
             _parameters_after(_bt_step()),
             (Mistake(_parameters_after(_bt_step(zero_grad=False)),
                      "zero the gradients before backward (optimizer.zero_grad()): .grad accumulates, so the second "
                      "step moved by both steps' gradients"),
              Mistake(_parameters_after(_bt_step(sign=-1.0)),
                      "the loss went UP: backpropagate the loss itself (the optimizer descends), mean −log σ(r_c − r_r)"),
              Mistake(_parameters_after(_bt_step(swap=True)),
                      "chosen and rejected are swapped: the loss is −log σ(r_chosen − r_rejected)"),
              Mistake(_parameters_after(_bt_step(reduce="sum")),
                      "take the mean over pairs, not the sum: the step size would grow with the batch"),
              Mistake(_parameters_after(_bt_step(step_first=True)),
                      "optimizer.step() ran before loss.backward(): the order is zero_grad, backward, step"),
              Mistake(_LinearScorer().linear.weight.detach().flatten().tolist() + [0.1],
                      "the parameters did not move: call loss.backward() and optimizer.step()"))),
    ]


def check_reward_model_step(fn: Callable) -> None:
    """Check `reward_model_step(model, chosen, rejected, optimizer) -> float`: one Bradley–Terry step of
    the reward model, as `rlhf_scratch.engine.reward_model` takes it with
    `rlhf_scratch.reward.model.calc_reward_model_loss` (the solution:
    `rlhf_scratch.course.solutions.reward_model_step`). The check compares the model's parameters after
    two steps.

    Recognises: the gradients not zeroed, the loss ascended, chosen and rejected swapped, a sum over
    pairs, the step before the backward, no step at all.
    """
    _run("reward_model_step", fn, _reward_model_step_cases(), REFERENCES["reward_model_step"])


CASES: dict[str, Callable[[], list[Case]]] = {
    "reward_at_last_token": _reward_head_cases,
    "reward_model_step": _reward_model_step_cases,
}
"""Each exercise's cases, by function name."""
