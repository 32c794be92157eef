"""Why a classic build wrote no wheel, and what a wheel of no GPU code is: the refusals and
notes, each naming what the project's build did and what to run instead."""

from __future__ import annotations

import re
from pathlib import Path

from prebuild.runtime.manifest import CUDA_HOST_CODE, BuiltLibrary
from prebuild.tool.builder.compile import BuildError
from prebuild.tool.builder.plan import PlannedWheel
from prebuild.tool.builder.toolchain import ToolchainError, Torch


def cpu_torch_error(torch: Torch, detail: str = "") -> ToolchainError:
    """The refusal of a CPU torch for a classic project (``detail``: what it already caused)."""
    return ToolchainError(
        f"torch {torch.version_string} is a CPU build: a classic CUDAExtension links against "
        "torch's CUDA libraries, so it needs a CUDA build of torch in this environment, the "
        "torch its wheels will require. Install one, e.g. pip install 'torch==2.14.1' "
        "(a CUDA 13.0 build) or pip install torch --index-url https://download.pytorch.org/whl/cu130"
        + (f". ({detail})" if detail else "")
    )


def answer_failed(answer_error: str, command: str, where: tuple[int, str] | None = None) -> str:
    """Pure: what a refusal says of a setup.py that failed with torch.cuda answering for a GPU
    (``answer_error``, at its line ``where`` if known) and, built again with torch's own
    answers, compiled no GPU code."""
    at = f" at its line {where[0]} (`{where[1]}`)" if where else ""
    line = (
        " That line asks more of a GPU than torch.cuda's answers give (it may run CUDA while it "
        "builds): with it removed or guarded, the project may build here."
        if where
        else ""
    )
    return (
        f"Its setup.py failed with torch.cuda answering for a GPU{at} ({answer_error}), and "
        "built again with torch's own answers (no GPU is visible here) it compiled no GPU "
        f"code.{line} Where a GPU is visible its setup.py may find what it asks: run "
        f"`{command}` on such a machine."
    )


def sentence(advice: str) -> str:
    """Pure: switches_advice's words where they start a sentence ("its setup.py reads ..." ->
    "Its ..."); a known project's, which start with its name, as they are."""
    return advice[:1].upper() + advice[1:] if advice.startswith(("its ", "the ")) else advice


def no_extension_message(
    wheel_name: str,
    sites: list[str],
    advice: str,
    *,
    switches: bool = False,
    answer_error: str = "",
    command: str = "",
    installed: str = "",
    answer_where: tuple[int, str] | None = None,
    imported: tuple[int, str] | None = None,
    compiled: int = 0,
    tried: str = "",
) -> str:
    """Why a project's wheel is refused when it holds no shared library at all; ``advice``
    (build_switches.switches_advice): how its setup.py may be asked to build one, given where it
    reads build ``switches``; ``answer_error``: how its setup.py failed with torch.cuda answering
    for a GPU (then built with torch's own answers), ``command`` the prebuild command;
    ``installed``: what its build installed into the environment instead (env_writes');
    ``imported``: the line of its setup.py that imports code compiling at first use
    (jit_sites.setup_imports_jit), ``compiled`` the objects its build compiled; ``tried``: how
    running its first-use compiles ahead of time failed (jit_ahead.FirstUse.refusal)."""
    if installed:
        # It compiled, and put the result elsewhere (hqq 0.2.8): neither pure Python nor JIT.
        return (
            f"{wheel_name} holds no compiled library: {installed}. prebuild packages what a "
            "project's own build puts in its wheel, and this one's puts its extension elsewhere. "
            "No wheel was written."
        )
    if sites:
        ran = ""
        if imported:
            ran = f" Its setup.py imports that code (line {imported[0]}: `{imported[1]}`)" + (
                f", so the compile ran during this build ({objects(compiled)} compiled), into "
                "the build's copy of the project: none of it is in the wheel."
                if compiled
                else ", which compiles when imported."
            )
        # With switches the project has a build of its own to ask for (DeepSpeed's ops).
        port = (
            ""
            if switches
            else " To build it ahead of time, its setup.py would declare those sources as an "
            "extension (`ext_modules=[CUDAExtension(name, sources)]` with "
            "`cmdclass={'build_ext': BuildExtension}`), and its code import the built module "
            "where it calls load()"
            + (", its setup.py not importing it for its version" if imported else "")
            + f": then `{command}` builds it."
        )
        return (
            f"{wheel_name} holds no compiled library: the project builds no extension at install "
            f"time, it compiles when first used (torch.utils.cpp_extension at {', '.join(sites)})."
            f"{ran} {tried + ' ' if tried else ''}"
            f"{sentence(advice)}.{port} No wheel was written."
        )
    if answer_error:
        # It asks more of the GPU than the answer gives: it is not pure Python.
        return (
            f"{wheel_name} holds no compiled library. "
            f"{answer_failed(answer_error, command, answer_where)}"
            + (f" Or here: {advice}." if switches else "")
            + " No wheel was written."
        )
    if switches:
        return (
            f"{wheel_name} holds no compiled library: the project compiled nothing at install "
            f"time as it is (if it is pure Python, pip install it as it is). {sentence(advice)}. "
            "No wheel was written."
        )
    return (
        f"{wheel_name} holds no compiled library: the project builds no extension at install time (it is pure "
        "Python, or builds its code some other way), so there is nothing for prebuild to compile: pip install it "
        "as it is. No wheel was written."
    )


def host_only_message(
    wheel_name: str,
    libraries: tuple[BuiltLibrary, ...],
    build_log: Path,
    advice: str,
    answer_error: str = "",
    command: str = "",
    *,
    switches: bool = True,
    answer_where: tuple[int, str] | None = None,
) -> str:
    """Why a wheel whose libraries hold no GPU code at all, of a project with CUDA sources, is
    refused: the project's build chose not to compile them. Quotes what its build log says
    about it (``advice``: the project's switches, if ``switches`` it names some), and how its
    setup.py failed with torch.cuda answering for a GPU, if it did (answer_failed): then the
    advice is an alternative only where it names switches."""
    log = build_log.read_text(encoding="utf-8", errors="replace") if build_log.exists() else ""
    said: list[str] = []
    for line in log.splitlines():
        # (prebuild's own shim toolkit, cuda-shim/, is named in the lines of CMake's checks)
        if not re.search(
            r"(?i)accelerator|\bcuda\b.{0,40}(?:not|skip|disabl|unavailable)",
            line.replace("cuda-shim", ""),
        ):
            continue
        line = re.sub(r"^(\[[^\]]*\]\s*)+", "", line.strip())  # timestamps, levels, places
        line = line if len(line) <= 160 else line[:157] + "..."
        if line not in said:
            said.append(line)
    quoted = f" Its build log says: {' | '.join(said[:3])}." if said else ""
    return (
        f"The wheel its build made ({wheel_name}, not kept): its libraries "
        f"({', '.join(lib.file for lib in libraries)}) hold no GPU code "
        "(SASS none, PTX none): the project's build compiled them for the host only, which its "
        f"build decides (with no GPU visible, some pick a CPU build).{quoted} "
        + (
            f"{answer_failed(answer_error, command, answer_where)}"
            f"{' Or here: ' + advice + '.' if switches else ''}"
            if answer_error
            else f"{sentence(advice)}."
        )
        + f" Full build log: {build_log}. No wheel was written."
    )


def unresolved_message(
    wheel_name: str,
    missing: dict[str, list[str]],
    shown: dict[str, str],
    torch_version: str,
    old_abi: int,
    calls: int,
) -> str:
    """Why a wheel whose libraries need names of torch's that torch does not export is refused
    (its import would fail with ``undefined symbol``): ``missing`` (torch_abi.missing_torch_names),
    each name as ``shown`` (demangled); ``old_abi`` of the build's ``calls`` ran with the
    pre-C++11 ABI (the shims give compiles of torch's headers torch's: a call they did not
    see as one, or an object a --build-dir kept from an earlier prebuild)."""
    names = [name for library in sorted(missing) for name in missing[library]]
    listed = "; ".join(
        f"{library}: "
        + ", ".join(f"`{shown.get(n, n)}`" for n in found[:3])
        + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        for library, found in sorted(missing.items())
    )
    first = (
        f"{wheel_name} would not load: its libraries need {counted(len(names), 'function')} "
        f"of torch {torch_version}'s that torch's libraries do not export ({listed}), so "
        f"importing one fails with `undefined symbol: {names[0]}`."
    )
    if old_abi:
        return (
            f"{first} Its build asks for libstdc++'s pre-C++11 ABI (`-D_GLIBCXX_USE_CXX11_ABI=0`"
            f", {old_abi} of its {calls} compiler calls), and torch {torch_version} is built "
            "with the C++11 ABI: its functions taking a std::string have other names. Remove "
            "that definition from the project's build (torch's own build flags define the "
            "right one), then build again. No wheel was written."
        )
    return (
        f"{first} They are functions torch removed or keeps internal (not exported for "
        "extensions), or declared in its headers and defined nowhere: the project's code "
        f"cannot call them with torch {torch_version}. No wheel was written."
    )


def undefined_message(wheel_name: str, missing: dict[str, str], shown: dict[str, str]) -> str:
    """Why a wheel whose libraries failed to load beside torch on names nothing defines
    (``missing``: library -> the name, load_trial.undefined_names; each ``shown`` demangled)
    is refused: importing them fails wherever it is installed."""
    listed = "; ".join(f"{lib}: `{shown.get(n, n)}`" for lib, n in sorted(missing.items()))
    first = next(iter(sorted(missing.items())))[1]
    which = "a library" if len(missing) == 1 else f"{len(missing)} libraries"
    return (
        f"{wheel_name} would not load: loaded beside torch here, {which} of it failed on a "
        "name that neither the wheel's "
        f"libraries, nor torch's, nor the libraries they link define ({listed}), so importing "
        f"it fails with `undefined symbol: {first}` on every machine. A function the project "
        "declares and no source it compiles defines: a source its setup.py leaves out of the "
        "extension, or compiles only under a condition (an environment variable, a GPU check) "
        "that this build did not meet. No wheel was written."
    )


def variant_refusal(wheel_name: str, problem: str, planned: PlannedWheel) -> str:
    """Why a ``--variants`` wheel is refused once its libraries are read back (``problem``,
    ``variant_wheels.built_variant_problem``), and the build that works."""
    archs = ",".join(a.sm for a in planned.archs)
    return (
        f"{wheel_name}: the project compiled other GPU code than the variant {planned.label!r} "
        f"says: {problem}. Build it without --variants (prebuild wheel --arch {archs} ...): its "
        "wheel is then labelled with the archs its libraries hold, and `prebuild install` and "
        "the index keys offer it only to the GPUs that code runs on. No wheel was written."
    )


def host_wheel_note(
    code: str, links: list[str], torch_needed: str, cuda: str, asked: bool = False
) -> str:
    """What the user should know of a wheel with no GPU code: one wheel serves every GPU, with
    the torch it needs (``ProjectManifest.torch_needed``: ``2.14``, ``>= 2.10``, ``of any
    release``). ``asked``: the project has CUDA sources, and the extensions asked of it have
    none (build_switches.host_code_asked)."""
    if code == CUDA_HOST_CODE:
        what = (
            f"CUDA host code (it links {', '.join(links)}) and no GPU code: one wheel serves "
            f"every GPU, with torch {torch_needed} for CUDA {cuda.split('.')[0]}"
        )
    else:
        why = (
            "the extensions asked of it are CPU code" if asked else "the project has no CUDA source"
        )
        what = (
            f"CPU code only ({why}): one wheel serves every GPU and machines with none, with "
            f"any build of torch {torch_needed}"
        )
    return f"its libraries hold {what}"


def counted(count: int, noun: str) -> str:
    """Pure: "1 file", "3 files"."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def objects(count: int) -> str:
    """Pure: "1 object", "3 objects"."""
    return counted(count, "object")


def kept_objects_error(error: BuildError, earlier: int, work: Path) -> BuildError:
    """``error``, saying that the build kept ``earlier`` objects an earlier run left in the
    workspace ``work`` (--build-dir), and how to build without them."""
    if not earlier:
        return error
    return BuildError(
        f"{error}\n\nThis build kept {objects(earlier)} an earlier run compiled in {work}: "
        f"to compile everything afresh, delete {work} first.",
        log=error.log,
    )
