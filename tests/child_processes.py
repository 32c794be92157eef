"""Child processes for the tests of the runtime's guarantees (tests/runtime, the multi-process
scenarios in tests/e2e/test_processes.py, tests/cuda/test_first_call_cuda.py): a clean
environment with a fresh HOME, TORCH_EXTENSIONS_DIR and TMPDIR, scripts written to files (spawned
workers must be able to import them), and ``tests/audit.py`` importable in the child. The
``child_env`` fixture (tests/conftest.py) gives one per test. Importable by name: pytest puts
tests/ on sys.path (tests/conftest.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

# What torch and Python put in TMPDIR themselves: torchrun's folder, multiprocessing's, and the
# empty inductor cache folder DistributedDataParallel makes (without prebuild too).
TORCH_TMP = ("torchelastic_", "pymp-", "torchinductor_")
TESTS = Path(__file__).resolve().parent  # where audit.py is, for the children's sys.path
# The installed package's directory, found without importing it.
PACKAGE_DIR = Path(importlib.util.find_spec("prebuild").origin).resolve().parent


@dataclass
class ChildEnv:
    """Where children run: ``workdir`` (their cwd and first sys.path entry), and the HOME,
    TORCH_EXTENSIONS_DIR and TMPDIR they see, empty directories."""

    workdir: Path
    home: Path
    extensions: Path
    tmp: Path
    env: dict[str, str]

    def script(self, name: str, *parts: str) -> Path:
        """Write a script from source parts, each dedented on its own."""
        path = self.workdir / name
        path.write_text("\n".join(textwrap.dedent(p) for p in parts), encoding="utf-8")
        return path

    def command(self, script: Path, *args: str) -> list[str]:
        return [sys.executable, "-B", str(script), *args]

    def run(
        self, script: Path, *args: str, timeout: float = 300, **kwargs
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command(script, *args),
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            **kwargs,
        )

    def popen(self, script: Path, *args: str, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(
            self.command(script, *args),
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **kwargs,
        )

    def untouched(self) -> bool:
        """Nothing written to HOME, TORCH_EXTENSIONS_DIR or TMPDIR (but for torch's own)."""
        tmp = [p for p in self.tmp.iterdir() if not p.name.startswith(TORCH_TMP)]
        return list(self.home.iterdir()) == [] and list(self.extensions.iterdir()) == [] and not tmp


def child_env_for(tmp_path: Path) -> ChildEnv:
    workdir, home, extensions = tmp_path / "work", tmp_path / "home", tmp_path / "torch_extensions"
    tmp = tmp_path / "tmp"
    for d in (workdir, home, extensions, tmp):
        d.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "TORCH_", "PREBUILD_"))}
    env.update(
        HOME=str(home),
        TORCH_EXTENSIONS_DIR=str(extensions),
        TMPDIR=str(tmp),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPATH=os.pathsep.join([str(workdir), str(TESTS)]),
        OMP_NUM_THREADS="1",  # many children on two cores: keep each one single-threaded
    )
    return ChildEnv(workdir, home, extensions, tmp, env)


def gone(pid: int, within: float = 10.0) -> bool:
    """Whether process ``pid`` has exited (gone, or a zombie its parent has not reaped) within
    ``within`` seconds: one stopped by a signal may still be exiting for a moment (state D, on
    a busy disk, seen in a full run)."""
    deadline = time.monotonic() + within
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
