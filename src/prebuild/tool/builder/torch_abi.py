"""Which of torch's ABIs a classic project's libraries use, read from what they link.

A classic ``torch/extension.h`` extension calls torch's C++ functions (``c10::``, ``at::``,
``torch::``), whose mangled names and layouts change between minor releases: its wheel needs the
torch minor release it was built against. A project written against PyTorch's stable ABI
(``torch/csrc/stable``, PyTorch's own extension-cpp example, FA3) calls only its C shim
(``aoti_torch_*``, ``torch_*``), which every later torch keeps: its wheel serves every torch from
its target on, the version ``-DTORCH_TARGET_VERSION`` names (the headers default to the torch
they come with). The symbols decide, not the flags: one C++ call ties the wheel to its torch.
Libraries that call nothing of torch's (loaded by ctypes, as bitsandbytes'; or on Python's and
CUDA's C APIs alone) serve every torch release: only the CUDA major still matters.

Pure functions over symbol names and compiler calls; the builder reads them from the wheel
(``inspection.undefined_symbols``) and from the shims' logs.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass

from prebuild.runtime.manifest import CXX_ABI, NO_TORCH_ABI, STABLE_ABI
from prebuild.runtime.versions import minor, release
from prebuild.tool.builder.nvcc_shim import ABI_DEFINE, is_compile

# A mangled name that reaches into torch's C++ namespaces: a nested name (N, its qualifiers)
# starting with c10, at, torch or caffe2, anywhere in the name (a parameter's type counts).
_TORCH_CXX = re.compile(r"N[rVK]*[RO]?(?:3c10|2at|5torch|6caffe2)")
# torch's Python bindings (libtorch_python): THPVariable_Wrap, THPVariableClass.
_TORCH_PYTHON = re.compile(r"^(?:THP|_Z\d+THP)")
# The stable ABI's C shim: plain C names.
_STABLE = re.compile(r"^(?:aoti_torch_|torch_)\w+$")
TARGET_MACRO = "TORCH_TARGET_VERSION"
# The stable ABI's C declarations, under an include directory of torch's: each function the
# headers guard with ``#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_11_0`` came with that torch.
SHIM_HEADER_DIRS = (
    "torch/csrc/stable/c",
    "torch/csrc/inductor/aoti_torch/c",
    "torch/csrc/inductor/aoti_torch/generated",
)
_FEATURE_GUARD = re.compile(
    r"^#\s*if\b.*TORCH_FEATURE_VERSION\s*>=\s*TORCH_VERSION_(\d+)_(\d+)_\d+"
)
_DECLARED = re.compile(r"\b((?:aoti_torch|torch)_\w+)\s*\(")
_TARGET_DEFINE = re.compile(rf"^(?:-D|--define-macro=)?{TARGET_MACRO}=(.+)$")


def cxx_symbols(undefined: Iterable[str]) -> list[str]:
    """The names among ``undefined`` that use torch's C++ ABI, sorted."""
    return sorted(s for s in undefined if _TORCH_CXX.search(s) or _TORCH_PYTHON.match(s))


# A name in torch's own namespaces (its functions, its classes' members, their vtables and type
# information), not a function of the project's taking torch's types: torch must export it.
_TORCH_OWN = re.compile(r"^_Z(?:T[VIS])?N[rVK]*[RO]?(?:3c10|2at|5torch|6caffe2)")


def missing_torch_names(
    undefined: Mapping[str, Iterable[str]], exported: Container[str]
) -> dict[str, list[str]]:
    """Pure: each library's names (``undefined``: library -> the names it needs from outside
    the wheel) in torch's own namespaces, or of torch's Python bindings, that no library of
    torch exports (``exported``): where a library has one, importing it fails with ``undefined
    symbol``. Only the libraries with some, each's sorted."""
    missing = {
        library: sorted(
            s
            for s in names
            if (_TORCH_OWN.match(s) or _TORCH_PYTHON.match(s)) and s not in exported
        )
        for library, names in undefined.items()
    }
    return {library: names for library, names in missing.items() if names}


def old_abi_calls(calls: Iterable[Sequence[str]]) -> int:
    """Pure: how many compiler calls ask for libstdc++'s pre-C++11 ABI
    (``-D_GLIBCXX_USE_CXX11_ABI=0``, the last definition of a call winning)."""
    count = 0
    for call in calls:
        values = [m[1] for arg in call for m in ABI_DEFINE.findall(arg)]
        count += bool(values) and values[-1] == "0"
    return count


def cxx11_abi(exported: Iterable[str]) -> str:
    """Pure: the libstdc++ ABI of libraries exporting ``exported``: "1" where a name uses the
    C++11 one (``std::__cxx11::basic_string``), else "0"."""
    return "1" if any("__cxx11" in name for name in exported) else "0"


def stable_symbols(undefined: Iterable[str]) -> list[str]:
    """The names among ``undefined`` from the stable ABI's C shim, sorted."""
    return sorted(s for s in undefined if _STABLE.match(s))


def target_value(text: str) -> str | None:
    """``0x020a000000000000`` (or with a ``ULL`` suffix, or in decimal) -> ``"2.10"``: the
    major and minor release in the top two bytes; None for what does not parse as one."""
    text = text.strip().strip("'\"").rstrip("uUlL")
    try:
        value = int(text, 0)
    except ValueError:
        return None
    major, minor_ = (value >> 56) & 0xFF, (value >> 48) & 0xFF
    return f"{major}.{minor_}" if major else None


def call_target(args: Sequence[str]) -> str | None:
    """The stable-ABI target a compiler call sets (``-DTORCH_TARGET_VERSION=0x...``, also
    ``-D TORCH_TARGET_VERSION=...`` and nvcc's ``--define-macro``); None where it sets none."""
    found = None
    for i, arg in enumerate(args):
        if arg in ("-D", "--define-macro", "-define-macro") and i + 1 < len(args):
            arg = f"-D{args[i + 1]}"
        match = _TARGET_DEFINE.match(arg)
        if match:
            found = target_value(match.group(1))  # the last definition wins, as for a compiler
    return found


def shim_versions(headers: Iterable[str]) -> dict[str, str]:
    """Pure: each shim function the headers' texts declare under a feature-version guard, and
    the release that guard names (``torch_from_blob`` -> ``"2.11"``); a function declared
    unguarded (in any of them) predates the stable ABI's versions and is left out. An ``#else``
    branch drops its own guard (it is for older torches), not the guards around it."""
    found: dict[str, str] = {}
    unguarded: set[str] = set()
    for text in headers:
        stack: list[str | None] = []  # each open #if: the release it guards, or None
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith("#"):
                directive = stripped[1:].lstrip()
                if directive.startswith("if"):
                    guard = _FEATURE_GUARD.match(stripped)
                    stack.append(f"{guard.group(1)}.{guard.group(2)}" if guard else None)
                elif directive.startswith(("else", "elif")) and stack:
                    stack[-1] = None
                elif directive.startswith("endif") and stack:
                    stack.pop()
                continue
            versions = [v for v in stack if v is not None]
            if not versions:
                unguarded.update(_DECLARED.findall(line))
                continue
            version = max(versions, key=release)
            for name in _DECLARED.findall(line):
                if name not in found or release(version) < release(found[name]):
                    found[name] = version
    return {name: version for name, version in found.items() if name not in unguarded}


@dataclass(frozen=True)
class TorchAbi:
    """What a classic wheel's libraries need of torch: ``kind`` CXX_ABI (its minor release),
    STABLE_ABI (``target`` and every later torch) or NO_TORCH_ABI (nothing: any torch).
    ``cxx``: for a C++-ABI wheel whose build asked for a stable-ABI target, one symbol that ties
    it and its library (why it is not stable); ``untargeted``: the compile calls that set no
    target (they compile for the build's torch); ``newest``: (function, release) where a shim
    function called came after the compile calls' target, which it raises."""

    kind: str
    target: str | None = None
    cxx: tuple[str, str] | None = None  # (library, symbol)
    untargeted: int = 0
    compiles: int = 0
    # where the functions called need a newer torch than the compile calls target: the newest
    # one, and the release that introduced it
    newest: tuple[str, str] | None = None

    @property
    def stable(self) -> bool:
        return self.kind == STABLE_ABI


def torch_abi(
    undefined: Mapping[str, Iterable[str]],
    calls: Iterable[Sequence[str]],
    torch_version: str,
    introduced: Mapping[str, str] | None = None,
) -> TorchAbi:
    """Pure: the ABI a wheel's libraries (``undefined``: each library's undefined symbols) use,
    given the compiler calls of its build (nvcc's and the host compiler's, as run) and the torch
    it was built against. None where no library uses a symbol of torch's; stable where none
    uses a C++ symbol of torch's and one uses the stable shim; its target is the newest any
    compile call sets, a call that sets none counting as the build torch's release (what the
    headers then compile for), or newer where a shim function called came later
    (``introduced``: ``shim_versions`` of the build torch's headers; a compile call the shims
    did not see cannot hide that)."""
    introduced = introduced or {}
    compiles = [args for args in calls if is_compile(args)]
    targets = [call_target(args) for args in compiles]
    asked = [t for t in targets if t is not None]
    untargeted = len(targets) - len(asked)
    libraries = {name: set(symbols) for name, symbols in undefined.items()}
    tied = [(name, found[0]) for name, s in sorted(libraries.items()) if (found := cxx_symbols(s))]
    shim = any(stable_symbols(s) for s in libraries.values())
    # Every library read (one whose symbols could not be read says nothing: stays tied).
    if not tied and not shim and libraries and all(libraries.values()):
        return TorchAbi(NO_TORCH_ABI, compiles=len(compiles))
    if tied or not shim:
        return TorchAbi(CXX_ABI, cxx=tied[0] if tied and asked else None)
    built = minor(torch_version)
    floor = [built] if untargeted or not asked else []
    target = max([*asked, *floor], key=release)
    called = sorted(
        (release(introduced[name]), name)
        for names in libraries.values()
        for name in stable_symbols(names)
        if name in introduced
    )
    newest = None
    if called and called[-1][0][:2] > release(target)[:2]:
        name = called[-1][1]
        newest = (name, introduced[name])
        target = newest[1]
    return TorchAbi(
        STABLE_ABI, target, untargeted=untargeted, compiles=len(compiles), newest=newest
    )


def stable_note(abi: TorchAbi, torch_version: str, cuda_major: str | None) -> str:
    """The summary's note on a stable-ABI wheel: what it requires and why that release."""
    builds = f" (its CUDA {cuda_major} builds)" if cuda_major else ""
    note = (
        f"its libraries use only PyTorch's stable ABI: the wheel requires torch>={abi.target} "
        f"and serves every torch from {abi.target} on{builds}, not {minor(torch_version)} alone"
    )
    if abi.newest is not None:
        name, version = abi.newest
        note += (
            f"; it calls {name}, which torch {version}'s stable ABI introduced, so the wheel "
            f"needs {version} whatever -D{TARGET_MACRO} its compile calls set"
        )
    elif abi.untargeted and abi.target == minor(torch_version):
        note += (
            f"; {abi.untargeted} of its {abi.compiles} compile calls set no "
            f"-D{TARGET_MACRO}, so they compile for torch {minor(torch_version)}'s stable ABI "
            "(set it in every call, nvcc's included, for an older torch)"
        )
    return note


def torch_free_note(torch_version: str, cuda_major: str | None) -> str:
    """The summary's note on a wheel whose libraries call nothing of torch's."""
    builds = f" (its CUDA {cuda_major} builds)" if cuda_major else ""
    return (
        "its libraries call nothing of torch's (no symbol of its C++ or stable ABI): the wheel "
        f"keeps the project's own torch requirement and serves every torch release{builds}, not "
        f"{minor(torch_version)} alone"
    )


def cxx_note(abi: TorchAbi, torch_version: str) -> str | None:
    """Where the build asked for a stable-ABI target and a library still calls torch's C++
    functions: which, and that the wheel is tied to this torch's minor release; None else."""
    if abi.cxx is None:
        return None
    library, symbol = abi.cxx
    return (
        f"its build sets -D{TARGET_MACRO}, but {library} calls torch's C++ ABI ({symbol}), so "
        f"the wheel needs torch {minor(torch_version)} exactly; with the stable ABI alone "
        "(torch/csrc/stable, no ATen or torch/extension.h) it would serve every later torch too"
    )
