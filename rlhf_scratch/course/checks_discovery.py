"""The check of exercises 05's discovery: which head did a short RL run change?

Built as `checks.py` is (read its docstring), on two planted pairs (`course.mystery`: a short REINFORCE run
changed one head, and a decoy head was re-expressed in a rotated basis, its weights moved and its function
not). The learner's per-prompt scores name a head (the largest mean score); each case's answer is three
numbers, so that a wrong answer does not print the right head: [1 if the named head is the trained one,
1 if the evidence decides it, the code in `TRAPS` of the known wrong head it is (0: none)]. Decided: the
paired 95 % t interval, over the prompts, of the named head's score minus the runner-up's excludes 0
(`discovery_evidence`; `discovery_report` says it in words). The known wrong answers: the decoy (a weight
diff or a z diff finds it), the base model's largest head, the trained head's index one layer after or before.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf_scratch.course.checks import Case, Mistake, Reference, _run

REFERENCES: dict[str, Reference] = {
    "changed_head_scores": Reference("rlhf_scratch.course.solutions_interp", "(reference, tuned, tokens, metric)"),
}
"""The solution (written to be read, beside exercises 05's others)."""


@dataclass(frozen=True)
class Evidence:
    """What per-prompt head scores say: the head they name (the largest mean score), the runner-up, and the
    named head's score minus the runner-up's over the prompts: mean and paired 95 % t interval."""

    head: tuple[int, int]
    runner_up: tuple[int, int]
    margin: float
    low: float
    high: float
    n: int

    @property
    def decided(self) -> bool:
        """The interval excludes 0: over these prompts the named head beats the runner-up."""
        return self.low > 0


T_975: dict[int, float] = {15: 2.131449545559323}
"""Student's t_{0.975, df} without a closed form that the check needs: df = 15 for 16 prompts (a t table's;
tests/integration/test_course_discovery.py compares it with `studies.stats.t_quantile`)."""


def t_975(df: int) -> float:
    """t_{0.975, df}: the closed form for df 1, 2, 4 (`checks_capstones.t_quantile_closed_form`), else `T_975`."""
    from rlhf_scratch.course.checks_capstones import t_quantile_closed_form

    if df in T_975:
        return T_975[df]
    if df in (1, 2, 4):
        return t_quantile_closed_form(0.975, df)
    raise ValueError(f"t_975: df must be 1, 2, 4 or one of {sorted(T_975)}; got {df}")


def discovery_evidence(scores: Tensor) -> Evidence:
    """The `Evidence` of scores [prompt, layer, head] (larger = more evidence that the head carries the change).
    d_b = s_b[named] − s_b[runner-up]; d̄ ± t_{0.975, n−1} · s_d / √n (Student's paired 95 % interval)."""
    s = scores.detach().double()
    n_prompts, n_layers, n_heads = s.shape
    top2 = s.mean(0).flatten().topk(2).indices.tolist()
    head, runner = [(i // n_heads, i % n_heads) for i in top2]
    d = s[:, head[0], head[1]] - s[:, runner[0], runner[1]]
    margin = d.mean().item()
    half = t_975(n_prompts - 1) * d.std().item() / n_prompts ** 0.5 if n_prompts > 1 else math.inf
    return Evidence(head, runner, margin, margin - half, margin + half, n_prompts)


def discovery_report(scores: Tensor) -> str:
    """The evidence of `scores` in words: the head named, its margin over the runner-up with its interval, and
    whether that decides it (not whether it is right: the check says that)."""
    e = discovery_evidence(scores)
    verdict = "decided" if e.decided else "NOT resolved: a guess, not a finding"
    return (f"your scores name head {e.head[0]}.{e.head[1]} (layer.head); its margin over the runner-up, head "
            f"{e.runner_up[0]}.{e.runner_up[1]}: {e.margin:+.4g} ({e.low:+.4g} to {e.high:+.4g}, 95 % paired t over "
            f"{e.n} prompts): {verdict}")


TRAPS = ("none", "decoy", "largest", "layer after", "layer before")
"""The known wrong answers, by their code in a discovery case's answer (0: none of them)."""


def _traps(which: str) -> dict[tuple[int, int], int]:
    """Each known wrong head of mystery `which` -> its code in `TRAPS`: the decoy, the base model's largest
    head (Frobenius of W_Q, W_K, W_V, W_O), the trained head's index one layer after and before."""
    from rlhf_scratch.course.mystery import PLANTS, mystery

    plant, m = PLANTS["AB".index(which)], mystery(which)
    with torch.no_grad():
        size = torch.stack([getattr(m.reference, w).norm(dim=(-2, -1)) ** 2 for w in ("W_Q", "W_K", "W_V", "W_O")]).sum(0)
    i, n_heads = int(size.flatten().argmax()), m.reference.cfg.n_heads
    (layer, head), traps = plant.trained, {}
    for at, code in ((plant.decoy, 1), ((i // n_heads, i % n_heads), 2), ((layer + 1, head), 3), ((layer - 1, head), 4)):
        if 0 <= at[0] < m.reference.cfg.n_layers:
            traps.setdefault(at, code)
    return traps


def _named_head(fn: Callable, which: str) -> Tensor:
    """[1 if fn's scores on mystery `which` name the trained head, 1 if they decide it, the `TRAPS` code of the
    head they name]: the head itself is not printed, so a wrong answer does not give the right one away."""
    from rlhf_scratch.course.mystery import PLANTS, PROMPTS, mystery

    m = mystery(which)
    scores = fn(m.reference, m.tuned, m.tokens.clone(), m.metric)
    shape = (PROMPTS, m.reference.cfg.n_layers, m.reference.cfg.n_heads)
    if not isinstance(scores, Tensor) or tuple(scores.shape) != shape:
        got = tuple(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__
        raise AssertionError(f"return one score per prompt and head, a tensor of shape [prompt, layer, head] = {list(shape)} "
                             f"(so the check can say how sure the prompts make you); got {got}")
    if not torch.isfinite(scores.detach().double()).all():
        raise AssertionError("your scores hold an inf or NaN (a recovered fraction with a gap of 0?): score with the "
                             "effect itself, in the metric's units")
    e = discovery_evidence(scores)
    right = e.head == PLANTS["AB".index(which)].trained
    return torch.tensor([float(right), float(e.decided), float(_traps(which).get(e.head, 0))], dtype=torch.float64)


def _trap(code: int) -> Callable[[Tensor], bool]:
    return lambda out: out.shape == (3,) and out[0] == 0 and out[2] == code


def _discovery_case(which: str) -> Case:
    from rlhf_scratch.course.mystery import mystery

    hints = {
        1: "that head's weights moved, but what it computes did not: it was re-expressed in another basis of its d_head "
           "space (W_V R, Rᵀ W_O, and Q, K alike), so its z moved too and z @ W_O, its output, is the same. A weight "
           "diff or a z diff names it; ask what changes the METRIC (patch each head's output into the reference, or "
           "ablate it)",
        2: "that is the base model's LARGEST head (the largest weights of the reference): a head's size says what it "
           "can write, not what the run changed; compare the two models",
        3: "one layer AFTER the head the run changed (same head index): a head downstream reads the changed head's "
           "output, so its own z and output move too; patch ONE head's output at a time and see which one alone "
           "moves the metric",
        4: "one layer BEFORE the head the run changed (same head index): layers count from 0 (blocks.0 is the "
           "first); check your indices",
    }
    codes = sorted(set(_traps(which).values()))
    wrong = tuple(Mistake([0.0, 1.0, float(c)], hints[c], like=_trap(c)) for c in codes)
    right_undecided = Mistake([1.0, 0.0, 0.0], "the right head, but your scores do not decide it over the prompts (the "
                                               "paired 95 % interval of its score minus the runner-up's includes 0): "
                                               "a guess, not a finding; discovery_report(scores) shows the margin")
    return Case(f"mystery {which}: [your scores name the head the run trained (1), decided over the "
                f"{mystery(which).tokens.shape[0]} prompts (1), which known wrong head it is (0: none)]",
                lambda fn: _named_head(fn, which), [1.0, 1.0, 0.0], (*wrong, right_undecided), atol=0.0, rtol=0.0)


def _discovery_cases() -> list[Case]:
    return [_discovery_case("A"), _discovery_case("B")]


def check_changed_head_scores(fn: Callable) -> None:
    """Check `changed_head_scores(reference, tuned, tokens, metric) -> [prompt, layer, head]`: per prompt, evidence
    that each head carries what the RL run changed (larger = more). On mystery A (the notebook's pair) and B (the
    check's own: your method, not A's answer), the head with the largest mean score must be the trained one, and
    beat the runner-up over the prompts (`discovery_evidence`). The solution:
    `rlhf_scratch.course.solutions_interp.changed_head_scores` (do not read it before you have named a head).

    Recognises: the decoy (weights moved, function not), the base model's largest head, a head one layer off,
    the right head on evidence that does not decide it.
    """
    _run("changed_head_scores", fn, _discovery_cases(), REFERENCES["changed_head_scores"])


CASES: dict[str, Callable[[], list[Case]]] = {"changed_head_scores": _discovery_cases}
"""The exercise's cases, by function name."""
