"""Training a Bradley–Terry reward model as a run: a run folder, checkpoints, resume, the metrics
window; the model, its loss and its pairs are `reward.model`'s (the layer below).
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import torch

from rlhf_scratch.reward.model import (
    KIND,
    WEIGHTS_FILE,
    RewardModel,
    RewardModelArgs,
    calc_reward_model_loss,
    evaluate_pairs,
    load_pairs,
    pair_texts,
    reward_model_metrics,
    split_pairs,
)


def train_reward_model(args: RewardModelArgs, resume: bool = False) -> Path:
    """Train a reward model on `args.pairs`; write and return its run folder.

        run_dir/config.json       {"algo": "reward_model", every field of args}
        run_dir/metrics.jsonl     step, epoch, TRL's metrics (train) and eval/… after each epoch
        run_dir/status.json       running | finished | interrupted, and the steps done
        run_dir/checkpoints/      phase-XXXX (XXXX = optimizer steps) as the trainers write them
        run_dir/reward_model.pt   the final weights (trunk + head)

    With `resume`, continues `args.run_dir` from its latest checkpoint (same order of batches).
    """
    from tqdm.auto import tqdm

    from rlhf_scratch.engine.checkpoint import load_latest_checkpoint, rng_state, set_rng_state
    from rlhf_scratch.engine.lifecycle import RunLife
    from rlhf_scratch.engine.run_setup import resolve_device, set_seed
    from rlhf_scratch.engine.runs import CONFIG_FILE, append_metrics, check_new_run_dir, cut_metrics, read_metrics
    from rlhf_scratch.models.loading import load_lm

    args.validate()
    say = (lambda text: None) if args.quiet else tqdm.write
    rows = load_pairs(args.pairs)
    run_dir = Path(args.run_dir or f"runs/reward_model-{time.strftime('%Y%m%d-%H%M%S')}")
    args.run_dir = str(run_dir)
    if not resume:
        check_new_run_dir(run_dir)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    set_seed(args.seed)
    model = RewardModel(load_lm(args.model, device=device)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    train_idx, eval_idx = split_pairs(len(rows), args.eval_fraction, args.seed)
    eval_rows = [rows[i] for i in eval_idx]
    steps_per_epoch = math.ceil(len(train_idx) / args.batch_size)
    total_steps = steps_per_epoch * args.epochs
    step = 0
    if not resume:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / CONFIG_FILE).write_text(json.dumps(args.to_dict(), indent=2) + "\n")

    def state(at: int, window: list[dict[str, float]], due: list[dict[str, float]] | None) -> dict:
        """A checkpoint's small part (the lifecycle adds the weights and the optimizer: `state_now`):
        the metrics window still to be averaged into the next log line, and `due`, the window of a
        line due at this very step (written after the checkpoint: a kill in between must not lose it)."""
        return {"phase": at, "algo": KIND, "rng": rng_state(), "window": window, "due": due}

    def log_line(at: int, window: list[dict[str, float]]) -> dict:
        """The metrics line of step `at`: the window's means, and on an epoch's last step the held-out pairs."""
        metrics = {"step": at, "epoch": at / steps_per_epoch,
                   **{k: sum(w[k] for w in window) / len(window) for k in window[0]}}
        if at % steps_per_epoch == 0:
            metrics.update(evaluate_pairs(model, eval_rows, center_rewards_coefficient=args.center_rewards_coefficient))
            say(f"epoch {at // steps_per_epoch}: eval/accuracy {metrics['eval/accuracy']:.3f}"
                + (f", eval/gold_accuracy {metrics['eval/gold_accuracy']:.3f}" if "eval/gold_accuracy" in metrics else ""))
        append_metrics(run_dir, metrics)
        return metrics

    life = RunLife(run_dir, total_steps, args.keep_checkpoints, unit_name="step",
                   state_now=lambda: {"policy": model.state_dict(), "optimizer": optimizer.state_dict()},
                   moved=lambda: step)
    window: list[dict[str, float]] = []
    with life:  # one process trains a folder at a time; Ctrl-C / SIGTERM finish the step and checkpoint
        if resume:
            restored = load_latest_checkpoint(run_dir, say)
            model.load_state_dict(restored["policy"])
            optimizer.load_state_dict(restored["optimizer"])
            set_rng_state(restored["rng"])
            step = int(restored["phase"])
            cut_metrics(run_dir, step, key="step")  # lines logged after the checkpoint are logged again
            window = restored.get("window", [])  # the steps since the last line, as the uninterrupted run has them
            if restored.get("due") and step not in {m.get("step") for m in read_metrics(run_dir)}:
                log_line(step, restored["due"])  # killed between this step's checkpoint and its line
        life.start(step, state(step, window, None))
        say(f"reward model: {len(train_idx)} training pairs, {len(eval_idx)} held out, {total_steps} steps -> {run_dir}")
        with tqdm(total=total_steps, initial=step, desc="reward model", disable=args.quiet) as bar:
            while step < total_steps:
                epoch, within = divmod(step, steps_per_epoch)
                order = list(train_idx)
                random.Random(args.seed * 1000 + epoch).shuffle(order)  # the epoch's order, from (seed, epoch) alone
                batch = [rows[i] for i in order[within * args.batch_size : (within + 1) * args.batch_size]]
                chosen, rejected = pair_texts(batch)
                ids, mask = model.tokenize(chosen + rejected)  # one forward for both sides, as TRL
                rewards = model(ids, mask)
                r_c, r_r = rewards[: len(batch)], rewards[len(batch) :]
                margin = (torch.tensor([float(r["margin"]) for r in batch], device=rewards.device)
                          if "margin" in batch[0] else None)
                loss = calc_reward_model_loss(r_c, r_r, margin, args.center_rewards_coefficient)
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                step += 1
                bar.update(1)
                window.append({"loss": loss.item(), **reward_model_metrics(r_c, r_r)})
                logs_now = step % args.log_every == 0 or step % steps_per_epoch == 0
                # the step is done and kept before anything is evaluated: an evaluation that fails
                # leaves a checkpoint of this step (and at the last step, a finished training to resume)
                due = args.save_every and step % args.save_every == 0
                life.completed(step, state(step, [] if logs_now else list(window), list(window) if logs_now else None),
                               save=bool(due or life.signal or step == total_steps))
                if logs_now:
                    metrics = log_line(step, window)
                    window = []
                    bar.set_postfix(loss=f"{metrics['loss']:.3f}", acc=f"{metrics['accuracy']:.2f}")
                if life.signal:
                    raise life.interrupted_by_signal(step)
                life.running(step)
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, run_dir / WEIGHTS_FILE)
        life.finished(step)
    return run_dir
