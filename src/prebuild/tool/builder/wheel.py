"""What every wheel build shares (the variants, the result, the progress it reports, the atomic
placing and the lock files) and the native builder: one wheel per arch (or one fat wheel) of a
``[tool.prebuild]`` project, each built, checked, then moved into the output directory in one
step, so an output directory never holds a partial wheel. ``pipeline`` runs the builders.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from filelock import FileLock, Timeout
from packaging.version import Version

from build import BuildBackendException, ProjectBuilder
from prebuild.runtime.arch import Arch
from prebuild.runtime.manifest import Manifest, ManifestError, ProjectManifest
from prebuild.tool.builder import flags as F
from prebuild.tool.builder import processes
from prebuild.tool.builder.compile import (
    BuildError,
    ProgressCallback,
    compile_libraries,
    default_build_dir,
)
from prebuild.tool.builder.config import KernelProject
from prebuild.tool.builder.relabel import place_atomically, rewrite_wheel
from prebuild.tool.builder.toolchain import Nvcc
from prebuild.tool.inspection import InspectionError, inspect_wheel, package_manifests
from prebuild.tool.variant_wheels import (
    VARIANT_JSON,
    WheelArchs,
    cuda_lower_bound,
    document,
    parse_filename,
    properties,
    variant_label,
)


@dataclass(frozen=True)
class WheelVariant:
    """The archs that go into one wheel, and how its name says them: in the version's local
    label (``+cu130.sm90``, the default), or, in a ``--variants`` build, in a PEP 825 variant
    label (``...-sm90.whl``, version ``+cu130``) or nowhere (the plain wheel, for installers
    that know no variants)."""

    archs: tuple[Arch, ...]
    ptx: bool
    label: str | None = None  # a PEP 825 variant label
    plain: bool = False  # a --variants build's wheel without a label

    @property
    def archs_in_version(self) -> bool:
        return self.label is None and not self.plain

    @property
    def ptx_archs(self) -> tuple[Arch, ...]:
        return F.ptx_archs_for(self.archs, self.ptx)

    @property
    def name(self) -> str:
        name = ",".join(a.sm for a in self.archs) + (" +PTX" if self.ptx else "")
        return (
            f"{name} [{self.label}]" if self.label else (f"{name} [plain]" if self.plain else name)
        )


def plan_variants(
    archs: Sequence[Arch], fat: bool, ptx: bool, variants: bool = False, plain: bool = False
) -> list[WheelVariant]:
    """One wheel per arch by default; ``fat`` puts every arch into one wheel. ``variants``: the
    same as PEP 825 variant wheels, each labelled, plus the plain wheel that pip installs:
    every arch and PTX of the newest, so that it runs on every GPU from the oldest arch on.
    ``plain``: that plain wheel only (a CI job beside per-arch ones, whose twins ``prebuild
    variant`` makes)."""
    archs = tuple(sorted(set(archs)))
    if not archs:
        raise ValueError("no CUDA arch given: pass --arch, for example --arch sm_80,sm_90")
    if plain:
        return [WheelVariant(archs, True, plain=True)]
    planned = [WheelVariant(archs, ptx)] if fat else [WheelVariant((a,), ptx) for a in archs]
    if not variants:
        return planned
    labelled = [
        WheelVariant(v.archs, v.ptx, label=variant_label(WheelArchs(v.archs, v.ptx_archs)))
        for v in planned
    ]
    return [*labelled, WheelVariant(archs, True, plain=True)]


def variant_twin(wheel: Path, out_dir: Path) -> Path:
    """The PEP 825 variant wheel of a per-arch wheel (``x-0.1.0+cu130.sm90-...whl`` ->
    ``x-0.1.0+cu130-...-sm90.whl``), native or classic: the same libraries, checked against
    their manifest first; the archs move from the version into the label, variant.json is
    added, and a native package's manifest takes the new version. (A release built per arch by
    cibuildwheel publishes both: pip's per-variant indexes and uv's one index.)"""
    report = inspect_wheel(wheel)
    if report.disagreements or report.manifest is None:
        problems = (
            "; ".join(f"{d.file}: {d.message}" for d in report.disagreements) or "no manifest"
        )
        raise BuildError(
            f"{wheel.name} does not match what it records ({problems}): no variant made of it"
        )
    if report.variant is not None:
        raise BuildError(f"{wheel.name} is a variant wheel already")
    manifest = report.manifest
    sass, ptx = tuple(manifest.sass_archs), tuple(manifest.ptx_archs)
    variant = WheelVariant(sass, bool(ptx), label=variant_label(WheelArchs(sass, ptx)))
    version = parse_filename(wheel.name)[1]
    tags = {a.tag for a in sass} | {f"ptx{a.number}" for a in ptx}
    kept = [part for part in (version.local or "").split(".") if part not in tags]
    if not any(part.startswith("cu") for part in kept) or len(kept) == len(
        (version.local or "").split(".")
    ):
        raise BuildError(
            f"{wheel.name}: its version does not name its CUDA and archs (+cu130.sm90): not a per-arch wheel"
        )
    new_version = f"{version.public}+{'.'.join(kept)}"
    cuda = manifest.cuda_version if isinstance(manifest, Manifest) else manifest.cuda
    files = {}
    if isinstance(manifest, Manifest):  # a native package's own manifest names its version
        with zipfile.ZipFile(wheel) as zf:
            (path,) = package_manifests(zf.namelist())
        files[path] = replace(manifest, package_version=new_version).to_json()
    return rewrite_wheel(
        wheel,
        out_dir,
        version=new_version,
        dist_info_files={VARIANT_JSON: variant_json(variant, cuda)},
        variant_label=variant.label,
        files=files,
    )


def variant_json(variant: WheelVariant, cuda_version: str) -> str:
    """The ``variant.json`` of a labelled wheel: its own entry, from its archs and the CUDA
    version of the nvcc that built it."""
    archs = WheelArchs(variant.archs, variant.ptx_archs)
    entry = properties(archs, cuda_lower_bound(Version(cuda_version), archs))
    return json.dumps(document({variant.label: entry}), indent=2) + "\n"


@dataclass(frozen=True)
class BuiltWheel:
    """A wheel in the output directory, checked against its binaries: what every builder returns."""

    path: Path
    variant: WheelVariant
    sass_archs: tuple[Arch, ...]  # read back from its libraries
    ptx_archs: tuple[Arch, ...]
    manifest: (
        Manifest | ProjectManifest
    )  # a native wheel's _manifest.json, a classic one's prebuild.json
    seconds: float

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


class SilentProgress:
    """A BuildProgress that tells nobody."""

    def phase(self, text: str) -> None:
        pass

    def step(self, done: int, total: int, what: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass


class WheelBuilder(Protocol):
    """One kind of project's builder: NativeBuilder here, classic.ClassicBuilder."""

    nvcc: Nvcc

    def build(self, variant: WheelVariant, out_dir: Path, progress: BuildProgress) -> BuiltWheel:
        """Build one wheel of exactly the variant's archs, check it and place it in ``out_dir``."""


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
    """The wheels of a native project, built in place (objects kept in ``build_dir``)."""

    project: KernelProject
    nvcc: Nvcc
    jobs: int | None = None
    build_dir: Path | None = None
    compress: bool = True
    launcher: Path | None = None  # the compile cache's: every compile runs through it

    def build(self, variant: WheelVariant, out_dir: Path, progress: BuildProgress) -> BuiltWheel:
        return build_wheel(
            self.project,
            variant,
            out_dir,
            jobs=self.jobs,
            build_dir=self.build_dir,
            compress=self.compress,
            launcher=self.launcher,
            on_progress=progress.step,
            on_phase=progress.phase,
        )


def build_wheel(
    project: KernelProject,
    variant: WheelVariant,
    out_dir: Path,
    *,
    jobs: int | None = None,
    build_dir: Path | None = None,
    compress: bool = True,
    launcher: Path | None = None,
    on_progress: ProgressCallback | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> BuiltWheel:
    """One wheel of a native project (built in place, objects kept in ``build_dir``)."""
    start = time.monotonic()
    build_dir = (build_dir or default_build_dir(project.root)).resolve()
    options = F.BuildOptions(
        archs=variant.archs,
        ptx=variant.ptx,
        jobs=jobs,
        build_dir=build_dir,
        compress=compress,
        archs_in_version=variant.archs_in_version,
        launcher=launcher,
    )
    with exclusive_build(project.root, build_dir, on_phase):
        return _build_locked(project, variant, out_dir, options, start, on_progress, on_phase)


def _build_locked(
    project: KernelProject,
    variant: WheelVariant,
    out_dir: Path,
    options: F.BuildOptions,
    start: float,
    on_progress: ProgressCallback | None,
    on_phase: Callable[[str], None] | None,
) -> BuiltWheel:
    build_dir = options.build_dir
    assert build_dir is not None
    if on_phase:
        on_phase("compiling")
    compile_libraries(project, options, on_progress)

    if on_phase:
        on_phase("packaging")
    staging_root = build_dir / "wheels"
    staging_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=staging_root, prefix="staging-") as staging:
        log = Path(staging) / "setuptools.log"
        builder = ProjectBuilder(
            project.root,
            python_executable=sys.executable,
            runner=quiet_runner(log, options.to_env()),
        )
        try:
            with warnings_to_log(log):
                built = Path(builder.build("wheel", Path(staging) / "out"))
        except BuildBackendException as exc:
            text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
            raise BuildError(f"packaging the {variant.name} wheel failed:\n{text[-6000:]}") from exc

        if on_phase:
            on_phase("checking")
        manifest = check_embedded_archs(built)
        if manifest.sass_archs != variant.archs or manifest.ptx_archs != options.ptx_archs:
            raise BuildError(
                f"{built.name} records archs {manifest.sass_archs}/{manifest.ptx_archs}, "
                f"expected {variant.archs}/{options.ptx_archs}"
            )
        if variant.label:
            files = {VARIANT_JSON: variant_json(variant, manifest.cuda_version)}
            final = rewrite_wheel(
                built, out_dir, dist_info_files=files, variant_label=variant.label
            )
        else:
            final = place_atomically(built, out_dir)
    return BuiltWheel(
        final, variant, manifest.sass_archs, manifest.ptx_archs, manifest, time.monotonic() - start
    )


class OutputError(ValueError):
    """An output path (--out, --lock) cannot be created or written."""


def prepare_output_dir(path: Path, what: str = "--out") -> Path:
    """Create ``path`` if needed and prove it writable, before any lock is taken or anything
    is compiled: a bad --out must not cost a build. OutputError names the problem."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{what} {path}: exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        # Permission bits do not tell (root ignores them; read-only mounts, /proc): write.
        with tempfile.NamedTemporaryFile(dir=path, prefix=".prebuild-write-check-"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OutputError(
            f"{what} {path}: cannot create or write there ({reason}); choose another {what}"
        ) from None
    return path


LOCK_PLACEHOLDER = "{variant}"


def check_lock_target(template: str, n_wheels: int) -> None:
    """pip refuses two requirements of one name in a file, so several wheels need one lock
    file each: ``{variant}`` in the name says where (ValueError otherwise)."""
    if n_wheels > 1 and LOCK_PLACEHOLDER not in template:
        raise ValueError(
            f"--lock {template}: {n_wheels} wheels are built but pip accepts one prebuild line "
            f"per requirements file. Put {LOCK_PLACEHOLDER} in the name (--lock "
            f"'locks/{LOCK_PLACEHOLDER}.txt' writes one per wheel), or build one wheel (--fat)"
        )
    parent = Path(template).parent
    while LOCK_PLACEHOLDER in str(parent):  # 'locks/{variant}/req.txt': check what is fixed
        parent = parent.parent
    prepare_output_dir(parent, "--lock")


def lock_line(project: str, wheel: Path, sha256: str) -> str:
    """``prebuild @ file:///abs/x.whl --hash=sha256:...``: what ``pip install
    --require-hashes -r FILE`` accepts."""
    return f"{project} @ {wheel.resolve().as_uri()} --hash=sha256:{sha256}\n"


def write_lock(template: str, wheel: Path) -> Path:
    """Write the lock file of one built wheel (its sha256 computed from the file itself)."""
    from prebuild.runtime.manifest import sha256_file
    from prebuild.tool.index_keys import index_key_of

    key = index_key_of(wheel.name)
    # a wheel of no arch: a CPU build (+cpu), or a --variants build's plain wheel (+cu130)
    name = key.name if key else (parse_filename(wheel.name)[1].local or "cpu").replace(".", "-")
    path = Path(template.replace(LOCK_PLACEHOLDER, name))
    path.parent.mkdir(parents=True, exist_ok=True)
    project = str(parse_filename(wheel.name)[0])
    text = f"# {wheel.name}: pip install --require-hashes -r {path.name}\n" + lock_line(
        project, wheel, sha256_file(wheel)
    )
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
    return path
