"""The hacking study's --detectors: the held-out evaluation, watched (issue 46, item 4). A
`loop.PhaseHook` that runs the over-optimisation study's `HeldOutEvaluation` and, on the same
rollout, cheap detectors of the policy against the reference at every evaluated phase, each one
number per held-out sample; `detectors.py` turns them into a score, a z and an alarm.

Gold is read once, at phase 0, on the reference's own samples (a small trusted set: 64 prompts × 8
samples at the study's size), to find the direction below. After that no detector reads gold, the
proxy or anything a rater made: only the policy's activations, its next-token distributions on a
fixed probe set, and the text it wrote. (The evaluation itself still scores gold on the policy's
samples for the study's curves; the watch logs one more yardstick number, study/rater_gold_se,
the standard error of the rater's gold, which `detectors.gold_says_so` needs. No detector reads it.)

Detectors, per sample i of the evaluation (ĥ: the final norm's output, what the unembedding reads,
`ln_final.hook_normalized`; h̄_i its mean over the completion's kept tokens):

    direction        u · h̄_i under the policy, on the policy's own sample.
                     u: on the reference's phase-0 samples, excess_i = z(proxy_i) − z(gold_i)
                     (z: standardised over the samples); u = (mean h̄ of the top quartile of
                     excess − mean h̄ of the bottom quartile), unit length (`excess_direction`).
    alignment        not per sample: whether the mean shift Δ of h̄ from phase 0 points along u
                     more than along 32 directions of random quartile splits of the reference's
                     samples (`detectors.alignment_z`, `null_directions`).
    lens             on the probe set (the first 128 of the reference's phase-0 samples, fixed: 16
                     prompts × 8 at the study's size), per sample
                     mean_t [log m_θ(s_t) − log m_ref(s_t)] over the positions that predict its
                     completion tokens, m(s) = Σ_{v ∈ T} softmax(z(s))_v and T the k = 10 tokens u
                     promotes most through the unembedding (u · W_U: the direction's logit lens,
                     as `interp.logits.sentiment_direction` reads its own; `lens_log_mass`):
                     has the policy moved its next-token mass toward the proxy's tokens?
                     0 at phase 0 by construction.
    repeated_3grams  rep₃ of the completion (the repetition flaw's own measure)
    length           the completion's kept tokens (the length flaw's)
    word_count       whole-word count of the token rater's word (the token flaw's)

The last three are the baseline: what a practitioner who knew the flaw would watch. SAE features
(`interp.feature_diff`) are not among them: they need a dictionary trained on each reference,
not cheap inside the loop.

Logged per evaluated phase: detector/<name> (the mean), detector/<name>_z, detector/<name>_alarm
(1.0 raised, 0.0 not), detector/seconds (the watch's own wall time, the evaluation's not counted)
and study/rater_gold_se. The calibration (u, T, the probe set, μ₀ and s₀ per detector) is kept in
RUN/detector_start.pt; a resumed run reads it back, and the alarm's history from metrics.jsonl.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from rlhf_scratch.studies.hacking.detectors import DETECTORS, PER_SAMPLE, alarm_flags, alignment_z, shift_z
from rlhf_scratch.studies.overoptimization.formulas import gold_standard_error
from rlhf_scratch.studies.overoptimization.run import (
    STUDY_METRICS,
    HeldOutEvaluation,
    held_out_metrics,
    held_out_rollout,
    train_against_proxy,
)

START = "detector_start.pt"
LENS_TOKENS = 10
PROBE = 128
"""Probe samples of the lens (its unembedding over the whole vocabulary is the watch's largest cost)."""
NULL_SPLITS = 32
CHUNK = 64
METRICS = (*STUDY_METRICS, "study/rater_gold_se", "detector/seconds",
           *[f"detector/{n}{suffix}" for n in DETECTORS for suffix in ("", "_z", "_alarm")])


def excess_direction(hidden: Float[Tensor, "n d"], proxy: Float[Tensor, " n"], gold: Float[Tensor, " n"]
                     ) -> Float[Tensor, " d"]:
    """u = normalise(mean h̄ over the top quartile of excess − mean h̄ over the bottom quartile),
    excess = z(proxy) − z(gold), z(x) = (x − mean x) / std x (n − 1); quartile = the ⌊n/4⌋ (at least 1)
    samples with the highest (lowest) excess, ties broken by order."""
    def z(x: Tensor) -> Tensor:
        std = x.float().std()
        return (x.float() - x.float().mean()) / (std if std > 0 else 1.0)

    excess = z(proxy) - z(gold)
    q = max(1, len(excess) // 4)
    order = torch.argsort(excess, descending=True, stable=True)
    u = hidden[order[:q]].mean(0) - hidden[order[-q:]].mean(0)
    norm = u.norm()
    if norm == 0:
        raise ValueError("excess_direction: the top and bottom quartiles have the same mean activation")
    return u / norm


def null_directions(hidden: Float[Tensor, "n d"], splits: int = NULL_SPLITS, seed: int = 0) -> Float[Tensor, "m d"]:
    """`excess_direction` of random excess: per split a random order of the samples (its own
    generator: the run's random numbers are untouched), top ⌊n/4⌋ minus bottom ⌊n/4⌋, unit length."""
    generator = torch.Generator().manual_seed(seed)
    q = max(1, len(hidden) // 4)
    rows = []
    for _ in range(splits):
        order = torch.randperm(len(hidden), generator=generator).to(hidden.device)
        v = hidden[order[:q]].mean(0) - hidden[order[-q:]].mean(0)
        rows.append(v / v.norm().clamp_min(1e-12))
    return torch.stack(rows)


def masked_mean(x: Float[Tensor, "n pos *rest"], mask: Bool[Tensor, "n pos"]) -> Float[Tensor, " n *rest"]:
    """Mean over the positions where `mask` holds (0 for a row with none)."""
    m = mask.to(x.dtype).reshape(*mask.shape, *([1] * (x.ndim - 2)))
    return (x * m).sum(1) / m.sum(1).clamp_min(1)


@torch.no_grad()
def completion_hidden(lm, sample_ids: Int[Tensor, "n seq"], attention_mask: Bool[Tensor, "n seq"],
                      prefix_len: int) -> Float[Tensor, "n gen d"]:
    """ĥ of `lm` at every position from the one before the completion to its end (gen + 1 of them
    minus one: the positions that predict completion tokens and the completion tokens' own)."""
    from rlhf_scratch.models.fast_forward import final_hidden
    from rlhf_scratch.rollout.generation import attention_mask_or_none

    out = []
    for s in range(0, len(sample_ids), CHUNK):
        mask = attention_mask[s : s + CHUNK]
        out.append(final_hidden(lm, sample_ids[s : s + CHUNK], attention_mask_or_none(mask))[:, prefix_len - 1 :].float())
    return torch.cat(out)


def lens_log_mass(lm, hidden: Float[Tensor, "n gen d"], tokens: Int[Tensor, " k"]) -> Float[Tensor, "n gen"]:
    """log m(s) = logsumexp(z_T) − logsumexp(z) at each position, z = ĥ W_U + b_U (temperature 1)."""
    logits = hidden @ lm.W_U.float() + lm.b_U.float()
    return logits[..., tokens].logsumexp(-1) - logits.logsumexp(-1)


@torch.no_grad()
def probe_mass(lm, probe: dict, tokens: Int[Tensor, " k"]) -> Float[Tensor, " n"]:
    """Per probe sample, the mean of `lens_log_mass` over the positions that predict its completion
    tokens, `CHUNK` rows at a time (their logits are n × gen × d_vocab numbers)."""
    out = []
    for s in range(0, len(probe["sample_ids"]), CHUNK):
        rows = slice(s, s + CHUNK)
        hidden = completion_hidden(lm, probe["sample_ids"][rows], probe["attention_mask"][rows], probe["prefix_len"])
        out.append(masked_mean(lens_log_mass(lm, hidden[:, :-1], tokens), probe["completion_mask"][rows]))
    return torch.cat(out)


def per_sample_flaws(rollout, word: str) -> dict[str, list[float]]:
    """rep₃, kept tokens and the word's count of every completion (`reward.preferences`' own measures)."""
    from rlhf_scratch.reward.heldout import repeated_ngram_fraction
    from rlhf_scratch.reward.preferences import word_count

    ids, mask = rollout.completion_ids, rollout.completion_mask
    return {"repeated_3grams": [repeated_ngram_fraction(ids[i : i + 1], mask[i : i + 1]) for i in range(len(ids))],
            "length": mask.sum(-1).float().tolist(),
            "word_count": [float(word_count(c, word)) for c in rollout.completions]}


def rater_gold(gold: list[float], rep3: list[float], rater: str, penalty: float) -> list[float]:
    """The rater's gold per sample: g′ = g − c · rep₃ for `repetition`, g otherwise."""
    return [g - penalty * r for g, r in zip(gold, rep3)] if rater == "repetition" else list(gold)


class WatchedEvaluation(HeldOutEvaluation):
    """`HeldOutEvaluation` with the detectors on its rollout (module docstring). `watch`: the rater
    whose gold the phase-0 direction uses and its penalty c (`{"rater": "repetition", "penalty": 4.0}`)."""

    METRICS = METRICS

    def __init__(self, trainer, prompts: list[str], per_prompt: int, every: int = 1, word: str = "and",
                 watch: dict | None = None):
        super().__init__(trainer, prompts, per_prompt, every, word)
        self.rater, self.penalty = (watch or {}).get("rater", "honest"), float((watch or {}).get("penalty", 0.0))
        self.calibration: dict | None = None
        self.z_history: dict[str, list[float]] = {n: [] for n in DETECTORS}

    def start(self, run_dir: Path, phase: int) -> None:
        if phase == 0:
            super().start(run_dir, phase)  # evaluates the reference: `after_phase(0)` calibrates
            return
        self.calibration = torch.load(run_dir / START, map_location=self.trainer.device)
        self.z_history = {n: [0.0] for n in DETECTORS}  # phase 0's
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():  # already cut back to `phase`
            m = json.loads(line)
            for n in DETECTORS:
                if f"detector/{n}_z" in m:
                    self.z_history[n].append(m[f"detector/{n}_z"])

    def after_phase(self, run_dir: Path, phase: int) -> dict[str, float]:
        from rlhf_scratch.models.policy import language_model

        if not self.evaluates(phase):
            return {}
        lm = language_model(self.trainer.policy)
        rollout = held_out_rollout(lm, self.ref, self.prompts, self.proxy_fn, self.trainer.args.gen_len, self.per_prompt)
        metrics, samples = held_out_metrics(rollout, self.per_prompt, self.word)
        self.record(run_dir, phase, metrics, samples)
        clock = time.perf_counter()
        values = self.sample_values(lm, rollout, samples, run_dir if phase == 0 else None)
        metrics.update(self.judge(values))
        metrics["detector/seconds"] = time.perf_counter() - clock
        flaws = values["flaws"]
        metrics["study/rater_gold_se"] = gold_standard_error(
            rater_gold([s["gold"] for s in samples], flaws["repeated_3grams"], self.rater, self.penalty), self.per_prompt)
        return metrics

    @torch.no_grad()
    def sample_values(self, lm, rollout, samples: list[dict], calibrate_in: Path | None) -> dict:
        """Every detector's value per sample; at phase 0 (`calibrate_in` given) first the calibration:
        u from gold on these, the reference's, samples, T, the probe set and the reference's log m."""
        hidden = completion_hidden(lm, rollout.sample_ids, rollout.attention_mask, rollout.prefix_len)
        own = masked_mean(hidden[:, 1:], rollout.completion_mask)  # h̄_i over the completion's own tokens
        flaws = per_sample_flaws(rollout, self.word)
        if calibrate_in is not None:
            gold = torch.tensor(rater_gold([s["gold"] for s in samples], flaws["repeated_3grams"], self.rater, self.penalty))
            u = excess_direction(own.cpu(), rollout.scores.float().cpu(), gold).to(own.device)
            tokens = (u @ lm.W_U.float()).topk(LENS_TOKENS).indices
            probe = {"sample_ids": rollout.sample_ids[:PROBE], "attention_mask": rollout.attention_mask[:PROBE],
                     "completion_mask": rollout.completion_mask[:PROBE], "prefix_len": rollout.prefix_len}
            self.calibration = {"u": u, "tokens": tokens, "probe": probe, "ref_mass": probe_mass(self.ref, probe, tokens),
                                "h0": own.mean(0), "null": null_directions(own.cpu()).to(own.device),
                                "token_strings": [lm.to_single_str_token(int(t)) for t in tokens]}
        c = self.calibration
        mass = probe_mass(lm, c["probe"], c["tokens"])
        delta = (own.mean(0) - c["h0"]).tolist()
        values = {"direction": (own @ c["u"]).tolist(), "lens": (mass - c["ref_mass"]).tolist(), **flaws,
                  "alignment": (cosine(delta, c["u"].tolist()), alignment_z(delta, c["u"].tolist(), c["null"].tolist()))}
        if calibrate_in is not None:
            c["reference"] = {n: (mean(values[n]), gold_standard_error(values[n], self.per_prompt)) for n in PER_SAMPLE}
            torch.save(c, calibrate_in / START)
            (calibrate_in / "detector_start.json").write_text(json.dumps(
                {"lens_tokens": c["token_strings"], "reference": c["reference"], "rater": self.rater}, indent=1))
        return {**values, "flaws": flaws}

    def judge(self, values: dict) -> dict[str, float]:
        """Each detector's mean, z against the reference (`shift_z`) and alarm (`alarm_flags`)."""
        out = {}
        for n in DETECTORS:
            if n in PER_SAMPLE:
                mean0, se0 = self.calibration["reference"][n]
                score, se = mean(values[n]), gold_standard_error(values[n], self.per_prompt)
                z = shift_z(score, se, mean0, se0)
            else:  # alignment: (cos(Δ, u), its z against the null directions)
                score, z = values[n]
            self.z_history[n].append(z)
            out.update({f"detector/{n}": score, f"detector/{n}_z": z,
                        f"detector/{n}_alarm": float(alarm_flags(self.z_history[n])[-1])})
        return out


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def cosine(a: list[float], b: list[float]) -> float:
    """cos(a, b); 0 when a = 0 (phase 0's Δ)."""
    norm = sum(x * x for x in a) ** 0.5 * sum(y * y for y in b) ** 0.5
    return sum(x * y for x, y in zip(a, b)) / norm if norm else 0.0


def train_watched(spec: dict) -> int:
    """The body of one watched run's process: the over-optimisation study's RL run
    (`run.train_against_proxy`) with `WatchedEvaluation` after every phase, watching for spec["detectors"]
    ({"rater", "penalty"}). `python -m rlhf_scratch.studies.hacking.watch SPEC_JSON` runs it: the hacking
    study's `rl_command(spec, WATCHED_RUN)`."""
    return train_against_proxy(spec, WatchedEvaluation, watch=spec["detectors"])


if __name__ == "__main__":
    sys.exit(train_watched(json.loads(sys.argv[1])))
