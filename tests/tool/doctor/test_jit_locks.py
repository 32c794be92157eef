"""prebuild.tool.doctor.jit_locks, and `prebuild doctor` finding them: JIT lock files in a fake
extensions dir (stale, recent, held by a live process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prebuild.tool.doctor.jit_locks import (
    JitLock,
    clear_command,
    extension_roots,
    filesystem_of,
    find_jit_locks,
    network_filesystem,
    parse_mounts,
    parse_proc_locks,
)

PREBUILD = Path(sys.executable).parent / "prebuild"


def test_parse_proc_locks():
    text = (
        "1: POSIX  ADVISORY  WRITE 4242 08:01:1234 0 EOF\n"
        "2: FLOCK  ADVISORY  WRITE 77 00:2f:99 0 EOF\n"
        "2: -> FLOCK  ADVISORY  WRITE 78 00:2f:99 0 EOF\n"
        "garbage line\n"
    )
    assert parse_proc_locks(text) == {1234: {4242}, 99: {77}}


def test_extension_roots(tmp_path):
    assert extension_roots({}, tmp_path) == [tmp_path / ".cache" / "torch_extensions"]
    env = {"TORCH_EXTENSIONS_DIR": "/x/ext", "XDG_CACHE_HOME": "/y"}
    assert extension_roots(env, tmp_path) == [Path("/x/ext"), Path("/y/torch_extensions")]


def test_clear_command_removes_only_stale_locks_and_quotes():
    locks = [
        JitLock(Path("/e/a b/lock"), 7200),
        JitLock(Path("/e/young/lock"), 60),
        JitLock(Path("/e/held/lock"), 7200, ((1, "python train.py"),)),
    ]
    assert clear_command(locks) == "rm -f -- '/e/a b/lock'"
    assert [lock.stale for lock in locks] == [True, False, False]
    assert locks[1].state.startswith("recent") and "pid 1" in locks[2].state
    assert clear_command(locks[1:]) == ""


HOLD = """
import fcntl, sys, time
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(120)
"""


@pytest.fixture
def extensions(tmp_path):
    """A fake TORCH_EXTENSIONS_DIR: one stale lock, one recent, one held by a live process."""
    root = tmp_path / "torch_extensions"
    stale, recent, held = (
        root / "py311_cu121" / n / "lock" for n in ("old_ext", "new_ext", "busy_ext")
    )
    for path in (stale, recent, held):
        path.parent.mkdir(parents=True)
        path.touch()
    old = time.time() - 3 * 86400
    os.utime(stale, (old, old))
    os.utime(held, (old, old))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(held)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield root, stale, recent, held, holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_find_jit_locks_ages_and_live_holders(extensions):
    root, stale, recent, held, pid = extensions
    locks = {lock.path: lock for lock in find_jit_locks([root, root.parent / "absent"])}
    assert set(locks) == {stale, recent, held}
    assert locks[stale].stale and locks[stale].age_seconds > 2 * 86400
    assert not locks[recent].stale and locks[recent].age_seconds < 600
    assert [p for p, _ in locks[held].holders] == [pid] and not locks[held].stale
    assert "python" in locks[held].holders[0][1]


def test_doctor_command_without_nvcc_finds_the_locks_and_its_command_is_safe(extensions, tmp_path):
    root, stale, recent, held, pid = extensions
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "TORCH_EXTENSIONS_DIR": str(root),
        "COLUMNS": "200",
    }
    proc = subprocess.run(
        [str(PREBUILD), "doctor", "--json"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr  # a CPU install, no GPU: nothing fails
    data = json.loads(proc.stdout)
    assert data["torch"]["version"].startswith("2.")
    assert data["manifest"]["package_version"]
    assert {c["area"]: c["status"] for c in data["checks"]}["jit locks"] == "warn"
    assert {c["area"]: c["status"] for c in data["checks"]}["load"] == "ok"
    states = {Path(lock["path"]).parent.name: lock for lock in data["jit_locks"]}
    assert states["old_ext"]["stale"] and states["old_ext"]["age_seconds"] > 2 * 86400
    assert states["busy_ext"]["holders"][0]["pid"] == pid
    assert states["new_ext"]["state"].startswith("recent")
    subprocess.run(data["clear_command"], shell=True, check=True)
    assert not stale.exists() and recent.exists() and held.exists()
    text = subprocess.run(
        [str(PREBUILD), "doctor", "--no-load"], capture_output=True, text=True, env=env, timeout=300
    )
    assert text.returncode == 0, text.stderr
    assert "busy_ext" in text.stdout and f"pid {pid}" in text.stdout and "nvcc" not in text.stderr


def test_a_lock_on_a_network_file_system_is_never_called_stale(tmp_path):
    """A build on another node holds its lock invisibly to this node's /proc: prebuild never
    suggests removing it, however old it is."""
    mounts = parse_mounts(
        "/dev/vda / ext4 rw 0 0\n"
        f"srv:/export/home {tmp_path / 'nfs'} nfs4 rw 0 0\n"
        "srv:/x /mnt/my\\040home nfs rw 0 0\n"
    )
    assert mounts[2] == ("/mnt/my home", "nfs")
    assert filesystem_of(tmp_path / "nfs" / "a" / "lock", mounts) == "nfs4"
    assert filesystem_of(tmp_path / "local" / "lock", mounts) == "ext4"
    for where in ("nfs", "local"):
        lock = tmp_path / where / "torch_extensions" / "ext" / "lock"
        lock.parent.mkdir(parents=True)
        lock.write_text("")
        os.utime(lock, (time.time() - 7200, time.time() - 7200))  # two hours old
    found = {
        lock.path.parts[-4]: lock
        for lock in find_jit_locks(
            [tmp_path / "nfs" / "torch_extensions", tmp_path / "local" / "torch_extensions"],
            mounts=mounts,
        )
    }
    assert found["local"].stale and not found["nfs"].stale
    assert found["nfs"].network_fs == "nfs4" and "another node" in found["nfs"].state
    assert str(found["nfs"].path) not in clear_command(list(found.values()))
    assert str(found["local"].path) in clear_command(list(found.values()))
    assert network_filesystem(tmp_path / "nfs" / "not-made-yet", mounts) == "nfs4"
