"""What the shims changed of the compiler calls a classic project asked for (read from the
calls they logged, as given and as run): the C++ standards raised or kept, the archs replaced,
``-march=native`` left out; and the summary's note on each."""

from __future__ import annotations

import re
import shlex
from collections import Counter

from prebuild.runtime.arch import Arch
from prebuild.runtime.manifest import CompilerCall
from prebuild.tool.builder.nvcc_shim import (
    ARCH_OPTIONS,
    drop_native,
    is_compile,
    is_device_link,
    is_query,
    nvcc_without_debug_info,
    option_values,
    requested_std,
    std_year,
    without_debug_info,
)
from prebuild.tool.builder.torch_abi import old_abi_calls

# What raised_standards counts for calls that asked for no standard, and were given torch's
# (a compile of torch's headers: nvcc_shim.std_for_torch).
NO_STD = "default"


def failed_call_archs_note(command: str, wheel: tuple[Arch, ...], calls_log: str) -> str:
    """Pure: where the failed step's ``command`` (ninja's, as the project's build wrote it)
    asks nvcc for archs that are not the ``wheel``'s, that it ran for the wheel's (a reader of
    flownet2's ``FAILED:`` line saw ``-gencode arch=compute_50,...`` and no sm_90); "" else.
    ``calls_log``: the file where each call is logged as run."""
    try:
        words = tuple(shlex.split(command))
    except ValueError:
        return ""
    if not words or "nvcc" not in words[0]:
        return ""
    asked, _ = replaced_archs([CompilerCall(words, words)], wheel)
    if not asked:
        return ""
    own = ", ".join(a.sm for a in wheel)
    return (
        f"The failed command above is the project's as its build wrote it; prebuild's nvcc ran "
        f"it for {own}, not for the {', '.join(asked)} it names (each call as run: {calls_log})."
    )


def raised_standards(calls: list[CompilerCall]) -> tuple[tuple[str, int], ...]:
    """The standards the project asked for that the shim raised, each with its number of calls
    (NO_STD for those that asked for none)."""
    pairs = ((requested_std(list(c.given)), requested_std(list(c.run))) for c in calls)
    raised = (given or NO_STD for given, run in pairs if given != run)
    return tuple(sorted(Counter(raised).items()))


def kept_standards(calls: list[CompilerCall], needed: str) -> tuple[tuple[str, int], ...]:
    """The standards older than ``needed`` that calls ran with all the same (their code failed
    in the raised one: the shim compiled them as asked), each with its number of calls."""
    floor = std_year(needed)
    kept = (
        asked
        for c in calls
        if (asked := requested_std(list(c.given))) is not None
        and floor is not None
        and (std_year(asked) or floor) < floor
        and requested_std(list(c.run)) == asked
        and is_compile(c.given)
    )
    return tuple(sorted(Counter(kept).items()))


_ARCH_NAME = re.compile(r"(sm|compute)_(\d+[af]?)")


def replaced_archs(calls: list[CompilerCall], wheel: tuple[Arch, ...]) -> tuple[list[str], int]:
    """Pure: the archs the project's nvcc calls asked for themselves that are not the wheel's
    (BEVFusion's hard-coded sm_70 to sm_86), in order, and how many calls asked for one; each
    named ``sm_80``, or ``compute_80`` where a call asked for its PTX alone (flash-fft-conv's
    ``arch=compute_80,code=compute_80``)."""
    own = {a.sm.removeprefix("sm_").rstrip("af") for a in wheel}
    found: list[str] = []
    asking = 0
    for call in (c for c in calls if not is_query(c.given)):
        named = [
            (kind, n)
            for value in option_values(list(call.given), ARCH_OPTIONS)
            for kind, n in _ARCH_NAME.findall(value)
            if n.rstrip("af") not in own
        ]
        with_sass = {n for kind, n in named if kind == "sm"}
        asking += bool(named)
        names = dict.fromkeys(f"sm_{n}" if n in with_sass else f"compute_{n}" for _, n in named)
        found += [arch for arch in names if arch not in found]
    return found, asking


def debug_left_out_calls(calls: list[CompilerCall]) -> int:
    """Pure: how many compiles of ``calls`` (the host compiler's and nvcc's) asked for debug
    information and ran without it: -g0 after it (nvcc_shim.without_debug_info), or nvcc's -g
    dropped (nvcc_without_debug_info)."""

    def left_out(c: CompilerCall) -> bool:
        given, run = list(c.given), list(c.run)
        host = without_debug_info(given) != given and "-g0" in run
        nvcc = nvcc_without_debug_info(given) != given and nvcc_without_debug_info(run) == run
        return host or nvcc

    return sum(1 for c in calls if left_out(c))


def shim_notes(
    calls: list[CompilerCall],
    host_calls: list[CompilerCall],
    wheel: tuple[Arch, ...],
    raised: tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]],
    needed: str,
    torch_version: str,
) -> tuple[str, ...]:
    """Pure: a note for each way the shims changed what the project asked its compilers for
    (nvcc's ``calls``, the host compiler's, for the ``wheel``'s archs; ``raised``: the standards
    raised in each, raised_standards'): in the summary, since each changes what was compiled."""
    compiles = sum(1 for c in calls if not is_query(c.given))
    notes = []
    if any(raised):
        compilers = (
            ("nvcc", raised[0], compiles),
            ("the host compiler", raised[1], len(host_calls)),
        )
        notes.append(raised_note(compilers, needed, torch_version))
    kept = [
        f"{name}'s -std={std} ({n} {'call' if n == 1 else 'calls'})"
        for name, made in (("nvcc", calls), ("the host compiler", host_calls))
        for std, n in kept_standards(made, needed)
    ]
    if kept:
        notes.append(
            f"Compiled as the project asks, not in {needed.upper()}: {' and '.join(kept)}, "
            f"whose code does not compile in {needed.upper()} (it includes none of torch's "
            "headers, which alone need it; prebuild.json has each call as run)."
        )
    replaced, asking = replaced_archs(calls, wheel)
    if replaced:
        notes.append(
            f"The project asks nvcc for {', '.join(replaced)} itself ({asking} of its {compiles} "
            f"calls): compiled for this wheel's {', '.join(a.sm for a in wheel)} instead "
            "(prebuild.json has each call as given and as run)."
        )
    if native := native_cpu_calls([*calls, *host_calls]):
        notes.append(native_cpu_note(native))
    if changed := abi_changed_calls([*calls, *host_calls]):
        notes.append(
            "The project asks for libstdc++'s pre-C++11 ABI (-D_GLIBCXX_USE_CXX11_ABI=0, "
            f"{changed} of its {compiles + len(host_calls)} compiler calls); torch "
            f"{torch_version} is built with the C++11 ABI: compiled with it (with the other, "
            "its functions taking a std::string are not torch's, and the wheel would fail to "
            "load with `undefined symbol`)."
        )
    return tuple(notes)


def abi_changed_calls(calls: list[CompilerCall]) -> int:
    """How many of the calls asked for libstdc++'s pre-C++11 ABI and ran with torch's
    (nvcc_shim.abi_for_torch)."""
    return sum(1 for c in calls if old_abi_calls([c.given]) and not old_abi_calls([c.run]))


def native_cpu_calls(calls: list[CompilerCall]) -> int:
    """How many of the calls asked for a native CPU target, which the shim left out."""
    return sum(1 for c in calls if drop_native(list(c.given)) != list(c.given))


def native_cpu_note(calls: int) -> str:
    """Pure: the note of a build whose ``calls`` asked for ``-march=native``."""
    return (
        f"The project asks for -march=native ({calls} compiler {'call' if calls == 1 else 'calls'}"
        "): left out, since the wheel would run only on CPUs with every instruction set of this "
        "machine's (prebuild.json has each nvcc call as given and as run). An explicit "
        "target (-march=x86-64-v3) is kept."
    )


def is_device_linked(calls: list[CompilerCall]) -> bool:
    """Whether one of a build's nvcc calls was a device link (of relocatable device code)."""
    return any(is_device_link(call.given) for call in calls)


def raised_note(
    compilers: tuple[tuple[str, tuple[tuple[str, int], ...], int], ...],
    needed: str,
    torch_version: str,
) -> str:
    """One line: which standards were raised in how many of each compiler's calls, and why;
    ``compilers``: (its name, the standards raised with their calls, its compiles)."""

    def standard(std: str) -> str:
        return "no standard (its default, C++17)" if std == NO_STD else f"-std={std}"

    asked = " and ".join(
        f"{name} for "
        + ", ".join(f"{standard(std)} ({calls} of its {total} calls)" for std, calls in raised)
        for name, raised, total in compilers
        if raised
    )
    return (
        f"The project asks {asked}; torch {torch_version}'s headers need {needed.upper()}: raised to "
        "it (recorded in prebuild.json)."
    )


def portable_calls(calls: list[CompilerCall], places: dict[str, str]) -> tuple[CompilerCall, ...]:
    """Pure: ``calls`` as a wheel records them, the build machine's folders (``places``: a
    folder -> the name it is shown by, ``/tmp/prebuild-wheel-x1y2`` -> ``<work>``) named
    instead: its user's home and temporary folders stay out of the wheel, and the same build
    records the same calls. The longest folder first (the work folder inside a venv's)."""
    order = sorted((p.rstrip("/") for p in places if p.rstrip("/")), key=len, reverse=True)
    pattern = re.compile("|".join(rf"{re.escape(p)}(?=/|$|[^\w.-])" for p in order))

    def name(m: re.Match[str]) -> str:
        named = places.get(m[0], places.get(m[0] + "/", m[0]))
        # glued to a path before it (setuptools' temp folder + an absolute source path): the
        # folder's own leading "/" kept as the separator
        before = m.string[: m.start()]
        glued = "/" in before and before[-1] not in "/=:,; "  # not -I/..., not -rpath,/a:/b
        return f"/{named}" if glued else named

    def shown(arg: str) -> str:
        return pattern.sub(name, arg)

    if not order:
        return tuple(calls)
    return tuple(CompilerCall(tuple(map(shown, c.given)), tuple(map(shown, c.run))) for c in calls)
