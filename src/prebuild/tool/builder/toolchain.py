"""Finding and asking the tools a build needs: nvcc, the C++ compiler, ninja, and torch.

Everything that runs a process or looks at the file system for the build lives here; the
flag and naming logic it feeds is pure (``prebuild.tool.builder.flags``).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from packaging.version import Version

from prebuild.runtime.arch import Arch, parse_arch_list


class ToolchainError(RuntimeError):
    """A tool the build needs is missing or does not fit the installed torch."""


NVCC_HELP = (
    "No CUDA compiler (nvcc) was found. Get one in any of these ways:\n"
    "  - set CUDA_HOME to a CUDA toolkit (nvcc is then $CUDA_HOME/bin/nvcc);\n"
    "  - put nvcc on PATH;\n"
    "  - install the toolkit at /usr/local/cuda;\n"
    "  - pip install 'prebuild[toolchain]' (PyPI's CUDA 13 compiler: nvidia-cuda-nvcc, "
    "nvidia-cuda-runtime, nvidia-cuda-crt, nvidia-cuda-cccl, nvidia-nvvm).\n"
    "Or build the CPU code only with an empty arch list (PREBUILD_ARCHS='')."
)


def _pypi_tool_candidates(tool: str) -> list[Path]:
    """CUDA tools shipped by PyPI's nvidia-* packages (``site-packages/nvidia/cu13/bin/``)."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    found = []
    for root in spec.submodule_search_locations:
        found.extend(sorted(Path(root).glob(f"cu*/bin/{tool}"), reverse=True))
    return found


# The system toolkit's usual place. PREBUILD_SYSTEM_CUDA names another; set it empty to
# never use a system toolkit (then only CUDA_HOME, PATH and PyPI's packages count).
SYSTEM_CUDA_ENV = "PREBUILD_SYSTEM_CUDA"
SYSTEM_CUDA = "/usr/local/cuda"


def cuda_tool_candidates(tool: str, env: dict[str, str] | None = None) -> list[Path]:
    """Where a CUDA tool (nvcc, cuobjdump) is looked for, in order: CUDA_HOME, PATH,
    /usr/local/cuda (or $PREBUILD_SYSTEM_CUDA), then PyPI's nvidia packages
    (``pip install 'prebuild[toolchain]'``)."""
    env = dict(os.environ if env is None else env)
    candidates: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            candidates.append(Path(env[var]) / "bin" / tool)
    on_path = shutil.which(tool, path=env.get("PATH", ""))
    if on_path:
        candidates.append(Path(on_path))
    system = env.get(SYSTEM_CUDA_ENV, SYSTEM_CUDA)
    if system:
        candidates.append(Path(system) / "bin" / tool)
    candidates.extend(_pypi_tool_candidates(tool))
    return candidates


def find_cuda_tool(tool: str, env: dict[str, str] | None = None) -> Path | None:
    for candidate in cuda_tool_candidates(tool, env):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def nvcc_candidates(env: dict[str, str] | None = None) -> list[Path]:
    return cuda_tool_candidates("nvcc", env)


def find_nvcc(env: dict[str, str] | None = None) -> Path:
    found = find_cuda_tool("nvcc", env)
    if found is None:
        raise ToolchainError(NVCC_HELP)
    return found


def parse_nvcc_version(output: str) -> Version:
    """``Cuda compilation tools, release 13.0, V13.0.88`` -> Version("13.0")."""
    m = re.search(r"release (\d+)\.(\d+)", output)
    if not m:
        raise ToolchainError(f"cannot read the CUDA version from nvcc --version:\n{output}")
    return Version(f"{m[1]}.{m[2]}")


def _run(cmd: list[str], with_stderr: bool = False) -> str:
    """A tool's stdout (and its stderr after it, where the tool reports there); ToolchainError
    with its words if it cannot run or fails."""
    try:
        proc = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)
        return proc.stdout + proc.stderr if with_stderr else proc.stdout
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise ToolchainError(f"`{' '.join(cmd)}` failed: {detail.strip()}") from exc


@dataclass(frozen=True)
class CudaToolkit:
    """An nvcc's toolkit as nvcc itself reports it (``parse_nvcc_dryrun``): the truth behind a
    wrapper script, a symlink, an environment module or PyPI's packages, none of which makes
    ``dirname(dirname(nvcc))`` the toolkit."""

    root: Path  # TOP: what CUDA_HOME would be
    bin_dir: Path  # _HERE_: where the real nvcc and its tools (ptxas, cudafe++, ...) are
    include_dirs: tuple[Path, ...]  # INCLUDES, then SYSTEM_INCLUDES (CUDA 13: include/cccl)
    library_dirs: tuple[Path, ...]  # LIBRARIES without the driver stubs
    stub_dirs: tuple[Path, ...] = ()  # LIBRARIES' driver stubs (lib64/stubs: libcuda.so)


def _dryrun_variables(text: str) -> dict[str, str]:
    """``#$ NAME=value`` lines of ``nvcc --dryrun``; a later line wins (nvcc.profile may set one twice)."""
    found = {}
    for line in text.splitlines():
        m = re.match(r"#\$ ([A-Za-z_]+)=(.*)$", line.strip())
        if m:
            found[m[1]] = m[2].strip()
    return found


def parse_nvcc_dryrun(text: str, cwd: Path) -> CudaToolkit:
    """The toolkit from ``nvcc --dryrun -x cu -c /dev/null -o /dev/null``'s output, its paths
    made absolute against ``cwd`` (nvcc reports them relative to how it was called) and normalised."""
    variables = _dryrun_variables(text)
    missing = [name for name in ("_HERE_", "TOP") if not variables.get(name)]
    if missing:
        raise ToolchainError(
            f"nvcc --dryrun did not report {' and '.join(missing)}: cannot tell where its toolkit is"
        )

    def path(value: str) -> Path:
        return Path(os.path.normpath(cwd / value))

    def option_values(name: str, option: str) -> list[Path]:
        words = shlex.split(variables.get(name, ""))
        values = [
            w[len(option) :] if w != option else (words[i + 1] if i + 1 < len(words) else "")
            for i, w in enumerate(words)
            if w.startswith(option)
        ]
        return [path(v) for v in values if v]

    includes = option_values("INCLUDES", "-I") + option_values("SYSTEM_INCLUDES", "-isystem")
    libraries = option_values("LIBRARIES", "-L")
    return CudaToolkit(
        root=path(variables["TOP"]),
        bin_dir=path(variables["_HERE_"]),
        include_dirs=tuple(dict.fromkeys(includes)),
        library_dirs=tuple(dict.fromkeys(d for d in libraries if d.name != "stubs")),
        stub_dirs=tuple(dict.fromkeys(d for d in libraries if d.name == "stubs")),
    )


@dataclass(frozen=True)
class Nvcc:
    path: Path

    @cached_property
    def toolkit(self) -> CudaToolkit:
        """Where this nvcc's toolkit really is (it compiles nothing to say so)."""
        cmd = [str(self.path), "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull]
        return parse_nvcc_dryrun(_run(cmd, with_stderr=True), Path.cwd())

    @cached_property
    def version(self) -> Version:
        return parse_nvcc_version(_run([str(self.path), "--version"]))

    @cached_property
    def supported_archs(self) -> tuple[Arch, ...]:
        """The real archs this nvcc builds SASS for (``nvcc --list-gpu-code``)."""
        return parse_arch_list(_run([str(self.path), "--list-gpu-code"]).split())


@dataclass(frozen=True)
class Torch:
    """The torch the build compiles against (its headers and libtorch_cpu)."""

    version: Version
    version_string: str
    cuda: str | None  # torch.version.cuda: None for a CPU build
    include_dirs: tuple[Path, ...]
    library_dir: Path


NO_TORCH = (
    "torch is not installed in this Python. Install the torch you build for first "
    "(for example `pip install torch==2.13.0`), then build with "
    "`pip install --no-build-isolation` so that this torch is used."
)


def read_torch_version_file(text: str) -> tuple[str, str | None] | None:
    """Pure: (``__version__``, ``cuda``) as torch/version.py assigns them (literals, which torch's
    build writes there); None when the file does not read that way."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    values: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            values[target.id] = value.value
    version, cuda = values.get("__version__"), values.get("cuda", 0)
    if not isinstance(version, str) or not (cuda is None or isinstance(cuda, str)):
        return None  # no version, or no cuda line (0): not a file torch's build wrote
    return version, cuda


def find_torch() -> Torch:
    """The torch this Python imports, found without importing it: its version and CUDA
    version read from torch/version.py (an import of torch costs seconds of CPU, in every
    build); torch imported only where that file does not read as torch's build writes it."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise ToolchainError(NO_TORCH)
    root = Path(spec.origin).parent
    try:
        read = read_torch_version_file((root / "version.py").read_text())
    except OSError:
        read = None
    version_string, cuda = read or _imported_torch_version()
    return Torch(
        version=Version(version_string.split("+")[0]),
        version_string=version_string,
        cuda=cuda,
        include_dirs=(root / "include",),
        library_dir=root / "lib",
    )


def _imported_torch_version() -> tuple[str, str | None]:
    try:
        # Quietly: torch warns on import when numpy is missing ("Failed to initialize NumPy"),
        # which says nothing about a build. The build's own imports of torch go to its log.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torch
    except ImportError as exc:
        raise ToolchainError(NO_TORCH) from exc
    return torch.__version__, torch.version.cuda


def check_cuda_matches_torch(nvcc_version: Version, torch_cuda: str | None) -> None:
    """With a CUDA build of torch, the CUDA major of nvcc must equal torch's."""
    if torch_cuda is None:
        return  # a CPU torch: the kernels only need torch's stable-ABI headers
    torch_major = Version(torch_cuda).major
    if torch_major != nvcc_version.major:
        raise ToolchainError(
            f"nvcc is CUDA {nvcc_version} but the installed torch is built for CUDA "
            f"{torch_cuda}. Use an nvcc of CUDA {torch_major}.x (set CUDA_HOME), or install a "
            f"torch built for CUDA {nvcc_version.major}."
        )


# What users put in front of the compiler in $CXX ("ccache g++"): compile caches and
# distributors, each run as LAUNCHER COMPILER ARGS.
CXX_LAUNCHERS = ("ccache", "sccache", "distcc", "icecc", "buildcache")


@dataclass(frozen=True)
class HostCompiler:
    """The C++ compiler as ``$CXX`` names it: ``ccache g++ -m64`` is g++ given -m64, run
    through ccache."""

    command: tuple[str, ...]  # the compiler and any flags $CXX gives it: ("g++", "-m64")
    launcher: tuple[str, ...] = ()  # what $CXX puts in front of it: ("ccache",)


def search_dirs(verbose: str) -> list[str]:
    """Pure: the include directories a compiler searches by itself, from what ``-E -v`` prints
    (GCC's and Clang's ``#include <...> search starts here:`` list)."""
    _, start, rest = verbose.partition("#include <...> search starts here:")
    if not start:
        return []
    listed = rest.split("End of search list.", 1)[0]
    # Clang marks a framework directory so; the directories are indented by one space
    return [
        line.strip().removesuffix(" (framework directory)")
        for line in listed.splitlines()
        if line.startswith(" ") and line.strip()
    ]


def compiler_include_dirs(cxx: HostCompiler) -> list[str] | None:
    """The include directories ``cxx`` searches by itself (C++); None where it cannot say."""
    try:
        proc = subprocess.run(
            [*cxx.command, "-xc++", "-E", "-v", os.devnull],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    dirs = search_dirs(proc.stderr)
    return dirs if proc.returncode == 0 and dirs else None


def compile_launcher(cache: Path | None, own: tuple[str, ...]) -> tuple[str, ...]:
    """Pure: what a compile runs through: the compile cache's launcher (``--cache``) when the
    build has one, in place of the user's own (``$CXX``'s ccache: a cache behind a cache only
    misses), else the user's."""
    return (str(cache),) if cache else own


def split_cxx(value: str) -> tuple[list[str], list[str]]:
    """Pure: ``$CXX``'s words as (launcher, compiler with its flags): ``"ccache g++"`` ->
    (["ccache"], ["g++"]), ``"g++ -m64"`` -> ([], ["g++", "-m64"]); ([], []) if empty or
    unreadable."""
    try:
        words = shlex.split(value)
    except ValueError:
        return [], []
    n = 0
    while n < len(words) - 1 and Path(words[n]).name in CXX_LAUNCHERS:
        n += 1
    return words[:n], words[n:]


def find_cxx(env: dict[str, str] | None = None) -> HostCompiler:
    """``$CXX`` (a launcher in front kept) when it is set, else the first of c++, g++ and
    clang++ found on PATH.

    A ``$CXX`` naming a program that is not found is an error, not a fallback: the user chose
    that compiler (or its cache), and a build with another one would not be the build asked
    for."""
    env = dict(os.environ if env is None else env)
    path = env.get("PATH", "")
    value = env.get("CXX", "").strip()
    if value:
        launcher, command = split_cxx(value)
        if not command:
            raise ToolchainError(
                f"CXX={value!r} cannot be read as a command line (unclosed quote?)"
            )
        missing = [word for word in [*launcher, command[0]] if not shutil.which(word, path=path)]
        if missing:
            raise ToolchainError(
                f"CXX={value!r} names {', '.join(missing)}, which is not found on PATH: install "
                "it, set CXX to a compiler that is installed, or unset CXX to use c++"
            )
        return HostCompiler(tuple(command), tuple(launcher))
    for candidate in ("c++", "g++", "clang++"):
        if shutil.which(candidate, path=path):
            return HostCompiler((candidate,))
    raise ToolchainError("no C++ compiler found: install g++ (or set CXX)")


def find_ninja() -> str:
    """The ninja of PyPI's ``ninja`` package (a dependency of the build extra), else PATH's.

    The same ninja whatever PATH holds: ninja 1.12 changed how its log records commands, so a
    build directory shared between two versions would be compiled again from scratch."""
    try:
        import ninja

        packaged = Path(ninja.BIN_DIR) / "ninja"
        if packaged.is_file():
            return str(packaged)
    except (ImportError, AttributeError):
        pass
    found = shutil.which("ninja")
    if found:
        return found
    raise ToolchainError("ninja is not installed: pip install ninja")


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (falls back to total physical memory)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
