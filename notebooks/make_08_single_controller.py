"""Writes notebooks/08_single_controller.ipynb and executes it (so the committed notebook shows its outputs):

    python notebooks/make_08_single_controller.py            # write, then execute (under 2 minutes)
    python notebooks/make_08_single_controller.py --no-run   # write only

Executing is `rlhf_scratch.course.execute_notebooks`' (the suite's kernel environment, and each cell's
source hash recorded, so `python -m rlhf_scratch.course.execute_notebooks --check` passes).

Edit the text here, not in the notebook, then run this file. The notebook starts a local Ray
(`ray.init(num_cpus=2)`, through the package's `init_ray`), runs the tiny preset for 3 phases on 2
ranks and on 1, and shuts Ray down at the end, checking that no process is left. The full story is
docs/distributed.md, "The single controller".
"""

import sys
from pathlib import Path

from notebook_generator import write

HERE = Path(__file__).parent
PATH = HERE / "08_single_controller.ipynb"

CELLS = [
    ("md", "intro", """\
# 08 · From one process to a single controller

Every run so far was **one process**: the trainer samples, scores, computes advantages and learns, one
call after another (`trainer.generate_sequences`, `compute_log_prob`, `compute_scores`,
`compute_advantages`, `update_actor`: notebook 06 built that loop). Large RLHF runs put those
roles on different machines. verl's answer, in its own words, is to adapt "a toy single-process RLHF
script into a distributed system with minimal changes": a **single controller**. One driver process
still runs the dataflow as plain calls, but each call goes to a **worker group**, N processes that
split the batch, run the same method and send back their pieces in order.

`rlhf_scratch/controller/` builds that design from scratch on Ray, with verl's names. In this notebook:

1. the dataflow the driver runs — the engine's own phase loop, the one every in-process run runs, with
   the controller as its backend — read from the source and drawn;
2. verl's dispatch decorator, `@register(dispatch_mode=...)`, built from scratch on plain Python
   objects, then shown to be what `rlhf_scratch/controller/decorator.py` does;
3. `DataProto`, the batch that travels: split, put back together, and what it refuses;
4. a run of 3 phases on **2 worker processes** through the package's controller;
5. the check that matters: the same run in-process and through the controller log **the same
   numbers**, key by key.

It runs offline on a 2-core CPU in under two minutes (most of it starting worker processes), and starts (and stops) a local Ray instance. You need notebook
06's loop and a little Python (decorators, `setattr`). The reference page is
[docs/distributed.md, the single controller](../docs/distributed.md#the-single-controller---controller-ray)."""),
    ("code", "setup", """\
import inspect
import json
import os
import re
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import psutil
import torch

from rlhf_scratch.config import make_args, registry
from rlhf_scratch.controller.ray_trainer import TIMING, RayPPOTrainer, init_ray, shutdown_ray
from rlhf_scratch.engine import dataflow

torch.set_num_threads(1)
# the run of this notebook: the tiny preset (offline model and classifier), PPO, 3 phases of 8 completions
args = make_args("tiny", total_phases=3, batch_size=8, num_minibatches=2, gen_len=6, warmup_steps=1,
                 table_every=100, plot_every=100, device="cpu")
print(f"{args.algo}: {args.total_phases} phases, batch {args.batch_size}, completions of {args.gen_len} tokens, seed {args.seed}")"""),
    ("md", "dataflow", """\
## 1 · The dataflow, as the driver runs it

There is one phase loop in the package, `engine/loop.py`, and one dataflow in it (`engine/dataflow.py`:
`roll_out`, then `learn`), a line per role in verl's order, each timed as `timing/<step>`. It calls
the roles on whatever it is given: an algorithm's trainer runs them in this process; `RayPPOTrainer`
(verl's name: its `fit` is that same loop) forwards each one to a worker group
(`self.actor_rollout_wg.generate_sequences(...)`: one call on the driver, run on every rank). So
checkpoints, early stopping and Ctrl-C are the loop's, written once for both. The cell below reads the
loop's steps out of `dataflow`'s source and, for each, the worker-group calls of `RayPPOTrainer`'s role
of that name, so the drawing is the code as it is today, not a picture of it."""),
    ("code", "dataflow-code", r"""ASYNC_ONLY = {"_before_learning", "sync_weights", "submit_generation"}  # --max-staleness 1's extra calls


def group_calls(method):
    # the worker-group calls one of RayPPOTrainer's roles makes, following its own helpers
    calls = []
    for line in inspect.getsource(method).splitlines()[1:]:
        calls += re.findall(r"self\.(\w+_wg)\.(\w+)\b", line)
        for name in re.findall(r"self\.(\w+)\(", line):
            if name not in ASYNC_ONLY and inspect.isfunction(helper := getattr(RayPPOTrainer, name, None)):
                calls += group_calls(helper)
    return calls


calls = [("", "driver", "next_prompts", "")]
for part in (dataflow.roll_out, dataflow.learn):  # the loop's steps, in order: _call("gen", times, trainer.generate_sequences, ...)
    for step, role in re.findall(r'_call\("(\w+)", times, trainer\.(\w+)', inspect.getsource(part)):
        condition = {"values": "V did not come with log π_old: --max-staleness 1",
                     "update_critic": "the algorithm has a critic"}.get(step, "")
        remote = group_calls(getattr(RayPPOTrainer, role))
        calls += [(step, who, what, condition) for who, what in remote] or [(step, "driver", role, condition)]
assert sum(who != "driver" for _, who, _, _ in calls) >= 5, "no worker-group call found in RayPPOTrainer's roles"
for step, who, what, condition in calls:
    print(f"{f'timing/{step}' if step else '':20s} {who:18s} {what}{f'   (if {condition})' if condition else ''}")

lanes = ["driver", *dict.fromkeys(who for _, who, _, _ in calls if who != "driver")]
fig, ax = plt.subplots(figsize=(10, 0.55 * len(calls) + 1.2))
for x, lane in enumerate(lanes):
    ax.axvline(x, color="0.75", lw=1, zorder=0)
    ax.text(x, 0.7, lane, ha="center", fontsize=9, weight="bold")
for i, (step, who, what, condition) in enumerate(calls):
    y = -i
    ax.text(-0.55, y, f"timing/{step}" if step else "", ha="right", va="center", fontsize=7, color="0.4")
    if who == "driver":
        ax.text(0, y, what, ha="center", va="center", fontsize=8, bbox=dict(boxstyle="round", fc="lightyellow", ec="0.5"))
        continue
    x = lanes.index(who)
    ax.annotate("", xy=(x, y + 0.12), xytext=(0, y + 0.12), arrowprops=dict(arrowstyle="->", color="tab:blue"))
    ax.annotate("", xy=(0, y - 0.12), xytext=(x, y - 0.12), arrowprops=dict(arrowstyle="->", color="tab:green", ls="--"))
    label = f"{what}(batch)" + (f"   if {condition}" if condition else "")
    ax.text(x / 2, y + 0.2, label, ha="center", va="bottom", fontsize=8, color="tab:blue")
ax.set_xlim(-1.3, len(lanes) - 0.4)
ax.set_ylim(-len(calls) + 0.3, 1.1)
ax.axis("off")
ax.set_title("one phase: the driver's calls (blue, the batch out) and their answers (green, merged in)", fontsize=9)
plt.tight_layout()
plt.show()"""),
    ("md", "dataflow-note", """\
Everything between two calls (the rewards less the missing-EOS penalty, PPO's advantages, the metrics)
runs on the driver, on the whole batch. The advantages in particular are computed on the driver, as
verl does, by the trainer's own `compute_advantages`: nothing in the controller is a second copy of a
formula. Each worker-group call hands back a `DataProto` that the driver `union`s into the batch."""),
    ("md", "dispatch", """\
## 2 · The dispatch decorator, from scratch

The worker group must know, for each method, how one call on the driver becomes N calls, one per rank,
and how N answers become one. verl declares it once, beside the method:
`@register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)`. Two modes are enough to run PPO:

* `ONE_TO_ALL`: every rank gets the same arguments; the answers come back as a list, one per rank
  (load a checkpoint, ask each rank its process id);
* `DP_COMPUTE_PROTO`: the batch is cut into N contiguous chunks, rank r gets chunk r, and the answers
  are concatenated back in rank order (generate, score, learn: data parallelism).

The decorator does almost nothing: it **labels** the method. The group does the work: when it is built,
it looks for labelled methods on the worker class and gives itself a method of the same name that
dispatches, calls each worker and collects. Below, on plain Python objects in this process (Ray
would put each worker in a process of its own and turn `method(...)` into `method.remote(...)` and
`ray.get`).

**Predict**: with 2 workers, what does `group.square([1, 2, 3, 4, 5, 6])` return, and which rank squares 4?"""),
    ("code", "dispatch-code", """\
from enum import Enum


class Dispatch(Enum):
    ONE_TO_ALL = "one_to_all"
    DP_COMPUTE_PROTO = "dp_compute_proto"


def register(dispatch_mode):
    def mark(method):
        method.dispatch_mode = dispatch_mode  # a label, read by the group; the method itself is unchanged
        return method
    return mark


def split_rows(rows, n):
    if len(rows) % n:
        raise ValueError(f"{len(rows)} rows do not split into {n} equal chunks")
    size = len(rows) // n
    return [rows[r * size:(r + 1) * size] for r in range(n)]  # rank r: rows r·B/n … (r+1)·B/n − 1


DISPATCH = {  # mode -> (one call's arguments -> each rank's, the ranks' answers -> one)
    Dispatch.ONE_TO_ALL: (lambda n, *args: [args] * n, lambda answers: answers),
    Dispatch.DP_COMPUTE_PROTO: (lambda n, rows: [(chunk,) for chunk in split_rows(rows, n)],
                                lambda answers: [row for answer in answers for row in answer]),
}


class ToyWorker:
    def __init__(self, rank):
        self.rank = rank

    @register(Dispatch.ONE_TO_ALL)
    def whoami(self):
        return f"rank {self.rank} in process {os.getpid()}"

    @register(Dispatch.DP_COMPUTE_PROTO)
    def square(self, rows):
        return [(x * x, self.rank) for x in rows]


class ToyWorkerGroup:
    \"\"\"N workers seen as one object: each registered method of the class becomes a method of the group.\"\"\"

    def __init__(self, cls, n):
        self.workers = [cls(rank) for rank in range(n)]
        for name in dir(cls):
            mode = getattr(getattr(cls, name), "dispatch_mode", None)
            if mode is not None:
                setattr(self, name, self._group_method(name, mode))

    def _group_method(self, name, mode):
        dispatch, collect = DISPATCH[mode]

        def call(*args):
            per_rank = dispatch(len(self.workers), *args)
            return collect([getattr(w, name)(*a) for w, a in zip(self.workers, per_rank)])  # Ray: .remote, then ray.get
        return call


group = ToyWorkerGroup(ToyWorker, 2)
print(group.whoami())
print(group.square([1, 2, 3, 4, 5, 6]))"""),
    ("md", "dispatch-answer", """\
<details><summary>Answer</summary>

`[(1, 0), (4, 0), (9, 0), (16, 1), (25, 1), (36, 1)]`: the rows come back in their order, and 4 is
squared by **rank 1**. The chunks are contiguous (rank 0 the first half, rank 1 the second), not dealt
round-robin, and the answers are concatenated in rank order, so the driver never has to know who
did which row. `whoami` ran on both ranks with the same (no) arguments; here both live in this
process, so the process ids are the same. On Ray they will not be (section 4).
</details>"""),
    ("md", "package", """\
### The same thing in the package

`rlhf_scratch/controller/decorator.py` is this toy with two differences: the rows travel as a
`DataProto` (section 3) instead of a list, and `DP_COMPUTE_PROTO`'s collect also averages the ranks'
`meta_info["metrics"]` (each rank's are means already). The cell prints the package's `register`,
labels a worker with it, and runs the package's own dispatch and collect on two plain objects, exactly
as `RayWorkerGroup` does on Ray. The answer must be the toy's, row for row."""),
    ("code", "package-code", """\
from rlhf_scratch.controller import decorator
from rlhf_scratch.controller.protocol import DataProto
from rlhf_scratch.controller.worker_group import RayWorkerGroup, Worker, registered_methods

print(inspect.getsource(decorator.register))


class PackageToy(Worker):  # the toy's worker, with the package's decorator and batches
    @decorator.register(dispatch_mode=decorator.Dispatch.DP_COMPUTE_PROTO)
    def square(self, batch: DataProto) -> DataProto:
        x = batch.batch["x"]
        return DataProto({"y": x * x, "rank": torch.full_like(x, self.rank)})


print("registered:", registered_methods(PackageToy))  # pid: every Worker answers it (ONE_TO_ALL)
workers = [PackageToy() for _ in range(2)]
for rank, w in enumerate(workers):
    w.rank = rank  # on Ray, Worker.__init__ reads it from the environment the group sets
dispatch, collect = decorator.DISPATCH[decorator.Dispatch.DP_COMPUTE_PROTO]
per_rank_args, per_rank_kwargs = dispatch(2, DataProto({"x": torch.tensor([1, 2, 3, 4, 5, 6])}))
out = collect([w.square(*a, **k) for w, a, k in zip(workers, per_rank_args, per_rank_kwargs)])
package_rows = list(zip(out.batch["y"].tolist(), out.batch["rank"].tolist()))
print("package:", package_rows)
assert package_rows == group.square([1, 2, 3, 4, 5, 6]), "the package's dispatch differs from the toy's"
print()
print(inspect.getsource(RayWorkerGroup._group_method))"""),
    ("md", "package-note", """\
`_group_method` is the toy's, with `execute_all` in place of the list comprehension: it sends each
rank its arguments with `.remote`, waits for every rank with `ray.get`, in rank order, and turns a
rank's exception into one line naming the role and the rank (`rm rank 1: compute_rm_score failed: …`).
A `role` is there for **colocation**: several roles (actor, reference, reward model) built in one
process per rank (`create_colocated_worker_cls`), each reached through its own view of the group."""),
    ("md", "dataproto", """\
## 3 · The batch that travels: `DataProto`

A `DataProto` holds tensors that share one batch dimension (`batch`), per-row Python objects such as the
prompt texts (`non_tensor_batch`), and facts about the whole batch (`meta_info`, not split).
`chunk(n)` is the dispatch's cut and `concat` the collect's merge; `union` adds another batch's columns.

**Predict**: what does `batch.chunk(4)` do with a batch of 6 rows? And what happens when two batches
that both hold a column `scores`, with different values, are `union`ed?"""),
    ("code", "dataproto-code", """\
batch = DataProto({"input_ids": torch.arange(12).view(6, 2), "scores": torch.tensor([0.1, 0.9, 0.4, 0.6, 0.2, 0.8])},
                  {"prompts": [f"prompt {i}" for i in range(6)]}, {"temperature": 1.0})
pieces = batch.chunk(2)
for rank, piece in enumerate(pieces):
    print(f"rank {rank}: {piece.non_tensor_batch['prompts']}  scores {[round(x, 2) for x in piece.batch['scores'].tolist()]}  meta {piece.meta_info}")
back = DataProto.concat(pieces)
assert torch.equal(back.batch["input_ids"], batch.batch["input_ids"]) and torch.equal(back.batch["scores"], batch.batch["scores"])
assert back.non_tensor_batch == batch.non_tensor_batch and back.meta_info == batch.meta_info
print("chunk(2) then concat: the same batch, row for row\\n")

refused = {
    "chunk(4) of 6 rows": lambda: batch.chunk(4),
    "union with other scores": lambda: DataProto.concat(pieces).union(DataProto({"scores": torch.zeros(6)})),
    "concat of pieces with other columns": lambda: DataProto.concat([pieces[0], pieces[1].select(["input_ids", "prompts"])]),
}
for what, attempt in refused.items():
    try:
        attempt()
    except ValueError as err:
        print(f"{what:36s} refused: {err}")
    else:
        raise AssertionError(f"{what} was accepted")"""),
    ("md", "dataproto-answer", """\
<details><summary>Answer</summary>

Both are refused, each in one line that names what is wrong. Six rows do not cut into 4 equal chunks,
and `chunk` does not guess: uneven chunks would make the ranks' gradients, which DDP averages with
equal weights, weigh a row on a smaller rank more than one on a larger rank. The batch size is a
multiple of the ranks (the run's settings are checked at the start). A `union` may repeat a
column only when both batches hold the same values: two different `scores` means two roles computed
the same thing differently, and keeping either one would hide it.
</details>"""),
    ("md", "two", """\
## 4 · Two worker processes

Now on Ray: a local instance with 2 CPUs (`init_ray` is `ray.init(num_cpus=2)` plus a reaper, so that
nothing of Ray outlives this kernel even if it is killed), and `RayPPOTrainer` with **2 ranks**,
colocated (the default placement: the actor with its rollout and its reference, the critic (the blog's
value head, on the actor's trunk) and the reward model, all in one process per rank). Inside the group the ranks are a torch.distributed group (gloo on
CPU), so each update's gradients are averaged over the ranks by the package's own DDP code, as
under `torchrun --nproc-per-node 2`.

**Predict**: how many processes hold a model, and is the reward model in the same process as the actor?"""),
    ("code", "two-code", """\
init_ray(num_cpus=2)
start = time.perf_counter()
two = RayPPOTrainer(args, workers=2, quiet=True)
try:
    print(f"started in {time.perf_counter() - start:.1f} s; driver (this kernel): pid {os.getpid()}")
    print(f"actor_rollout_ref ranks: pids {two.actor_rollout_wg.pid()}   rm ranks: pids {two.rm_wg.pid()}")
    two_dir = two.fit(Path(tempfile.mkdtemp()) / "two_ranks")  # the engine's loop: a run folder, as any run
finally:
    two.shutdown()
two_ranks = [json.loads(line) for line in (two_dir / "metrics.jsonl").read_text().splitlines()]
steps = [s for s in TIMING if f"timing/{s}" in two_ranks[-1]]  # the steps that ran (PPO: update_critic too, every phase)
for m in two_ranks:
    print(f"phase {m['phase']}: reward {m['rewards/mean']:.4f}  KL {m['rollout/kl_full_vocab']:.4f}  "
          f"phase {m['charts/phase_time']:.2f} s (" + ", ".join(f"{s} {m['timing/' + s]:.2f}" for s in steps) + ")")

fig, ax = plt.subplots(figsize=(8, 2.4))
left = [0.0] * len(two_ranks)
for s in steps:
    seconds = [m[f"timing/{s}"] for m in two_ranks]
    ax.barh([f"phase {m['phase']}" for m in two_ranks], seconds, left=left, label=f"timing/{s}")
    left = [a + b for a, b in zip(left, seconds)]
ax.set_xlabel("seconds on the driver's clock")
ax.legend(fontsize=7, ncol=len(steps), loc="lower center", bbox_to_anchor=(0.5, 1.02))
ax.invert_yaxis()
plt.tight_layout()
plt.show()"""),
    ("md", "two-answer", """\
<details><summary>Answer</summary>

Two: one per rank, neither of them this kernel. The actor's and the reward model's process ids are the
same on each rank, because colocated roles are built in one process (`create_colocated_worker_cls`);
with `--placement split` the reward model gets processes of its own. Most of a phase is the update
(`timing/update_actor`), then generation; starting the two processes (each imports torch and builds
its models) costs more than the three phases together. The calls' own cost, moving the batch through
Ray's object store, is a few milliseconds (docs/distributed.md, Overhead).
</details>"""),
    ("md", "equal", """\
## 5 · The same run, in one process and through the controller

The controller is only worth trusting if it changes *where* the work runs and nothing else. The check:
the same settings and seed, once through the in-process trainer (`trainer.train`, which writes
metrics.jsonl), once through the controller with **one** rank, then every metric compared key by key.
With one rank the worker holds the same trainer, draws the same random numbers in the same order and
calls the same functions, so there is no reason for any number to move. Timings (`timing/*`,
`charts/phase_time`, `charts/rollout_time`, `charts/tokens_per_s`) are clocks, and may.

**Predict**: which keys differ, and by how much: bit for bit, or within 1e-6?"""),
    ("code", "equal-code", """\
TIMING_KEYS = ("time/", "timing/", "charts/phase_time", "charts/rollout_time", "charts/tokens_per_s")


def same(a, b):
    return a == b or (a != a and b != b)  # NaN (a metric with nothing to average) counts as equal to NaN


one = RayPPOTrainer(args, workers=1, quiet=True)
try:
    ray_dir = one.fit(Path(tempfile.mkdtemp()) / "through_ray")
    ray_weights = one.policy_state_dict()
finally:
    one.shutdown()
through_ray = [json.loads(line) for line in (ray_dir / "metrics.jsonl").read_text().splitlines()]
with tempfile.TemporaryDirectory() as tmp:
    trainer = registry.get(args.algo).trainer_class()(args, quiet=True)
    run_dir = trainer.train(Path(tmp) / "in_process")
    in_process = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]

for phase, (ray_m, local_m) in enumerate(zip(through_ray, in_process, strict=True), start=1):
    differ = sorted(k for k in local_m.keys() & ray_m.keys() if not same(ray_m[k], local_m[k]))
    only_local, only_ray = sorted(local_m.keys() - ray_m.keys()), sorted(ray_m.keys() - local_m.keys())
    untimed = [k for k in differ + only_local if not k.startswith(TIMING_KEYS)]
    print(f"phase {phase}: {len(local_m)} keys in-process; bit-equal through Ray: {len(local_m) - len(differ) - len(only_local)}; "
          f"differ: {differ}\\n         only in-process: {only_local}\\n         only through Ray: {only_ray}")
    assert not untimed, f"phase {phase}: non-timing metrics differ or are missing: {untimed}"
for key in ("rewards/mean", "rollout/kl_full_vocab", "losses/clipped_surrogate", "losses/value_loss"):
    print(f"  {key:26s} in-process {in_process[-1][key]!r:24}  through Ray {through_ray[-1][key]!r}")
moved = [k for k, v in trainer.policy.state_dict().items() if not torch.equal(ray_weights[k], v)]
print(f"final weights: {len(ray_weights)} tensors, {len(moved)} differ")
assert not moved"""),
    ("md", "equal-answer", """\
<details><summary>Answer</summary>

Only the clocks differ: the three `charts/` clocks and the loop's `timing/*` take other values, the
in-process breakdown inside each role (`time/*`: generation, forwards, backward …) is measured only
where the work runs. Neither backend logs `timing/values`: PPO's critic is the value head on the actor's
own trunk, in the actor's process, so V comes with log π_old from the same forward and the loop skips
verl's separate `compute_values` call (it is made only under `--max-staleness 1`, where the rollout pool's
weights are the sampler's and V must be the critic's now).
Every other number is **bit-equal** (the `!r` shows all the digits), and the final weights are the
same tensors exactly. Not "within 1e-6": nothing is summed in another order,
because with one rank the worker runs the in-process trainer's own functions on the same batch. With
2 ranks the fair comparison is `torchrun --nproc-per-node 2`, and there every metric is bit-equal too
except two held-out means that torchrun averages per rank first (within 1e-7;
`tests/integration/test_controller.py`, which also runs Online DPO, GRPO and RLOO this way).
</details>"""),
    ("code", "shutdown", """\
shutdown_ray()
deadline = time.monotonic() + 10
while (left := [p for p in psutil.Process().children(recursive=True) if p.is_running()]) and time.monotonic() < deadline:
    time.sleep(0.2)
print("Ray shut down; processes left behind:", [p.name() for p in left])
assert not left"""),
    ("md", "takeaways", """\
## What to take away

* A single controller keeps the algorithm in **one readable function** on the driver; each line is a
  call on a worker group, and the group, not the call site, knows how to split it.
* `@register(dispatch_mode=...)` is a label; the group reads it when it binds the method. `ONE_TO_ALL`
  copies the arguments to every rank, `DP_COMPUTE_PROTO` cuts the `DataProto` into contiguous equal
  chunks and concatenates the answers in rank order.
* `DataProto` refuses what it cannot do exactly (uneven chunks, clashing columns) in one line.
* The test of the design is equality: through the controller, one rank gives the in-process run's
  numbers bit for bit; two ranks give `torchrun`'s.

Which file here is which verl class, verl's metric names against ours, the overhead measured, and what
is left out (Megatron, vLLM, FSDP sharding: the package's models fit on one device, and the point is
the dataflow and its equality with the in-process run): [docs/distributed.md](../docs/distributed.md#the-single-controller---controller-ray).
The command is `python -m rlhf_scratch.train sentiment --controller ray [--workers 2] [--placement split]`."""),
]


if __name__ == "__main__":
    write(PATH, CELLS, sys.argv[1:])
