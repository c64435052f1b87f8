"""Host reads per steady PPO phase stay at or under the ceiling recorded in benchmarks/host_reads_tiny.json
(issue 57: at most 12; `benchmarks/host_reads.py` counts them, docs/speed.md "Host reads" says where
they are). A new `.item()`, `bool()` or `.tolist()` of a tensor inside the phase — a host sync a
minibatch on a GPU — turns this red, and the message names the lines that read."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CEILING = 12


def test_a_steady_ppo_phase_reads_the_device_at_most_the_recorded_number_of_times(one_thread):
    spec = importlib.util.spec_from_file_location("host_reads", ROOT / "benchmarks" / "host_reads.py")
    host_reads = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(host_reads)
    recorded = json.loads((ROOT / "benchmarks" / "host_reads_tiny.json").read_text())
    assert recorded["ceiling"]["ppo"] <= CEILING, "the issue's ceiling is 12 reads a PPO phase"
    assert recorded["after"]["counts"]["ppo"]["total"] <= recorded["ceiling"]["ppo"]
    counter = host_reads.count_phase("ppo")
    sites = "\n".join(f"{n:>4}  {site}" for site, n in counter.sites.most_common())
    assert counter.total <= recorded["ceiling"]["ppo"], (
        f"{counter.total} host reads in a steady PPO phase, ceiling {recorded['ceiling']['ppo']}:\n{sites}")
    assert counter.total > 0, "the counter saw nothing: the phase was not counted"
