"""A run's validation, verl's `_validate` in its `fit`: the policy's samples of held-out prompts scored by
the task's own evaluation, before the first phase and every --test-freq phases (and after the last), on
either backend (`dataflow.validate` calls the role `generate_sequences`, which the controller forwards).

    --val-prompts SOURCE      held-out prompts, as --prompts takes them (`arithmetic:test`), with their columns
    --val-n N                 samples of each (verl's val_kwargs.n); --val-size M: the first M prompts only
    --test-freq F             every F phases; phase 0 is the model before training (verl's val_before_train)

The metrics are the task's registry `evaluate` (`reward.verifiable_eval.verifiable_metrics` for arithmetic:
eval/pass@1, eval/pass@k, the format rate, pass@1 by difficulty), with --env the held-out episodes' turns, tool
calls and tokens (`episodes.held_out_episode_metrics`: eval/tools/call_frequency …), and `timing/testing`. Each validation is a
line of validation.jsonl (phase 0 included); a phase's is also in that phase's line of metrics.jsonl.
"""

from __future__ import annotations

from rlhf_scratch.config import CommonArgs, registry
from rlhf_scratch.engine.dataflow import validate
from rlhf_scratch.rollout.episodes import held_out_episode_metrics
from rlhf_scratch.rollout.rl_dataset import run_prompts

VALIDATION_FILE = "validation.jsonl"
"""Each validation's `eval/...` as a line of the run folder, `phase` 0 the model before training."""


class Validation:
    """The held-out prompts of a run and how to score the policy's samples of them."""

    def __init__(self, args: CommonArgs):
        prompts = run_prompts(args, say=None, source=args.val_prompts)
        self.prompts = prompts[: args.val_size] if args.val_size else prompts
        self.evaluate = registry.resolve(registry.get_task(args.task).evaluate)
        self.args = args

    @classmethod
    def of(cls, args: CommonArgs) -> Validation | None:
        """The run's validation, or None when it has no --val-prompts."""
        return cls(args) if args.val_prompts else None

    def due(self, phase: int) -> bool:
        """Whether the loop validates after `phase`: every test_freq phases and after the last."""
        return phase % self.args.test_freq == 0 or phase == self.args.total_phases

    def run(self, trainer, phase: int) -> dict[str, float]:
        """Sample every held-out prompt val_n times from the policy after `phase` phases; the task's metrics."""
        times: dict[str, float] = {}
        samples = validate(trainer, self.prompts, self.args.val_n, f"{self.args.seed}-{phase}", self.args.batch_size, times)
        record = samples.pop("episodes", None)  # --env: the held-out episodes' turns, calls, tokens
        episodes = {} if record is None else held_out_episode_metrics(record, samples["lengths"])
        return {**self.evaluate(**samples, num_generations=self.args.val_n), **episodes, **times}
