"""One RL run of the over-optimisation study, in a process of its own: an algorithm trained against
a proxy reward model, and after every phase the policy judged on held-out prompts by gold and proxy.

    python -m rlhf_scratch.studies.overoptimization.run SPEC_JSON    # what `rl_command(spec)` runs

The judging is `HeldOutEvaluation`, a `loop.PhaseHook`: the loop calls it once per phase and logs
what it returns (study/gold, study/gold_se, study/proxy, study/kl, study/d, and the flaw measures of the
hacking pilot: study/length, study/word_count, study/repeated_3grams) in metrics.jsonl beside
the phase's own numbers, every `eval_every`-th phase and the last (the others log nothing of it). The
study (`studies.overoptimization`) reads those back into its curves. The hacking study's watched
runs (--detectors) are a process of their own, `python -m rlhf_scratch.studies.hacking.watch SPEC_JSON`:
this same body with `hacking.watch.WatchedEvaluation` in place of `HeldOutEvaluation` (the same
evaluation, and detectors of the hack on its rollout). This module imports nothing of the hacking study.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from rlhf_scratch.config import registry
from rlhf_scratch.reward.preferences import RATER_DEFAULTS
from rlhf_scratch.studies.overoptimization.formulas import gold_standard_error

STUDY_METRICS = ("study/gold", "study/gold_se", "study/proxy", "study/kl", "study/d",  # logged by every RL run
                 "study/length", "study/word_count", "study/repeated_3grams")
"""What an evaluated phase logs (`evaluate_policy`)."""
SAMPLES_FILE = "study_samples.jsonl"
START_FILE = "study_start.json"  # the reference policy's evaluation (phase 0)


def evaluate_policy(lm, ref, prompts: list[str], proxy_fn, gen_len: int, per_prompt: int, chunk_size: int = 32,
                    word: str = RATER_DEFAULTS["token"]):
    """Sample `per_prompt` completions of each held-out prompt (temperature 1, whole vocabulary,
    stop at EOS), and return (metrics, samples): mean gold, its standard error (`gold_standard_error`),
    mean proxy, and KL = mean over samples of Σ_t KL(π(·|s_t) ‖ π_ref(·|s_t)) over the kept completion
    tokens (the full-vocabulary per-token KL of the rollout, summed), d = √KL; and the flawed raters'
    measures (`reward.preferences`), each a mean over samples: kept completion tokens, whole-word
    count of `word`, repeated 3-gram fraction."""
    return held_out_metrics(held_out_rollout(lm, ref, prompts, proxy_fn, gen_len, per_prompt, chunk_size), per_prompt, word)


def held_out_rollout(lm, ref, prompts: list[str], proxy_fn, gen_len: int, per_prompt: int, chunk_size: int = 32):
    """`evaluate_policy`'s samples: the rollout it scores (a watcher reads the same one, `hacking.watch`)."""
    import torch

    from rlhf_scratch.rollout.phase import make_rollout

    with torch.no_grad():
        return make_rollout(lm, ref, prompts, proxy_fn, num_generations=per_prompt, gen_len=gen_len,
                            temperature=1.0, top_k=0, prepend_bos=True, stop_at_eos=True, chunk_size=chunk_size)


def held_out_metrics(rollout, per_prompt: int, word: str = RATER_DEFAULTS["token"]):
    """`evaluate_policy`'s (metrics, samples) of a held-out rollout."""
    from rlhf_scratch.reward.heldout import repeated_ngram_fraction
    from rlhf_scratch.reward.preferences import gold_scores, word_count

    kl = (rollout.kl * rollout.completion_mask).sum(-1)
    gold = gold_scores(rollout.texts)
    metrics = {"study/gold": gold.mean().item(), "study/gold_se": gold_standard_error(gold.tolist(), per_prompt),
               "study/proxy": rollout.scores.mean().item(),
               "study/kl": kl.mean().item(), "study/d": math.sqrt(max(kl.mean().item(), 0.0)),
               "study/length": rollout.completion_mask.sum(-1).float().mean().item(),
               "study/word_count": sum(word_count(c, word) for c in rollout.completions) / len(rollout.completions),
               "study/repeated_3grams": repeated_ngram_fraction(rollout.completion_ids, rollout.completion_mask)}
    samples = [{"prompt": p, "completion": c, "gold": g, "proxy": r}
               for p, c, g, r in zip(rollout.prompts, rollout.completions, gold.tolist(), rollout.scores.tolist())]
    return metrics, samples


class HeldOutEvaluation:
    """The study's eye on an RL run, a `loop.PhaseHook`: after every phase the policy on the held-out
    prompts (`evaluate_policy`) after every `every`-th phase and the last, logged as study/* in
    metrics.jsonl, a few samples appended to study_samples.jsonl. The reference itself is phase 0 of
    every curve: evaluated when a new run starts (study_start.json), never on resume, so a resumed
    run draws no random numbers the interrupted one did not and stays bit-exact."""

    METRICS = STUDY_METRICS
    word = RATER_DEFAULTS["token"]
    """The word whose count is logged (study/word_count): the token rater's."""

    def __init__(self, trainer, prompts: list[str], per_prompt: int, every: int = 1,
                 word: str = RATER_DEFAULTS["token"]):
        from rlhf_scratch.models.loading import load_lm
        from rlhf_scratch.reward.tasks import make_reward_fn

        self.trainer, self.prompts, self.per_prompt, self.every = trainer, prompts, per_prompt, every
        self.word = word
        self.ref = load_lm(trainer.args.model, trainer.device).eval()  # on the policy's device, as the proxy
        self.proxy_fn = make_reward_fn(trainer.args, device=trainer.device)  # the proxy: the run's own reward

    def evaluates(self, phase: int) -> bool:
        """Phase 0 (the reference), every `every`-th phase, and the run's last."""
        return phase % self.every == 0 or phase == self.trainer.args.total_phases

    def start(self, run_dir: Path, phase: int) -> None:
        if phase == 0:
            (run_dir / START_FILE).write_text(json.dumps(self.after_phase(run_dir, 0)))

    def after_phase(self, run_dir: Path, phase: int) -> dict[str, float]:
        from rlhf_scratch.models.policy import language_model

        if not self.evaluates(phase):
            return {}

        metrics, samples = evaluate_policy(language_model(self.trainer.policy), self.ref, self.prompts, self.proxy_fn,
                                           self.trainer.args.gen_len, self.per_prompt, word=self.word)
        self.record(run_dir, phase, metrics, samples)
        return metrics

    def record(self, run_dir: Path, phase: int, metrics: dict, samples: list[dict]) -> None:
        """One line of study_samples.jsonl: the evaluation's numbers and one sample of each of 6 prompts."""
        with open(run_dir / SAMPLES_FILE, "a") as f:
            f.write(json.dumps({"phase": phase, **metrics, "samples": samples[:: self.per_prompt][:6]}) + "\n")


def train_against_proxy(spec: dict, evaluation: type[HeldOutEvaluation] = HeldOutEvaluation, **fields) -> int:
    """The body of one run's process: train `spec["algo"]` against the proxy `spec["proxy"]` (or
    resume it), with `evaluation` after every phase (`HeldOutEvaluation`, or a subclass given its
    own extra `fields`: the hacking study's watch). A failure is one `error:` line."""
    from rlhf_scratch.config import make_args
    from rlhf_scratch.engine.runs import STATUS_FILE, load_args, read_status

    run_dir = Path(spec["run_dir"])
    resume = (run_dir / STATUS_FILE).is_file()
    if resume and read_status(run_dir)["status"] == "finished":
        return 0
    try:
        args = load_args(run_dir) if resume else make_args(
            "tiny", algo=spec["algo"], task="sentiment", reward_model=spec["proxy"], prompts=spec["train_prompts"],
            run_dir=str(run_dir), **spec["train_fields"])
        trainer = registry.get(args.algo).trainer_class()(args, quiet=True)
        hook = evaluation(trainer, Path(spec["eval_prompts"]).read_text().splitlines(), spec["per_prompt"],
                          spec.get("eval_every", 1), spec.get("word", RATER_DEFAULTS["token"]), **fields)
        trainer.train(run_dir, resume=resume, hooks=[hook])
    except (ValueError, OSError, RuntimeError) as e:  # TrainingStopped (Ctrl-C) too: its line says how to resume
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 1
    return 0


RL_MODULE = "rlhf_scratch.studies.overoptimization.run"


def rl_command(spec: dict, module: str = RL_MODULE) -> list[str]:
    """The process of one RL run: `python -m module` (this one; a watched run's, `hacking.watch`) with
    the run (`train_against_proxy`'s spec) as JSON."""
    return [sys.executable, "-m", module, json.dumps(spec)]


if __name__ == "__main__":
    sys.exit(train_against_proxy(json.loads(sys.argv[1])))
