"""Files a classic project's build needs that its source does not have, recognised after the
build failed, so that the error says what is missing and where to get it: an sdist that leaves
out the sources its setup.py compiles (fast-hadamard-transform 1.1.0: its makers ship wheels),
a git checkout whose submodules were not fetched (a clone without ``--recursive``), and what the
build downloads while it runs, from a machine that cannot reach it (torch-kdtree 1.0's CMake
fetches Eigen from gitlab.com; an offline cluster node reaches nothing). Pure functions over the
log's text and the project's files as given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

# How a user gets a project's empty git submodules (helper 8 had an extracted copy, no git).
SUBMODULES_FIX = (
    "in a git checkout: git submodule update --init --recursive (a copy without git data: "
    "their sources put in those folders)"
)

# ninja's words for an input that is not there, and the compilers' for a source or header.
_MISSING = re.compile(
    r"ninja: error: '(?P<ninja>[^']+)', needed by '[^']+', missing and no known rule to make it"
    r"|error: (?P<source>[^\s:]+\.(?:c|cc|cpp|cxx|cu)): No such file or directory"
    r"|fatal error: (?P<header>[^\s:]+): No such file or directory"
    # the check build_site.py makes before compiling
    r"|^prebuild: .+?:\d+: <(?P<early>[^>\s]+)> is in no include directory of the build$",
    re.M,
)
_SOURCE_HOSTS = ("github.com", "gitlab.com", "bitbucket.org", "codeberg.org")


def missing_files(log: str) -> list[str]:
    """Pure: the files a failed build's log says are missing, in order, once each."""
    found = [next(g for g in m.groups() if g) for m in _MISSING.finditer(log)]
    return list(dict.fromkeys(found))


# A header missing where the compiler quotes the line including it in quotes, the project's own
# (`#include "marlin_cuda_kernel.cuh"`), not a system's (`<...>`).
_QUOTED_MISSING = re.compile(
    r"fatal error: (?P<header>[^\s:]+): No such file or directory\n[ \t]*\d*[ \t]*\|?"
    r'[ \t]*#[ \t]*include[ \t]*"(?P=header)"'
)


def missing_own_headers(log: str) -> list[str]:
    """Pure: the missing headers the project's files include in quotes, once each."""
    return list(dict.fromkeys(m["header"] for m in _QUOTED_MISSING.finditer(log)))


@dataclass(frozen=True)
class FailedDownload:
    """What a build tried to fetch (a URL, or the host where the tool names only that) and the
    tool's reason it could not."""

    what: str
    why: str


# Each tool's words for a download that failed (checked on their real output: CMake 3.25 and 4.4
# (file(DOWNLOAD), ExternalProject, FetchContent), git 2.39, curl, Python's urllib, requests).
_DOWNLOAD_FAILED = re.compile(
    r"error: downloading '(?P<cmake>[^']+)' failed(?:\s+status_code: \d+\s+"
    r'status_string: "(?P<cmake_why>[^"]*)")?'
    r"|fatal: unable to access '(?P<git>[^']+?)/?': (?P<git_why>[^\n]+)"
    r"|curl: \(\d+\) (?P<curl_why>[^\n]+?: (?P<curl>\S+))$"
    r"|urllib\.error\.URLError: <urlopen error (?P<urllib_why>[^\n]+)>"
    r"|requests\.exceptions\.ConnectionError: \w+\(host='(?P<requests>[^']+)'[^\n]*?url: "
    r"(?P<requests_path>\S+) \(Caused by (?P<requests_why>[^\n]+)\)",
    re.M,
)


# A URL in a line of Python (a traceback's code line: ``download_extract('https://...',``).
_URL = re.compile(r"https?://[^\s'\"()<>,]+")


def failed_downloads(log: str) -> list[FailedDownload]:
    """Pure: what a failed build's log says it could not download, in order, once each."""
    found: dict[str, FailedDownload] = {}
    for m in _DOWNLOAD_FAILED.finditer(log):
        g = m.groupdict()
        if g["cmake"]:
            what, why = g["cmake"], g["cmake_why"] or ""
        elif g["git"]:
            what, why = g["git"], g["git_why"]
        elif g["curl"]:
            what, why = g["curl"], g["curl_why"]
        elif g["requests"]:
            what, why = f"https://{g['requests']}{g['requests_path']}", g["requests_why"]
        else:  # urllib names no URL: the last one in its traceback's code lines, if any
            start = log.rfind("Traceback (most recent call last):", 0, m.start())
            urls = _URL.findall(log, start, m.start()) if start >= 0 else []
            what, why = (urls[-1] if urls else ""), g["urllib_why"]
        got = FailedDownload(what, _short_reason(why))
        found.setdefault(got.what or got.why, got)
    return list(found.values())


def _short_reason(why: str) -> str:
    """The system's own words where a tool wraps them (requests: ``NameResolutionError(...
    ([Errno -2] Name or service not known))``), else the tool's, cut."""
    errno = re.search(r"\[Errno -?\d+\] [^)\"'>]+", why)
    why = errno.group(0).strip() if errno else why.strip()
    return why if len(why) <= 120 else why[:117] + "..."


def downloads_advice(
    log: str, step: str = "The build downloads what its source lacks while it builds"
) -> str:
    """Pure: what to tell a user whose build failed fetching something over the network; ""
    where the log shows no failed download. ``step``: who downloaded, and when."""
    failed = failed_downloads(log)
    if not failed:
        return ""
    said = "; ".join(
        f"{d.what} ({d.why})" if d.what and d.why else (d.what or d.why) for d in failed[:3]
    )
    named = list(dict.fromkeys(re.findall(r"for '([\w.+-]+)-populate'", log)))
    fetch_content = (
        " CMake's FetchContent takes a local copy instead where the project lets you pass "
        "CMake arguments: "
        + " ".join(f"-DFETCHCONTENT_SOURCE_DIR_{n.upper()}=<its directory>" for n in named)
        + "."
        if named
        else ""
    )
    return (
        f"{step}, and that failed here: "
        f"{said}. This machine does not reach it: build where it does (the wheel then installs "
        f"offline), or put it in place the way the project's build files allow.{fetch_content}"
    )


def submodule_paths(gitmodules: str) -> list[str]:
    """Pure: the paths of the submodules ``.gitmodules`` lists, in order."""
    return list(dict.fromkeys(re.findall(r"^\s*path\s*=\s*(.+?)\s*$", gitmodules, re.M)))


def empty_submodules(gitmodules: str, present: set[str]) -> list[str]:
    """Pure: the submodule paths ``.gitmodules`` lists that are not among ``present`` (the
    paths that exist in the project's source with something in them)."""
    return [p for p in submodule_paths(gitmodules) if p not in present]


def source_url(pkg_info: str) -> str | None:
    """Pure: where the project's source lives, from an sdist's PKG-INFO (a Project-URL or the
    Home-page on a known code host); None if it names none."""
    headers = HeaderParser().parsestr(pkg_info)
    return code_host_url(headers.get_all("Project-URL") or (), headers.get("Home-page"))


def code_host_url(project_urls, home_page: str | None) -> str | None:
    """Pure: the first of a project's URLs (its metadata's ``Project-URL`` entries, "label,
    URL", then its Home-page) on a known code host; None if none is."""
    urls = [u.split(",", 1)[-1].strip() for u in project_urls]
    urls.append((home_page or "").strip())
    return next((u for u in urls if any(h in u for h in _SOURCE_HOSTS)), None)


def source_gaps_advice(
    log: str,
    source: Path,
    gitmodules: str,
    present_submodules: set[str],
    pkg_info: str,
    command: str,
) -> str:
    """What to tell a user whose build failed on files its source does not have (a header of
    its own is looked for in ``source``), on a known system library the linker did not find, or
    on a package CMake did not find; "" where the log names none. ``source``: the project's copy, or the root of the
    checkout's mirror it lies in (the log's paths are under it); ``gitmodules``/``pkg_info``:
    their text ("" if absent); ``command``: the ``prebuild wheel`` command without the project."""
    missing = missing_files(log)
    empty = empty_submodules(gitmodules, present_submodules)
    if not missing:
        # its build stopped on a submodule it checks for itself (VPTQ's setup.py: "third_party/
        # cutlass is missing, please use source distribution or git clone")
        if named := [path for path in empty if re.search(rf"{re.escape(path)}\b", log)]:
            return (
                f"The build failed naming {', '.join(named)}, the project's git "
                f"{'submodule' if len(named) == 1 else 'submodules'} not in its source. Get "
                f"them {SUBMODULES_FIX}, then build again (a git+https:// URL gets them: pip "
                "clones them too)."
            )
        return link_advice(log) or cmake_advice(log)
    shown = [_relative(name, source) for name in missing[:3]]
    if empty:
        return (
            f"The build is missing {', '.join(shown)}: the project's git submodules "
            f"({', '.join(empty)}) are not in its source. Get them {SUBMODULES_FIX}, then "
            "build again (a git+https:// URL gets them: pip clones them too)."
        )
    compiled = [name for name in shown if name.endswith((".c", ".cc", ".cpp", ".cxx", ".cu"))]
    # a header of its own it includes in quotes, which its source does not hold anywhere
    own = [h for h in missing_own_headers(log) if not any(source.rglob(Path(h).name))]
    if not compiled and not (own and pkg_info):
        return cuda_library_advice(missing) or system_library_advice(missing)
    if not pkg_info:
        return ""
    url = source_url(pkg_info)
    version = HeaderParser().parsestr(pkg_info).get("Version", "")
    where = (
        f": {command} git+{url}@<its tag or commit of {version}>"
        if url
        else " (its sdist names no repository)"
    )
    lacks = (
        f"sources its setup.py compiles ({', '.join(compiled)})"
        if compiled
        else f"headers its sources include ({', '.join(own[:3])}, in quotes: its own)"
    )
    return (
        f"The sdist lacks {lacks}: it is incomplete, as some projects that ship prebuilt wheels "
        f"publish it. Build it from its repository instead{where}."
    )


# Headers of the CUDA toolkit's libraries (cuBLAS, cuSPARSE, ...), which a toolkit of nvcc alone
# lacks (PyPI's nvidia-cuda-nvcc, conda's cuda-nvcc, a slim container's), and which a CUDA
# build of torch brings in its nvidia-* wheels (site-packages/nvidia/<name>/include).
CUDA_LIBRARY_HEADERS = re.compile(
    r"(?:cublas\w*|cusparse\w*|curand\w*|cufft\w*|cusolver\w*|nccl|cudnn\w*|nvjpeg|npp\w*"
    r"|cupti\w*|nvToolsExt)\.h"
)


def cuda_library_advice(missing: list[str]) -> str:
    """Pure: what to tell a user whose build failed on headers of a CUDA library that neither
    the toolkit nor this environment's CUDA packages have (the shim toolkit holds those of
    torch's nvidia-* wheels, cuda_shim.search_paths); "" for any other file."""
    headers = [name for name in missing if CUDA_LIBRARY_HEADERS.fullmatch(name)]
    if not headers:
        return ""
    return (
        f"The build is missing {', '.join(headers)}, headers of a CUDA library that neither the "
        "toolkit (a toolkit of nvcc alone has none) nor the CUDA packages beside torch here "
        "have: install the library's development files for this CUDA release (apt: "
        "libcublas-dev-13-0 for CUDA 13.0, and the like; conda: libcublas-dev; pip: the "
        "library's nvidia-* package), then build again."
    )


@dataclass(frozen=True)
class SystemLibrary:
    """A system library classic projects build with, and where it comes from."""

    headers: str  # a regex for the headers it installs, as #include names them
    name: str
    debian: str  # Debian's (and Ubuntu's) development package
    include: str  # the directory that package puts the headers in, where not searched
    conda: str  # conda-forge's package
    links: str = ""  # a regex for its libraries' -l names ("" for one of headers only)
    cmake: str = ""  # a regex for the names CMake's find_package knows it by

    def where(self) -> str:
        also = f", then CPATH={self.include}" if self.include else ""
        return (
            f"Debian and Ubuntu: apt install {self.debian}{also}; "
            f"conda: conda install -c conda-forge {self.conda}"
        )


SYSTEM_LIBRARIES: tuple[SystemLibrary, ...] = (
    SystemLibrary(
        r"(?:klu|cholmod|umfpack|amd|colamd|SuiteSparse_config)\.h",
        "SuiteSparse",
        "libsuitesparse-dev",
        "/usr/include/suitesparse",
        "suitesparse",
        r"klu|cholmod|umfpack|amd|camd|colamd|ccolamd|btf|suitesparseconfig|spqr",
        r"SuiteSparse|KLU|CHOLMOD|UMFPACK|AMD|CXSparse",
    ),
    SystemLibrary(r"libaio\.h", "libaio", "libaio-dev", "", "libaio", r"aio"),
    # NVSHMEM's InfiniBand transport headers (DeepEP's kernels include them)
    SystemLibrary(
        r"infiniband/\w+\.h",
        "rdma-core's InfiniBand verbs",
        "libibverbs-dev",
        "",
        "rdma-core",
        r"ibverbs|mlx5|rdmacm",
    ),  # fmt: skip
    SystemLibrary(
        r"Eigen/\w+", "Eigen", "libeigen3-dev", "/usr/include/eigen3", "eigen", cmake=r"Eigen3?"
    ),
    # Pointcept's pointgroup_ops includes google/dense_hash_map
    SystemLibrary(
        r"(?:google|sparsehash)/\w+", "Google's sparsehash", "libsparsehash-dev", "", "sparsehash"
    ),
    # MinkowskiEngine 0.5.4 links a BLAS (--blas=openblas)
    SystemLibrary(
        r"cblas\.h|lapacke?\.h|openblas/\w+\.h",
        "a BLAS (OpenBLAS)",
        "libopenblas-dev",
        "",
        "openblas",
        r"openblas|blas|cblas|lapack|lapacke",
        r"BLAS|CBLAS|LAPACK|LAPACKE|OpenBLAS",
    ),  # fmt: skip
    SystemLibrary(r"EGL/\w+\.h", "EGL", "libegl-dev", "", "libegl-devel", r"EGL"),
    SystemLibrary(
        r"GL/\w+\.h", "OpenGL", "libgl-dev", "", "libgl-devel", r"GL|GLU|OpenGL", r"OpenGL"
    ),
    SystemLibrary(r"mpi\.h", "MPI", "libopenmpi-dev", "", "openmpi", r"mpi|mpi_cxx", r"MPI"),
    SystemLibrary(
        r"boost/.+", "Boost", "libboost-dev", "", "libboost-devel", r"boost_\w+", r"Boost"
    ),
    SystemLibrary(r"png\.h", "libpng", "libpng-dev", "", "libpng", r"png\d*", r"PNG"),
    SystemLibrary(
        r"jpeglib\.h", "libjpeg", "libjpeg-dev", "", "libjpeg-turbo", r"jpeg|turbojpeg", r"JPEG"
    ),
    SystemLibrary(r"zlib\.h", "zlib", "zlib1g-dev", "", "zlib", r"z", r"ZLIB"),
    SystemLibrary(
        r"Python\.h",
        "Python's headers",
        "python3-dev",
        "",
        "python",
        r"python3\.\d+",
        r"Python3?|PythonLibs",
    ),  # fmt: skip
)


def system_header_pattern() -> str:
    """Pure: one regex for the headers of every known system library (SYSTEM_LIBRARIES), which
    the build checks for before compiling (build_site.py)."""
    return "|".join(f"(?:{library.headers})" for library in SYSTEM_LIBRARIES)


# What the build machine's library is to the wheel, once installed (bundle.py).
_THEN = (
    "Install it, then build again: prebuild copies what the wheel's libraries link of it into "
    "the wheel, so a machine installing the wheel needs none of it."
)


def system_library_advice(missing: list[str]) -> str:
    """Pure: what to tell a user whose build failed on headers of a known system library
    (torch-sparse-solve 0.0.5 includes SuiteSparse's klu.h); "" for any other file."""
    found = _known(missing, lambda library: library.headers)
    if not found:
        return ""
    said = "; ".join(
        f"{', '.join(headers)}, of {library.name} ({library.where()})"
        for library, headers in found.items()
    )
    # A library of headers only (Eigen) is compiled into the wheel: nothing of it to copy.
    then = _THEN if any(library.links for library in found) else "Install it, then build again."
    return (
        f"The build is missing headers of a system library the project needs and this machine "
        f"lacks: {said}. {then}"
    )


# GNU ld's words (binutils 2.39 and later add ": No such file or directory"), and lld's.
_UNLINKED = re.compile(
    r"(?:cannot find|unable to find library) -l(?P<name>[\w.+-]+?)(?::|$|\s)", re.M
)


def unlinked_libraries(log: str) -> list[str]:
    """Pure: the ``-l`` libraries a failed build's linker could not find, in order, once each."""
    return list(dict.fromkeys(m["name"] for m in _UNLINKED.finditer(log)))


def link_advice(log: str) -> str:
    """Pure: what to tell a user whose build failed to link a known system library
    (MinkowskiEngine's -lopenblas); "" where the linker found every library, or none of those
    it did not find is known."""
    found = _known(unlinked_libraries(log), lambda library: library.links)
    if not found:
        return ""
    said = "; ".join(
        f"{', '.join('-l' + n for n in names)}, of {library.name} ({library.where()})"
        for library, names in found.items()
    )
    return f"The build could not link a system library this machine lacks: {said}. {_THEN}"


# CMake's words where a package the project requires is not found: a find module's (FindBLAS:
# "Could NOT find BLAS (missing: BLAS_LIBRARIES)", indented under its "CMake Error"; an optional
# package's "-- Could NOT find ..." is no error), and config mode's, wrapped over lines as CMake
# wraps its messages ("Could not find a package configuration file provided by "Eigen3"").
_CMAKE_NOT_FOUND = re.compile(
    r"^[ \t]+Could NOT find (?P<module>[\w.+-]+)"
    r'|Could\s+not\s+find\s+a\s+package\s+configuration\s+file\s+provided\s+by\s+"(?P<config>[^"]+)"',
    re.M,
)


def cmake_packages(log: str) -> list[str]:
    """Pure: the packages a failed CMake configure required and did not find, in order, once each."""
    return list(dict.fromkeys(m["module"] or m["config"] for m in _CMAKE_NOT_FOUND.finditer(log)))


def cmake_advice(log: str) -> str:
    """Pure: what to tell a user whose CMake build did not find a package it requires: a known
    system library's packages; for torch, that the project looks elsewhere than the build's
    prefix; for any other, how to point CMake at it;
    "" where CMake found everything."""
    packages = cmake_packages(log)
    if not packages:
        return ""
    found = _known(packages, lambda library: library.cmake)
    said = []
    if found:
        libraries = "; ".join(
            f"{', '.join(names)}, {library.name} ({library.where()})"
            for library, names in found.items()
        )
        said.append(
            f"CMake did not find a system library the project needs and this machine lacks: "
            f"{libraries}. {_THEN}"
        )
    others = [p for p in packages if not any(p in names for names in found.values())]
    if "Torch" in others:
        said.append(
            "CMake did not find torch (its TorchConfig.cmake), although the build's "
            "CMAKE_PREFIX_PATH names this torch's CMake prefix: the project's CMakeLists.txt "
            "looks elsewhere (a Torch_DIR or CMAKE_PREFIX_PATH of its own, or another Python's "
            "torch); point it at python -c 'import torch.utils; print(torch.utils."
            "cmake_prefix_path)' of the Python that runs prebuild."
        )
        others.remove("Torch")
    if others:
        said.append(
            f"CMake did not find {', '.join(others)}, which the project requires: install "
            "its development package, or, where it is installed under a prefix of its own, "
            f"name that prefix for the build (CMAKE_PREFIX_PATH=<prefix>, or {others[0]}_ROOT"
            "=<prefix>, before the prebuild command)."
        )
    return " ".join(said)


def _known(names: list[str], pattern) -> dict[SystemLibrary, list[str]]:
    """Pure: ``names`` by the known system library whose ``pattern(library)`` they match."""
    found: dict[SystemLibrary, list[str]] = {}
    for name in names:
        library = next(
            (lib for lib in SYSTEM_LIBRARIES if pattern(lib) and re.fullmatch(pattern(lib), name)),
            None,
        )
        if library is not None:
            found.setdefault(library, []).append(name)
    return found


def _relative(name: str, source: Path) -> str:
    path = Path(name)
    try:
        return str(path.relative_to(source)) if path.is_absolute() else name
    except ValueError:
        return name
