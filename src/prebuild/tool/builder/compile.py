"""Compiling a native project's libraries with ninja: one ninja file per build directory.

Two libraries are built from the project's sources (``[tool.prebuild] sources``, ``csrc/``
by default; ``_C`` is ``[tool.prebuild] library``):

* ``_C.abi3.so``: op schemas and the CPU kernels, from ``**/*.cpp`` with the C++ compiler.
  Its build directory (``host/``) does not depend on the archs, so the host code is compiled
  once and reused by every per-arch wheel. The simt test library (``*_simt.cpp``), when
  asked for, is built by the same ninja file, so the two libraries' compiles overlap.
* ``_C_cuda.abi3.so``: the CUDA kernels, from ``**/*.cu`` with nvcc, one build directory
  per (CUDA version, archs, PTX) combination. The CUDA runtime is linked statically and the
  library is loaded only when torch has CUDA, so a CPU-only torch imports the package and
  runs the CPU ops on machines with no CUDA runtime library at all. With ``[tool.prebuild]
  unity-build``, the ``.cu`` files compile in one generated unit per nvcc job, and the simt
  library's ``.cpp`` files (a sanitised build's CPU library's too) in one per compile job
  (``unity_sources``): the compiler reads torch's headers and instantiates what they define
  once per unit, not once per file.

Every compile sees prebuild's kernel-side headers (``prebuild/include``: the SIMT layer, the
CUDA launch helper, the input checks) and the project's ``include-dirs``.

A second run reuses every object whose command line and inputs (headers included, through
depfiles) are unchanged: that is ninja's job, and why each directory keeps its own log.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ninja.ninja_syntax import Writer, escape_path
from packaging.version import Version

from prebuild.runtime.arch import check_supported
from prebuild.tool.builder import flags, processes, resources
from prebuild.tool.builder.config import KernelProject
from prebuild.tool.builder.nvcc_shim import NVCC_ENV_FLAGS, env_flags
from prebuild.tool.builder.toolchain import (
    HostCompiler,
    Nvcc,
    Torch,
    available_memory_bytes,
    check_cuda_matches_torch,
    compile_launcher,
    cpu_count,
    find_cxx,
    find_ninja,
    find_nvcc,
    find_torch,
)

# Sources named *_simt.cpp run the CUDA kernel bodies on the CPU: test library only.
SIMT_SUFFIX = "_simt.cpp"

# (steps done, steps total, the step, whether it failed (optional)) -> None: BuildProgress.step
ProgressCallback = Callable[..., None]


class BuildError(RuntimeError):
    """A compile or link step failed; the message holds the compiler's own output, and names
    ``log``, the full build log, when there is one."""

    def __init__(self, message: str, log: Path | None = None):
        super().__init__(message)
        self.log = log


class Toolchain(NamedTuple):
    """What the preflight found: the torch compiled against, and nvcc (None: CPU code only)."""

    torch: Torch
    nvcc: Nvcc | None


@dataclass
class CompiledLibraries:
    cpu_library: Path
    cuda_library: Path | None
    simt_library: Path | None
    torch: Torch
    cuda_version: str | None
    flags: dict[str, list[str]] = field(default_factory=dict)
    resources: Path | None = None  # the CUDA library's kernels, as ptxas reported them

    def write(self, path: Path) -> Path:
        """The record ``prebuild wheel`` hands the project's setup.py (``BuildOptions.compiled``):
        the libraries it compiled, which the setup.py then packages without compiling."""
        torch = self.torch
        record = {
            "cpu_library": str(self.cpu_library),
            "cuda_library": None if self.cuda_library is None else str(self.cuda_library),
            "simt_library": None if self.simt_library is None else str(self.simt_library),
            "torch": {
                "version": str(torch.version),
                "version_string": torch.version_string,
                "cuda": torch.cuda,
                "include_dirs": [str(d) for d in torch.include_dirs],
                "library_dir": str(torch.library_dir),
            },
            "cuda_version": self.cuda_version,
            "flags": self.flags,
        }
        path.write_text(json.dumps(record, indent=2), encoding="utf-8")
        return path


def read_compiled(path: Path) -> CompiledLibraries:
    """A record ``CompiledLibraries.write`` made; BuildError if it is unreadable or a library it
    names is gone."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        torch = record["torch"]
        compiled = CompiledLibraries(
            cpu_library=Path(record["cpu_library"]),
            cuda_library=Path(record["cuda_library"]) if record["cuda_library"] else None,
            simt_library=Path(record["simt_library"]) if record["simt_library"] else None,
            torch=Torch(
                Version(torch["version"]),
                torch["version_string"],
                torch["cuda"],
                tuple(Path(d) for d in torch["include_dirs"]),
                Path(torch["library_dir"]),
            ),
            cuda_version=record["cuda_version"],
            flags=record["flags"],
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BuildError(f"cannot read the compiled libraries' record {path}: {exc}") from None
    for library in (compiled.cpu_library, compiled.cuda_library, compiled.simt_library):
        if library is not None and not library.is_file():
            raise BuildError(f"{path} names {library}, which is not there")
    return compiled


def headers_dir(project: KernelProject | None = None) -> Path:
    """prebuild's kernel-side headers (``#include <prebuild/simt.h>``), shipped in its package.
    prebuild's own project (a checkout, or its copy in a cached build) compiles with its own, as
    its setup.py does: the same command lines in ``prebuild wheel`` and in the setup.py it runs."""
    if project is not None and project.package == "prebuild":
        own = project.root / "src" / "prebuild" / "include"
        if own.is_dir():
            return own
    return Path(__file__).resolve().parents[2] / "include"


def _sources(project: KernelProject, suffix: str) -> list[Path]:
    return sorted(project.sources.rglob(f"*{suffix}"))


def _object_name(sources: Path, source: Path) -> str:
    # A unity source (unity_sources) lies in the build directory, not among the sources.
    rel = source.relative_to(sources) if source.is_relative_to(sources) else Path(source.name)
    return str(rel.with_suffix(rel.suffix + ".o")).replace(os.sep, "__")


def unity_batches(sizes: Mapping[Path, int], batches: int) -> list[list[Path]]:
    """Pure: the sources (each with its size in bytes) in at most ``batches`` groups of about
    equal size, each in name order, the groups in the order of their first source. The largest
    source goes first into the smallest group (the longest-processing-time rule), so that the
    compile jobs end about together; sizes stand in for compile times."""
    groups: list[list[Path]] = [[] for _ in range(max(1, min(batches, len(sizes))))]
    totals = [0] * len(groups)
    for source in sorted(sizes, key=lambda s: (-sizes[s], s)):
        smallest = totals.index(min(totals))
        groups[smallest].append(source)
        totals[smallest] += sizes[source]
    return sorted((sorted(g) for g in groups if g), key=lambda g: g[0])


UNITY_HEADER = (
    "// Generated by prebuild ([tool.prebuild] unity-build): these sources compiled as one unit,\n"
    "// so that the compiler reads the headers they share (torch's) once, not once per file.\n"
)


def unity_sources(
    sources: list[Path], batches: int, unity_dir: Path, stem: str = "unity"
) -> list[Path]:
    """``sources`` as at most ``batches`` generated sources in ``unity_dir`` (``STEM_0.cpp``,
    ...: libraries built together need distinct names), each including its group's files
    (unity_batches); ``sources`` itself when each can be its own compile job. A generated file
    is rewritten only when its text changes: ninja recompiles what changed."""
    if batches >= len(sources):
        return sources
    groups = unity_batches({s: s.stat().st_size for s in sources}, batches)
    unity_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for i, group in enumerate(groups):
        for source in group:
            if '"' in str(source) or "\n" in str(source):
                raise BuildError(f"a unity build cannot #include {str(source)!r}: rename it")
        text = UNITY_HEADER + "".join(f'#include "{source}"\n' for source in group)
        path = unity_dir / f"{stem}_{i}{sources[0].suffix}"
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def include_dirs(project: KernelProject, torch: Torch) -> tuple[Path, ...]:
    return (project.sources, *project.include_dirs, headers_dir(project), *torch.include_dirs)


def _shell(args: list[str]) -> str:
    # ninja hands commands to /bin/sh: quote for the shell, then escape '$' for ninja.
    return shlex.join(args).replace("$", "$$")


@dataclass(frozen=True)
class LibrarySpec:
    """One shared library: which sources, compiled and linked how. ``depfile`` is the
    compiler's spelling for writing a make-style dependency file to ``$out.d``."""

    output: str
    what: str  # for the ninja file's comment and the progress line, e.g. "nvcc [sm_80]"
    compiler: tuple[str, ...]  # the program and any flags of its own ($CXX="g++ -m64")
    compile_flags: list[str]
    depfile: str
    link_flags: list[str]
    sources: list[Path]
    # nvcc: keep ptxas's report of each compile beside its object (resources.py); its other
    # output (warnings) is still shown, and all of it when the compile fails.
    resource_report: bool = False
    # The user's own launcher ($CXX="ccache g++"), used unless the build has a compile cache.
    launcher: tuple[str, ...] = ()


def write_ninja(
    sources: Path, build_dir: Path, specs: Sequence[LibrarySpec], launcher: Path | None = None
) -> Path:
    """One ninja file building ``specs`` together, their objects in ``build_dir/obj``; each
    compile (not the links) through ``launcher`` when given (the compile cache's), else through
    the spec's own.

    Compiles are listed largest source first: ninja starts the steps that are ready in the
    order of the file, and the longest compile (a CPU kernel file with its instruction-set
    copies takes ten times the others) must not be the one left to start last, alone."""
    objects = {
        spec.output: [f"obj/{_object_name(sources, src)}" for src in spec.sources] for spec in specs
    }
    every_object = [obj for objs in objects.values() for obj in objs]
    if len(set(every_object)) != len(every_object):
        raise ValueError(f"libraries built together share an object name: {sorted(every_object)}")
    path = build_dir / "build.ninja"
    with open(path, "w", encoding="utf-8") as f:
        w = Writer(f, width=100)
        w.comment(
            "Generated by prebuild.tool.builder.compile: "
            + ", ".join(f"{spec.output} ({spec.what})" for spec in specs)
            + "."
        )
        w.variable("ninja_required_version", "1.10")
        compiles = []
        for i, spec in enumerate(specs):
            cc = _shell(spec.compiler)
            through = compile_launcher(launcher, spec.launcher)
            prefix = _shell(through) + " " if through else ""
            command = f"{prefix}{cc} {spec.depfile} {_shell(spec.compile_flags)} -c $in -o $out"
            if spec.resource_report:
                report = f"$out{resources.REPORT_SUFFIX}"
                command = (
                    f"{command} --resource-usage > {report} 2>&1 || {{ cat {report}; exit 1; }}; "
                    f"grep -v -e 'ptxas info' -e 'bytes stack frame' {report} || true"
                )
            w.rule(
                f"compile_{i}",
                command,
                depfile="$out.d",
                deps="gcc",
                description=f"{spec.what} $in",
            )
            w.rule(
                f"link_{i}", f"{cc} $in {_shell(spec.link_flags)} -o $out", description="link $out"
            )
            compiles += [(src, obj, i) for src, obj in zip(spec.sources, objects[spec.output])]
        # stable: ties keep their order
        for src, obj, i in sorted(compiles, key=lambda c: -c[0].stat().st_size):
            w.build(obj, f"compile_{i}", escape_path(str(src)))
        for i, spec in enumerate(specs):
            w.build(spec.output, f"link_{i}", objects[spec.output])
        w.default([spec.output for spec in specs])
    return path


def host_library_spec(
    project: KernelProject,
    torch: Torch,
    cxx: HostCompiler,
    options: flags.BuildOptions,
    simt: bool,
    jobs: int,
    unity_dir: Path,
) -> LibrarySpec:
    """The CPU library (``simt=False``) or the simt test library (``simt=True``), from the
    project's ``*.cpp`` of that kind, or their unity_sources in ``unity_dir``: with
    ``unity-build``, the simt library's, and a sanitised build's CPU library. A CPU library
    that ships compiles file by file: GCC's inlining limits are per unit, so in a larger one it
    compiled prebuild's SSIM backward into other code (300 more instructions per copy), and
    its speed is what users get."""
    sanitize = flags.sanitizer_flags(options.sanitize)
    sources = [s for s in _sources(project, ".cpp") if s.name.endswith(SIMT_SUFFIX) == simt]
    if project.unity_build and (simt or sanitize):
        sources = unity_sources(sources, jobs, unity_dir, "simt_unity" if simt else "cpu_unity")
    return LibrarySpec(
        output=project.simt_library if simt else project.cpu_library,
        what="C++ simt" if simt else "C++",
        compiler=cxx.command,
        launcher=cxx.launcher,
        compile_flags=[
            *flags.cxx_flags(include_dirs(project, torch), project.torch_target, project.package),
            *sanitize,
        ],
        depfile="-MMD -MF $out.d",
        link_flags=[*flags.link_flags(torch.library_dir), *sanitize],
        sources=sources,
    )


def cuda_library_spec(
    project: KernelProject,
    torch: Torch,
    nvcc: Nvcc,
    options: flags.BuildOptions,
    sources: list[Path],
) -> LibrarySpec:
    """The CUDA library, from ``sources``: the project's ``*.cu``, or their unity_sources.
    What nvcc's own variables add (NVCC_APPEND_FLAGS) is written into its commands (and taken
    out of ninja's environment: run_ninja), so that ninja compiles again when they change and
    the manifest's flags hold them."""
    sass, ptx = options.archs, options.ptx_archs
    prepend, append = env_flags(os.environ)
    threads = flags.nvcc_threads(len(sass) + len(ptx), cpu_count())
    arch_names = ",".join(a.sm for a in sass) + (f"+{ptx[0].compute}" if ptx else "")
    return LibrarySpec(
        output=project.cuda_library,
        what=f"nvcc [{arch_names}]",
        compiler=(str(nvcc.path),),
        compile_flags=[
            *prepend,
            *flags.nvcc_flags(
                include_dirs(project, torch),
                sass,
                ptx,
                threads,
                options.compress,
                project.torch_target,
                project.package,
            ),
            *append,
        ],
        depfile="--generate-dependencies-with-compile --dependency-output $out.d",
        link_flags=[*prepend, "-cudart=static", *flags.link_flags(torch.library_dir), *append],
        sources=sources,
        resource_report=True,
    )


# A compiler killed by a signal, in nvcc's words for its own stages (cicc, cudafe++, ptxas),
# in g++'s for its cc1plus, and in setuptools' for a command without ninja (a negative code).
_KILLED = re.compile(
    r"nvcc error\s*: '(?P<stage>[\w+]+)' died due to signal (?P<signal>\d+)"
    r"|fatal error: Killed signal terminated program (?:\S*/)?(?P<gcc>[\w+.-]+)"
    r"|internal compiler error: Killed \(program (?P<ice>\w+)\)"
    r"|command '(?:[^']*/)?(?P<command>[^'/]+)' failed with exit code -(?P<code>\d+)"
)
SIGKILL = 9


def killed_compiler_advice(log: str, jobs: int) -> str:
    """Pure: what a build log whose compiler was killed says to do; "" where none was. Killed
    (signal 9) is the kernel's out-of-memory killer, nearly always: fewer compiles at once
    (``jobs`` ran); another signal (11) is the compiler crashing on the code."""
    m = _KILLED.search(log)
    if m is None:
        return ""
    program = m["stage"] or m["gcc"] or m["ice"] or m["command"]
    signal = int(m["signal"] or m["code"] or SIGKILL)
    if signal != SIGKILL:
        return (
            f"The compiler ({program}) crashed (signal {signal}) as it compiled: a bug of the "
            "compiler on this code, not of the build. Another CUDA version's nvcc (or another "
            "host compiler) may compile it; the full log names the file."
        )
    fewer = max(1, jobs // 2)
    return (
        f"The compiler ({program}) was killed (signal 9) as it compiled: nearly always the "
        "kernel's out-of-memory killer, the machine's memory spent by "
        + (f"{jobs} compiles at once" if jobs > 1 else "this compile alone")
        + " (a torch/extension.h source takes 1-3 GiB, a CUTLASS kernel more). "
        + (
            f"Build with fewer at once: --jobs {fewer} (with --build-dir, what compiled is kept)."
            if jobs > 1
            else "Free memory (or add swap) and build again."
        )
    )


def run_ninja(build_dir: Path, jobs: int, on_progress: ProgressCallback | None = None) -> None:
    """Run ninja in ``build_dir``; report each step as ninja ends it (and the step ninja's
    ``FAILED:`` follows as failed); BuildError with the output on failure (the full log is
    kept in ``build_dir/build.log``)."""
    env = dict(os.environ, NINJA_STATUS="[%f/%t] ")
    for name in NVCC_ENV_FLAGS:  # in the commands already (cuda_library_spec)
        env.pop(name, None)
    cmd = [find_ninja(), "-C", str(build_dir), "-j", str(jobs)]
    lines: list[str] = []
    with processes.popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    ) as proc:
        assert proc.stdout is not None
        last = None  # the step on the line before
        for line in proc.stdout:
            lines.append(line)
            before, last = last, None
            if on_progress is None:
                continue
            if line.startswith("FAILED:") and before is not None:
                on_progress(*before, True)
            elif line.startswith("[") and "] " in line:
                status, _, what = line.partition("] ")
                done, _, total = status[1:].partition("/")
                if done.isdigit() and total.isdigit():
                    last = (int(done), int(total), what.strip())
                    on_progress(*last)
    (build_dir / "build.log").write_text("".join(lines), encoding="utf-8")
    if proc.returncode != 0:
        failed = "".join(lines)
        start = failed.find("FAILED:")
        killed = killed_compiler_advice(failed, jobs)
        raise BuildError(
            f"the build failed in {build_dir} (full log: {build_dir / 'build.log'}):\n"
            + (failed[start:] if start >= 0 else failed)[-8000:]
            + (f"\n\n{killed}" if killed else ""),
            log=build_dir / "build.log",
        )


def preflight(options: flags.BuildOptions) -> Toolchain:
    """Every check that can fail before compiling: torch present, nvcc present, archs
    supported by this nvcc, nvcc's CUDA major equal to torch's."""
    torch = find_torch()
    if not options.cuda:
        return Toolchain(torch, None)
    nvcc = Nvcc(find_nvcc())
    check_supported(options.archs, nvcc.supported_archs)
    check_cuda_matches_torch(nvcc.version, torch.cuda)
    return Toolchain(torch, nvcc)


def default_build_dir(source_dir: Path) -> Path:
    return source_dir / "build" / "prebuild"


def host_build_dir(root: Path, sanitize: str = "") -> Path:
    """Where the host libraries (CPU and simt) are built under build directory ``root``."""
    return root / ("host-sanitize" if sanitize else "host")


def compile_libraries(
    project: KernelProject,
    options: flags.BuildOptions,
    on_progress: ProgressCallback | None = None,
    toolchain: Toolchain | None = None,
) -> CompiledLibraries:
    """Compile (or bring up to date) the CPU library and, when archs are given, the CUDA
    library for exactly those archs. ``preflight`` runs before anything is compiled, unless
    ``toolchain`` is what one found already (``prebuild wheel``'s, for every wheel it builds)."""
    root = (options.build_dir or default_build_dir(project.root)).resolve()
    torch, nvcc = toolchain if toolchain is not None else preflight(options)
    if options.cuda and nvcc is None:
        raise ValueError(f"compiling for {options.archs} needs the toolchain's nvcc")
    cxx = find_cxx()

    host_dir = host_build_dir(root, options.sanitize)
    (host_dir / "obj").mkdir(parents=True, exist_ok=True)
    host_jobs = options.jobs or cpu_count()
    host = [
        host_library_spec(project, torch, cxx, options, simt, host_jobs, host_dir / "unity")
        for simt in ((False, True) if options.simt else (False,))
    ]
    write_ninja(project.sources, host_dir, host, options.launcher)
    run_ninja(host_dir, host_jobs, on_progress)
    cpu_library = host_dir / host[0].output
    simt_library = host_dir / host[1].output if options.simt else None
    flags_used = {"cxx": host[0].compile_flags}
    if nvcc is None:
        return CompiledLibraries(cpu_library, None, simt_library, torch, None, flags_used)

    label = flags.local_version_label(nvcc.version, options.archs, options.ptx_archs)
    # Uncompressed objects in their own directory, so toggling does not recompile the other.
    cuda_dir = root / "cuda" / (label if options.compress else f"{label}-nocompress")
    (cuda_dir / "obj").mkdir(parents=True, exist_ok=True)
    threads = flags.nvcc_threads(len(options.archs) + len(options.ptx_archs), cpu_count())
    jobs = options.jobs or flags.parallel_jobs(
        max(1, cpu_count() // threads),
        available_memory_bytes(),
        flags.NVCC_MEMORY_PER_THREAD * threads,
    )
    sources = _sources(project, ".cu")
    if project.unity_build:
        sources = unity_sources(sources, jobs, cuda_dir / "unity")
    cuda_spec = cuda_library_spec(project, torch, nvcc, options, sources)
    write_ninja(project.sources, cuda_dir, [cuda_spec], options.launcher)
    run_ninja(cuda_dir, jobs, on_progress)
    objects = [cuda_dir / "obj" / _object_name(project.sources, src) for src in cuda_spec.sources]
    report = resources.write_report(
        resources.read_objects(objects), cuda_dir / resources.REPORT_NAME
    )
    flags_used["nvcc"] = cuda_spec.compile_flags
    return CompiledLibraries(
        cpu_library,
        cuda_dir / project.cuda_library,
        simt_library,
        torch,
        str(nvcc.version),
        flags_used,
        report,
    )
