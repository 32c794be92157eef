"""What a child process of the runtime's tests did, seen from inside it (tests/child_processes.py
puts this folder on the children's sys.path).

Imported by the child scripts; the tests import only its readers (``parse_reports``,
``snapshot``). ``Audit(watch)`` snapshots the watched directories, then installs a
``sys.addaudithook`` that records every process spawn or exec, every file opened for writing
and every shared library loaded with ctypes (which is what ``torch.ops.load_library`` uses).
Create it *after* ``import torch`` so torch's own import is not measured, only what prebuild
does. ``report()`` is one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import threading

SPAWN_EVENTS = {
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.fork",
    "os.forkpty",
    "os.spawn",
    "os.startfile",
}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
REPORT_PREFIX = "AUDIT "


def snapshot(root: str, skip: tuple[str, ...] = ("__pycache__",)) -> dict[str, list[int]]:
    """Every path under ``root`` with its mode, size and mtime."""
    tree: dict[str, list[int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            tree[os.path.relpath(path, root)] = [st.st_mode, st.st_size, st.st_mtime_ns]
    return tree


class Audit:
    def __init__(self, watch: dict[str, str]) -> None:
        self.watch = watch
        self.events: list[list[str]] = []
        self.dlopens: list[str] = []
        self.before = {name: snapshot(path) for name, path in watch.items()}
        self.threads_at_start = threading.active_count()
        self.cpp_extension_at_start = "torch.utils.cpp_extension" in sys.modules
        sys.addaudithook(self._hook)

    @classmethod
    def from_env(cls) -> Audit:
        """Watch HOME, TORCH_EXTENSIONS_DIR and the prebuild package directory (found
        without importing the package)."""
        import importlib.util

        spec = importlib.util.find_spec("prebuild")
        assert spec is not None and spec.origin is not None
        return cls(
            {
                "home": os.environ["HOME"],
                "ext": os.environ["TORCH_EXTENSIONS_DIR"],
                "pkg": os.path.dirname(spec.origin),
            }
        )

    def _hook(self, event: str, args: tuple) -> None:
        if event in SPAWN_EVENTS:
            self.events.append([event, repr(args)[:300]])
        elif event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS
            )
            if writes:
                self.events.append([event, repr(args)[:300]])
        elif event == "ctypes.dlopen":
            self.dlopens.append(str(args[0]) if args else "")

    def result(self, **extra: object) -> dict[str, object]:
        import torch

        return {
            "events": list(self.events),
            "dlopens": list(self.dlopens),
            "threads": [self.threads_at_start, threading.active_count()],
            "cpp_extension": [
                self.cpp_extension_at_start,
                "torch.utils.cpp_extension" in sys.modules,
            ],
            "cuda_initialized": torch.cuda.is_initialized(),
            "changed": sorted(
                name for name, path in self.watch.items() if snapshot(path) != self.before[name]
            ),
            **extra,
        }

    def report(self, **extra: object) -> None:
        sys.stdout.write(REPORT_PREFIX + json.dumps(self.result(**extra)) + "\n")
        sys.stdout.flush()


def parse_reports(stdout: str) -> list[dict]:
    """Every report a child (or several, through a launcher) printed."""
    return [
        json.loads(line[len(REPORT_PREFIX) :])
        for line in stdout.splitlines()
        if line.startswith(REPORT_PREFIX)
    ]
