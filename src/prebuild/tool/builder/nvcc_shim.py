"""The nvcc, and the host C++ compiler, that classic projects' builds call: the real ones, with
the archs prebuild was asked for and the C++ standard torch's headers need.

Projects choose archs themselves (from the build machine's GPU, their own variables, or a
hard-coded ``-gencode`` list used when no GPU is visible, which makes torch ignore
``TORCH_CUDA_ARCH_LIST``). ``prebuild wheel PROJECT`` therefore puts this program first, as
``$CUDA_HOME/bin/nvcc`` of a shim toolkit, for the project's build: every arch option of each
call is dropped and exactly the requested ``-gencode`` options are added, every other flag
(``--use_fast_math``, ``--maxrregcount``, ...) is kept, and every call is logged, as given and
as run. With a compile cache, each compile runs through its launcher, with the options whose
value sccache cannot tell from an input file written as one argument. A ``-std`` older than the
one torch's headers need (a project asking for C++17 from a torch that needs C++20) is raised to
it, in its own dialect (``gnu++17`` to ``gnu++20``); a standard is never lowered, and none is
added. Where a compile fails in the raised standard, it runs again as asked: a file that does
not include torch's headers needs no C++20, and its code may not compile there (fmt 9 under
nvcc, ``u8`` literals as ``char``); the call that succeeded is the one logged, and where both
fail the raised standard's output is shown. A compile of torch's headers defining libstdc++'s
ABI (``-D_GLIBCXX_USE_CXX11_ABI=0``) gets torch's value: with the other, its functions taking a
std::string are not torch's (``undefined symbol``). A native CPU target (``-march=native``, also
through ``-Xcompiler``) is dropped: it would make the wheel need the build machine's CPU; an
explicit one (``-march=x86-64-v3``) is kept.

The same program is the build's ``$CXX`` (torch's BuildExtension compiles every C++ file with
it): without a gencode list (``PREBUILD_NVCC_GENCODE`` unset) it changes no arch option, and
raises, logs and launches the host compiler's calls as it does nvcc's (``"cxx": ["-std=c++17"]``
is as common as nvcc's, and fails the same way in torch 2.14's headers). There, the real
compiler is the user's ``$CXX`` with its flags, and the launcher the compile cache's or else
``$CXX``'s own (``ccache g++``). nvcc's calls also get the fatbin compression ``prebuild wheel
--compress`` asks for (``--compress-mode=size``), unless a call chooses its own.

``rewrite_args`` is pure; ``main`` runs as ``python -m prebuild.tool.builder.nvcc_shim ARGS`` and
reads its settings from the environment (``SHIM_ENV_*``). Standard library only: it starts
once per compiler call.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping

SHIM_ENV_REAL = (
    "PREBUILD_NVCC_REAL"  # the real nvcc (or host compiler, flags of $CXX's too), shell words
)
SHIM_ENV_GENCODE = (
    "PREBUILD_NVCC_GENCODE"  # JSON list of the -gencode options; unset: the host compiler
)
SHIM_ENV_LOG = (
    "PREBUILD_NVCC_LOG"  # a file each call is appended to, as given and as run (JSON lines)
)
SHIM_ENV_MIN_STD = (
    "PREBUILD_NVCC_MIN_STD"  # the oldest C++ standard torch's headers compile in ("c++20")
)
SHIM_ENV_COMPRESS = (
    "PREBUILD_NVCC_COMPRESS"  # JSON list of the fatbin compression options (wheel --compress)
)
# Compiles run as LAUNCHER NVCC ARGS: the compile cache's launcher, or $CXX's own (ccache).
SHIM_ENV_LAUNCHER = "PREBUILD_NVCC_LAUNCHER"
# The libstdc++ ABI torch is built with ("1": the C++11 one, "0", or "" where unknown): a call
# compiling torch's headers that defines _GLIBCXX_USE_CXX11_ABI gets torch's value.
SHIM_ENV_CXX11_ABI = "PREBUILD_NVCC_CXX11_ABI"
# "1": a host compile asking for debug information (Python's own -g, which setuptools passes)
# gets -g0 after it: the wheel's libraries are stripped of it (debug_info.py), and torch's
# headers compile in about two thirds of the time without it (35.5 against 22.9 s of CPU for a
# torch/extension.h file, 2.1 against 1.7 GB, 2026-12-07); an nvcc compile's -g (its host
# code's debug information, quip-sharp's) is dropped. Unset or "": as asked (--no-strip).
SHIM_ENV_NO_DEBUG = "PREBUILD_NVCC_NO_DEBUG"
# The nvcc that runs device links ("-dlink"), where the real one's nvlink cannot find libnvvm
# (cuda_shim.device_link_toolkit), shell words; "" or unset: the real one.
SHIM_ENV_DEVICE_LINK = "PREBUILD_NVCC_DEVICE_LINK"
# nvcc's own variables: flags it reads before and after every command line. The shim makes
# them part of the call (and takes them out of nvcc's environment), so that the arch rewrite and
# the standard raise reach them too, and the log and a compile cache's key hold them.
NVCC_ENV_FLAGS = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
# How nvcc splits them (checked with nvcc 13.0): at whitespace, where double quotes group and
# stay ("-DX=\"a b\"" defines X as "a b"); single quotes and backslashes are plain characters.
_NVCC_ENV_WORD = re.compile(r'(?:[^\s"]|"[^"]*"?)+')
# Options that make a call a device link (nvlink runs, and loads libnvvm for -dlto).
DEVICE_LINK_OPTIONS = ("-dlink", "--device-link")

# Options that choose archs: "--opt VALUE" or "--opt=VALUE" (nvcc accepts both spellings).
ARCH_OPTIONS = ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code")
# Calls that compile nothing: passed through untouched.
QUERY_OPTIONS = ("--version", "-V", "--help", "-h", "--list-gpu-code", "--list-gpu-arch")
# How a call names its C++ standard: "-std=c++17" or "-std c++17" (and the long spellings).
STD_OPTIONS = ("-std", "--std")
# Options whose value sccache (0.16) does not know follows them: "-diag-suppress 20012,186" reads
# to it as a second input file ("multiple input files": the call is not cached, gsplat's every
# nvcc call). Given to a compile cache as "-diag-suppress=20012,186", which nvcc reads the same.
CACHE_JOINED_OPTIONS = (
    "-diag-suppress",
    "--diag-suppress",
    "-diag-error",
    "--diag-error",
    "-diag-warn",
    "--diag-warn",
)


# The dialects a standard is spelt in: "c++17" (ISO) and "gnu++17" (GCC's and Clang's extensions).
STD_DIALECTS = ("c++", "gnu++")


def split_std(standard: str) -> tuple[str, int] | None:
    """``gnu++17`` -> ("gnu++", 2017), ``c++03`` -> ("c++", 2003); None for anything else
    (``c++2a``, ``c++1z``: left as they are)."""
    for dialect in STD_DIALECTS:
        two = standard[len(dialect) :]
        if standard.startswith(dialect) and len(two) == 2 and two.isdigit():
            return dialect, 1900 + int(two) if int(two) >= 90 else 2000 + int(two)
    return None


def std_year(standard: str) -> int | None:
    """``c++17`` -> 2017, ``gnu++03`` -> 2003; None for anything else (left as it is)."""
    split = split_std(standard)
    return split[1] if split else None


def option_values(args: list[str], options: tuple[str, ...]) -> list[str]:
    """The values of ``options`` in ``args``, in order ("--opt VALUE" or "--opt=VALUE", as nvcc
    reads them)."""
    found = []
    for i, arg in enumerate(args):
        if arg in options and i + 1 < len(args):
            found.append(args[i + 1])
        elif arg.startswith(tuple(f"{opt}=" for opt in options)):
            found.append(arg.split("=", 1)[1])
    return found


def option_value(args: list[str], options: tuple[str, ...]) -> str | None:
    """The value of the last of ``options`` in ``args``, None if none is given."""
    values = option_values(args, options)
    return values[-1] if values else None


def requested_std(args: list[str]) -> str | None:
    """The standard a call asks for, None if none."""
    return option_value(args, STD_OPTIONS)


# A CPU target of "this machine": a wheel built with it runs only on CPUs with every instruction
# set of the build machine's (s4's kernels: AVX-512 from -march=native, SIGILL on a Zen 3).
NATIVE_CPU = ("-march=native", "-mcpu=native")
# How nvcc passes options to the host compiler: "-Xcompiler A,B" or "-Xcompiler=A,B".
HOST_OPTIONS = ("-Xcompiler", "--compiler-options")


def drop_native(args: list[str]) -> list[str]:
    """Pure: ``args`` without a native CPU target, given to the compiler itself or through
    nvcc's ``-Xcompiler`` lists (torch quotes their items: ``'-fPIC'``); the rest unchanged."""

    def kept(items: str) -> str:
        return ",".join(x for x in items.split(",") if x.strip("'\"") not in NATIVE_CPU)

    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        joined = next((o for o in HOST_OPTIONS if arg.startswith(f"{o}=")), None)
        if arg in NATIVE_CPU:
            pass
        elif arg in HOST_OPTIONS and i + 1 < len(args):
            if rest := kept(args[i + 1]):
                out += [arg, rest]
            i += 1
        elif joined is not None:
            if rest := kept(arg[len(joined) + 1 :]):
                out.append(f"{joined}={rest}")
        else:
            out.append(arg)
        i += 1
    return out


def raise_std(args: list[str], minimum: str | None) -> list[str]:
    """``args`` with every standard older than ``minimum`` raised to its year, in the standard's
    own dialect (``-std=gnu++17`` -> ``-std=gnu++20`` for a ``c++20`` minimum); the rest unchanged."""
    floor = std_year(minimum) if minimum else None
    if floor is None:
        return list(args)

    def raised(value: str) -> str:
        split = split_std(value)
        if split is None or split[1] >= floor:
            return value
        return f"{split[0]}{floor % 100:02d}"

    out = []
    for i, arg in enumerate(args):
        if i > 0 and args[i - 1] in STD_OPTIONS:
            out.append(raised(arg))
        elif arg.startswith(tuple(f"{opt}=" for opt in STD_OPTIONS)):
            option, value = arg.split("=", 1)
            out.append(f"{option}={raised(value)}")
        else:
            out.append(arg)
    return out


# Where torch's headers are: an include folder of its wheel (torch/include, and the API's
# folder under it), as torch's builds and CMake's find_package(Torch) pass them.
_TORCH_INCLUDE = "torch/include"


def compiles_torch_headers(args: list[str]) -> bool:
    """Pure: whether a call compiles a source with torch's headers on its include path."""
    return is_compile(args) and any(_TORCH_INCLUDE in arg for arg in args)


def std_for_torch(args: list[str], minimum: str | None, host: bool) -> list[str]:
    """``args`` with the standard torch's headers need (``minimum``) added where the call
    compiles a C++ or CUDA source with them and asks for no standard (a CMake build that sets
    none: the compiler's default, C++17, meets torch 2.14's `#error C++20`), in a host
    compiler's GCC dialect (``gnu++20``) or as nvcc spells it; the rest unchanged."""
    if (
        not minimum
        or requested_std(args) is not None
        or not compiles_torch_headers(args)
        or any(arg.endswith(".c") for arg in args)
    ):
        return list(args)
    split = split_std(minimum)
    if split is None:
        return list(args)
    return [*args, f"-std={'gnu++' if host else 'c++'}{split[1] % 100:02d}"]


# A definition of libstdc++'s ABI (``-D_GLIBCXX_USE_CXX11_ABI=0``, also in -Xcompiler's list).
ABI_DEFINE = re.compile(r"(_GLIBCXX_USE_CXX11_ABI=)(\d)")


def abi_for_torch(args: list[str], abi: str | None) -> list[str]:
    """``args`` with each definition of libstdc++'s ABI set to torch's (``abi``) where the call
    compiles with torch's headers (VPTQ's CMake defines ``_GLIBCXX_USE_CXX11_ABI=0``, as
    projects did for torch's wheels before 2.7): built with the other ABI, its functions taking
    a std::string (every TORCH_CHECK whose message is built at run time) are not torch's, and
    the library fails to load with ``undefined symbol``. A call defining none is unchanged."""
    if not abi or not compiles_torch_headers(args):
        return list(args)
    return [ABI_DEFINE.sub(rf"\g<1>{abi}", arg) for arg in args]


# An option asking a host compiler for debug information: -g, -g1..-g3, -ggdb, -ggdb3, -gdwarf-4.
DEBUG_OPTION = re.compile(r"-g(?:[1-3]|gdb[0-3]?|dwarf(?:-\d+)?)?")


def without_debug_info(args: list[str]) -> list[str]:
    """Pure: a host compile asking for debug information with ``-g0`` last (GCC and Clang: the
    last -g option wins; neither changes the code it generates for -g); the rest unchanged."""
    if not is_compile(args) or not any(DEBUG_OPTION.fullmatch(arg) for arg in args):
        return list(args)
    return [*args, "-g0"]


# nvcc's option for its host code's debug information (-G, the device code's, changes the code
# it generates: kept), and the options whose value, the next argument, is another tool's flags.
NVCC_DEBUG_OPTIONS = ("-g", "--debug")
_PASSES_ON = re.compile(r"-X\w+|--\w+-options")


def nvcc_without_debug_info(args: list[str]) -> list[str]:
    """Pure: an nvcc compile without its own ``-g`` (the host code's debug information, which
    changes no code), the rest unchanged (``-Xcompiler -g`` is the host compiler's: kept)."""
    if not is_compile(args):
        return list(args)
    return [
        arg
        for i, arg in enumerate(args)
        if arg not in NVCC_DEBUG_OPTIONS or (i and _PASSES_ON.fullmatch(args[i - 1]))
    ]


def is_device_link(args: list[str] | tuple[str, ...]) -> bool:
    """A device link (``-dlink``): nvlink runs, and loads libnvvm for ``-dlto``."""
    return any(a in DEVICE_LINK_OPTIONS for a in args)


def is_query(args: list[str] | tuple[str, ...]) -> bool:
    """A call that compiles nothing and writes no file (``nvcc --version``, as torch's build asks)."""
    return any(a in QUERY_OPTIONS for a in args)


# An arch-specific (sm_90a: Hopper's wgmma and setmaxnreg) or family-specific (sm_100f) target
# in a call's own arch options: its number and suffix.
SPECIFIC_ARCH = re.compile(r"\b(?:sm|compute|lto)_(\d+)([af])\b")
# One SASS entry of prebuild's gencode list: -gencode=arch=compute_90,code=sm_90.
SASS_GENCODE = re.compile(r"^-gencode=arch=compute_(\d+),code=sm_(\d+)$")


def specific_archs(args: list[str]) -> dict[str, str]:
    """Pure: the arch-specific or family-specific targets a call's own arch options ask for, by
    arch number: ``-gencode arch=compute_90a,code=sm_90a`` -> {"90": "a"}."""
    return dict(m for v in option_values(args, ARCH_OPTIONS) for m in SPECIFIC_ARCH.findall(v))


def keep_specific(gencode: list[str], specific: dict[str, str]) -> list[str]:
    """Pure: ``gencode`` with the SASS of each arch the call asks for in its specific variant
    compiled in that variant (sm_90 -> sm_90a): the call's code may use instructions only that
    variant has (SageAttention's and FlashAttention 3's Hopper kernels: wgmma). An ``a`` variant
    runs on its compute capability alone, which the manifest then records (classic
    ``recorded_sass``). PTX entries stay as asked."""
    out = []
    for entry in gencode:
        m = SASS_GENCODE.match(entry)
        suffix = specific.get(m[1]) if m and m[1] == m[2] else None
        out.append(
            f"-gencode=arch=compute_{m[1]}{suffix},code=sm_{m[1]}{suffix}" if suffix else entry
        )
    return out


def rewrite_args(args: list[str], gencode: list[str]) -> list[str]:
    """``args`` without any arch option, plus ``gencode`` (an arch the call asks for in its
    arch-specific variant kept in it, ``keep_specific``); a query (``--version``) unchanged."""
    if is_query(args):
        return list(args)
    gencode = keep_specific(gencode, specific_archs(args))
    out: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            continue
        if arg in ARCH_OPTIONS:
            skip_value = True  # the value is the next argument
            continue
        if arg.startswith(tuple(f"{opt}=" for opt in ARCH_OPTIONS)):
            continue
        out.append(arg)
    return out + list(gencode)


def add_compression(args: list[str], compression: list[str]) -> list[str]:
    """Pure: ``args`` with ``compression`` (``--compress-mode=size``) added, unless the call is
    a query or chooses its fatbin's compression itself (``--no-compress``, its own
    ``--compress-mode``, ``-Xfatbin=-compress-all``): the project's choice stands."""
    own = any(  # -compress-all may be -Xfatbin's value, the next argument
        arg.lstrip("-").startswith(("compress", "no-compress"))
        or (arg.startswith(("-Xfatbin", "--fatbin-options")) and "compress" in arg)
        for arg in args
    )
    return list(args) if own or is_query(args) else [*args, *compression]


def joined_values(args: list[str], options: tuple[str, ...] = CACHE_JOINED_OPTIONS) -> list[str]:
    """Pure: ``args`` with each of ``options`` and its value as one ``--opt=VALUE`` argument."""
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] in options and i + 1 < len(args):
            out.append(f"{args[i]}={args[i + 1]}")
            i += 2
        else:
            out.append(args[i])
            i += 1
    return out


def env_flags(environ: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Pure: the flags nvcc adds before and after a command line, from ``environ``'s
    NVCC_PREPEND_FLAGS and NVCC_APPEND_FLAGS, split as nvcc splits them."""
    prepend, append = (_NVCC_ENV_WORD.findall(environ.get(name, "")) for name in NVCC_ENV_FLAGS)
    return prepend, append


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    real = shlex.split(os.environ.get(SHIM_ENV_REAL, ""))
    linker = shlex.split(os.environ.get(SHIM_ENV_DEVICE_LINK, ""))
    if linker and is_device_link(args):
        real = linker
    if not real:
        print(f"prebuild nvcc shim: {SHIM_ENV_REAL} is not set", file=sys.stderr)
        return 2
    gencode = os.environ.get(SHIM_ENV_GENCODE)  # unset: the host compiler, no arch to choose
    if gencode is not None:  # nvcc: what its variables add is part of the call, logged as given
        prepend, append = env_flags(os.environ)
        args = [*prepend, *args, *append]
        for name in NVCC_ENV_FLAGS:
            os.environ.pop(name, None)
    given = rewrite_args(args, json.loads(gencode)) if gencode is not None else args
    given = add_compression(given, json.loads(os.environ.get(SHIM_ENV_COMPRESS) or "[]"))
    if os.environ.get(SHIM_ENV_NO_DEBUG) == "1":  # as drop_native: not undone if a compile fails
        given = without_debug_info(given) if gencode is None else nvcc_without_debug_info(given)
    as_asked = [*real, *drop_native(given)]
    minimum = os.environ.get(SHIM_ENV_MIN_STD)
    torch_std = std_for_torch(drop_native(given), minimum, host=gencode is None)
    torch_abi = abi_for_torch(torch_std, os.environ.get(SHIM_ENV_CXX11_ABI))
    # a compile without torch's headers keeps its own standard (CompressAI's pybind11 modules:
    # raising their C++17 said "torch's headers need C++20" of code that includes none)
    raised = raise_std(torch_abi, minimum) if compiles_torch_headers(torch_abi) else torch_abi
    command = [*real, *raised]
    launcher = shlex.split(os.environ.get(SHIM_ENV_LAUNCHER, ""))

    def invocation(cmd: list[str]) -> list[str]:
        if launcher and not is_query(args):
            return [*launcher, cmd[0], *joined_values(cmd[1:])]
        return cmd

    if command != as_asked and is_compile(args):
        # Raised: run it, and where it fails, as asked (the output of the raised standard's
        # run shown only where that fails too).
        try:
            first = subprocess.run(invocation(command), capture_output=True)
            shown = first
            if first.returncode != 0:
                again = subprocess.run(invocation(as_asked), capture_output=True)
                if again.returncode == 0:
                    command, shown = as_asked, again
        except KeyboardInterrupt:  # Ctrl-C reached the compiler too: stop as it did, quietly
            return 130
        sys.stdout.buffer.write(shown.stdout)
        sys.stdout.flush()
        sys.stderr.buffer.write(shown.stderr)
        log_call(args, command[1:])
        return shown.returncode
    log_call(args, command[1:])
    cmd = invocation(command)
    os.execvp(cmd[0], cmd)
    return 0  # not reached


def is_compile(args: list[str] | tuple[str, ...]) -> bool:
    """A call that compiles a source to an object (``-c``), not a link or a query."""
    return "-c" in args or "--compile" in args


def log_call(given: list[str], run: list[str]) -> None:
    """Every call, changed or not, as given and as run: what nvcc wrote is read from here
    (classic.nvcc_outputs). One write with O_APPEND: calls running at once (ninja -j) never
    interleave their lines."""
    log = os.environ.get(SHIM_ENV_LOG)
    if not log:
        return
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps({"given": given, "run": run}) + "\n").encode())
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
