"""Writes notebooks/07_exact_gradients.ipynb and executes it (so the committed notebook shows its outputs):

    python notebooks/make_07_exact_gradients.py            # write, then execute (~20 s)
    python notebooks/make_07_exact_gradients.py --no-run   # write only

Executing is `rlhf_scratch.course.execute_notebooks`' (the suite's kernel environment, and each cell's
source hash recorded, so `python -m rlhf_scratch.course.execute_notebooks --check` passes).

Edit the text here, not in the notebook, then run this file. The notebook uses small settings (4
tokens, completions of at most 4 tokens, 3,000 Monte-Carlo batches) so that it runs in about a
minute; `python -m rlhf_scratch.exact` is the full measurement (docs/exact.md).
"""

import sys
from pathlib import Path

from notebook_generator import write

HERE = Path(__file__).parent
PATH = HERE / "07_exact_gradients.ipynb"

CELLS = [
    ("md", "intro", """\
# 07 · The exact-gradient microscope: which estimators are unbiased, and by how much

Every RLHF algorithm here updates the policy with an *estimate* of a gradient, built from a few
sampled completions. A training run cannot tell you whether that estimate is biased: a biased
estimator and an unlucky seed look the same. An environment small enough to **list every
completion** can: each completion's exact probability, the exact objective J(θ) = Σ_y π(y) r(y),
its exact gradient by autograd, and the exact expected value of an estimator.

The environment (`rlhf_scratch.microscope.env`): a vocabulary of EOS and three words `a b c`, completions
of at most 4 tokens, two one-token prompts; the policy is a **table of logits, one row per prefix**
(π(y|x) = Π_t softmax(θ[prefix])[y_t]), and a reference table π_ref near it. Every log-probability
goes through the package's own `get_log_probs` and `sequence_log_probs`, and every estimator is the
package's own loss (`calc_rloo_objective`, `calc_grpo_objective`, `calc_clipped_sur_obj`,
`calc_k3_kl`, `calc_dpo_loss`, …): the microscope measures the code you train with.

Three kinds of numbers come out, for an estimator g against a true gradient ∇F:

* **cos(E[g], ∇F)**: 1 means it points the right way on average;
* **E[g]·∇F / ‖∇F‖²**: its size along the truth (1 for an unbiased estimator);
* **Var[g]**: how noisy one draw is.

Where one draw is one completion, E[g] = Σ_y π(y) g(y) is an exact sum. Where one draw is a batch
(RLOO, GRPO, PPO's whitened surrogate), E[g] is a Monte-Carlo mean over seeded batches, reported with
its standard error. The full measurement is `python -m rlhf_scratch.exact --out DIR` ([docs/exact.md](../docs/exact.md))."""),
    ("code", "setup", """\
import matplotlib.pyplot as plt
import torch

from rlhf_scratch.microscope.env import RIGHT, probabilities, set_p_right
from rlhf_scratch.microscope.run import LESSON, make_scene, scene

torch.set_num_threads(1)
sc = scene(vocab=4, max_len=4, p_right=(0.2, 0.6), reward="correct", num_generations=8)
env = sc.env
q = probabilities(env, sc.theta)  # π(y|x) / 2: the probability of each (prompt, completion) row
print(f"{len(env.completions)} completions, {env.num_prefixes} prefixes x {env.vocab} logits = {env.num_params} parameters")
for x in range(env.num_prompts):
    print(f"prompt {x}: Σ_y π(y|x) = {2 * q[env.completions.prompt == x].sum().item():.6f}")
print("the five likeliest completions of prompt 0 ('.' is EOS):")
for i in q[: len(q) // 2].argsort(descending=True)[:5].tolist():
    print(f"  {env.text(i):6s} π = {2 * q[i].item():.4f}   reward {sc.rewards[i].item():.0f}")"""),
    ("md", "truth", """\
## The truth

The reward is right/wrong: 1 if the first token is `a`, whatever follows. Before running the next
cell, **predict**: which rows of the table does ∇J touch?"""),
    ("code", "truth-code", """\
grad = sc.truths["J"].grad
after_first = sc.parts["after_first"]
print(f"J = {sc.truths['J'].value:.4f}, ‖∇J‖ = {grad.norm():.4f}, E[len] = {sc.truths['length'].value:.4f}")
print(f"largest |∂J/∂θ| on a row after the first token: {grad[after_first].abs().max():.1e}")
assert grad[after_first].abs().max() < 1e-6"""),
    ("md", "truth-answer", """\
<details><summary>Answer</summary>

Only the two roots (the first token's logits): nothing after the first token changes the reward, so
the exact gradient is zero on every other row. That is what makes this reward a clean test of *length
bias*: an update that changes how long answers are, after the first token, is not following ∇J.
</details>"""),
    ("md", "reinforce", """\
## REINFORCE is unbiased: exactly

g(y) = r(y) ∇log π(y), and E_π[r ∇log π] = Σ_y ∇π(y) r(y) = ∇J. Here it is summed over every
completion, so cos and the size ratio are 1 to float32 precision, not "about 1". Its variance per
completion is another matter: the score ∇log π(y) spreads over every row the completion passed
through, while ∇J lives on two rows."""),
    ("code", "reinforce-code", """\
e = sc.measure("reinforce")
print(f"cos = {e['cos_to_true']:.7f}   ‖E g‖/‖∇J‖ = {e['norm_ratio']:.7f}")
print(f"variance of one completion's g / ‖∇J‖² = {e['variance'] / grad.pow(2).sum():.1f}")
assert abs(e["cos_to_true"] - 1) < 1e-5 and abs(e["norm_ratio"] - 1) < 1e-5"""),
    ("md", "baselines", """\
## Baselines: RLOO, GRPO's group mean, GRPO's std

A batch here is G = 8 completions of each of the two prompts. **Predict** the size along ∇J of:

* RLOO, A_i = r_i − mean of the *other* G − 1 rewards;
* GRPO's advantage without the std, A_i = r_i − mean of *all* G (r_i included);
* GRPO's default, (r_i − mean) / (std of the group + 1e-4)."""),
    ("code", "baselines-code", """\
draws = sc.draws(3000, seed=1)  # 3,000 batches, shared by every estimator below
for name in ("rloo", "grpo_adv_none", "grpo_adv_group"):
    e = sc.measure(name, draws)
    print(f"{name:15s} size along ∇J {e['norm_ratio_along_true']:.4f} ± {e['norm_ratio_along_true_se']:.4f}"
          f"   cos {e['cos_to_true']:.5f}   (noise alone would leave 1 − cos ≈ {e['bias_se']**2 / 2:.0e})")"""),
    ("md", "baselines-answer", """\
<details><summary>Answer</summary>

RLOO's baseline does not depend on y_i, so it adds nothing in expectation: size 1. The group mean
contains r_i/G, which correlates with y_i: E[(r_i − mean) ∇log π(y_i)] = (1 − 1/G) ∇J, size 7/8,
pointing the right way. The std division scales each group by 1/σ: a group of the hard prompt
(π(a) = 0.2) has a smaller σ than one of the medium prompt (0.6), so the hard prompt's gradient is
blown up; the direction now weighs prompts by difficulty, which ∇J does not (the Dr. GRPO critique).
</details>"""),
    ("md", "lesson", """\
## The length lesson: GRPO's per-sequence mean

GRPO's `loss_type="grpo"` averages each completion's per-token terms, so a token of y weighs 1/|y|.
On the rows after the first token the expected update is then A · ∇E[1/|y| | first token]: with
A < 0 (a wrong answer) it lowers E[1/|y|], the answer **grows longer**; with A > 0 (right) it gets
shorter. `dr_grpo` weighs every token 1/(B·L), a constant, and RLOO sums log-probs: for them that
expectation is 0. `dapo` divides by the batch's token count, which contains |y| itself: a small bias
of the same kind.

**Predict** the signs below, for a policy that is mostly wrong (π(a) = 0.2) and one that is mostly
right (0.8). The numbers are the change of E[len] per unit of J gained, from the rows after a right
and after a wrong first token (the true gradient's: exactly 0)."""),
    ("code", "lesson-code", """\
fig, axes = plt.subplots(1, 2, figsize=(11, 3.5), sharey=True)
for ax, p in zip(axes, (0.2, 0.8)):
    at = make_scene(env, set_p_right(sc.theta, (p, p)), sc.theta_ref, "correct", sc.knobs)
    batches = at.draws(3000, seed=2)
    rows = {name: at.measure(name, batches) for name in LESSON}
    for i, (name, e) in enumerate(rows.items()):
        for dy, part, color in ((-0.2, "after_right", "tab:green"), (0.2, "after_wrong", "tab:red")):
            ax.barh(i + dy, e[f"length_per_gain_{part}"], height=0.4, color=color,
                    xerr=2 * e[f"length_per_gain_{part}_se"], label=part if i == 0 else None)
        print(f"p={p} {name:13s} after right {e['length_per_gain_after_right']:+.4f} ± {e['length_per_gain_after_right_se']:.4f}"
              f"   after wrong {e['length_per_gain_after_wrong']:+.4f} ± {e['length_per_gain_after_wrong_se']:.4f}")
    ax.set_yticks(range(len(rows)), list(rows))
    ax.axvline(0, color="k", lw=0.8)
    ax.set_title(f"π(first = a) = {p}: ΔE[len] per unit of J gained (± 2 s.e.)", fontsize=9)
axes[0].legend(fontsize=8)
plt.tight_layout()
plt.show()"""),
    ("md", "lesson-answer", """\
<details><summary>Answer</summary>

GRPO: after a **wrong** first token (A < 0) E[len] goes up, after a **right** one it goes down, at
both policies: the sign is the advantage's, not the policy's. `dr_grpo` and RLOO: 0 on
both sides, as ∇J (a constant weight per token, or summed log-probs, puts no 1/|y| into the
expectation). `dapo`: small, of GRPO's kind — its divisor holds |y|.
</details>"""),
    ("md", "kl", """\
## The KL estimators: which KL does each one's gradient follow?

RLHF penalises KL(π ‖ π_ref) (reverse). With k1 = log π − log π_ref, k2 = ½ k1², k3 = π_ref/π − log(π_ref/π) − 1
at each sampled token, used as a **loss term** (gradient through log π), or k1 folded into the
**reward** (the score function, as RLOO does). Derivations, one sampled token a ~ π:

* ∇k1 = ∇log π(a): mean 0. As a loss term k1 does **nothing** in expectation.
* ∇k2 = k1 ∇log π(a): mean Σ_a ∇π(a) (log π − log π_ref) = ∇KL(π ‖ π_ref), the reverse KL.
* ∇k3 = (1 − π_ref/π) ∇log π(a): mean −Σ_a π_ref(a) ∇log π(a) = ∇KL(π_ref ‖ π), the **forward** KL.
* k1 in the reward: mean E[k1 ∇log π] = ∇KL(π ‖ π_ref).

For a whole completion the per-token k2 and k3 drop a term: ∇KL of the sequence also moves the
probability of *reaching* later prefixes, which only the score function (k1 in the reward, summed
over the completion) carries. **Predict** which rows below are exactly 1."""),
    ("code", "kl-code", """\
one = scene(vocab=4, max_len=1, p_right=(0.2, 0.6), reward="correct")
names = ("k1_loss", "k2_loss", "k3_loss", "k3_loss_rho", "k1_reward", "kl_full_vocab_loss")
print(f"{'':20s}{'one token: cos to reverse, forward':>38s}{'4 tokens: cos to reverse, forward':>38s}")
for name in names:
    cells = []
    for s in (one, sc):
        e = s.measure(name)
        cells.append("E[g] = 0 (‖E g‖/‖∇KL‖ %.0e)" % e["norm_ratio"] if e["zero_mean"]
                     else f"{e['cos_kl_reverse']:.5f}, {e['cos_kl_forward']:.5f}")
    print(f"{name:20s}{cells[0]:>38s}{cells[1]:>38s}")"""),
    ("md", "kl-after", """\
<details><summary>Answer</summary>

One token: k2 and TRL's ρ-weighted k3 (`use_bias_correction_kl`, whose gradient at ρ = 1 is k2's)
follow the reverse KL exactly, plain k3 the forward KL exactly, k1 as a loss nothing. Four tokens:
only k1 in the reward is still exact; the per-token terms (and PPO's full-vocabulary per-position
KL, which has k2's expected gradient with less variance) follow a "local" KL gradient that misses
the effect on later prefixes (the test suite checks the identity ∇KL = E[∇Σ_t k2_t] + E[Σ_t ∇log π_t Σ_{t'>t} k1_{t'}] to
float precision).
</details>"""),
    ("md", "sampling", """\
## Sampling: top-k and temperature

Top-k draws from π_k, the k largest logits renormalised. Scored with the full softmax (log π), the
estimate E_{π_k}[r ∇log π] is the gradient of neither J nor J_k = Σ_y π_k(y) r(y); scored with the
distribution actually sampled (log π_k), it is ∇J_k exactly. The same for temperature: sampled at T
and scored at T (the package's `temperature_scaled`) it is ∇J_T; scored at T = 1 it is not."""),
    ("code", "sampling-code", """\
for name in ("topk_full_softmax", "topk_sampled", "temperature_unscaled", "temperature_sampled"):
    e = sc.measure(name)
    others = ", ".join(f"cos to ∇{k[4:]} {v:.4f}" for k, v in e.items() if k.startswith("cos_J"))
    print(f"{name:22s} vs ∇{e['true']}: cos {e['cos_to_true']:.5f}, size {e['norm_ratio_along_true']:.4f}   ({others})")"""),
    ("md", "dpo", """\
## Online DPO at the start

At the first step π = π_ref, so h = 0 and the sigmoid loss's update for a pair is (β/2)(∇log π(y_c) − ∇log π(y_r)).
Over independent pairs with a **0/1 reward**, the winner is the one with r = 1 when they differ and
a tie has mean 0 by symmetry: E = β ∇J exactly (IPO: (2/β) ∇J). With a graded reward (the
sentiment-like one) the winner depends only on the *order* of the two rewards, so DPO follows a
rank-based objective instead: **predict** whether its cosine stays 1."""),
    ("code", "dpo-code", """\
for reward in ("correct", "sentiment"):
    s = scene(vocab=4, max_len=4, p_right=(0.2, 0.6), reward=reward)
    e = s.measure_dpo(beta=0.1, loss_type="sigmoid")
    print(f"{reward:10s} online DPO (sigmoid, β = 0.1) at π = π_ref: cos to ∇J {e['cos_to_true']:.5f}, "
          f"‖E g‖/‖∇J‖ {e['norm_ratio']:.5f}")"""),
    ("md", "dpo-answer", """\
<details><summary>Answer</summary>

With the 0/1 reward, cosine 1 (and β ∇J in size). With the graded reward, below 1: the pair's winner
depends on the order of the two rewards only, so Online DPO at π = π_ref climbs a rank-based objective,
not J.
</details>"""),
    ("md", "offpolicy", """\
## Off-policy: when the sampler is not the learner

Everything so far had ratio 1: the completions came from the policy that scores them. An
asynchronous trainer learns from completions drawn **k updates ago**. TRL 1.16 corrects the gap
with an importance weight, `vllm_importance_sampling_correction` (default mode `sequence_mask`,
C_max 3). `rlhf_scratch.microscope.offpolicy` builds a history: the learner is θ_8 after 8 steps of
fixed length along ∇J of the sentiment reward, and staleness k samples from θ_{8−k}. With
q = π_{θ_{8−k}} known for every completion, every expectation below is exact.

With A = r − V_q(x) and w = π(y)/q(y), **predict**, before running the next cell:

* with no correction, does the error ‖E g − ∇J‖/‖∇J‖ grow with k, or level off?
* full sequence IS (E_q[w A ∇log π]): how far from ∇J at k = 8?
* per-token weights w_t = π(y_t)/q(y_t) instead of the sequence's: better or worse than no correction,
  and exact or not?
* TRL's default drops every completion with w > 3. At k = 8 some weights pass 3: is it still exact?
* PPO's and RLOO's clipped ratios (ε = 0.2) against the stale sampler: are they corrections?"""),
    ("code", "offpolicy-code", """\
import math

from rlhf_scratch.microscope.cli import ExactArgs
from rlhf_scratch.microscope.offpolicy import clipped_estimators, correction
from rlhf_scratch.microscope.offpolicy_run import TRL_DEFAULT, kl_estimators, off_policy_scene, sampler_facts

args = ExactArgs(out="unused", vocab=4, max_len=4, p_right=(0.2, 0.6), off_policy_reward="sentiment",
                 stale_step=0.6, staleness=(1, 2, 4, 8), top_k=2)
off = off_policy_scene(args)  # the learner at the end of an 8-step history
rows = {"no correction": correction(None, None), "full IS": correction("sequence_truncate", math.inf),
        "per-token IS": correction("token_truncate", math.inf), "TRL default": correction(*TRL_DEFAULT),
        **{e.name: e for e in clipped_estimators() if e.name in ("ppo_clip", "rloo_clip")}}
print("error ‖E g − ∇J‖/‖∇J‖ of the learner, exact")
print(f"{'k':>2} {'KL(q‖π)':>8} {'max w':>6} {'P(w>3)':>7}  " + "  ".join(f"{n:>13s}" for n in rows))
for k in (0, 1, 2, 4, 8):
    s = off.stale(k)
    f = sampler_facts(off, s)
    errors = [off.measure(e, s)["rel_error"] for e in rows.values()]
    print(f"{k:>2} {f['kl_sampler_learner']:8.4f} {f['w_max']:6.2f} {f['p_w_above_3']:7.3f}  "
          + "  ".join(f"{x:13.4f}" for x in errors))"""),
    ("md", "offpolicy-answer", """\
<details><summary>Answer</summary>

The error of no correction grows with every step of staleness. **Full sequence IS is ∇J exactly**
at every k: E_q[(π/q) A ∇log π] = Σ_y π A ∇log π, and a constant baseline has mean 0 under π. Its
cost is variance (`off.measure(...)["variance"]`). Per-token weights roughly halve the bias and stop
there: a token's weight corrects that token, not the probability of the prefix that led to it.
TRL's default is exact as long as no weight exceeds 3. At k = 8 it drops the completions with
w > 3, the ones the learner moved toward, and is no longer exact. The clipped ratios are a trust
region, not a correction: they zero the terms whose ratio has left 1 ± ε, which are the terms the
learner's own updates moved, and what remains is not ∇J even at k = 1.
</details>

A different mismatch: the sampler uses **top-k 2** (or top-p) while the learner scores with the
full softmax. **Predict**: can any importance weight fix that? And for the KL penalty at k = 8,
which is closest to ∇KL(π‖π_ref): the learner's k1 in the reward, the sampler's k1 (as the rollout
recorded it), or the learner's k1 × π(y)/q(y)?"""),
    ("code", "offpolicy-topk-kl", """\
top_k = off.mismatches(args.top_k, args.top_p)[1]
f = sampler_facts(off, top_k)
print(f"{top_k.about}: π's mass the sampler can draw {f['support_mass']:.3f}")
for name, est in (("no correction", rows["no correction"]), ("full IS", rows["full IS"])):
    print(f"  {name:14s} error {off.measure(est, top_k)['rel_error']:.4f}")
kl = {e.name: e for e in kl_estimators()}
print("KL in the reward at staleness 8, error against ∇KL(π‖π_ref):")
for name in ("k1_reward", "k1_reward_sampler", "k1_reward_is"):
    e = off.measure(kl[name], off.stale(8))
    print(f"  {name:18s} error {e['rel_error']:.2e}, variance per completion {e['variance']:.2f}")"""),
    ("md", "offpolicy-answer-2", """\
<details><summary>Answer</summary>

No weight fixes top-k. The completions the sampler cuts are never drawn, so full IS follows the
gradient of J restricted to the sampler's support, not ∇J (`tests/unit/test_exact_offpolicy.py` checks
this identity exactly). The fix is to score with the distribution sampled. For the KL, only
the weighted one is exact: E_q[w k1 ∇log π] = Σ_y π k1 ∇log π = ∇KL(π‖π_ref). This is an unbiased
off-policy, sequence-level reverse-KL gradient, and it costs variance. The full off-policy tables,
with every IS mode over C, the Monte-Carlo group rows and one line of advice per knob, are in
[docs/exact.md](../docs/exact.md#off-policy-the-sampler-is-not-the-learner).
</details>"""),
    ("md", "takeaways", """\
## What to take away: in your own words

Before you look anything up, sort every estimator of this notebook into one of five kinds, with one
line each on *why*: **unbiased exactly**; **unbiased within Monte-Carlo error**; **the right direction
at the wrong size**; **biased in direction**; **zero in expectation**. Do the same for the off-policy
corrections. Then check your sorting against the answers under each section above, and against the
findings of [docs/exact.md](../docs/exact.md), which has the full table at the default settings — every
GRPO loss type, PPO's clipped surrogate, the three rewards, with n and standard errors. Where you and
the table disagree, the microscope is the referee: measure it."""),
    ("md", "open-problem", """\
## 13 · An open problem: less variance than PPO, at the same bias

Everything above had an answer under it. This has none here, and more than one answer is possible.

PPO's estimator of ∇J, with the *exact* value function, is Σ_t A_t ∇log π(y_t) with the one-step
advantage A_t = V(s_{t+1}) − V(s_t) (r at the end): unbiased, and far less noisy than REINFORCE. **Find an
estimator of ∇J from one completion with lower variance than PPO's, at the same bias (none).** The
scene is this notebook's environment (4 tokens, completions of at most 4, the two prompts) under the
sentiment-like reward, where every token matters.

The contract is the microscope's: `my_gradient_estimator(rows)` returns one scalar whose gradient with
respect to `rows.logits`, row by row, is that completion's estimate g(y). `rows` has `logits`
(`[n, seq, vocab]`, the policy's logits at each position), `logprobs` and `seq_logprobs()`, `rewards`,
`values` (the exact V of the state at each position), `comps.mask` and `comps.tokens`; and
`action_values(rows)` gives Q(s_t, a) at each position for **every** next token a, not only the one drawn.
`grade_gradient_estimator` sums over all 242 completions with their exact probabilities: the bias
‖E[g] − ∇J‖ / ‖∇J‖, the cosine, and the variance per completion (in units of ‖∇J‖²) come out exact, on a
board beside the package's estimators (recorded in `benchmarks/open_problem_2026-11-29.json`).

The cell starts you from REINFORCE. Change it; run it again; see where you land."""),
    ("code", "open-problem-code", """\
from rlhf_scratch.course.open_problem import action_values, grade_gradient_estimator


def my_gradient_estimator(rows):
    \"\"\"Σ over the rows of each completion's objective; its gradient per row is that completion's g(y).
    Here REINFORCE: r(y) log π(y), whose gradient is r(y) ∇log π(y). Make it better.\"\"\"
    return (rows.rewards * rows.seq_logprobs()).sum()


grade = grade_gradient_estimator(my_gradient_estimator)"""),
]


if __name__ == "__main__":
    write(PATH, CELLS, sys.argv[1:])
