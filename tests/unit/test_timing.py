"""`timing`: per-part seconds, summed between calls, and logged by the loop as time/<part>."""

import time

from rlhf_scratch.core.timing import PARTS, take_times, timed


def test_parts_are_summed_and_reset():
    take_times()
    with timed("generation"):
        time.sleep(0.02)
    with timed("generation"):
        time.sleep(0.02)
    with timed("backward"):
        pass
    times = take_times()
    assert set(times) == set(PARTS), "every part, 0 when unused"
    assert 0.04 <= times["generation"] < 0.5, f"two sections add up: {times['generation']}"
    assert times["backward"] < 0.01 and times["reward"] == 0.0
    assert take_times()["generation"] == 0.0, "take_times resets the clocks"


def test_a_section_that_raises_is_still_counted():
    take_times()
    try:
        with timed("reward"):
            time.sleep(0.01)
            raise RuntimeError
    except RuntimeError:
        pass
    assert take_times()["reward"] >= 0.01


def test_a_nested_section_is_counted_once_in_its_own_part():
    """PPO's reference forward runs inside its learning forward: without the pause the outer part
    would hold the inner's time too (the bug: learning_forward ≈ 0.09 here, counted twice overall)."""
    take_times()
    with timed("learning_forward"):
        time.sleep(0.03)
        with timed("reference_forward"):
            time.sleep(0.06)
        time.sleep(0.03)
    times = take_times()
    assert 0.06 <= times["reference_forward"] < 0.09
    assert 0.06 <= times["learning_forward"] < 0.085, f"the inner section's 0.06 s leaked into the outer: {times}"


def test_the_clocks_synchronise_the_device_only_when_a_profile_is_asked_for(monkeypatch):
    """Two host syncs a section on a GPU (issue 57): only with `profile(True)` / RLHF_SCRATCH_PROFILE=1."""
    import torch

    from rlhf_scratch.core import timing

    syncs = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: syncs.append(1))
    monkeypatch.setattr(timing, "_profile", False)
    with timed("generation"), timed("reward"):
        pass
    assert syncs == [], "no profile: the clocks never wait on the device"
    timing.profile(True)
    with timed("generation"), timed("reward"):
        pass
    assert len(syncs) == 4, "with a profile each section waits at its start and its end"
    timing.profile(False)
    take_times()
