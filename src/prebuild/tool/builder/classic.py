"""``prebuild wheel --arch ... PROJECT`` for classic projects: setuptools with torch's
``CUDAExtension``/``BuildExtension`` (``torch/extension.h`` + pybind11), built unmodified.

Each wheel is built by the project's own PEP 517 backend, without build isolation, in this
environment (its CUDA build of torch is the torch the wheel will need), with a shim CUDA
toolkit as ``CUDA_HOME``: its ``bin/nvcc`` is ``prebuild.tool.builder.nvcc_shim`` (exactly the
requested archs, whatever setup.py asks), its ``include/`` and ``lib64/`` are the real
toolkit's plus what torch's CUDA packages add (a minimal toolkit has no ``libcudart.so``).
The archs are then read back from every library in the wheel, and the wheel is relabelled
(``prebuild.tool.builder.relabel``). The project directory is prebuild's private copy.

The wheels of one run are built one after another from that copy: what the host compiler
compiled for the first (``torch/extension.h`` bindings, half a minute each) is reused by the
next, and what nvcc wrote is deleted so that it is compiled again for the next archs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from build import BuildBackendException, BuildException, ProjectBuilder

from prebuild.runtime.arch import Arch, check_supported
from prebuild.tool.builder import flags as F
from prebuild.tool.builder.compile import BuildError
from prebuild.tool.builder.nvcc_shim import SHIM_ENV_GENCODE, SHIM_ENV_LOG, SHIM_ENV_REAL
from prebuild.tool.builder.relabel import relabel_wheel
from prebuild.tool.builder.wheel import quiet_runner
from prebuild.tool.builder.toolchain import (
    Nvcc,
    Torch,
    ToolchainError,
    available_memory_bytes,
    check_cuda_matches_torch,
    cpu_count,
    find_nvcc,
    find_torch,
)
from prebuild.tool.inspection import InspectionError, built_library, found_library, is_shared_library
from prebuild.runtime.manifest import BuiltLibrary, NvccCall, ProjectManifest

# A torch/extension.h translation unit takes 1-3 GiB to compile: torch's MAX_JOBS from this.
CLASSIC_MEMORY_PER_JOB = 3 << 30


def _nvidia_dirs(kind: str) -> list[Path]:
    """``include`` or ``lib`` directories of the nvidia-* packages torch installs
    (``site-packages/nvidia/cu13/lib``; CUDA 12 packages: ``nvidia/cuda_runtime/lib``, ...)."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [d for root in spec.submodule_search_locations for d in sorted(Path(root).glob(f"*/{kind}")) if d.is_dir()]


def _link_entries(dest: Path, sources: list[Path], skip: set[str] = frozenset()) -> None:
    """Symlink every entry of each source directory into ``dest``; the first source wins."""
    dest.mkdir(parents=True, exist_ok=True)
    for source in sources:
        if not source.is_dir():
            continue
        for entry in sorted(source.iterdir()):
            target = dest / entry.name
            if entry.name not in skip and not target.exists() and not target.is_symlink():
                target.symlink_to(entry)


def make_cuda_shim(nvcc: Nvcc, dest: Path, gencode: list[str], log: Path) -> Path:
    """The shim toolkit (see the module docstring); returns its root, the build's CUDA_HOME."""
    real = nvcc.path.resolve().parent.parent
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    script = dest / "bin" / "nvcc"
    _link_entries(dest / "bin", [real / "bin"], skip={"nvcc"})
    # PYTHONPATH: the shim module is found even if the project's build changes the environment.
    settings = {SHIM_ENV_REAL: str(real / "bin" / "nvcc"), SHIM_ENV_GENCODE: json.dumps(gencode), SHIM_ENV_LOG: str(log),
                "PYTHONPATH": str(Path(__file__).resolve().parents[3])}  # fmt: skip
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())
    script.write_text(f"#!/bin/sh\n{exports} exec {shlex.quote(sys.executable)} -m prebuild.tool.builder.nvcc_shim \"$@\"\n")
    script.chmod(0o755)
    _link_entries(dest / "include", [real / "include", *_nvidia_dirs("include")])
    lib64 = dest / "lib64"
    _link_entries(lib64, [real / "lib64", real / "lib", *_nvidia_dirs("lib")])
    if not (lib64 / "libcudart.so").exists():  # the linker wants the unversioned name
        versioned = sorted(lib64.glob("libcudart.so.*"))
        if versioned:
            (lib64 / "libcudart.so").symlink_to(versioned[0].resolve())
    _link_entries(dest, [real], skip={"bin", "include", "lib64", "lib"})
    return dest


# How nvcc is told where to write (torch's ninja build and hand-written builds alike).
NVCC_OUTPUT_OPTIONS = ("-o", "--output-file")


def nvcc_outputs(calls: list[list[str]]) -> list[Path] | None:
    """The files these nvcc calls (each one's arguments) wrote; None when a call's output
    cannot be told: no output option, or a relative path (the call's directory is unknown)."""
    outputs = []
    for args in calls:
        found = None
        for i, arg in enumerate(args):
            if arg in NVCC_OUTPUT_OPTIONS and i + 1 < len(args):
                found = args[i + 1]
            elif arg.startswith(tuple(f"{opt}=" for opt in NVCC_OUTPUT_OPTIONS)):
                found = arg.split("=", 1)[1]
        if found is None or not Path(found).is_absolute():
            return None
        outputs.append(Path(found))
    return outputs


def keep_host_objects(build: Path, nvcc_wrote: list[Path] | None) -> int:
    """Prepare setuptools' ``build/`` for the next wheel of the same copy; returns how many
    objects were kept (0: it starts empty).

    Kept: the host compiler's objects in ``build/temp.*``. torch's ninja build recompiles one
    when its command line or an input changed (ninja records both), and without ninja
    setuptools compiles every source anyway. Deleted: everything nvcc wrote (an object made
    for the previous archs may look up to date: a project with a hard-coded ``-gencode``
    compiles every arch with the same command), and the rest of ``build/`` (the linked
    extension, which setuptools would otherwise call up to date). When what nvcc wrote is
    unknown, or lies outside ``build/temp.*``, nothing is kept."""
    temps = [d.resolve() for d in build.glob("temp.*") if d.is_dir()] if build.is_dir() else []
    inside = nvcc_wrote is not None and all(
        any(p.resolve().is_relative_to(t) for t in temps) for p in nvcc_wrote
    )  # fmt: skip
    if not temps or not inside:
        shutil.rmtree(build, ignore_errors=True)
        return 0
    for entry in build.iterdir():
        if not entry.name.startswith("temp."):
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    for path in nvcc_wrote:
        path.unlink(missing_ok=True)
    return sum(1 for t in temps for p in t.rglob("*.o") if p.is_file())


def torch_cuda_arch_list(sass: tuple[Arch, ...], ptx: tuple[Arch, ...]) -> str:
    """``TORCH_CUDA_ARCH_LIST`` for the same request (``8.0;9.0+PTX``), for projects that read it."""
    items = [f"{a.major}.{a.minor}{a.suffix}" for a in sass]
    ptx_caps = {(a.major, a.minor) for a in ptx}
    return ";".join(f"{item}+PTX" if (a.major, a.minor) in ptx_caps else item for item, a in zip(items, sass))


def preflight_classic(archs: tuple[Arch, ...]) -> tuple[Torch, Nvcc]:
    """Every check that can fail before compiling a classic project."""
    torch = find_torch()
    if torch.cuda is None:
        raise ToolchainError(
            f"torch {torch.version_string} is a CPU build: a classic CUDAExtension links against "
            "torch's CUDA libraries, so it needs a CUDA build of torch in this environment, the "
            "torch its wheels will require. Install one, e.g. pip install 'torch==2.14.1' "
            "(a CUDA 13.0 build) or pip install torch --index-url https://download.pytorch.org/whl/cu130"
        )
    nvcc = Nvcc(find_nvcc())
    check_supported(archs, nvcc.supported_archs)
    check_cuda_matches_torch(nvcc.version, torch.cuda)
    return torch, nvcc


@dataclass(frozen=True)
class ClassicWheel:
    path: Path
    sass_archs: tuple[Arch, ...]
    ptx_archs: tuple[Arch, ...]
    manifest: ProjectManifest
    seconds: float

    @property
    def size(self) -> int:
        return self.path.stat().st_size


def read_wheel_libraries(wheel: Path) -> tuple[BuiltLibrary, ...]:
    """Every shared library in the wheel with its sha256, size and the archs inside it."""
    found = []
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(n for n in zf.namelist() if is_shared_library(n)):
            try:
                found.append(built_library(found_library(name, zf.read(name))))
            except InspectionError as exc:
                raise BuildError(f"{wheel.name}: {exc}") from exc
    return tuple(found)


def check_archs(wheel_name: str, libraries: tuple[BuiltLibrary, ...], sass: tuple[Arch, ...],
                ptx: tuple[Arch, ...]) -> None:  # fmt: skip
    """Every library with GPU code holds exactly the requested SASS and PTX, and one has some."""
    with_code = [lib for lib in libraries if lib.has_code]
    wrong = [lib for lib in with_code if lib.sass != tuple(sorted(sass)) or lib.ptx != tuple(sorted(ptx))]
    if not with_code or wrong:
        held = "; ".join(f"{lib.file}: SASS {', '.join(a.sm for a in lib.sass) or 'none'}, "
                         f"PTX {', '.join(a.compute for a in lib.ptx) or 'none'}"
                         for lib in libraries) or "no shared library at all"  # fmt: skip
        raise BuildError(
            f"{wheel_name} does not hold the archs asked for (SASS {', '.join(a.sm for a in sass)}, PTX "
            f"{', '.join(a.compute for a in ptx) or 'none'}): {held}. No wheel was written."
        )


def compiler_errors(log: str, limit: int = 8000) -> str:
    """What to show of a failed build's log: ninja's failed steps (the compiler's own words)
    when there are any, else the log's end; not the backend's Python traceback."""
    start = log.find("FAILED:")
    if start < 0:
        return log[-limit:]
    end = log.find("ninja: build stopped", start)
    return log[start: end if end >= 0 else None][:limit].rstrip()


class ClassicBuilder:
    """Builds the wheels of one classic project (prebuild's private copy), one per arch set,
    one after another: each reuses the host objects of the one before (``keep_host_objects``)."""

    def __init__(self, project: Path, torch: Torch, nvcc: Nvcc, work: Path, jobs: int | None = None):
        self.project, self.torch, self.nvcc, self.work, self.jobs = project, torch, nvcc, work, jobs
        self._nvcc_wrote: list[Path] | None = None  # by the previous wheel; None: start clean

    def build(self, sass: tuple[Arch, ...], ptx: tuple[Arch, ...], out_dir: Path,
              on_phase: Callable[[str], None] | None = None) -> ClassicWheel:  # fmt: skip
        """Build one wheel for exactly these archs into ``out_dir``."""
        start = time.monotonic()
        torch, nvcc, project = self.torch, self.nvcc, self.project
        gencode = F.gencode_flags(sass, ptx)
        variant_dir = self.work / F.local_version_label(nvcc.version, sass, ptx)
        shutil.rmtree(variant_dir, ignore_errors=True)
        variant_dir.mkdir(parents=True)
        nvcc_log, build_log = variant_dir / "nvcc-calls.jsonl", variant_dir / "build.log"
        # One path for every wheel: the include paths in the host compiler's commands (and so
        # ninja's view of its objects) stay the same from one wheel to the next.
        shim = make_cuda_shim(nvcc, self.work / "cuda-shim", gencode, nvcc_log)
        wrote, self._nvcc_wrote = self._nvcc_wrote, None  # a failed build leaves nothing to reuse
        kept = keep_host_objects(project / "build", wrote)
        max_jobs = self.jobs or F.parallel_jobs(cpu_count(), available_memory_bytes(), CLASSIC_MEMORY_PER_JOB)
        env = {
            "CUDA_HOME": str(shim), "CUDA_PATH": str(shim), "PATH": f"{shim / 'bin'}:{os.environ.get('PATH', '')}",
            "TORCH_CUDA_ARCH_LIST": torch_cuda_arch_list(sass, ptx), "MAX_JOBS": str(max_jobs),
            "FORCE_CUDA": "1",  # projects that skip CUDA when no GPU is visible
        }  # fmt: skip
        if on_phase:
            on_phase("compiling (the project's own build" + (f", {kept} host objects reused)" if kept else ")"))
        builder = ProjectBuilder(project, python_executable=sys.executable, runner=quiet_runner(build_log, env))
        missing = builder.check_dependencies("wheel")
        if missing:
            names = sorted({req for group in missing for req in group})
            raise ToolchainError(
                f"the project's build needs {', '.join(names)}, not installed here. prebuild builds "
                f"without isolation (so that this torch is used): pip install {' '.join(shlex.quote(n) for n in names)}"
            )
        with tempfile.TemporaryDirectory(dir=variant_dir, prefix="wheel-") as tmp:
            try:
                built = Path(builder.build("wheel", tmp))
            except (BuildBackendException, BuildException) as exc:
                text = build_log.read_text(encoding="utf-8", errors="replace") if build_log.exists() else str(exc)
                raise BuildError(f"the project's build failed (full log: {build_log}):\n{compiler_errors(text)}") from exc
            if on_phase:
                on_phase("checking the archs in every library")
            libraries = read_wheel_libraries(built)
            check_archs(built.name, libraries, sass, ptx)
            calls = [json.loads(line) for line in nvcc_log.read_text().splitlines()] if nvcc_log.exists() else []
            manifest = ProjectManifest(
                kind="classic", torch=torch.version_string, torch_cuda=torch.cuda, cuda=str(nvcc.version),
                python_tag="-".join(built.name[: -len(".whl")].split("-")[-3:]),
                sass_archs=tuple(sorted(sass)), ptx_archs=tuple(sorted(ptx)), libraries=libraries,
                nvcc_calls=tuple(NvccCall(tuple(c["given"]), tuple(c["run"])) for c in calls),
            )  # fmt: skip
            if on_phase:
                on_phase("writing the wheel")
            # relabel_wheel keeps a project's own local label in front of this one.
            label = F.classic_local_label(torch.version_string, nvcc.version, sass, ptx)
            final = relabel_wheel(built, out_dir, label, F.torch_pin(torch.version_string), manifest.to_json())
        # No nvcc call seen (a project calling its own nvcc): nothing is known, nothing kept.
        self._nvcc_wrote = nvcc_outputs([c["run"] for c in calls]) if calls else None
        return ClassicWheel(final, sass, ptx, manifest, time.monotonic() - start)
