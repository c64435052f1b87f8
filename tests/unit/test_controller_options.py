"""How a resumed run is placed (issue 60, B): as its config.json records it, a flag on the command line
instead; a change that would change the numbers or cannot continue the RNGs is one line."""

import pytest

from rlhf_scratch.config import ConfigError
from rlhf_scratch.controller.options import ControllerArgs, controller_record, flags_given, resumed_controller

SPLIT_ASYNC = {"controller": "ray", "workers": 1, "placement": "split", "max_staleness": 1}


def test_the_flags_named_on_the_command_line():
    argv = ["--resume", "runs/x", "--controller", "ray", "--max-staleness=1", "--total-phases", "9", "--no-wandb"]
    assert flags_given(argv) == {"controller", "max_staleness"}


def test_a_resume_without_controller_flags_is_placed_as_recorded():
    got = resumed_controller(ControllerArgs(), set(), SPLIT_ASYNC)
    assert controller_record(got) == SPLIT_ASYNC
    # an older run folder records nothing: the in-process loop, as before
    assert controller_record(resumed_controller(ControllerArgs(), set(), None)) == controller_record(ControllerArgs())


def test_a_flag_given_wins_and_the_address_is_the_machines():
    saved = {"controller": "ray", "workers": 1, "placement": "split", "max_staleness": 0}
    given = ControllerArgs(controller="ray", placement="colocated", ray_address="10.0.0.2:6379")
    got = resumed_controller(given, {"placement", "controller", "ray_address"}, saved)
    assert (got.controller, got.placement, got.workers, got.ray_address) == ("ray", "colocated", 1, "10.0.0.2:6379")
    # one rank in process: the same numbers (the equivalence tests), so allowed
    assert resumed_controller(ControllerArgs(), {"controller"}, saved).controller == "local"


def test_what_would_change_the_numbers_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^max_staleness: the run was trained with --max-staleness 1; resume it "
                                          r"with the same \(got 0\)$"):
        resumed_controller(ControllerArgs(controller="ray", placement="split"), {"max_staleness"}, SPLIT_ASYNC)
    two = {"controller": "ray", "workers": 2, "placement": "colocated", "max_staleness": 0}
    with pytest.raises(ConfigError, match=r"^workers: the run was trained on 2 rank\(s\); resume it with "
                                          r"--controller ray --workers 2$"):
        resumed_controller(ControllerArgs(), {"controller"}, two)
    assert resumed_controller(ControllerArgs(), set(), two).workers == 2  # no flag: placed as recorded


def test_a_resume_checks_the_merged_placement_not_the_flags_alone():
    """On resume the flags are what changes from the record: `--ray-address` alone is fine (the record
    says ray), and one step of asynchrony cannot continue in process (refused, not run synchronously)."""
    from rlhf_scratch.controller.options import split_controller_flags

    given, _ = split_controller_flags(["--resume", "runs/x", "--ray-address", "10.0.0.2:6379"], resuming=True)
    got = resumed_controller(given, {"ray_address"}, {**SPLIT_ASYNC, "max_staleness": 0})
    assert (got.controller, got.placement, got.ray_address) == ("ray", "split", "10.0.0.2:6379")
    with pytest.raises(ConfigError, match=r"^controller: --workers, --placement and --ray-address need --controller ray$"):
        split_controller_flags(["--ray-address", "10.0.0.2:6379"])  # a new run: the flags alone
    with pytest.raises(ConfigError, match=r"^max_staleness: 1 needs --controller ray --placement split"):
        resumed_controller(ControllerArgs(), {"controller"}, SPLIT_ASYNC)


def test_the_ranks_of_a_torchrun_run_are_recorded_and_asked_again(monkeypatch):
    """In process, `workers` records the processes: a 2-process torchrun run continues on 2 Ray ranks
    (the same numbers) and is refused on one."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    record = controller_record(ControllerArgs())
    assert record == {"controller": "local", "workers": 2, "placement": "colocated", "max_staleness": 0}
    monkeypatch.delenv("WORLD_SIZE")
    assert resumed_controller(ControllerArgs(controller="ray"), {"controller"}, record).workers == 2
    with pytest.raises(ConfigError, match=r"^workers: the run was trained on 2 rank\(s\); resume it with "
                                          r"torchrun --nproc-per-node 2, or --controller ray --workers 2$"):
        resumed_controller(ControllerArgs(), set(), record)


def test_an_older_folder_without_a_record_takes_the_flags_as_given():
    given = ControllerArgs(controller="ray", placement="split", max_staleness=1)
    assert resumed_controller(given, {"controller", "placement", "max_staleness"}, None) == given
