"""Data parallelism under torchrun, tested with two CPU processes (gloo) on the tiny preset."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from rlhf_scratch.config import ConfigError, make_args, registry
from rlhf_scratch.engine import distributed as dist

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: the support modules
from distributed_worker import make_trainer  # noqa: E402
from processes import TIMEOUT, run_bounded, torchrun  # noqa: E402,F401
from toy_algorithm import TOY, algorithms, registered, small_settings  # noqa: E402

pytestmark = pytest.mark.slow  # whole processes: the quick loop (-m 'not slow') skips them

WORKER = Path(__file__).parents[1] / "distributed_worker.py"
TOY_FILE = Path(__file__).parents[1] / "toy_algorithm.py"
def test_a_hang_is_killed_with_the_workers_in_their_own_sessions():
    """What torchrun does: a worker in a session of its own, holding the output pipe. The hang must
    fail the test within the timeout and leave no process behind."""
    marker = f"time.sleep(600 + 0 * {os.getpid()})"  # this test's processes, not another run's
    worker = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; {marker}'], "
              f"start_new_session=True); print('started', file=sys.stderr, flush=True); {marker}")
    start = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="hung for 10 s") as failed:
        run_bounded([sys.executable, "-c", worker], timeout=10)
    assert "started" in str(failed.value), "the worker in its own session was running when the hang was killed"
    assert time.monotonic() - start < 40
    alive = [p for p in psutil.process_iter(["cmdline", "status"]) if marker in " ".join(p.info["cmdline"] or [])
             and p.info["status"] != psutil.STATUS_ZOMBIE]
    assert not alive, "a worker survived"


# --- one process: every helper is the identity -----------------------------------------------------


def test_one_process_is_unchanged():
    assert not dist.launched_by_torchrun() and dist.world_size() == 1 and dist.rank() == 0 and dist.is_main()
    x = torch.tensor([1.0, 2.0])
    assert dist.all_gather(x) is x and torch.equal(dist.local_rows(x), x)
    assert dist.mean_over_ranks({"a": 1.0}) == {"a": 1.0} and dist.gather_objects(3) == [3]
    module = torch.nn.Linear(1, 1)
    assert dist.wrap_for_training(module) is module, "no DDP wrapper without torchrun"


def test_shard_keeps_prompt_groups_on_one_rank():
    prompts = ["p0", "p1", "p2", "p3"]
    assert dist.shard(prompts, 2, 0) == ["p0", "p1"] and dist.shard(prompts, 2, 1) == ["p2", "p3"]
    # sharded before the rollout repeats each prompt G times: rank 1's rows are p2 ×G, p3 ×G
    rank1_rows = [p for p in dist.shard(prompts, 2, 1) for _ in range(2)]
    assert rank1_rows == ["p2", "p2", "p3", "p3"], "a prompt's group (RLOO's G, DPO's pair) never splits"
    with pytest.raises(ValueError, match="evenly"):
        dist.shard(prompts, 3, 0)


@pytest.mark.parametrize("algo, overrides, field", [
    ("ppo", dict(batch_size=6, num_minibatches=1), "batch_size"),  # 6 samples over 4 ranks
    ("ppo", dict(batch_size=16, num_minibatches=8), "num_minibatches"),  # 4 per rank, 8 minibatches
    ("rloo", dict(batch_size=24, num_generations=4, num_minibatches=1), "batch_size"),  # 6 groups over 4 ranks
    ("online_dpo", dict(batch_size=12, num_minibatches=1), "batch_size"),  # 6 pairs over 4 ranks
    ("grpo", dict(batch_size=24, num_generations=4, num_minibatches=1), "batch_size"),  # 6 groups over 4 ranks
])
def test_batch_must_split_into_whole_groups_and_minibatches(algo, overrides, field):
    args = make_args("tiny", algo, **overrides)
    args.check_world_size(2)  # every one of these splits over 2 processes
    with pytest.raises(ConfigError, match=f"^{field}: "):
        args.check_world_size(4)


# --- two processes ---------------------------------------------------------------------------------


def test_collectives_with_two_processes(tmp_path):
    out = torchrun(str(WORKER), "collectives", str(tmp_path / "c.pt"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    rank0, rank1 = torch.load(tmp_path / "c.pt")
    assert rank0["all_gather"] == rank1["all_gather"] == [[0, 10], [1, 11]], "rank order"
    assert rank0["local_rows"] == [0, 1, 2] and rank1["local_rows"] == [3, 4, 5]
    assert rank0["mean_over_ranks"] == {"a": 0.5, "only_rank_1": 5.0}, "mean over the ranks that logged a key"
    assert rank0["any_rank"] == [True, False] == rank1["any_rank"]
    assert (rank0["shard"], rank1["shard"]) == (["p0", "p1"], ["p2", "p3"])
    assert rank0["gather_objects"] == ["rank0", "rank1"]


@pytest.fixture(scope="module")
def saved_rollouts(tmp_path_factory):
    """One rollout of 8 samples per algorithm from a single process, saved for the workers."""
    folder = tmp_path_factory.mktemp("rollouts")
    paths = {}
    for algo in ("ppo", "rloo", "online_dpo", "grpo"):
        trainer = make_trainer(algo)
        rollout = trainer.rollout_phase()
        paths[algo] = folder / f"{algo}.pt"
        torch.save(rollout, paths[algo])
    return paths


ALGOS = ("rloo", "online_dpo", "ppo", "grpo", "ppo_lora")
# PPO whitens advantages per minibatch, i.e. per rank (as CleanRL's multi-GPU PPO does): its 2-process
# gradient is the mean of the two halves' gradients, each computed alone. The others: one process on
# the whole batch of 8.
ALONE = {"rloo": [(0, 8)], "online_dpo": [(0, 8)], "grpo": [(0, 8)], "ppo": [(0, 4), (4, 8)],
         "online_dpo_judge": [(0, 8)], "ppo_lora": [(0, 4), (4, 8)]}


def run_jobs(jobs: list[list], folder: Path, under_torchrun: bool) -> subprocess.CompletedProcess:
    """The worker's `jobs` mode: every job in one process start (or one torchrun of 2)."""
    path = folder / ("ddp_jobs.json" if under_torchrun else "alone_jobs.json")
    path.write_text(json.dumps(jobs))
    if under_torchrun:
        return torchrun(str(WORKER), "jobs", str(path), cwd=folder)
    return run_bounded([sys.executable, str(WORKER), "jobs", str(path)], env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def learned_gradients(saved_rollouts, tmp_path_factory):
    """Each algorithm's gradients from one learning phase: under torchrun (2 processes, each on its
    half of the rows) and in one process (`ALONE`), each side in one process start; {kind: {algo: grads}}.
    `online_dpo_judge`: Online DPO with a judge that abstains on the last pair (rank 1's) only."""
    folder = tmp_path_factory.mktemp("grads")
    rollout = {**saved_rollouts, "online_dpo_judge": saved_rollouts["online_dpo"], "ppo_lora": saved_rollouts["ppo"]}
    ddp = [[algo, str(rollout[algo]), str(folder / f"ddp-{algo}.pt"), None, None] for algo in ALONE]
    alone = [[algo, str(rollout[algo]), str(folder / f"alone-{algo}-{a}.pt"), a, b] for algo in ALONE for a, b in ALONE[algo]]
    for jobs, under_torchrun in ((ddp, True), (alone, False)):
        done = run_jobs(jobs, folder, under_torchrun)
        assert done.returncode == 0, done.stderr[-3000:]
    expected, parts_of = {}, {}
    for algo, parts in ALONE.items():
        parts_of[algo] = [torch.load(folder / f"alone-{algo}-{a}.pt") for a, _ in parts]
        expected[algo] = {k: sum(h[k] for h in parts_of[algo]) / len(parts) for k in parts_of[algo][0]}
    return {"ddp": {algo: torch.load(folder / f"ddp-{algo}.pt") for algo in ALONE}, "alone": expected, "parts": parts_of}


@pytest.mark.parametrize("algo", ALGOS)
def test_two_process_gradients_equal_one_process_on_the_global_batch(algo, learned_gradients):
    ddp, expected = dict(learned_gradients["ddp"][algo]), dict(learned_gradients["alone"][algo])
    assert set(ddp) == set(expected) and len(ddp) > 10
    assert ddp.pop("stats/judge/skipped") == expected.pop("stats/judge/skipped") == 0
    for name, grad in expected.items():
        torch.testing.assert_close(ddp[name], grad, atol=1e-5, rtol=0, msg=f"{algo}: {name}")
    assert any(g.abs().max() > 1e-4 for g in expected.values()), "a test of zero gradients proves nothing"
    if algo.startswith("ppo"):  # were the halves' gradients equal, a run that dropped one rank's rows would pass too
        first, second = learned_gradients["parts"][algo]
        assert any((first[k] - second[k]).abs().max() > 1e-4 for k in expected)
    if algo == "ppo_lora":  # the adapters' A and B and the value head: no gradient reaches the frozen base
        assert {k.rsplit(".", 1)[-1] for k in ddp if ".parametrizations." in k} == {"A", "B"}
        assert all(".parametrizations." in k or k.startswith("value_head.") for k in ddp), sorted(ddp)


def test_online_dpo_with_a_judge_undecided_on_one_rank_only_finishes_with_one_process_gradient(learned_gradients):
    """The judge abstains (−1) on the last pair only, which rank 1 holds: rank 0 decides 2 pairs,
    rank 1 one. Dropping the pair made the ranks run different numbers of backward passes (a DDP
    deadlock); weighted 0, both step once, and DDP's mean equals one process's gradient over the 3
    decided pairs. judge/skipped is the total (1), not the total over the number of processes."""
    ddp = dict(learned_gradients["ddp"]["online_dpo_judge"])
    expected = dict(learned_gradients["alone"]["online_dpo_judge"])
    assert ddp.pop("stats/judge/skipped").item() == expected.pop("stats/judge/skipped").item() == 1
    assert set(ddp) == set(expected) and len(ddp) > 10
    for name, grad in expected.items():
        torch.testing.assert_close(ddp[name], grad, atol=1e-5, rtol=0, msg=name)
    assert any(g.abs().max() > 1e-4 for g in expected.values())


@pytest.mark.parametrize("algo", algorithms())  # every registered algorithm, and the toy one
def test_two_process_run_writes_one_run_folder_from_rank_0(algo, tmp_path):
    """The toy reaches each torchrun process through the registry's environment hook."""
    run_dir = tmp_path / "run"
    with registered(algo):  # G = 2: 8 samples split over 2 ranks in whole groups
        group = [f"--{k.replace('_', '-')}={v}" for k, v in small_settings(algo, num_generations=2).items()]
    plugin = {registry.PLUGINS_ENV: f"{TOY_FILE}:register"} if algo == TOY else {}
    out = torchrun("-m", "rlhf_scratch.train", "sentiment", "--algo", algo, "--total-phases", "2", "--batch-size", "8",
                   "--gen-len", "6", "--num-minibatches", "2", "--device", "cpu", "--run-dir", str(run_dir), *group,
                   cwd=tmp_path, env=plugin)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("done:") == 1, "only rank 0 prints"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"], "no second run folder"
    for name in ("config.json", "metrics.jsonl", "samples.md", "curves.png", "policy.pt", "status.json"):
        assert (run_dir / name).is_file(), f"{name} missing"
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["phase"] for m in metrics] == [1, 2], "one line per phase, not one per rank"
    assert all(m["completions/total_tokens"] == 8 * 6 for m in metrics), "the logged batch is the global one"
    if algo == "ppo":  # a checkpoint of 2 ranks resumes only with 2
        alone = run_bounded([sys.executable, "-m", "rlhf_scratch.train", "--resume", str(run_dir), "--total-phases", "3"],
                            cwd=tmp_path)
        assert alone.returncode == 2 and alone.stderr.strip().splitlines() == [
            "error: workers: the run was trained on 2 rank(s); resume it with torchrun --nproc-per-node 2, "
            "or --controller ray --workers 2"]  # (config.json records the ranks: refused before the models load)


def test_the_validation_of_two_processes_equals_one_processs(tmp_path):
    """`dataflow.validate` under torchrun: each rank draws every second call from the call's own stream and
    every rank gets every sample, so the held-out numbers do not depend on the number of processes (the
    run's first validation, before training: both start from the same weights)."""
    flags = ["arithmetic", "--algo", "grpo", "--total-phases", "1", "--batch-size", "8", "--num-generations", "4",
             "--num-minibatches", "2", "--val-size", "20", "--val-n", "4", "--device", "cpu", "--threads", "1"]
    two = torchrun("-m", "rlhf_scratch.train", *flags, "--run-dir", str(tmp_path / "two"), cwd=tmp_path)
    assert two.returncode == 0, two.stderr[-2000:]
    one = run_bounded([sys.executable, "-m", "rlhf_scratch.train", *flags, "--run-dir", str(tmp_path / "one")], cwd=tmp_path)
    assert one.returncode == 0, one.stderr[-2000:]
    lines = {name: [json.loads(line) for line in (tmp_path / name / "validation.jsonl").read_text().splitlines()]
             for name in ("one", "two")}
    assert [v["phase"] for v in lines["two"]] == [0, 1], "one validation.jsonl, written by rank 0 only"
    before = [{k: v for k, v in line.items() if not k.startswith("timing/")} for line in (lines["one"][0], lines["two"][0])]
    assert before[0] == before[1] and before[0]["eval/problems"] == 20
