"""Writes notebook 11 and its solutions: the cells are the strings below.

    notebooks/11_multi_turn_episodes.ipynb                          the learner's: five stubs to write
    notebooks/solutions/11_multi_turn_episodes_solutions.ipynb      the same cells with the stubs written out

    python notebooks/make_11_multi_turn_episodes.py             # write both, then execute the solutions (about 10 s)
    python notebooks/make_11_multi_turn_episodes.py --no-run    # write only

As notebooks 09 and 10 (`notebook_generator.exercise_cells`): each stub is one function of
`rlhf_scratch/course/solutions_episodes.py`, its signature and docstring read from there (one definition),
its body `raise NotImplementedError`; the solution cell is the function's source. Stub cells carry
`metadata["exercise"] = name` and the tag `exercise`, each followed by its check cell (tag `check`). The
learner's notebook is not executed as shipped (`EXCLUDED` in rlhf_scratch/course/execute_notebooks.py); the
solutions are: the package's calculator sibling (`--model arithmetic_calc`) samples real episodes through the
package's calculator (`rollout.episodes.generate_episodes`), and the learner's functions are run on them beside
the package's.

Edit the text here, not in the notebooks, then run this file.
"""

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell
from notebook_generator import exercise_cells, graded_notebook, write_graded

HERE = Path(__file__).parent
NOTEBOOK = HERE / "11_multi_turn_episodes.ipynb"
SOLUTIONS = HERE / "solutions" / "11_multi_turn_episodes_solutions.ipynb"
SOURCE = HERE.parent / "rlhf_scratch" / "course" / "solutions_episodes.py"
"""The solutions, read as text (this file runs without the package on the path)."""

TITLE = r"""# 11 · Multi-turn episodes: the loss mask of a tool-using episode

An episode with a tool is several turns: the model writes a call, `<calc>47*85</calc>`, the tool answers, `3995=`, and the model writes its answer, `3995`. The RL libraries run such episodes (TRL's environments, verl's agent loop, NeMo Gym, SkyRL-gym), and their users keep filing the same bugs, because every multi-turn path "re-implements the dangerous parts — tokenization across turns, the loss mask, logprob capture" (huggingface/trl#5974): the loss trained on the tool's reply, the KL counted over tokens the model never chose, the model's tokens changed by decoding its text and encoding it again (verl#3960, trl#5145, minimind#850), a mask one position off at a turn's boundary.

You write the five pieces where those bugs live, each checked (a check names the classic mistake it recognises): `assemble_completions` (an episode's segments into the rollout's ids and its mask), the three terms that read the mask, `sequence_log_probs`, `grpo_loss` and `masked_kl_mean`, and `add_turn` (the model's turn kept as the ids it sampled). Then the package's small arithmetic model that can call a calculator samples real episodes, and your functions run on them beside the package's. Once written, the notebook runs in about 10 s on a 2-core CPU.

You need the masks of exercises 01 and 04 (padding, the EOS mask) and GRPO's loss (exercises 02, notebook 10). Stuck, or done: [the solutions](solutions/11_multi_turn_episodes_solutions.ipynb). The episodes in the package: [docs/environments.md](../docs/environments.md)."""

SOLUTIONS_TITLE = r"""# 11 · Multi-turn episodes: the solutions

[Notebook 11](../11_multi_turn_episodes.ipynb) with its five functions written out (they are `rlhf_scratch/course/solutions_episodes.py`, tested equal to the package's `rollout.episodes` and `core.objectives`). Every other cell is notebook 11's."""

IMPORTS = r"""import warnings

import torch

from rlhf_scratch.course import (
    check_add_turn,
    check_assemble_completions,
    check_grpo_loss,
    check_masked_kl_mean,
    check_sequence_log_probs,
)

torch.set_num_threads(1)
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto in a kernel without widgets
T, F = True, False"""

EPISODE_MD = r"""## 1 · An episode is segments

The package keeps an episode as a list of **segments**, each a run of token ids and its author: the model's turn, exactly as it was sampled, or the environment's reply (`rlhf_scratch/rollout/episodes.py`). For the rollout every algorithm reads, the segments are laid one after another after the prompt as `completion_ids`, right-padded to `gen_len` (the budget of the whole episode, the tool's tokens included, as verl's `response_length`), and `completion_mask` says which tokens are the model's:

    prompt | model turn 1 ........ | tool's reply  | model turn 2 ...... | pad ...
           | <calc>47*85</calc>     | 3995=         | 3995<|endoftext|>   |
    mask   | T  T  T  T  T  T  T    | F  F  F  F  F | T  T  T  T  T       | F ...

The calculator's reply is the result and an `=` that marks its end. The model read the reply (it is in the ids, so the forward that scores the episode sees it in place), but it never chose it: the mask is False there, and every term of the loss reads the mask. verl's batch calls the same mask `response_mask` (beside `attention_mask`, True on the tool's tokens too); TRL keeps a `tool_mask` and multiplies it into its `completion_mask`.

Write `assemble_completions(episodes, gen_len, pad)`: each episode a list of `(ids, by_model)` pairs, returning `(completion_ids, completion_mask)`, a long and a bool tensor of shape `[batch, gen_len]`. Mind the boundaries: a segment of n tokens that starts at position s covers s … s + n − 1."""

EPISODE_APPLY = r"""two_turns = [((15, 5, 8, 13, 9, 6, 16), T), ((4, 10, 10, 6, 14), F), ((4, 10, 10, 6, 0), T)]  # the picture's ids
ids, mask = assemble_completions([two_turns], gen_len=20, pad=0)
print("ids ", ids[0].tolist())
print("mask", "".join("T" if m else "." for m in mask[0].tolist()))"""

LOSS_MD = r"""## 2 · Every term reads the mask

A batch of episodes carries two masks over the completion, as verl's does: `completion_mask`, True on the model's tokens (what you built), and `attention_mask`, True on every token of the episode, the tool's too, False on the padding (what the forward reads). Single-turn code often takes the loss mask from the attention mask (verl's `compute_response_mask` does, for one turn); in an episode with a tool that trains on the tool's reply. Every term of the loss reads `completion_mask`:

| term | formula | where it is in the package |
|---|---|---|
| log π(o\|q), RLOO's ratio and DPO's loss | Σ_t m_t log π_t, a **sum** | `core.objectives.sequence_log_probs` |
| GRPO's loss (TRL's `loss_type="grpo"`) | (1/B) Σ_i (Σ_t m_it ℓ_it) / \|o_i\|, with \|o_i\| = Σ_t m_it the model's tokens | `algorithms.grpo.loss.aggregate_grpo_terms` |
| the KL to the reference, as TRL logs it | k3 per token, kl_t = e^δ − δ − 1 with δ = log π_ref − log π, then Σ m·kl / Σ m over the batch | `core.objectives.masked_mean` |

The checks' batch is two episodes of six positions: a two-turn one (model, model, tool, tool, model, model) and a shorter one (model, tool, tool, model, pad, pad), with the tool's tokens carrying numbers far from the model's, so that counting them anywhere gives another number. A position outside the mask may hold anything, `-inf` included (a token the model could not have sampled). Write the three functions; each takes both masks, as a batch carries them."""

LOSS_PREDICT = r"""**Predict**: a two-turn episode whose final answer was wrong: its advantage is −1, although the calculator's reply was right (`47*85` → `3995=`, the model then wrote `3965`). The per-token loss is −A · log π_t = +log π_t. If the loss read the attention mask, and so trained on the reply too, what would one step of gradient descent do to the model's probability of writing `3995` after `<calc>47*85</calc>`?"""

LOSS_SEE = r"""logprobs = torch.tensor([[-0.1, -0.2, -0.3, -0.4, -0.5, -0.6]], requires_grad=True)
completion_mask = torch.tensor([[T, T, F, F, T, T]])  # model <calc>…</calc>, tool 3995=, model 3965
attention_mask = torch.ones_like(completion_mask)
advantage = -1.0
for name, mask in (("completion_mask", completion_mask), ("attention_mask, the reply trained on", attention_mask)):
    logprobs.grad = None
    grpo_loss(-advantage * logprobs, mask, attention_mask).backward()
    print(f"{name:38s} d loss / d log π at the reply: {logprobs.grad[0, 2:4].tolist()}")"""

LOSS_ANSWER = r"""<details><summary>Answer</summary>

Read with the attention mask, the reply's tokens get a positive gradient of the loss, so gradient descent **lowers** their log-probability: the update teaches the model that 47 × 85 is *not* 3995, a right fact unlearned because the episode went wrong later. With a positive advantage it would instead teach the model to write the tool's output itself, which is exactly what the tool was there to spare it. Read with `completion_mask` the gradient there is 0: the reply is context, the credit or blame goes to the model's own tokens (the call, the answer). The same holds for the KL: a reply the reference finds unlikely would raise the penalty whatever the model did.
</details>"""

TOKENS_MD = r"""## 3 · Token in, token out

A tool answers in text (TRL's tools return strings; verl's too). The text of the reply must be encoded; the model's turn must **not** be: its ids are the tokens it sampled, with their log-probs, and a decode → encode round trip can give other tokens. A BPE vocabulary holds frequent strings whole, so a model that wrote `2`, `*`, `3` one token at a time gets back the one token `2*3`; a space can move between tokens; special tokens can vanish. Trained on the changed ids, the log-probs are of tokens the model never chose (verl#3960, trl#5145, minimind#850). The checks use the calculator's tokenizer with one merge added, `2*3` as one token:"""

TOKENS_SHOW = r"""from rlhf_scratch.course.checks_episodes import merging_tokenizer

tokenizer = merging_tokenizer()
sampled = [15, 3, 13, 4, 16]  # <calc> 2 * 3 </calc>, as the model sampled it
round_trip = tokenizer.encode(tokenizer.decode(sampled), add_special_tokens=False)
print(f"sampled {sampled} = {tokenizer.decode(sampled)!r}")
print(f"decoded and encoded again: {round_trip} = {[tokenizer.decode([t]) for t in round_trip]}")"""

TURN_MD = r"""Write `add_turn(segments, turn_ids, observation, tokenizer)`: the episode's segments after one more turn, the model's `turn_ids` as sampled, then the tool's reply `observation` (text) encoded on its own (`tokenizer.encode(observation, add_special_tokens=False)`), when there is one: an episode that ended has no reply."""

REAL_MD = r"""## 4 · Real episodes with the package's calculator

The package's arithmetic task has a calculator environment (`--env calculator`, `rlhf_scratch/reward/calculator.py`): a turn that ends with `</calc>` is a call, the calculator answers with the result's tokens and `=` (an error token `?` for a malformed call), and the model writes its answer after it. The shipped arithmetic model's vocabulary has no `<calc>`, so it cannot call; its shipped sibling's can (`--model arithmetic_calc`: pretrained with call demonstrations, the calculator's reply masked out of its loss, as RL masks it). It calls in about 30 % of its episodes, whatever the problem: *when* to call is what RL is there to teach. It samples two episodes of each of eight problems through `generate_episodes`, the package's rollout of episodes, token in and token out."""

REAL = r"""from rlhf_scratch.models.loading import load_lm
from rlhf_scratch.reward.calculator import CalculatorFactory
from rlhf_scratch.rollout.episodes import generate_episodes
from rlhf_scratch.rollout.rl_dataset import Prompt

lm = load_lm("arithmetic_calc").eval()
tok = lm.tokenizer
problems = {"47*85=": "3995", "12*34=": "408", "93*27=": "2511", "58*61=": "3538", "76*19=": "1444", "35*42=": "1470",
            "47+85=": "132", "93-27=": "66"}
torch.manual_seed(2)
rollout, episodes = generate_episodes(lm, [Prompt(p, {"ground_truth": g}) for p, g in problems.items()],
                                      CalculatorFactory(tok), num_generations=2, gen_len=24, max_turns=3)
for prompt, completion, episode in zip(rollout.prompts, rollout.completions, episodes):
    shown = " | ".join(tok.decode(list(s.ids)) + ("" if s.by_model else " (the calculator)") for s in episode.segments)
    print(f"{'right' if completion == prompt.columns['ground_truth'] else 'wrong':5s}  {prompt} {shown}")"""

REAL_MASK = r"""segments = [[(s.ids, s.by_model) for s in e.segments] for e in episodes]
ids, mask = assemble_completions(segments, 24, tok.pad_token_id)
print("your ids and mask are the rollout's:", torch.equal(ids, rollout.completion_ids) and torch.equal(mask, rollout.completion_mask))
row = next(i for i, e in enumerate(episodes) if e.env_tokens)  # the first episode that called, and one pad
n = len(episodes[row].ids)
print("\n".join(f"{tok.decode([t]):>13s}  {'model' if m else '-'}" for t, m in zip(ids[row, :n + 1].tolist(), mask[row, :n + 1].tolist())))

replayed = []  # each episode again, from the model's turns and the calculator's replies as TEXT, with your add_turn
for e in episodes:
    out, parts = [], e.segments
    for i, seg in enumerate(parts):
        if seg.by_model:
            reply = parts[i + 1] if i + 1 < len(parts) and not parts[i + 1].by_model else None
            out = add_turn(out, seg.ids, tok.decode(list(reply.ids)) if reply else "", tok)
    replayed.append(out)
print("your add_turn rebuilds every episode:", [[(tuple(i), b) for i, b in e] for e in replayed] == segments)"""

REAL_PREDICT = r"""**Predict**: the sibling was never trained to write the calculator's reply (its pretraining masked it). Score each episode that called under the model: how does log π(o|q) over the model's tokens compare with the same sum read with the attention mask, which adds the reply's tokens?"""

REAL_SCORE = r"""from rlhf_scratch.core.objectives import get_log_probs
from rlhf_scratch.core.objectives import sequence_log_probs as package_sequence_log_probs

full = torch.cat([rollout.prompt_ids, rollout.completion_ids], dim=1)  # the prompts have one length: no left padding
with torch.no_grad():
    logprobs = get_log_probs(lm(full), full, rollout.prompt_ids.shape[1])
attention = torch.zeros_like(rollout.completion_mask)
for row, e in enumerate(episodes):
    attention[row, : len(e.ids)] = True
yours = sequence_log_probs(logprobs, rollout.completion_mask, attention)
print("your sequence_log_probs is the package's:", torch.allclose(yours, package_sequence_log_probs(logprobs, rollout.completion_mask)))
called = [row for row, e in enumerate(episodes) if e.env_tokens]
with_reply = sequence_log_probs(logprobs, attention, attention)
print("the episodes that called:            ", [rollout.prompts[row] for row in called])
print("log π(o|q), the model's tokens:      ", [round(yours[row].item(), 3) for row in called])
print("the same with the attention mask:    ", [round(with_reply[row].item(), 1) for row in called])"""

REAL_ANSWER = r"""<details><summary>Answer</summary>

Over its own tokens an episode that called costs the sibling little more than a nat, most of it the choice to call at all (it calls in about 30 % of its episodes: log 0.3 ≈ −1.2); the call copied from the prompt and the answer copied from the reply are nearly sure. Add the reply's tokens and the sum falls by some 45 nats: the model has no idea what the calculator will say, which is the reason to call it. A loss that read the attention mask would be dominated by those tokens, its gradient spent on teaching the model to predict the calculator, and the KL or a length-normalised loss would be moved by them just as much. (Note the episodes that did not call: every product the model tried in its head here is wrong, every one it called for is right.)
</details>"""

NEXT = r"""## Where next

- From the command line: `python -m rlhf_scratch.train arithmetic --model arithmetic_calc --env calculator` (with the shipped arithmetic model, which cannot call, every episode is one turn).
- [docs/environments.md](../docs/environments.md): the environment contract, the episodes token in and token out, the mask every algorithm respects and PPO's GAE across a tool's reply (the reply is part of the transition: A_t = δ_t + γλ A_{n(t)}, n(t) the model's next token), and the calculator; `tests/unit/test_episode_masks.py` works each algorithm's number by hand on a two-turn episode."""


EXERCISES = ("assemble_completions", "sequence_log_probs", "grpo_loss", "masked_kl_mean", "add_turn")


def cells(solved: bool) -> list:
    ex = {name: exercise_cells(SOURCE, name, solved) for name in EXERCISES}
    md, code = new_markdown_cell, new_code_cell
    return [
        md(SOLUTIONS_TITLE if solved else TITLE, id="title"),
        code(IMPORTS, id="setup"),
        md(EPISODE_MD, id="episode-note"),
        *ex["assemble_completions"],
        code(EPISODE_APPLY, id="episode-apply"),
        md(LOSS_MD, id="loss-note"),
        *ex["sequence_log_probs"], *ex["grpo_loss"], *ex["masked_kl_mean"],
        md(LOSS_PREDICT, id="loss-predict"),
        code(LOSS_SEE, id="loss-see"),
        md(LOSS_ANSWER, id="loss-answer"),
        md(TOKENS_MD, id="tokens-note"),
        code(TOKENS_SHOW, id="tokens-show"),
        md(TURN_MD, id="turn-note"),
        *ex["add_turn"],
        md(REAL_MD, id="real-note"),
        code(REAL, id="real"),
        code(REAL_MASK, id="real-mask"),
        md(REAL_PREDICT, id="real-predict"),
        code(REAL_SCORE, id="real-score"),
        md(REAL_ANSWER, id="real-answer"),
        md(NEXT, id="next"),
    ]


def notebook(solved: bool) -> nbformat.NotebookNode:
    return graded_notebook(cells(solved))


NOTEBOOKS = {NOTEBOOK: False, SOLUTIONS: True}
"""Each notebook this file writes, and whether its five functions are written out."""


def main(argv: list[str]) -> None:
    write_graded(NOTEBOOKS, notebook, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
