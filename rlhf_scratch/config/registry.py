"""The algorithms, written once: the one table every other list is derived from.

    --algo choices, make_args, a run folder's config   config.py, train.py, runs.py
    labels, default sets and extra flags of the studies  studies/
    the top-level imports (`from rlhf_scratch import RLOOTrainer, compute_rloo_advantages`)
    the benchmarks                                       benchmarks/

An entry names its args dataclass and its trainer as "module:Name" strings, imported on first use:
this module imports nothing, so a command line that rejects a bad flag answers before torch loads.

Adding an algorithm is one folder, `algorithms/<name>/`: its args dataclass (`args.py`, a torch-free
subclass of `config.CommonArgs` with `ALGO = "<name>"`), its formulas, its trainer (and the policy it
builds, if it is more than the LM), and one `register(...)`: here for the package's own, or from your
code for yours (CONTRIBUTING.md, "Adding an algorithm"; tests/toy_algorithm.py is a whole one).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def resolve(target: str | Callable[..., Any]) -> Any:
    """A "module:Name" string imported (or a class or function, returned as it is)."""
    if not isinstance(target, str):
        return target
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _add(table: dict[str, Any], entry: Any, who: str, kind: str) -> Any:
    """Add `entry` to `table` under its name (a name already taken is an error naming `who` and `kind`)."""
    if entry.name in table:
        raise ValueError(f"{who}: {kind} named {entry.name!r} is registered already")
    table[entry.name] = entry
    return entry


def _lookup(table: dict[str, Any], name: str, flag: str) -> Any:
    """The entry of `name` in `table` (plugins loaded first); a ValueError naming `flag` and the choices."""
    load_plugins()
    if name not in table:
        raise ValueError(f"{flag}: must be one of {', '.join(table)}; got {name!r}")
    return table[name]


@dataclass(frozen=True)
class Algorithm:
    """One algorithm: what the command line, the run folder, the studies and the exports need to know."""

    name: str
    """`--algo NAME`; also the args class's ALGO and the run folder's `algo`."""
    label: str
    """How tables and figures name it (`Online DPO`)."""
    args: str | type
    """Its config dataclass, "module:Name" (or the class)."""
    trainer: str | type
    """Its trainer class, "module:Name" (or the class): `Trainer(args, reward_fn=None, quiet=False)`."""
    exports: tuple[str, ...] = ()
    """Public names of its package (`package`), importable from `rlhf_scratch` (its formulas)."""
    package: str = ""
    """The module its `exports` are read from: its folder's package (default: the trainer's module)."""
    study_flags: tuple[str, ...] = ()
    """Flags every study run of it adds (GRPO at β = 0 runs no reference: `--measure-kl` logs its KL anyway)."""
    compared_by_default: bool = True
    """Whether `compare` runs it when `--algos` is not given."""
    policy: str | None = None
    """"module:function" building what it trains from the LM, `function(args, lm) -> Policy`, when that
    is more than the LM (PPO adds its critic: `models.policy.PolicyWithExtras`); None: the LM itself.
    The trainer builds its policy with it, and a run folder is rebuilt with it (`models.policy.build_policy`)."""

    @property
    def has_critic(self) -> bool:
        """verl's use_critic: its policy has extras (PPO's value head), so a phase asks `compute_values`
        and `update_critic` of it (`engine.dataflow`)."""
        return self.policy is not None

    staleness_correction: str | None = None
    """What in its loss takes samples drawn by a stale policy into account (`--max-staleness 1`: π_old is
    the behaviour policy, the rollout pool's weights); None: it has no ratio against the sampler, and the
    controller refuses to run it one step off-policy (tests/toy_algorithm.py's REINFORCE: J = A·log π)."""

    def args_class(self) -> type:
        return resolve(self.args)

    def trainer_class(self) -> type:
        return resolve(self.trainer)

    @property
    def module(self) -> str:
        """The module its `exports` live in: `package`, or the module that defines the trainer."""
        return self.package or _module_of(self.trainer)

    @property
    def args_module(self) -> str:
        """The module that defines its args dataclass (torch-free)."""
        return _module_of(self.args)


def _module_of(target: str | type) -> str:
    return target.partition(":")[0] if isinstance(target, str) else target.__module__


ALGORITHMS: dict[str, Algorithm] = {}


def register(algorithm: Algorithm) -> Algorithm:
    """Add `algorithm` to the table (a name already taken is an error: unregister it first)."""
    return _add(ALGORITHMS, algorithm, "register", "an algorithm")


def unregister(name: str) -> None:
    """Remove `name` from the table (tests register a toy algorithm and take it away again)."""
    ALGORITHMS.pop(name, None)


PLUGINS_ENV = "RLHF_SCRATCH_ALGORITHMS"
"""Comma-separated algorithms of your own for every process, loaded before the table is first read
(`names`, `get`): `MODULE` or `FILE.py` (imported: it registers on import), or either with `:FUNCTION`
(then that function is called, and registers). So `python -m rlhf_scratch.train --algo NAME` and each
torchrun process know them too: RLHF_SCRATCH_ALGORITHMS=tests/toy_algorithm.py:register."""
_plugins_loaded = False


def load_plugins() -> None:
    """Load what PLUGINS_ENV names, once per process; a ValueError naming it when one cannot be loaded."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for item in filter(None, (part.strip() for part in os.environ.get(PLUGINS_ENV, "").split(","))):
        target, _, function = item.partition(":")
        try:
            if target.endswith(".py"):
                name = Path(target).stem
                spec = importlib.util.spec_from_file_location(name, target)
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module  # (its dataclasses look their module up there)
                spec.loader.exec_module(module)
            else:
                module = importlib.import_module(target)
            if function:
                getattr(module, function)()
        except Exception as e:  # noqa: BLE001 - any failure of the user's module is one line naming the variable
            raise ValueError(f"{PLUGINS_ENV}: cannot load {item!r} ({type(e).__name__}: {e})") from None


def names() -> tuple[str, ...]:
    """Every registered --algo, in registration order."""
    load_plugins()
    return tuple(ALGORITHMS)


def get(name: str) -> Algorithm:
    """The entry of `name`; a ValueError naming the choices for an unknown one."""
    return _lookup(ALGORITHMS, name, "algo")


# --- tasks: a name on the command line -> the reward it means --------------------------------------


@dataclass(frozen=True)
class Task:
    """One task: `python -m rlhf_scratch.train TASK`. Adding one is a function in `reward/` that makes
    its reward and one `register_task(Task(...))` (CONTRIBUTING.md, "Adding a task")."""

    name: str
    """The TASK argument; also the run folder's `task`."""
    reward: str | Callable
    """"module:function" (or the function): `make(args, device) -> reward_fn` under either reward
    contract (rollout/reward_call.py); `reward.tasks.make_reward_fn` calls it."""
    scored_by: str | None = None
    """What scores it, for messages, when it reads no reward model; None: it reads `--reward-model`
    (the classifier or reward-model run of task sentiment)."""
    defaults: dict[str, Any] = field(default_factory=dict)
    """Field values the task brings (its model, its prompts, a gen_len its answers fit), applied over the
    preset's and under the command line's (`config.task_values`); a value given as {algo: value} is that
    algorithm's only."""
    data: str | Callable | None = None
    """"module:function" making its own problems, `function(split) -> list[dict]` in verl's columns (`prompt`,
    `reward_model.ground_truth`, `extra_info`, ...): `--prompts TASK` reads the train split, `--prompts
    TASK:test` the test split, as `rlhf data TASK` writes them; None: it has none."""
    splits: tuple[str, ...] = ("train", "test")
    """The splits `data` makes."""
    reward_funcs: str | Callable | None = None
    """"module:function", `function(args) -> [(name, reward function), ...]`: the parts of the task's reward,
    TRL's `reward_funcs`, each logged every phase as `rewards/<name>/mean` and `/std` (TRL's names) on either
    backend; None: the reward is one column, `rewards/mean`."""
    algo: str | None = None
    """The --algo `train TASK` runs when none is given (None: ppo, the blog's); the arithmetic task's is grpo."""
    evaluate: str | Callable | None = None
    """"module:function" scoring a validation rollout (`--val-prompts`, every `--test-freq` phases),
    `function(rollout) -> {"eval/...": value}` (verifiable tasks: pass@1, pass@k, the format rate, by
    difficulty); None: the task has no validation of its own."""

    def reward_factory(self) -> Callable:
        return resolve(self.reward)

    @property
    def reads_reward_model(self) -> bool:
        return self.scored_by is None


TASKS: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    """Add `task` to the table (a name already taken is an error: unregister_task it first)."""
    return _add(TASKS, task, "register_task", "a task")


def unregister_task(name: str) -> None:
    TASKS.pop(name, None)


def default_algo(task: str) -> str:
    """The --algo of `train TASK` without one: the task's own (`Task.algo`), else ppo (an unknown task: ppo,
    and `validate` names it)."""
    load_plugins()
    return (TASKS[task].algo if task in TASKS else None) or "ppo"


def task_names() -> tuple[str, ...]:
    """Every registered TASK, in registration order."""
    load_plugins()
    return tuple(TASKS)


def get_task(name: str) -> Task:
    """The entry of task `name`; a ValueError naming the choices for an unknown one."""
    return _lookup(TASKS, name, "task")


_REWARD = "rlhf_scratch.reward.tasks"
register_task(Task("sentiment", f"{_REWARD}:sentiment_reward"))
register_task(Task("vader", f"{_REWARD}:vader_reward", scored_by="VADER"))
register_task(Task("periods", f"{_REWARD}:periods_reward", scored_by="counting periods"))
register_task(Task("first_token", f"{_REWARD}:first_token_reward", scored_by="its first token"))
register_task(Task(
    "arithmetic", f"{_REWARD}:arithmetic_reward", scored_by="its answer, checked by a rule",
    defaults=dict(model="arithmetic", prompts="arithmetic", val_prompts="arithmetic:test", total_phases=1000, test_freq=100, gen_len=6,
                  stop_at_eos=True, top_k=0, prepend_bos=True,
                  # PPO's blog default, the one-step advantage r_t + V(s_t+1) − V(s_t), leans on a value head that has not
                  # learned a reward given only at the answer's end: held-out pass@1 fell 0.352 → 0.320 in 1000 phases
                  # (one seed); GAE (λ = 0.95) rose to 0.522 in 400 (docs/verifiable.md)
                  advantage={"ppo": "gae"},
                  # Online DPO's pairs judged by the rule: a tie (two right, two wrong) is undecided, not the first's
                  judge={"online_dpo": "rule"}),
    data="rlhf_scratch.reward.arithmetic:task_rows", algo="grpo", reward_funcs=f"{_REWARD}:arithmetic_reward_funcs", evaluate="rlhf_scratch.reward.verifiable_eval:verifiable_metrics",
))


_PKG = "rlhf_scratch.algorithms"
register(Algorithm(
    "ppo", "PPO", f"{_PKG}.ppo.args:RLHFArgs", f"{_PKG}.ppo.trainer:RLHFTrainer", package=f"{_PKG}.ppo",
    exports=("RLHFTrainer", "compute_rlhf_objective", "TransformerWithValueHead"),
    policy=f"{_PKG}.ppo.policy:build_policy",
    staleness_correction="the per-token clipped ratio π_θ/π_behaviour",
))
register(Algorithm(
    "rloo", "RLOO", f"{_PKG}.rloo.args:RLOOArgs", f"{_PKG}.rloo.trainer:RLOOTrainer", package=f"{_PKG}.rloo",
    exports=("RLOOTrainer", "compute_rloo_advantages", "compute_kl_shaped_rewards", "calc_rloo_objective"),
    staleness_correction="the clipped sequence ratio π_θ(y)/π_behaviour(y)",
))
register(Algorithm(
    "online_dpo", "Online DPO", f"{_PKG}.online_dpo.args:OnlineDPOArgs", f"{_PKG}.online_dpo.trainer:OnlineDPOTrainer",
    package=f"{_PKG}.online_dpo", exports=("OnlineDPOTrainer", "calc_dpo_loss", "select_chosen"),
    staleness_correction="none needed: DPO's loss reads π_θ and π_ref only, a classification of pairs from any sampler",
))
register(Algorithm(
    "grpo", "GRPO", f"{_PKG}.grpo.args:GRPOArgs", f"{_PKG}.grpo.trainer:GRPOTrainer", package=f"{_PKG}.grpo",
    exports=("GRPOTrainer", "compute_grpo_advantages", "calc_grpo_objective", "calc_grpo_terms", "calc_importance_ratio",
             "calc_k3_kl", "calc_clipped_surrogate", "calc_cispo_surrogate", "calc_sapo_surrogate", "calc_vespo_weights",
             "aggregate_grpo_terms", "calc_clip_counts", "mean_length_by_advantage_sign"),
    study_flags=("--measure-kl",), compared_by_default=False,
    staleness_correction="the loss type's ratio π_θ/π_behaviour (per token, or GSPO's per sequence)",
))


# --- environments: --env NAME -> the multi-turn episode it means ------------------------------------


@dataclass(frozen=True)
class Environment:
    """One environment: `--env NAME` makes each completion a multi-turn episode (`rollout/environment.py`'s
    contract, `rollout/episodes.py`'s rollout). Adding one is a module with its factory and one
    `register_env(Environment(...))`."""

    name: str
    """The --env argument."""
    make: str | Callable
    """"module:function" (or the function): `make(args, tokenizer) -> factory`, `factory(prompt) -> Environment`
    for each prompt row, `factory.stop_ids` the tokens that end a model turn besides EOS."""
    description: str = ""
    """What it does, for messages and --help."""
    defaults: dict[str, Any] = field(default_factory=dict)
    """Field values `--env NAME` brings (the model that can call, its problems, an episode's budget), applied
    over the task's defaults and under the command line's (`config.env_values`): a user's `--model` still wins;
    a value given as {algo: value} is that algorithm's only."""
    data: str | Callable | None = None
    """"module:function" making its own problems, as a task's `data` (`function(split) -> list[dict]`, verl's
    columns): `--prompts NAME` reads the train split, `--prompts NAME:test` the test split; None: it has none."""
    splits: tuple[str, ...] = ("train", "test")
    """The splits `data` makes."""

    def factory(self) -> Callable:
        return resolve(self.make)


ENVIRONMENTS: dict[str, Environment] = {}


def register_env(env: Environment) -> Environment:
    """Add `env` to the table (a name already taken is an error: unregister_env it first)."""
    return _add(ENVIRONMENTS, env, "register_env", "an environment")


def unregister_env(name: str) -> None:
    ENVIRONMENTS.pop(name, None)


def env_names() -> tuple[str, ...]:
    """Every registered --env, in registration order."""
    load_plugins()
    return tuple(ENVIRONMENTS)


def get_env(name: str) -> Environment:
    """The entry of environment `name`; a ValueError naming the choices for an unknown one."""
    return _lookup(ENVIRONMENTS, name, "env")


def problem_sources() -> dict[str, Task | Environment]:
    """Every task and environment with problems of its own (`data`), by name: what `--prompts NAME[:split]` reads."""
    load_plugins()
    return {e.name: e for e in (*TASKS.values(), *ENVIRONMENTS.values()) if e.data is not None}


register_env(Environment(
    "calculator", "rlhf_scratch.reward.calculator:make_calculator",
    description="the arithmetic task's calculator: <calc>47*85</calc> is answered with 3995",
    # the sibling model that can call (the shipped one has no <calc> token), on problems where a call pays: 2-digit
    # products (the model cannot do them in its head) beside sums and differences (it can, partly); gen_len 20 holds
    # an episode <calc>47*85</calc> 3995= 3995<eos> (17 tokens) with 3 to spare (docs/environments.md)
    defaults=dict(model="arithmetic_calc", prompts="calculator", val_prompts="calculator:test", gen_len=20),
    data="rlhf_scratch.reward.arithmetic:calculator_rows",
))
