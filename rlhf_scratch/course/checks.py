"""The checks of exercise mode: `check_<name>(fn)` runs your `<name>` on hand-computed cases.

Every case's answer is worked out by hand in a comment beside it, with numbers chosen asymmetric
(a swapped pair, a sign, a missing coefficient each give another number). A wrong answer is
compared with what each classic mistake gives on the same inputs, also worked out by hand, so the
AssertionError names the mistake instead of only printing two numbers:

    check_calc_kl_penalty failed on case 1/3 (two positions, β = 0.2):
      got      0.043604
      expected 0.00872
      hint: you forgot to multiply by beta (got the un-coefficiented value)

A pass prints one line: `check_calc_kl_penalty: all 3 cases pass`.

Whatever goes wrong is that one AssertionError, naming the case: an answer of another dtype kind than
the hand-worked one (int64 where it is floating point, a float mask where it is bool); your function
returning what the check cannot read (None, a str, a numpy array: said beside what the solution returns
there); your function raising (the error, chained, so its traceback still shows your line). Only a
stub's NotImplementedError comes out as itself.

Your `fn` must have the signature of the solution of the same name (written to be read, in the
`course/solutions*.py` module named in `REFERENCES`; the package's own has the same): the check
calls the required arguments by position and the optional ones by keyword, exactly as the trainers
do. Only torch is imported here, so a notebook that imports the checks starts in a second.

Longer than 500 lines because it is one catalogue read by section: what a check is made of (the
first 350 lines, every other checks module's too), then one section per exercise function — its cases with the hand computation in
comments, the mistakes they recognise, its `check_<name>` — in the exercises' order. A section is
found by its function's name and read alone; a file per section would scatter 14 siblings of 40–90
lines that share every helper, and `REFERENCES` and `CASES` list them all in one place.
"""

import functools
import importlib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

LN2, LN3 = math.log(2), math.log(3)


# --- what a check is made of -------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """Where the solution lives and its signature (parameter names and defaults, no annotations).
    `by_position`: the check passes every argument by position, so any names will do (the count must fit)."""

    module: str
    signature: str
    by_position: bool = False

    def param_names(self) -> tuple[str, ...]:
        """`(a, b=1.0, **kwargs)` -> ("a", "b", "kwargs"); no default here holds a comma."""
        return tuple(p.split("=")[0].strip().lstrip("*") for p in self.signature.strip("()").split(","))


FORMULAS = "rlhf_scratch.course.solutions_formulas"
"""Exercises 01 and 02's solutions, written to be read (the package's own is named under each exercise)."""

REFERENCES: dict[str, Reference] = {
    "get_log_probs": Reference(FORMULAS, "(logits, tokens, prefix_len=None, temperature=1.0)"),
    "compute_advantages": Reference(FORMULAS, "(values, rewards, prefix_len, mask=None)"),
    "normalize_reward": Reference(FORMULAS, "(reward, eps=1e-05)"),
    "calc_clipped_sur_obj": Reference(
        FORMULAS, "(logprobs, mb_logprobs, mb_advantages, clip_coef, eps=1e-08, mask=None)"),
    "calc_kl_penalty": Reference(FORMULAS, "(logits, ref_logits, beta, mask=None, from_logprobs=False)"),
    "calc_entropy_bonus": Reference(FORMULAS, "(logits, ent_coef, mask=None, from_logprobs=False)"),
    "calc_value_fn_loss": Reference(FORMULAS, "(values, mb_returns, vf_coef, mask=None)"),
    "compute_rloo_advantages": Reference(FORMULAS, "(rewards, num_generations)"),
    "compute_grpo_advantages": Reference(FORMULAS, "(rewards, num_generations, scale_rewards='group')"),
    "calc_dpo_loss": Reference(
        FORMULAS,
        "(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta, loss_type='sigmoid', weights=None)"),
    "calc_reward_model_loss": Reference(
        FORMULAS, "(chosen_rewards, rejected_rewards, margin=None, center_rewards_coefficient=None)"),
    # exercises 03: in course/solutions.py (plain torch, a loop where the formula is a loop); every solution
    # here is checked against the package's function (tests/integration/test_course_checks.py, test_course_solutions.py)
    "compute_gae_advantages": Reference(
        "rlhf_scratch.course.solutions", "(values, rewards, prefix_len, gamma, gae_lambda, mask=None)"),
    "explained_variance": Reference("rlhf_scratch.course.solutions", "(values, returns, mask=None)"),
    "direct_logit_attribution": Reference(
        "rlhf_scratch.course.solutions", "(components, scale, ln_weight, direction)"),
}
"""The solution of each exercise: `from <module> import <name>`, with this signature."""


@dataclass(frozen=True)
class Mistake:
    """A classic bug, recognised by what it returns on one case (worked out by hand).

    `like`, for a bug whose number depends on a constant the learner picks (an eps in a denominator):
    whether an answer (float64) is this bug's, used in place of comparing it with `gives`, which is then
    one instance worked by hand (eps = 1e-8)."""

    gives: Any  # a number or nested list (or a tensor); its shape counts too
    hint: str
    like: Callable[[Tensor], bool] | None = None

    def matches(self, out: Tensor, case: "Case") -> bool:
        """Whether `out` is what this mistake gives on `case`."""
        return bool(self.like(_tensor(out))) if self.like is not None else _close(out, _tensor(self.gives), case)


@dataclass(frozen=True)
class Case:
    """One call of the learner's function and its known answer.

    `run` calls fn on fresh inputs (so an in-place edit cannot leak into the next case);
    `if_not_finite` is the hint for an inf/NaN where the answer is finite (the stability cases);
    `needs_grad`: the inputs carry gradients and the trainer backpropagates through the output.
    """

    name: str
    run: Callable[[Callable], Any]
    expected: Any
    mistakes: tuple[Mistake, ...] = ()
    if_not_finite: str = "an inf or NaN where the answer is finite: look for a log of 0 or a division by 0"
    needs_grad: bool = False
    atol: float = 1e-5
    rtol: float = 1e-4


NO_GRAD = ("the value is right but carries no gradient: the trainer backpropagates through it (no .item(), "
           ".detach(), torch.no_grad() or torch.tensor(...) on the way)")
LOG_SOFTMAX = ("not finite for logits x 100: log(softmax(x)) underflows to log(0) = -inf for an unlikely token "
               "(and 0 * -inf = NaN); use x.log_softmax(-1), which subtracts the max before exponentiating")
LOGSIGMOID = ("not finite for a large margin: log(sigmoid(x)) is log(0) = -inf once sigmoid(x) underflows "
              "(x below about -88 in float32); use F.logsigmoid(x) (= -softplus(-x)), stable for any x")
PADDING_COUNTED = ("padding counted in the mean: you zeroed the masked positions but divided by all of them; "
                   "average over the kept tokens only (sum over mask / mask.sum(), or x[mask].mean())")
MASK_IGNORED = "the mask was ignored: the positions after EOS are padding, not actions; average over mask == True only"


def _tensor(x: Any) -> Tensor:
    return x.detach().double().cpu() if isinstance(x, Tensor) else torch.tensor(x, dtype=torch.float64)


def _t(values: Any, grad: bool = False) -> Tensor:
    """A float32 input (the dtype the trainers use), optionally requiring grad."""
    return torch.tensor(values, dtype=torch.float32, requires_grad=grad)


def _fmt(t: Tensor) -> str:
    t = _tensor(t)
    return f"{t.item():.6g}" if t.dim() == 0 else str(torch.round(t, decimals=6).tolist())


def _close(out: Tensor, value: Tensor, case: Case) -> bool:
    return out.shape == value.shape and torch.allclose(_tensor(out), value, rtol=case.rtol, atol=case.atol,
                                                       equal_nan=True)  # NaN is an answer only where it is expected


def _kind(dtype: torch.dtype) -> str:
    return ("a bool" if dtype == torch.bool else "a floating-point" if dtype.is_floating_point
            else "a complex" if dtype.is_complex else "an integer")


DTYPE_HINTS = {
    "a floating-point": "compute in the inputs' floating-point dtype: an integer tensor rounds, and carries no gradient",
    "an integer": "indices and counts are integers (torch.long): a float tensor cannot index",
    "a bool": "a mask is a bool tensor (a comparison, e.g. x > 0), not 1.0 / 0.0 or 1 / 0",
}


def _dtype_problem(case: Case, out: Tensor) -> str | None:
    """What is wrong with `out`'s dtype, where the hand-worked answer has another kind (floating point,
    integer, bool: as its numbers are written, 1.0 or 1 or True)."""
    try:
        want = _kind(case.expected.dtype if isinstance(case.expected, Tensor) else torch.as_tensor(case.expected).dtype)
    except (TypeError, ValueError, RuntimeError):  # an answer torch cannot read as one tensor: nothing to compare
        return None
    if _kind(out.dtype) == want:
        return None
    return f"  got {_describe(out)}; the answer is {want} tensor\n  hint: {DTYPE_HINTS.get(want, '')}"


def _judge(case: Case, out: Any) -> str | None:
    """None if `out` is the answer; else what went wrong, with the hint of the mistake it matches."""
    if not isinstance(out, Tensor):
        return f"  got {_describe(out)}, expected a tensor"
    wrong_dtype = _dtype_problem(case, out)
    if wrong_dtype is not None:
        return wrong_dtype
    expected = _tensor(case.expected)
    got = f"  got      {_fmt(out)}\n  expected {_fmt(expected)}"
    if _close(out, expected, case):
        return got + f"\n  hint: {NO_GRAD}" if case.needs_grad and not out.requires_grad else None
    if torch.isfinite(expected).all() and not torch.isfinite(_tensor(out)).all():
        return got + f"\n  hint: {case.if_not_finite}"
    for mistake in case.mistakes:
        if mistake.matches(out, case):
            return got + f"\n  hint: {mistake.hint}"
    if out.shape != expected.shape:
        return f"  got shape {tuple(out.shape)}, expected {tuple(expected.shape)}\n{got}"
    return got + "\n  (not a mistake this check knows: go through the formula step by step on these inputs)"


def _check_signature(name: str, fn: object, ref: Reference | None = None) -> None:
    ref = ref or REFERENCES[name]  # the checks of another module pass their own Reference
    if not callable(fn):  # check_normalize_reward(42): say what to pass, not "'int' object is not callable"
        raise AssertionError(f"check_{name}: pass your function itself, {name}{ref.signature}; "
                             f"got {type(fn).__name__} {str(fn)[:40]!r}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C function: nothing to compare
        return
    params = tuple(signature.parameters)
    if ref.by_position:
        try:
            signature.bind(*ref.param_names())
        except TypeError as e:
            raise AssertionError(f"check_{name}: fn is called as {name}{ref.signature}, every argument by position; "
                                 f"yours is ({', '.join(params)}): {e}") from None
    elif params != ref.param_names():
        raise AssertionError(f"check_{name}: fn must have the signature of {ref.module}.{name}{ref.signature}; "
                             f"yours is ({', '.join(params)})")


def _run(name: str, fn: Callable, cases: list[Case], ref: Reference | None = None) -> None:
    """Run every case; raise at the first wrong one with its hint, or print the one pass line.
    `ref`: the solution's Reference, for the checks of the other modules (`checks_sampling`, ...).
    Whatever a case raises becomes that case's AssertionError (`_case_failed`), chained to the error (its
    traceback shows where); but a stub's NotImplementedError stays one."""
    _check_signature(name, fn, ref)
    learner = traced(fn)  # one for every case: a check may cache what it built from fn
    for i, case in enumerate(cases, 1):
        where = f"check_{name} failed on case {i}/{len(cases)} ({case.name})"
        learner.trace.clear()
        solution = functools.partial(_solution_returns, name, case, ref)  # run only to explain a failure
        try:
            out = case.run(learner)
        except Exception as e:
            if isinstance(e, NotImplementedError):
                raise  # a stub, not written yet
            if isinstance(e, AssertionError) and not learner.trace.raised_here(e):  # the check's own verdict
                if str(e).startswith(f"check_{name}"):
                    raise
                raise AssertionError(f"{where}:\n  {e}") from None
            raise _case_failed(name, where, e, learner.trace, solution) from e
        problem = _judge(case, out)
        if problem is not None:  # a case that reads fn's tensor through a function of it sees no dtype: say it here
            raise AssertionError(f"{where}:\n{_returned(name, learner.trace, solution, dtype_only=True) or problem}")
    print(f"check_{name}: all {len(cases)} cases pass")


# --- what went wrong when a case raised --------------------------------------------------------


@dataclass
class Trace:
    """What the learner's fn returned, and what it raised, while one case ran."""

    returned: list[Any] = field(default_factory=list)
    raised: BaseException | None = None

    def clear(self) -> None:
        self.returned.clear()
        self.raised = None

    def raised_here(self, err: BaseException) -> bool:
        """`err` is what fn raised, or was raised from it."""
        while err is not None:
            if err is self.raised:
                return True
            err = err.__cause__ or err.__context__
        return False


def traced(fn: Callable) -> Callable:
    """fn as a plain function (so it binds as a method where a check installs it) with fn's signature,
    recording in its `.trace` what each call returned or raised."""
    trace = Trace()

    @functools.wraps(fn)
    def learner(*args: Any, **kwargs: Any) -> Any:
        try:
            out = fn(*args, **kwargs)
        except BaseException as e:
            trace.raised = e
            raise
        trace.returned.append(out)
        return out

    learner.trace = trace
    return learner


def _a(word: str) -> str:
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def _describe(x: Any) -> str:
    """What a value is, for a message: its type and, for a tensor or array, dtype and shape."""
    if x is None:
        return "None"
    if isinstance(x, Tensor):
        return f"{_a(str(x.dtype).removeprefix('torch.'))} tensor of shape {tuple(x.shape)}"
    if type(x).__module__ == "numpy" and hasattr(x, "shape"):
        return f"a numpy array ({x.dtype}) of shape {tuple(x.shape)}: return a torch tensor"
    if isinstance(x, (list, tuple)):
        kinds = sorted({type(v).__name__ for v in x})
        return f"a {type(x).__name__} of {len(x)}" + (f" ({', '.join(kinds)})" if kinds else "")
    if isinstance(x, (str, int, float, bool)):
        return _a(type(x).__name__) + " " + (repr(x[:40]) if isinstance(x, str) else repr(x))
    return _a(type(x).__name__)


def _shape_of(x: Any) -> Any:
    """What must agree between the learner's return and the solution's: the type, and a tensor's dtype kind and rank."""
    return ("tensor", _kind(x.dtype), x.dim()) if isinstance(x, Tensor) else type(x)


def _solution_returns(name: str, case: Case, ref: Reference | None) -> Any:
    """What the solution's fn returns on `case` (its first call), or None where it cannot be run here."""
    ref = ref or REFERENCES.get(name)
    try:
        solution = traced(getattr(importlib.import_module(ref.module), name))
        case.run(solution)
        return solution.trace.returned[0]
    except Exception:  # the message is then made without it
        return None


def _returned(name: str, trace: Trace, solution: Callable[[], Any], dtype_only: bool = False) -> str | None:
    """"your fn returned A, where the solution returns B" where fn's first return differs from the
    solution's in type, or a tensor's dtype kind or rank (`dtype_only`: only a tensor's dtype kind); else None."""
    if not trace.returned:
        return None
    mine, theirs = trace.returned[0], solution()
    tensors = isinstance(mine, Tensor) and isinstance(theirs, Tensor)
    if theirs is None or (not tensors and dtype_only) or _shape_of(mine) == _shape_of(theirs) \
            or (dtype_only and _kind(mine.dtype) == _kind(theirs.dtype)):
        return None
    line = f"  your {name} returned {_describe(mine)}, where the solution returns {_describe(theirs)}"
    if tensors and _kind(mine.dtype) != _kind(theirs.dtype):
        line += f"\n  hint: {DTYPE_HINTS.get(_kind(theirs.dtype), '')}"
    return line


def _case_failed(name: str, where: str, err: Exception, trace: Trace, solution: Callable[[], Any]) -> AssertionError:
    """The AssertionError for a case that raised: your fn raised (which case, what); or it returned
    something the check could not use (what, and what the solution returns there); or, raised while
    the check ran code your fn made (a trainer's method), the error with the case named."""
    error = f"{type(err).__name__}: {err}".strip().rstrip(":")
    if trace.raised_here(err):
        return AssertionError(f"{where}:\n  your {name} raised {error}")
    returned = _returned(name, trace, solution)
    if returned is None and trace.returned:
        returned = f"  your {name} returned {_describe(trace.returned[0])}, which the check could not use ({error})"
    return AssertionError(f"{where}:\n" + (returned or f"  {error} (raised while the check ran your {name}; the "
                                                        "traceback above shows where)"))


# --- get_log_probs ----------------------------------------------------------------------------

WRONG_AXIS = ("softmax over the wrong axis: the distribution is over the vocabulary, the LAST axis "
              "(log_softmax(dim=-1)); over dim=1 it normalises each token's logit across the positions")


def _over_positions(logits: Any, span: slice) -> Tensor:
    """The log-softmax a wrong-axis mistake takes, over the positions (dim=1) instead of the vocabulary, of
    logits[:, span] (`span` sliced first) — float64."""
    return torch.tensor(logits, dtype=torch.float64)[:, span].log_softmax(1)


OFF_BY_ONE = ("off by one between logits and tokens: the logits at position t predict token t+1, so "
              "tokens[:, prefix_len:] are scored by logits[:, prefix_len-1:-1] (the last position predicts nothing)")


def _get_log_probs_cases() -> list[Case]:
    # softmax[0, ln 2, ln 3] = [1/6, 2/6, 3/6];  softmax[ln 3, 0, 0] = [3/5, 1/5, 1/5]
    a = [[[0.0, LN2, LN3], [LN3, 0.0, 0.0], [5.0, -5.0, 1.0]]]
    b = [[[5.0, -5.0, 1.0], [0.0, LN2, LN3], [LN3, 0.0, 0.0], [0.0, 0.0, 0.0]]]
    lse = math.log(math.exp(5) + math.exp(-5) + math.exp(1))  # logsumexp [5, -5, 1]
    return [
        Case("no prefix_len: one log-prob per next token",
             lambda fn: fn(_t(a, grad=True), torch.tensor([[2, 1, 0]])),
             # position 0 scores token 1: ln(2/6); position 1 scores token 0: ln(3/5)
             [[math.log(2 / 6), math.log(3 / 5)]],
             (Mistake([[math.log(3 / 6), math.log(1 / 5)]], OFF_BY_ONE),  # logits[:, :-1] with tokens[:, :-1]
              Mistake([[math.log(1 / 5), 5 - lse]], OFF_BY_ONE),  # logits[:, 1:] with tokens[:, 1:]
              Mistake([[LN2, LN3]], "those are the raw logits of the tokens: subtract logsumexp (log_softmax) "
                                    "to make them log-probabilities"),
              Mistake([[2 / 6, 3 / 5]], "those are probabilities: take the log (log_softmax, not softmax)"),
              # over the two scoring positions: ln(2 / (2 + 1)), ln(3 / (1 + 3)); or over all three, then sliced
              Mistake([[math.log(2 / 3), math.log(3 / 4)]], WRONG_AXIS),
              Mistake(_over_positions(a, slice(None)).gather(-1, torch.tensor([[[1], [0], [0]]]))[:, :2, 0],
                      WRONG_AXIS)),
             needs_grad=True),
        Case("prefix_len = 2: only the generated tokens",
             lambda fn: fn(_t(b), torch.tensor([[0, 1, 2, 0]]), prefix_len=2),
             # generated tokens 2, 0 are scored by positions 1, 2: ln(3/6), ln(3/5)
             [[math.log(3 / 6), math.log(3 / 5)]],
             (Mistake([[-5 - lse, math.log(3 / 6), math.log(3 / 5)]],
                      "prefix_len ignored: with it, return only the gen_len = seq_len - prefix_len generated tokens"),
              Mistake([[math.log(1 / 5), math.log(1 / 3)]], OFF_BY_ONE),  # logits[:, 2:] with tokens[:, 2:]
              Mistake([[math.log(2 / 6), math.log(1 / 5)]], OFF_BY_ONE))),  # logits[:, 1:-1] with tokens[:, 1:-1]
        Case("temperature 0.5",
             lambda fn: fn(_t(a), torch.tensor([[0, 1, 0]]), temperature=0.5),
             # z / T = 2z: softmax ∝ [1, 4, 9] -> ln(4/14);  ∝ [9, 1, 1] -> ln(9/11)
             [[math.log(4 / 14), math.log(9 / 11)]],
             (Mistake([[math.log(2 / 6), math.log(3 / 5)]], "the temperature was ignored: the tokens were sampled "
                                                            "from softmax(logits / T), score them under it"),
              # z · T: softmax ∝ [1, √2, √3] -> ln(√2 / (1+√2+√3));  ∝ [√3, 1, 1] -> ln(√3 / (√3+2))
              Mistake([[math.log(2**0.5 / (1 + 2**0.5 + 3**0.5)), math.log(3**0.5 / (3**0.5 + 2))]],
                      "divide the logits by the temperature, don't multiply"))),
        Case("stability: logits x 100",
             lambda fn: fn(_t([[[0.0, LN2, LN3], [0.0, 0.0, 0.0]]]) * 100, torch.tensor([[0, 0]])),
             # logits [0, 100 ln 2, 100 ln 3]: log p(token 0) = -100 ln 3 - ln(1 + 2^100 / 3^100 + 3^-100)
             [[-100 * LN3]],
             if_not_finite=LOG_SOFTMAX, atol=1e-3),
    ]


def check_get_log_probs(fn: Callable) -> None:
    """Check `get_log_probs(logits, tokens, prefix_len=None, temperature=1.0) -> [batch, gen_len]`,
    the signature of `rlhf_scratch.core.objectives.get_log_probs`.

    Recognises: logits and tokens off by one, prefix_len ignored, raw logits or probabilities
    returned instead of log-probs, the temperature ignored or multiplied, log(softmax) at logits x 100.
    """
    _run("get_log_probs", fn, _get_log_probs_cases())


# --- compute_advantages -----------------------------------------------------------------------


def _compute_advantages_cases() -> list[Case]:
    values = [[1.0, 2.0, 3.0, 4.0], [0.0, -1.0, 5.0, 2.0]]  # prefix_len 2: the actions are chosen in s_1, s_2
    masked_values = [[0.0, 1.0, 2.0, 4.0, 9.0], [0.0, 1.0, 3.0, 9.0, 9.0]]
    mask = [[True, True, True], [True, True, False]]
    return [
        Case("two samples, prefix_len = 2",
             lambda fn: fn(_t(values), _t([10.0, -3.0]), 2),
             # row 0: [V(s_2) - V(s_1), r - V(s_2)] = [3 - 2, 10 - 3];  row 1: [5 - (-1), -3 - 5]
             [[1.0, 7.0], [6.0, -8.0]],
             (Mistake([[-1.0, -7.0], [-6.0, 8.0]], "sign: A = Q - V(s_t), how much better the step went than "
                                                   "expected; you computed V(s_t) - Q"),
              Mistake([[1.0, 6.0], [-3.0, -5.0]], "states shifted by one: the first generated token is chosen in "
                                                  "s_{prefix_len-1}, so V(s_t) is values[:, prefix_len-1:-1]"),
              Mistake([[1.0, 1.0], [6.0, -3.0]], "the reward is missing: after the last token there is no state, "
                                                 "so Q_last = reward (not V(s_{last+1}))"),
              Mistake([[1.0, 11.0], [6.0, -6.0]], "Q_last = reward alone: there is no state after the last token "
                                                  "whose value you could add"),
              Mistake([[8.0, 7.0], [-2.0, -8.0]], "that is the Monte-Carlo advantage reward - V(s_t) (GAE with "
                                                  "lambda = 1); the blog's one-step estimate uses V(s_{t+1}) - V(s_t)"))),
        Case("row 1 ends at EOS (mask)",
             lambda fn: fn(_t(masked_values), _t([10.0, 20.0]), 2, mask=torch.tensor(mask)),
             # row 0: [2 - 1, 4 - 2, 10 - 4];  row 1 ends at t = 1: [3 - 1, 20 - 3, 0 (padding)]
             [[1.0, 2.0, 6.0], [2.0, 17.0, 0.0]],
             (Mistake([[1.0, 2.0, 6.0], [2.0, 6.0, 11.0]], "the mask was ignored: the episode ends at each sample's "
                                                           "last KEPT token, the reward arrives there and padding gets 0"),
              Mistake([[1.0, 2.0, 6.0], [2.0, 6.0, 0.0]], "you zeroed the padding, but the reward must arrive at the "
                                                          "last kept token (t = 1 in row 1), not at the last position"))),
    ]


def check_compute_advantages(fn: Callable) -> None:
    """Check the blog's one-step advantage `compute_advantages(values, rewards, prefix_len, mask=None)
    -> [batch, gen_len]`, the signature of `rlhf_scratch.core.advantages.compute_advantages`.

    Recognises: the sign (V - Q), states shifted by one, the reward missing or added to a value,
    the Monte-Carlo advantage instead, the mask ignored or the reward not moved to the last kept token.
    """
    _run("compute_advantages", fn, _compute_advantages_cases())


# --- normalize_reward -------------------------------------------------------------------------


def _normalize_reward_cases() -> list[Case]:
    # [0, 0, 4]: mean 4/3, deviations [-4/3, -4/3, 8/3], Σ dev² = 96/9
    unbiased, population = math.sqrt(96 / 9 / 2), math.sqrt(96 / 9 / 3)  # 2.309401 (n-1), 1.885618 (n)
    centred = [-4 / 3, -4 / 3, 8 / 3]
    return [
        Case("[0, 0, 4], eps = 0",
             lambda fn: fn(_t([0.0, 0.0, 4.0]), eps=0.0),
             [x / unbiased for x in centred],  # [-0.57735, -0.57735, 1.154701]
             (Mistake([x / population for x in centred],
                      "you divided by the population std (÷ n). The reference uses torch's default, the unbiased std "
                      "(÷ (n-1), Bessel's correction: the deviations are taken from the batch's own mean, which "
                      "makes them smaller than from the true mean), as the blog's reward.std(); here n = 3 and "
                      "the two differ by sqrt(3/2)"),
              Mistake([0.0, 0.0, 4 / unbiased], "subtract the mean before dividing by the std"),
              Mistake(centred, "you centred the rewards but did not divide by the std"),
              Mistake([x / unbiased**2 for x in centred], "divide by the std, not the variance"))),
        Case("[1, 2, 3], eps = 0.5",
             lambda fn: fn(_t([1.0, 2.0, 3.0]), eps=0.5),
             # mean 2, unbiased std sqrt((1 + 0 + 1) / 2) = 1: [-1, 0, 1] / (1 + 0.5)
             [-1 / 1.5, 0.0, 1 / 1.5],
             (Mistake([-1.0, 0.0, 1.0], "eps was ignored: (r - mean) / (std + eps)"),
              Mistake([-(1.5**-0.5), 0.0, 1.5**-0.5], "eps goes outside the square root: (r - mean) / (std + eps), "
                                                      "not / sqrt(var + eps)"))),
        Case("a constant batch",
             lambda fn: fn(_t([3.7] * 5)),
             [0.0] * 5,  # std 0: 0 / eps = 0
             if_not_finite="a constant batch has std 0: add eps to the std so it gives 0 / eps = 0, not NaN"),
        Case("a batch of one",
             lambda fn: fn(_t([2.0])),
             [0.0],
             if_not_finite="a batch of one: the unbiased std of one number is NaN (÷ (n-1) = ÷ 0); "
                           "return zeros when there are fewer than 2 rewards"),
    ]


def check_normalize_reward(fn: Callable) -> None:
    """Check `normalize_reward(reward, eps=1e-5) -> [batch]`, the signature of
    `rlhf_scratch.reward.functions.normalize_reward`.

    Recognises: the population std (÷ n) where the reference uses the unbiased one (÷ n-1),
    the mean not subtracted, no division or a division by the variance, eps ignored or inside the
    square root, NaN for a constant batch or a batch of one.
    """
    _run("normalize_reward", fn, _normalize_reward_cases())


# --- calc_clipped_sur_obj ---------------------------------------------------------------------


def _surrogate(ratio: Tensor, adv: Tensor, clip: float, pick: Callable = torch.minimum) -> Tensor:
    """The per-token clipped surrogate, for computing what a mistake gives."""
    return pick(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)


def _clipped_sur_obj_cases() -> list[Case]:
    ratio = torch.tensor([[1.5, 1.1], [0.7, 0.6]], dtype=torch.float64)
    old = [[-1.0, -2.0], [-0.5, -1.0]]
    new = (torch.tensor(old, dtype=torch.float64) + ratio.log()).tolist()
    adv = torch.tensor([[4.0, 0.0], [2.0, -2.0]], dtype=torch.float64)
    # mean 1: centred [[3, -1], [1, -3]], Σ c² = 20, unbiased std sqrt(20/3) = 2.581989
    std = math.sqrt(20 / 3)
    # token terms (in units of 1/std): (0,0) A>0, r 1.5 clipped to 1.2: 3.6;  (0,1) r 1.1 inside: -1.1;
    # (1,0) A>0, r 0.7 below the clip but moving back is never clipped: 0.7;  (1,1) A<0, r 0.6 clipped to 0.8: -2.4
    expected = (3.6 - 1.1 + 0.7 - 2.4) / 4 / std  # 0.0774597
    whitened = (adv - adv.mean()) / adv.std()
    # mask: kept advantages [1, 3, 5] (mean 3, std 2) whiten to [-1, 0, 1]; the 1000s are padding
    m_adv = torch.tensor([[1.0, 3.0, 1000.0], [5.0, -1000.0, 1000.0]], dtype=torch.float64)
    m_ratio = torch.tensor([[0.9, 1.0, 1.5], [1.1, 1.5, 1.5]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    m_all = _surrogate(m_ratio, (m_adv - m_adv.mean()) / m_adv.std(), 0.2)  # whitened with the padding
    return [
        Case("four tokens, two of them clipped",
             lambda fn: fn(_t(new, grad=True), _t(old), _t(adv.tolist()), 0.2),
             expected,
             (Mistake((ratio * whitened).mean(), "the ratio was not clipped: min(r A, clip(r, 1-eps, 1+eps) A)"),
              Mistake((ratio.clamp(0.8, 1.2) * whitened).mean(), "take the min of the unclipped and the clipped "
                                                                 "term, not the clipped term alone"),
              Mistake(_surrogate(ratio, whitened, 0.2, torch.maximum).mean(),
                      "min, not max: the objective is pessimistic, the clip only ever takes a gain away"),
              Mistake(_surrogate(ratio, (adv - adv.mean()) / adv.std(unbiased=False), 0.2).mean(),
                      "the advantages were whitened with the population std (÷ n); the reference uses the unbiased "
                      "std (÷ (n-1), torch's default and CleanRL's)"),
              Mistake(_surrogate(ratio, adv, 0.2).mean(), "normalise the advantages per minibatch first: "
                                                          "(A - mean) / (std + eps)"),
              Mistake(_surrogate(ratio, adv - adv.mean(), 0.2).mean(), "you centred the advantages but did not "
                                                                       "divide by their std"),
              Mistake(_surrogate(ratio, adv / adv.std(), 0.2).mean(), "subtract the advantages' mean as well as "
                                                                      "dividing by their std"),
              Mistake(_surrogate(1 / ratio, whitened, 0.2).mean(), "the ratio is upside down: r = pi / pi_old = "
                                                                   "exp(logprobs - mb_logprobs)"),
              Mistake(-expected, "sign: this is an objective to MAXIMISE (the trainer ascends it), not a loss"),
              Mistake(_surrogate(ratio.log(), whitened, 0.2).mean(), "that ratio is the LOG-ratio: r = exp(logprobs - "
                                                                     "mb_logprobs), which is 1 (not 0) where nothing "
                                                                     "changed")),
             needs_grad=True),
        Case("row 0 keeps 2 tokens, row 1 keeps 1 (mask)",
             lambda fn: fn(_t(m_ratio.log().tolist()), _t([[0.0] * 3] * 2), _t(m_adv.tolist()), 0.2,
                           mask=torch.tensor(mask.tolist())),
             # kept terms: r 0.9 · (-1) = -0.9, r 1.0 · 0 = 0, r 1.1 · 1 = 1.1: mean over the 3 kept = 0.2 / 3
             0.2 / 3,
             (Mistake(0.2 / 6, PADDING_COUNTED),
              Mistake(m_all.mean(), MASK_IGNORED + " (and the padding's advantages shifted the whitening)"),
              Mistake(m_all[mask].mean(), "the advantages were whitened with the padding included: their mean "
                                          "and std must be over the kept tokens only"))),
    ]


def check_calc_clipped_sur_obj(fn: Callable) -> None:
    """Check `calc_clipped_sur_obj(logprobs, mb_logprobs, mb_advantages, clip_coef, eps=1e-8, mask=None)
    -> scalar` (maximised), the signature of `rlhf_scratch.core.objectives.calc_clipped_sur_obj`.

    Recognises: no clip, the clipped term alone, max for min, the advantages not (or half)
    normalised or normalised with ÷ n, the ratio upside down, a loss's sign, padding counted in the
    mean, the mask ignored or leaking into the whitening.
    """
    _run("calc_clipped_sur_obj", fn, _clipped_sur_obj_cases())


# --- calc_kl_penalty --------------------------------------------------------------------------


def _kl_penalty_cases() -> list[Case]:
    # position 0: pi = [1/6, 2/6, 3/6] vs uniform: KL = 1/6 ln(1/2) + 2/6 ln 1 + 3/6 ln(3/2) = 0.0872081
    # position 1: identical distributions, KL 0
    kl0 = LN2 / -6 + 0.5 * math.log(1.5)
    reverse = (LN2 + math.log(2 / 3)) / 3  # KL(uniform || pi) = 1/3 (ln 2 + ln 1 + ln 2/3) = 0.0958940
    logits, ref = [[[0.0, LN2, LN3], [1.0, 2.0, 3.0]]], [[[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]]
    beta = 0.2
    # mask: kept positions [0, ln 3] and [ln 3, 0] (p = 1/4, 3/4: KL to uniform = 1/4 ln(1/2) + 3/4 ln(3/2) =
    # 0.1308121) and [0, 0] (KL 0); the padding is peaked, KL to uniform ≈ ln 2
    kl_quarter = -LN2 / 4 + 0.75 * math.log(1.5)
    m_logits = [[[0.0, LN3], [0.0, 0.0], [9.0, -9.0]], [[LN3, 0.0], [9.0, -9.0], [9.0, -9.0]]]
    p = 1 / (1 + math.exp(-18))
    kl_peaked = p * math.log(2 * p) + (1 - p) * math.log(2 * (1 - p))
    mask = [[True, True, False], [True, False, False]]
    # over the positions (the wrong axis) of the masked case: the two distributions differ there
    lp_axis, ref_axis = _over_positions(m_logits, slice(None)), _over_positions([[[0.0, 0.0]] * 3] * 2, slice(None))
    return [
        Case("two positions, β = 0.2",
             lambda fn: fn(_t(logits, grad=True), _t(ref), beta),
             beta * kl0 / 2,  # 0.00872081
             (Mistake(beta * reverse / 2, "wrong KL direction: you computed KL(pi_ref || pi); the penalty is "
                                          "KL(pi || pi_ref) = Σ_v pi(v) (log pi(v) - log pi_ref(v)), weighted by the "
                                          "policy's probabilities, so it punishes text the reference finds unlikely"),
              Mistake(kl0 / 2, "you forgot to multiply by beta (got the un-coefficiented value)"),
              Mistake(beta * kl0, "take the mean over positions, not the sum"),
              Mistake(-beta * kl0 / 2, "sign: the penalty is a positive number (KL >= 0) that the trainer subtracts"),
              # Σ_v (log pi - log pi_ref) at position 0: ln(1/2) + ln 1 + ln(3/2)
              Mistake(beta * math.log(0.75) / 2, "weight each log-ratio by pi(v): Σ_v pi(v) (log pi(v) - log pi_ref(v))")),
             needs_grad=True),
        Case("stability: logits x 100",
             lambda fn: fn(_t([[[0.0, LN2, LN3]]]) * 100, _t([[[0.0, 0.0, 0.0]]]), 1.0),
             # pi is one-hot on token 2 up to e^-40: KL(one-hot || uniform over 3) = ln 3
             LN3,
             # over the positions (one here) every "probability" is 1, so both log-softmaxes are 0
             (Mistake(0.0, WRONG_AXIS + " (one position here: every entry 1, the KL 0)"),),
             if_not_finite=LOG_SOFTMAX, atol=1e-4),
        Case("padding after EOS (mask), β = 2",
             lambda fn: fn(_t(m_logits), _t([[[0.0, 0.0]] * 3] * 2), 2.0, mask=torch.tensor(mask)),
             2 * (2 * kl_quarter + 0) / 3,  # 0.1744161
             (Mistake(2 * (2 * kl_quarter) / 6, PADDING_COUNTED),
              Mistake(2 * (2 * kl_quarter + 3 * kl_peaked) / 6, MASK_IGNORED),
              Mistake(2 * (lp_axis.exp() * (lp_axis - ref_axis)).sum(-1)[torch.tensor(mask)].mean(), WRONG_AXIS))),
    ]


def check_calc_kl_penalty(fn: Callable) -> None:
    """Check `calc_kl_penalty(logits, ref_logits, beta, mask=None, from_logprobs=False) -> scalar`,
    the signature of `rlhf_scratch.core.objectives.calc_kl_penalty` (the cases pass raw logits).

    Recognises: the wrong KL direction, beta forgotten, a sum over positions, the sign, the
    log-ratio not weighted by pi, log(softmax) at logits x 100, padding counted or the mask ignored.
    """
    _run("calc_kl_penalty", fn, _kl_penalty_cases())


# --- calc_entropy_bonus -----------------------------------------------------------------------


def _entropy_bonus_cases() -> list[Case]:
    # H[1/6, 2/6, 3/6] = 1.0114043;  H[3/5, 1/5, 1/5] = 0.9502705
    h0 = -(math.log(1 / 6) / 6 + math.log(2 / 6) * 2 / 6 + math.log(3 / 6) * 3 / 6)
    h1 = -(0.6 * math.log(0.6) + 0.4 * math.log(0.2))
    coef = 0.1
    # mask: kept H[1/4, 3/4] = 0.5623351 twice and H[1/2, 1/2] = ln 2; the padding is uniform too (ln 2)
    h_quarter = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    m_logits = [[[0.0, LN3], [0.0, 0.0], [4.0, 4.0]], [[LN3, 0.0], [4.0, 4.0], [4.0, 4.0]]]
    mask = [[True, True, False], [True, False, False]]
    kept = 2 * h_quarter + LN2
    two = [[[0.0, LN2, LN3], [LN3, 0.0, 0.0]]]
    lp_axis = _over_positions(two, slice(None))
    return [
        Case("two positions, ent_coef = 0.1",
             lambda fn: fn(_t(two, grad=True), coef),
             coef * (h0 + h1) / 2,  # 0.0980837
             (Mistake((h0 + h1) / 2, "you forgot to multiply by ent_coef (got the un-coefficiented value)"),
              Mistake(-coef * (h0 + h1) / 2, "sign: the entropy is -Σ p log p, a positive number (the bonus the "
                                             "trainer adds)"),
              Mistake(coef * (h0 + h1), "take the mean over positions, not the sum"),
              Mistake(coef * -(lp_axis.exp() * lp_axis).sum(-1).mean(), WRONG_AXIS)),
             needs_grad=True),
        Case("stability: logits x 100",
             lambda fn: fn(_t([[[0.0, LN2, LN3]]]) * 100, 1.0),
             0.0,  # one-hot up to e^-40: entropy ≈ 40.5 e^-40.5 ≈ 1e-16
             if_not_finite=LOG_SOFTMAX, atol=1e-6),
        Case("padding after EOS (mask), ent_coef = 0.5",
             lambda fn: fn(_t(m_logits), 0.5, mask=torch.tensor(mask)),
             0.5 * kept / 3,  # 0.3029695
             (Mistake(0.5 * kept / 6, PADDING_COUNTED),
              Mistake(0.5 * (kept + 3 * LN2) / 6, MASK_IGNORED))),
    ]


def check_calc_entropy_bonus(fn: Callable) -> None:
    """Check `calc_entropy_bonus(logits, ent_coef, mask=None, from_logprobs=False) -> scalar`,
    the signature of `rlhf_scratch.core.objectives.calc_entropy_bonus` (the cases pass raw logits).

    Recognises: ent_coef forgotten, the sign, a sum over positions, log(softmax) at logits x 100
    (0 · log 0 = NaN), padding counted or the mask ignored.
    """
    _run("calc_entropy_bonus", fn, _entropy_bonus_cases())


# --- calc_value_fn_loss -----------------------------------------------------------------------


def _value_fn_loss_cases() -> list[Case]:
    mse = (1 + 4 + 0) / 3  # errors V - R = [1, -2, 0]
    return [
        Case("three positions, vf_coef = 0.2",
             lambda fn: fn(_t([[1.0, 2.0, 3.0]], grad=True), _t([[0.0, 4.0, 3.0]]), 0.2),
             0.5 * 0.2 * mse,  # 1/6
             (Mistake(0.2 * mse, "you forgot the 1/2 in 1/2 * vf_coef * mean((V - R)^2) (CleanRL's and ARENA's)"),
              Mistake(0.5 * mse, "you forgot to multiply by vf_coef (got the un-coefficiented value)"),
              Mistake(mse, "both coefficients are missing: 1/2 * vf_coef * mean((V - R)^2)"),
              Mistake(0.5 * 0.2 * (1 + 4 + 0), "take the mean of the squared errors, not the sum"),
              Mistake(0.5 * 0.2 * (1 + 2 + 0) / 3, "square the errors (mean((V - R)^2)), not their absolute value"),
              Mistake(-0.5 * 0.2 * mse, "sign: the loss is a positive number that the trainer subtracts")),
             needs_grad=True),
        Case("padding after EOS (mask), vf_coef = 0.3",
             lambda fn: fn(_t([[1.0, 2.0, 9.0], [0.0, 9.0, 9.0]]), _t([[2.0, 0.0, -9.0], [3.0, -9.0, -9.0]]), 0.3,
                           mask=torch.tensor([[True, True, False], [True, False, False]])),
             0.5 * 0.3 * (1 + 4 + 9) / 3,  # kept errors 1, 2, 3: 0.7
             (Mistake(0.5 * 0.3 * (1 + 4 + 9) / 6, PADDING_COUNTED),
              Mistake(0.5 * 0.3 * (14 + 3 * 18**2) / 6, MASK_IGNORED))),
    ]


def check_calc_value_fn_loss(fn: Callable) -> None:
    """Check `calc_value_fn_loss(values, mb_returns, vf_coef, mask=None) -> scalar`, the signature
    of `rlhf_scratch.core.objectives.calc_value_fn_loss`.

    Recognises: the 1/2, vf_coef or both forgotten, a sum, absolute errors, the sign, padding
    counted or the mask ignored.
    """
    _run("calc_value_fn_loss", fn, _value_fn_loss_cases())


# --- compute_rloo_advantages ------------------------------------------------------------------

MEAN_BASELINE = ("that is the group-mean baseline r_i - mean_j r_j (GRPO's), which includes r_i itself; "
                 "leave-one-out subtracts the mean of the OTHER G-1 rewards: (Σ_j r_j - r_i) / (G-1)")


def _rloo_advantages_cases() -> list[Case]:
    six = [1.0, 0.0, 0.5, 0.25, 2.0, 4.0]
    return [
        Case("one group of 4",
             lambda fn: fn(_t([1.0, 2.0, 3.0, 6.0]), 4),
             # baselines (2+3+6)/3, (1+3+6)/3, (1+2+6)/3, (1+2+3)/3 = 11/3, 10/3, 3, 2
             [1 - 11 / 3, 2 - 10 / 3, 0.0, 4.0],
             (Mistake([-2.0, -1.0, 0.0, 3.0], MEAN_BASELINE),
              Mistake([1 - 11 / 4, 2 - 10 / 4, 3 - 9 / 4, 6 - 6 / 4], "divide the others' sum by G-1 (how many "
                                                                      "there are), not by G"),
              Mistake([11 / 3 - 1, 10 / 3 - 2, 0.0, -4.0], "sign: A_i = r_i - baseline, not baseline - r_i"))),
        Case("three prompts, G = 2",
             lambda fn: fn(_t(six), 2),
             # each advantage is the difference to the other completion of its prompt
             [1.0, -1.0, 0.25, -0.25, -2.0, 2.0],
             (Mistake([0.5, -0.5, 0.125, -0.125, -1.0, 1.0], MEAN_BASELINE),
              # groups read as rows {0, 3}, {1, 4}, {2, 5}
              Mistake([0.75, -2.0, -3.5, -0.75, 2.0, 3.5], "the G completions of a prompt are CONSECUTIVE rows "
                                                           "(prompt-major): group with view(-1, G), not view(G, -1)"),
              # whole batch: r_i - (7.75 - r_i) / 5
              Mistake([r - (7.75 - r) / 5 for r in six], "the baseline must come from the other completions of the "
                                                         "SAME prompt, not of the whole batch"))),
    ]


def check_compute_rloo_advantages(fn: Callable) -> None:
    """Check `compute_rloo_advantages(rewards, num_generations) -> [batch]`, the signature of
    `rlhf_scratch.algorithms.rloo.compute_rloo_advantages`.

    Recognises: the group-mean baseline for leave-one-out, ÷ G for ÷ (G-1), the sign, groups
    read across the batch (view(G, -1)), a whole-batch baseline.
    """
    _run("compute_rloo_advantages", fn, _rloo_advantages_cases())


# --- compute_grpo_advantages ------------------------------------------------------------------

GRPO_EPS = 1e-4


def _grpo_advantages_cases() -> list[Case]:
    rewards = [1.0, 2.0, 3.0, 6.0, 5.0, 5.0, 5.0, 5.0]  # group 1 spread, group 2 all equal
    centred = [-2.0, -1.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0]  # group 1: mean 3
    group_std = math.sqrt(14 / 3)  # Σ dev² = 14, unbiased: 2.160247
    batch_std = math.sqrt(22 / 7)  # all 8: mean 4, Σ dev² = 22, unbiased: 1.772811

    def scaled(xs: list[float], std: float) -> list[float]:
        return [x / (std + GRPO_EPS) for x in xs]

    population = ("the std with ÷ n (population); the reference uses the unbiased std, ÷ (n-1), as TRL's nanstd "
                  "and torch's default: with G = 4 the ÷ n std is sqrt(3/4) of it, so your advantages are 15% too large")
    six = [1.0, 0.0, 0.5, 0.25, 2.0, 4.0]
    return [
        Case("scale_rewards = 'group', G = 4",
             lambda fn: fn(_t(rewards), 4, "group"),
             scaled(centred, group_std),  # [-0.925777, -0.462889, 0, 1.388666, 0, 0, 0, 0]
             (Mistake(scaled(centred, math.sqrt(14 / 4)), population),
              Mistake([4 / 3 * x for x in centred], "that is RLOO's leave-one-out advantage G/(G-1) (r_i - mean); GRPO "
                                                    "subtracts the group mean (r_i included) and divides by the group's std"),
              Mistake(centred, "divide by the group's std (+ 1e-4): scale_rewards = 'group'"),
              Mistake([(r - 4.0) / (s + GRPO_EPS) for r, s in zip(rewards, [group_std] * 4 + [0.0] * 4)],
                      "centre each reward by its GROUP's mean (the batch's is 4 here), then divide by the group's std"),
              Mistake(scaled(centred, batch_std), "scale_rewards = 'group' divides by each group's OWN std, "
                                                  "not the whole batch's")),
             if_not_finite="a group of equal rewards has std 0: divide by (std + 1e-4), so its advantages are 0, not NaN"),
        Case("scale_rewards = 'batch', G = 4",
             lambda fn: fn(_t(rewards), 4, "batch"),
             scaled(centred, batch_std),
             (Mistake(scaled(centred, group_std), "scale_rewards = 'batch' divides by the std of the whole batch"),
              Mistake(scaled([r - 4.0 for r in rewards], batch_std), "centre each reward by its GROUP's mean, even when "
                                                                     "scaling by the batch's std"),
              Mistake(scaled(centred, math.sqrt(22 / 8)), population))),
        Case("scale_rewards = 'none' (Dr. GRPO), G = 2",
             lambda fn: fn(_t(six), 2, "none"),
             [0.5, -0.5, 0.125, -0.125, -1.0, 1.0],  # ± half the difference within each pair
             (Mistake([1.0, -1.0, 0.25, -0.25, -2.0, 2.0], "that is RLOO's leave-one-out baseline; GRPO's is the "
                                                           "group mean, r_i included (half the difference at G = 2)"),
              # divided by each pair's std |c| √2 (+ 1e-4): ±1/√2 where the difference is not small
              Mistake([c / (abs(c) * 2**0.5 + GRPO_EPS) for c in (0.5, -0.5, 0.125, -0.125, -1.0, 1.0)],
                      "scale_rewards = 'none' divides by nothing: A_i = r_i - mean_g r"))),
    ]


def check_compute_grpo_advantages(fn: Callable) -> None:
    """Check `compute_grpo_advantages(rewards, num_generations, scale_rewards='group') -> [batch]`,
    the signature of `rlhf_scratch.algorithms.grpo.compute_grpo_advantages` (A = (r - group mean) /
    (std + 1e-4); std over the group, the batch, or none).

    Recognises: the std with ÷ n for ÷ (n-1), RLOO's leave-one-out instead, no scaling or the other
    scaling, centring by the batch mean, NaN for a group of equal rewards (no 1e-4).
    """
    _run("compute_grpo_advantages", fn, _grpo_advantages_cases())


# --- calc_dpo_loss ----------------------------------------------------------------------------


def _dpo_part(out: Any, i: int) -> Tensor:
    """Part i of the learner's (loss, chosen_rewards, rejected_rewards)."""
    if isinstance(out, Tensor) or not isinstance(out, tuple | list) or len(out) != 3:
        raise AssertionError("check_calc_dpo_loss: return (loss, chosen_rewards, rejected_rewards), the mean loss "
                             f"and the implicit rewards (the package returns them as the NamedTuple DPOLoss); got {out!r}")
    return out[i]


def _softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def _dpo_loss_cases() -> list[Case]:
    pairs = [[-10.0, -4.0], [-12.0, -3.0], [-11.0, -6.0], [-10.0, -0.5]]  # pi_c, pi_r, ref_c, ref_r
    # h = (pi_c - pi_r) - (ref_c - ref_r) = [2 - (-1), -1 - (-5.5)] = [3, 4.5]
    h = [3.0, 4.5]

    def loss(margins: list[float], beta: float) -> float:  # mean -log σ(β h) = mean softplus(-β h)
        return sum(_softplus(-beta * m) for m in margins) / len(margins)

    def call(fn: Callable, beta: float, grad: bool = False, **kw: Any) -> Any:
        return fn(*(_t(p, grad=grad and i == 0) for i, p in enumerate(pairs)), beta, **kw)

    sigmoid = loss(h, 0.5)  # (softplus(-1.5) + softplus(-2.25)) / 2 = 0.1508099
    three = [[-10.0, -1.0, -3.0], [-12.0, -1.0, -2.0], [-11.0, 0.0, 0.0], [-11.0, 0.0, 0.0]]  # h = [2, 0, -1]
    ell = [_softplus(-0.2), LN2, _softplus(0.1)]  # β = 0.1
    return [
        Case("sigmoid loss, two pairs, β = 0.5",
             lambda fn: _dpo_part(call(fn, 0.5, grad=True), 0),
             sigmoid,
             (Mistake(loss(h, 1.0), "β is missing: the loss is -log σ(β h), not -log σ(h)"),
              Mistake(0.5 * loss(h, 1.0), "β is outside the sigmoid: the loss is -log σ(β h), not -β log σ(h); "
                                          "β scales the margin, so it sets how far π may move from π_ref, not the "
                                          "size of the loss"),
              Mistake(-math.log(0.5) + loss(h, 1.0), "β is outside the sigmoid: the loss is -log σ(β h), "
                                                     "not -log(β σ(h))"),
              Mistake(loss([-m for m in h], 0.5), "the margin's sign is flipped (chosen and rejected, or policy and "
                                                  "reference, swapped): h = (pi_c - pi_r) - (ref_c - ref_r)"),
              Mistake(loss([1.0, -6.5], 0.5), "the reference's margin is subtracted, not added: "
                                              "h = (pi_c - pi_r) - (ref_c - ref_r)"),
              Mistake(loss([2.0, -1.0], 0.5), "the reference is missing: h = (pi_c - pi_r) - (ref_c - ref_r)"),
              Mistake(-sigmoid, "sign: the loss is MINIMISED, -log σ(β h) (a positive number), not log σ(β h)"),
              Mistake(2 * sigmoid, "take the mean over pairs, not the sum")),
             needs_grad=True),
        Case("the implicit rewards [chosen, rejected], β = 0.5",
             lambda fn: torch.stack([_dpo_part(call(fn, 0.5), 1), _dpo_part(call(fn, 0.5), 2)]),
             [[0.5, 1.0], [-1.0, -1.25]],  # β (pi - ref): 0.5 · [1, 2] and 0.5 · [-2, -2.5]
             (Mistake([[1.0, 2.0], [-2.0, -2.5]], "the implicit reward is β (log pi - log pi_ref): β is missing"),
              Mistake([[-0.5, -1.0], [1.0, 1.25]], "sign: the implicit reward is β (log pi - log pi_ref)"),
              Mistake([[-1.0, -1.25], [0.5, 1.0]], "chosen and rejected rewards are swapped"))),
        Case("stability: a margin of -10000",
             lambda fn: _dpo_part(fn(_t([-1e4, 1e4]), _t([0.0, 0.0]), _t([0.0, 0.0]), _t([0.0, 0.0]), 1.0), 0),
             5000.0,  # (softplus(1e4) + softplus(-1e4)) / 2 = (1e4 + 0) / 2
             if_not_finite=LOGSIGMOID, atol=1e-2),
        Case("ipo, β = 0.25",
             lambda fn: _dpo_part(call(fn, 0.25, loss_type="ipo"), 0),
             ((3 - 2) ** 2 + (4.5 - 2) ** 2) / 2,  # target 1/(2β) = 2: (1 + 6.25) / 2 = 3.625
             (Mistake(((3 - 4) ** 2 + (4.5 - 4) ** 2) / 2, "IPO's target is 1/(2β), not 1/β"),
              Mistake(((0.75 - 0.5) ** 2 + (1.125 - 0.5) ** 2) / 2, "IPO's loss is (h - 1/(2β))^2, on h itself, "
                                                                   "not on β h"),
              Mistake(loss(h, 0.25), "loss_type = 'ipo' was ignored: that is the sigmoid loss"))),
        Case("weights [1, 0, 1]: a judge could not decide pair 2",
             lambda fn: _dpo_part(fn(*(_t(p) for p in three), 0.1, weights=_t([1.0, 0.0, 1.0])), 0),
             (ell[0] + ell[2]) / 2,  # Σ w ℓ / Σ w = 0.6712678
             (Mistake((ell[0] + ell[2]) / 3, "divide by Σ w (the pairs that count), not by the number of pairs"),
              Mistake(sum(ell) / 3, "the weights were ignored: loss = Σ w ℓ / max(Σ w, 1)"))),
        Case("no pair decided: weights [0]",
             lambda fn: _dpo_part(fn(_t([-1.0]), _t([-1.0]), _t([0.0]), _t([0.0]), 0.1, weights=_t([0.0])), 0),
             0.0,
             if_not_finite="no pair has weight 1, so Σ w = 0: divide by max(Σ w, 1) to get 0, not NaN"),
    ]


def check_calc_dpo_loss(fn: Callable) -> None:
    """Check `calc_dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps,
    ref_rejected_logps, beta, loss_type='sigmoid', weights=None) -> (loss, chosen_rewards,
    rejected_rewards)`, the signature of `rlhf_scratch.algorithms.online_dpo.calc_dpo_loss`.

    Recognises: β missing or outside the sigmoid (-β log σ(h), -log(β σ(h))), the margin's sign
    flipped, the reference added or missing, the sign of the loss, a sum; the implicit rewards
    without β, negated or swapped; log(sigmoid) at a margin of -10000; IPO's target 1/β, IPO on β h, loss_type ignored; the weights ignored or ÷ n; NaN when
    no pair is decided.
    """
    _run("calc_dpo_loss", fn, _dpo_loss_cases())


# --- calc_reward_model_loss -------------------------------------------------------------------


def _reward_model_loss_cases() -> list[Case]:
    chosen, rejected = [2.0, 0.5, -1.0], [0.0, 1.5, -3.0]  # differences [2, -1, 2]: pair 2 ranked wrong
    nll = (_softplus(-2.0) + _softplus(1.0) + _softplus(-2.0)) / 3  # mean -log σ(r_c - r_r) = 0.5223726
    swapped = (_softplus(2.0) + _softplus(-1.0) + _softplus(2.0)) / 3  # 1.5223726

    def call(fn: Callable, grad: bool = False, **kw: Any) -> Any:
        return fn(_t(chosen, grad=grad), _t(rejected), **kw)

    return [
        Case("three pairs",
             lambda fn: call(fn, grad=True),
             nll,
             (Mistake(swapped, "chosen and rejected are swapped: -log σ(r_chosen - r_rejected)"),
              Mistake(-nll, "sign: the loss is MINIMISED, -log σ(r_c - r_r) (a positive number), not log σ"),
              Mistake(3 * nll, "take the mean over pairs, not the sum")),
             needs_grad=True),
        Case("margin [0.5, 0, 1]",
             lambda fn: call(fn, margin=_t([0.5, 0.0, 1.0])),
             (_softplus(-1.5) + _softplus(1.0) + _softplus(-1.0)) / 3,  # differences minus the margin: [1.5, -1, 1]
             (Mistake((_softplus(-2.5) + _softplus(1.0) + _softplus(-3.0)) / 3,
                      "the margin was added: it is subtracted, -log σ(r_c - r_r - m), so the chosen side must win by m"),
              Mistake(nll, "the margin was ignored"))),
        Case("center_rewards_coefficient = 0.01",
             lambda fn: call(fn, center_rewards_coefficient=0.01),
             nll + 0.01 * (4 + 4 + 16) / 3,  # sums r_c + r_r = [2, 2, -4]: mean of squares 8 -> + 0.08
             (Mistake(nll + 8.0, "you forgot to multiply by center_rewards_coefficient (got the un-coefficiented "
                                 "value)"),
              Mistake(nll, "the centring term is mean((r_c + r_r)^2), the mean of the squares, not the square of "
                           "the mean (0 here), or it was ignored"),
              Mistake(nll - 0.08, "sign: the centring term is added to the loss (it penalises rewards far from 0)"))),
        Case("stability: rewards of ±1000",
             lambda fn: fn(_t([1000.0, -1000.0]), _t([-1000.0, 1000.0])),
             1000.0,  # (softplus(-2000) + softplus(2000)) / 2 = (0 + 2000) / 2
             if_not_finite=LOGSIGMOID, atol=1e-3),
    ]


def check_calc_reward_model_loss(fn: Callable) -> None:
    """Check the Bradley–Terry loss `calc_reward_model_loss(chosen_rewards, rejected_rewards,
    margin=None, center_rewards_coefficient=None) -> scalar`, the signature of
    `rlhf_scratch.reward.model.calc_reward_model_loss`.

    Recognises: chosen and rejected swapped, the sign, a sum, the margin added or ignored, the
    centring coefficient forgotten or the term squared after the mean or subtracted, log(sigmoid)
    at a difference of ±2000.
    """
    _run("calc_reward_model_loss", fn, _reward_model_loss_cases())


# --- compute_gae_advantages -------------------------------------------------------------------


DELTAS_ALONE = ("those are the deltas alone (λ = 0): add the discounted later advantages, "
                "A_t = δ_t + γλ A_{t+1}")


def _gae_cases() -> list[Case]:
    # γ = λ = 1/2 (γλ = 1/4); prefix_len 2, so the generated steps are chosen in s_1, s_2, s_3:
    # V(s_t) = values[1:4] = [2, 1, 4], V(s_{t+1}) = values[2:5] = [1, 4, (8: after the last token, not used)]
    # δ_t = r_t + γ V(s_{t+1}) − V(s_t), r_t = 0 but r_last = 3:  δ = [0.5 − 2, 2 − 1, 3 − 4] = [−1.5, 1, −1]
    # A_2 = −1;  A_1 = 1 + ¼(−1) = 0.75;  A_0 = −1.5 + ¼(0.75) = −1.3125
    one = [[9.0, 2.0, 1.0, 4.0, 8.0]]
    # γ = 1, λ = 1/2; row 1's episode ends at t = 1 (its EOS): the reward arrives there, V after it is 0
    # row 0: V = [1, 2, 4], δ = [2 − 1, 4 − 2, 10 − 4] = [1, 2, 6]:   A = [1 + ½·5, 2 + ½·6, 6] = [3.5, 5, 6]
    # row 1: V = [2, 4], δ = [4 − 2, 6 − 4] = [2, 2], padding 0:      A = [2 + ½·2, 2, 0]        = [3, 2, 0]
    two = [[0.0, 1.0, 2.0, 4.0, 8.0], [0.0, 2.0, 4.0, 16.0, 32.0]]
    mask = [[True, True, True], [True, True, False]]
    return [
        Case("one row, γ = λ = 0.5",
             lambda fn: fn(_t(one), _t([3.0]), 2, 0.5, 0.5),
             [[-1.3125, 0.75, -1.0]],
             (Mistake([[-1.25, 0.5, -1.0]], "λ is missing from the recursion: A_t = δ_t + γλ A_{t+1}, not "
                                            "δ_t + γ A_{t+1} (λ trades the value head's bias for the reward's variance)"),
              Mistake([[-0.3125, 2.75, -1.0]], "γ is missing from δ: δ_t = r_t + γ V(s_{t+1}) − V(s_t); γ discounts "
                                               "the next state's value as well as the later deltas"),
              Mistake([[-1.0625, 1.75, 3.0]], "you bootstrapped past the end: after the last token there is no "
                                              "state, so V(s_{last+1}) = 0 and δ_last = reward − V(s_last) "
                                              "(values[:, -1] is never used)"),
              Mistake([[-1.5, 0.625, -0.84375]], "the recursion runs the wrong way: A_t sums the deltas from t ON "
                                                 "(the future), so loop t from the last step down to 0"),
              Mistake([[0.6875, -1.25, -5.0]], "states shifted by one: the first generated token is chosen in "
                                               "s_{prefix_len-1}, so V(s_t) is values[:, prefix_len-1:-1]"),
              Mistake([[0.6875, 1.75, 3.0]], "those are the returns A + V(s_t), not the advantages"),
              Mistake([[-1.5, 1.0, -1.0]], DELTAS_ALONE),
              Mistake([[1.3125, -0.75, 1.0]], "sign: δ_t = r_t + γ V(s_{t+1}) − V(s_t), how much better the step "
                                              "went than V expected"))),
        Case("row 1 ends at EOS (mask), γ = 1, λ = 0.5",
             lambda fn: fn(_t(two), _t([10.0, 6.0]), 2, 1.0, 0.5, mask=torch.tensor(mask)),
             [[3.5, 5.0, 6.0], [3.0, 2.0, 0.0]],
             # mask ignored: row 1 as a full row, V = [2, 4, 16], δ = [2, 12, 6 − 16]: A = [5.5, 7, −10]
             (Mistake([[3.5, 5.0, 6.0], [5.5, 7.0, -10.0]], "the mask was ignored: each episode ends at its "
                                                            "last KEPT token (its EOS); the reward arrives there"),
              Mistake([[3.5, 5.0, 6.0], [5.5, 7.0, 0.0]], "you zeroed the padding, but the reward must arrive "
                                                          "at the last kept token (t = 1 in row 1), not at the last "
                                                          "position"),
              # the reward at t = 1 but γ V(s_2) = 16 added to it: δ_1 = 6 + 16 − 4 = 18, A_0 = 2 + ½·18
              Mistake([[3.5, 5.0, 6.0], [11.0, 18.0, 0.0]], "the reward is at the EOS, but you bootstrapped "
                                                            "from the padding after it: V after the last kept "
                                                            "token is 0 (the episode is over)"))),
        Case("γ = λ = 1: the Monte-Carlo advantage",
             lambda fn: fn(_t(two[:1]), _t([10.0]), 2, 1.0, 1.0),
             [[9.0, 8.0, 6.0]],  # reward − V(s_t) = 10 − [1, 2, 4]
             (Mistake([[1.0, 2.0, 6.0]], DELTAS_ALONE + "; at γ = λ = 1 they telescope to reward − V(s_t)"),)),
    ]


def check_compute_gae_advantages(fn: Callable) -> None:
    """Check `compute_gae_advantages(values, rewards, prefix_len, gamma, gae_lambda, mask=None)
    -> [batch, gen_len]`, the signature of `rlhf_scratch.core.advantages.compute_gae_advantages`.

    Recognises: λ or γ missing, a bootstrap past the last token, the recursion run forwards, the
    states shifted by one, returns for advantages, the sign; the mask ignored, the reward not moved
    to the EOS, a bootstrap from the padding.
    """
    _run("compute_gae_advantages", fn, _gae_cases())


# --- explained_variance -----------------------------------------------------------------------


def _number(out: Any) -> Tensor:
    """The learner's explained variance as a 0-d tensor (a float, as the package returns, or a tensor)."""
    if isinstance(out, Tensor):
        return out
    if isinstance(out, int | float) and not isinstance(out, bool):
        return torch.tensor(float(out), dtype=torch.float64)
    return out  # _judge names what it got


MIXED_DIVISORS = ("Var[R − V] and Var[R] with different divisors (÷ n in one, ÷ (n − 1) in the other: "
                  "torch's var() is unbiased, numpy's and var(unbiased=False) are not); take both alike and the "
                  "ratio is the same either way")


def _explained_variance_cases() -> list[Case]:
    # R = [1, 2, 3, 6]: mean 3, Var[R] = (4 + 1 + 0 + 9) / 4 = 3.5
    # V = [1, 1, 4, 5]: R − V = [0, 1, −1, 1], mean 1/4, Var[R − V] = (1 + 9 + 25 + 9) / 64 = 11/16
    # EV = 1 − (11/16) / 3.5 = 45/56
    returns, values = [1.0, 2.0, 3.0, 6.0], [1.0, 1.0, 4.0, 5.0]
    # padding after EOS: R = V = 9 there (advantage 0), so counting it makes the head look better
    m_values, m_returns = [[1.0, 1.0, 9.0], [4.0, 5.0, 9.0]], [[1.0, 2.0, 9.0], [3.0, 6.0, 9.0]]
    # all six: R = [1, 2, 9, 3, 6, 9] mean 5, Var = 62/6;  R − V = [0, 1, 0, −1, 1, 0] mean 1/6, Var = 17/36
    return [
        Case("four returns",
             lambda fn: _number(fn(_t(values), _t(returns))),
             45 / 56,
             (Mistake(11 / 14, "Var[R − V] is centred: you took mean((R − V)²), the squared error, which also counts "
                               "a constant offset of V (EV forgives an offset; the value loss does not)"),
              Mistake(1 - 3.5 / (11 / 16), "the ratio is upside down: EV = 1 − Var[R − V] / Var[R]"),
              Mistake(11 / 56, "that is Var[R − V] / Var[R], the part NOT explained: EV = 1 minus it"),
              # Var[R − V] ÷ n over Var[R] ÷ (n − 1) = 14/3, and ÷ (n − 1) = 11/12 over ÷ n = 3.5
              Mistake(1 - (11 / 16) / (14 / 3), MIXED_DIVISORS),
              Mistake(1 - (11 / 12) / 3.5, MIXED_DIVISORS),
              Mistake(1 - (51 / 16) / 3.5, "Var[R − V], the variance of the errors, not Var[V]: a head that "
                                           "predicts the mean of R perfectly has Var[V] = 0"))),
        Case("padding after EOS (mask)",
             lambda fn: _number(fn(_t(m_values), _t(m_returns), mask=torch.tensor([[True, True, False]] * 2))),
             45 / 56,
             (Mistake(1 - (17 / 36) / (62 / 6), MASK_IGNORED + " (the padding's R = V makes the head look better)"),)),
        # R = [2, 2, 2]: Var[R] = 0;  R − V = [1, 0, −1]: Var = 2/3 (÷ n; 1 with ÷ (n − 1))
        Case("nothing to explain: Var[R] = 0",
             lambda fn: _number(fn(_t([1.0, 2.0, 3.0]), _t([2.0, 2.0, 2.0]))),
             math.nan,
             (Mistake(0.0, "Var[R] = 0: the ratio is 0/0, undefined; return NaN (CleanRL's), not 0"),
              Mistake(1.0, "Var[R] = 0: the ratio is 0/0, undefined; return NaN (CleanRL's), not 1"),
              Mistake(-math.inf, "Var[R] = 0: the ratio is 0/0, undefined; return NaN (CleanRL's), not -inf"),
              # 1 − (2/3) / (0 + ε): −6.7e7 at ε = 1e-8; any finite EV below −1 here is a tiny denominator
              Mistake(1 - (2 / 3) / 1e-8, "an eps in the denominator: Var[R] = 0 makes 1 − Var[R − V] / (0 + eps) a "
                                          "huge negative number that reads like a terrible head; the ratio is 0/0, "
                                          "undefined: return NaN (CleanRL's), with no eps",
                      like=lambda out: out.numel() == 1 and bool(torch.isfinite(out).all()) and out.item() < -1))),
    ]


def check_explained_variance(fn: Callable) -> None:
    """Check `explained_variance(values, returns, mask=None) -> float` (a 0-d tensor passes too),
    the signature of `rlhf_scratch.core.objectives.explained_variance`.

    Recognises: the squared error for the variance of the errors, the ratio upside down, 1 − EV,
    Var[V] for Var[R − V], the mask ignored, 0, 1, -inf or an eps's huge negative number where
    Var[R] = 0 (NaN).
    """
    _run("explained_variance", fn, _explained_variance_cases())


# --- direct_logit_attribution -----------------------------------------------------------------


def _dla(components: Tensor, scale: Tensor, w: Tensor, d: Tensor, centre: bool = True, own_scale: bool = False,
         divide: bool = True) -> Tensor:
    """What a DLA (or a mistake) gives, for the cases below."""
    x = components - components.mean(-1, keepdim=True) if centre else components
    if own_scale:
        scale = components.var(-1, unbiased=False, keepdim=True).sqrt()
    return (x / scale if divide else x) @ (w * d)


def _dla_cases() -> list[Case]:
    # 2 components x 2 prompts x d_model 3, each at the prompt's last position; their sum is the final residual
    comps = torch.tensor([[[1.0, 2.0, 6.0], [3.0, 0.0, 0.0]],
                          [[0.0, -3.0, 3.0], [0.0, 0.0, 6.0]]], dtype=torch.float64)
    scale = torch.tensor([[2.0], [4.0]], dtype=torch.float64)  # ln_final's cached scale per prompt
    w, d = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64), torch.tensor([1.0, -1.0, 3.0], dtype=torch.float64)
    # w ⊙ d = [1, −2, 1.5].  (1, 2, 6) − 3 = (−2, −1, 3), / 2 = (−1, −½, 3/2): −1 + 1 + 9/4 = 2.25
    # (3, 0, 0) − 1 = (2, −1, −1), / 4: ½ + ½ − 3/8 = 0.625;  (0, −3, 3) / 2: 3 + 9/4 = 5.25;
    # (0, 0, 6) − 2 = (−2, −2, 4), / 4: −½ + 1 + 3/2 = 2
    expected = [[2.25, 0.625], [5.25, 2.0]]

    def call(fn: Callable) -> Any:
        return fn(_t(comps.tolist()), _t(scale.tolist()), _t(w.tolist()), _t(d.tolist()))

    return [
        Case("two components, two prompts",
             call,
             expected,
             (Mistake(_dla(comps, scale, w, d, centre=False), "centre each component first: LayerNorm subtracts "
                                                              "the mean over d_model, and that step is linear, so "
                                                              "it applies to each part of the residual alone"),
              Mistake(_dla(comps, scale, w, d, own_scale=True), "divide by the FROZEN scale of the whole final "
                                                                "residual (the cached ln_final scale), not each "
                                                                "component's own std: frozen, the map is linear and "
                                                                "the attributions add up to the logit difference"),
              Mistake(_dla(comps, scale, torch.ones(3, dtype=torch.float64), d), "ln_final's weight is missing: "
                                                                                 "the direction in the normalised "
                                                                                 "residual is w ⊙ (W_U[:, pos] − W_U[:, neg])"),
              Mistake(_dla(comps, scale, w, d, divide=False), "divide by ln_final's scale: the unembedding reads "
                                                              "the NORMALISED residual"),
              Mistake(_dla(comps, 1 / scale, w, d), "divide by the scale, don't multiply"),
              Mistake(_dla(comps, scale, w, d).T, "return [component, batch]: one row per component"))),
    ]


def check_direct_logit_attribution(fn: Callable) -> None:
    """Check `direct_logit_attribution(components, scale, ln_weight, direction) -> [component, batch]`:
    each residual component's direct contribution to the logit difference through a frozen final
    LayerNorm, ((x_c − mean x_c) / scale) · (ln_weight ⊙ direction) (the solution:
    `rlhf_scratch.course.solutions.direct_logit_attribution`; the package's is
    `interp.residual.component_logit_diff`, on a whole cache).

    Recognises: the components not centred, each component's own scale for the frozen one, ln_final's
    weight missing, the scale not divided or multiplied, [batch, component] for [component, batch].
    """
    _run("direct_logit_attribution", fn, _dla_cases())


CASES: dict[str, Callable[[], list[Case]]] = {
    "get_log_probs": _get_log_probs_cases,
    "compute_advantages": _compute_advantages_cases,
    "normalize_reward": _normalize_reward_cases,
    "calc_clipped_sur_obj": _clipped_sur_obj_cases,
    "calc_kl_penalty": _kl_penalty_cases,
    "calc_entropy_bonus": _entropy_bonus_cases,
    "calc_value_fn_loss": _value_fn_loss_cases,
    "compute_rloo_advantages": _rloo_advantages_cases,
    "compute_grpo_advantages": _grpo_advantages_cases,
    "calc_dpo_loss": _dpo_loss_cases,
    "calc_reward_model_loss": _reward_model_loss_cases,
    "compute_gae_advantages": _gae_cases,
    "explained_variance": _explained_variance_cases,
    "direct_logit_attribution": _dla_cases,
}
"""Each exercise's cases, by function name (the tests check that no mistake gives the answer)."""
