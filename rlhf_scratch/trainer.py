"""`RLHFTrainer`: PPO on a language model, reading like the blog.

    for phase in range(total_phases):
        memory = rollout_phase()        # sample, score, compute advantages — no gradients
        learning_phase(memory)          # a few epochs of minibatch ascent on the PPO objective

The objective maximised on each minibatch is

    J = L_clip(θ) − ½·c_vf·(V − R)² + c_ent·H[π] − β·KL(π ‖ π_ref)

with the KL to the frozen reference model as an explicit term (not folded into the reward).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import numpy as np
import torch
from tabulate import tabulate
from torch import Tensor, nn
from tqdm.auto import tqdm

from rlhf_scratch.advantages import compute_advantages, compute_gae_advantages
from rlhf_scratch.config import ConfigError, RLHFArgs
from rlhf_scratch.control import AdaptiveKLController, EarlyStopping
from rlhf_scratch.loading import load_lm
from rlhf_scratch.memory import ReplayMemory, ReplayMinibatch
from rlhf_scratch.model import TransformerWithValueHead
from rlhf_scratch.objectives import (
    calc_approx_kl,
    calc_clip_fraction,
    calc_clipped_sur_obj,
    calc_entropy_bonus,
    calc_kl_penalty,
    calc_value_fn_loss,
    explained_variance,
    get_log_probs,
)
from rlhf_scratch.optim import get_optimizer_and_scheduler
from rlhf_scratch.plots import plot_training_curves
from rlhf_scratch.rewards import normalize_reward
from rlhf_scratch.runs import SAMPLES_FILE, append_metrics, new_run_dir, save_run_policy
from rlhf_scratch.sampling import get_samples
from rlhf_scratch.tasks import RewardFn, make_reward_fn

Metrics = dict[str, float | int]

# Every metric logged once per phase, with stable names (CleanRL / TRL namespaces).
PHASE_METRICS = (
    "phase",
    "rewards/mean",  # mean raw reward of the rollout batch
    "rewards/std",
    "objective/kl",  # mean per-token KL(π‖π_ref) of the rollout, nats
    "objective/entropy",  # mean per-token entropy of π on the rollout, nats
    "objective/kl_coef",  # β used this phase
    "objective/total",  # J, mean over minibatches
    "losses/clipped_surrogate",  # L_clip, mean over minibatches
    "losses/value_loss",  # ½·c_vf·MSE, mean over minibatches
    "losses/entropy_bonus",  # c_ent·H, mean over minibatches
    "losses/kl_penalty",  # β·KL, mean over minibatches
    "losses/clipfrac",  # fraction of ratios outside [1-ε, 1+ε]
    "losses/approx_kl",  # k3 estimate of KL(π_old‖π) over the learning phase
    "losses/explained_variance",  # of the returns by the rollout values
    "charts/learning_rate",  # trunk learning rate this phase
    "charts/phase_time",  # seconds, rollout + learning
    "charts/tokens_per_s",  # generated tokens per second of phase time
)


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class RLHFTrainer:
    """PPO RLHF of `args.model` toward the reward of `args.task` (or `reward_fn`)."""

    def __init__(self, args: RLHFArgs, reward_fn: RewardFn | None = None, quiet: bool = False):
        args.validate()
        set_seed(args.seed)
        self.args = args
        self.quiet = quiet
        self.device = resolve_device(args.device)
        self.model = TransformerWithValueHead(
            load_lm(args.model, device=self.device), detach_value_head=args.detach_value_head
        ).train()
        self.ref_model = load_lm(args.model, device=self.device).eval()
        for p in self.ref_model.parameters():
            p.requires_grad_(False)
        self.reward_fn = reward_fn or make_reward_fn(args, device=self.device)
        self.optimizer, self.scheduler = get_optimizer_and_scheduler(args, self.model)
        self.prefix_len = self.model.base.to_tokens(args.prefix, prepend_bos=args.prepend_bos).shape[1]
        n_ctx = self.model.base.cfg.n_ctx
        if self.prefix_len + args.gen_len > n_ctx:
            raise ConfigError(
                f"gen_len: prefix ({self.prefix_len} tokens) + gen_len ({args.gen_len}) exceeds "
                f"the model's context n_ctx={n_ctx}"
            )
        self.kl_ctl = AdaptiveKLController(args.kl_coef, args.target_kl, args.kl_horizon) if args.adaptive_kl else None
        self.kl_coef = args.kl_coef
        self.early_stopping = (
            EarlyStopping(args.patience, args.kl_threshold, args.reward_threshold, args.window_size)
            if args.early_stopping
            else None
        )
        self.run_dir: Path | None = None
        self.phase = 0
        self.history: list[Metrics] = []
        self._rollout: dict = {}  # what the last rollout phase saw, for logging
        self._wandb = None

    # ------------------------------------------------------------------ the two phases
    @torch.no_grad()
    def rollout_phase(self) -> ReplayMemory:
        """Sample a batch, score it, and store what the learning phase needs."""
        args = self.args
        sample_ids, samples = get_samples(
            self.model.base, args.prefix, args.batch_size, args.gen_len,
            args.temperature, args.top_k, args.prepend_bos,
        )
        gen = slice(self.prefix_len - 1, -1)  # the logits that predict the generated tokens
        logits, values = self.model(sample_ids)
        ref_logits_all = self.ref_model(sample_ids)
        ref_logits = ref_logits_all[:, gen]
        logprobs = get_log_probs(logits, sample_ids, self.prefix_len)

        rewards = self.reward_fn(samples).to(self.device, torch.float32)
        rewards_for_advantage = normalize_reward(rewards) if args.normalize_reward else rewards
        if args.advantage == "gae":
            advantages = compute_gae_advantages(values, rewards_for_advantage, self.prefix_len, args.gamma, args.gae_lambda)
        else:
            advantages = compute_advantages(values, rewards_for_advantage, self.prefix_len)

        self._rollout = dict(
            rewards=rewards,
            kl=calc_kl_penalty(logits[:, gen], ref_logits, 1.0).item(),
            entropy=calc_entropy_bonus(logits[:, gen], 1.0).item(),
            explained_variance=explained_variance(values[:, gen], advantages + values[:, gen]),
            ref_logprob=get_log_probs(ref_logits_all, sample_ids, self.prefix_len).sum(-1),
            samples=samples,
        )
        return ReplayMemory(args, sample_ids, logprobs, advantages, values, ref_logits)

    def compute_rlhf_objective(self, mb: ReplayMinibatch) -> tuple[Tensor, dict[str, float]]:
        """J = L_clip − value loss + entropy bonus − KL penalty on one minibatch."""
        args = self.args
        gen = slice(self.prefix_len - 1, -1)
        logits, values = self.model(mb.sample_ids)
        logprobs = get_log_probs(logits, mb.sample_ids, self.prefix_len)

        clipped_surrogate = calc_clipped_sur_obj(logprobs, mb.logprobs, mb.advantages, args.clip_coef)
        value_loss = calc_value_fn_loss(values[:, gen], mb.returns, args.vf_coef)
        entropy_bonus = calc_entropy_bonus(logits[:, gen], args.ent_coef)
        kl_penalty = calc_kl_penalty(logits[:, gen], mb.ref_logits, self.kl_coef)
        total = clipped_surrogate - value_loss + entropy_bonus - kl_penalty

        with torch.no_grad():
            stats = {
                "objective/total": total.item(),
                "losses/clipped_surrogate": clipped_surrogate.item(),
                "losses/value_loss": value_loss.item(),
                "losses/entropy_bonus": entropy_bonus.item(),
                "losses/kl_penalty": kl_penalty.item(),
                "losses/clipfrac": calc_clip_fraction(logprobs, mb.logprobs, args.clip_coef),
                "losses/approx_kl": calc_approx_kl(logprobs, mb.logprobs),
            }
        return total, stats

    def learning_phase(self, memory: ReplayMemory) -> dict[str, float]:
        """Gradient ascent on J over every minibatch of the memory; one scheduler step."""
        stats: list[dict[str, float]] = []
        minibatches = memory.get_minibatches()
        for mb in tqdm(minibatches, desc="minibatches", leave=False, disable=self.quiet):
            self.optimizer.zero_grad()
            total, mb_stats = self.compute_rlhf_objective(mb)
            total.backward()
            nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)
            self.optimizer.step()
            stats.append(mb_stats)
        self.scheduler.step()
        return {k: float(np.mean([s[k] for s in stats])) for k in stats[0]}

    # ------------------------------------------------------------------ the loop
    def start_run(self) -> Path:
        """Create the run folder (refusing to overwrite one) and start W&B if asked."""
        if self.run_dir is None:
            self.run_dir = new_run_dir(self.args)
            self._init_wandb()
            self._say(f"run folder: {self.run_dir}  (device {self.device}, prefix_len {self.prefix_len})")
        return self.run_dir

    def train(self) -> Path:
        """Run every phase; write the run folder; return its path."""
        args = self.args
        self.start_run()
        bar = tqdm(range(args.total_phases), desc="phases", disable=self.quiet)
        for self.phase in bar:
            start = time.perf_counter()
            lr = self.optimizer.param_groups[0]["lr"]
            memory = self.rollout_phase()
            learn_stats = self.learning_phase(memory)
            metrics = self._phase_metrics(learn_stats, lr, time.perf_counter() - start)
            self._log(metrics)
            bar.set_postfix(reward=f"{metrics['rewards/mean']:.3f}", kl=f"{metrics['objective/kl']:.3f}")
            if self.kl_ctl is not None:
                self.kl_coef = self.kl_ctl.update(metrics["objective/kl"], args.batch_size)
            if self.early_stopping is not None and self.early_stopping.update(
                metrics["objective/kl"], metrics["rewards/mean"]
            ):
                self._say(f"early stopping after phase {self.phase + 1}: {self.early_stopping.reason}")
                self._log_samples(force=True)
                break
            self._log_samples(force=self.phase == args.total_phases - 1)
        plot_training_curves(self.history, self.run_dir)
        if args.save_model:
            save_run_policy(self.run_dir, self.model)
        if self._wandb is not None:
            self._wandb.finish()
        return self.run_dir

    # ------------------------------------------------------------------ logging
    def _phase_metrics(self, learn_stats: dict[str, float], lr: float, seconds: float) -> Metrics:
        r = self._rollout
        return {
            "phase": self.phase + 1,
            "rewards/mean": r["rewards"].mean().item(),
            "rewards/std": r["rewards"].std().item() if len(r["rewards"]) > 1 else 0.0,
            "objective/kl": r["kl"],
            "objective/entropy": r["entropy"],
            "objective/kl_coef": self.kl_coef,
            **learn_stats,
            "losses/explained_variance": float(r["explained_variance"]),
            "charts/learning_rate": lr,
            "charts/phase_time": seconds,
            "charts/tokens_per_s": self.args.batch_size * self.args.gen_len / seconds,
        }

    def _log(self, metrics: Metrics) -> None:
        self.history.append(metrics)
        assert self.run_dir is not None
        append_metrics(self.run_dir, metrics)
        if self._wandb is not None:
            self._wandb.log(metrics, step=int(metrics["phase"]))
        self._say(
            f"phase {int(metrics['phase']):>3}/{self.args.total_phases} | reward "
            f"{metrics['rewards/mean']:.3f} ± {metrics['rewards/std']:.3f} | kl {metrics['objective/kl']:.4f} | "
            f"entropy {metrics['objective/entropy']:.3f} | clipfrac {metrics['losses/clipfrac']:.3f} | "
            f"{metrics['charts/phase_time']:.1f}s"
        )

    def sample_table(self, n: int = 5) -> str:
        """The blog's table of the last rollout: reward, reference log-prob, sample."""
        r = self._rollout
        rows = [
            [f"{reward:.3f}", f"{ref_lp:.2f}", repr(sample)]
            for reward, ref_lp, sample in zip(r["rewards"][:n].tolist(), r["ref_logprob"][:n].tolist(), r["samples"][:n])
        ]
        return tabulate(rows, headers=["reward", "ref logprob", "sample"], tablefmt="github")

    def _log_samples(self, force: bool = False) -> None:
        if not (force or self.phase == 0 or (self.phase + 1) % self.args.table_every == 0):
            return
        if self.history:
            plot_training_curves(self.history, self.run_dir)
        table = self.sample_table()
        self._say(f"\nphase {self.phase + 1} samples\n{table}\n")
        assert self.run_dir is not None
        with open(self.run_dir / SAMPLES_FILE, "a") as f:
            f.write(f"## phase {self.phase + 1}\n\n{table}\n\n")

    def _say(self, text: str) -> None:
        if not self.quiet:
            tqdm.write(text)

    def _init_wandb(self) -> None:
        if not self.args.wandb:
            return
        import wandb

        mode = os.environ.get("WANDB_MODE")
        try:
            self._wandb = wandb.init(
                project=self.args.wandb_project, config=self.args.to_dict(), dir=str(self.run_dir),
                name=self.run_dir.name, mode=mode or "online",
                settings=wandb.Settings(init_timeout=30),
            )
        except Exception as e:  # no network or no login: keep the log locally
            self._say(f"wandb: online init failed ({type(e).__name__}); logging offline in {self.run_dir}")
            self._wandb = wandb.init(
                project=self.args.wandb_project, config=self.args.to_dict(), dir=str(self.run_dir),
                name=self.run_dir.name, mode="offline",
            )
