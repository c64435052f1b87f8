"""Writes notebook 06 and its solutions (unexecuted): the cells are the strings below.

    notebooks/06_build_the_ppo_loop.ipynb                          the learner's: three stubs to write
    notebooks/solutions/06_build_the_ppo_loop_solutions.ipynb      the same cells with the stubs written out

    python notebooks/make_06_build_the_ppo_loop.py                 # write both
    python -m rlhf_scratch.course.execute_notebooks notebooks/solutions/06_build_the_ppo_loop_solutions.ipynb

The learner writes `phase_advantages`, `minibatch_objective` and `learning_phase` (rows 6-13 of the
pseudocode). Each is one `Exercise`: its signature and docstring are written once and shared by the
stub, whose body raises NotImplementedError, and the solution. The stub cells carry
`metadata["exercise"] = name` and the tag `exercise`, as in notebooks/exercises/; every other cell is
the same in both notebooks. tests/integration/test_course_loop.py runs the cells: the stubs raise,
and the solutions pass `check_learning_phase` and drive the loop. The learner's notebook is not
executed as shipped (`EXCLUDED` in rlhf_scratch/course/execute_notebooks.py); the solutions are.

Edit the cells here, not in the notebooks, so that the three never disagree.
"""

import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

sys.path.insert(0, str(Path(__file__).resolve().parent))  # notebook_generator beside it, however this file is loaded
from notebook_generator import PLAN  # noqa: E402 (course/plan.py: each exercise's difficulty and minutes)

NOTEBOOK = Path(__file__).with_name("06_build_the_ppo_loop.ipynb")
SOLUTIONS = Path(__file__).parent / "solutions" / "06_build_the_ppo_loop_solutions.ipynb"


@dataclass(frozen=True)
class Exercise:
    """A function the learner writes: its signature and docstring (shared), the solution's body,
    and what the stub's NotImplementedError says to write."""

    name: str
    signature: str
    body: str
    hint: str

    @property
    def stub(self) -> str:
        return f'{self.signature}\n    raise NotImplementedError("write {self.name}, {self.hint}")'

    @property
    def solution(self) -> str:
        return f"{self.signature}\n{self.body}"


TITLE = r"""# 6 · Build the PPO loop yourself

Notebook 01 computed every term of PPO's objective by hand and exercises 01 had you write each one; the derivations said where the clip comes from; exercises 03 had you write GAE and the value head's explained variance, exercises 04 the pieces around them (sampling, the EOS mask, the replay memory's minibatches), and exercises 07 the parts themselves: the value head module, the sampling loop and the replay memory, which this notebook trains with. Here you put them together into PPO-RLHF's **learning phase**, written from the pseudocode below: the advantages of a rollout, the objective of one minibatch, and the epochs of shuffled minibatches around it — three functions, about 40 lines of code. The notebook gives you the rest of the loop: the frozen reference, AdamW with two learning rates and `maximize=True`, the warmup-and-decay schedule, the rollout's scoring around your sampler and value head.

Then `check_learning_phase` runs your learning phase beside the package's from the same state and says, to float precision, whether they did the same thing — and if not, which mistake yours looks like. Once it passes, your loop trains the tiny model for a dozen phases (about 20 seconds on one CPU thread), and you predict, then see, what the KL coefficient does. The next notebook, 02, runs the package's own trainer — this loop with a run folder, logging and checkpoints around it — end to end.

You need: PyTorch, the policy gradient, and notebook 01's terms. Stuck, or done: [the solutions](solutions/06_build_the_ppo_loop_solutions.ipynb) hold the whole loop written out, to be read."""

SOLUTIONS_TITLE = r"""# 6 · Build the PPO loop: the solutions

[Notebook 06](../06_build_the_ppo_loop.ipynb) with its three functions written out — `phase_advantages`, `minibatch_objective`, `learning_phase` — in plain torch and the blog's functions, their lines marked with the rows of the pseudocode they do. Every other cell is notebook 06's. Read it once your `check_learning_phase` passes, or when it will not; the whole loop (setup, the three functions, `train`) is about 95 lines, docstrings included, that you can read top to bottom."""

THEORY = r"""## A short theory primer

**Tokens as a Markov decision process.** A completion of a prompt $q$ is an episode of `gen_len` steps. The *state* is the text so far, $s_t = (q, o_1, \dots, o_{t-1})$; the *action* is the next token $a_t = o_t$, drawn from the policy $\pi_\theta(\cdot \mid s_t) = \mathrm{softmax}(\text{logits}_\theta(s_t))$; the transition just appends it. The *reward is sparse*: one number at the end, $R = r(q, o)$ (here the sentiment classifier's probability of *positive*), and 0 at every step before. We want $\max_\theta J(\theta) = \mathbb{E}_{o \sim \pi_\theta}[R]$.

**REINFORCE.** $\nabla_\theta J = \mathbb{E}\big[\sum_t \nabla_\theta \log \pi_\theta(a_t \mid s_t)\, R\big]$: push up the log-probability of every token of a completion in proportion to its reward. Unbiased, but very noisy.

**A baseline: the value head.** Subtracting any $b(s_t)$ changes nothing in expectation ($\mathbb{E}_{a \sim \pi}[\nabla \log \pi(a \mid s)] = 0$) and removes a lot of variance. PPO learns $b = V_\phi(s_t)$, a small MLP on the model's final residual stream (`TransformerWithValueHead`), and uses the *advantage* of each token. The blog's one-step estimate:

$$A_t = V(s_{t+1}) - V(s_t), \qquad A_{\text{last}} = R - V(s_{\text{last}}),$$

and the value head regresses onto the returns $R_t = A_t + V_{\text{old}}(s_t)$: value loss $\tfrac12 c_{vf}\, \mathbb{E}_t[(V_\phi(s_t) - R_t)^2]$.

**The ratio and the clip (PPO).** Sampling is expensive, so each batch is trained on for several epochs. After the first step the policy is no longer the one that sampled, $\pi_{\text{old}}$, so each token is reweighted by the ratio $r_t(\theta) = \pi_\theta(a_t \mid s_t) / \pi_{\text{old}}(a_t \mid s_t)$, and the ratio is clipped so that one batch cannot move the policy far:

$$L_{\text{clip}}(\theta) = \mathbb{E}_t\big[\min\big(r_t \hat A_t,\ \mathrm{clip}(r_t, 1-\varepsilon, 1+\varepsilon)\, \hat A_t\big)\big], \qquad \hat A = \text{advantages whitened per minibatch}.$$

Once $r_t$ has left $[1-\varepsilon, 1+\varepsilon]$ in the direction $\hat A_t$ pushes it, the term is flat: no gradient.

**The KL leash.** A reward model can be fooled; a policy free to do anything finds text that scores well and reads badly. So the policy is held near the frozen reference model by a penalty on the full-vocabulary KL at every generated position, and kept exploring by an entropy bonus. The objective every minibatch ascends:

$$J(\theta) = L_{\text{clip}} - \tfrac12 c_{vf}\, \mathbb{E}[(V - R_t)^2] + c_{ent}\, \mathbb{E}[H(\pi_\theta(\cdot \mid s_t))] - \beta\, \mathbb{E}\big[\mathrm{KL}\big(\pi_\theta(\cdot \mid s_t) \,\|\, \pi_{\text{ref}}(\cdot \mid s_t)\big)\big].$$

It is *maximised*: AdamW with `maximize=True`, and `J.backward()`."""

PSEUDOCODE = r"""## The algorithm, and where each line lives

**PPO-RLHF** (one line per step; the right-hand columns say which code does it, in the package and in this notebook)

| # | step | in the package | here |
|---|---|---|---|
| 1 | $\theta$ ← the pretrained LM + a fresh value head $\phi$; $\theta_{\text{ref}}$ ← a frozen copy of the LM | `TransformerWithValueHead` (`algorithms/ppo/policy.py`), `ppo.policy.build_policy`; `models.policy.load_reference` | `build` |
| 2 | AdamW, `maximize=True`: trunk at `base_lr`, value head at `head_lr`; learning rate × $m(k)$: linear warmup, then linear decay | `optim.get_optimizer_and_scheduler` (`get_optimizer`, `get_lr_scheduler`) | `build`, `lr_multiplier` |
| 3 | **for** phase $k = 1 \dots$ `total_phases` **do** | `loop.run_training` | `train` |
| 4 | &nbsp;&nbsp; sample `batch_size` completions of the prompts from $\pi_\theta$ (top-k, `gen_len` tokens) | `Trainer.generate_sequences` → `rollout.generate_sequences` → `generation.generate` | `rollout_with_parts` (your `generate`) |
| 5 | &nbsp;&nbsp; score them, no gradients: $\log \pi_{\text{old}}(o_t)$, $V_{\text{old}}(s_t)$, $\mathrm{KL}(\pi_{\text{old}} \Vert \pi_{\text{ref}})$; the reward $R$ | `rollout.score_tokens`, `rollout.reward_call.score_completions` | `rollout_with_parts` (your value head) |
| 6 | &nbsp;&nbsp; $R \leftarrow (R - \bar R) / (\mathrm{std}\,R + \epsilon)$ | `RLHFTrainer.compute_advantages` → `reward.functions.normalize_reward` | **`phase_advantages`** |
| 7 | &nbsp;&nbsp; $A_t \leftarrow V(s_{t+1}) - V(s_t)$; $A_{\text{last}} \leftarrow R - V(s_{\text{last}})$ | `RLHFTrainer.compute_advantages` → `advantages.compute_advantages` | **`phase_advantages`** |
| 8 | &nbsp;&nbsp; returns $R_t \leftarrow A_t + V_{\text{old}}(s_t)$ | `memory.ReplayMemory` | **`learning_phase`** (your `ReplayMemory`) |
| 9 | &nbsp;&nbsp; **for** epoch $= 1 \dots$ `batches_per_learning_phase`, **for** each of `num_minibatches` shuffled minibatches **do** | `ReplayMemory.get_minibatches` → `memory.minibatch_rows` (torch's global RNG) | **`learning_phase`** |
| 10 | &nbsp;&nbsp;&nbsp;&nbsp; forward $\pi_\theta$: $\log \pi_\theta(o_t)$, $V(s_t)$, $H$; the reference: $\mathrm{KL}(\pi_\theta \Vert \pi_{\text{ref}})$ | `RLHFTrainer.minibatch_objective` (`vocab_terms.token_terms`, a chunk of positions at a time) | **`minibatch_objective`** |
| 11 | &nbsp;&nbsp;&nbsp;&nbsp; $J \leftarrow L_{\text{clip}} - \text{value loss} + \text{entropy bonus} - \beta\,\mathrm{KL}$ | `algorithms.ppo.compute_rlhf_objective` (`calc_clipped_sur_obj`, `calc_value_fn_loss`, …) | **`minibatch_objective`** |
| 12 | &nbsp;&nbsp;&nbsp;&nbsp; zero the gradients; `J.backward()`; clip the gradient norm; step (skip it if $J$ or the norm is not finite) | `Trainer.optimizer_step` → `optim.clip_and_step` | **`learning_phase`** |
| 13 | &nbsp;&nbsp; **end for**; `scheduler.step()` — once per phase | `Trainer.ascend` | **`learning_phase`** |
| 14 | **end for** | | |

You write the rows in **bold**, 6–13: the learning phase. The package's is `RLHFTrainer.learning_phase` (`algorithms/ppo/trainer.py`); `Trainer.ascend` (`engine/trainer.py`) is its minibatch loop."""

IMPORTS = r"""from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlhf_scratch  # noqa: F401
from rlhf_scratch.core.advantages import compute_advantages
from rlhf_scratch.config import make_args
from rlhf_scratch.rollout.generation import attention_mask_or_none
from rlhf_scratch.models.loading import load_lm
from rlhf_scratch.core.objectives import (calc_approx_kl, calc_clip_fraction, calc_clipped_sur_obj, calc_entropy_bonus,
                                     calc_kl_penalty, calc_value_fn_loss, generated_span, get_log_probs,
                                     temperature_scaled)
from rlhf_scratch.reward.functions import normalize_reward, reward_fn_sentiment_imdb
from rlhf_scratch.course.loop_check import check_learning_phase
from rlhf_scratch.course.learner_parts import learner_parts, rollout_with_parts

torch.set_num_threads(1)"""

PARTS_MD = r"""## 0 · Your parts

Exercises 07 had you write the value head module, the sampling loop and the replay memory. This notebook trains with **yours**: the cell below runs your `notebooks/exercises/07_parts_exercises.ipynb` (its setup and your three cells, not its other cells), runs each check, and takes each part whose check passes. Where one is not written yet, or fails its check, the package's stands in and the cell says so: `TransformerWithValueHead` and `ReplayMemory` from the package; for `generate`, whose contract the package's sampler does not share, the course's solution (`rlhf_scratch/course/solutions_parts.py`). `check_learning_phase` below grades your learning phase with whichever `ReplayMemory` you use, so a memory that draws its shuffles unlike the package's shows there too."""

PARTS = r"""parts = learner_parts("exercises/07_parts_exercises.ipynb")  # yours where its check passes, said for each"""

SOLVED_PARTS = r"""parts = learner_parts("exercises/solutions/07_parts_solutions.ipynb")  # the solutions of exercises 07"""

SETUP_MD = r"""## 1 · The pieces: policy with value head, reference, optimizer, schedule

The config is the package's `RLHFArgs` (every field documented in `rlhf_scratch/config.py`); only the run's length and size are changed from the tiny preset's defaults. Its coefficients: `clip_coef` ε = 0.2, `vf_coef` 0.15, `ent_coef` 0.001, `beta` β = 0.1, `head_lr` 5e-4 for the value head."""

SETUP = r"""args = make_args("tiny", total_phases=12, batch_size=32, num_minibatches=4, batches_per_learning_phase=2,
                 gen_len=16, base_lr=3e-4, warmup_steps=2, seed=1, threads=1, device="cpu")


def lr_multiplier(args, phase):
    # linear warmup 0 -> 1 over warmup_steps phases, then linear decay to final_scale at the last phase
    last = args.total_phases - 1
    if phase >= last:
        return args.final_scale
    if phase < args.warmup_steps:
        return phase / args.warmup_steps
    return 1 - (1 - args.final_scale) * (phase - args.warmup_steps) / (last - args.warmup_steps)


def build(args):
    torch.manual_seed(args.seed)
    lm = load_lm("tiny").train()
    policy = parts.TransformerWithValueHead(lm, args.detach_value_head)     # pi_theta and V_phi, one forward (yours)
    ref_model = load_lm("tiny").eval().requires_grad_(False)                # pi_ref: frozen
    head = list(policy.value_head.parameters())
    trunk = [p for p in policy.parameters() if all(p is not h for h in head)]
    optimizer = torch.optim.AdamW([{"params": trunk, "lr": args.base_lr},   # pretrained trunk
                                   {"params": head, "lr": args.head_lr}],   # fresh head
                                  maximize=True)                            # we ASCEND J
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda phase: lr_multiplier(args, phase))
    return policy, lm, ref_model, optimizer, scheduler"""

ADVANTAGES_MD = r"""## 2 · The advantages of a rollout (rows 6–7)

The rollout holds what the sampling policy saw, without gradients: `rollout.rewards` $R$ `[batch]`, `rollout.values` $V_{\text{old}}$ at every position `[batch, seq_len]`, `rollout.completion_mask` `[batch, gen_len]` (False after an EOS), `rollout.prefix_len`. Normalise the rewards across the batch when `args.normalize_reward` (`normalize_reward`), then take the blog's one-step advantages (`compute_advantages`, yours from exercises 01). No gradient flows through either: they are targets."""

ADVANTAGES = Exercise("phase_advantages", r'''def phase_advantages(rollout, args):
    """Rows 6-7: the advantage A_t of every generated token of `rollout`, [batch, gen_len], no gradients.

    R <- (R - mean R) / (std R + eps) when args.normalize_reward (normalize_reward), then
    A_t = V(s_{t+1}) - V(s_t) and A_last = R - V(s_last), 0 after an EOS
    (compute_advantages(values, rewards, prefix_len, mask=completion_mask)).
    """''', r"""    with torch.no_grad():
        rewards = normalize_reward(rollout.rewards) if args.normalize_reward else rollout.rewards   # row 6
        return compute_advantages(rollout.values, rewards, rollout.prefix_len,                     # row 7
                                  mask=rollout.completion_mask)""",
    "rows 6-7 of the table: normalize_reward, then compute_advantages")

OBJECTIVE_MD = r"""## 3 · The objective of one minibatch (rows 10–11)

One forward pass of your `TransformerWithValueHead` (exercises 07) gives the logits and $V(s_t)$ at every position (the value head reads `ln_final.hook_normalized`, detached when `args.detach_value_head`: then only the policy terms train the trunk). The logits at position $t$ predict token $t+1$, so the positions `prefix_len-1 … seq_len-2` predict the completion (`generated_span(prefix_len)`), for the log-probs and the values alike. The reference runs its own forward, without gradients. Every distribution is the one that was sampled, softmax(logits / T) (`temperature_scaled`; T = 1 here). Every term is a mean over the completion's kept tokens: pass `mask=mb.completion_mask`.

The functions are yours from exercises 01: `get_log_probs`, `calc_clipped_sur_obj`, `calc_value_fn_loss`, `calc_entropy_bonus`, `calc_kl_penalty` (and `calc_clip_fraction`, `calc_approx_kl` for the statistics). Watch the order of the KL's arguments: the penalty is $\mathrm{KL}(\pi_\theta \| \pi_{\text{ref}})$."""

OBJECTIVE = Exercise("minibatch_objective", r'''def minibatch_objective(policy, ref_model, mb, args, temperature):
    """Rows 10-11: J on one minibatch, with a gradient, and its statistics (floats).

    mb (a ReplayMinibatch)   sample_ids, attention_mask [mb, seq_len]; completion_mask, logprobs (log pi_old),
                             advantages, returns [mb, gen_len]; prefix_len = seq_len - gen_len
    policy(ids, attention_mask=attention_mask_or_none(mb.attention_mask))  ->  logits [mb, seq, vocab], V [mb, seq]
    ref_model(ids, attention_mask=...)                                      ->  logits [mb, seq, vocab]

    J = clipped surrogate - value loss + entropy bonus - beta * KL(pi_theta || pi_ref), coefficients from args
    (clip_coef, vf_coef, ent_coef, beta). Returns (J, stats): stats["objective/total"] = J.item() at least;
    the package also logs "losses/clipped_surrogate", "losses/value_loss", "losses/entropy_bonus",
    "losses/kl_penalty" (each term as it enters J, before its sign), "losses/clipfrac", "losses/approx_kl".
    """''', r"""    prefix_len = mb.sample_ids.shape[1] - mb.logprobs.shape[1]
    gen, mask = generated_span(prefix_len), mb.completion_mask                   # positions prefix_len-1 ... seq-2
    attn = attention_mask_or_none(mb.attention_mask)
    logits, values = policy(mb.sample_ids, attention_mask=attn)                 # row 10: [mb, seq, vocab], [mb, seq]
    with torch.no_grad():
        ref_logits = ref_model(mb.sample_ids, attention_mask=attn)             # the reference forward
    logits_T = temperature_scaled(logits[:, gen], temperature)                 # the distributions that were sampled
    ref_logits_T = temperature_scaled(ref_logits[:, gen], temperature)
    logprobs = get_log_probs(logits, mb.sample_ids, prefix_len, temperature)   # log pi_theta(o_t), [mb, gen_len]
    terms = {                                                                  # row 11, term by term
        "clipped_surrogate": calc_clipped_sur_obj(logprobs, mb.logprobs, mb.advantages, args.clip_coef, mask=mask),
        "value_loss": calc_value_fn_loss(values[:, gen], mb.returns, args.vf_coef, mask=mask),
        "entropy_bonus": calc_entropy_bonus(logits_T, args.ent_coef, mask=mask),
        "kl_penalty": calc_kl_penalty(logits_T, ref_logits_T, args.beta, mask=mask),   # KL(pi_theta || pi_ref)
    }
    J = terms["clipped_surrogate"] - terms["value_loss"] + terms["entropy_bonus"] - terms["kl_penalty"]
    stats = {"objective/total": J.item(), **{f"losses/{k}": v.item() for k, v in terms.items()},
             "losses/clipfrac": calc_clip_fraction(logprobs, mb.logprobs, args.clip_coef, mask=mask),
             "losses/approx_kl": calc_approx_kl(logprobs, mb.logprobs, mask=mask)}
    return J, stats""",
    "rows 10-11 of the table: the two forwards, the four terms, J")

PHASE_MD = r"""## 4 · One learning phase (rows 6–13)

The advantages, then the replay memory, yours from exercises 07: `parts.ReplayMemory(sample_ids, attention_mask, completion_mask, logprobs, advantages, values, num_minibatches, batches_per_learning_phase)` makes the returns $R_t = A_t + V_{\text{old}}(s_t)$ (row 8) and `memory.get_minibatches()` yields `batches_per_learning_phase` shuffles of the batch, each cut into `num_minibatches` minibatches. It draws one `torch.randperm` per epoch from torch's global RNG, as the package does: draw nothing else from it, or the check sees other minibatches. One guarded step per minibatch (row 12), and **one** scheduler step at the end of the phase (row 13). Return each statistic's mean over the minibatches, each taken before that minibatch's step (the package's `mean_stats`), as a dict of floats."""

PHASE = Exercise("learning_phase", r'''def learning_phase(policy, ref_model, rollout, args, optimizer, scheduler):
    """Rows 6-13: one PPO learning phase on `rollout`, training `policy` in place; returns the mean stats.

    optimizer: AdamW(maximize=True), trunk and value head; scheduler: LambdaLR, stepped once per phase.
    Per minibatch: zero the gradients, J.backward(), clip the norm to args.max_grad_norm, and step only
    when J and the norm are finite.
    """''', r"""    advantages = phase_advantages(rollout, args)                                  # rows 6-7
    memory = parts.ReplayMemory(rollout.sample_ids, rollout.attention_mask, rollout.completion_mask, rollout.logprobs,
                          advantages, rollout.values, args.num_minibatches, args.batches_per_learning_phase)  # row 8
    stats = []
    for mb in memory.get_minibatches():                     # row 9: epochs x minibatches, shuffled
        J, mb_stats = minibatch_objective(policy, ref_model, mb, args, rollout.temperature)   # rows 10-11
        optimizer.zero_grad()                               # row 12
        J.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
        if torch.isfinite(J) and torch.isfinite(grad_norm):  # one bad minibatch must not poison the weights
            optimizer.step()
        stats.append(mb_stats)
    scheduler.step()                                         # row 13: once per phase, the schedule counts phases
    return {k: float(np.mean([s[k] for s in stats])) for k in stats[0]}""",
    "rows 6-13 of the table: phase_advantages, ReplayMemory, a guarded step per minibatch, one scheduler step")

EXERCISES = (ADVANTAGES, OBJECTIVE, PHASE)
"""The three functions the learner writes, in the order of the notebook."""

CHECK_MD = r"""## 5 · Check it against the package

`check_learning_phase(learning_phase)` builds an `RLHFTrainer` on the tiny preset (seed 0, batch 16, 2 minibatches, 8 tokens, 2 epochs), trains it one phase so that the policy has left the reference, takes one rollout — 16 prompts of 2 to 9 tokens, left-padded, whose completions end with EOS at lengths 1 to 7 (the pad token after it) or run to 8 tokens, so that a mask or a padding bug shows — and then runs *your* `learning_phase` on deep copies of that state and `trainer.learning_phase` on the original, torch's RNG in the same state before each (it shuffles the minibatches). It compares the scheduler exactly, each parameter group's update to a relative 1e-3, and the statistics both return. Your phase works on full logits with autograd, the package's a chunk of positions at a time with a hand-written backward, so the numbers differ in the last float32 digits — under 1e-4 of the update — while each classic mistake moves it by 1e-2 or more. On a mismatch it first looks at the first minibatch, before any optimizer step has mixed the errors: the gradient of your J there says whether the objective itself differs, and in which parameter group (trunk or value head). Then it names the planted mistake yours reproduces — the objective minimised, the KL penalty added or the wrong way round, the generated span off by one, value gradients into the trunk, the completion mask ignored in J or in the advantages, the value head detached, and ten more."""

CHECK_TODO = r"""Until all three functions are written the check stops at the first `NotImplementedError` and says which one to write. When it passes, run the loop below; when it fails, read the message: it says what differs (the scheduler, the minibatches, which parameter group, whether J itself at the first minibatch) and, when it recognises your mistake, how to fix it."""

CHECK_TRY = r"""Try it: break one line above (`+ terms["kl_penalty"]`, `calc_kl_penalty(ref_logits_T, logits_T, …)`, `(-J).backward()`, no `scheduler.step()`), rerun the cell, read the message, and put it back."""

CHECK = r"""print(check_learning_phase(learning_phase))"""

LOOP_MD = r"""## 6 · The loop

A phase is a rollout (`rollout_with_parts`: your `generate` samples with the package's sampler at the run's temperature and top-k, your value-head module and the reference score the samples, the classifier rewards them; the package's `make_rollout` does the same with its own parts) and one learning phase on it. The logged KL is the rollout's: the per-token full-vocabulary $\mathrm{KL}(\pi_{\text{old}} \| \pi_{\text{ref}})$ of the policy that *sampled* this phase, over its completions."""

LOOP = r"""def train(args):
    policy, lm, ref_model, optimizer, scheduler = build(args)
    history = []
    for phase in range(1, args.total_phases + 1):
        lr = optimizer.param_groups[0]["lr"]                 # the trunk's learning rate this phase
        rollout = rollout_with_parts(parts, policy, lm, ref_model, [args.prefix] * args.batch_size,  # your generate
                                     reward_fn_sentiment_imdb, args)
        stats = learning_phase(policy, ref_model, rollout, args, optimizer, scheduler)
        kl = rollout.kl[rollout.completion_mask].mean().item()
        history.append({"phase": phase, "lr": lr, "reward": rollout.scores.mean().item(), "kl": kl, **stats})
        print(f"phase {phase:2d}  lr {lr:.1e}  reward {history[-1]['reward']:.3f}  KL {kl:.4f}  "
              f"clipfrac {stats['losses/clipfrac']:.3f}  approx_kl {stats['losses/approx_kl']:.4f}")
    return history, policy


history, policy = train(args)"""

PLOT = r"""def plot(history, title=""):
    phases = [h["phase"] for h in history]
    fig, (ax_r, ax_kl) = plt.subplots(1, 2, figsize=(10, 3.2))
    ax_r.plot(phases, [h["reward"] for h in history], marker="o")
    ax_r.set(xlabel="phase", ylabel="mean reward", title=f"reward {title}")
    ax_kl.plot(phases, [h["kl"] for h in history], marker="o", color="C3", label="KL(π_old ‖ π_ref)")
    ax_kl.set(xlabel="phase", ylabel="nats per token", title=f"KL to the reference {title}")
    ax_lr = ax_kl.twinx()
    ax_lr.plot(phases, [h["lr"] for h in history], ls="--", color="grey", label="trunk learning rate")
    ax_lr.set_ylabel("learning rate")
    fig.legend(loc="upper center", bbox_to_anchor=(0.75, 0.0), ncol=2, frameon=False)
    plt.tight_layout()
    plt.show()


plot(history)"""

SEE = r"""> **What you should see** (this notebook's settings, seed 1: one run, n = 1; one CPU thread)
>
> - **Reward** (the classifier's probability of *positive*, mean of 32 samples): 0.50 and 0.41 in phases 1 and 2 — both sampled by the reference itself (see below), so the 0.09 between them is the noise of a 32-sample mean — then 0.57–0.67 in phases 3–9 and 0.73–0.75 in phases 10–12.
> - **KL** (nats per token): **exactly 0 in phases 1 and 2**, 0.10 in phase 3, then growing, with dips, to 0.26 in phase 12.
> - **clipfrac**: 0 in phase 1; 0.54 in phase 2 and 0.45 in phase 3, the first phases whose steps move the weights (Adam moves every weight by about the learning rate per step, whatever the size of its gradient); then falling with the learning rate to 0.02 in phase 12. `approx_kl`, how far a phase's four steps move the policy from the one that sampled: 0.11 in phase 2, 0.002 in phase 12.
> - The check above, with the solutions' three functions (and the solutions of exercises 07): relative update errors of 7.1e-5 (trunk) and 1.5e-6 (value head), tolerance 1e-3.
>
> These are the solutions' numbers. A correct phase of yours that adds its floats in another order agrees with them to about 1e-5 in the first phases, but sampling is discrete: after a few phases one token drawn differently makes another run, so expect the shape and the sizes, not every digit.
>
> **Why is the KL 0 twice?** The schedule warms up over `warmup_steps` = 2 phases: the multiplier of phase $k$ (counting from 0) is $k/2$, so **phase 1 trains at learning rate 0**. AdamW still runs — its moments fill up — but no weight moves, and clipfrac is 0 because every ratio $\pi_\theta / \pi_{\text{old}}$ stays exactly 1. Phase 2's rollout is therefore sampled by the reference itself: KL exactly 0. Phase 2 trains at half the learning rate, and phase 3 is the first to sample a changed policy. The package's 100-phase run (`python -m rlhf_scratch.train sentiment`, README) shows the same two zeros with its 10-phase warmup."""

PREDICT = r"""## 7 · Predict, then run

Before you run the cell below, write down what you expect the KL curve (and the reward) to do over these 12 phases with **β = 0** — no leash — and with **β = 1**, ten times the default. Then set `BETA` and run it (about 20 seconds a run); run both.

<details><summary>What we measured (open after predicting)</summary>

Seed 1, one run each (n = 1), these settings, trained with the solutions of exercises 07 (measured 2026-11-29):

| β | KL, phases 1–2 | KL, phase 12 | mean reward, phases 10–12 |
|---|---|---|---|
| 0 | 0 | 0.93, and still rising | 0.84 |
| 0.1 (above) | 0 | 0.26 | 0.74 |
| 1 | 0 | 0.04 (0.04–0.08 from phase 3 on) | 0.68 |

The first two phases are the same whatever β: there is nothing to leash before the policy has moved. Without the penalty the KL climbs all the way and the reward climbs faster — the policy is free to write whatever the classifier likes. With β = 1 the KL stays flat near 0.05 nats per token, and the reward gains about half of what it gains at β = 0 (from about 0.46 in phases 1–2). How much of the β = 0 run's extra reward is good writing and how much is the classifier being fooled is the over-optimisation question of notebook 03.
</details>"""

PREDICT_CODE = r"""BETA = None  # your prediction first; then 0.0, then 1.0

if BETA is not None:
    beta_history, _ = train(replace(args, beta=BETA))
    plot(beta_history, title=f"(β = {BETA})")"""

NEXT = r"""## Where next

- Your loop is the package's `RLHFTrainer.learning_phase` and `Trainer.ascend` (`rlhf_scratch/engine/trainer.py`), with PPO's `minibatch_objective` (`rlhf_scratch/algorithms/ppo/trainer.py`), the bookkeeping taken out; `loop.run_training` adds the run folder, checkpoints, logging and samples around the same two calls.
- The package computes the vocabulary-wide terms a chunk of positions at a time (`vocab_terms.token_terms`) instead of materialising `[minibatch, seq, vocab]` logits as you did: the same numbers, less memory (GPT-2's vocabulary is 50,257).
- Swap `compute_advantages` for `compute_gae_advantages` (`--advantage gae`) and see what the blog meant by GAE blowing up (you wrote it in exercises 03); or drop the value head altogether: that is RLOO and GRPO (notebook 03, after 02)."""


def with_plan(note: str, name: str) -> str:
    """The exercise's note with its difficulty and time (course/plan.py) under the heading."""
    heading, _, rest = note.partition("\n")
    return f"{heading}\n\n{PLAN.plan_line(name)}\n{rest}"


def exercise_cell(ex: Exercise, solved: bool):
    """The stub (the learner's notebook) or the solution, tagged as notebooks/exercises/ tags its stubs."""
    meta = {"exercise": ex.name, "tags": ["exercise"]}
    return new_code_cell(ex.solution if solved else ex.stub, id=f"{ex.name}-{'solution' if solved else 'stub'}",
                         metadata=meta)


def cells(solved: bool) -> list:
    """Notebook 06's cells: with the three functions as stubs (`solved=False`) or written out."""
    advantages, objective, phase = (exercise_cell(ex, solved) for ex in EXERCISES)
    return [
        new_markdown_cell(SOLUTIONS_TITLE if solved else TITLE, id="title"),
        new_markdown_cell(THEORY, id="theory"),
        new_markdown_cell(PSEUDOCODE, id="pseudocode"),
        new_code_cell(IMPORTS, id="imports"),
        new_markdown_cell(PARTS_MD, id="parts-note"),
        new_code_cell(SOLVED_PARTS if solved else PARTS, id="parts"),
        new_markdown_cell(SETUP_MD, id="setup-note"),
        new_code_cell(SETUP, id="setup"),
        new_markdown_cell(with_plan(ADVANTAGES_MD, "phase_advantages"), id="phase_advantages-note"),
        advantages,
        new_markdown_cell(with_plan(OBJECTIVE_MD, "minibatch_objective"), id="minibatch_objective-note"),
        objective,
        new_markdown_cell(with_plan(PHASE_MD, "learning_phase"), id="learning_phase-note"),
        phase,
        new_markdown_cell(CHECK_MD + "\n\n" + (CHECK_TRY if solved else CHECK_TODO), id="check-note"),
        new_code_cell(CHECK, id="check", metadata={"tags": ["check"]}),
        new_markdown_cell(LOOP_MD, id="loop-note"),
        new_code_cell(LOOP, id="loop"),
        new_code_cell(PLOT, id="plot"),
        new_markdown_cell(SEE, id="see"),
        new_markdown_cell(PREDICT, id="predict"),
        new_code_cell(PREDICT_CODE, id="predict-code"),
        new_markdown_cell(NEXT, id="next"),
    ]


def notebook(solved: bool) -> nbformat.NotebookNode:
    nb = new_notebook(cells=cells(solved))
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.validate(nb)
    return nb


NOTEBOOKS = {NOTEBOOK: False, SOLUTIONS: True}
"""Each notebook this file writes, and whether its three functions are written out."""


def loop_lines() -> int:
    """Lines of code (not blank) in the solutions' loop: setup, the three functions, train."""
    sources = (SETUP, *(ex.solution for ex in EXERCISES), LOOP)
    return sum(1 for cell in sources for line in cell.splitlines() if line.strip())


def main() -> None:
    for path, solved in NOTEBOOKS.items():
        path.parent.mkdir(exist_ok=True)
        nb = notebook(solved)
        nbformat.write(nb, path)
        print(f"wrote {path} ({len(nb.cells)} cells)")
    print(f"the loop, solved: {loop_lines()} lines of code")


if __name__ == "__main__":
    main()
