"""The single controller's five flags, checked before anything heavy loads (no torch, no Ray):
`--controller local|ray`, `--workers N`, `--placement colocated|split`, `--max-staleness 0|1`,
`--ray-address ADDR`. `split_controller_flags` takes them out of the command line before the
algorithm's dataclass parses the rest; `command.py` runs them, `ray_trainer.py` places the workers.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from rlhf_scratch.config import ConfigError
from rlhf_scratch.config.cli import split_flags

CONTROLLERS = ("local", "ray")
PLACEMENTS = ("colocated", "split")
@dataclass
class ControllerArgs:
    controller: str = "local"
    """`local`: the in-process loop (the default); `ray`: the single controller over Ray worker groups."""
    workers: int = 1
    """Ranks per worker group (data parallel inside the group, gloo on CPU / NCCL on GPU)."""
    placement: str = "colocated"
    """`colocated`: every role in one process per rank; `split`: the reward model in processes of its own
    (with --max-staleness 1: rollout, reference and reward model in one pool, actor and critic in another)."""
    max_staleness: int = 0
    """0: synchronous (the default). 1: one step of asynchrony (needs --controller ray --placement split):
    the rollout pool samples phase n+1 with the weights after update n−1 while the actor learns phase n;
    the algorithm's ratio is taken against the sampler's log-probs (docs/distributed.md#one-step-of-asynchrony)."""
    ray_address: str | None = None
    """Join this Ray cluster instead of starting a local instance."""


def split_controller_flags(argv: list[str], resuming: bool = False) -> tuple[ControllerArgs, list[str]]:
    """The controller's flags (tyro, `cli.split_flags`), checked (one ConfigError line each), and the rest of
    argv. `resuming`: the flags are only what changes from the run's record, so how they combine is
    checked after they are merged with it (`resumed_controller`)."""
    given, rest = split_flags(ControllerArgs, argv, default=ControllerArgs(), prog="python -m rlhf_scratch.train")
    for name, allowed in (("controller", CONTROLLERS), ("placement", PLACEMENTS)):
        if getattr(given, name) not in allowed:
            raise ConfigError(f"{name}: must be one of {', '.join(allowed)}; got {getattr(given, name)!r}")
    if given.max_staleness not in (0, 1):
        raise ConfigError(f"max_staleness: must be 0 (synchronous) or 1 (one step of asynchrony); got {given.max_staleness}")
    if given.workers < 1:
        raise ConfigError(f"workers: must be at least 1; got {given.workers}")
    if not resuming:
        check_combination(given)
    return given, rest


def check_combination(given: ControllerArgs, new_run: bool = True) -> None:
    """How the flags combine: a new run's, or (`new_run=False`) a resumed run's once merged with its
    record, where an in-process `workers` is its number of processes."""
    if given.max_staleness and (given.controller, given.placement) != ("ray", "split"):
        raise ConfigError("max_staleness: 1 needs --controller ray --placement split (a rollout pool of its own)")
    if given.max_staleness and given.workers != 1:
        raise ConfigError(f"max_staleness: 1 runs with --workers 1 only (a rollout pool of several ranks is not tested); got {given.workers}")
    if given.controller == "local" and new_run and given != ControllerArgs():
        raise ConfigError("controller: --workers, --placement and --ray-address need --controller ray")
    if given.controller == "local" and (given.placement != "colocated" or given.ray_address is not None):
        raise ConfigError("controller: --placement and --ray-address need --controller ray")


def check_staleness(algo: str, max_staleness: int, filter_groups: bool = False) -> None:
    """Refuse (one ConfigError line) an algorithm whose loss would not correct stale samples: its registry
    entry names no `staleness_correction`; and DAPO's dynamic sampling, which samples until its batch is
    full, where the next phase's batch is sampled during this phase's update."""
    from rlhf_scratch.config import registry

    if max_staleness and filter_groups:
        raise ConfigError("filter_groups: samples until the phase's batch is full, and --max-staleness 1 samples the next "
                          "phase's batch while this one learns; run one of them, not both")

    if max_staleness and registry.get(algo).staleness_correction is None:
        correcting = [name for name in registry.names() if registry.get(name).staleness_correction is not None]
        raise ConfigError(f"max_staleness: {algo}'s loss has no ratio against the sampler's log-probs to correct "
                          f"stale samples; 1 runs {', '.join(correcting)}")




RECORDED = ("controller", "workers", "placement", "max_staleness")
"""The fields a run folder's config.json records under "controller" (`--resume` places the run the same
way); the Ray address is the machine's, not the run's."""


def controller_record(given: ControllerArgs) -> dict:
    """What config.json records of how the run is placed; in process, `workers` is the number of
    processes (torchrun's), the data-parallel ranks a resume must have again."""
    record = {k: v for k, v in asdict(given).items() if k in RECORDED}
    if given.controller == "local":
        record["workers"] = int(os.environ.get("WORLD_SIZE", "1"))
    return record


def flags_given(argv: list[str]) -> set[str]:
    """The controller fields named on the command line (`--max-staleness 1`, `--workers=2`)."""
    names = {arg[2:].split("=", 1)[0].replace("-", "_") for arg in argv if arg.startswith("--")}
    return names & {f for f in ControllerArgs.__dataclass_fields__}


def resumed_controller(given: ControllerArgs, named: set[str], saved: dict | None) -> ControllerArgs:
    """How a resumed run is placed: as its config.json records it, each field named on the command line
    instead (an older run records nothing: the flags as given). Changing the placement, or moving between
    the in-process loop and Ray at the same number of ranks, changes no number (the equivalence tests); a
    different --max-staleness would, and a different number of ranks cannot continue the RNGs: both are
    refused in one line, as is a combination the merged flags cannot run (one step of asynchrony in
    process, say)."""
    if saved is None:
        check_combination(given)
        return given
    record = {**controller_record(ControllerArgs()), **saved}
    merged = ControllerArgs(**{**record, **{k: getattr(given, k) for k in named if k in RECORDED}},
                            ray_address=given.ray_address)
    if merged.controller == "local" and "placement" not in named:
        merged.placement = "colocated"  # (a Ray run's placement means nothing in one process)
    if merged.max_staleness != record["max_staleness"]:
        raise ConfigError(f"max_staleness: the run was trained with --max-staleness {record['max_staleness']}; "
                          f"resume it with the same (got {merged.max_staleness})")
    ranks = merged.workers if merged.controller == "ray" else int(os.environ.get("WORLD_SIZE", "1"))
    if ranks != record["workers"]:
        n = record["workers"]
        if record["controller"] == "ray":
            how = f"--controller ray --workers {n}" if n > 1 else "--workers 1 (or in process)"
        else:
            how = f"torchrun --nproc-per-node {n}, or --controller ray --workers {n}" if n > 1 else "one process"
        raise ConfigError(f"workers: the run was trained on {n} rank(s); resume it with {how}")
    check_combination(merged, new_run=False)
    return merged


def refuse_torchrun(given: ControllerArgs) -> None:
    """`--controller ray` under torchrun: each rank would start a Ray of its own. One line."""
    if given.controller == "ray" and (int(os.environ.get("WORLD_SIZE", "1")) > 1 or "TORCHELASTIC_RUN_ID" in os.environ):
        raise ConfigError("controller: --controller ray starts its own worker processes; run it with python, not "
                          "torchrun (--workers N gives N ranks)")


def check_ray_address(address: str | None, timeout_s: float = 5.0) -> None:
    """A `--ray-address host:port` that cannot be reached is one line at once (Ray would retry for
    minutes). `auto` and a `ray://` client address are left to Ray."""
    import socket

    if address is None or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"ray_address: {address!r} is not host:port")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise ConfigError(f"ray_address: cannot reach {address} ({err.strerror or type(err).__name__}); "
                          "is a Ray head running there (ray start --head)?") from None
