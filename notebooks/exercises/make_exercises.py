"""Writes the exercise notebooks of this folder: `python notebooks/exercises/make_exercises.py`.

Each exercise is three cells: the formula and what to watch for (markdown), a stub with the
solution's signature and docstring that raises NotImplementedError (tagged `exercise`), and
`check_<name>(<name>)` (tagged `check`); both code cells carry `metadata["exercise"] = <name>`.
The tags are what tests/integration/test_course_checks.py reads: it swaps each stub for the package's solution
and executes the notebook, and it checks that every shipped stub still raises.

Edit the text here, not in the notebooks, then run this file (the test compares the two).
"""

from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from rlhf_scratch.course import _CHECKS  # check name -> the module it lives in (imports no torch)
from rlhf_scratch.course.plan import plan_line  # each exercise's difficulty and minutes (imports no torch)

HERE = Path(__file__).parent

KERNEL = {"display_name": "Python 3", "language": "python", "name": "python3"}
SETUP = """\
import math

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from rlhf_scratch.course import (
{checks}
)"""

HOW = """\
**How it works.** Each exercise gives a formula and what to watch for, then a stub: replace its
`raise NotImplementedError` with your code and run the cell after it. `check_<name>` calls your
function on small cases worked out by hand (in {checks_modules}) and prints one line
when all pass. When one fails it raises an `AssertionError` that names the case and, when it
recognises the mistake by the number you produced, says which one (`hint: ...`). Keep the
signature as given: the checks call it as the trainers do.

The solutions, written to be read in plain torch, are in `solutions/`, one notebook per exercise
notebook (and in `rlhf_scratch/course/solutions_formulas.py`); each exercise also names the package's
own version. Read them once your check passes."""


@dataclass(frozen=True)
class Exercise:
    """One function to write: its name, the teacher's note (markdown) and the stub (code)."""

    name: str
    note: str
    stub: str
    after: str = ""
    """A code cell after the check that uses the function once it passes (the capstones: train it, apply it)."""


def exercise_cells(ex: Exercise) -> list:
    """Formula, stub, check (and `after`, untagged): cells with stable ids (regenerating changes no diff)."""
    meta = {"exercise": ex.name}
    heading, _, rest = ex.note.partition("\n")  # the plan's line under the heading: difficulty and time
    note = f"{heading}\n\n{plan_line(ex.name)}\n{rest}" if plan_line(ex.name) else ex.note
    cells = [
        new_markdown_cell(note, id=f"{ex.name}-note"),
        new_code_cell(ex.stub, id=f"{ex.name}-stub", metadata={**meta, "tags": ["exercise"]}),
        new_code_cell(f"check_{ex.name}({ex.name})", id=f"{ex.name}-check", metadata={**meta, "tags": ["check"]}),
    ]
    if ex.after:
        cells.append(new_code_cell(ex.after, id=f"{ex.name}-after", metadata=meta))
    return cells


def checks_modules(exercises: list[Exercise]) -> str:
    """Where these exercises' checks live, each module once, in order: "`rlhf_scratch/course/checks_sampling.py`
    and `rlhf_scratch/course/checks_reward.py`" (the package's own map, so a check that moves is named where it is)."""
    modules = [f"`rlhf_scratch/course/{module}.py`" for module in dict.fromkeys(_CHECKS[f"check_{ex.name}"] for ex in exercises)]
    return modules[0] if len(modules) == 1 else ", ".join(modules[:-1]) + " and " + modules[-1]


def notebook(intro: str, exercises: list[Exercise], outro: str, how: str = HOW, imports: str = "") -> nbformat.NotebookNode:
    """`imports`: lines added to the setup cell after the torch imports (what the stubs' signatures name)."""
    checks = "\n".join(f"    check_{ex.name}," for ex in exercises)
    setup = SETUP.format(checks=checks)
    how = how.replace("{checks_modules}", checks_modules(exercises))
    if imports:
        setup = setup.replace("from torch import Tensor\n", "from torch import Tensor\n" + imports + "\n")
    cells = [new_markdown_cell(intro + "\n\n" + how, id="intro"), new_code_cell(setup, id="setup")]
    for ex in exercises:
        cells += exercise_cells(ex)
    cells.append(new_markdown_cell(outro, id="outro"))
    return new_notebook(cells=cells, metadata={"kernelspec": KERNEL, "language_info": {"name": "python"}})


# --- 01: PPO's objective ----------------------------------------------------------------------

GET_LOG_PROBS = Exercise("get_log_probs", r"""## 1 · `get_log_probs`: the log-probability of each sampled token

$$\log \pi_T(x_{t+1} \mid x_{\le t}) = \mathrm{log\_softmax}(z_t / T)\,[x_{t+1}]$$

The logits at position $t$ predict token $t+1$. So the generated tokens `tokens[:, prefix_len:]` are
scored by `logits[:, prefix_len-1 : -1]`, and the last position predicts nothing. Without
`prefix_len`, score every next token (`seq_len - 1` of them).

Watch for:
- the **off-by-one** between logits and tokens: line them up before gathering;
- `torch.log(torch.softmax(z))` underflows to $\log 0 = -\infty$ for an unlikely token once the logits
  are large (the check multiplies them by 100): use `log_softmax`, which subtracts the max first;
- the tokens were sampled from $\mathrm{softmax}(z / T)$: **divide** by the temperature;
- `x.gather(-1, idx[..., None]).squeeze(-1)` picks one entry per position.

Solution: `rlhf_scratch.core.objectives.get_log_probs`.""", '''\
def get_log_probs(
    logits: Float[Tensor, "batch seq_len d_vocab"],
    tokens: Int[Tensor, "batch seq_len"],
    prefix_len: int | None = None,
    temperature: float = 1.0,
) -> Float[Tensor, "batch gen_len"]:
    """log softmax(logits[b, t] / temperature)[tokens[b, t+1]]: the log-prob of each token that came next.

    With prefix_len, only the generated tokens tokens[:, prefix_len:] (gen_len = seq_len - prefix_len);
    without it, every next token (gen_len = seq_len - 1).
    """
    raise NotImplementedError''')

COMPUTE_ADVANTAGES = Exercise("compute_advantages", r"""## 2 · `compute_advantages`: the blog's one-step advantage

$$A_t = Q_t - V(s_t), \qquad Q_t = V(s_{t+1}) \text{ for } t < \text{last}, \qquad Q_\text{last} = r$$

State $s_t$ is the context up to and including token $t$, and `values[:, t]` $= V(s_t)$. The first
generated token is chosen in $s_{\text{prefix\_len}-1}$, so the states of the generated steps are
`values[:, prefix_len-1 : -1]`; the value after the last token is never used, because the reward
takes its place. This is GAE with $\gamma = 1, \lambda = 0$: low variance, biased by the value head.

With a `mask` (True up to and including the first EOS), the episode ends at each row's **last kept**
token: the reward arrives there, and the padding after it gets advantage 0.

Watch for: $Q - V$, not $V - Q$; $Q_\text{last}$ is the reward alone; this is not the Monte-Carlo
$r - V(s_t)$. Advantages are targets, not something to differentiate (`@torch.no_grad()`).

Solution: `rlhf_scratch.core.advantages.compute_advantages`.""", '''\
@torch.no_grad()
def compute_advantages(
    values: Float[Tensor, "batch seq_len"],
    rewards: Float[Tensor, " batch"],
    prefix_len: int,
    mask: Bool[Tensor, "batch gen_len"] | None = None,
) -> Float[Tensor, "batch gen_len"]:
    """A_t = V(s_{t+1}) - V(s_t) for each generated step, the reward in place of V after the last one.

    With mask, the last step is each row's last kept token and masked positions get 0.
    """
    raise NotImplementedError''')

NORMALIZE_REWARD = Exercise("normalize_reward", r"""## 3 · `normalize_reward`: whiten the batch's rewards

$$\hat r_i = \frac{r_i - \bar r}{\sigma_r + \epsilon}$$

with $\sigma_r$ the **unbiased** standard deviation ($\div (n-1)$, Bessel's correction), torch's
default `r.std()` and the blog's: the deviations are measured from the batch's own mean, which sits
closer to the data than the true mean, so $\div n$ would underestimate the spread.

Watch for: $\epsilon$ goes on the std, outside the square root; a constant batch must give zeros
(not NaN), and so must a batch of one (its unbiased std is $0/0$).

Solution: `rlhf_scratch.reward.functions.normalize_reward`.""", '''\
def normalize_reward(reward: Float[Tensor, " batch"], eps: float = 1e-5) -> Float[Tensor, " batch"]:
    """(r - mean(r)) / (std(r) + eps), std unbiased; zeros for fewer than two rewards."""
    raise NotImplementedError''')

CLIPPED_SUR_OBJ = Exercise("calc_clipped_sur_obj", r"""## 4 · `calc_clipped_sur_obj`: PPO's clipped surrogate (maximised)

$$r_t = \exp(\log\pi_\theta(a_t|s_t) - \log\pi_\text{old}(a_t|s_t)), \qquad
\hat A_t = \frac{A_t - \mathrm{mean}(A)}{\mathrm{std}(A) + \epsilon}$$
$$L^\text{clip} = \mathbb{E}_t\big[\min\big(r_t \hat A_t,\ \mathrm{clip}(r_t, 1-c, 1+c)\,\hat A_t\big)\big]$$

with $c$ = `clip_coef` and $\epsilon$ = `eps`. The advantages are whitened per minibatch, std unbiased. The min makes the objective pessimistic:
once the ratio has moved past the clip in the direction the advantage pushes, the term is flat
(no gradient), while moving back is never clipped.

Watch for: `min`, not `max`; the ratio is $\pi / \pi_\text{old}$; this is an objective the trainer
**ascends**: return it, not its negative. With a `mask`: the mean **and** the whitening run over the
kept tokens only (`x[mask]`), so padding neither counts in the mean nor shifts $\hat A$; set the
ratio to 1 and $\hat A$ to 0 at masked positions (`torch.where`) so nothing there reaches a gradient.

Why the clip makes a trust region: `docs/derivations.md` §3. Solution:
`rlhf_scratch.core.objectives.calc_clipped_sur_obj`.""", '''\
def calc_clipped_sur_obj(
    logprobs: Float[Tensor, "minibatch gen_len"],
    mb_logprobs: Float[Tensor, "minibatch gen_len"],
    mb_advantages: Float[Tensor, "minibatch gen_len"],
    clip_coef: float,
    eps: float = 1e-8,
    mask: Bool[Tensor, "minibatch gen_len"] | None = None,
) -> Float[Tensor, ""]:
    """mean over kept tokens of min(r A_hat, clip(r, 1 - clip_coef, 1 + clip_coef) A_hat), to maximise.

    r = exp(logprobs - mb_logprobs); A_hat = advantages whitened over the kept tokens (std n - 1).
    """
    raise NotImplementedError''')

KL_PENALTY = Exercise("calc_kl_penalty", r"""## 5 · `calc_kl_penalty`: stay near the reference

$$\text{penalty} = \beta\ \mathbb{E}_t \sum_v \pi(v \mid s_t)\,\big(\log\pi(v \mid s_t) - \log\pi_\text{ref}(v \mid s_t)\big)$$

the full-vocabulary $\mathrm{KL}(\pi \,\|\, \pi_\text{ref})$ at each generated position, averaged over
the kept positions, times $\beta$. It is a positive number the trainer subtracts.

Watch for: the **direction**: weight by the policy's $\pi(v)$, so the penalty punishes text the
reference finds unlikely ($\mathrm{KL}(\pi_\text{ref} \,\|\, \pi)$ is another number); don't forget
$\beta$; compute $\log\pi$ with `log_softmax` and $\pi$ as its `exp()` (the check multiplies the
logits by 100: `softmax(...).log()` gives $0 \cdot (-\infty) = $ NaN). `from_logprobs=True` means the
inputs are already `log_softmax` outputs; since `log_softmax` of a log-softmax changes nothing,
you may apply it regardless.

Solution: `rlhf_scratch.core.objectives.calc_kl_penalty`.""", '''\
def calc_kl_penalty(
    logits: Float[Tensor, "batch gen_len d_vocab"],
    ref_logits: Float[Tensor, "batch gen_len d_vocab"],
    beta: float,
    mask: Bool[Tensor, "batch gen_len"] | None = None,
    from_logprobs: bool = False,
) -> Float[Tensor, ""]:
    """beta * mean over kept positions of KL(pi || pi_ref) = sum_v pi(v) (log pi(v) - log pi_ref(v))."""
    raise NotImplementedError''')

ENTROPY_BONUS = Exercise("calc_entropy_bonus", r"""## 6 · `calc_entropy_bonus`: reward exploring

$$\text{bonus} = c_\text{ent}\ \mathbb{E}_t\Big[-\sum_v \pi(v \mid s_t) \log \pi(v \mid s_t)\Big]$$

over the kept positions; uniform logits over $V$ tokens give the maximum, $c_\text{ent} \ln V$.

Watch for: the minus sign (entropy is positive); $c_\text{ent}$; a confident distribution has
$\pi(v) = 0$ in float32 for some $v$, and $0 \cdot \log 0$ is NaN: take `log_softmax`, then
$\pi = $ `exp()` of it.

Solution: `rlhf_scratch.core.objectives.calc_entropy_bonus`.""", '''\
def calc_entropy_bonus(
    logits: Float[Tensor, "batch gen_len d_vocab"],
    ent_coef: float,
    mask: Bool[Tensor, "batch gen_len"] | None = None,
    from_logprobs: bool = False,
) -> Float[Tensor, ""]:
    """ent_coef * mean over kept positions of the entropy -sum_v pi(v) log pi(v)."""
    raise NotImplementedError''')

VALUE_FN_LOSS = Exercise("calc_value_fn_loss", r"""## 7 · `calc_value_fn_loss`: regress the value head onto the returns

$$\text{loss} = \tfrac12\, c_\text{vf}\ \mathbb{E}_t\big[(V(s_t) - R_t)^2\big]$$

over the kept positions (a state after EOS is past the end of the episode and has no return).
The $\tfrac12$ is CleanRL's and ARENA's convention: the gradient is then $c_\text{vf}(V - R)/N$.

Watch for: both coefficients, the $\tfrac12$ and $c_\text{vf}$; a mean, not a sum; the mean over
the kept tokens only.

Solution: `rlhf_scratch.core.objectives.calc_value_fn_loss`.""", '''\
def calc_value_fn_loss(
    values: Float[Tensor, "minibatch gen_len"],
    mb_returns: Float[Tensor, "minibatch gen_len"],
    vf_coef: float,
    mask: Bool[Tensor, "minibatch gen_len"] | None = None,
) -> Float[Tensor, ""]:
    """1/2 * vf_coef * mean over kept positions of (values - mb_returns)^2."""
    raise NotImplementedError''')

PPO = notebook(
    """# Exercises 1 · PPO's objective, term by term

Write the seven functions PPO's learning phase is made of, as the blog post *Whirlwind of PPO, RLHF
and Interp from scratch* names them. The trainer ascends

$$J(\\theta) = L^\\text{clip} - \\tfrac12 c_\\text{vf}\\,\\mathbb{E}[(V - R)^2] + c_\\text{ent}\\,\\mathbb{E}[H(\\pi)] - \\beta\\,\\mathbb{E}[\\mathrm{KL}(\\pi \\,\\|\\, \\pi_\\text{ref})]$$

Sequence layout everywhere: `[prefix (prefix_len tokens) | generated (gen_len tokens)]`. A mask
`Bool[batch, gen_len]` is True up to and including each completion's first EOS; what follows is
padding, not an action, and every mean below runs over the kept positions only. Notebook
`../01_ppo_objective_math.ipynb` shows each of these functions at work.""",
    [GET_LOG_PROBS, COMPUTE_ADVANTAGES, NORMALIZE_REWARD, CLIPPED_SUR_OBJ, KL_PENALTY, ENTROPY_BONUS, VALUE_FN_LOSS],
    """## All seven pass?

Compare your code with `rlhf_scratch/core/objectives.py`, `advantages.py` and `reward/functions.py`, then
go on to `02_beyond_ppo_exercises.ipynb`: RLOO's and GRPO's advantages, the DPO loss and the
Bradley–Terry reward model's loss.""",
)


# --- 02: beyond PPO ---------------------------------------------------------------------------

RLOO = Exercise("compute_rloo_advantages", r"""## 1 · `compute_rloo_advantages`: the leave-one-out baseline

$$A_i = r_i - \frac{1}{G-1}\sum_{j \ne i} r_j = \frac{G}{G-1}\big(r_i - \bar r\big)$$

over the $G$ completions of the same prompt, which are **consecutive** rows of the batch
(`rewards.view(-1, G)` is `[prompts, G]`). The baseline does not depend on $r_i$, so the gradient
estimate stays unbiased, and each group's advantages sum to zero.

Watch for: the mean of the **others** ($\div (G-1)$), not the group mean (that is GRPO's, and
shrinks $A$ by $(G-1)/G$); groups within a prompt, not across the batch.

Solution: `rlhf_scratch.algorithms.rloo.compute_rloo_advantages`.""", '''\
def compute_rloo_advantages(rewards: Float[Tensor, " batch"], num_generations: int) -> Float[Tensor, " batch"]:
    """r_i minus the mean reward of the other G - 1 completions of its prompt (the G are consecutive)."""
    raise NotImplementedError''')

GRPO = Exercise("compute_grpo_advantages", r"""## 2 · `compute_grpo_advantages`: the group-relative advantage

$$A_i = \frac{r_i - \mathrm{mean}_{j \in g}\, r_j}{\sigma + 10^{-4}}$$

with $\sigma$ the **unbiased** std ($\div (n-1)$, as TRL's `nanstd`) of the group
(`scale_rewards="group"`, the default) or of the whole batch (`"batch"`), and no division at all for
`"none"` (Dr. GRPO, which argues the division weights prompts by how easy they are).

Watch for: always centre by the **group's** mean, whatever the scaling; a group of equal rewards
has $\sigma = 0$ and must give $A = 0$, not NaN (that is what the $10^{-4}$ is for).

Solution: `rlhf_scratch.algorithms.grpo.compute_grpo_advantages`.""", '''\
def compute_grpo_advantages(
    rewards: Float[Tensor, " batch"], num_generations: int, scale_rewards: str = "group"
) -> Float[Tensor, " batch"]:
    """(r_i - group mean) / (std + 1e-4), std of the group ("group") or the batch ("batch"); "none": no division."""
    raise NotImplementedError''')

DPO = Exercise("calc_dpo_loss", r"""## 3 · `calc_dpo_loss`: the preference is all the loss sees

On summed, masked completion log-probs,

$$h = \big(\log\pi(y_c) - \log\pi(y_r)\big) - \big(\log\pi_\text{ref}(y_c) - \log\pi_\text{ref}(y_r)\big)$$
$$\text{sigmoid (DPO):}\ \ell = -\log\sigma(\beta h) \qquad \text{ipo:}\ \ell = \Big(h - \frac{1}{2\beta}\Big)^2$$

The loss is the mean of $\ell$, or with 0/1 `weights` (a judge that could not decide gives 0)
$\sum w \ell / \max(\sum w, 1)$. Return it with the implicit rewards $\beta(\log\pi - \log\pi_\text{ref})$
of the chosen and the rejected completions (detached: they are diagnostics).

Watch for: $\beta$ inside the sigmoid; the sign of each difference; this loss is **minimised**;
`torch.log(torch.sigmoid(x))` is $-\infty$ once $\sigma(x)$ underflows (the check uses a margin of
$-10^4$): use `F.logsigmoid`.

Where this loss comes from (the KL-regularised objective, its optimum $\pi^* \propto \pi_\text{ref}
e^{r/\beta}$, the implicit reward, Bradley–Terry): `docs/derivations.md` §1. Solution:
`rlhf_scratch.algorithms.online_dpo.calc_dpo_loss` (it returns a NamedTuple, `DPOLoss`; a plain tuple
does here).""", '''\
def calc_dpo_loss(
    policy_chosen_logps: Float[Tensor, " pairs"],
    policy_rejected_logps: Float[Tensor, " pairs"],
    ref_chosen_logps: Float[Tensor, " pairs"],
    ref_rejected_logps: Float[Tensor, " pairs"],
    beta: float,
    loss_type: str = "sigmoid",
    weights: Float[Tensor, " pairs"] | None = None,
) -> tuple[Float[Tensor, ""], Float[Tensor, " pairs"], Float[Tensor, " pairs"]]:
    """(loss, chosen_rewards, rejected_rewards): the mean DPO (or IPO) loss and the implicit rewards."""
    raise NotImplementedError''')

REWARD_MODEL = Exercise("calc_reward_model_loss", r"""## 4 · `calc_reward_model_loss`: Bradley–Terry

The reward model says the chosen completion wins with probability $\sigma(r_c - r_r)$; train it on
the negative log-likelihood of the labels (TRL's `RewardTrainer`):

$$\text{loss} = \mathrm{mean}_i\big[-\log\sigma(r_{c,i} - r_{r,i} - m_i)\big] + c\ \mathrm{mean}_i\big[(r_{c,i} + r_{r,i})^2\big]$$

An optional `margin` $m$ asks the chosen side to win by at least $m$; an optional
`center_rewards_coefficient` $c$ pulls the rewards toward 0, since the likelihood only sees their
differences. `None` means no such term.

Watch for: chosen minus rejected; the minus sign (minimised); the mean of the squares, not the
square of the mean; `F.logsigmoid` rather than `log(sigmoid)` (the check uses differences of ±2000).

The model and its likelihood, derived: `docs/derivations.md` §2. Solution:
`rlhf_scratch.reward.model.calc_reward_model_loss`.""", '''\
def calc_reward_model_loss(
    chosen_rewards: Float[Tensor, " batch"],
    rejected_rewards: Float[Tensor, " batch"],
    margin: Float[Tensor, " batch"] | float | None = None,
    center_rewards_coefficient: float | None = None,
) -> Float[Tensor, ""]:
    """mean -log sigmoid(r_c - r_r - margin) + c * mean((r_c + r_r)^2)."""
    raise NotImplementedError''')

BEYOND = notebook(
    """# Exercises 2 · Beyond PPO: RLOO, GRPO, DPO and the reward model

PPO needs a value head for its baseline. RLOO and GRPO sample $G$ completions of each prompt and
use the others as the baseline; Online DPO compares two completions and needs no reward inside the
loss at all; and a reward model learns a reward from such comparisons. Each is one function here.
Notebook `../03_ppo_rloo_dpo.ipynb` shows them side by side; `docs/algorithms.md` has every formula.""",
    [RLOO, GRPO, DPO, REWARD_MODEL],
    """## All four pass?

Compare with `rlhf_scratch/algorithms/rloo.py`, `grpo.py`, `online_dpo.py` and
`rlhf_scratch/reward/model.py`. `docs/grpo.md` goes on to GRPO's length-bias fixes, and
`docs/human-feedback.md` from preference pairs through a reward model to over-optimisation.""",
)

# --- 03: from formulas to components ----------------------------------------------------------

GAE = Exercise("compute_gae_advantages", r"""## 1 · `compute_gae_advantages`: Generalised Advantage Estimation

Exercises 1 wrote the blog's one-step advantage, $A_t = V(s_{t+1}) - V(s_t)$ with the reward in place
of the last value. GAE (Schulman et al. 2016) blends every $n$-step estimate with weights $\lambda^{n-1}$:

$$\delta_t = r_t + \gamma V(s_{t+1}) - V(s_t), \qquad A_t = \sum_{k \ge 0} (\gamma\lambda)^k\, \delta_{t+k}
= \delta_t + \gamma\lambda\, A_{t+1}$$

In RLHF the reward is **sparse**: $r_t = 0$ for every generated token but the last, where the whole
reward arrives. After the last token there is no state: $V(s_\text{last+1}) = 0$, so
$\delta_\text{last} = r - V(s_\text{last})$ and `values[:, -1]` is never read. $\lambda = 0$ gives the
one-step estimate; $\gamma = \lambda = 1$ makes the deltas telescope to the Monte-Carlo
$A_t = r - V(s_t)$. Compute it as the second form says: a loop from the last step **down** to 0.

With a `mask` (True up to and including each row's first EOS) the episode ends at the row's **last
kept** token: the reward arrives there, nothing after it is bootstrapped, padding gets 0.

**Predict before you write:** on the first case ($\gamma = \lambda = \tfrac12$, $\delta = [-1.5, 1, -1]$),
what is $A_0$? And if you forgot $\lambda$ in the recursion?

<details><summary>Answers</summary>

$A_2 = -1$, $A_1 = 1 + \tfrac14(-1) = 0.75$, $A_0 = -1.5 + \tfrac14(0.75) = -1.3125$. Without $\lambda$
each later advantage is discounted by $\gamma = \tfrac12$ only: $A_1 = 0.5$, $A_0 = -1.25$ — and the
check names that number.
</details>

Solution, written to be read: `rlhf_scratch.course.solutions.compute_gae_advantages`; the package's
vectorised one: `rlhf_scratch.core.advantages.compute_gae_advantages` (its docstring says why GAE "blows
up" with one terminal reward).""", '''\
@torch.no_grad()
def compute_gae_advantages(
    values: Float[Tensor, "batch seq_len"],
    rewards: Float[Tensor, " batch"],
    prefix_len: int,
    gamma: float,
    gae_lambda: float,
    mask: Bool[Tensor, "batch gen_len"] | None = None,
) -> Float[Tensor, "batch gen_len"]:
    """A_t = delta_t + gamma * lambda * A_{t+1}, delta_t = r_t + gamma V(s_{t+1}) - V(s_t); r = reward at
    each row's last kept token (0 before it), V after it 0; masked positions 0."""
    raise NotImplementedError''')

EXPLAINED_VARIANCE = Exercise("explained_variance", r"""## 2 · `explained_variance`: is the value head any good?

The value head (notebook 06: an MLP on `ln_final.hook_normalized`, trained by the value loss you
wrote in exercises 1) is PPO's baseline. Its loss goes down whatever the scale of the returns, so
CleanRL logs a number you can read on its own:

$$\mathrm{EV} = 1 - \frac{\mathrm{Var}[R - V]}{\mathrm{Var}[R]}$$

over the kept positions: 1 = the head predicts every return, 0 = no better than predicting their
mean, below 0 = worse than that. Population variances ($\div n$; the $\div (n-1)$ cancels in the
ratio anyway). When $\mathrm{Var}[R] = 0$ there is nothing to explain and the ratio is $0/0$: return NaN,
as CleanRL does. Return a Python float (a 0-d tensor passes the check too).

Watch for: the variance of the **errors** $R - V$ (centred), not their mean square (that also counts a
constant offset of $V$); positions after EOS hold $R = V$ (advantage 0), and counting them makes the
head look better than it is.

Solution: `rlhf_scratch.course.solutions.explained_variance`; the package's:
`rlhf_scratch.core.objectives.explained_variance` (PPO logs it as `losses/explained_variance`).""", '''\
def explained_variance(
    values: Float[Tensor, "*shape"],
    returns: Float[Tensor, "*shape"],
    mask: Bool[Tensor, "*shape"] | None = None,
) -> float:
    """1 - Var[returns - values] / Var[returns] over the kept positions (population variances); NaN if Var[R] = 0."""
    raise NotImplementedError''')

DLA = Exercise("direct_logit_attribution", r"""## 3 · `direct_logit_attribution`: which component wrote the sentiment?

The final residual at the last position is a sum of parts, $x = \sum_c x_c$ (the embeddings, then each
layer's attention and MLP output: TransformerLens' `cache.decompose_resid`). The model reads it through
`ln_final` and the unembedding; the logit difference between a positive and a negative token is

$$\text{logit diff} = \frac{x - \bar x}{s} \cdot (w \odot d) + \text{bias}, \qquad d = W_U[:, \text{pos}] - W_U[:, \text{neg}]$$

with $w$ the LayerNorm's weight and $s$ its scale $\sqrt{\mathrm{Var}[x] + \epsilon}$ (the cache keeps it:
`ln_final.hook_scale`). Only $s$ makes this non-linear in $x$. **Freeze it** at the value the forward
computed and the map is linear, so each component gets its own share and the shares add up:

$$\mathrm{DLA}_c = \frac{x_c - \bar x_c}{s} \cdot (w \odot d)$$

(centring is linear too, so each part is centred by its own mean). Return `[component, batch]`.

Watch for: divide by the **whole** residual's frozen scale, not each component's own std (that is
the logit lens's question, "what if the residual stopped here?", not DLA's); centre each part;
$w \odot d$, not $d$.

**Predict:** in the check's first prompt the two components' shares are 2.25 and 5.25 — what is the
model's logit difference, given the bias term $b$?

<details><summary>Answer</summary>

$2.25 + 5.25 + b = 7.5 + b$: with the scale frozen, the attributions of all the parts plus the bias
add up to the logit difference exactly (the package's test checks it on a model's own cache).
</details>

Solution: `rlhf_scratch.course.solutions.direct_logit_attribution`; the package's, on a whole cache
with the bias as a last row: `interp.residual.component_logit_diff` (notebook 04 plots it).""", '''\
def direct_logit_attribution(
    components: Float[Tensor, "component batch d_model"],
    scale: Float[Tensor, "batch 1"],
    ln_weight: Float[Tensor, " d_model"],
    direction: Float[Tensor, " d_model"],
) -> Float[Tensor, "component batch"]:
    """((x_c - mean_d x_c) / scale) . (ln_weight * direction) for each component c and prompt."""
    raise NotImplementedError''')

HOW_03 = HOW.replace("`rlhf_scratch/course/solutions_formulas.py`", "`rlhf_scratch/course/solutions.py`")

COMPONENTS = notebook(
    """# Exercises 3 · From formulas to components: GAE, the value head's read-out, DLA

Exercises 1 and 2 wrote one formula each. These are the pieces one step up: the advantage estimator
PPO can use instead of the blog's one-step one (`--advantage gae`), the number that says whether the
value head has learned anything, and the first tool of interpretability that attributes the model's
output to its parts. Notebook `../06_build_the_ppo_loop.ipynb` puts the first two into the loop;
`../04_interp_walkthrough.ipynb` applies the third to a tuned model.""",
    [GAE, EXPLAINED_VARIANCE, DLA],
    """## All three pass?

Read `rlhf_scratch/course/solutions.py`, then the package's versions it names. Try PPO with GAE:
`python -m rlhf_scratch.train sentiment --advantage gae --gae-lambda 0.95` and watch
`losses/explained_variance` in its `metrics.jsonl`. Where the losses of exercises 1 and 2 come from
(DPO from the KL-regularised objective, Bradley–Terry as maximum likelihood, the clip as a trust
region), each ending in a check you run: `docs/derivations.md`.""",
    how=HOW_03,
)

# --- 04: sampling, the replay memory, the reward model ----------------------------------------

NEXT_TOKEN_PROBS = Exercise("next_token_probs", r"""## 1 · `next_token_probs`: what the next token is drawn from

The rollout draws each token from the logits after three filters, in `transformers`' order:

$$z \leftarrow z / T \qquad\text{then top-}k\text{: } z_v \leftarrow -\infty \text{ unless } z_v \text{ is among the } k \text{ largest} \qquad p = \mathrm{softmax}(z)$$

then top-$p$ (the nucleus): keep a token while the tokens **more** likely than it hold less than
`top_p` of the mass (so the token that crosses `top_p` is in), zero the rest, renormalise.
`top_k = 0` and `top_p = 1` switch a filter off. Return the probabilities over the whole vocabulary,
in its order, 0 for a token left out.

Watch for: divide by $T$; a left-out logit is $-\infty$ (exp gives 0), not 0 (exp gives 1);
renormalise after zeroing; the nucleus is measured on the **tempered** distribution.

**Predict:** logits $\ln[1, 2, 3, 4]$, `top_p = 0.6`. Which tokens survive?

<details><summary>Answer</summary>

$p = [.1, .2, .3, .4]$. From the top: $.4$ (mass above it 0), $.3$ (mass above it $.4 < .6$): both in;
$.2$ has $.7 \ge .6$ above it: out. So $[0, 0, 3/7, 4/7]$ — the check's third case. Cutting at
"cumulative $\le$ top_p" instead would keep $.4$ alone.
</details>

Solution: `rlhf_scratch.course.solutions.next_token_probs`; the package draws with
`rlhf_scratch.rollout.generation.sample_next_token` (its top-k draws among the k alone, the same
distribution), and a test checks the two agree on 20,000 draws.""", '''\
def next_token_probs(
    logits: Float[Tensor, "batch d_vocab"], temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> Float[Tensor, "batch d_vocab"]:
    """softmax of logits / temperature, restricted to the top_k logits (0: all), then to the top_p nucleus, renormalised."""
    raise NotImplementedError''')

COMPLETION_MASK = Exercise("completion_mask", r"""## 2 · `completion_mask`: which generated tokens are actions

A completion ends at its **first** EOS. The EOS itself is the policy's last action (the reward
arrives there, its log-prob is trained); every token after it is padding. Rows that never say EOS
keep all their tokens. Every mean in the objectives of exercises 1 runs over this mask.

Watch for: `ids != eos` (GPT-2's pad **is** its EOS, and a row may say EOS twice); the EOS must be
kept; `argmax` of an all-False row is 0. A running count of the EOS tokens *before* each position
(`cumsum` minus the token itself) does it without a loop.

Solution: `rlhf_scratch.course.solutions.completion_mask`; the package builds the mask inside its
sampling loop, `rlhf_scratch.rollout.generation.generate` (a test checks the two agree).""", '''\
def completion_mask(completion_ids: Int[Tensor, "batch gen_len"], eos_id: int) -> Bool[Tensor, "batch gen_len"]:
    """True up to and including each row's first eos_id; all True for a row without one."""
    raise NotImplementedError''')

LEFT_PAD = Exercise("left_pad", r"""## 3 · `left_pad`: a batch of prompts of different lengths

The next token is drawn after each prompt's last token, for the whole batch at once: so every prompt
must **end** at the same column. Pad on the left with `pad_id`, and return the attention mask (True on
the real tokens), which hides the padding from every query.

Watch for: right padding (a short prompt's next token would follow a pad); building the mask as
`ids != pad_id` — GPT-2's BOS, EOS and pad are one id (50256), so that drops the BOS of every prompt.
Build the mask from the lengths.

Solution: `rlhf_scratch.course.solutions.left_pad`; the package's: `interp.sampling.left_padded` and
`rlhf_scratch.rollout.generation.tokenize_prompts`.""", '''\
def left_pad(prompts: list[Int[Tensor, " _"]], pad_id: int) -> tuple[Int[Tensor, "batch width"], Bool[Tensor, "batch width"]]:
    """(ids, mask): the prompts right-aligned to the longest, pad_id before them; mask True on the real tokens."""
    raise NotImplementedError''')

POSITION_IDS = Exercise("position_ids", r"""## 4 · `position_ids`: where a padded prompt's tokens are

A left-padded prompt must get the positions it would get alone: its first **real** token is position
0. TransformerLens numbers them as $\mathrm{cumsum}(\text{mask}) - 1$ and puts 0 on the padding
(any valid index: the padding is never attended to).

**Predict:** without this (positions `0 .. seq-1` for every row), would a padded prompt's
completion change? Would the attention mask alone save it?

<details><summary>Answer</summary>

It would change: the positional embedding of every real token is shifted by the pad count, so the
model reads a different input; the mask only hides the pad columns, it does not renumber the rest.
The package tests that a padded prompt's logits equal the unpadded prompt's to 1e-4.
</details>

Solution: `rlhf_scratch.course.solutions.position_ids`; TransformerLens':
`transformer_lens.utilities.get_offset_position_ids`.""", '''\
def position_ids(attention_mask: Bool[Tensor, "batch seq"]) -> Int[Tensor, "batch seq"]:
    """cumsum(mask) - 1 per row (the first real token is position 0); 0 on the padding."""
    raise NotImplementedError''')

MINIBATCH_ROWS = Exercise("minibatch_rows", r"""## 5 · `minibatch_rows`: how the replay memory cuts a rollout

PPO's learning phase runs `passes` (= `batches_per_learning_phase`) passes over one rollout. Each
pass is a **new** random permutation of the rows, cut into `num_minibatches` equal minibatches, so
each row is used exactly once per pass. Yield each minibatch's row indices. Draw the permutation with
`torch.randperm(batch, generator=generator)` when the pass begins: the check compares your rows with
the package's under the same seeded generator (as `check_learning_phase` compares whole phases).

Watch for: one permutation reused for every pass; a permutation per minibatch (rows repeat within a
pass); `num_minibatches` is how many minibatches, not their size.

Solution: `rlhf_scratch.course.solutions.minibatch_rows`; the package's:
`rlhf_scratch.core.memory.minibatch_rows`, which `ReplayMemory.get_minibatches` gathers the rollout
with (read `core/memory.py`: the returns it stores are `advantages + values[:, -gen_len-1:-1]`).""", '''\
def minibatch_rows(
    batch: int, num_minibatches: int, passes: int = 1, generator: torch.Generator | None = None
) -> Iterator[Int[Tensor, " minibatch"]]:
    """`passes` permutations of range(batch), each cut into num_minibatches equal minibatches; yield each one's rows."""
    raise NotImplementedError''')

REWARD_HEAD = Exercise("reward_at_last_token", r"""## 6 · `reward_at_last_token`: the reward model's head

A reward model is the language model with a scalar head: $r(x) = w \cdot \hat h_\text{last}(x) + b$,
with $\hat h$ = `ln_final.hook_normalized` (the vector the unembedding reads) at the **last kept token**
of each right-padded text. In a causal model only the last token has seen the whole text.

Watch for: position $-1$ is padding in a right-padded row (`attention_mask.sum() - 1` is the last
kept one); not the first token, not a mean over tokens; the bias.

Solution: `rlhf_scratch.course.solutions.reward_at_last_token`; the package's:
`rlhf_scratch.reward.model.RewardModel.forward` (a test checks the two agree on a toy LM).""", '''\
def reward_at_last_token(
    hidden: Float[Tensor, "batch seq d_model"],
    attention_mask: Bool[Tensor, "batch seq"],
    weight: Float[Tensor, " d_model"],
    bias: Float[Tensor, ""],
) -> Float[Tensor, " batch"]:
    """weight . hidden[b, last kept token of row b] + bias for each row (right padding)."""
    raise NotImplementedError''')

REWARD_STEP = Exercise("reward_model_step", r"""## 7 · `reward_model_step`: one Bradley–Terry step

Exercises 2 wrote the loss, $\mathrm{mean}\,{-\log\sigma(r_c - r_r)}$. Now the step that trains with it:
score both sides with `model(chosen)` and `model(rejected)`, compute the loss, then
`optimizer.zero_grad()`, `loss.backward()`, `optimizer.step()`; return `loss.item()`. The check runs
two steps of SGD on a linear scorer and compares its parameters afterwards.

Watch for: zero the gradients (`.grad` accumulates across steps); the optimizer **descends** the loss;
chosen minus rejected; the mean over pairs.

Why this likelihood: `docs/derivations.md` §2. Solution: `rlhf_scratch.course.solutions.reward_model_step`;
the package's loop: `rlhf_scratch.engine.reward_model.train_reward_model` (it also clips the
gradient norm).""", '''\
def reward_model_step(model: nn.Module, chosen: Tensor, rejected: Tensor, optimizer: torch.optim.Optimizer) -> float:
    """loss = mean -log sigmoid(model(chosen) - model(rejected)); zero_grad, backward, step; return loss.item()."""
    raise NotImplementedError''')

HOW_SOLUTIONS = (HOW_03.replace("{checks_modules}", "{{checks_modules}}")  # left for `notebook` to fill in
                 .replace("`rlhf_scratch/course/solutions.py`", "`rlhf_scratch/course/solutions.py`{extra}"))

ROLLOUT = notebook(
    """# Exercises 4 · The rollout's parts: sampling, the replay memory, the reward model

Exercises 1–3 wrote what the learning phase computes. These are the parts around it: how a token is
drawn (temperature, top-k, top-p), which generated tokens count, how prompts of different lengths
share a batch, how the replay memory cuts the rollout into minibatches, and the reward model's head
and training step. Notebook `../06_build_the_ppo_loop.ipynb` puts them together.""",
    [NEXT_TOKEN_PROBS, COMPLETION_MASK, LEFT_PAD, POSITION_IDS, MINIBATCH_ROWS, REWARD_HEAD, REWARD_STEP],
    """## All seven pass?

Read `rlhf_scratch/course/solutions.py`, then `rlhf_scratch/rollout/generation.py` (the sampling loop
with its KV cache), `rlhf_scratch/core/memory.py` and `rlhf_scratch/reward/model.py`. Train a reward
model: `python -m rlhf_scratch.preferences` then `python -m rlhf_scratch.reward_model`
(`docs/human-feedback.md`).""",
    how=HOW_SOLUTIONS.format(extra=""),
    imports="from collections.abc import Iterator\n\nfrom torch import nn",
)

# --- 05: interpretability ---------------------------------------------------------------------

LOGIT_DIFF = Exercise("logit_diff", r"""## 1 · `logit_diff`: the one number the interp notebooks read

$$\text{logit diff} = \mathrm{mean}_{t \in \text{pos}}\, z_t - \mathrm{mean}_{t \in \text{neg}}\, z_t$$

at each prompt's last real token (`last_pos[b]`; the last position when `None`): how much more the
model says the positive words than the negative ones, in nats of log-odds.

Watch for: right-padded rows end before the last position; the mean over each word set (sets differ
in size); logits, not probabilities (the difference is the same under `log_softmax`, not under `softmax`).

Solution: `rlhf_scratch.course.solutions_interp.logit_diff`; the package's: `interp.logits.logit_diff`.""", '''\
def logit_diff(
    logits: Float[Tensor, "batch pos d_vocab"],
    pos_ids: list[int],
    neg_ids: list[int],
    last_pos: Int[Tensor, " batch"] | None = None,
) -> Float[Tensor, " batch"]:
    """mean logit of pos_ids - mean logit of neg_ids at each row's last_pos (the last position if None)."""
    raise NotImplementedError''')

LOGIT_LENS = Exercise("logit_lens_logit_diff", r"""## 2 · `logit_lens_logit_diff`: what would the model say if it stopped here?

The logit lens reads the residual stream at each site (the input of each block, then the final
residual) as if it were the last: through the model's **own** final LayerNorm and unembedding,

$$\text{LN}(x) = \frac{x - \bar x}{\sqrt{\mathrm{Var}[x] + \epsilon}} \odot w + b, \qquad
\text{lens}(x) = \text{LN}(x) \cdot d + \Delta b_U$$

with $d = \mathrm{mean}\, W_U[:, \text{pos}] - \mathrm{mean}\, W_U[:, \text{neg}]$ and $\Delta b_U$ the same
difference of the unembedding's bias. `resid` is `[site, batch, d_model]` at the last position.

Watch for: each site normalised with its **own** statistics (the frozen final scale is DLA's, a
different question — exercises 3); centre first; the LayerNorm's weight **and** bias.

**Predict:** what is the lens at the last site?

<details><summary>Answer</summary>

The model's own logit difference: the last site is the final residual, and the lens applies exactly
what the model applies to it (the package's test and the check's planted model both hold it to 1e-5).
</details>

Solution: `rlhf_scratch.course.solutions_interp.logit_lens_logit_diff`; the package's, on a whole
cache: `interp.residual.logit_lens_logit_diff` (notebook `../04_interp_walkthrough.ipynb` plots it).""", '''\
def logit_lens_logit_diff(
    resid: Float[Tensor, "site batch d_model"],
    ln_weight: Float[Tensor, " d_model"],
    ln_bias: Float[Tensor, " d_model"],
    direction: Float[Tensor, " d_model"],
    unembed_bias_diff: Float[Tensor, ""],
    eps: float = 1e-5,
) -> Float[Tensor, "site batch"]:
    """ln_final(resid) . direction + unembed_bias_diff, each site normalised with its own mean and variance."""
    raise NotImplementedError''')

PATCHING = Exercise("residual_patching", r"""## 3 · `residual_patching`: where does the tuned model's change live?

Run the **reference** model, but at one residual site replace its residual (every position) by the
**tuned** model's on the same tokens, and measure how much of the tuned behaviour comes back:

$$\text{effect}_s = \text{metric}(\text{reference with the tuned residual at } s) - \text{metric}(\text{reference})$$

for $s = 0 .. n_\text{layers}$: `blocks.{s}.hook_resid_pre`, and for the last, `blocks.{n-1}.hook_resid_post`.
Get the tuned residuals with `tuned.run_with_cache(tokens)`; patch with
`reference.run_with_hooks(tokens, fwd_hooks=[(name, hook)])`, a hook returning the replacement.

The check's pair is **planted**: the tuned model is the reference with one attention head changed.
**Predict** before you run: with the head at layer 0 of a 2-layer model, what are the three effects?

<details><summary>Answer</summary>

$[0, \text{gap}, \text{gap}]$: before layer 0 the two residuals are identical (nothing to patch); from
site 1 on, the patched residual already carries the head's change and the rest of the reference is
the tuned model's too. With the head at layer 1: $[0, 0, \text{gap}]$.
</details>

Watch for: the direction (tuned into reference); every position; the effect, not the patched metric.

Solution: `rlhf_scratch.course.solutions_interp.residual_patching`; the package's:
`interp.residual.residual_patching` (notebook 04's patching figure).""", '''\
@torch.no_grad()
def residual_patching(
    reference: HookedTransformer,
    tuned: HookedTransformer,
    tokens: Int[Tensor, "batch pos"],
    metric: Callable[[Tensor], Tensor],
) -> Float[Tensor, " site"]:
    """metric(reference patched with tuned's residual at site s, every position) - metric(reference), s = 0..n_layers."""
    raise NotImplementedError''')

FEATURE_CHANGE = Exercise("feature_change", r"""## 4 · `feature_change`: which features did RLHF turn up?

A sparse autoencoder trained on the reference encodes a residual $x$ into features $a(x) \ge 0$. Run
the same tokens through both models, encode both models' activations with the **same** SAE, and compare
each feature's mean over the real positions (`mask`; padding is not text):

$$\Delta a(f) = \mathrm{mean}_p\, a_f(x_\text{tuned}[p]) - \mathrm{mean}_p\, a_f(x_\text{ref}[p])$$

Watch for: encode each position, then average (the encoder has a ReLU: $a(\bar x) \ne \overline{a(x)}$);
tuned minus reference; keep the sign (rank by $|\Delta a|$ afterwards).

Solution: `rlhf_scratch.course.solutions_interp.feature_change`; the package's:
`interp.feature_diff.feature_diff` (`.change`), shown in notebook `../05_sae_features.ipynb`.""", '''\
def feature_change(
    x_ref: Float[Tensor, "batch pos d_model"],
    x_tuned: Float[Tensor, "batch pos d_model"],
    mask: Bool[Tensor, "batch pos"],
    encode: Callable[[Tensor], Tensor],
) -> Float[Tensor, " d_sae"]:
    """mean over mask of encode(x_tuned) - mean over mask of encode(x_ref), per feature."""
    raise NotImplementedError''')

STEERING = Exercise("steered_logits", r"""## 5 · `steered_logits`: push the reference along the features

If those features carry the reward, adding them to the **reference** should move it the way RLHF
did. Build $v = \sum_i c_i\, W_\text{dec}[f_i]$ (a decoder row is the direction a feature writes)
and add it to the activations at `hook_name`, at every position, with a hook:
`model.run_with_hooks(tokens, fwd_hooks=[(hook_name, lambda x, hook: x + v)])`.

Watch for: every position; the rows as they are (not normalised); every feature; the coefficients.

**Predict:** the check steers a planted model at `blocks.1.hook_resid_pre`. Do the logits at the
first position change?

<details><summary>Answer</summary>

Yes: the vector is added at every position, the first included, so even the first token's
prediction moves. Steering the last position alone would leave the others as they were and reach
the last one's prediction only through itself — the check recognises that mistake by it.
</details>

Solution: `rlhf_scratch.course.solutions_interp.steered_logits`; the package's:
`interp.causal.steering_vector` and `add_vector_hook` (the features page's causal checks).""", '''\
def steered_logits(
    model: HookedTransformer,
    tokens: Int[Tensor, "batch pos"],
    hook_name: str,
    W_dec: Float[Tensor, "d_sae d_model"],
    features: list[int],
    coefficients: Float[Tensor, " n"],
) -> Float[Tensor, "batch pos d_vocab"]:
    """model's logits with sum_i coefficients[i] * W_dec[features[i]] added at hook_name, every position."""
    raise NotImplementedError''')

DISCOVERY = Exercise("changed_head_scores", r"""## 6 · `changed_head_scores`: which head did RL change?

A discovery, not a formula. `mystery()` is a pair of models: a base model, and the same model after a
short REINFORCE run (the next token after 16 prompts; reward +1 for tokens 2 and 3, −1 for token 7)
in which the gradient reached **one** attention head only. Which one? The check knows; this notebook
does not say (nor should you read `rlhf_scratch/course/mystery.py` before your check passes).

    m = mystery()     # m.reference, m.tuned: 3 layers x 4 heads; m.tokens: [16 prompts, 6]; m.metric(logits)

`m.metric` is the mean logit difference the run moved (positive tokens minus the negative one). The
package's tools (`interp.attention`, imported above; `docs/interp.md`): `head_weight_change(reference,
tuned)` (per head, the size of W_tuned − W_ref), `head_patching_metric(reference, tuned, tokens, metric)`
(swap one head's output into the reference, each head alone), `head_ablation_metric(model, tokens,
head_means(model, tokens), metric)`, `top_heads(scores)`. Explore in cells of your own below the stub,
then write your method as `changed_head_scores`: for each prompt, a score per head, larger = more
evidence that the head carries what the run changed.

The check runs it on mystery A (the one above) and on a pair B it does not show you (so your method
passes, not A's answer), takes the head with the largest mean score, and says whether it is the head
the run trained — naming the tempting wrong answers it knows — and whether your evidence decides it:
the paired 95 % t interval, over the prompts, of that head's score minus the runner-up's must exclude 0.
`discovery_report(scores)` prints that margin.

Watch for: not every weight that moved matters; not every head whose activations moved was changed.

**Predict** before you run a tool: will the head whose weights moved most be the one? Will a head
whose `hook_z` moved most? Write your guesses down; the check's hints say what each answer means.

The solution, once yours passes: `rlhf_scratch.course.solutions_interp.changed_head_scores`.""", '''\
@torch.no_grad()
def changed_head_scores(
    reference: HookedTransformer,
    tuned: HookedTransformer,
    tokens: Int[Tensor, "prompt pos"],
    metric: Callable[[Tensor], Tensor],
) -> Float[Tensor, "prompt layer head"]:
    """Per prompt, evidence that head (layer, head) carries what the RL run changed (larger = more)."""
    raise NotImplementedError''', after='''\
# your method on mystery A, with how sure the prompts make it
m = mystery()
print(discovery_report(changed_head_scores(m.reference, m.tuned, m.tokens, m.metric)))''')

INTERP = notebook(
    """# Exercises 5 · Interpretability: the logit difference, the lens, patching, features, steering

Notebooks `../04_interp_walkthrough.ipynb` and `../05_sae_features.ipynb` ask what RLHF changed inside
the model. Here you write their tools. Three checks run your function on a **planted** pair (a tiny
random model and a copy with one attention head changed, `rlhf_scratch.course.checks_interp.planted`),
where the answer is known, and compare with the package's `interp` functions. The last is a discovery:
which head did a short RL run change? You find it with those tools, and the check says whether you are
right and whether your evidence decides it.""",
    [LOGIT_DIFF, LOGIT_LENS, PATCHING, FEATURE_CHANGE, STEERING, DISCOVERY],
    """## All six pass?

Read `rlhf_scratch/course/solutions_interp.py`, then the package's versions (`interp/logits.py`,
`interp/residual.py`, `interp/feature_diff.py`, `interp/causal.py`), and run them on a real run:
`python -m interp.report RUN_DIR` and `python -m interp.features RUN_DIR` (`docs/interp.md`).""",
    how=HOW_SOLUTIONS.format(extra=" and `solutions_interp.py`"),
    imports=("from collections.abc import Callable\n\nfrom interp.attention import (\n"
             "    head_ablation_metric, head_means, head_patching_metric, head_weight_change, top_heads,\n)\n"
             "from transformer_lens import HookedTransformer\n\n"
             "from rlhf_scratch.course.checks_discovery import discovery_report\n"
             "from rlhf_scratch.course.mystery import mystery"),
)


# --- 06: the capstones ------------------------------------------------------------------------

RLOO_TRAINER = Exercise("make_rloo_algorithm", r"""## 1 · `make_rloo_algorithm`: RLOO's trainer, written from the contract

Exercises 2 wrote RLOO's advantage. Now write the whole algorithm the way the package adds one
(`CONTRIBUTING.md`, "Adding an algorithm"; `tests/toy_algorithm.py` is a whole one, REINFORCE in 40
lines): a subclass of the shared `Trainer` with two methods, and a **registry entry** that names it.
The engine drives every phase through the same roles (verl's names):

    batch = generate_sequences → compute_log_prob → compute_scores      # the base class does these
    compute_advantages(batch)      # yours: set batch.advantages, one number per completion
    update_actor(batch)            # yours: the minibatch ascent, return the phase's metrics

What you have: `batch.everyone` holds every row's `rewards`, `logprobs` (log π_old per token),
`ref_logprobs`, `completion_mask`; `batch.rollout` is the rows you learn on and `batch.local_advantages`
their advantages. `self.sequence_log_probs(rollout, rows)` is log π(o|q) **now**, with gradient.
`self.ascend(minibatches, objective)` runs the loop — for each minibatch `J, stats = objective(rows)`,
one optimizer step **up** J — and one scheduler step. `minibatch_rows(n, num_minibatches, passes)` cuts
the rows. `sequence_log_probs(logprobs, mask)` sums over the kept tokens. RLOO (TRL's names):

$$r_i = R_i - \beta \sum_t \big(\log\pi_\text{old}(o_t) - \log\pi_\text{ref}(o_t)\big) \qquad
A_i = r_i - \frac{1}{G-1}\sum_{j \ne i} r_j$$
$$\rho_i = \exp\big(\log\pi(o_i|q) - \log\pi_\text{old}(o_i|q)\big) \qquad
J = \mathrm{mean}_i \min\big(\rho_i A_i,\ \mathrm{clip}(\rho_i, 1-\epsilon_\text{low}, 1+\epsilon_\text{high})\, A_i\big)$$

with the $G$ completions of a prompt **consecutive** rows, `args.num_iterations` passes of
`args.num_minibatches` minibatches. `generations(args)` tells the engine to sample $G$ per prompt.

The check registers your entry, builds its trainer with the package's RLOO settings on the tiny
preset, and puts it in the state of a package `RLOOTrainer` one phase into training (so the KL in the
reward is not 0). Both then learn on the same rollout with the same RNG, under plain SGD so that
float rounding stays small: your advantages must equal the package's, and your update its update
(projection 1, relative error 0, to 1e-4).

Watch for: the baseline leaves the completion's **own** reward out; the groups are
`view(-1, G)`; divide by $G - 1$; the KL is **subtracted**, with no gradient; $\rho$ is the whole
**sequence's** ratio; `objective` returns $J$ to be **maximised**.

**Predict:** on the first minibatch of a phase, $\rho = 1$ for every row. Does the clip change the
gradient there? And on the second minibatch?

<details><summary>Answer</summary>

Not on the first: at $\rho = 1$ nothing is clipped and $\nabla J = \mathrm{mean}_i A_i \nabla\log\pi(o_i|q)$,
REINFORCE with the leave-one-out baseline. On the second the policy has already stepped, so
$\rho \ne 1$ and the clip can bind (the check's run clips some rows): leaving the clip out is a
mistake the check names by the update it gives.
</details>

Solution: `rlhf_scratch.course.solutions_capstones.make_rloo_algorithm`; the package's:
`rlhf_scratch.algorithms.rloo` (`objective.py` and `trainer.py`, with TRL's metrics).""", '''\
@dataclass
class MyRLOOArgs(RLOOArgs):
    """RLOO's fields (num_generations G, beta, epsilon_low, epsilon_high, num_iterations, ...) under our own name."""

    ALGO: ClassVar[str] = "my_rloo"


class MyRLOOTrainer(Trainer):
    METRICS = ("objective/rloo", "charts/skipped_steps")  # what update_actor may return (the engine checks)
    args: MyRLOOArgs

    @staticmethod
    def generations(args) -> int:
        """G: completions sampled per prompt."""
        raise NotImplementedError

    def compute_advantages(self, batch: Batch) -> None:
        """batch.advantages[i] = r_i - mean of the other G - 1 r_j of its prompt, r = R - beta * sum_t (log pi_old - log pi_ref)."""
        raise NotImplementedError

    def update_actor(self, batch: Batch) -> dict[str, float]:
        """Ascend J = mean min(rho A, clip(rho) A), rho per sequence, over minibatch_rows(...); return self.ascend's stats."""
        raise NotImplementedError


def make_rloo_algorithm(name: str = "my_rloo") -> Algorithm:
    """The registry entry: Algorithm(name, label, args=MyRLOOArgs, trainer=MyRLOOTrainer)."""
    raise NotImplementedError''', after='''\
# train it: registered for the call, three phases on the tiny preset through the engine (about half a minute);
# three phases show that it runs, not that it learns (the default runs take 100: docs/results.md)
for m in train_phases(make_rloo_algorithm(), phases=3):
    print(f"phase {m['phase']}: reward {m['rewards/mean']:.3f}, J {m['objective/rloo']:+.4f}")''')

K3 = Exercise("calc_k3_kl", r"""## 2 · `calc_k3_kl`: an estimator, graded exactly by the microscope

RLOO's reward and GRPO's loss estimate $\mathrm{KL}(\pi \,\|\, \pi_\text{ref})$ from the sampled tokens alone.
With $r = \pi_\text{ref}(o_t) / \pi(o_t)$ at each sampled token, Schulman's three estimators are

$$k_1 = -\log r \qquad k_2 = \tfrac12 (\log r)^2 \qquad k_3 = (r - 1) - \log r$$

Write $k_3$, per token, from the log-probs (GRPO's KL term). Is it unbiased? A sampled run cannot
settle that: the mean of a few thousand samples has noise of its own. The exact-gradient
microscope can (`docs/exact.md`): its environment (3 words and EOS, up to 4 tokens) lists **every**
completion with its exact probability, so $\mathbb{E}_\pi[\sum_t k(y_t)]$ is a weighted sum, not a
sample, and so is $\mathrm{KL}(\pi \,\|\, \pi_\text{ref})$. The check says "unbiased" or "biased by X (exact)".

Watch for: $r$ is $\pi_\text{ref} / \pi$ (then $\mathbb{E}_\pi[r] = \sum \pi_\text{ref} = 1$, which is
what makes $r - 1$ a zero-mean correction); the $-1$; compute $r$ as `exp` of a difference of log-probs.

**Predict:** which of $k_1, k_2, k_3$ are unbiased? Which is never negative?

<details><summary>Answer</summary>

$k_1$ and $k_3$ are unbiased ($\mathbb{E}_\pi[k_3] = \mathbb{E}_\pi[k_1] + \mathbb{E}_\pi[r] - 1$); $k_2$
is biased (the cell after the check prints by how much, exactly), though as a **loss** its expected
gradient is the KL's (`docs/exact.md`, "findings"). $k_2$ and $k_3$ are never negative ($e^x - 1 - x \ge 0$);
$k_1$ is negative wherever $\pi_\text{ref} > \pi$ — the check's second case names it.
</details>

Solution: `rlhf_scratch.algorithms.grpo.calc_k3_kl`; the microscope: `rlhf_scratch.microscope`
(`python -m rlhf_scratch.microscope` measures every estimator of the package this way).""", '''\
def calc_k3_kl(
    logprobs: Float[Tensor, "batch gen_len"], ref_logprobs: Float[Tensor, "batch gen_len"]
) -> Float[Tensor, "batch gen_len"]:
    """k3 = (r - 1) - log r per token, r = pi_ref / pi = exp(ref_logprobs - logprobs)."""
    raise NotImplementedError''', after='''\
# grade any estimator the same way: its exact mean over every completion against the exact KL
kl = exact_kl()
estimators = {"k1": lambda lp, rf: lp - rf, "k2": lambda lp, rf: 0.5 * (lp - rf) ** 2, "your k3": calc_k3_kl}
for name, k in estimators.items():
    bias = exact_mean(k) - kl
    print(f"{name}: E = {exact_mean(k):.6f}, KL = {kl:.6f}: " + ("unbiased" if abs(bias) < 1e-6 else f"biased by {bias:+.6f} (exact)"))''')

PAIRED = Exercise("paired_difference_interval", r"""## 3 · `paired_difference_interval`: decide on one seed, then on three

A training run is one draw: its seed picks the prompts, the samples, the minibatches. Two methods run
with the **same** seeds are compared seed by seed, $d_i = a_i - b_i$, and the 95 % interval of the mean
difference is Student's

$$\bar d \pm t_{(1+c)/2,\ n-1} \cdot \frac{s_d}{\sqrt n}, \qquad s_d = \sqrt{\frac{\sum_i (d_i - \bar d)^2}{n - 1}}$$

(`rlhf_scratch.studies.stats` is the package's, with the verdict every study prints). A lesson is
**decided** when the interval excludes 0. One seed has no spread: its interval is $(-\infty, +\infty)$.
Return `(mean, low, high)`; Student's quantile is `scipy.stats.t.ppf(q, df)`.

Watch for: pair by seed (the seeds share prompts, so the two sides move together); $t$ with $n - 1$
degrees of freedom, not the normal's 1.96 ($t_{0.975, 2} = 4.30$); $n - 1$ in $s_d$; $s_d / \sqrt n$.

**Predict:** the package's three-seed comparison of PPO and Online DPO (`benchmarks/compare_sentiment_2026-11-25_3seeds.json`,
recorded, nothing re-run) has a held-out judge, the reference model's log-prob per token of the
completions (higher: the text still reads like the language the model started from). On seed 1,
Online DPO's text is the closer one: $-4.54$ against PPO's $-4.70$. Lesson: "Online DPO keeps its
text closer to the reference than PPO". What do three seeds say?

<details><summary>Answer</summary>

The cell after the check prints it: seeds 2 and 3 go the other way, PPO − Online DPO = $-0.155$,
$+0.809$, $+0.103$, a mean of $+0.252$ ($-0.988$ to $+1.492$): the one-seed lesson reversed its sign
and is not resolved at $n = 3$. With 1.96 in place of $t$, the proxy reward's difference (+0.070)
would be called decided; the package records it as not resolved ($-0.006$ to $+0.147$, `docs/results.md`).
</details>

Solution: `rlhf_scratch.course.solutions_capstones.paired_difference_interval`; the package's:
`rlhf_scratch.studies.stats.paired_difference` (and `verdict`, with the seeds it would take).""", '''\
def paired_difference_interval(
    a: list[float], b: list[float], confidence: float = 0.95
) -> tuple[float, float, float]:
    """(mean d, low, high): d_i = a_i - b_i, mean d +- t_{(1+c)/2, n-1} * s_d / sqrt(n); one seed: (d, -inf, inf)."""
    raise NotImplementedError''', after='''\
# the package's recorded three-seed comparison: what one seed says, and what three say
runs = recorded_runs("compare_sentiment_2026-11-25_3seeds.json")["runs"]
for metric in ("eval/ref_logprob_per_token_final", "eval/vader_final", "eval/repeated_3grams_final", "reward_final"):
    ppo = [runs[f"ppo-s{seed}"][metric] for seed in (1, 2, 3)]
    dpo = [runs[f"online_dpo-s{seed}"][metric] for seed in (1, 2, 3)]
    mean, low, high = paired_difference_interval(ppo, dpo)
    verdict = "decided" if low > 0 or high < 0 else "not resolved"
    print(f"{metric}: PPO - Online DPO on seed 1 {ppo[0] - dpo[0]:+.3f}; "
          f"on three seeds {mean:+.3f} ({low:+.3f} to {high:+.3f}), {verdict}")''')

CAPSTONES = notebook(
    """# Exercises 6 · Capstones: a trainer from the contract, the microscope as a grader, a verdict over seeds

The course went formula (exercises 1–2) → component (3–4) → interpretability (5). These three are
each a whole job: **write an algorithm** the way the package adds one and train it; **grade an
estimator exactly** with the exact-gradient microscope instead of trusting a noisy run; and **decide
a lesson** the way every study here does, over seeds with an interval — on the package's own
recorded runs, where a one-seed lesson reversed. Each check compares with the package's own
(`RLOOTrainer`, the microscope's exact KL, `studies.stats`). Notebook `../07_exact_gradients.ipynb`
goes on to the open problems.""",
    [RLOO_TRAINER, K3, PAIRED],
    """## All three pass?

Read `rlhf_scratch/course/solutions_capstones.py`, then `rlhf_scratch/algorithms/rloo/` (the same
trainer with TRL's metrics), `rlhf_scratch/microscope/` (every estimator of the package, graded as
yours was: `docs/exact.md`) and `rlhf_scratch/studies/stats.py` (`verdict`, `seeds_needed`). Your
algorithm runs from the command line too, registered through the environment
(`RLHF_SCRATCH_ALGORITHMS=my_module.py:register python -m rlhf_scratch.train sentiment --algo my_rloo`),
and a study of it over seeds: `python -m rlhf_scratch.compare sentiment --algos my_rloo,rloo --seeds 1,2,3`
(`docs/results.md` says how every lesson there was decided).""",
    how=HOW_SOLUTIONS.format(extra=" and `solutions_capstones.py`"),
    imports=("from dataclasses import dataclass\nfrom typing import ClassVar\n\n"
             "from rlhf_scratch.course.capstone_kit import (\n"
             "    Algorithm, Batch, RLOOArgs, Trainer, minibatch_rows, recorded_runs, sequence_log_probs, train_phases,\n"
             ")\nfrom rlhf_scratch.course.checks_capstones import exact_kl, exact_mean"),
)


# --- 07: the parts notebook 06 trains with ------------------------------------------------------

VALUE_HEAD = Exercise("TransformerWithValueHead", r"""## 1 · `TransformerWithValueHead`: the value head as a module on the HookedTransformer

PPO's baseline $V(s_t)$ is a small MLP on the policy's own final residual, so one forward pass gives
both the logits and a value at every position:

$$V(s_t) = W_2\,\mathrm{ReLU}(W_1 \hat h_t + b_1) + b_2, \qquad \hat h_t = \texttt{ln\_final.hook\_normalized}[t]$$

$\hat h$ is the residual after the final LayerNorm, the vector the unembedding reads. Write the module:
`self.value_head = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, 1))`
(the check loads its weights into it), and a `forward(input_ids, attention_mask=None)` that runs the base
with `run_with_hooks`, a hook on `ln_final.hook_normalized` computing the values, and returns
`(logits, values)`, values `[batch, seq]`.

`detach_value_head=True` (the blog's final code) detaches $\hat h$ before the head: the value loss then
trains the head only; `False` (ARENA's) lets it shape the trunk too.

Watch for: the hook (`ln_final.hook_normalized`, not the last block's `hook_resid_post`, which is before
the LayerNorm, and not the logits); a hook that **returns nothing** (a returned tensor replaces the
activation); `attention_mask` passed on to the base (left-padded prompts); `.squeeze(-1)`; detach only when
asked; `run_with_hooks`, not `add_hook` (a hook left on the base runs on every later forward); hand the
values over and don't keep them on the module (they hold the forward's graph).

**Predict:** with `detach_value_head=True`, what is the gradient of $\sum_t V(s_t)$ with respect to the
trunk's weights? And the logits' gradient with respect to the head's?

<details><summary>Answer</summary>

Zero, both: the detach cuts the only path from the values to the trunk, and the logits never pass
through the head. The check's second case measures the first; its third, with `False`, sees the trunk's
gradient appear.
</details>

Solution: `rlhf_scratch.course.solutions_parts.TransformerWithValueHead`; the package's:
`rlhf_scratch.algorithms.ppo.TransformerWithValueHead` (it also gives the values from a faster forward
without hooks, for the learning phase).""", '''\
class TransformerWithValueHead(nn.Module):
    """base (a HookedTransformer) + value_head, an MLP on ln_final.hook_normalized; forward gives (logits, values)."""

    def __init__(self, base: HookedTransformer, detach_value_head: bool = True):
        super().__init__()
        raise NotImplementedError

    def forward(
        self, input_ids: Int[Tensor, "batch seq"], attention_mask: Int[Tensor, "batch seq"] | None = None
    ) -> tuple[Float[Tensor, "batch seq d_vocab"], Float[Tensor, "batch seq"]]:
        raise NotImplementedError''')

GENERATE = Exercise("generate", r"""## 2 · `generate`: the sampling loop, left padding, positions, a KV cache

Exercises 4 wrote the pieces (`left_pad`, `position_ids`, `completion_mask`). Now the loop the rollout runs:

1. left-pad the prompts with `pad_id` (every prompt ends at the last column) and make the mask, True on
   the real tokens;
2. positions: each row counts from its first real token, `cumsum(mask) - 1`, 0 on the pads;
3. `gen_len` times: the logits after each row's last column, `token = next_token(logits)` (greedy, or a
   sampler: notebook 06 passes `sample_next_token` with its temperature and top-k), appended with the
   position one past the row's last and a True mask column. With `eos_id`, a row that has said it is
   finished: its later tokens are `pad_id` and its completion mask False (the EOS itself is kept).

Run the model with `forward_at(model, ids, positions, attention_mask, cache=None)` (given,
`rlhf_scratch/course/parts_kit.py`): TransformerLens' forward with **your** positions. Without a cache,
run the whole sequence each step. With `use_cache=True` (optional: raise `NotImplementedError` for it and
the check runs the other cases), make `cache = new_cache(model, batch)` once, run the prompt through it
first, then **only the new token** each step: its position, and a mask of one True column (the cache
keeps the earlier columns' mask). Return `(ids, attention_mask, completion_mask)`: `[batch, prompt_len +
gen_len]` twice, `[batch, gen_len]`.

Watch for: right padding (a short prompt's next token would follow a pad); positions not shifted
(`arange` for every row) or from 1; the pads attended; with the cache, the new token's position off by
one (it is one past the **row's** last, not the padded width) and the whole sequence fed again.

**Predict:** does the KV cache change the tokens the greedy loop writes?

<details><summary>Answer</summary>

No: the cache only saves recomputing the earlier columns' keys and values; the logits agree to about
1e-6 and the greedy tokens are the same (the check's cases 1 and 3 have one answer). It changes the cost:
each step runs one column instead of the whole sequence.
</details>

Solution: `rlhf_scratch.course.solutions_parts.generate`; the package's: `rlhf_scratch.rollout.generation.generate`
(a static cache allocated once, CUDA-graphed on a GPU; the same tokens).""", '''\
@torch.no_grad()
def generate(
    model: HookedTransformer,
    prompts: list[Int[Tensor, " _"]],
    gen_len: int,
    next_token: Callable[[Tensor], Tensor],
    pad_id: int,
    eos_id: int | None = None,
    use_cache: bool = False,
) -> tuple[Int[Tensor, "batch seq"], Bool[Tensor, "batch seq"], Bool[Tensor, "batch gen_len"]]:
    """(ids, attention_mask, completion_mask): the prompts left-padded, then gen_len tokens drawn by
    `next_token` from the logits after each row's last token; pad after a row's first eos_id."""
    raise NotImplementedError''')

REPLAY_MEMORY = Exercise("ReplayMemory", r"""## 3 · `ReplayMemory`: the rollout, cut into minibatches

The learning phase trains `batches_per_learning_phase` epochs on one rollout. The memory stores what the
rollout computed, under no gradient, and the **returns**, the value head's targets:

$$R_t = A_t + V_\text{old}(s_t), \qquad s_t = \text{the state token } t \text{ was chosen in: } \texttt{values[:, -gen\_len-1 : -1]}$$

`get_minibatches(generator=None)` yields, for each epoch, a **new** `torch.randperm(batch, generator=generator)`
cut into `num_minibatches` equal minibatches: each a `ReplayMinibatch` (given) of `sample_ids`,
`attention_mask`, `completion_mask`, `logprobs`, `advantages`, `returns`, every field gathered with the
same rows. The check draws with a seeded generator and compares with the package's rows, so draw one
permutation per epoch and nothing else.

Watch for: one shuffle reused for every epoch (the same minibatches again); a permutation per minibatch
(rows overlap, others are dropped); no shuffle; `num_minibatches` is a count, not a size; the returns'
slice (`values[:, -gen_len:]` is the state **after** each token); **detach** what you store: a tensor that
keeps its graph keeps the whole rollout's activations in memory.

Solution: `rlhf_scratch.course.solutions_parts.ReplayMemory`; the package's: `rlhf_scratch.core.memory.ReplayMemory`
(it can also hold the reference's final residual, so the KL needs no reference forward).""", '''\
class ReplayMemory:
    """One rollout, and batches_per_learning_phase shuffles of it, each cut into num_minibatches minibatches."""

    def __init__(
        self,
        sample_ids: Int[Tensor, "batch seq_len"],
        attention_mask: Bool[Tensor, "batch seq_len"],
        completion_mask: Bool[Tensor, "batch gen_len"],
        logprobs: Float[Tensor, "batch gen_len"],
        advantages: Float[Tensor, "batch gen_len"],
        values: Float[Tensor, "batch seq_len"],
        num_minibatches: int,
        batches_per_learning_phase: int,
    ):
        raise NotImplementedError

    def get_minibatches(self, generator: torch.Generator | None = None) -> Iterator[ReplayMinibatch]:
        raise NotImplementedError''')

PARTS = notebook(
    """# Exercises 7 · The parts: the value head, the sampling loop, the replay memory

ARENA's RLHF chapter has you build the pieces around PPO's formulas yourself. Here they are: the value
head as a module on the HookedTransformer, the loop that samples a batch of left-padded prompts (with a
KV cache if you like), and the replay memory that cuts a rollout into minibatches. Each check runs your
part on a small random model and compares it with the solution, which gives the package's numbers, and
names the classic mistake. Notebook `../06_build_the_ppo_loop.ipynb` then trains with **your** three parts
(the package's stand in only for a part you have not written, and it says so).""",
    [VALUE_HEAD, GENERATE, REPLAY_MEMORY],
    """## All three pass?

Read `rlhf_scratch/course/solutions_parts.py`, then the package's: `rlhf_scratch/algorithms/ppo/policy.py`,
`rlhf_scratch/rollout/generation.py` (and `models/static_cache.py`, the cache as the GPU likes it) and
`rlhf_scratch/core/memory.py`. Then open `../06_build_the_ppo_loop.ipynb`: its first cell reads your parts
from this notebook.""",
    how=HOW_SOLUTIONS.format(extra=" and `solutions_parts.py`"),
    imports=("from collections.abc import Callable, Iterator\n\nfrom torch import nn\n"
             "from transformer_lens import HookedTransformer\n\n"
             "from rlhf_scratch.course.parts_kit import ReplayMinibatch, forward_at, new_cache"),
)


NOTEBOOKS = {"01_ppo_objective_exercises.ipynb": PPO, "02_beyond_ppo_exercises.ipynb": BEYOND,
             "03_components_exercises.ipynb": COMPONENTS, "04_rollout_exercises.ipynb": ROLLOUT,
             "05_interp_exercises.ipynb": INTERP, "06_capstones_exercises.ipynb": CAPSTONES,
             "07_parts_exercises.ipynb": PARTS}
"""Every exercise notebook of this folder, by file name."""


def main() -> None:
    for name, nb in NOTEBOOKS.items():
        nbformat.validate(nb)
        nbformat.write(nb, HERE / name)
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
