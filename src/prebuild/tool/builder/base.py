"""What every wheel builder shares: its interface (``WheelBuilder``: ``native.NativeBuilder``,
``classic.ClassicBuilder``), the progress it reports (``BuildProgress``), what it returns
(``BuiltWheel``), and how it runs a project's PEP 517 backend with the output in a build log
(``quiet_runner``, ``warnings_to_log``)."""

from __future__ import annotations

import os
import subprocess
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from prebuild.runtime.arch import Arch
from prebuild.runtime.manifest import Manifest, ProjectManifest
from prebuild.tool.builder import processes
from prebuild.tool.builder.plan import PlannedWheel
from prebuild.tool.builder.toolchain import Nvcc


@dataclass(frozen=True)
class BuiltWheel:
    """A wheel in the output directory, checked against its binaries: what every builder returns."""

    path: Path
    planned: PlannedWheel
    sass_archs: tuple[Arch, ...]  # read back from its libraries
    ptx_archs: tuple[Arch, ...]
    manifest: (
        Manifest | ProjectManifest
    )  # a native wheel's _manifest.json, a classic one's prebuild.json
    seconds: float
    notes: tuple[str, ...] = ()  # what the build found worth saying (kernels that spill)

    @property
    def size(self) -> int:
        return self.path.stat().st_size


class BuildProgress(Protocol):
    """What a builder tells while it builds one wheel (the CLI shows it live)."""

    def phase(self, text: str) -> None:
        """The build moved on: "compiling", "packaging", "waiting for another build (...)"."""

    def step(self, done: int, total: int, what: str) -> None:
        """A compile step finished (``done`` of ``total``)."""

    def note(self, text: str) -> None:
        """Something the user should know of this wheel (a raised C++ standard)."""


class WheelBuilder(Protocol):
    """One kind of project's builder: native.NativeBuilder, classic.ClassicBuilder."""

    nvcc: Nvcc

    def build(self, planned: PlannedWheel, out_dir: Path, progress: BuildProgress) -> BuiltWheel:
        """Build the planned wheel (exactly its archs), check it and place it in ``out_dir``."""


def quiet_runner(log_path: Path, env: Mapping[str, str]):
    """A pyproject-hooks runner: the backend's output goes to a log, not the terminal (with
    ``warnings_to_log`` around the hook calls, its warnings too)."""

    def run(
        cmd: Sequence[str], cwd: str | None = None, extra_environ: Mapping[str, str] | None = None
    ) -> None:
        full_env = {**os.environ, **(extra_environ or {}), **env}
        with open(log_path, "a", encoding="utf-8") as log:
            processes.run(
                cmd, cwd=cwd, env=full_env, stdout=log, stderr=subprocess.STDOUT, check=True
            )

    return run


@contextmanager
def warnings_to_log(log_path: Path) -> Iterator[None]:
    """Warnings raised meanwhile (pyproject-hooks re-raises the backend's as BuildBackendWarning:
    torch's "Failed to initialize NumPy", setuptools' deprecations) go to the build log: the
    build's chatter is shown when the build fails, with the rest of its log."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            if caught:
                with open(log_path, "a", encoding="utf-8") as log:
                    for w in caught:
                        log.write(f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}\n")
