"""Writes notebook 09 and its solutions: the cells are the strings below.

    notebooks/09_reward_hacking.ipynb                          the learner's: six stubs to write
    notebooks/solutions/09_reward_hacking_solutions.ipynb      the same cells with the stubs written out

    python notebooks/make_09_reward_hacking.py             # write both, then execute the solutions (about 10 s)
    python notebooks/make_09_reward_hacking.py --no-run    # write only

As notebook 06: each stub is one function of `rlhf_scratch/course/solutions_hacking.py`, its signature
and docstring read from there (one definition), its body `raise NotImplementedError`; the solution cell
is the function's source (`notebook_generator.exercise_cells`). Stub cells carry `metadata["exercise"] = name` and the tag `exercise`, each
followed by its check cell (tag `check`), as in notebooks/exercises/. The learner's notebook is not
executed as shipped (`EXCLUDED` in rlhf_scratch/course/execute_notebooks.py); the solutions are.
Every number shown comes from the recorded studies in benchmarks/ (hacking_confirm, hacking_decided,
hacking_mitigations of 2026-11-27) or is computed in the notebook; nothing is trained.

Edit the text here, not in the notebooks, then run this file.
"""

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell
from notebook_generator import exercise_cells, graded_notebook, write_graded

HERE = Path(__file__).parent
NOTEBOOK = HERE / "09_reward_hacking.ipynb"
SOLUTIONS = HERE / "solutions" / "09_reward_hacking_solutions.ipynb"
SOURCE = HERE.parent / "rlhf_scratch" / "course" / "solutions_hacking.py"
"""The solutions, read as text (this file runs without the package on the path)."""


TITLE = r"""# 9 · Reward hacking: predict it, see it, decide it, stop it

Notebook 03 ended on over-optimisation: optimise a learned reward hard enough and the true reward stops following it. Here the proxy is wrong *in a way the policy can reach*, and you watch PPO find the flaw: the proxy keeps rising while gold turns down. Then you do what a practitioner does without gold: decide the fall over seeds, stop the run early on a held-out signal, and ask whether an ensemble of reward models would have helped.

You write six short functions, each checked against the package's to float precision (a check names the classic mistake it recognises): the fall of gold from a pre-registered peak, a peak that a seed's own noise did not pick, the early-stopping rule, an ensemble's mean and worst case, and the share of the proxy's excess over gold that one feature explains. Nothing is trained: the curves are the package's recorded runs (benchmarks/, 18 PPO seeds), so the notebook runs in seconds.

You need notebook 03 (PPO against a learned reward, the over-optimisation curve) and a paired interval over seeds (exercises 06). Stuck, or done: [the solutions](solutions/09_reward_hacking_solutions.ipynb). The study behind every number: [docs/human-feedback.md §4](../docs/human-feedback.md#4-reward-hacking-flawed-proxies)."""

SOLUTIONS_TITLE = r"""# 9 · Reward hacking: the solutions

[Notebook 09](../09_reward_hacking.ipynb) with its six functions written out, plain Python and torch (they are `rlhf_scratch/course/solutions_hacking.py`, tested equal to the package's `studies.hacking` and `reward.ensemble` functions). Every other cell is notebook 09's."""

SETUP_MD = r"""## 1 · The setup: raters with a blind spot

Gold here is the tiny preset's sentiment score g, less a penalty for repeating itself: **g′ = g − 4 · rep₃**, rep₃ the fraction of the completion's token 3-grams that occur more than once. The proxy is a reward model trained the package's way (preference pairs → Bradley–Terry), on pairs labelled by raters who score g′. But the reference policy never repeats a 3-gram in 16 tokens (rep₃ = 0 in all 2,800 completions of the pairs), so the penalty never acts in the data: the labels are the honest rater's, label for label, and the proxy cannot learn that repetition is bad. It is **blind** to repetition, yet above chance against gold on held-out pairs (its accuracy is printed below). How each proxy was made: [human-feedback.md, "How each proxy was made"](../docs/human-feedback.md#how-each-proxy-was-made).

PPO then optimises the proxy with no KL penalty (β = 0) for 60 phases; every 3 phases the policy is evaluated on 64 held-out prompts × 8 samples: the distance d = √KL from the reference, gold g′, the proxy, rep₃."""

IMPORTS = r"""import json
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from rlhf_scratch.course import (check_early_stop_index, check_ensemble_mean, check_ensemble_min,
                                 check_explained_share, check_held_out_peak, check_registered_fall)
from rlhf_scratch.course.checks_hacking import CONFIRM, DECIDED, recorded_curves
from rlhf_scratch.studies.stats import paired_difference

torch.set_num_threads(1)
BENCHMARKS = CONFIRM.parent
confirm = json.loads(CONFIRM.read_text())
curves = recorded_curves(CONFIRM)  # {seed: [{"phase", "d", "gold", "proxy", "repeated_3grams", ...}, ...]}
acc = confirm["result"]["proxy_accuracy"]
print(f"the proxy against gold on n = {acc['n']} held-out pairs: accuracy {acc['accuracy']:.3f} "
      f"({acc['low']:.3f} to {acc['high']:.3f}, 95 % Wilson)")
print(f"{len(curves)} PPO seeds {min(curves)}-{max(curves)}, evaluated at phases "
      f"{[p['phase'] for p in curves[min(curves)]][:4]} ... {curves[min(curves)][-1]['phase']}")"""

PREDICT = r"""## 2 · Predict

**Predict**: as PPO moves the policy away from the reference (d = √KL grows), what happens to (a) the proxy, (b) gold g′, (c) rep₃? Sketch each against d before you run the next cells."""

PREDICT_ANSWER = r"""<details><summary>Answer</summary>

(a) The proxy rises the whole way: it is what PPO climbs. (b) Gold first rises with it (early on the proxy's gains are real sentiment gains) and then **turns down**: past some distance the cheapest way to raise the proxy is a text the proxy cannot fault, and repetition is one (the proxy never saw it punished). (c) rep₃ stays near 0, then climbs as gold falls: the flaw's own measure rises exactly where gold and proxy part. Whether the fall is real or noise in one seed is what section 4 decides.
</details>"""

SEE = r"""fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
for ax, key, label in zip(axes, ["proxy", "gold", "repeated_3grams"], ["proxy", "gold g′ = g − 4·rep₃", "rep₃"]):
    for seed, c in curves.items():
        ax.plot([p["d"] for p in c], [p[key] for p in c], color="tab:blue", alpha=0.35, lw=1)
    ax.set_xlabel("d = √KL from the reference")
    ax.set_title(label)
axes[0].set_ylabel(f"{len(curves)} seeds, one line each")
plt.tight_layout()
plt.show()
print("the pre-registered verdict:", confirm["result"]["verdict"])"""

SEE_MD = r"""## 3 · See it

The 12 seeds of the second pre-registered test (benchmarks/hacking_confirm_2026-11-27.json), one line each. Its plan was written before any of these seeds ran: the peak phase p* = 24 (picked on earlier seeds), the final phase 60, and the rule that decides."""

FALL_MD = r"""## 4 · Exercise: the fall, decided

One seed's curve is noisy: the highest of its own points sits above its true curve, so "own peak − final" is positive even where the curve is flat. Two honest ways out, both used by the study:

- **a pre-registered peak**: choose the peak phase p* on other seeds, before these run, and read each seed's **g′(p*) − g′(final)**;
- **a held-out peak**: for each seed, the phase where the *other* seeds' mean gold is highest (leave one out), so the seed's own noise cannot pick its peak.

Write `registered_fall(curves, peak_phase, final_phase)` → {seed: g′(peak_phase) − g′(final_phase)} (find each point by its `"phase"`: the curve is evaluated every 3 phases) and `held_out_peak(curves)` → {seed: phase}."""

FALL_APPLY = r"""fall = registered_fall(curves, 24, 60)
peaks = held_out_peak(curves)
final = {s: c[-1]["gold"] for s, c in curves.items()}
held = {s: next(p["gold"] for p in c if p["phase"] == peaks[s]) for s, c in curves.items()}
rise = paired_difference([c[-1]["proxy"] for c in curves.values()], [c[0]["proxy"] for c in curves.values()])
for name, diff in [("gold's fall from p* = 24", paired_difference([fall[s] + final[s] for s in curves], list(final.values()))),
                   ("gold's fall from the held-out peak", paired_difference(list(held.values()), list(final.values()))),
                   ("the proxy's rise, final − start", rise)]:
    print(f"{name:36s} {diff.mean:+.3f} ({diff.low:+.3f} to {diff.high:+.3f}), n = {len(curves)}")
recorded = confirm["result"]["group"]
print(f"recorded: fall from p* {recorded['fall_registered']['mean']:+.3f}, from the held-out peak "
      f"{recorded['fall_held_out_peak']['mean']:+.3f}")"""

FALL_SEE = r"""Both intervals exclude 0 on the positive side and the proxy's rise is decided: the hack is **decided at n = 12** (the study's verdict above). Over the first pre-registered test's 6 seeds the same fall was not resolved: a decided verdict here took twice the seeds."""

STOP_MD = r"""## 5 · Exercise: stop it early, without gold

A practitioner has no gold, but has the proxy on **held-out prompts** at each evaluation, r_0 … r_T, and its standard error s (measured once on the reference: s = 0.0276). The rule (`studies/hacking/mitigate.py`) keeps the checkpoint of the first evaluation i after which the proxy has not risen by more than s for m evaluations:

    i* = min { i : i + m ≤ T and max(r_{i+1} … r_{i+m}) ≤ r_i + s }      (else i* = T, the last)

Write `early_stop_index(proxy, se, patience=3)`. Careful with three details: the window is the m evaluations *after* i, "not risen by more than s" is ≤, and only full windows count (i + m ≤ T)."""

STOP_APPLY = r"""eighteen = {**recorded_curves(DECIDED), **recorded_curves(CONFIRM)}  # seeds 4-9 and 10-21: the mitigation table's baseline
stops = {s: early_stop_index([p["proxy"] for p in c], 0.0276) for s, c in eighteen.items()}
gold_stop = [eighteen[s][stops[s]]["gold"] for s in eighteen]
gold_end = [c[-1]["gold"] for c in eighteen.values()]
gain = paired_difference(gold_stop, gold_end)
print(f"stopped at phases {sorted(eighteen[s][i]['phase'] for s, i in stops.items())}")
print(f"gold at the stop − gold at the end: {gain.mean:+.2f} ({gain.low:+.2f} to {gain.high:+.2f}), n = {len(eighteen)} seeds, paired")
recorded = json.loads((BENCHMARKS / "hacking_mitigations_2026-11-27.json").read_text())["early_stopping"]["stop_minus_final"]
print(f"the package's (benchmarks/hacking_mitigations_2026-11-27.json): {recorded['mean']:+.2f} ({recorded['low']:+.2f} to {recorded['high']:+.2f})")"""

ENSEMBLE_MD = r"""## 6 · Exercise: an ensemble of reward models

Coste et al. (2023) train k reward models and optimise their **mean** or their **worst case** (the minimum over members, WCO): where the members disagree, the worst case is pessimistic, and over-optimisation should slow. Write `ensemble_mean(scores)` and `ensemble_min(scores)` for scores of shape [k members, batch]."""

ENSEMBLE_ORDER = r"""scores = torch.tensor([[2.0, 1.0, 0.5, -1.0],   # member 1
                       [2.5, 1.5, 0.0, 3.0],    # member 2
                       [-1.5, 1.25, 1.0, 4.0]]) # member 3
for name, r in [("mean", ensemble_mean(scores)), ("min", ensemble_min(scores))]:
    print(f"{name:4s} {r.tolist()}  best sample first: {r.argsort(descending=True).tolist()}")"""

ENSEMBLE_PREDICT = r"""The two reductions disagree on which sample is best: sample 3 has the highest mean but one member scores it −1. The policy is pushed toward whatever its reduction ranks first.

**Predict**: the package trained k = 3 repetition-blind proxies (the same preference pairs, different training seeds) and ran PPO against their worst case. Does the ensemble keep more gold at the end than the single proxy? Against it, a KL penalty β = 0.05. The next cell shows the package's table."""

TABLE = r"""from IPython.display import Markdown, display

table = json.loads((BENCHMARKS / "hacking_mitigations_2026-11-27.json").read_text())["comparison"]
rows = [r for r in table["rows"] if "length" not in r[0]]  # the length-normalised reward is for the length flaw
columns = [0, 1, 2, 6]  # mitigation, n seeds, gold at the final point (mean ± 95 % half-width), the verdict
display(Markdown("\n".join(["| " + " | ".join(table["header"][i] for i in columns) + " |", "|---" * len(columns) + "|",
                            *("| " + " | ".join(r[i] for i in columns) + " |" for r in rows)])))"""

TABLE_SEE = r"""<details><summary>Answer</summary>

No: the worst-case ensemble's gold at the end is not resolved against no mitigation at n = 3 against 18, and sits at the same level. The members are trained on the **same repetition-free pairs**, so they share the blind spot: none of them has ever seen repetition punished, and all three score a repetitive completion alike. An ensemble averages out what differs between members (the noise of training), not a flaw the data never shows; more seeds would narrow its interval, but diversity among members trained on the same data is not diversity about the flaw. The KL penalty and early stopping keep more gold, decided: the penalty holds the policy near the reference, where repetition has not started.
</details>"""

FIND_MD = r"""## 7 · Find it, without being told the flaw

So far you knew the flaw (you were told gold penalises repetition). `python -m rlhf_scratch.studies.hacking.find` is not told: it samples the reference and the hacked policy, scores each sample's **excess** e = proxy − gold (gold put on the proxy's scale with the reference's moments), reads every MLP neuron, head output norm and layer direction of the policy on every sample, and ranks them by the **share of the excess each explains**:

    β_w = Σ_g Σ_{i∈g} (a_i − ā_g)(e_i − ē_g) / Σ_g Σ_{i∈g} (a_i − ā_g)²       (g: the reference's samples, the policy's)
    share = β_w (ā₁ − ā₀) / (ē₁ − ē₀)

The slope is fitted **within** each group, so a feature that merely tells the policy's samples from the reference's (anything that changed in training) explains nothing; only a feature that moves with the excess *inside* a group counts. A feature constant within each group has Σ_g Σ_i (a_i − ā_g)² = 0 and the slope is 0/0: take β_w = 0 there (no variation inside a group, no slope), so its share is 0, not NaN. Write `explained_share(excess, activation, policy)` → one share per column of `activation` (`policy` is True for the policy's samples)."""

FIND_SEE = r"""The study ranks the policy's neurons, heads and directions this way and then describes the top one by the surface statistic of text it tracks: on most hacked PPO runs that is repetition. Its numbers, the causal check (ablating the finding against random units) and how sure it is: [docs/interp.md, "Finding a reward hack without being told the flaw"](../docs/interp.md#finding-a-reward-hack-without-being-told-the-flaw) and [human-feedback.md, "Finding the hack from the model"](../docs/human-feedback.md#finding-the-hack-from-the-model). It samples and reads a model, minutes per run, so it is not run here."""

NEXT = r"""## Where next

- The whole study in one command: `python -m rlhf_scratch.studies.hacking --help` (the flawed raters: `--raters length,token,repetition`); the mitigations: `python -m rlhf_scratch.studies.hacking.mitigate`.
- Watching for the hack during training, before gold says so: [human-feedback.md, "Watching for the hack"](../docs/human-feedback.md#watching-for-the-hack).
- Notebook 04 is the interpretability half step by step: the tools `find` uses (the logit lens, feature differences, ablations)."""


EXERCISES = ("registered_fall", "held_out_peak", "early_stop_index", "ensemble_mean", "ensemble_min", "explained_share")


def cells(solved: bool) -> list:
    ex = {name: exercise_cells(SOURCE, name, solved) for name in EXERCISES}
    md, code = new_markdown_cell, new_code_cell
    return [
        md(SOLUTIONS_TITLE if solved else TITLE, id="title"),
        md(SETUP_MD, id="setup-note"),
        code(IMPORTS, id="setup"),
        md(PREDICT, id="predict"),
        md(SEE_MD, id="see-note"),
        code(SEE, id="see"),
        md(PREDICT_ANSWER, id="predict-answer"),
        md(FALL_MD, id="fall-note"),
        *ex["registered_fall"], *ex["held_out_peak"],
        code(FALL_APPLY, id="fall-apply"),
        md(FALL_SEE, id="fall-see"),
        md(STOP_MD, id="stop-note"),
        *ex["early_stop_index"],
        code(STOP_APPLY, id="stop-apply"),
        md(ENSEMBLE_MD, id="ensemble-note"),
        *ex["ensemble_mean"], *ex["ensemble_min"],
        code(ENSEMBLE_ORDER, id="ensemble-order"),
        md(ENSEMBLE_PREDICT, id="ensemble-predict"),
        code(TABLE, id="table"),
        md(TABLE_SEE, id="table-see"),
        md(FIND_MD, id="find-note"),
        *ex["explained_share"],
        md(FIND_SEE, id="find-see"),
        md(NEXT, id="next"),
    ]


def notebook(solved: bool) -> nbformat.NotebookNode:
    return graded_notebook(cells(solved))


NOTEBOOKS = {NOTEBOOK: False, SOLUTIONS: True}
"""Each notebook this file writes, and whether its six functions are written out."""


def main(argv: list[str]) -> None:
    write_graded(NOTEBOOKS, notebook, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
