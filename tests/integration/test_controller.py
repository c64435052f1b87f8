"""The single controller on Ray (rlhf_scratch/controller): the batch that travels, the dispatch,
and the central check — a run driven through Ray worker groups equals the in-process trainer's run
at the same seed, metric for metric and weight for weight."""

import dataclasses
import functools
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import ray
import torch

from rlhf_scratch.config import make_args
from rlhf_scratch.controller.decorator import Dispatch, collect_dp_compute_proto, dispatch_dp_compute_proto, register
from rlhf_scratch.controller.protocol import DataProto
from rlhf_scratch.controller.ray_trainer import timing_steps
from rlhf_scratch.controller.worker_group import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    Worker,
    WorkerError,
    create_colocated_worker_cls,
)
from rlhf_scratch.engine.loop import without_timings


# ---------------------------------------------------------------------------------------- DataProto
def rows(n, start=0):
    return DataProto({"x": torch.arange(start, start + n).view(n, 1) * 10}, {"text": [f"t{i}" for i in range(start, start + n)]},
                     {"temperature": 0.7})


def test_chunk_then_concat_gives_back_the_rows_in_order():
    batch = rows(6)
    pieces = batch.chunk(3)
    assert [p.non_tensor_batch["text"] for p in pieces] == [["t0", "t1"], ["t2", "t3"], ["t4", "t5"]]
    assert [p.batch["x"].flatten().tolist() for p in pieces] == [[0, 10], [20, 30], [40, 50]]
    back = DataProto.concat(pieces)
    assert torch.equal(back.batch["x"], batch.batch["x"]) and back.non_tensor_batch == batch.non_tensor_batch
    assert back.meta_info == {"temperature": 0.7}


def test_uneven_chunks_and_mismatched_columns_are_one_line_each():
    with pytest.raises(ValueError, match="7 rows do not split into 2 equal chunks"):
        rows(7).chunk(2)
    with pytest.raises(ValueError, match="column 'text' has 2 rows, 'x' has 3"):
        DataProto({"x": torch.zeros(3)}, {"text": ["a", "b"]})
    with pytest.raises(ValueError, match="union: 4 rows into a batch of 3"):
        rows(3).union(rows(4))
    with pytest.raises(ValueError, match="column 'x' is in both batches with different values"):
        rows(3).union(rows(3, start=1).select(["x"]))
    with pytest.raises(ValueError, match="column 'x' is \\(2,\\) per row in piece 1, \\(1,\\) in piece 0"):
        DataProto.concat([rows(2), DataProto({"x": torch.zeros(2, 2)}, {"text": ["a", "b"]}, {})])


def test_ranks_left_padded_to_their_own_widths_concat_padded_and_each_gets_its_own_back():
    """Rank 0 padded its prompts to width 3, rank 1 to width 2 (each its own longest, as torchrun's
    processes do): concat pads rank 1's on the left with each column's pad value; the dispatch's chunks
    trimmed (`trim_left_pad`) are the ranks' tensors again, exactly; a column not named is refused."""
    from rlhf_scratch.controller.protocol import LEFT_PAD, LEFT_PAD_MASK

    meta = {LEFT_PAD: {"ids": 9, "mask": False, "v": 0.5}, LEFT_PAD_MASK: "mask"}
    rank0 = DataProto({"ids": torch.tensor([[9, 5, 6], [7, 8, 4]]), "mask": torch.tensor([[0, 1, 1], [1, 1, 1]]).bool(),
                       "v": torch.tensor([[0.5, 1.5, 2.5], [3.5, 4.5, 5.5]]), "lp": torch.tensor([[-1.0], [-2.0]])},
                      {"p": ["a", "b"]}, dict(meta))
    rank1 = DataProto({"ids": torch.tensor([[3, 1], [9, 2]]), "mask": torch.tensor([[1, 1], [0, 1]]).bool(),
                       "v": torch.tensor([[6.5, 7.5], [0.5, 8.5]]), "lp": torch.tensor([[-3.0], [-4.0]])},
                      {"p": ["c", "d"]}, dict(meta))
    both = DataProto.concat([rank0, rank1])
    assert both.batch["ids"].tolist() == [[9, 5, 6], [7, 8, 4], [9, 3, 1], [9, 9, 2]]
    assert both.batch["mask"].int().tolist() == [[0, 1, 1], [1, 1, 1], [0, 1, 1], [0, 0, 1]]
    assert both.batch["v"][2:].tolist() == [[0.5, 6.5, 7.5], [0.5, 0.5, 8.5]]
    assert both.batch["lp"].flatten().tolist() == [-1.0, -2.0, -3.0, -4.0]  # one wide per row: untouched
    per_rank_args, _ = dispatch_dp_compute_proto(2, both)
    (args0,), (args1,) = per_rank_args
    for mine, back in ((rank0, args0), (rank1, args1)):
        assert back.batch.keys() == mine.batch.keys()
        assert all(torch.equal(back.batch[k], mine.batch[k]) for k in mine.batch), back.batch
    wide = DataProto({**rank1.batch, "lp": torch.zeros(2, 2)}, {"p": ["c", "d"]}, dict(meta))
    with pytest.raises(ValueError, match="column 'lp' is \\(2,\\) per row in piece 1, \\(1,\\) in piece 0"):
        DataProto.concat([rank0, wide])
    assert rank0.trim_left_pad() is rank0  # its longest row pads nothing: nothing to take off


def test_union_pop_select():
    batch = rows(3)
    batch.union(DataProto({"y": torch.ones(3)}, meta_info={"phase": 2}))
    assert batch.keys() == ["x", "y", "text"] and batch.meta_info == {"temperature": 0.7, "phase": 2}
    popped = batch.pop(["y", "text"])
    assert popped.keys() == ["y", "text"] and batch.keys() == ["x"]
    with pytest.raises(ValueError, match="no column 'y' \\(columns: x\\)"):
        batch.select(["y"])


def test_dp_compute_proto_splits_each_batch_and_collects_in_rank_order():
    per_rank_args, per_rank_kwargs = dispatch_dp_compute_proto(2, rows(4), 3, scale=rows(4, start=4))
    assert [a[0].non_tensor_batch["text"] for a in per_rank_args] == [["t0", "t1"], ["t2", "t3"]]
    assert [a[1] for a in per_rank_args] == [3, 3]  # not a batch: every rank gets it as it is
    assert [k["scale"].non_tensor_batch["text"] for k in per_rank_kwargs] == [["t4", "t5"], ["t6", "t7"]]
    outs = [DataProto({"x": a[0].batch["x"] + 1}, meta_info={"metrics": {"loss": float(r), "kl": 1.0 + r}})
            for r, a in enumerate(per_rank_args)]
    merged = collect_dp_compute_proto(outs)
    assert merged.batch["x"].flatten().tolist() == [1, 11, 21, 31]
    assert merged.meta_info["metrics"] == {"loss": 0.5, "kl": 1.5}


def test_register_refuses_a_mode_that_is_not_a_dispatch():
    with pytest.raises(TypeError, match="dispatch_mode"):  # one line of ours, or the suite's type checker first
        register("one_to_all")
    assert register(Dispatch.ONE_TO_ALL)(lambda self: 1)._controller_dispatch is Dispatch.ONE_TO_ALL


# ---------------------------------------------------------------------------------------- verl's three scoring calls
@pytest.mark.parametrize("cache_ref_logprobs", [True, False])
def test_ref_log_prob_then_log_prob_then_values_equal_the_one_pass_bit_for_bit(cache_ref_logprobs, one_thread):
    """The trainer's compute_log_prob taken apart as the controller calls it (compute_ref_log_prob's
    ĥ_ref, compute_log_prob without values, compute_values' own forward) gives every column of the
    one pass exactly; and the ĥ_ref it is given is the one it uses (a scaled one moves log π_ref and KL only)."""
    from rlhf_scratch.algorithms.ppo import RLHFTrainer

    trainer = RLHFTrainer(args_for("ppo", batch_size=6, num_minibatches=3, cache_ref_logprobs=cache_ref_logprobs), quiet=True)
    torch.manual_seed(0)
    with torch.no_grad():
        sampled = trainer.generate_sequences(trainer.next_prompts())
    columns = ("logprobs", "entropy", "ref_logprobs", "kl", "values", "ref_hidden", "ref_lse")
    fresh = lambda: dataclasses.replace(sampled)  # noqa: E731  (a new rollout of the same samples)
    with torch.no_grad():
        one = trainer.compute_log_prob(fresh())
        ref_hidden = trainer.compute_ref_log_prob(fresh())
        apart = trainer.compute_log_prob(fresh(), ref_hidden=ref_hidden, with_values=False)
        values = trainer.compute_values(fresh())
        moved = trainer.compute_log_prob(fresh(), ref_hidden=ref_hidden * 1.25, with_values=False)
    assert ref_hidden.shape == (6, sampled.completion_ids.shape[1], trainer.lm.cfg.d_model)
    assert apart.values is None and values.shape == one.values.shape == sampled.attention_mask.shape
    apart.values = values
    for k in columns:
        a, b = getattr(one, k), getattr(apart, k)
        assert (a is None) == (b is None) == (k in ("ref_hidden", "ref_lse") and not cache_ref_logprobs), k
        assert a is None or torch.equal(a, b), f"{k}: the three calls differ from the one pass"
    assert torch.equal(moved.logprobs, one.logprobs) and torch.equal(moved.entropy, one.entropy)
    assert not torch.equal(moved.ref_logprobs, one.ref_logprobs) and not torch.equal(moved.kl, one.kl)


def test_the_driver_computes_every_algorithms_advantages_with_its_own_trainer_method():
    """advantage_estimator holds only the args: RLOO's leave-one-out and Online DPO's pairs from
    rewards worked by hand (G = 2: A_i = r_i − r_other; pair winners +1 / −1)."""
    from rlhf_scratch.controller.ray_trainer import advantage_estimator, compute_advantage, generate_pairwise_data
    from rlhf_scratch.rollout.phase import Rollout

    rewards, zeros = torch.tensor([0.9, 0.2, -0.3, 0.5]), torch.zeros(4, 3)
    rollout = Rollout(prompt_ids=torch.ones(4, 1, dtype=torch.long), completion_ids=torch.ones(4, 3, dtype=torch.long),
                      attention_mask=torch.ones(4, 4, dtype=torch.bool), completion_mask=torch.ones(4, 3, dtype=torch.bool),
                      logprobs=zeros, ref_logprobs=zeros, kl=zeros, entropy=zeros, scores=rewards, rewards=rewards,
                      prompts=["a", "a", "b", "b"], completions=["x", "y", "z", "w"], num_generations=2, eos_token_id=0)
    rloo = advantage_estimator(args_for("rloo", num_generations=2, normalize_advantages=False))
    assert compute_advantage(rloo, rollout).tolist() == pytest.approx([0.7, -0.7, -0.8, 0.8])
    dpo = advantage_estimator(args_for("online_dpo"))
    assert generate_pairwise_data(dpo, rollout).tolist() == [1.0, -1.0, -1.0, 1.0]


def test_critic_warmup_moves_only_the_value_head_then_the_policy(one_thread):
    """PPO's --critic-warmup 2 (verl's critic_warmup): phases 1 and 2 descend the value loss alone —
    the LM's weights stay exactly, the value head's move (in phase 2: under --warmup-steps the first
    phase of a run is at learning rate 0), the clipped surrogate is not logged — and phase 3 is PPO's
    whole objective; a negative count is one line."""
    from rlhf_scratch.algorithms.ppo import RLHFTrainer
    from rlhf_scratch.config import ConfigError

    trainer = RLHFTrainer(args_for("ppo", critic_warmup=2), quiet=True)
    lm_before = {k: v.clone() for k, v in trainer.lm.state_dict().items()}
    head_before = {k: v.clone() for k, v in trainer.policy.value_head.state_dict().items()}

    def phase():  # the loop's dataflow: update_critic, then update_actor (which learns nothing in a warmup phase)
        return trainer.learning_phase(trainer.rollout_phase())

    for _ in range(2):
        assert trainer.warming_up_critic
        warm = phase()
        assert warm["losses/value_loss"] > 0 and "losses/clipped_surrogate" not in warm
    assert all(torch.equal(v, lm_before[k]) for k, v in trainer.lm.state_dict().items()), "the policy moved in the warmup"
    assert not all(torch.equal(v, head_before[k]) for k, v in trainer.policy.value_head.state_dict().items()), \
        "the critic did not learn in its warmup"
    assert not trainer.warming_up_critic
    assert "losses/clipped_surrogate" in phase()
    assert not all(torch.equal(v, lm_before[k]) for k, v in trainer.lm.state_dict().items()), "the policy never learned"
    with pytest.raises(ConfigError, match="^critic_warmup: must be >= 0 \\(0 = none\\); got -1$"):
        args_for("ppo", critic_warmup=-1)


# ---------------------------------------------------------------------------------------- on Ray
class Echo(Worker):
    """A worker without a model: what the dispatch does is all there is to see."""

    def __init__(self, offset: int) -> None:
        super().__init__()
        if offset < 0:
            raise ValueError(f"offset {offset} < 0\nsecond line")
        self.offset = offset

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def add_rank(self, batch: DataProto) -> DataProto:
        return DataProto({"x": batch.batch["x"] + self.offset + 100 * self.rank}, {"who": [self.rank] * len(batch)})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail_on(self, rank: int) -> int:
        if self.rank == rank:
            raise ValueError(f"bad row on rank {rank}\nsecond line")
        return self.rank


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether process `pid` has exited (or is a zombie) within `timeout_s`."""
    end = time.time() + timeout_s
    while time.time() < end:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_group_of_two_splits_runs_and_collects_in_order(local_ray):
    group = RayWorkerGroup(RayResourcePool(process_on_nodes=[2]), RayClassWithInitArgs(Echo, 1), role="echo")
    try:
        out = group.add_rank(rows(4))
        assert out.batch["x"].flatten().tolist() == [1, 11, 121, 131] and out.non_tensor_batch["who"] == [0, 0, 1, 1]
        with pytest.raises(ValueError, match="5 rows do not split into 2 equal chunks"):
            group.add_rank(rows(5))
        with pytest.raises(WorkerError, match="^echo rank 1: fail_on failed: ValueError: bad row on rank 1$"):
            group.fail_on(1)
        pids = group.pid()
        assert len(set(pids)) == 2 and os.getpid() not in pids
        ray.kill(group.workers[0])  # (asynchronous: until its process is gone, rank 0 may still run the call)
        assert wait_gone(pids[0]), "ray.kill ends the worker's process"
        with pytest.raises(WorkerError, match="^echo rank 0: the worker process died \\(fail_on\\)$"):
            group.fail_on(1)
    finally:
        group.kill()
        group.resource_pool.release()


def test_a_worker_that_cannot_start_is_one_line_naming_role_and_rank(local_ray):
    pool = RayResourcePool(process_on_nodes=[1])
    try:
        with pytest.raises(WorkerError, match="^echo rank 0: failed to start: ValueError: offset -1 < 0$"):
            RayWorkerGroup(pool, RayClassWithInitArgs(Echo, -1), role="echo")
    finally:
        pool.release()


def test_colocated_roles_share_one_process_and_each_has_its_own_methods(local_ray):
    cls = create_colocated_worker_cls({"a": RayClassWithInitArgs(Echo, 1), "b": RayClassWithInitArgs(Echo, 1000)})
    group = RayWorkerGroup(RayResourcePool(process_on_nodes=[1]), cls)
    try:
        roles = group.spawn(["a", "b"])
        assert roles["a"].add_rank(rows(2)).batch["x"].flatten().tolist() == [1, 11]
        assert roles["b"].add_rank(rows(2)).batch["x"].flatten().tolist() == [1000, 1010]
        assert roles["a"].pid() == roles["b"].pid()  # one process holds both roles
        with pytest.raises(WorkerError, match="^b rank 0: fail_on failed: ValueError: bad row on rank 0$"):
            roles["b"].fail_on(0)
    finally:
        group.kill()
        group.resource_pool.release()
    pool = RayResourcePool(process_on_nodes=[1])
    try:
        cls = create_colocated_worker_cls({"a": RayClassWithInitArgs(Echo, 1), "b": RayClassWithInitArgs(Echo, -2)})
        with pytest.raises(WorkerError, match="^b rank 0: failed to start: ValueError: offset -2 < 0$"):
            RayWorkerGroup(pool, cls)
    finally:
        pool.release()


def read_metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def args_for(algo, **overrides):
    return make_args("tiny", algo=algo, **{**dict(total_phases=3, batch_size=8, num_minibatches=2, gen_len=6,
                                                    warmup_steps=1, table_every=100, plot_every=100), **overrides})


@functools.cache
def in_process_run(algo, tmp_path, **overrides):
    """The in-process trainer's run (loop.run_training): metrics.jsonl and the final weights (once per algorithm)."""
    from rlhf_scratch.config import registry

    args = args_for(algo, **overrides)

    trainer = registry.get(args.algo).trainer_class()(args, quiet=True)
    run_dir = trainer.train(tmp_path / "in_process")
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return metrics, {k: v.detach().clone() for k, v in trainer.policy.state_dict().items()}


@pytest.mark.parametrize("algo, placement, overrides", [
    pytest.param("online_dpo", "colocated", {}, id="online_dpo"),  # PPO colocated: the command's test below
    # the loop's early stopping on the Ray backend: a mean reward >= 0 over 2 phases stops both runs after phase 2
    pytest.param("rloo", "colocated", {"early_stopping": True, "reward_threshold": 0.0, "window_size": 2},
                 id="rloo-early_stopping"),
    pytest.param("online_dpo", "split", {"judge": "vader"}, marks=pytest.mark.slow,  # the judge's verdicts, then the pairs on the driver
                 id="online_dpo-judge-split"),
    # the arithmetic task: each prompt's ground truth rides to the reward worker, and the validation (phase 2 and 3)
    pytest.param("grpo", "colocated", {"task": "arithmetic", "num_generations": 4, "test_freq": 2, "val_size": 6, "val_n": 3},
                 id="grpo-arithmetic-validation"),
    # DAPO's dynamic sampling and the overlong penalty (issue 56, item 5): the extra generation batches and the
    # kept groups' log-probs through the worker group, the penalty on the driver
    pytest.param("grpo", "colocated", {"task": "arithmetic", "num_generations": 4, "val_prompts": "", "filter_groups": True,
                                       "overlong_buffer": True, "overlong_buffer_len": 3, "seed": 3},
                 id="grpo-arithmetic-dynamic_sampling"),
    pytest.param("rloo", "split", {}, marks=pytest.mark.slow, id="rloo-split"),
    pytest.param("grpo", "colocated", {}, marks=pytest.mark.slow, id="grpo"),
    pytest.param("ppo", "split", {"critic_warmup": 2}, marks=pytest.mark.slow, id="ppo-critic_warmup-split"),
    pytest.param("ppo", "colocated", {"critic": "separate", "critic_warmup": 1}, marks=pytest.mark.slow,  # verl's separate critic
                 id="ppo-critic_separate")])
def test_ray_run_equals_the_in_process_run(algo, placement, overrides, local_ray, tmp_path):
    from rlhf_scratch.controller.ray_trainer import RayPPOTrainer

    args = args_for(algo, **overrides)
    expected, expected_weights = in_process_run(algo, tmp_path.parent / "-".join([algo, *map(str, overrides.values())]), **overrides)
    controller = RayPPOTrainer(args, workers=1, placement=placement, quiet=True)
    try:
        got = read_metrics(controller.fit(tmp_path / "ray"))
        weights = controller.policy_state_dict()
    finally:
        controller.shutdown()
    assert len(got) == len(expected) == (2 if overrides.get("early_stopping") else 3)
    for phase, (g, e) in enumerate(zip(got, expected), start=1):
        keys = set(without_timings(e))
        assert keys == set(without_timings(g)), f"phase {phase}: the two backends log different names: {sorted(keys ^ set(without_timings(g)))}"
        diff = {k: (g[k], e[k]) for k in keys if not (g[k] == e[k] or (g[k] != g[k] and e[k] != e[k]))}
        assert not diff, f"phase {phase}: the controller's numbers differ from the in-process run's: {diff}"
        assert all(f"timing/{step}" in g for step in timing_steps(args)), phase
    if args.filters_groups():  # the case samples again: the backends agree on more than one batch a phase
        assert any(m["filter_groups/num_gen_batches"] > 1 for m in got)
    if args.val_prompts:  # validated after phases 2 and 3, the same numbers as in process
        assert [("eval/pass@1" in m) for m in got] == [False, True, True]
    assert expected_weights.keys() == weights.keys()
    moved = [k for k in weights if not torch.equal(weights[k], expected_weights[k])]
    assert not moved, f"weights differ from the in-process run's: {moved[:5]}"
    assert got[-1]["charts/learning_rate"] > 0  # the run trained: the equality is not of untouched weights


@pytest.mark.slow
@pytest.mark.parametrize("algo, prompts", [("ppo", None), ("ppo", "rt"), ("grpo", None)])
def test_two_ranks_on_ray_equal_the_torchrun_run(algo, prompts, local_ray, tmp_path):
    """2 ranks in one colocated group (gloo, the package's DDP inside the group) against
    `torchrun --nproc-per-node 2`: every number bit-equal but the held-out eval/* means, which
    torchrun averages per rank first and the driver takes over the whole batch (1e-6). On review
    openings (`--prompts rt`) the two ranks pad their prompts to different widths (the driver pads the
    concatenated batch, and each rank gets its own back); there the completions end at different
    lengths too, so the reference's log-prob per token, a mean over tokens, is torchrun's mean of the
    two ranks' means against the driver's mean over all tokens (0.7 % apart): not compared."""
    from processes import torchrun

    from rlhf_scratch.controller.ray_trainer import RayPPOTrainer

    groups = {"num_generations": 2} if algo == "grpo" else {}  # 8 rows = 4 groups of 2: two per rank
    out = torchrun("-m", "rlhf_scratch.train", "sentiment", "--algo", algo, "--total-phases", "3", "--batch-size", "8", "--gen-len", "6",
                   *(["--prompts", prompts] if prompts else []), *(["--num-generations", "2"] if groups else []),
                   "--num-minibatches", "2", "--warmup-steps", "1", "--device", "cpu", "--run-dir", str(tmp_path / "run"),
                   cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    expected = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    controller = RayPPOTrainer(args_for(algo, device="cpu", **groups, **({"prompts": prompts} if prompts else {})), workers=2,
                               quiet=True)
    try:
        got = read_metrics(controller.fit(tmp_path / "ray"))
        per_rank = controller.actor_rollout_wg.state_dict()
    finally:
        controller.shutdown()
    for phase, (g, e) in enumerate(zip(got, expected, strict=True), start=1):
        keys = set(without_timings(e))
        exact = {k: (g[k], e[k]) for k in keys if not k.startswith("eval/") and g[k] != e[k] and not (g[k] != g[k] and e[k] != e[k])}
        assert not exact, f"phase {phase}: 2 Ray ranks differ from torchrun's 2 processes: {exact}"
        pooled = {"eval/ref_logprob_per_token"} if prompts == "rt" else set()
        near = {k: (g[k], e[k]) for k in keys - pooled if k.startswith("eval/")
                and g[k] != pytest.approx(e[k], rel=1e-6, nan_ok=True)}
        assert not near, f"phase {phase}: held-out means differ by more than 1e-6: {near}"
    saved = torch.load(tmp_path / "run" / "policy.pt")
    for rank, weights in enumerate(per_rank):
        moved = [k for k in saved if not torch.equal(weights[k], saved[k])]
        assert not moved, f"rank {rank}'s weights differ from the torchrun run's: {moved[:5]}"


def test_train_controller_ray_writes_the_in_process_runs_metrics(local_ray, tmp_path, capsys):
    """`python -m rlhf_scratch.train sentiment --controller ray` (PPO, one colocated rank) writes the
    in-process run's metrics.jsonl, every non-timing number bit for bit, and policy.pt its weights
    exactly; config.json records how it was placed (the Ray this process already joined is used, and left up)."""
    from rlhf_scratch.commands.train import main

    expected, expected_weights = in_process_run("ppo", tmp_path.parent / "ppo")
    run_dir = tmp_path / "run"
    assert main(["sentiment", "--controller", "ray", "--total-phases", "3", "--batch-size", "8", "--num-minibatches", "2",
                 "--gen-len", "6", "--warmup-steps", "1", "--run-dir", str(run_dir)]) == 0
    assert json.loads((run_dir / "config.json").read_text())["controller"] == {
        "controller": "ray", "workers": 1, "placement": "colocated", "max_staleness": 0}
    got = read_metrics(run_dir)
    assert [without_timings(m) for m in got] == [without_timings(m) for m in expected]
    assert all(f"timing/{step}" in m for m in got for step in timing_steps(args_for("ppo")))
    saved = torch.load(run_dir / "policy.pt")
    assert all(torch.equal(saved[k], expected_weights[k]) for k in expected_weights)
    assert capsys.readouterr().out.count("done: ") == 1
    assert ray.is_initialized()


class SignalIn:
    """A hook that sends this process `signum` during phase `phase` (after its learning, before the
    loop has seen the phase complete)."""

    METRICS = ()

    def __init__(self, phase: int, signum: int) -> None:
        self.phase, self.signum = phase, signum

    def start(self, run_dir, phase):
        pass

    def after_phase(self, run_dir, phase):
        if phase == self.phase:
            os.kill(os.getpid(), self.signum)
        return {}


def test_sigterm_in_phase_3_checkpoints_and_the_resume_equals_the_uninterrupted_in_process_run(local_ray, tmp_path, capsys):
    """The loop's own signal handling on the Ray backend: SIGTERM in phase 3 of 4 finishes the phase,
    writes its checkpoint (status interrupted, exit code 143); `train --resume RUN` with no controller
    flag runs on Ray again (config.json says so: the driver's own clock then times no generation) and the 4 phases'
    metrics and weights are the uninterrupted in-process run's bit for bit."""
    from rlhf_scratch.commands.train import main
    from rlhf_scratch.controller.ray_trainer import RayPPOTrainer
    from rlhf_scratch.engine.lifecycle import TrainingStopped
    from rlhf_scratch.engine.runs import read_status

    expected, expected_weights = in_process_run("ppo", tmp_path.parent / "ppo-4", total_phases=4)
    run_dir = tmp_path / "run"
    controller = RayPPOTrainer(args_for("ppo", total_phases=4), quiet=True)
    try:
        with pytest.raises(TrainingStopped, match="interrupted after phase 3 \\(SIGTERM\\)") as stopped:
            controller.fit(run_dir, hooks=[SignalIn(3, signal.SIGTERM)])
    finally:
        controller.shutdown()
    assert stopped.value.exit_code == 128 + signal.SIGTERM
    assert read_status(run_dir)["status"] == "interrupted" and read_status(run_dir)["phase"] == 3
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "phase-0003"
    assert main(["--resume", str(run_dir)]) == 0
    got = read_metrics(run_dir)
    assert [without_timings(m) for m in got] == [without_timings(m) for m in expected]
    assert got[-1]["time/generation"] == 0.0 < got[-1]["timing/gen"], "the resume ran in process, not on Ray as placed"
    saved = torch.load(run_dir / "policy.pt")
    assert all(torch.equal(saved[k], expected_weights[k]) for k in expected_weights)


@pytest.mark.parametrize("argv, line", [
    (["sentiment", "--workers", "2"], "error: controller: --workers, --placement and --ray-address need --controller ray"),
    (["sentiment", "--controller", "slurm"], "error: controller: must be one of local, ray; got 'slurm'"),
    (["sentiment", "--controller", "ray", "--workers", "0"], "error: workers: must be at least 1; got 0"),
    # an unreachable head: one line at once, not minutes of Ray's retries (issue 60, C)
    (["sentiment", "--controller", "ray", "--ray-address", "127.0.0.1:1"],
     "error: ray_address: cannot reach 127.0.0.1:1 (Connection refused); is a Ray head running there (ray start --head)?"),
    (["sentiment", "--controller", "ray", "--ray-address", "nowhere"], "error: ray_address: 'nowhere' is not host:port"),
    # what PPO cannot run on 2 ranks: refused before Ray starts (it was 61 s of Ray and workers, then exit 1)
    (["sentiment", "--controller", "ray", "--workers", "2", "--critic", "separate"],
     "error: critic: separate is not yet built for a distributed run; use one process or --critic shared"),
    (["sentiment", "--controller", "ray", "--workers", "2", "--critic-warmup", "1"],
     "error: critic_warmup: not yet in a distributed run (DDP needs every parameter's gradient); use one process"),
])
def test_controller_flags_refused_in_one_line(argv, line, capsys):
    from rlhf_scratch.commands.train import main

    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [line]


def test_torchrun_with_the_controller_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    """Under torchrun every rank would start a Ray of its own (issue 60, D): refused before anything starts."""
    from rlhf_scratch.commands.train import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["sentiment", "--controller", "ray", "--run-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: controller: --controller ray starts its own worker processes; run it with python, not torchrun "
        "(--workers N gives N ranks)"]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_ctrl_c_checkpoints_shuts_ray_down_and_leaves_no_process(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) to `train --controller ray`
    mid-run: the loop finishes the phase and writes its checkpoint (issue 60, A1: there was none), exit
    130 with the line that says how to resume, status interrupted, and every process the command started
    (Ray's GCS, raylet, the workers) gone."""
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "rlhf_scratch.train", "sentiment", "--controller", "ray", "--total-phases", "200",
           "--batch-size", "8", "--num-minibatches", "2", "--gen-len", "6", "--save-every", "50", "--run-dir", str(run_dir)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 120
        while not ((run_dir / "metrics.jsonl").is_file() and (run_dir / "metrics.jsonl").read_text().count("\n") >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:] if proc.poll() else "no phase in 120 s"
            time.sleep(0.5)
        started = psutil.Process(proc.pid).children(recursive=True)
        assert len(started) >= 3, f"expected Ray's processes and a worker, found {[p.name() for p in started]}"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            for p in [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]:
                p.kill()
    assert proc.returncode == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    done = json.loads((run_dir / "status.json").read_text())
    assert done["status"] == "interrupted" and done["phase"] >= 2, done
    assert last == (f"interrupted after phase {done['phase']} (SIGINT); resume it from phase {done['phase']} with: "
                    f"python -m rlhf_scratch.train --resume {run_dir}"), last
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == f"phase-{done['phase']:04d}"
    deadline = time.monotonic() + 15
    while (left := [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"left running after Ctrl-C: {[p.name() for p in left]}"


def test_a_role_that_cannot_start_stops_the_command_in_one_line(local_ray, tmp_path, capsys):
    from rlhf_scratch.commands.train import main

    missing = tmp_path / "no_such_model"
    assert main(["sentiment", "--controller", "ray", "--reward-model", str(missing), "--total-phases", "1",
                 "--run-dir", str(tmp_path / "run")]) == 1  # a role that failed: a failure, not a bad flag
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: rm rank 0: failed to start: ModelFolderError: reward_model: {missing}: no such folder")
    assert not (tmp_path / "run").exists(), "no run folder for a run that never started"
    assert ray.is_initialized()
    deadline = time.monotonic() + 10  # (Ray frees a placement group asynchronously)
    while ray.available_resources().get("CPU") != 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU") == 2, "the failed start left a reservation behind"
