"""Parquet prompts, cut and filtered to --max-prompt-length (rollout/rl_dataset.py), feed both
controllers alike: `train sentiment --prompts x.parquet` with --controller local and --controller ray
write the same metrics.jsonl, every non-timing number bit for bit. The cut prompts travel to the Ray
worker as TokenizedPrompts (their ids, not their text), so a driver that sent text would differ."""

import json
import time

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlhf_scratch.commands.train import main
from rlhf_scratch.engine.loop import without_timings

PROMPTS = ["This movie was really", "Hi", "A long one: this film was really quite good and", "The plot thickens, and then"]


@pytest.fixture
def local_ray():
    from rlhf_scratch.controller.ray_trainer import init_ray, shutdown_ray

    init_ray(num_cpus=2)
    yield
    shutdown_ray()
    deadline = time.monotonic() + 10
    while [p for p in psutil.Process().children(recursive=True) if p.is_running()] and time.monotonic() < deadline:
        time.sleep(0.2)


@pytest.mark.slow
def test_local_and_ray_runs_of_cut_parquet_prompts_log_the_same_numbers(local_ray, tmp_path, capsys):
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"q": PROMPTS, "id": [1, 2, 3, 4]}), path)
    flags = ["sentiment", "--prompts", str(path), "--prompt-key", "q", "--max-prompt-length", "6", "--truncation", "left",
             "--total-phases", "2", "--batch-size", "4", "--num-minibatches", "2", "--gen-len", "6", "--warmup-steps", "1"]
    runs = {}
    for controller in ("local", "ray"):
        run_dir = tmp_path / controller
        assert main([*flags, "--controller", controller, "--run-dir", str(run_dir)]) == 0
        runs[controller] = [without_timings(json.loads(line)) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(runs["local"]) == 2 and runs["local"] == runs["ray"]
    for controller in runs:  # every prompt is drawn each phase (4 prompts, batch 4): the cut ones as cut
        samples = (tmp_path / controller / "samples.md").read_text()
        assert "A long one:" not in samples and "The plot thickens" not in samples and "quite good and" in samples
    capsys.readouterr()
    assert main([*flags[:9], "--filter-overlong-prompts", "--total-phases", "1", "--batch-size", "4",
                 "--controller", "ray", "--run-dir", str(tmp_path / "filtered")]) == 0
    assert "note: prompts: dropped 2 of 4 longer than max_prompt_length 6 (--filter-overlong-prompts)" in capsys.readouterr().err
