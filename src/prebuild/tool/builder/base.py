"""What every wheel builder shares: its interface (``WheelBuilder``: ``native.NativeBuilder``,
``classic.ClassicBuilder``), the progress it reports (``BuildProgress``), what it returns
(``BuiltWheel``), and how it runs a project's PEP 517 backend with the output in a build log
(``quiet_runner``, ``warnings_to_log``), the compile steps read from its output (``build_step``)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
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

    def step(self, done: int, total: int, what: str, failed: bool = False) -> None:
        """A compile step finished (``done`` of ``total``; ``total`` 0: not known, a classic
        build without ninja, whose compiles are counted as they start), or ``failed``."""

    def note(self, text: str) -> None:
        """Something the user should know of this wheel (a raised C++ standard)."""


class WheelBuilder(Protocol):
    """One kind of project's builder: native.NativeBuilder, classic.ClassicBuilder."""

    nvcc: Nvcc

    def order(self, planned: list[PlannedWheel]) -> list[PlannedWheel]:
        """The order to build the planned wheels in (what an earlier run left resumes first)."""

    def build(self, planned: PlannedWheel, out_dir: Path, progress: BuildProgress) -> BuiltWheel:
        """Build the planned wheel (exactly its archs), check it and place it in ``out_dir``."""


# ninja's status line (where stdout is no terminal, printed as each step finishes), a compiler
# command as setuptools prints it before running it (a build without ninja), and setuptools'
# line as it starts an extension.
_NINJA_STATUS = re.compile(r"^\[(\d+)/(\d+)\] (.+)$")
_COMPILER_COMMAND = re.compile(
    r"^(?:\S*/)?(?:nvcc|c\+\+|g\+\+|gcc|cc|clang\+\+|clang)(?: .*)? -c .+$"
)
_EXTENSION = re.compile(r"^building '([\w.]+)' extension$")
# CMake's Makefile generator: "[  5%] Building CUDA object CMakeFiles/x.dir/a.cu.o" (NATTEN,
# bitsandbytes); its Ninja generator puts "Building ... object" after ninja's "[3/14]".
_CMAKE_STATUS = re.compile(r"^\[\s*(\d+)%\] (.+)$")
_CMAKE_ACTION = re.compile(
    r"^(?:Building \w+ object|Linking \w+ (?:shared |static )?(?:library|module|executable)) (\S+)"
)


def cmake_target(path: str) -> str:
    """Pure: what a CMake status line names, as the user knows it: an object's source under
    the project (``CMakeFiles/x.dir/csrc/a.cu.o``: ``csrc/a.cu``), else the file
    (``libx.so``)."""
    if path.endswith((".cu.o", ".cpp.o", ".cc.o", ".c.o")):
        return path.partition(".dir/")[2][: -len(".o")] or os.path.basename(path)[: -len(".o")]
    return os.path.basename(path)


def build_step(line: str, extension: str = "", root: str = "") -> tuple[int, int, str] | None:
    """Pure: ``(done, total, what)`` of a ninja status line of a project's build (``[3/14]
    nvcc ... -c /src/csrc/backward.cu -o ...``: ``csrc/backward.cu``, the file compiled under
    the project's ``root``, else the one linked), with the ``extension`` being built in front;
    ``(0, 0, what)`` for a compile command of a build without ninja, or a CMake Makefile's
    ``[ 5%] Building CUDA object ...`` (the caller counts them: the total is not known; CMake's
    percentage is added); None for any other line."""
    line = line.rstrip("\n")
    m = _NINJA_STATUS.match(line)
    cmake = _CMAKE_STATUS.match(line) if m is None else None
    if cmake is not None:
        action = _CMAKE_ACTION.match(cmake[2])
        if action is None:  # "[ 5%] Built target x", "Generating ..."
            return None
        done, total, what = 0, 0, f"{cmake_target(action[1])} ({cmake[1]} %)"
    elif m is None and not _COMPILER_COMMAND.match(line):
        return None
    else:
        done, total = (int(m[1]), int(m[2])) if m else (0, 0)
        what = command_target(m[3] if m else line, root)
    return done, total, f"{extension}: {what}" if extension else what


class StepReader:
    """A build log's steps, line by line (pure): ``build_step``'s, with the extension setuptools
    says it is building in front, and the compiles of a build without ninja counted as they
    start. Once ninja has counted, a bare compiler command is not a step: it is the command
    ninja prints under ``FAILED:``, which says that the step just read failed (ninja prints a
    step's line as it ends, then ``FAILED:`` if it did): that step again, with ``True``.
    ``root``: the project's directory, under which the files compiled are named."""

    def __init__(self, root: str = "") -> None:
        self.root = root
        self.extension = ""
        self.commands = 0
        self.ninja = False
        self.last: tuple[int, int, str] | None = None  # ninja's step on the line before

    def read(self, line: str) -> tuple[int, int, str] | tuple[int, int, str, bool] | None:
        last, self.last = self.last, None
        if line.startswith("FAILED:"):
            return (*last, True) if last is not None else None
        building = _EXTENSION.match(line)
        if building:
            self.extension = building[1]
            return None
        found = build_step(line, self.extension, self.root)
        if found is None:
            return None
        if found[1]:
            self.ninja = True
            self.last = found
        elif _COMPILER_COMMAND.match(line):
            if self.ninja:
                return None
            self.commands += 1  # no ninja: the compiles are counted as they start
            found = (self.commands, 0, found[2])
        return found


def shows_a_step(log: str) -> bool:
    """Pure: whether a build's log shows a compile or link step (StepReader's): a compiler the
    build ran that prebuild's shims do not log (setuptools' ``gcc`` for a C source) shows so."""
    reader = StepReader()
    return any(reader.read(line) is not None for line in log.splitlines())


def command_target(command: str, root: str = "") -> str:
    """Pure: the file a build command compiles, else the one it links (``-c``, then ``-o``);
    what a CMake status line after ninja's count names (cmake_target). A compiled source is
    named by its path under ``root`` (the project's directory) or as the command gives it
    relative, since projects repeat names (``forward.cu`` in two folders); anything else by
    its file name."""
    action = _CMAKE_ACTION.match(command)
    if action is not None:
        return cmake_target(action[1])
    try:
        words = shlex.split(command)
    except ValueError:  # an unbalanced quote: the command as it is
        words = command.split()
    flag, what = next(  # torch's nvcc commands say ``-c -c FILE``
        (
            (flag, words[i + 1])
            for flag in ("-c", "-o")
            for i, w in enumerate(words[:-1])
            if w == flag and not words[i + 1].startswith("-")
        ),
        ("", words[0] if words else ""),
    )
    if flag == "-c":
        if not os.path.isabs(what):
            return os.path.normpath(what)
        if os.path.isabs(root) and os.path.commonpath([what, root]) == os.path.normpath(root):
            return os.path.relpath(what, root)
    return os.path.basename(what)


def quiet_runner(
    log_path: Path,
    env: Mapping[str, str],
    step: Callable[[int, int, str], None] | None = None,
):
    """A pyproject-hooks runner: the backend's output goes to a log, not the terminal (with
    ``warnings_to_log`` around the hook calls, its warnings too); ``step`` hears each compile
    step ninja reports (or, without ninja, each compile as it starts: total 0, not known),
    read from the log as it grows (``follow_steps``)."""

    def run(
        cmd: Sequence[str], cwd: str | None = None, extra_environ: Mapping[str, str] | None = None
    ) -> None:
        full_env = {**os.environ, **(extra_environ or {}), **env}
        with open(log_path, "a", encoding="utf-8") as log, follow_steps(log_path, step, cwd or ""):
            processes.run(
                cmd, cwd=cwd, env=full_env, stdout=log, stderr=subprocess.STDOUT, check=True
            )

    return run


@contextmanager
def follow_steps(
    log_path: Path,
    step: Callable[[int, int, str], None] | None,
    root: str = "",
    every: float = 0.5,
) -> Iterator[None]:
    """While the body runs, a thread reads what is added to the log and tells ``step`` of
    each ninja status line in it (files compiled named under ``root``, the build's directory).
    The output goes to the log file itself, never through a
    pipe of prebuild's: a process the build leaves running (a compiler cache's server) cannot
    hold the build open. Progress is for show: a ``step`` that raises is not called again,
    and the build goes on."""
    if step is None:
        yield
        return
    stop = threading.Event()
    start = log_path.stat().st_size if log_path.exists() else 0

    def follow() -> None:
        try:
            read_steps()
        except Exception:  # a broken listener or log costs the progress only
            return

    def read_steps() -> None:
        pending, steps = "", StepReader(root)
        with open(log_path, encoding="utf-8", errors="replace") as log:
            log.seek(start)
            while True:
                stopping = stop.wait(every)
                pending += log.read()
                *lines, pending = pending.split("\n")
                for line in lines:
                    if (found := steps.read(line)) is not None:
                        step(*found)
                if stopping:
                    return

    thread = threading.Thread(target=follow, name="build-steps", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


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
