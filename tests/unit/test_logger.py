"""RunLogger's cadences: the sample table every `table_every` phases, curves.png every `plot_every`."""

import torch

import rlhf_scratch.engine.logger as logger_module
from rlhf_scratch.config import make_args
from rlhf_scratch.engine.logger import RunLogger
from rlhf_scratch.rollout.phase import Rollout


def one_sample_rollout() -> Rollout:
    return Rollout(
        prompt_ids=torch.zeros(1, 1, dtype=torch.long), completion_ids=torch.tensor([[5, 6]]),
        attention_mask=torch.ones(1, 3, dtype=torch.bool), completion_mask=torch.ones(1, 2, dtype=torch.bool),
        logprobs=torch.zeros(1, 2), ref_logprobs=torch.tensor([[-1.0, -2.0]]), kl=torch.zeros(1, 2),
        entropy=torch.zeros(1, 2), scores=torch.tensor([0.5]), rewards=torch.tensor([0.5]), prompts=["p"],
        completions=[" good"], num_generations=1, eos_token_id=0,
    )


def test_curves_every_plot_every_and_tables_every_table_every(tmp_path, monkeypatch):
    plotted = []
    monkeypatch.setattr(logger_module, "plot_training_curves", lambda history, run_dir: plotted.append(len(history)))
    args = make_args("tiny", total_phases=7, table_every=2, plot_every=3)
    log = RunLogger(tmp_path, args, quiet=True)
    for phase in range(1, 8):
        log.history.append({"phase": phase})
        log.log_samples(phase, one_sample_rollout(), force=phase == 7)
    assert plotted == [1, 3, 6, 7], "curves at the first phase, every plot_every phases, and the last"
    samples = (tmp_path / "samples.md").read_text()
    tables = [int(line.split()[-1]) for line in samples.splitlines() if line.startswith("## phase")]
    assert tables == [1, 2, 4, 6, 7], "tables at the first phase, every table_every phases, and the last"
    assert "|            -3 |" in samples, "the reference log-prob of the completion: -1 + -2"


def test_without_timings_drops_the_wall_clock_metrics_and_nothing_else():
    """Which bug turns it red: a prefix too wide ("charts/" would drop the learning rate, which two runs
    of one seed must share) or one missing (the controller's `timing/…` would make equal runs differ)."""
    from rlhf_scratch.engine.loop import without_timings

    metrics = {"time/generation": 0.5, "timing/gen": 0.25, "charts/phase_time": 1.5, "charts/rollout_time": 0.75,
               "charts/tokens_per_s": 300.0, "charts/learning_rate": 2e-4, "rewards/mean": 0.125, "phase": 3}
    assert without_timings(metrics) == {"charts/learning_rate": 2e-4, "rewards/mean": 0.125, "phase": 3}
