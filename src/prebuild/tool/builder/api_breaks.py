"""What torch, CUDA and NumPy removed that older classic projects still use, recognised in a failed
build's compiler errors, so that the error says what changed and what to do, not only where
the compiler stopped. Pure functions over the log's text.

Each pattern matches the wording of nvcc's front end (``identifier "X" is undefined``) and of
g++ (``'X' was not declared``), as nvcc 13.0 and g++ print them; only the log's error lines are
read, so a deprecation warning naming the same thing does not count.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# g++ quotes names with ‘’ in a UTF-8 locale and with '' in the C locale.
_Q = "[‘’'\"]"


@dataclass(frozen=True)
class ApiBreak:
    """One change of torch's or CUDA's API that a project's own code meets."""

    pattern: re.Pattern[str]  # searched in each error line of the build's log
    what: str  # what changed, and since when
    fix: str  # what the project's code, or the user, can do about it
    cxx20: bool = False  # a break of C++20 itself, met because torch's headers need it


def _names(*words: str) -> str:
    """A pattern for ``word`` as nvcc (``"word"``) or g++ (``‘word’``) quote it."""
    return f"{_Q}(?:{'|'.join(words)}){_Q}"


_TH = r"THC\w*|TH(?:Arg|Assert|Error|Tensor|Float|Double|Long|Int|Byte)\w*"
_CUB = "Sum|Max|Min|ArgMax|ArgMin|Equality|Inequality|CastOp"
_CUB_SYNC = r"LaneId|WarpId|CTA_SYNC\w*|WARP_SYNC|WARP_ANY|WARP_ALL|WARP_BALLOT"
_NUMPY_OLD = r"NPY_(?:IN|OUT|INOUT)_ARRAY|NPY_(?:C|F)CONTIGUOUS|NPY_CARRAY\w*|NPY_FARRAY\w*"
_TEXTURE = r"cuda(?:Bind|Unbind)Texture\w*"
_WARP = r"__(?:shfl\w*|any|all|ballot)"
# Eigen 3.4's template aliases (Eigen::VectorX<float>, Eigen::Vector<float, 3>); not MatrixXf,
# which older Eigens have too (missing, it means a missing include)
_EIGEN_34 = r"(?:(?:Matrix|Vector|RowVector|Array)X|Vector|RowVector)"

TH_BREAK = ApiBreak(
    re.compile(
        rf"\bTHC?/\w+\.c?u?h: No such file|{_names(_TH)}.*(?:undefined|not declared|name a type)"
    ),
    "it uses TH/THC (THC/THC.h, THCState, THCudaCheck), PyTorch's old C backend, removed "
    "in torch 1.11: no torch that prebuild builds against (2.10 or later) has it",
    "the project's code must move to ATen and c10 (C10_CUDA_CHECK for THCudaCheck, "
    "at::cuda::getCurrentCUDAStream() for THCState's stream, c10::cuda::CUDACachingAllocator "
    "for THCudaMalloc); look for a release or a fork of the project that did",
)


@dataclass(frozen=True)
class Successor:
    """What took the place of one of THC's names: by torch 1.10 THC's function called it."""

    new: str  # its name
    header: str  # the header that declares it
    args: int  # the arguments the THC name took
    drops_state: bool = False  # its first was the THCState*, which the successor does without


# THC's names whose successor does what they did, taking the same arguments (less THCState).
# Not THCudaBlas_*: ATen's gemm and gemv are not exported from libtorch_cuda.so.
THC_SUCCESSORS: dict[str, Successor] = {
    "THCudaCheck": Successor("C10_CUDA_CHECK", "<c10/cuda/CUDAException.h>", 1),
    "THCCeilDiv": Successor("at::ceil_div", "<ATen/ceil_div.h>", 2),
    "THCState_getCurrentStream": Successor(
        "at::cuda::getCurrentCUDAStream", "<ATen/cuda/CUDAContext.h>", 1, drops_state=True
    ),
    "THCudaMalloc": Successor(
        "c10::cuda::CUDACachingAllocator::raw_alloc",
        "<c10/cuda/CUDACachingAllocator.h>",
        2,
        drops_state=True,
    ),
    "THCudaFree": Successor(
        "c10::cuda::CUDACachingAllocator::raw_delete",
        "<c10/cuda/CUDACachingAllocator.h>",
        2,
        drops_state=True,
    ),
}
# Also replaced, each its own way (api_mends): THArgCheck(cond, arg, "message") is TORCH_CHECK
# with THArgCheck's own message, and a THCState* variable, once its uses are gone, is removed.
TH_ARG_CHECK = "THArgCheck"
THC_STATE = "THCState"

TYPE_BREAK = ApiBreak(
    re.compile(r"DeprecatedTypeProperties"),
    "it passes `tensor.type()` to an AT_DISPATCH macro (or a dispatch macro of its own "
    "built on them), which takes a scalar type: no torch that prebuild builds against "
    "(2.10 or later) converts one to the other",
    "in the project's code, `x.type()` in each AT_DISPATCH_* call (and in each call of a "
    "dispatch macro of its own built on them) becomes `x.scalar_type()`",
)

# Checks torch renamed, each to a macro that takes the same arguments: AT_CHECK, and c10's
# glog-style CHECK_EQ and the like (TORCH_-prefixed in torch 2.1 so as not to clash with glog's;
# a failed check now raises where it aborted).
RENAMED_CHECKS: dict[str, str] = {
    "AT_CHECK": "TORCH_CHECK",
    **{
        f"{prefix}CHECK_{op}": f"TORCH_{prefix}CHECK_{op}"
        for prefix in ("", "D")
        for op in ("EQ", "NE", "LE", "LT", "GE", "GT", "NOTNULL")
    },
}

AT_CHECK_BREAK = ApiBreak(
    re.compile(rf"{_names(*RENAMED_CHECKS)}.*(?:undefined|not declared)"),
    "it uses AT_CHECK or c10's CHECK_EQ-style checks (CHECK_NE, DCHECK_EQ, ...), which torch "
    "renamed TORCH_CHECK and TORCH_CHECK_EQ, TORCH_CHECK_NE, TORCH_DCHECK_EQ, ...",
    "in the project's code, AT_CHECK becomes TORCH_CHECK and CHECK_EQ TORCH_CHECK_EQ (each "
    "the same arguments)",
)

# Macros torch once wrote as `if` blocks, now `do { ... } while (false)`: a statement that
# needs its `;`, which code written against torch 1.0 may leave out (torch-encoding 1.0.1).
STATEMENT_MACROS = ("AT_ASSERT", "AT_ASSERTM", "AT_ERROR")

SEMICOLON_BREAK = ApiBreak(
    # g++ says so at the next statement; nvcc's front end quotes the expansion it stopped at
    re.compile(rf"expected {_Q};{_Q} before {_Q}do{_Q}|expected a \";\" do \{{"),
    "it leaves out the `;` after AT_ASSERT(...), AT_ASSERTM(...) or AT_ERROR(...), which the "
    "torch it was written for did not need: they are now `do { ... } while (false)`, "
    "statements that end with one",
    "in the project's code, a `;` after each of them",
)

# The name a project's own global lerp() is given where C++20's std::lerp meets it.
OWN_LERP = "project_lerp"

LERP_BREAK = ApiBreak(
    re.compile(
        r"\blerp\(.*(?:conflicts with a previous declaration|is ambiguous)"
        r"|overloaded function \"lerp\""
    ),
    "its own lerp() meets C++20's std::lerp, which libstdc++'s <math.h> puts in the global "
    "namespace (CUDA samples' helper_math.h defines one)",
    f"in the project's code, its own lerp and each call of it become {OWN_LERP} (the same "
    "function, renamed), or build against torch 2.13 or older, whose headers compile in C++17 "
    "(install it in this environment, in the CUDA build you build for, and run prebuild wheel "
    "again)",
    cxx20=True,
)

CUB_OPS_BREAK = ApiBreak(
    re.compile(
        rf"namespace \"cub\" has no member \"(?:{_CUB})\"|{_names(_CUB)} is not a member of "
        rf"{_Q}cub{_Q}"
    ),
    "CUDA 13's CUB (CCCL 3) removed its operators cub::Sum, cub::Max, cub::Min, "
    "cub::Equality and the like",
    "they become cuda::std::plus<>{}, cuda::maximum<>{}, cuda::minimum<>{}, "
    "cuda::std::equal_to<>{} and cuda::std::not_equal_to<>{} (<cuda/functional>); or build "
    "with CUDA 12: an nvcc 12.x and torch's CUDA 12 build",
)

CUB_SYNC_BREAK = ApiBreak(
    re.compile(
        rf"namespace \"cub\" has no member \"(?:{_CUB_SYNC})\"|{_names(_CUB_SYNC)} is not a "
        rf"member of {_Q}cub{_Q}|{_names(_CUB_SYNC)}.*(?:undefined|not declared)"
    ),
    "CUDA 13's CUB (CCCL 3) removed its thread and warp utilities cub::LaneId, cub::CTA_SYNC, "
    "cub::WARP_SYNC and the like",
    "CTA_SYNC() becomes __syncthreads(), CTA_SYNC_AND/OR __syncthreads_and/or, "
    "WARP_SYNC(mask) __syncwarp(mask), WARP_ANY/WARP_ALL(p, mask) __any_sync/__all_sync(mask, "
    "p), LaneId() cuda::ptx::get_sreg_laneid() (<cuda/ptx>); or build with CUDA 12: an nvcc "
    "12.x and torch's CUDA 12 build",
)

# What CUB's thread and warp utilities were (CUDA 12's cub/util_ptx.cuh): name -> the CUDA
# intrinsic or libcu++ function, and whether the two arguments swap (cub's predicate came
# first, the mask second).
CUB_SYNC_SUCCESSORS: dict[str, tuple[str, bool]] = {
    "CTA_SYNC": ("__syncthreads", False),
    "CTA_SYNC_AND": ("__syncthreads_and", False),
    "CTA_SYNC_OR": ("__syncthreads_or", False),
    "WARP_SYNC": ("__syncwarp", False),
    "WARP_ANY": ("__any_sync", True),
    "WARP_ALL": ("__all_sync", True),
    "WARP_BALLOT": ("__ballot_sync", True),
    "LaneId": ("cuda::ptx::get_sreg_laneid", False),
    "WarpId": ("cuda::ptx::get_sreg_warpid", False),
}

WARP_BREAK = ApiBreak(
    # __shfl_down is gone from sm_70's headers; __any, __all and __ballot compile (deprecated)
    # to a `vote` that ptxas refuses
    re.compile(rf"{_names(_WARP)}.*(?:undefined|not declared)|'vote' without '\.sync'"),
    "it uses warp functions without _sync (__shfl_down, __ballot, ...), which CUDA 9 "
    "replaced and sm_70 and later do not have",
    "in the project's code, __shfl_down(v, d) becomes __shfl_down_sync(0xffffffff, v, d), "
    "and so on for each",
)

# The warp functions CUDA 9 replaced, each by its _sync form, which takes the lanes' mask first.
LEGACY_WARP = ("__shfl", "__shfl_up", "__shfl_down", "__shfl_xor", "__any", "__all", "__ballot")

API_BREAKS: tuple[ApiBreak, ...] = (
    TH_BREAK,
    TYPE_BREAK,
    AT_CHECK_BREAK,
    SEMICOLON_BREAK,
    LERP_BREAK,
    ApiBreak(
        # nvcc's front end on a consteval format string, and the host compiler nvcc runs on
        # the functions fmt then calls (fmt 9.0's, in tiny-cuda-nn)
        re.compile(rf"call to (?:consteval|non-{_Q}?constexpr{_Q}?) function .{{0,24}}fmt::"),
        "its copy of fmt, older than 10.1, does not compile in C++20 under nvcc: there it turns "
        "constexpr off (FMT_USE_CONSTEXPR 0), which C++20's compile-time format strings need",
        "set what fmt 10.1 sets for nvcc in C++20 for the build, with "
        "`NVCC_APPEND_FLAGS=-DFMT_USE_CONSTEXPR=1` before the prebuild wheel command (or update "
        "the project's fmt to 10.1 or later, or build against torch 2.13 or older, whose headers "
        "compile in C++17)",
        cxx20=True,
    ),
    CUB_OPS_BREAK,
    CUB_SYNC_BREAK,
    ApiBreak(
        # nvcc's words only: a cub::Device* call is host code of a .cu file, which its front
        # end compiles. The argument list that failed is on the next line, not an error line.
        re.compile(r"no instance of overloaded function \"(?:\w+::)*cub::Device\w+::\w+\""),
        "a call of a cub::Device* algorithm matches none of CUDA 13's CUB (CCCL 3) signatures: "
        "CCCL 3 removed the overloads taking a last `bool debug_synchronous` argument "
        "(deprecated since CUDA 12.0), which older projects pass",
        "drop that last argument from the project's cub::Device* calls (CUDA_LAUNCH_BLOCKING=1 "
        "at run time synchronises as it did); or build with CUDA 12: an nvcc 12.x and torch's "
        "CUDA 12 build",
    ),
    ApiBreak(
        re.compile(
            r"namespace \"thrust\" has no member class \"(?:unary|binary)_function\""
            rf"|{_names('unary_function', 'binary_function')}.*{_Q}thrust{_Q}"
        ),
        "CUDA 13's Thrust (CCCL 3) removed thrust::unary_function and thrust::binary_function",
        "the project's functors drop that base class (nothing reads it since C++11); or build "
        "with CUDA 12: an nvcc 12.x and torch's CUDA 12 build",
    ),
    ApiBreak(
        re.compile(
            r"class \"cudaDeviceProp\" has no member|"
            rf"{_Q}struct cudaDeviceProp{_Q} has no member named"
        ),
        "CUDA 13 removed fields of cudaDeviceProp (clockRate, memoryClockRate, computeMode, "
        "kernelExecTimeoutEnabled, ...)",
        "cudaDeviceGetAttribute() gives each (cudaDevAttrClockRate, ...); or build with CUDA "
        "12: an nvcc 12.x and torch's CUDA 12 build",
    ),
    ApiBreak(
        # nvcc names the call in its quote of the source (error_lines), g++ in its error line
        re.compile(
            r"too few arguments in function call .*\bcuCtxCreate(?:_v\d)?\s*\("
            rf"|too few arguments to function {_Q}[^‘’']*\bcuCtxCreate"
        ),
        "CUDA 13's cuCtxCreate (the driver API's, cuCtxCreate_v4) takes a CUctxCreateParams* "
        "after the context",
        "cuCtxCreate(&ctx, flags, dev) becomes cuCtxCreate(&ctx, nullptr, flags, dev), which "
        "does what it did; or build with CUDA 12: an nvcc 12.x and torch's CUDA 12 build",
    ),
    ApiBreak(
        re.compile(rf"{_Q}int{_Q} to {_Q}cudaMemLocation{_Q}"),
        "CUDA 13's cudaMemPrefetchAsync and cudaMemAdvise take a cudaMemLocation, not a device "
        "number",
        "pass {cudaMemLocationTypeDevice, device} (and 0 flags to cudaMemPrefetchAsync); or "
        "build with CUDA 12: an nvcc 12.x and torch's CUDA 12 build",
    ),
    ApiBreak(
        re.compile(
            r"\btexture is not a template|"
            rf"{_names(_TEXTURE)}.*(?:undefined|not declared)"
        ),
        "it uses texture references (texture<...>, cudaBindTexture), removed in CUDA 12: no "
        "CUDA that torch 2.10 or later is built for has them",
        "the project's code must move to texture objects (cudaTextureObject_t)",
    ),
    ApiBreak(
        # g++ names the call's argument types in its error line; nvcc on the next one, which
        # error_lines joins to it. A `std::nullopt` for the names comes second (kaolin's mise.cpp).
        re.compile(
            r"\b(?:zeros|ones|empty|rand|randn)\b[^(]*\([^,]*, const (?:std|c10)::nullopt_t&?"
            r"(?:, [^,)]+){4,5}\)"
        ),
        "it calls the named-tensor overload of a factory function (at::zeros(size, names, "
        "dtype, layout, device, pin_memory), its names `std::nullopt`), which torch 2.13 removed "
        "(2.12 has it)",
        "in the project's code, drop the names argument (at::zeros(size, dtype, layout, device, "
        "pin_memory), or at::zeros(size, options)); or build against torch 2.12 or older",
    ),
    ApiBreak(
        re.compile(
            rf"{_names(_NUMPY_OLD)}.*(?:undefined|not declared)"
            rf"|{_Q}PyObject\*{_Q}.* to {_Q}(?:const )?PyArrayObject\*{_Q}"
        ),
        "its C code uses NumPy's old C API (NPY_IN_ARRAY, PyArray_* taking a PyObject*), which "
        "the NumPy 2 installed here no longer has",
        "build against NumPy 1.x: pip install 'numpy<2' in this environment, then build again "
        "(the wheel then needs NumPy 1.x where it runs too); or move the project's code to "
        "NumPy's current names (NPY_ARRAY_IN_ARRAY, a PyArrayObject* for each PyArray_* call)",
    ),
    WARP_BREAK,
    ApiBreak(
        # DROID-SLAM 2dfd39f's droid_kernels.cu with Eigen 3.3.7 in lietorch's eigen folder
        re.compile(
            rf"namespace \"Eigen\" has no member \"{_EIGEN_34}\""
            rf"|{_Q}{_EIGEN_34}{_Q} is not a member of {_Q}Eigen{_Q}"
        ),
        "it uses Eigen 3.4's aliases (Eigen::VectorX<T>, Eigen::MatrixX<T>, ...), and the Eigen "
        "its build found is older",
        "Eigen 3.4 or later where the build looks for it (Debian 12 and Ubuntu 22.04: "
        "libeigen3-dev; a submodule of Eigen: its 3.4 tag)",
    ),
)


# nvcc's front end's error line, which it follows with the source line it is about
_NVCC_ERROR = re.compile(r"\(\d+\): (?:catastrophic )?error\b")


def error_lines(log: str) -> list[str]:
    """Pure: the lines of a build log that report an error (the compiler's, ninja's), each with
    the indented ``argument types are: (...)`` nvcc prints under it, and the source line it
    quotes (``too few arguments in function call`` names no function: its quote does)."""
    lines: list[str] = []
    previous = False  # whether the line before was an error line
    quote = False  # whether nvcc's quote of the source is next
    for line in log.splitlines():
        if previous and line.lstrip().startswith("argument types are:"):
            lines[-1] += " " + line.strip()
        elif quote and line.startswith(" ") and line.strip():
            lines[-1] += " " + line.strip()
            quote = False
        elif previous := "error" in line.lower():
            lines.append(line)
            quote = bool(_NVCC_ERROR.search(line))
        else:
            quote = False
    return lines


def api_breaks(log: str, cxx_standard: str) -> list[ApiBreak]:
    """Pure: the known breaks a failed build's log shows, in the table's order, each once; a
    C++20 break only where the build compiled in C++20 (``cxx_standard``, torch's need)."""
    lines = error_lines(log)
    return [
        known
        for known in API_BREAKS
        if (not known.cxx20 or cxx_standard.endswith("20"))
        and any(known.pattern.search(line) for line in lines)
    ]


# g++'s note on a standard name used without its header (g++ 11 and later).
_FORGOT_INCLUDE = re.compile(
    rf"^(?P<file>[^\s:]+):\d+:\d+: note: {_Q}(?P<name>std::\w+){_Q} is defined in header "
    rf"{_Q}(?P<header><[\w./]+>){_Q}; did you forget",
    re.M,
)


def missing_includes(log: str) -> dict[str, tuple[list[str], list[str]]]:
    """Pure: the standard headers g++ says the project's files use without including, each
    with the names and the files, in the order first met."""
    found: dict[str, tuple[list[str], list[str]]] = {}
    for m in _FORGOT_INCLUDE.finditer(log):
        names, files = found.setdefault(m["header"], ([], []))
        for seen, new in ((names, m["name"]), (files, m["file"])):
            if new not in seen:
                seen.append(new)
    return found


# TH's and THC's headers as a source includes them, and their names in its code.
TH_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]THC?/[\w.]+[>"].*$', re.M)
_TH_NAME = re.compile(rf"\b(?:{_TH})\b")
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
# Files named in an advice line, the rest counted: BEVFusion-sized projects have dozens.
_FILES_NAMED = 6


def th_names(text: str) -> set[str]:
    """Pure: the TH/THC names ``text``'s code uses (includes and comments aside)."""
    return set(_TH_NAME.findall(COMMENT.sub("", TH_INCLUDE.sub("", text))))


def th_uses(sources: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Pure: of ``sources`` (a project's C++ and CUDA files, path -> text), the files that
    include a TH or THC header, and those whose code (includes and comments aside) uses a
    TH/THC name; each sorted."""
    including = sorted(path for path, text in sources.items() if TH_INCLUDE.search(text))
    using = sorted(path for path, text in sources.items() if th_names(text))
    return including, using


def named_files(files: list[str]) -> str:
    """Pure: ``files`` as an advice names them: the first few, the rest counted."""
    shown = ", ".join(files[:_FILES_NAMED])
    rest = len(files) - _FILES_NAMED
    return shown + (f" and {rest} more" if rest > 0 else "")


def th_fix(known_fix: str, sources: Mapping[str, str]) -> str:
    """Pure: what to do about TH/THC, given the project's ``sources``: where the includes are
    all it uses (point-transformer's pointops, six files), deleting them is the whole fix;
    else the port, with the files that need it (``known_fix`` where ``sources`` say nothing)."""
    including, using = th_uses(sources)
    if including and not using:
        return (
            "its code uses nothing of TH/THC but these #include lines: delete them (in "
            f"{named_files(including)}); should a name they brought in then be missing, include "
            "its ATen header instead (<ATen/cuda/CUDAContext.h> for the current stream)"
        )
    if using:
        fix = f"{known_fix}. The files that use TH/THC names: {named_files(using)}"
        left = sorted(
            set().union(*(th_names(sources[path]) for path in using))
            - {*THC_SUCCESSORS, TH_ARG_CHECK, THC_STATE}
        )
        if left:  # the others prebuild's mend replaces, once nothing else of TH is left
            fix += f"; those with no one-to-one successor: {', '.join(left)}"
        return fix
    return known_fix


def api_breaks_advice(
    log: str, cxx_standard: str, torch_version: str, sources: Mapping[str, str] | None = None
) -> str:
    """Pure: what to tell the user about the breaks the log shows; "" where none is known.
    ``sources``: the project's C++ and CUDA files (path -> text), for what the log cannot say
    (a build stops at the first missing THC header, before any use of it)."""
    found = api_breaks(log, cxx_standard)
    includes = missing_includes(log)
    if not found and not includes:
        return ""
    lines = [
        "This is the project's own code meeting a change of torch, CUDA or the C++ standard "
        "library (nothing of this machine's setup can change it):"
    ]
    for known in found:
        why = known.what + (
            f" (torch {torch_version}'s headers need {cxx_standard})" if known.cxx20 else ""
        )
        fix = th_fix(known.fix, sources or {}) if known is TH_BREAK else known.fix
        lines.append(f"- {why}. What to do: {fix}.")
    for header, (names, files) in includes.items():
        lines.append(
            f"- it uses {', '.join(names)} without #include {header} ({', '.join(files)}): "
            "the standard library's headers of older compilers included it for them, newer "
            f"ones (g++ 11 to 13) do not. What to do: add #include {header} to those files "
            "(a one-line change in the project's source)."
        )
    return "\n".join(lines)
