"""interp.sae's cache: a half-written SAE folder left by a killed process is removed on the next run,
one still being written is not (issue 48: a kill while an SAE is saved left its temp folder for good)."""

import os
import socket
import time
from pathlib import Path

from interp.sae import OWNER_FILE, STALE_AFTER_S, clean_stale_temp_folders


def dead_pid() -> int:
    """A pid no process has: above the kernel's largest (a unit test starts no process to find one)."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def temp_folder(root, name, owner=None, age_s=0.0):
    folder = root / name
    folder.mkdir()
    (folder / "sae_weights.safetensors").write_bytes(b"half")
    if owner is not None:
        (folder / OWNER_FILE).write_text(owner)
    if age_s:
        then = time.time() - age_s
        os.utime(folder, (then, then))
    return folder


def test_a_killed_writers_folder_goes_and_a_live_ones_stays(tmp_path):
    host = socket.gethostname()
    killed = temp_folder(tmp_path, ".abc-site-key-k1", f"{host} {dead_pid()}")
    writing = temp_folder(tmp_path, ".abc-site-key-w2", f"{host} {os.getpid()}", age_s=2 * STALE_AFTER_S)
    done = tmp_path / "abc-site-key"  # a finished SAE: never touched
    done.mkdir()
    assert clean_stale_temp_folders(tmp_path) == [killed]
    assert not killed.exists() and writing.is_dir() and done.is_dir()


def test_without_a_readable_owner_or_on_another_host_only_an_old_folder_goes(tmp_path):
    fresh = temp_folder(tmp_path, ".k-fresh1")  # between mkdtemp and its owner line
    old = temp_folder(tmp_path, ".k-old2", age_s=STALE_AFTER_S + 60)  # written before owners were kept
    garbled = temp_folder(tmp_path, ".k-garb3", "not an owner line", age_s=STALE_AFTER_S + 60)
    elsewhere = temp_folder(tmp_path, ".k-else4", "another-host 1")
    elsewhere_old = temp_folder(tmp_path, ".k-else5", "another-host 1", age_s=STALE_AFTER_S + 60)
    assert sorted(clean_stale_temp_folders(tmp_path)) == sorted([old, garbled, elsewhere_old])
    assert fresh.is_dir() and elsewhere.is_dir()
