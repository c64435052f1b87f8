"""Run by tests/slow/test_distributed.py, under torchrun or alone: one learning phase of `algo` on a
saved rollout, each process on its contiguous share of the rows; rank 0 saves the gradients.

    torchrun --nproc-per-node 2 tests/distributed_worker.py ALGO ROLLOUT.pt GRADS.pt
    python tests/distributed_worker.py ALGO ROLLOUT.pt GRADS.pt [ROWS_FROM ROWS_TO]
    [torchrun ...] python tests/distributed_worker.py jobs JOBS.json    # several, one process start

JOBS.json is a list of [ALGO, ROLLOUT.pt, GRADS.pt, ROWS_FROM or null, ROWS_TO or null]: each job
makes its own trainer (seeded by its args, so the order of jobs does not matter), and the
process group is joined once and left after the last job. One process start instead of one per
job: each start imports torch and TransformerLens (about 10 s on a 2-core CPU).
"""

import dataclasses
import json
import sys

import torch

from rlhf_scratch.config import make_args, registry
from rlhf_scratch.engine import distributed as dist
from rlhf_scratch.rollout.phase import Rollout

BATCH = 8
SETTINGS = dict(batch_size=BATCH, gen_len=6, num_minibatches=1, max_grad_norm=1e9, warmup_steps=1, seed=0,
                device="cpu", threads=1)
# PPO: rewards as they are. Normalised, they would be normalised over the global batch under torchrun
# but over the half in the one-process run of a half that the test compares with.
PER_ALGO = {"ppo": dict(batches_per_learning_phase=1, normalize_reward=False),
            "rloo": dict(num_generations=2, num_iterations=1),
            "online_dpo": dict(num_iterations=1),
            # GRPO: the batch std and dapo's token count must be the global batch's (β > 0: the k3 term too)
            "grpo": dict(num_generations=2, num_iterations=1, scale_rewards="batch", loss_type="dapo", beta=0.04)}
# PPO with rank-2 LoRA adapters: DDP averages the gradients of the adapters and the value head, the only
# parameters that require them (the reference forward is the policy's own LM with its adapters off)
PER_ALGO["ppo_lora"] = dict(PER_ALGO["ppo"], lora_rank=2, cache_ref_logprobs=False)


def make_trainer(algo: str):
    base = algo.removesuffix("_lora")
    trainer = registry.get(base).trainer_class()(make_args("tiny", base, **SETTINGS, **PER_ALGO[algo]), quiet=True)
    if algo.endswith("_lora"):  # adapters that have moved (B = 0 gives A no gradient): the same on every rank
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for B in [p for name, p in trainer.policy.named_parameters() if name.endswith(".B")]:
                B.copy_(0.05 * torch.randn(B.shape, generator=gen))
    return trainer


def rows(rollout: Rollout, start: int, stop: int) -> Rollout:
    """Rows start:stop of a rollout (every per-sample tensor and list)."""
    cut = {}
    for f in dataclasses.fields(rollout):
        value = getattr(rollout, f.name)
        cut[f.name] = value[start:stop] if isinstance(value, (torch.Tensor, list)) else value
    return Rollout(**cut)


def judge_undecided_on(undecided: set[str]):
    """A judge that cannot decide (−1) the pairs whose first completion is in `undecided`, and
    otherwise prefers the shorter completion."""
    def judge(prompts, pairs):
        return [-1 if a in undecided else int(len(b) < len(a)) for a, b in pairs]
    return judge


def main(algo: str, rollout_path: str, grads_path: str, start: int | None = None, stop: int | None = None,
         leave: bool = True) -> None:
    judged = algo == "online_dpo_judge"  # Online DPO with a judge that abstains on the last pair only
    trainer = make_trainer("online_dpo" if judged else algo)  # joins the process group under torchrun
    rollout = torch.load(rollout_path, weights_only=False)
    if algo == "ppo_lora":  # PPO's per-minibatch reference forward, not the rollout's kept ĥ_ref
        rollout.ref_hidden = None
    if judged:  # the last pair of the batch: rank 1's under torchrun, so the ranks decide different numbers
        trainer.judge = judge_undecided_on({rollout.completions[-2]})
    n = len(rollout) // dist.world_size()
    start = dist.rank() * n if start is None else start
    stop = start + n if stop is None else stop
    stats = trainer.learning_phase(rows(rollout, start, stop))
    stats = dist.mean_over_ranks(stats)  # as the loop logs them
    if dist.is_main():
        model = trainer.policy
        grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
        torch.save({**grads, "stats/judge/skipped": torch.tensor(stats.get("judge/skipped", 0.0))}, grads_path)
    if leave:
        dist.destroy()


def jobs(jobs_path: str) -> None:
    """Every job of JOBS.json in turn, in one process (see the module docstring)."""
    for algo, rollout_path, grads_path, start, stop in json.loads(open(jobs_path).read()):
        main(algo, rollout_path, grads_path, start, stop, leave=False)
    dist.destroy()


def collectives(out_path: str) -> None:
    """Each rank contributes rank-specific values; rank 0 saves what the collectives returned."""
    dist.init("cpu")
    r = dist.rank()
    gathered = dist.all_gather(torch.tensor([[r, 10 + r]]))
    result = {
        "all_gather": gathered.tolist(),
        "local_rows": dist.local_rows(torch.arange(6)).tolist(),
        "mean_over_ranks": dist.mean_over_ranks({"a": float(r), **({"only_rank_1": 5.0} if r == 1 else {})}),
        "any_rank": [dist.any_rank(r == 1), dist.any_rank(False)],
        "shard": dist.shard(["p0", "p1", "p2", "p3"]),
        "gather_objects": dist.gather_objects(f"rank{r}"),
    }
    all_results = dist.gather_objects(result)
    if dist.is_main():
        torch.save(all_results, out_path)
    dist.destroy()


if __name__ == "__main__":
    if sys.argv[1] == "collectives":
        collectives(sys.argv[2])
    elif sys.argv[1] == "jobs":
        jobs(sys.argv[2])
    else:
        main(sys.argv[1], sys.argv[2], sys.argv[3], *(int(a) for a in sys.argv[4:]))
