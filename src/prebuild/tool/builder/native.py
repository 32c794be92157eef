"""The native builder: one wheel of a ``[tool.prebuild]`` project, built in place (objects
kept in the build directory, under its build lock), compiled here with the toolchain the
pipeline's preflight found, packaged by the project's own setup.py (which compiles nothing: it
is handed the record of what was compiled, see ``pipeline``), checked against its binaries
(the archs really inside every library), then moved into the output directory in one step, so
an output directory never holds a partial wheel."""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from build import BuildBackendException, ProjectBuilder
from filelock import FileLock, Timeout

from prebuild.runtime.manifest import Manifest, ManifestError
from prebuild.tool.builder import flags, resources, runtime_floor
from prebuild.tool.builder.base import BuildProgress, BuiltWheel, quiet_runner, warnings_to_log
from prebuild.tool.builder.compile import (
    BuildError,
    ProgressCallback,
    Toolchain,
    compile_libraries,
    default_build_dir,
)
from prebuild.tool.builder.config import KernelProject
from prebuild.tool.builder.plan import PlannedWheel
from prebuild.tool.builder.relabel import place_atomically, rewrite_wheel
from prebuild.tool.builder.toolchain import Nvcc
from prebuild.tool.builder.variant_twin import variant_json
from prebuild.tool.inspection import InspectionError, inspect_wheel
from prebuild.tool.variant_wheels import VARIANT_JSON


def check_embedded_archs(wheel: Path) -> Manifest:
    """The wheel's manifest, once every library is checked against it: present with its
    sha256, and the archs really inside the CUDA library (its ``.nv_fatbin``) exactly those
    the manifest records. BuildError otherwise."""
    try:
        report = inspect_wheel(wheel)
    except (ManifestError, InspectionError) as exc:
        raise BuildError(f"{wheel.name}: {exc}") from exc
    if report.disagreements:
        raise BuildError(
            f"{wheel.name} does not match its manifest: "
            + "; ".join(f"{d.file}: {d.message}" for d in report.disagreements)
        )
    if not isinstance(report.manifest, Manifest):
        raise BuildError(f"{wheel.name} carries no package _manifest.json")
    return report.manifest


LOCK_NAME = ".prebuild-wheel.lock"


@contextmanager
def exclusive_build(
    source_dir: Path, build_dir: Path, on_wait: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Hold the build locks of a checkout and of a build directory.

    Two builds of one checkout share setuptools' ``build/`` and ``*.egg-info`` and the
    object directories; run at once they could package each other's half-written files.
    So a second run waits for the first (it then finds the objects compiled and only
    packages). The locks are OS-level (``filelock``): a killed build leaves no stale lock.
    """
    paths = sorted({(source_dir / "build").resolve(), build_dir.resolve()})  # fixed order
    with ExitStack() as stack:
        for directory in paths:
            directory.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(directory / LOCK_NAME))
            try:
                stack.enter_context(lock.acquire(timeout=0))
            except Timeout:
                if on_wait:
                    on_wait(f"waiting for another build (lock {directory / LOCK_NAME})")
                stack.enter_context(lock.acquire())
        yield


@dataclass
class NativeBuilder:
    """The wheels of a native project, built in place (objects kept in ``build_dir``), with the
    toolchain the preflight found (checked once, for every wheel)."""

    project: KernelProject
    toolchain: Toolchain
    jobs: int | None = None
    build_dir: Path | None = None
    compress: bool = True
    launcher: Path | None = None  # the compile cache's: every compile runs through it

    def __post_init__(self) -> None:
        if self.toolchain.nvcc is None:
            raise ValueError("a native wheel is built with nvcc: the preflight found none")

    @property
    def nvcc(self) -> Nvcc:
        assert self.toolchain.nvcc is not None  # __post_init__
        return self.toolchain.nvcc

    def order(self, planned: list[PlannedWheel]) -> list[PlannedWheel]:
        """As planned: a native build's compile commands name their archs, so ninja alone tells
        what an earlier run left that this wheel can use."""
        return planned

    def build(self, planned: PlannedWheel, out_dir: Path, progress: BuildProgress) -> BuiltWheel:
        return build_native_wheel(
            self.project,
            self.toolchain,
            planned,
            out_dir,
            jobs=self.jobs,
            build_dir=self.build_dir,
            compress=self.compress,
            launcher=self.launcher,
            on_progress=progress.step,
            on_phase=progress.phase,
        )


def build_native_wheel(
    project: KernelProject,
    toolchain: Toolchain,
    planned: PlannedWheel,
    out_dir: Path,
    *,
    jobs: int | None = None,
    build_dir: Path | None = None,
    compress: bool = True,
    launcher: Path | None = None,
    on_progress: ProgressCallback | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> BuiltWheel:
    """One wheel of a native project (built in place, objects kept in ``build_dir``), compiled
    with ``toolchain`` (a preflight's: none is run here)."""
    start = time.monotonic()
    build_dir = (build_dir or default_build_dir(project.root)).resolve()
    options = flags.BuildOptions(
        archs=planned.archs,
        ptx=planned.ptx,
        jobs=jobs,
        build_dir=build_dir,
        compress=compress,
        archs_in_version=planned.archs_in_version,
        launcher=launcher,
    )
    with exclusive_build(project.root, build_dir, on_phase):
        return _build_locked(
            project, toolchain, planned, out_dir, options, start, on_progress, on_phase
        )


def _build_locked(
    project: KernelProject,
    toolchain: Toolchain,
    planned: PlannedWheel,
    out_dir: Path,
    options: flags.BuildOptions,
    start: float,
    on_progress: ProgressCallback | None,
    on_phase: Callable[[str], None] | None,
) -> BuiltWheel:
    build_dir = options.build_dir
    assert build_dir is not None
    if on_phase:
        on_phase("compiling")
    compiled = compile_libraries(project, options, on_progress, toolchain)

    if on_phase:
        on_phase("packaging")
    staging_root = build_dir / "wheels"
    staging_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=staging_root, prefix="staging-") as staging:
        log = Path(staging) / "setuptools.log"
        # The setup.py packages these libraries: no preflight, no compile of its own.
        record = compiled.write(Path(staging) / "compiled.json")
        builder = ProjectBuilder(
            project.root,
            python_executable=sys.executable,
            runner=quiet_runner(log, replace(options, compiled=record).to_env()),
        )
        try:
            with warnings_to_log(log):
                built = Path(builder.build("wheel", Path(staging) / "out"))
        except BuildBackendException as exc:
            text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
            raise BuildError(f"packaging the {planned.name} wheel failed:\n{text[-6000:]}") from exc

        if on_phase:
            on_phase("checking")
        manifest = check_embedded_archs(built)
        if manifest.sass_archs != planned.archs or manifest.ptx_archs != options.ptx_archs:
            raise BuildError(
                f"{built.name} records archs {manifest.sass_archs}/{manifest.ptx_archs}, "
                f"expected {planned.archs}/{options.ptx_archs}"
            )
        if planned.label:
            files = {VARIANT_JSON: variant_json(planned, manifest.cuda_version)}
            final = rewrite_wheel(
                built, out_dir, dist_info_files=files, variant_label=planned.label
            )
        else:
            final = place_atomically(built, out_dir)
    spills = (
        resources.spill_warning(resources.read_report(compiled.resources))
        if compiled.resources is not None
        else None
    )
    floor = runtime_floor.wheel_note(final, toolchain.torch)
    return BuiltWheel(
        final,
        planned,
        manifest.sass_archs,
        manifest.ptx_archs,
        manifest,
        time.monotonic() - start,
        tuple(note for note in (spills, floor) if note),
    )
