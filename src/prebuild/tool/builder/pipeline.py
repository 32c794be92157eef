"""How ``prebuild wheel`` builds, for every kind of project, top to bottom (``build_wheels``):

1. **plan** (``plan_request``): the wheels planned from the request's archs (parsed once, by
   the CLI's ``--arch``; ``plan.plan_wheels``: one per arch, or one fat one) and a ``--lock``
   name that can hold them: nothing touched yet.
2. **preflight**: the toolchain for what is known of the project: torch, nvcc, the archs it
   can build and its CUDA against torch's; for a classic project also a CUDA build of torch
   and a shim toolkit that compiles CUDA headers. Then the output directory, written to.
3. **resolve**: the project. A native one (``[tool.prebuild]``) is built in place; another is
   copied, unpacked or downloaded into the workspace, and a classic one found only now gets
   its own preflight. A well-known classic project that builds for the CPU only where no GPU
   is visible, unless told otherwise, is refused here (``check_gpu_build``).
4. **builder**: ``native.NativeBuilder`` or ``classic.ClassicBuilder``, the two implementations
   of ``base.WheelBuilder``.
5. **build** each wheel, through the compile cache when asked for (``compile_cache``: the
   project then compiles from a copy at the workspace's fixed paths): compiled, packaged,
   checked against its binaries (the archs really inside every library), placed in the output
   directory atomically (``base.BuiltWheel``).
6. **publish**: with ``--variants``, the PEP 825 variants file beside the wheels (what an index
   serves, and what ``--find-links`` reads: ``variants_files``); with ``--lock``, one
   requirements file per wheel pinning its sha256 (``outputs``).

An error before step 5 is the request's (``WheelError.exit_code`` 2), from step 5 on the
build's (1). The workspace (a temporary directory, unless ``--build-dir``) has one owner,
``workspace``: removed whatever the outcome, a failed build's log moved out of it first, to
where the error message says. What the build tells as it goes goes to a ``Reporter``.

**A native wheel crosses a process boundary.** ``native.NativeBuilder`` compiles the libraries
in this process (``compile.compile_libraries`` with the toolchain of step 2: the preflight is
not run again, and ninja's progress feeds the live line), then has them packaged by the
project's own setup.py: pypa/build's ``ProjectBuilder`` runs the project's PEP 517 backend
(setuptools) in a child process, as pip and cibuildwheel do, so that ``prebuild wheel`` and
``pip wheel .`` make their wheels by the same setup.py (``setuptools_ext.kernels_setup``). It is
a child process because that is how a PEP 517 backend is called (setuptools keeps a build's
state process-wide), and its output goes to the build log. Only environment variables cross:
``flags.BuildOptions.to_env`` writes them, ``from_env`` reads them back in the child (the archs
cross as text, ``sm_80,sm_90``, and are parsed there: the one arch parse after the CLI's). They
are ``PREBUILD_ARCHS`` and ``PREBUILD_PTX`` (the wheel's archs), ``PREBUILD_ARCHS_IN_VERSION``
(its version label), ``PREBUILD_BUILD_DIR``, ``PREBUILD_JOBS``, ``PREBUILD_COMPRESS``, the
compile cache's ``PREBUILD_COMPILER_LAUNCHER`` with ``PREBUILD_CACHE=off`` (the child starts no
cache of its own), and ``PREBUILD_COMPILED``: the record of the libraries compiled here
(``compile.CompiledLibraries.write``). Given it, the child runs no preflight, no compile and no
nvcc: it copies those libraries into the package and writes their manifest. Without it (pip,
cibuildwheel, ``python -m build``) the same setup.py runs the preflight and the compile itself.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from filelock import FileLock, Timeout

from prebuild.runtime.arch import Arch, ArchError
from prebuild.runtime.manifest import ProjectManifest
from prebuild.tool.builder import classic, env_writes, flags
from prebuild.tool.builder.base import BuildProgress, BuiltWheel, WheelBuilder
from prebuild.tool.builder.build_switches import distribution_of, no_gpu_refusal
from prebuild.tool.builder.classic_messages import cpu_torch_error
from prebuild.tool.builder.compile import BuildError, Toolchain, preflight
from prebuild.tool.builder.compile_cache import (
    CacheReport,
    CacheSpecError,
    compile_cache,
    parse_cache_spec,
    stable_workspace,
)
from prebuild.tool.builder.config import read_config
from prebuild.tool.builder.config_settings import ConfigSettings
from prebuild.tool.builder.native import LOCK_NAME as NATIVE_LOCK
from prebuild.tool.builder.native import NativeBuilder
from prebuild.tool.builder.outputs import (
    check_lock_target,
    prepare_output_dir,
    removed_if_left_empty,
    write_lock,
)
from prebuild.tool.builder.plan import PlannedWheel, plan_wheels
from prebuild.tool.builder.project import (
    CLASSIC,
    MIRROR_COPY_LIMIT,
    NATIVE,
    SCM_VERSION_ENV,
    DownloadError,
    Project,
    project_kind,
    resolve_project,
)
from prebuild.tool.builder.relabel import project_version
from prebuild.tool.builder.toolchain import Nvcc, ToolchainError
from prebuild.tool.variant_wheels import parse_filename
from prebuild.tool.variants_files import write_variants_files

# What a request or a build can fail with, said in one message (anything else is a bug).
FAILURES = (
    ArchError,
    ValueError,
    ToolchainError,
    BuildError,
)  # VariantError, OutputError: ValueErrors


@dataclass(frozen=True)
class WheelRequest:
    """What ``prebuild wheel`` was asked: its options, as data."""

    project: str | None  # a directory, an sdist, a requirement; None: the project around the cwd
    archs: tuple[Arch, ...]  # parsed by the CLI's --arch (cli.common.arch_option)
    out_dir: Path = Path("dist")
    fat: bool = False
    ptx: bool = False
    jobs: int | None = None
    build_dir: Path | None = None  # objects kept here; None: a temporary workspace
    compress: bool = True
    lock: str | None = None  # a lock file name; several wheels: "{index_key}" in it
    variants: bool = False  # PEP 825 variant wheels and the plain wheel
    plain: bool = False  # the plain wheel only
    cache: str | None = None  # --cache / PREBUILD_CACHE: a directory, redis://..., sccache, off
    # -C KEY=VALUE, parsed (config_settings.parse_config_settings): a classic project's backend's
    config_settings: ConfigSettings = field(default_factory=dict)
    # a classic wheel's system libraries copied into it (--bundle/--no-bundle: bundle.py)
    bundle: bool = True
    # a classic project's code mended where it meets a removed API (--mend/--no-mend:
    # api_mends.py)
    mend: bool = True
    # a classic project's libraries without their debug sections (--strip/--no-strip:
    # debug_info.py)
    strip: bool = True
    # the code that makes a classic project's compiles at first use, run in its build
    # (--first-use, checked by jit_sites.given_trigger: jit_ahead.py)
    first_use: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not all(isinstance(a, Arch) for a in self.archs):
            raise TypeError(
                f"WheelRequest takes parsed archs (parse_arch_list), got {self.archs!r}"
            )


class Reporter(Protocol):
    """Where a build's story goes as it happens (the CLI prints it)."""

    def fetching(self, spec: str) -> None:
        """The project's source is being downloaded with pip."""

    def fetch_note(self, text: str) -> None:
        """What the user should know of how the source was fetched."""

    def waiting(self, text: str) -> None:
        """The build waits for another one (holding the --build-dir) to finish."""

    def starting(self, planned: list[PlannedWheel], nvcc: Nvcc, origin: str, out_dir: Path) -> None:
        """Every check passed; the wheels are built next."""

    def wheel(self, planned: PlannedWheel) -> BuildProgress:
        """One wheel's build starts; the returned sink hears its progress."""

    def built(self, wheel: BuiltWheel) -> None:
        """That wheel is in the output directory."""

    def failed(self, planned: PlannedWheel, interrupted: bool) -> None:
        """That wheel's build stopped: an error, or Ctrl-C (``interrupted``)."""

    def cache_warning(self, message: str) -> None:
        """The compile cache cannot be used (at the start, or from now on): the build goes on
        without it. Said once per problem, possibly from another thread."""


@dataclass(frozen=True)
class BuiltWheels:
    wheels: list[BuiltWheel]
    locks: list[Path]  # --lock: one per wheel
    seconds: float
    variants_file: Path | None = None  # --variants: {name}-{version}-variants.json
    cache: CacheReport | None = None  # --cache: what the compile cache did


class WheelError(Exception):
    """``prebuild wheel`` failed; the message says why and what to do. ``exit_code``: 2 for the
    request (before anything was compiled), 1 for the build."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def build_wheels(request: WheelRequest, report: Reporter) -> BuiltWheels:
    """Build the wheels ``request`` asks for (steps 1-6 above); WheelError says why not."""
    stage = 2
    try:
        cache_spec = parse_cache_spec(request.cache)
    except CacheSpecError as exc:
        raise WheelError(str(exc), stage) from None
    with (
        removed_if_left_empty(request.out_dir),
        workspace(request.build_dir, stable=cache_spec is not None, on_wait=report.waiting) as work,
    ):
        try:
            planned = plan_request(request)
            kind = project_kind(
                request.project
            )  # None: an sdist or requirement, known once unpacked
            toolchain = check_before_building(request, planned, kind, work.path)
            # A cached build compiles a copy at the workspace's fixed paths, a native project's too.
            project = resolve(
                request.project,
                work.path,
                toolchain,
                report,
                copy=cache_spec is not None,
                archs=every_arch(planned),
                leave_out=(request.out_dir,),
            )
            if project.kind == CLASSIC:
                check_gpu_build(project, planned)
            with compile_cache(cache_spec, work.path, report.cache_warning) as cache:
                launcher = cache.launcher if cache is not None else None
                builder = make_builder(project, toolchain, request, planned, work.path, launcher)
                report.starting(planned, builder.nvcc, project.origin, request.out_dir)
                stage = 1
                started = time.monotonic()
                wheels = build_planned(builder, planned, request.out_dir, report)
            written = (
                write_variants_files([w.path for w in wheels], request.out_dir)
                if request.variants
                else []
            )
            variants_file = written[0] if written else None  # one project version: one file
            locks = (
                [write_lock(request.lock, w.path) for w in wheels]
                if request.lock is not None
                else []
            )
            return BuiltWheels(
                wheels,
                locks,
                time.monotonic() - started,
                variants_file,
                cache.report if cache is not None else None,
            )
        except FAILURES as exc:
            raise WheelError(work.message(exc), stage) from None


def plan_request(request: WheelRequest) -> list[PlannedWheel]:
    """Step 1: the archs, the wheels, the lock file's name."""
    if request.plain and (request.variants or request.fat or request.ptx):
        raise ValueError(
            "--plain builds the one plain wheel (every arch, PTX of the newest): without --variants, "
            "--fat or --ptx"
        )
    planned = plan_wheels(
        request.archs,
        fat=request.fat,
        ptx=request.ptx,
        variants=request.variants,
        plain=request.plain,
    )
    if request.lock is not None:
        check_lock_target(request.lock, len(planned))
    return planned


def every_arch(planned: list[PlannedWheel]) -> tuple:
    """The archs of all the planned wheels, once each."""
    return tuple(sorted({a for w in planned for a in w.archs}))


def check_before_building(
    request: WheelRequest, planned: list[PlannedWheel], kind: str | None, work: Path
) -> Toolchain | classic.ClassicToolchain:
    """Step 2: everything that can fail before the project is copied, downloaded, locked or
    compiled: the toolchain (a classic project's own when it is known to be one), then the
    output directory."""
    archs = every_arch(planned)
    if kind == CLASSIC:
        toolchain = classic.preflight_classic(archs, work)
    else:  # what every build needs (a classic one's checks follow once it is known)
        ptx = any(w.ptx for w in planned)  # a --variants build's plain wheel has PTX
        toolchain = preflight(flags.BuildOptions(archs=archs, ptx=ptx, jobs=request.jobs))
    prepare_output_dir(request.out_dir)
    return toolchain


def resolve(
    spec: str | None,
    work: Path,
    toolchain,
    report: Reporter,
    copy: bool = False,
    archs: tuple = (),
    leave_out: tuple[Path, ...] = (),
) -> Project:
    """Step 3: the project, copied, unpacked or downloaded into ``work`` (a native directory
    stays where it is, unless ``copy``). ``archs``: what the wheels are for, the GPU
    torch.cuda answers as where a requirement's setup.py fails without one. ``leave_out``: the
    folders a directory's copy leaves out besides ``work`` (the wheels')."""
    if spec is not None and not Path(spec).expanduser().exists():
        report.fetching(spec)
    env = metadata_env(toolchain, os.environ)
    # pip's metadata step runs a requirement's setup.py, which may install into this environment
    # (hqq 0.2.8's runs `python setup_cuda.py install` from egg_info, compiling for every arch)
    sites = env_writes.snapshot(env_writes.site_dirs())
    who = "pip's metadata step (the project's setup.py, run to read its name)"
    try:
        project = fetch_project(spec, work, toolchain, report, env, copy, archs, leave_out)
    except BuildError as exc:
        # A setup.py that installed, then failed (or pip failing after it): still told.
        message = env_writes.with_installed(str(exc), env_writes.installed_since(sites, who))
        if message == str(exc):
            raise
        raise BuildError(message, log=exc.log) from exc
    installed = env_writes.installed_since(sites, who)
    if installed:
        report.fetch_note(installed)
    if project.relabelled is not None:
        found = project.relabelled
        report.fetch_note(
            f"pip refused the sdist of {found.version}: its setup.py labels the version "
            f"{found.labelled} as it runs, which pip calls inconsistent with the index's "
            f"{found.version} (it then takes an older release, or none); fetched by its URL "
            f"instead ({found.url.split('#')[0]})"
        )
    if project.linked_checkout is not None:
        report.fetch_note(
            f"the git checkout around it ({project.linked_checkout}) is over "
            f"{MIRROR_COPY_LIMIT // 2**20} MiB: its build reads the checkout's other files through "
            "links, so anything it writes outside its own directory lands in the checkout"
        )
    if project.scm_version and SCM_VERSION_ENV not in os.environ:
        report.fetch_note(
            f"version {project.scm_version}, read by setuptools_scm in its git checkout itself, "
            "as pip's in-tree build reads it"
        )
    return project


def fetch_project(
    spec: str | None,
    work: Path,
    toolchain,
    report: Reporter,
    env: dict[str, str],
    copy: bool,
    archs: tuple,
    leave_out: tuple[Path, ...],
) -> Project:
    """resolve's fetch: the project through pip's metadata step in ``env``, asked again with
    torch.cuda answering for a GPU where its setup.py failed, maybe for want of one."""
    try:
        project = resolve_project(
            spec, work, copy_native=copy, metadata_env=env, leave_out=leave_out
        )
    except DownloadError as exc:
        if exc.metadata_failed and toolchain.torch.cuda is None:
            # pip runs the project's setup.py to read its name, and a classic one fails there
            # under a CPU torch: say what a directory or an sdist is told at once.
            detail = (
                f"pip could not even read {spec}'s metadata: its setup.py failed with {exc.reason}"
            )
            raise cpu_torch_error(toolchain.torch, detail) from None
        if not (exc.metadata_failed and archs and not classic.gpu_visible()):
            raise
        # Its setup.py failed with no GPU visible, maybe for want of one (Deformable-DETR's
        # raises unless torch.cuda.is_available()): asked again with torch.cuda answering as a
        # GPU of the wheels' newest arch, as its build will be (classic.py).
        answered = {
            **env,
            **classic.site_env(
                work, {**os.environ, **env}, capability=classic.newest_capability(archs)
            ),
        }
        try:
            project = resolve_project(
                spec, work, copy_native=copy, metadata_env=answered, leave_out=leave_out
            )
        except DownloadError:
            raise exc from None
        report.fetch_note(
            f"pip's metadata step failed with no GPU visible ({exc.reason}); it passed with "
            "torch.cuda and nvidia-smi answering as a GPU of compute capability "
            f"{classic.newest_capability(archs)} would"
        )
        project = replace(project, gpu_answered=True)
    return project


def check_gpu_build(project: Project, planned: list[PlannedWheel]) -> None:
    """Step 3, for a classic project: a well-known one that builds for the CPU only where no
    GPU is visible (DeepSpeed, pytorch3d, mmcv) is refused before anything is compiled, naming
    the variable that makes it build its GPU code (build_switches.no_gpu_refusal)."""
    distribution = distribution_of(project.origin, project.source.name)
    if distribution is None:
        return
    archs = ",".join(a.sm for a in every_arch(planned))
    message = no_gpu_refusal(
        distribution,
        os.environ,
        classic.gpu_visible(),
        f"prebuild wheel --arch {archs} {project.origin}",
    )
    if message is not None:
        raise BuildError(message)


def metadata_env(toolchain, environ) -> dict[str, str]:
    """The environment of pip's metadata step, which runs a requirement's setup.py before
    prebuild's own build does: the found toolkit as CUDA_HOME when none is set. torch's
    ``CUDA_HOME`` guess is ``dirname(dirname(nvcc))``, which for an nvcc wrapper script is no
    toolkit, and DeepSpeed's setup.py runs ``$CUDA_HOME/bin/nvcc -V`` even to say its name."""
    env = dict(environ)
    nvcc = getattr(toolchain, "nvcc", None)
    if nvcc is not None and not env.get("CUDA_HOME") and not env.get("CUDA_PATH"):
        env["CUDA_HOME"] = str(nvcc.toolkit.root)
    return env


def make_builder(
    project: Project,
    toolchain,
    request: WheelRequest,
    planned: list[PlannedWheel],
    work: Path,
    launcher: Path | None = None,
) -> WheelBuilder:
    """Step 4: the builder for the project's kind; every compile through ``launcher`` (the
    compile cache's) when given."""
    if project.kind == NATIVE:
        if request.config_settings:
            raise ValueError(
                "-C passes settings to a classic project's own build backend (its setup.py); "
                f"{project.origin} is a native project ([tool.prebuild]), whose build reads "
                "only its pyproject.toml: leave -C out"
            )
        if request.first_use:
            raise ValueError(
                "--first-use runs the code that makes a classic project's compiles at first "
                f"use (torch.utils.cpp_extension.load) in its build; {project.origin} is a "
                "native project ([tool.prebuild]), whose kernels are all compiled ahead of "
                "time: leave --first-use out"
            )
        return NativeBuilder(
            read_config(project.source),
            toolchain,
            jobs=request.jobs,
            build_dir=request.build_dir,
            compress=request.compress,
            launcher=launcher,
        )
    # an sdist or requirement turned out classic
    if not isinstance(toolchain, classic.ClassicToolchain):
        toolchain = classic.preflight_classic(every_arch(planned), work)
    return classic.ClassicBuilder(
        project.source,
        toolchain,
        work,
        jobs=request.jobs,
        launcher=launcher,
        origin=project.origin,
        scm_version=project.scm_version,
        identity=project.identity,
        answer=True if project.gpu_answered else None,
        config_settings=request.config_settings,
        bundle=request.bundle,
        mend=request.mend,
        compress=request.compress,
        strip=request.strip,
        first_use_code=request.first_use,
    )


def build_planned(
    builder: WheelBuilder, planned: list[PlannedWheel], out_dir: Path, report: Reporter
) -> list[BuiltWheel]:
    """Step 5: each planned wheel in turn. A wheel with no GPU code (a classic project's host
    code) serves every arch: the wheels planned after it would be the same, and are not built."""
    planned = builder.order(planned)
    wheels: list[BuiltWheel] = []
    for at, wheel in enumerate(planned):
        built = build_one(builder, wheel, out_dir, report)
        classic_wheel = isinstance(built.manifest, ProjectManifest)
        # (a native project's version is its pyproject.toml's: the same for every wheel)
        if (
            classic_wheel
            and wheels
            and (other := other_version(wheels[0].path.name, built.path.name))
        ):
            built = replace(built, notes=(*built.notes, other))
        rest = planned[at + 1 :]
        host = classic_wheel and built.manifest.host_only
        if host and rest:
            archs = "; ".join(",".join(a.sm for a in w.archs) for w in rest)
            note = f"it serves every arch: the other planned wheels ({archs}) would be the same"
            built = replace(built, notes=(*built.notes, note))
        wheels.append(built)
        if host:
            break
    return wheels


def other_version(first: str, wheel: str) -> str:
    """Pure: where the wheel named ``wheel`` has another version of the project than the run's
    first wheel (their labels of torch and arch aside), what that means; "" where they agree.
    A setup.py that versions itself with the time of the build (FlashMLA's without git data)
    gives each arch's wheel a release of its own."""
    theirs, ours = (project_version(str(parse_filename(n)[1])) for n in (first, wheel))
    if theirs == ours:
        return ""
    return (
        f"its version of the project is {ours}, the first wheel's {theirs}: the project's "
        "build versioned each wheel differently (as a setup.py versioning itself with the time "
        "of the build does), so pip and an index see a release for each, not one release for "
        "every arch"
    )


def build_one(
    builder: WheelBuilder, planned: PlannedWheel, out_dir: Path, report: Reporter
) -> BuiltWheel:
    """Step 5, for one wheel: the builder compiles, packages, checks and places it."""
    progress = report.wheel(planned)
    try:
        wheel = builder.build(planned, out_dir, progress)
    except BaseException as exc:
        report.failed(planned, interrupted=not isinstance(exc, Exception))
        raise
    report.built(wheel)
    return wheel


OBJECT_SUFFIXES = (".o", ".obj")


def objects_in(folder: Path) -> int:
    """How many compiled objects ``folder`` (a --build-dir) holds: what a next run may reuse."""
    try:
        return sum(1 for p in folder.rglob("*") if p.suffix in OBJECT_SUFFIXES and p.is_file())
    except OSError:  # gone, or unreadable: nothing to reuse
        return 0


@dataclass(frozen=True)
class Workspace:
    """Where a build keeps its work: the project's private copy, downloads, objects, logs."""

    path: Path
    temporary: bool  # removed at the end (no --build-dir)

    def message(self, exc: Exception) -> str:
        """``exc``'s message. A temporary workspace is about to go: a build log the error names
        (``exc.log``) is moved beside it first, and the message names its new place."""
        message, log = str(exc), getattr(exc, "log", None)
        if (
            self.temporary
            and log is not None
            and Path(log).is_file()
            and Path(log).resolve().is_relative_to(self.path.resolve())
        ):
            kept = Path(tempfile.gettempdir()) / f"{self.path.name}.log"
            shutil.move(str(log), kept)
            message = message.replace(str(log), str(kept))
        return message


# The lock a build holds on its --build-dir: two builds in one would copy the project over each
# other's, and compile into the same objects (native.LOCK_NAME is the native build's own).
WORKSPACE_LOCK = ".prebuild.lock"  # DIR's is .DIR.prebuild.lock, beside it
# What marks a --build-dir as prebuild's: it replaces the folders it makes there (source,
# download, each wheel's), so it works only in a new or empty folder, or one of its own.
WORKSPACE_MARK = ".prebuild-build-dir"
# What a build directory made before the mark holds (classic and native builds).
_OWN_ENTRIES = re.compile(
    r"(source|source-objects|download|cuda-shim|build-site|gpu-answer|cu\d+(\..*)?|cpu(\..*)?"
    rf"|host|host-sanitize|cuda|wheels|{re.escape(NATIVE_LOCK)})"
)


def foreign_entries(names: list[str]) -> list[str]:
    """Pure: the entries of a --build-dir (``names``) that prebuild did not make, where it holds
    no WORKSPACE_MARK; [] for one of its own (or an empty one)."""
    if WORKSPACE_MARK in names:
        return []
    return sorted(name for name in names if not _OWN_ENTRIES.fullmatch(name))


def check_build_dir(path: Path, given: Path) -> None:
    """WheelError where ``path`` (the --build-dir ``given``) holds what prebuild did not put
    there, which its build could replace, or is not a folder."""
    if path.exists() and not path.is_dir():
        raise WheelError(f"--build-dir {given} is a file, not a folder", 2)
    try:
        names = [entry.name for entry in path.iterdir()] if path.is_dir() else []
    except OSError as exc:
        raise WheelError(f"--build-dir {given}: cannot read it ({exc})", 2) from None
    foreign = foreign_entries(names)
    if foreign:
        more = len(foreign) - 5
        shown = ", ".join(foreign[:5]) + (f" and {more} more" if more > 0 else "")
        raise WheelError(
            f"--build-dir {given} holds what prebuild did not put there ({shown}). prebuild "
            "keeps a build's work in that folder and replaces the folders it makes there "
            "(the project's copy, downloads, each wheel's objects), so it builds only in a new "
            "or empty folder, or one an earlier prebuild build made. Name another, for "
            f"example: --build-dir {given / 'prebuild-build'}",
            2,
        )


def mark_build_dir(path: Path) -> None:
    """Mark ``path``, a --build-dir a build made or used, as prebuild's (WORKSPACE_MARK); a
    folder it cannot write stays unmarked (its entries still say it is prebuild's)."""
    if path.is_dir() and not (path / WORKSPACE_MARK).exists():
        with suppress(OSError):
            (path / WORKSPACE_MARK).write_text(
                "A prebuild build directory (prebuild wheel --build-dir): the next build reuses its "
                "objects. Delete the folder to start over.\n",
                encoding="utf-8",
            )


@contextmanager
def workspace(
    build_dir: Path | None, stable: bool = False, on_wait: Callable[[str], None] | None = None
) -> Iterator[Workspace]:
    """``build_dir`` (the user's, kept; one build at a time, ``on_wait`` hears that this one
    waits), or a temporary directory that no outcome leaves behind: success, an error or
    Ctrl-C. ``stable``: one of fixed name, so that a cached build's compile commands are the
    same in every build (``compile_cache.stable_workspace``)."""
    if build_dir is not None:
        # Absolute: the shim toolkit's paths (CUDA_HOME, CXX) are handed to a project's build,
        # which runs in the project's copy, not here.
        path = build_dir.absolute()
        # Beside it, not in it: a request refused before anything is built leaves no directory.
        lock = FileLock(str(path.parent / f".{path.name}{WORKSPACE_LOCK}"))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock.acquire(timeout=0)
        except Timeout:
            if on_wait is not None:
                on_wait(f"waiting for another build in {path} (lock {lock.lock_file})")
            lock.acquire()
        except OSError as exc:
            raise WheelError(f"--build-dir {build_dir}: cannot lock it ({exc})", 2) from None
        try:
            check_build_dir(path, build_dir)
            try:
                yield Workspace(path, temporary=False)
            finally:
                mark_build_dir(path)
        finally:
            lock.release()
        return
    if stable:
        with stable_workspace() as path:
            yield Workspace(path, temporary=True)
        return
    path = Path(tempfile.mkdtemp(prefix="prebuild-wheel-"))
    try:
        yield Workspace(path, temporary=True)
    finally:
        shutil.rmtree(path, ignore_errors=True)
