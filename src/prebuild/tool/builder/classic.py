"""``prebuild wheel --arch ... PROJECT`` for classic projects: setuptools with torch's
``CUDAExtension``/``BuildExtension`` (``torch/extension.h`` + pybind11), built unmodified.

Each wheel is built by the project's own PEP 517 backend, without build isolation, in this
environment (its CUDA build of torch is the torch the wheel will need), with a shim CUDA
toolkit as ``CUDA_HOME`` (``prebuild.tool.builder.cuda_shim``: exactly the requested archs
whatever setup.py asks, the C++ standard torch's headers need, every nvcc call logged). The
archs are then read back from every library in the wheel, and the wheel is relabelled
(``prebuild.tool.builder.relabel``). The project directory is prebuild's private copy.

The wheels of one run are built one after another from that copy: what the host compiler
compiled for the first (``torch/extension.h`` bindings, half a minute each) is reused by the
next, and what nvcc wrote is deleted so that it is compiled again for the next archs. With
``--build-dir``, the copy's objects outlive the run: the same command resumes a build that was
interrupted or failed (``prebuild.tool.builder.classic_objects``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from build import BuildBackendException, BuildException, ProjectBuilder, check_dependency
from packaging.utils import parse_wheel_filename
from wheel.wheelfile import WheelFile

from prebuild.runtime.arch import Arch, check_supported
from prebuild.runtime.manifest import (
    CPU_CODE,
    GPU_CODE,
    NO_TORCH_ABI,
    BuiltLibrary,
    CxxStandard,
    ProjectManifest,
)
from prebuild.tool.builder import build_site, env_writes, flags, runtime_floor
from prebuild.tool.builder.api_breaks import TH_BREAK, api_breaks, api_breaks_advice
from prebuild.tool.builder.api_mends import (
    SourceChange,
    mend_sources,
    mended_again,
    mended_note,
    mends_recorded,
    recorded_changes,
    recorded_text,
)
from prebuild.tool.builder.base import (
    BuildProgress,
    BuiltWheel,
    quiet_runner,
    shows_a_step,
    warnings_to_log,
)
from prebuild.tool.builder.build_log import (
    backend_failure,
    compiler_errors,
    failed_command,
    log_since,
    log_size,
    setup_py_line,
)
from prebuild.tool.builder.build_requirements import (
    installed_version,
    missing_requirements_message,
    split_installed,
    split_torch_pins,
    torch_pins_note,
)
from prebuild.tool.builder.build_switches import (
    BUILD_ENV,
    argv_advice,
    argv_switches,
    build_variables,
    cmake_advice,
    cmake_switches,
    forced_build_switches,
    gpu_answer_note,
    gpu_query_line,
    has_switches,
    host_code_asked,
    ninja_failed,
    ninja_note,
    ninja_off_line,
    switches_advice,
)
from prebuild.tool.builder.bundle import bundle_system_libraries
from prebuild.tool.builder.classic_messages import (
    counted,
    cpu_torch_error,
    host_only_message,
    host_wheel_note,
    kept_objects_error,
    no_extension_message,
    objects,
    undefined_message,
    unresolved_message,
    variant_refusal,
)
from prebuild.tool.builder.classic_objects import (
    ObjectsKey,
    calls_by_object,
    logged_calls,
    ninja_logged,
    prepare_build,
    read_record,
)
from prebuild.tool.builder.compile import BuildError, killed_compiler_advice
from prebuild.tool.builder.config_settings import ConfigSettings, as_options, setup_option_hint
from prebuild.tool.builder.cuda_shim import (
    add_driver_stub,
    make_cuda_shim,
    nvidia_dirs,
    probe_toolkit,
    search_paths,
    write_cxx_script,
    write_nvcc_script,
)
from prebuild.tool.builder.debug_info import Stripped, strip_wheel
from prebuild.tool.builder.guard_files import guard_files
from prebuild.tool.builder.jit_ahead import FirstUse, compile_first_use, with_first_use
from prebuild.tool.builder.load_trial import load_failures, undefined_names
from prebuild.tool.builder.nvcc_shim import (
    NVCC_ENV_FLAGS,
    is_query,
)
from prebuild.tool.builder.plan import PlannedWheel
from prebuild.tool.builder.project import SCM_VERSION_ENV, environment_hints, last_error
from prebuild.tool.builder.project_python import python_notes
from prebuild.tool.builder.python_tag import (
    any_python_note,
)
from prebuild.tool.builder.relabel import (
    add_local_label,
    relabel_wheel,
    relabelled_dist_info,
)
from prebuild.tool.builder.run_time_compiles import run_time_compiles, run_time_note
from prebuild.tool.builder.shim_calls import (
    debug_left_out_calls,
    failed_call_archs_note,
    is_device_linked,
    portable_calls,
    raised_standards,
    shim_notes,
)
from prebuild.tool.builder.shipped import shipped_libraries, shipped_message, source_libraries
from prebuild.tool.builder.source_gaps import (
    downloads_advice,
    empty_submodules,
    source_gaps_advice,
    source_url,
    submodule_paths,
    system_header_pattern,
)
from prebuild.tool.builder.system_libraries import (
    MACHINE_BOUND,
    bundled_note,
    found_at,
    kept_reason,
    matches,
    system_libraries_note,
    system_links,
    torch_provided,
)
from prebuild.tool.builder.toolchain import (
    Nvcc,
    ToolchainError,
    Torch,
    available_memory_bytes,
    check_cuda_matches_torch,
    compiler_include_dirs,
    cpu_count,
    find_cxx,
    find_nvcc,
    find_torch,
)
from prebuild.tool.builder.torch_abi import (
    SHIM_HEADER_DIRS,
    cxx11_abi,
    cxx_note,
    missing_torch_names,
    old_abi_calls,
    shim_versions,
    stable_note,
    torch_abi,
    torch_free_note,
)
from prebuild.tool.builder.variant_twin import variant_json
from prebuild.tool.builder.wheel_libraries import (
    any_python_retag,
    check_archs,
    cuda_links,
    distribution_name,
    host_code,
    read_wheel_libraries,
    recorded_sass,
    wheel_needed_libraries,
    wheel_symbols,
)
from prebuild.tool.inspection import demangled, folder_exports
from prebuild.tool.jit_sites import BUILD_OUTPUTS, jit_sites, setup_imports_jit
from prebuild.tool.user_cache import user_cache_dir
from prebuild.tool.variant_wheels import VARIANT_JSON, WheelArchs, built_variant_problem

# A torch/extension.h translation unit takes 1-3 GiB to compile: torch's MAX_JOBS from this.
CLASSIC_MEMORY_PER_JOB = 3 << 30


def torch_cuda_arch_list(sass: tuple[Arch, ...], ptx: tuple[Arch, ...]) -> str:
    """``TORCH_CUDA_ARCH_LIST`` for the same request (``8.0;9.0+PTX``), for projects that read it."""
    items = [f"{a.major}.{a.minor}{a.suffix}" for a in sass]
    ptx_caps = {(a.major, a.minor) for a in ptx}
    return ";".join(
        f"{item}+PTX" if (a.major, a.minor) in ptx_caps else item for item, a in zip(items, sass)
    )


@dataclass(frozen=True)
class ClassicToolchain:
    """What the preflight found and prepared: the build's torch and nvcc, the shim toolkit
    (without its per-wheel ``bin/nvcc``) and the C++ standard torch's headers need."""

    torch: Torch
    nvcc: Nvcc
    shim: Path
    cxx_standard: str
    cxx11_abi: str = ""  # torch's libstdc++ ABI: "1" (C++11), "0", "" unknown


def preflight_classic(archs: tuple[Arch, ...], work: Path) -> ClassicToolchain:
    """Every check that can fail before the project is touched; the shim toolkit is laid out
    in ``work`` and compiles a probe (``cuda_shim.probe_toolkit``) before it is used."""
    torch = find_torch()
    if torch.cuda is None:
        raise cpu_torch_error(torch)
    nvcc = Nvcc(find_nvcc())
    check_supported(archs, nvcc.supported_archs)
    check_cuda_matches_torch(nvcc.version, torch.cuda)
    shim = make_cuda_shim(nvcc.toolkit, work / "cuda-shim")
    cxx = find_cxx()
    standard = probe_toolkit(shim, torch, cxx, nvcc.toolkit, user_cache_dir() / "probes")
    add_driver_stub(shim, cxx)
    abi = cxx11_abi(folder_exports(torch.library_dir))
    return ClassicToolchain(torch, nvcc, shim, standard, abi)


def newest_capability(archs: tuple[Arch, ...]) -> str:
    """Pure: the compute capability of the newest of ``archs`` (sm_80, sm_90 -> "9.0"): the GPU
    torch.cuda answers as in a build with none visible (build_site.py)."""
    newest = max(archs)
    return f"{newest.major}.{newest.minor}"


def answer_may_explain(error: str) -> bool:
    """Pure: whether a setup.py that failed before compiling, with torch.cuda answering for a GPU,
    may have failed on the answer (it asked the GPU itself: DeepSpeed 0.19.8), so that a build
    with torch's own answers may go further. A missing module (mmcv 2.2.0's ``pkg_resources``)
    is no answer's doing: that build would fail the same way."""
    return not re.match(r"(?:ModuleNotFoundError|ImportError): ", error.strip())


def no_gpu_may_explain(error: str) -> bool:
    """Pure: whether a build that failed before compiling, with no GPU visible and torch.cuda
    answering for itself, may have failed for want of a GPU (colossalai 0.5.0: "RuntimeError:
    Found no NVIDIA driver on your system"), so that a build with the answer may go further."""
    return answer_may_explain(error) and bool(
        re.search(r"cuda|gpu|nvidia|driver|device", error, re.I)
    )


def gpu_visible() -> bool:
    """Whether a GPU is visible to this process (NVML; CUDA_VISIBLE_DEVICES heeded): where none
    is, a classic build may need torch.cuda answering for one (build_site.py)."""
    from prebuild.runtime.nvml import any_gpu_visible  # looked up at each call (tests stand in)

    return any_gpu_visible(dict(os.environ))


def site_env(
    work: Path,
    environ: Mapping[str, str],
    capability: str = "",
    ninja: bool = False,
    headers: str = "",
) -> dict[str, str]:
    """The variables that make a process run with them change its build as asked
    (build_site.py): torch.cuda and nvidia-smi answering as a GPU of ``capability`` ("9.0")
    would, torch's BuildExtension building with ``ninja``, the known system ``headers`` checked
    before compiling (headers_spec's JSON); {} where none is asked. The file is the
    ``sitecustomize`` of a directory in ``work``, first on PYTHONPATH (the user's own after
    it); where a GPU is answered for, a script running it is ``nvidia-smi``, first on PATH
    (``environ``'s after it)."""
    asked = {
        **({build_site.ENV_CAPABILITY: capability} if capability else {}),
        **({build_site.ENV_NINJA: "1"} if ninja else {}),
        **({build_site.ENV_HEADERS: headers} if headers else {}),
    }
    if not asked:
        return {}
    site = work / "build-site"
    site.mkdir(exist_ok=True)
    shutil.copyfile(Path(build_site.__file__), site / "sitecustomize.py")
    user = environ.get("PYTHONPATH")
    env = {"PYTHONPATH": os.pathsep.join([str(site), *([user] if user else [])]), **asked}
    if capability:
        bin_dir = site / "bin"
        bin_dir.mkdir(exist_ok=True)
        script = bin_dir / "nvidia-smi"
        # -S: no site, no sitecustomize run: this file runs as the script, standard library only
        script.write_text(
            "#!/bin/sh\n"
            f"{build_site.ENV_CAPABILITY}={shlex.quote(capability)} exec "
            f"{shlex.quote(sys.executable)} -S {shlex.quote(str(site / 'sitecustomize.py'))} "
            '"$@"\n'
        )
        script.chmod(0o755)
        env["PATH"] = os.pathsep.join(p for p in (str(bin_dir), environ.get("PATH", "")) if p)
    return env


def cmake_prefix_env(torch_library_dir: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """Pure: ``CMAKE_PREFIX_PATH`` with the build's torch's CMake prefix (what
    ``torch.utils.cmake_prefix_path`` names) after the user's own, so that a CMake build's
    ``find_package(Torch)`` finds it: the setting torch's docs, and such projects' READMEs, have
    users make by hand."""
    torch_prefix = str(torch_library_dir.parent / "share" / "cmake")
    user = environ.get("CMAKE_PREFIX_PATH", "")
    return {"CMAKE_PREFIX_PATH": os.pathsep.join(p for p in (user, torch_prefix) if p)}


def headers_spec(compiler_dirs: list[str] | None) -> str:
    """Pure: build_site's ENV_HEADERS value: the known system headers and the directories the
    compiler searches by itself; "" (no check) where the compiler could not say which (a
    header it finds there would be taken for missing)."""
    if compiler_dirs is None:
        return ""
    return json.dumps({"pattern": system_header_pattern(), "dirs": compiler_dirs})


# The C, C++ and CUDA files whose text a failed build's advice may read.
NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".inl")


def source_files(project: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The project's files whose names end in one of ``suffixes``, sorted; an earlier build's
    outputs (in a build/, dist/ or .eggs folder at any depth) are no source."""
    return [
        path
        for path in sorted(project.rglob("*"))
        if path.suffix in suffixes
        and not set(path.relative_to(project).parts[:-1]) & set(BUILD_OUTPUTS)
        and path.is_file()
    ]


def has_cuda_sources(project: Path) -> bool:
    """Whether the project's source holds any CUDA file (``.cu``, ``.cuh``)."""
    return bool(source_files(project, (".cu", ".cuh")))


def native_sources(project: Path) -> dict[str, str]:
    """The project's C, C++ and CUDA files (its path -> text): what a failed build's log
    cannot say (api_breaks.th_fix)."""
    return {
        str(path.relative_to(project)): path.read_text(encoding="utf-8", errors="replace")
        for path in source_files(project, NATIVE_SUFFIXES)
    }


def python_texts(files: Mapping[str, Path]) -> dict[str, str]:
    """The text of the project's Python files (its path -> text); "" for one over 1 MiB (data,
    not the code that imports an extension)."""
    return {name: _text(f) if f.stat().st_size <= 1 << 20 else "" for name, f in files.items()}


# The mends made in a work folder's copy of the project, for a build that goes on from its
# objects (ClassicBuilder.restore_mends): the copy is made afresh each run, the objects kept.
MENDS_FILE = "prebuild-mends.json"


def _text(path: Path) -> str:
    """A file's text, "" where there is none."""
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def python_here(work: Path) -> Path:
    """A folder whose ``python`` and ``python3`` run this Python (scripts, not links: a link to
    a venv's python outside the venv would find no pyvenv.cfg), for the build's PATH."""
    folder = work / "python-bin"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        script = folder / name
        script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
        script.chmod(0o755)
    return folder


def shim_headers(include_dirs: tuple[Path, ...]) -> list[str]:
    """The texts of torch's stable-ABI C headers (``torch_abi.SHIM_HEADER_DIRS``) under its
    include directories; [] for a torch that has none."""
    return [
        header.read_text(encoding="utf-8", errors="replace")
        for root in include_dirs
        for folder in SHIM_HEADER_DIRS
        for header in sorted((root / folder).glob("*.h"))
    ]


@dataclass(frozen=True)
class _CallLogs:
    """Where one wheel's shims log the compiler calls they ran (JSON lines)."""

    nvcc: Path
    cxx: Path


@dataclass
class _BuildRun:
    """One wheel's run of the project's build: the wheel it built; how its setup.py failed
    with torch.cuda answering for a GPU, and where, if it did (then built again without the
    answer); what the build installed into the environment (env_writes.installed_since)."""

    built: Path = Path()
    answer_error: str = ""
    answer_where: tuple[int, str] | None = None
    installed: str = ""


class ClassicBuilder:
    """Builds the wheels of one classic project (prebuild's private copy), one per arch set,
    one after another: each reuses the host objects of the one before, and a wheel an earlier
    run in the same workspace did not finish resumes from its objects (classic_objects.py)."""

    def __init__(
        self,
        project: Path,
        toolchain: ClassicToolchain,
        work: Path,
        jobs: int | None = None,
        launcher: Path | None = None,
        origin: str = "",
        scm_version: str | None = None,
        identity: str = "",
        answer: bool | None = None,
        config_settings: ConfigSettings | None = None,
        bundle: bool = True,
        mend: bool = True,
        compress: bool = True,
        strip: bool = True,
        first_use_code: tuple[str, ...] = (),
    ):
        self.project, self.toolchain, self.work, self.jobs = project, toolchain, work, jobs
        # the system libraries its libraries link copied into each wheel (bundle.py)
        self.bundle = bundle
        # its code mended where it meets a removed API with an exact replacement (api_mends.py)
        self.mend = mend
        # its fatbins compressed as prebuild's own are (wheel --compress; flags.compress_flags)
        self.compress = compress
        # its libraries' debug sections stripped (debug_info.py: Python's -g)
        self.strip = strip
        # the code its users run that makes its first-use compiles (--first-use: jit_ahead.py)
        self.first_use_code = first_use_code
        self.source_changes: list[SourceChange] = []  # the mends made in the copy, in order
        self._mends_restored = False  # an earlier run's mends made again in this copy
        self.origin = origin  # what the user named (named again in the guard's messages)
        self.scm_version = scm_version  # project.scm_version: its checkout's, for its copy
        self.launcher = launcher  # the compile cache's: nvcc and the host compiler run through it
        self.nvcc = toolchain.nvcc
        self.identity = identity or str(project)  # project.Project.identity
        # -C KEY=VALUE: for its backend's every hook (setuptools: --global-option on every
        # setup.py command line, --build-option on bdist_wheel's)
        self.config_settings = config_settings or {}
        self._first = True  # no wheel built yet by this builder
        # False once the project's setup.py failed with torch.cuda answering for a GPU
        # (build_site.py): the next wheels are built with torch's own answers from the start.
        # True once its build failed before compiling without the answer, no GPU visible: the
        # next wheels are built with it (or from the start: ``answer``, where pip's metadata
        # step needed it). None: as its setup.py's text says (answers()).
        self._answer: bool | None = answer
        # False once its build failed with ninja turned back on, on ninja's own error: the next
        # wheels are built as its setup.py says.
        self._ninja: bool | None = None
        # True once the build's requirements were found installed: its wheels share them, so
        # the next wheels skip the check (a process running its setup.py, seconds of CPU).
        self._requirements_met = False

    @property
    def objects_key(self) -> ObjectsKey:
        """What the objects kept in the copy's build/ depend on, besides sources and archs."""
        return ObjectsKey(
            project=self.identity,
            torch=self.toolchain.torch.version_string,
            # The toolkit, not the nvcc found on PATH: that may be a wrapper script anywhere.
            nvcc=f"{self.nvcc.toolkit.root} {self.nvcc.version}",
            python=f"{sys.executable} {sys.version}",
            cxx_standard=self.toolchain.cxx_standard,
            nvcc_env_flags=" ".join(
                f"{name}={os.environ[name]}" for name in NVCC_ENV_FLAGS if os.environ.get(name)
            ),
        )

    def wheel_label(self, planned: PlannedWheel) -> str:
        """The planned wheel's local version label, the name of its directory in the workspace."""
        ptx = flags.ptx_archs_for(planned.archs, planned.ptx)
        return flags.local_version_label(self.nvcc.version, planned.archs, ptx)

    def order(self, planned: list[PlannedWheel]) -> list[PlannedWheel]:
        """The wheel an earlier run in this workspace did not finish first: its objects are in
        the copy's build/ (the other wheels compile their device code anyway)."""
        record = read_record(self.project / "build")
        if record is None or record.key != self.objects_key:
            return planned
        first = [w for w in planned if self.wheel_label(w) == record.label]
        return [*first, *(w for w in planned if w not in first)]

    def build(self, planned: PlannedWheel, out_dir: Path, progress: BuildProgress) -> BuiltWheel:
        """Build the planned wheel (exactly its archs) into ``out_dir``; ``progress`` hears
        its phases and what the user should know of it (a raised C++ standard)."""
        start = time.monotonic()
        sass, ptx = planned.archs, flags.ptx_archs_for(planned.archs, planned.ptx)
        torch, nvcc, project = self.toolchain.torch, self.toolchain.nvcc, self.project
        wheel_label = self.wheel_label(planned)
        wheel_dir = self.work / wheel_label
        logs = _CallLogs(wheel_dir / "nvcc-calls.jsonl", wheel_dir / "cxx-calls.jsonl")
        # Before the logs go: the record of an earlier build of this wheel names them.
        kept, reused = prepare_build(
            project / "build", self.objects_key, wheel_label, (logs.nvcc, logs.cxx)
        )
        if not self._mends_restored:  # once a copy: its first wheel
            self._mends_restored = True
            if kept and self.mend:
                self.restore_mends()
            else:  # no object compiled from a mended text is left: the record says nothing
                (self.work / MENDS_FILE).unlink(missing_ok=True)
        shutil.rmtree(wheel_dir, ignore_errors=True)
        wheel_dir.mkdir(parents=True)
        # Only ninja's record of what it compiled lets a build skip an object: setuptools
        # without ninja compiles every source whatever is there (DeepSpeed 0.19.8's build).
        unused = kept if kept and not ninja_logged(project / "build") else 0
        kept -= unused
        # The objects an earlier run left: kept by this run's first wheel only (the next ones
        # reuse what it compiled or linked).
        earlier, self._first = (kept if self._first else 0), False
        build_log = wheel_dir / "build.log"
        env = self.build_env(sass, ptx, wheel_dir, logs, progress)
        if reused.resumed and unused:
            progress.note(
                f"{objects(unused)} an earlier run compiled for this wheel in {self.work} "
                f"{'is' if unused == 1 else 'are'} there, but that run built without ninja, "
                "whose record of what it compiled is what lets a build go on: every source is "
                "compiled again"
            )
        elif reused.resumed:
            progress.note(
                f"{objects(kept)} an earlier run compiled for this wheel in {self.work} "
                f"{'is' if kept == 1 else 'are'} kept: ninja compiles again only what is missing, "
                "or whose source or command changed since"
            )
        progress.phase(
            "compiling (the project's own build" + (f", {objects(kept)} kept)" if kept else ")")
        )
        ships = source_libraries(project)  # before the build writes into its source
        with tempfile.TemporaryDirectory(dir=wheel_dir, prefix="wheel-") as tmp:
            run = self.run_build(env, build_log, Path(tmp), sass, logs, earlier, progress)
            built = run.built

            def refused(message: str) -> BuildError:
                # The environment changed whatever the wheel's fate: said in every refusal.
                return BuildError(env_writes.with_installed(message, run.installed))

            libraries = read_wheel_libraries(built)
            first_use = FirstUse()
            finds = not libraries and bool(jit_sites(project, limit=1))
            if finds or self.first_use_code:
                # It compiles when first used: those compiles are made now, into the wheel
                # (where its own build made libraries, only those the user's code makes).
                progress.phase("compiling what it compiles when first used")
                first_use = self.first_use(
                    built, env, sass, wheel_dir, build_log, progress, find=not libraries
                )
                if failed := first_use.failed_compile:
                    what = (
                        f"its compile of '{failed.compile}' when first used, run ahead of time "
                        f"by `{failed.trigger}`, failed"
                    )
                    error = self.build_failure(what, first_use.output, env, sass, build_log)
                    raise refused(str(error))
                if first_use.libraries:
                    built = with_first_use(
                        built, first_use, distribution_name(built), Path(tmp) / "first-use-wheel"
                    )
                    libraries = read_wheel_libraries(built)
            progress.phase("checking the archs in every library")
            shipped = [
                lib
                for lib in shipped_libraries(ships, project, built, libraries)
                if lib.built_for_torch
            ]
            if shipped:
                raise refused(shipped_message(built.name, shipped, self.source_url()))
            stripped = strip_wheel(built, Path(tmp) / "stripped") if self.strip else Stripped(built)
            if stripped.wheel != built:  # what the manifest records is the stripped libraries
                built, libraries = stripped.wheel, read_wheel_libraries(stripped.wheel)
            if not libraries:
                advice, switches = self.advice(built, sass)
                sites = jit_sites(project)
                calls = [*logged_calls(logs.nvcc), *logged_calls(logs.cxx)]
                raise BuildError(
                    no_extension_message(
                        built.name,
                        sites,
                        advice,
                        switches=switches,
                        answer_error=run.answer_error,
                        command=self.command(sass),
                        installed=run.installed,
                        answer_where=run.answer_where,
                        imported=setup_imports_jit(self.setup_text(), sites),
                        compiled=len(calls_by_object(calls)),
                        tried=first_use.refusal(),
                    )
                )
            if run.installed:
                progress.note(run.installed)
            code, links, by_design = GPU_CODE, [], False
            needed = wheel_needed_libraries(built)
            if not any(lib.has_code for lib in libraries):
                # GPU code the project has and did not compile is lost: refused. With none to
                # compile, or none in the extensions asked (a well-known project told to build
                # for CUDA), its host code serves every GPU: one wheel, labelled with no arch.
                by_design = host_code_asked(distribution_name(built), os.environ, gpu_visible())
                if has_cuda_sources(project) and not by_design:
                    advice, switches = self.advice(built, sass)
                    raise refused(
                        host_only_message(
                            built.name,
                            libraries,
                            build_log,
                            advice,
                            run.answer_error,
                            self.command(sass),
                            switches=switches,
                            answer_where=run.answer_where,
                        )
                    )
                links = cuda_links(needed)
                code = host_code(links)
                sass, ptx = (), ()
            # The kept objects' calls (made for an earlier wheel, or an earlier build of this
            # one) count as this wheel's too; a call compiling an object again replaces its own.
            logged = logged_calls(logs.nvcc)
            remade = calls_by_object(logged)
            calls = [*(c for o, c in reused.nvcc_calls.items() if o not in remade), *logged]
            if code == GPU_CODE:
                try:
                    check_archs(
                        built.name, libraries, sass, ptx, device_linked=is_device_linked(calls)
                    )
                except BuildError as exc:
                    raise refused(str(exc)) from exc
            host_calls = {**reused.host_calls, **calls_by_object(logged_calls(logs.cxx))}
            raised, raised_host = raised_standards(calls), raised_standards([*host_calls.values()])
            built, libraries, system, copied, notes = self.system_libraries(
                built, libraries, needed, progress
            )
            # the objects' compiles run without it (kept ones too; none with --no-strip)
            left_out = debug_left_out_calls([*host_calls.values(), *calls])
            stripped = replace(stripped, left_out=left_out)
            if note := stripped.note():
                notes = (*notes, note)
            if first_use.libraries:
                notes = (first_use.note(), *notes)
            elif self.first_use_code:  # asked for, and it made nothing: said
                notes = (f"--first-use made nothing: {'; '.join(first_use.problems())}", *notes)
            files = {str(f.relative_to(project)): f for f in source_files(project, (".py",))}
            empty = frozenset(name for name, f in files.items() if not f.stat().st_size)
            with zipfile.ZipFile(built) as zf:
                notes = (*notes, *python_notes(python_texts(files), zf.namelist(), empty))
            symbols = wheel_symbols(built)
            undefined = {name: needs for name, (_, needs) in symbols.items()}
            runs = [c.run for c in (*calls, *host_calls.values())]
            if missing := missing_torch_names(undefined, folder_exports(torch.library_dir)):
                # It would not load (`undefined symbol`): an at::native function torch keeps
                # internal, or objects a --build-dir kept from a build with the old ABI.
                raise refused(
                    unresolved_message(
                        built.name,
                        missing,
                        demangled(n for names in missing.values() for n in names),
                        torch.version_string,
                        old_abi_calls(runs),
                        len(runs),
                    )
                )
            progress.phase("loading its libraries beside torch")
            if missing := undefined_names(
                load_failures(built), {n for defined, _ in symbols.values() for n in defined}
            ):
                raise refused(undefined_message(built.name, missing, demangled(missing.values())))
            abi = torch_abi(
                undefined,
                runs,
                torch.version_string,
                shim_versions(shim_headers(torch.include_dirs)),
            )
            built_tag = "-".join(built.name[: -len(".whl")].split("-")[-3:])
            tag = any_python_retag(built, built_tag, symbols)
            if tag is not None:
                notes = (*notes, any_python_note(built_tag, tag))
            cuda_major = str(nvcc.version.major) if code != CPU_CODE else None
            if abi.stable:
                notes = (*notes, stable_note(abi, torch.version_string, cuda_major))
            elif abi.kind == NO_TORCH_ABI:
                notes = (*notes, torch_free_note(torch.version_string, cuda_major))
            elif why := cxx_note(abi, torch.version_string):
                notes = (*notes, why)
            manifest = ProjectManifest(
                kind="classic",
                torch=torch.version_string,
                torch_cuda=torch.cuda,
                cuda=str(nvcc.version),
                python_tag=tag or built_tag,
                sass_archs=recorded_sass(libraries, sass),
                ptx_archs=tuple(sorted(ptx)),
                libraries=libraries,
                nvcc_calls=portable_calls(calls, self.places()),
                cxx_standard=CxxStandard(self.toolchain.cxx_standard, raised, raised_host),
                code=code,
                system_libraries=tuple(system),
                bundled_libraries=tuple(copied),
                torch_abi=abi.kind,
                torch_target=abi.target,
                source_changes=tuple(str(c) for c in self.source_changes),
            )
            if self.source_changes:
                notes = (*notes, mended_note(self.source_changes))
            if compiles := run_time_compiles(built):
                notes = (*notes, run_time_note(compiles))
            if manifest.host_only:  # first: what the wheel is
                host = host_wheel_note(
                    code, links, manifest.torch_needed, str(nvcc.version), by_design
                )
                notes = (host, *notes)
            progress.phase("writing the wheel")
            label = self.local_label(manifest, planned)
            variant = planned.label if not manifest.host_only else None
            if variant is not None:
                built_archs = WheelArchs(manifest.sass_archs, manifest.ptx_archs)
                problem = built_variant_problem(variant, built_archs)
                if problem is not None:
                    raise BuildError(variant_refusal(built.name, problem, planned))
            files = {VARIANT_JSON: variant_json(planned, str(nvcc.version))} if variant else {}
            final = relabel_wheel(
                built,
                out_dir,
                label,
                None
                if manifest.torch_free
                else flags.torch_pin(torch.version_string, manifest.torch_target),
                manifest.to_json(),
                files,
                variant,
                files=self.guard(built, label, first_use.served(distribution_name(built))),
                tag=tag,
            )
        notes = (
            *notes,
            *shim_notes(
                calls,
                [*host_calls.values()],
                sass,
                (raised, raised_host),
                self.toolchain.cxx_standard,
                torch.version_string,
            ),
        )
        if floor := runtime_floor.wheel_note(final, torch):
            notes = (*notes, floor)
        return BuiltWheel(
            final,
            planned,
            manifest.sass_archs,
            manifest.ptx_archs,
            manifest,
            time.monotonic() - start,
            notes,
        )

    def build_env(
        self,
        sass: tuple[Arch, ...],
        ptx: tuple[Arch, ...],
        wheel_dir: Path,
        logs: _CallLogs,
        progress: BuildProgress,
    ) -> dict[str, str]:
        """The variables one wheel's build runs with (over this process's): the shim toolkit,
        its nvcc and host compiler scripts written for the wheel's archs and logging to
        ``logs``, the jobs, and what the project reads; ``progress`` hears what the build will
        do that its setup.py would not (torch.cuda's answer, ninja, a forced build)."""
        shim = self.toolchain.shim
        # One shim path for every wheel: the include paths in the host compiler's commands (and
        # so ninja's view of its objects) stay the same from one wheel to the next.
        write_nvcc_script(
            shim,
            self.nvcc.path,
            flags.gencode_flags(sass, ptx),
            logs.nvcc,
            self.toolchain.cxx_standard,
            self.launcher,
            flags.classic_compress_flags(self.compress, self.nvcc.version),
            self.toolchain.cxx11_abi,
            no_debug=self.strip,
        )
        max_jobs = self.jobs or flags.parallel_jobs(
            cpu_count(), available_memory_bytes(), CLASSIC_MEMORY_PER_JOB
        )
        env = {
            "CUDA_HOME": str(shim),
            "CUDA_PATH": str(shim),
            # `python` in its build is this one (ThunderKittens' setup.py runs `python -c
            # "import torch; ..."`): the environment it builds in, activated or not.
            "PATH": f"{shim / 'bin'}:{python_here(self.work)}:{os.environ.get('PATH', '')}",
            "TORCH_CUDA_ARCH_LIST": torch_cuda_arch_list(sass, ptx),
            "MAX_JOBS": str(max_jobs),
            **BUILD_ENV,  # FORCE_CUDA=1: projects that skip CUDA when no GPU is visible
            # torch (2.14) puts a ccache or sccache found on PATH in front of every compiler: it
            # cannot tell the shim nvcc is one ("Compiler not supported"), and the cache is what
            # --cache says, through prebuild's launcher.
            "TORCH_NO_COMPILER_WRAPPER": "1",
            # A JIT compile the build runs (KNN_CUDA's setup.py imports its package, which calls
            # load()) writes and locks in the workspace: never in the user's JIT cache, where a
            # stale lock would hang it and its module, built with the shim's archs, be reused.
            "TORCH_EXTENSIONS_DIR": str(wheel_dir / "torch-extensions"),
            **search_paths(shim, os.environ),
            **cmake_prefix_env(self.toolchain.torch.library_dir, os.environ),
        }
        # A project that would download its own prebuilt wheel (all archs, its torch) is told to
        # compile: prebuild is asked to build this wheel, and checks what it built.
        forced = forced_build_switches(self.setup_text(), os.environ)
        env.update(forced)
        env.update(self.scm_env(os.environ))
        if self.answers():
            progress.note(self.gpu_answer_note(sass, ""))
        ninja = self.ninja_line()
        if ninja is not None:
            progress.note(ninja_note(ninja, max_jobs, self.setup_text()))
        if forced:
            progress.note(
                "set "
                + " ".join(f"{k}={v}" for k, v in forced.items())
                + ": the project's setup.py would otherwise download a prebuilt wheel of its own "
                "instead of compiling"
            )
        env["CXX"] = str(
            write_cxx_script(
                shim,
                find_cxx(),
                logs.cxx,
                self.toolchain.cxx_standard,
                self.launcher,
                self.toolchain.cxx11_abi,
                no_debug=self.strip,  # what the wheel would not keep is not compiled
            )
        )
        return env

    def run_build(
        self,
        env: dict[str, str],
        build_log: Path,
        out: Path,
        sass: tuple[Arch, ...],
        logs: _CallLogs,
        earlier: int,
        progress: BuildProgress,
    ) -> _BuildRun:
        """The project's build of one wheel into ``out`` (project_build), run again where it
        failed in a way a change of prebuild's may mend (rebuild_reason); BuildError, saying the
        ``earlier`` objects it kept and what it installed into the environment, where not."""
        run = _BuildRun()
        sites_before = env_writes.snapshot(env_writes.site_dirs())
        while True:
            site, log_start = self.site_env(sass, env), log_size(build_log)
            try:
                run.built = self.project_build({**env, **site}, build_log, out, sass, progress)
                break
            except BuildError as exc:
                again = self.rebuild_reason(run, site, log_since(build_log, log_start), logs, sass)
                if again is None:
                    error = kept_objects_error(exc, earlier, self.work)
                    installed = env_writes.installed_since(sites_before)
                    message = env_writes.with_installed(str(error), installed)
                    if self.source_changes:  # the lines it names are the mended copy's
                        message += f"\n\n{mended_note(self.source_changes)}"
                    raise BuildError(message, log=error.log) from exc
                progress.note(again)
                # the steps said so far are the failed run's (a line still naming its failed
                # step while the mended copy compiled: curobo)
                progress.phase("compiling again (the project's own build)")
                with open(build_log, "a", encoding="utf-8") as f:
                    f.write(f"\n==== prebuild: {again}\n\n")
        run.installed = env_writes.installed_since(sites_before)
        return run

    def rebuild_reason(
        self,
        run: _BuildRun,
        site: Mapping[str, str],
        log: str,
        logs: _CallLogs,
        sass: tuple[Arch, ...],
    ) -> str | None:
        """Why a build that failed (``log``: its output, with the variables ``site`` changed)
        is run again, and how (this builder's ``_answer`` or ``_ninja`` changed for it and
        the next wheels; ``run`` told how its setup.py failed with torch.cuda answering); None
        where it is not."""
        compiled = [*logged_calls(logs.nvcc), *logged_calls(logs.cxx)]
        error = last_error(log)
        # (gcc, for a C source, runs through no shim: the log shows its commands)
        nothing_compiled = all(is_query(c.given) for c in compiled) and not shows_a_step(log)
        # (one the header check stopped would stop the same way again)
        may_go_further = nothing_compiled and build_site.STOPPED not in log
        answered = build_site.ENV_CAPABILITY in site
        if answered and self._answer is None and may_go_further and answer_may_explain(error):
            # Its setup.py failed before compiling anything with torch.cuda answering: it asks
            # more of the GPU (DeepSpeed 0.19.8 once asked is_bf16_supported(), which needs a
            # device). Built as it would be without prebuild.
            self._answer, run.answer_error = False, error
            run.answer_where = setup_py_line(log, self.setup_text())
            return (
                f"its setup.py failed with torch.cuda answering for a GPU ({error}): "
                "built again with torch's own answers"
            )
        if (
            not answered
            and self._answer is None
            and may_go_further
            and no_gpu_may_explain(error)
            and not gpu_visible()
        ):
            # It failed before compiling with no GPU visible, asking the GPU outside its
            # setup.py (colossalai 0.5.0's extensions/utils.py:
            # torch.cuda.get_device_capability()): built again with torch.cuda answering as a
            # GPU of the newest arch would.
            self._answer = True
            return (
                f"its build failed with no GPU visible ({error}): built again with "
                "torch.cuda and nvidia-smi answering as a GPU of compute capability "
                f"{newest_capability(sass)} would ({build_site.ANSWERED}; nvidia-smi: "
                f"{build_site.NVIDIA_SMI_ANSWERS})"
            )
        if self.mend and (changes := self.mend_sources(log)):
            # Its code met a removed API with an exact replacement (ngp_pl's `x.type()` in
            # AT_DISPATCH_*): mended in the copy, and built again (ninja compiles what changed).
            self.source_changes += changes
            return mended_again(changes)
        if build_site.ENV_NINJA in site and (refused := ninja_failed(log)):
            # ninja refused what the build without it takes: built as its setup.py says, one
            # source at a time.
            self._ninja = False
            return (
                f"ninja failed on the project's build ({refused}): built again without it, as "
                "its setup.py says"
            )
        return None

    def mend_sources(self, log: str) -> list[SourceChange]:
        """The mends a failed build's ``log`` calls for (mended_in), made in the project's copy
        and recorded for a build that goes on from its objects; [] where none is."""
        sources, texts, changes = self.mended_in(self.project, log)
        record = mends_recorded(self.mends_record(), sources, texts, changes)
        if texts:
            self.work.mkdir(parents=True, exist_ok=True)
            (self.work / MENDS_FILE).write_text(json.dumps(record), encoding="utf-8")
        return changes

    def first_use(
        self,
        built: Path,
        env: Mapping[str, str],
        sass: tuple[Arch, ...],
        wheel_dir: Path,
        build_log: Path,
        progress: BuildProgress,
        find: bool = True,
    ) -> FirstUse:
        """The compiles the project of ``built`` makes when first used, made in this wheel's
        build (jit_ahead.py), with torch.cuda answering for a GPU of the wheel's newest arch, as
        where they would run (nvdiffrast 0.3 empties TORCH_CUDA_ARCH_LIST: torch asks the GPU
        then); its mends count as the build's. Run by what its Python shows (where ``find``)
        and by the user's code (--first-use)."""
        answer = site_env(
            self.work,
            {**os.environ, **env},
            capability=newest_capability(sass),
            headers=self.headers,
        )
        folder = self.work / "first-use" / wheel_dir.name  # kept from one run to the next
        made = compile_first_use(
            built,
            {**env, **answer},
            folder,
            build_log,
            progress.step,
            self.mended_in if self.mend else None,
            key=self.objects_key.to_dict(),
            given=self.first_use_code,
            find=find,
            again=lambda why: (
                progress.note(why),
                progress.phase("compiling again what it compiles when first used"),
            ),
        )
        if made.kept:
            progress.note(
                f"what an earlier run compiled of them in {folder} was kept: ninja compiled "
                "again only what was missing, or whose source or command changed since"
            )
        self.source_changes += made.changes
        return made

    def mended_in(
        self, folder: Path, log: str
    ) -> tuple[dict[str, str], dict[str, str], list[SourceChange]]:
        """The mends a failed build's ``log`` calls for (api_mends.mend_sources), written into
        the native sources of ``folder``: their texts before, the mended texts, the changes. A
        file that is not UTF-8 is left as it is (its text was read with replacement
        characters, which writing it back would keep)."""
        sources = {n: t for n, t in native_sources(folder).items() if "\ufffd" not in t}
        texts, changes = mend_sources(log, self.toolchain.cxx_standard, sources)
        for name, text in texts.items():
            (folder / name).write_text(text, encoding="utf-8")
        return sources, texts, changes

    def mends_record(self) -> dict:
        """The mends an earlier build in this work folder made in its copy (MENDS_FILE): file ->
        the sha256 of its text as the project has it, its mended text, and the changes."""
        try:
            return json.loads((self.work / MENDS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def restore_mends(self) -> None:
        """A build going on from kept objects: the mends an earlier run made are made again in
        the fresh copy, where its file is as it was, with the copy's own time (ninja's objects,
        compiled from the mended text, stay up to date), and count as this build's changes.
        A file changed since is the project's own again: built as it is, and mended anew where
        it fails."""
        record = self.mends_record()
        kept = {}
        for name, entry in record.items():
            path = self.project / name
            try:
                mended = recorded_text(entry, path.read_text(encoding="utf-8"))
                if mended is None:
                    continue
                times = path.stat()
                path.write_text(mended, encoding="utf-8")
                os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
            except (OSError, ValueError):
                continue
            kept[name] = entry
            self.source_changes += recorded_changes(name, entry)
        self.source_changes.sort(key=lambda c: (c.file, c.line))
        (self.work / MENDS_FILE).write_text(json.dumps(kept), encoding="utf-8")

    def system_libraries(
        self,
        built: Path,
        libraries: tuple[BuiltLibrary, ...],
        needed: dict[str, tuple[str, ...]],
        progress: BuildProgress,
    ) -> tuple[Path, tuple[BuiltLibrary, ...], list[str], dict, tuple[str, ...]]:
        """The system libraries the wheel's libraries (``needed``: wheel_needed_libraries')
        link beyond torch's and the runtimes: copied into the wheel where asked and possible
        (bundle.py). Returns the wheel and its libraries (those of the copy, where one was
        made), the system libraries still linked, those copied, and the notes saying so."""
        provided = torch_provided(self.toolchain.torch.library_dir, nvidia_dirs("lib"))
        system = system_links(needed, provided)
        failure, copied, notes = "", {}, ()
        if self.bundle and any(not matches(name, MACHINE_BOUND) for name in system):
            progress.phase("copying the system libraries it links into the wheel")
            bundled = bundle_system_libraries(built, provided, built.parent / "bundled", os.environ)
            failure, copied = bundled.failure, bundled.copied
            if copied:
                built = bundled.wheel
                libraries = read_wheel_libraries(built)
                system = system_links(wheel_needed_libraries(built), provided)
                notes = (bundled_note(copied, bundled.folder, bundled.size),)
        if system:
            found = {name: found_at(name, os.environ) for name in system}
            why = kept_reason(system, self.bundle, failure)
            notes = (*notes, system_libraries_note(found, why))
        return built, libraries, system, copied, notes

    def places(self) -> dict[str, str]:
        """The build machine's folders the wheel's record of the compiler calls names instead
        of giving them (shim_calls.portable_calls)."""
        return {
            str(Path.home()): "~",
            sys.base_prefix: "<python>",
            sys.prefix: "<venv>",
            str(self.work.resolve()): "<work>",
        }

    def local_label(self, manifest: ProjectManifest, planned: PlannedWheel) -> str:
        """The wheel's local version label, by what its manifest says it holds. A stable-ABI
        wheel's names no torch: it serves every torch from its target on (and one that calls
        nothing of torch's, every torch)."""
        torch = self.toolchain.torch.version_string
        torch_label = None if manifest.stable_abi or manifest.torch_free else torch
        if manifest.host_only:
            cuda = self.nvcc.version if manifest.needs_cuda else None
            return flags.classic_host_label(torch_label, cuda)
        # The archs the manifest records (sm_90a where a library holds that variant alone): an
        # index key then serves only the GPUs the code runs on. (relabel_wheel keeps a
        # project's own local label in front of this one.)
        return flags.classic_local_label(
            torch_label,
            self.nvcc.version,
            manifest.sass_archs,
            manifest.ptx_archs,
            planned.archs_in_version,
        )

    def scm_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The version setuptools_scm read from the project's checkout, for its copy's build
        (which has no .git), unless the user set one."""
        if self.scm_version is None or SCM_VERSION_ENV in environ:
            return {}
        return {SCM_VERSION_ENV: self.scm_version}

    def project_build(
        self,
        env: dict[str, str],
        build_log: Path,
        out: Path,
        archs: tuple[Arch, ...],
        progress: BuildProgress,
    ) -> Path:
        """The wheel the project's own backend builds into ``out`` with ``env``; BuildError with
        the compiler's errors (or the backend's), what is known of them, and the log's path if
        it fails. ``archs``: the wheel's (named in the advice's command); ``progress`` hears
        each compile step ninja reports, and what the user should know (a torch pin not
        followed)."""
        builder = ProjectBuilder(
            self.project,
            python_executable=sys.executable,
            runner=quiet_runner(build_log, env, progress.step),
        )
        start = log_size(build_log)  # this build's output: after an earlier one's
        try:
            with warnings_to_log(build_log):
                if not self._requirements_met:
                    self.check_requirements(builder, progress)
                    self._requirements_met = True
                return Path(builder.build("wheel", out, self.config_settings or None))
        except (BuildBackendException, BuildException) as exc:
            text = log_since(build_log, start)
            if not text.strip():  # it failed before its backend said a word: say what did
                text = backend_failure(exc)
            raise self.build_failure(
                "the project's build failed", text, env, archs, build_log
            ) from exc

    def build_failure(
        self,
        what: str,
        text: str,
        env: Mapping[str, str],
        archs: tuple[Arch, ...],
        build_log: Path,
    ) -> BuildError:
        """The error of a build that failed (``what``: "the project's build failed"), from its
        output (``text``): the compilers' errors, and what is known of them."""
        toolchain = self.toolchain
        breaks = api_breaks(text, toolchain.cxx_standard)
        sources = native_sources(self.project) if TH_BREAK in breaks else None
        advice = [
            api_breaks_advice(
                text, toolchain.cxx_standard, toolchain.torch.version_string, sources
            ),
            self.unmended_advice(text),
            self.source_gaps_advice(text, archs),
            downloads_advice(text),
            killed_compiler_advice(text, int(env.get("MAX_JOBS", "1"))),
            environment_hints(text),
            setup_option_hint(text, self.command(archs)),
            failed_call_archs_note(
                failed_command(text), archs, str(build_log.parent / "nvcc-calls.jsonl")
            ),
        ]
        return BuildError(
            f"{what} (full log: {build_log}):\n{compiler_errors(text)}"
            + "".join(f"\n\n{a}" for a in advice if a),
            log=build_log,
        )

    def check_requirements(self, builder: ProjectBuilder, progress: BuildProgress) -> None:
        """ToolchainError naming what the project's build needs and this environment lacks
        (its backend asked through its get_requires hook, a process that runs its setup.py);
        ``progress`` hears the pins it asks for that the installed versions do not meet."""
        # The backend and what it needs first: a backend that does not import cannot say what
        # else it needs (hatchling not installed; scikit-build-core without its pathspec), and
        # its hook fails with nothing in the log.
        unmet = {chain for req in builder.build_system_requires for chain in check_dependency(req)}
        if not split_installed(unmet, installed_version)[0]:  # the backend can run
            unmet = builder.check_dependencies("wheel", self.config_settings or None)
        missing, torch_pins = split_torch_pins(unmet)
        missing, pins = split_installed(missing, installed_version)
        if torch_pins:
            progress.note(torch_pins_note(torch_pins, self.toolchain.torch.version_string))
        if pins and not missing:
            progress.note(
                f"its build asks for {', '.join(pins)}: built with the versions "
                "installed, as pip install --no-build-isolation would"
            )
        if missing:
            # What its source lacks, said now: the build that would name it cannot run yet
            # (cubvh: pybind11 not installed, and its third_party/eigen not checked out).
            _, gitmodules, present = self.submodules()
            raise ToolchainError(
                missing_requirements_message(missing, empty_submodules(gitmodules, present))
            )

    def unmended_advice(self, log: str) -> str:
        """With --no-mend, where the failure is one the mends replace: that a build without it
        would (api_mends.mend_sources); "" otherwise."""
        if self.mend:
            return ""
        _, changes = mend_sources(log, self.toolchain.cxx_standard, native_sources(self.project))
        if not changes:
            return ""
        files = len({c.file for c in changes})
        return (
            f"Without --no-mend, prebuild makes {counted(len(changes), 'change')} in "
            f"{counted(files, 'file')} of its copy of the project, each with an exact "
            "replacement (the project's source untouched), and builds again."
        )

    def submodules(self) -> tuple[Path, str, set[str]]:
        """The root of the checkout the project's copy is (or lies in), its .gitmodules' text
        ("" where it has none), and the submodule paths present in it (with something in them)."""
        # The checkout's root: the project's copy, or the mirror of the checkout it lies in
        # (project.copy_in_checkout), whose root holds the checkout's .gitmodules.
        root = next(
            (
                d
                for d in (self.project, *self.project.parents)
                if d.is_relative_to(self.work) and (d / ".gitmodules").is_file()
            ),
            self.project,
        )
        gitmodules = _text(root / ".gitmodules")
        present = {
            p
            for p in submodule_paths(gitmodules)
            if (root / p).is_dir() and any((root / p).iterdir())
        }
        return root, gitmodules, present

    def source_gaps_advice(self, log: str, archs: tuple[Arch, ...]) -> str:
        """What the failed build's log says the project's source lacks, and where to get it
        (source_gaps.py); "" where it names nothing missing."""
        root, gitmodules, present = self.submodules()
        command = f"prebuild wheel --arch {','.join(a.sm for a in archs)}"
        return source_gaps_advice(
            log,
            root,
            gitmodules,
            present,
            _text(self.project / "PKG-INFO"),
            command,
        )

    def source_url(self) -> str | None:
        """Where the project's source lives, from its sdist's PKG-INFO (None: not said)."""
        info = self.project / "PKG-INFO"
        return (
            source_url(info.read_text(encoding="utf-8", errors="replace"))
            if info.is_file()
            else None
        )

    def setup_text(self) -> str:
        """The project's setup.py ("" if it has none)."""
        setup = self.project / "setup.py"
        return setup.read_text(encoding="utf-8", errors="replace") if setup.is_file() else ""

    def command(self, archs: tuple[Arch, ...]) -> str:
        """The prebuild command that builds this project for ``archs``."""
        options = " ".join(shlex.quote(o) for o in as_options(self.config_settings))
        arch = ",".join(a.sm for a in archs)
        return " ".join(p for p in ("prebuild wheel --arch", arch, options, self.origin) if p)

    def advice(self, built: Path, archs: tuple[Arch, ...]) -> tuple[str, bool]:
        """How the project may be asked to build its extensions at install time, and whether
        that names switches to set (rather than saying there are none)."""
        text = self.setup_text()
        command = self.command(archs)
        cmake = self.project / "CMakeLists.txt"
        if cmake.is_file():
            said = cmake_advice(
                cmake_switches(cmake.read_text(encoding="utf-8", errors="replace")), command
            )
            if said:
                return said, True
        distribution, variables = distribution_name(built), build_variables(text)
        switches = has_switches(distribution, variables, os.environ)
        said = switches_advice(distribution, variables, command, os.environ, text)
        given = " ".join(as_options(self.config_settings))
        if argv := [(o, line) for o, line in argv_switches(text) if o not in given]:
            # Options on its own command line (Uni-Core's --enable-cuda-ext), said in place of
            # "no variable" or after the variables' advice.
            options = argv_advice(argv, command)
            said = f"{said}; or {options}" if switches else options
            switches = True
        return said + self.gpu_answer_note(archs, ". "), switches

    def cpu_only_gate(self) -> tuple[int, str] | None:
        """The line where the project's setup.py asks the GPU what to build
        (build_switches.gpu_query_line), with what it asks, where no GPU is visible to answer;
        None otherwise."""
        asked = gpu_query_line(self.setup_text())
        return None if asked is None or gpu_visible() else asked

    def answers(self) -> bool:
        """Whether torch.cuda answers as a GPU would in the build (build_site.py): the project's
        setup.py asks torch.cuda.is_available(), no GPU is visible, and it has not failed so;
        or its build, or pip's metadata step, failed without the answer and no GPU visible."""
        if self._answer is not None:
            return self._answer
        return self.cpu_only_gate() is not None

    def ninja_line(self) -> int | None:
        """The line where the project's setup.py turns torch's ninja backend off, where the
        build turns it back on (build_switches.ninja_off_line); None otherwise."""
        return None if self._ninja is False else ninja_off_line(self.setup_text())

    def site_env(
        self, archs: tuple[Arch, ...], env: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The build's variables that change it (build_site.py, as its sitecustomize):
        torch.cuda and nvidia-smi answering as a GPU of the newest of ``archs`` would
        (answers), BuildExtension building with ninja (ninja_line), the known system headers
        checked before compiling (headers); over ``env``, the build's own (its PATH)."""
        return site_env(
            self.work,
            {**os.environ, **(env or {})},
            capability=newest_capability(archs) if self.answers() else "",
            ninja=self.ninja_line() is not None,
            headers=self.headers,
        )

    @cached_property
    def headers(self) -> str:
        """The known system headers checked before compiling (headers_spec), with the
        directories this machine's host compiler and nvcc search by themselves; "" where the
        user turned the check off (build_site.ENV_NO_CHECK)."""
        if os.environ.get(build_site.ENV_NO_CHECK, "") not in ("", "0"):
            return ""
        own = compiler_include_dirs(find_cxx())
        nvcc = getattr(self.toolchain, "nvcc", None)  # nvcc's own: CUDA 13's include/cccl
        toolkit = [str(d) for d in nvcc.toolkit.include_dirs] if nvcc is not None else []
        return headers_spec(None if own is None else [*own, *toolkit])

    def gpu_answer_note(self, archs: tuple[Arch, ...], before: str) -> str:
        """What torch.cuda answered in the build (build_switches.gpu_answer_note), after
        ``before``; "" where it answered for itself."""
        gate = self.cpu_only_gate()
        if gate is None or self._answer is False:  # answers(), with the line it needs
            return ""
        note = gpu_answer_note(gate[0], newest_capability(archs), gate[1])
        return f"{before}{note[0].upper()}{note[1:]}"

    def guard(
        self, built: Path, label: str, jit: dict[str, list[dict[str, str]]]
    ) -> dict[str, str]:
        """The guard's files for the wheel ``built`` will become (guard_files.py), ``jit`` the
        builds of its first-use compiles it holds."""
        name, version, _, _ = parse_wheel_filename(built.name)
        with WheelFile(built) as wf:
            dist_info = wf.dist_info_path
        return guard_files(
            built,
            str(name),
            version.public,
            relabelled_dist_info(dist_info, add_local_label(str(version), label)),
            self.origin,
            jit,
        )
