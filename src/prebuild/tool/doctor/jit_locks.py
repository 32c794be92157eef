"""The JIT lock files other packages' ``torch.utils.cpp_extension`` builds leave under
``TORCH_EXTENSIONS_DIR`` or ``~/.cache/torch_extensions``: found, aged, and matched with the live
processes holding them (``/proc``), so that ``prebuild doctor`` can print the command that removes
only the stale ones (a stale one makes every later build of that extension wait forever). On a network file
system (an NFS home shared by the nodes of a cluster) a lock held by a build on another node
cannot be seen from here: such a lock is never called stale, and the directory itself is
reported (file locks do not hold across nodes there).
"""

from __future__ import annotations

import os
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

# A JIT build of a large extension takes minutes (gsplat: 12 min on 2 cores); a lock file
# older than this that no process holds is left over.
STALE_AFTER_SECONDS = 30 * 60


# File systems shared between machines: a lock taken on one node is invisible on another.
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "fuse.ceph",
        "glusterfs",
        "fuse.glusterfs",
        "fuse.sshfs",
        "fuse.juicefs",
        "afs",
        "panfs",
        "wekafs",
        "9p",
    }
)


@dataclass(frozen=True)
class JitLock:
    path: Path
    age_seconds: float
    holders: tuple[tuple[int, str], ...] = ()  # (pid, command line) of live processes
    network_fs: str = ""  # the file system type when it is a network one ("nfs4")

    @property
    def stale(self) -> bool:
        """Held by no live process and older than any build: older torch versions' lock
        files are created and closed, so a young one may belong to a build in progress. On a
        network file system a build on another node may hold it: never stale."""
        return not self.holders and not self.network_fs and self.age_seconds >= STALE_AFTER_SECONDS

    @property
    def state(self) -> str:
        if self.holders:
            return "; ".join(f"held by pid {pid}: {cmd[:60]}" for pid, cmd in self.holders)
        if self.network_fs:
            return (
                f"on {self.network_fs}, a network file system: a build on another node may hold "
                "it, which this node cannot see (never called stale)"
            )
        return "stale" if self.stale else "recent: a build may still be running"


def parse_mounts(text: str) -> list[tuple[str, str]]:
    """Pure: ``/proc/self/mounts`` as (mount point, file system type), octal escapes undone."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[1])
            mounts.append((point, parts[2]))
    return mounts


def filesystem_of(path: Path, mounts: list[tuple[str, str]]) -> str:
    """Pure: the type of the file system ``path`` (absolute) is on: its longest mount point."""
    best, kind = -1, ""
    for point, fstype in mounts:
        if (path == Path(point) or Path(point) in path.parents) and len(point) > best:
            best, kind = len(point), fstype
    return kind


def read_mounts() -> list[tuple[str, str]]:
    try:
        return parse_mounts(Path("/proc/self/mounts").read_text())
    except OSError:
        return []


def network_filesystem(path: Path, mounts: list[tuple[str, str]]) -> str:
    """``"nfs4"`` when ``path`` (or, if it does not exist yet, where it would be made) is on
    a network file system; ``""`` otherwise."""
    kind = filesystem_of(Path(os.path.realpath(path)), mounts)
    return kind if kind in NETWORK_FILESYSTEMS else ""


def extension_roots(env: dict[str, str], home: Path) -> list[Path]:
    """Where torch's JIT builder keeps extensions: TORCH_EXTENSIONS_DIR, else the cache."""
    roots = []
    if env.get("TORCH_EXTENSIONS_DIR"):
        roots.append(Path(env["TORCH_EXTENSIONS_DIR"]))
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home / ".cache"
    roots.append(cache / "torch_extensions")
    unique: list[Path] = []
    for root in roots:
        if root not in unique:
            unique.append(root)
    return unique


def parse_proc_locks(text: str) -> dict[int, set[int]]:
    """Pure: ``/proc/locks`` as {inode: pids holding a lock on it}.

    A line: ``1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`` (``->`` marks a waiter)."""
    held: dict[int, set[int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if "->" in parts:
            continue
        try:
            pid = int(parts[4])
            inode = int(parts[5].rsplit(":", 1)[1])
        except (IndexError, ValueError):
            continue
        held.setdefault(inode, set()).add(pid)
    return held


def _cmdline(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return (
        " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part) or f"pid {pid}"
    )


def _open_by(paths: set[Path]) -> dict[Path, set[int]]:
    """Which live processes have each path open (their /proc/PID/fd links)."""
    found: dict[Path, set[int]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            for fd in (proc / "fd").iterdir():
                try:
                    target = Path(os.readlink(fd))
                except OSError:
                    continue
                if target in paths:
                    found.setdefault(target, set()).add(int(proc.name))
        except OSError:
            continue
    return found


def find_jit_locks(
    roots: list[Path], now: float | None = None, mounts: list[tuple[str, str]] | None = None
) -> list[JitLock]:
    """Every ``lock`` file under the roots, with its age, the live processes holding it (an
    OS-level lock in /proc/locks, or the file open) and the network file system it is on."""
    now = time.time() if now is None else now
    mounts = read_mounts() if mounts is None else mounts
    paths = []
    for root in roots:
        if root.is_dir():
            paths.extend(
                p
                for p in root.rglob("*")
                if p.is_file() and (p.name == "lock" or p.suffix == ".lock")
            )
    if not paths:
        return []
    try:
        locks = parse_proc_locks(Path("/proc/locks").read_text())
    except OSError:
        locks = {}
    opened = _open_by({p.resolve() for p in paths})
    out = []
    for path in sorted(paths):
        try:
            st = path.stat()
        except OSError:
            continue  # removed meanwhile
        pids = locks.get(st.st_ino, set()) | opened.get(path.resolve(), set())
        holders = tuple(
            (pid, cmd) for pid in sorted(pids) if pid != os.getpid() and (cmd := _cmdline(pid))
        )
        out.append(
            JitLock(path, max(0.0, now - st.st_mtime), holders, network_filesystem(path, mounts))
        )
    return out


def clear_command(locks: list[JitLock]) -> str:
    """The command that removes the stale locks only (none is held by a live process)."""
    stale = [str(lock.path) for lock in locks if lock.stale]
    return "rm -f -- " + " ".join(shlex.quote(p) for p in stale) if stale else ""
