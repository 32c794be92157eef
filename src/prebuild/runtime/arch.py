"""CUDA architectures: parsing, naming, and which code runs on which GPU.

Pure functions over version numbers only (no CUDA, no torch), so every rule is unit-tested
with made-up compute capabilities. The build (``prebuild wheel --arch``), the manifest and
the runtime loader all go through this module: it is the one arch parser of the project.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

# Spellings accepted for one arch: sm_80, sm80, compute_80, 80, 8.0, sm_90a, 9.0a, 100f.
_ARCH_RE = re.compile(
    r"""^\s*(?:(?:sm|compute)_?)?
        (?:(?P<major_dot>\d+)\.(?P<minor_dot>\d)|(?P<digits>\d{2,3}))
        (?P<suffix>[af]?)\s*$""",
    re.IGNORECASE | re.VERBOSE,
)


class ArchError(ValueError):
    """An arch string that cannot be parsed, or an arch the compiler cannot build."""


@dataclass(frozen=True, order=True)
class Arch:
    """One CUDA architecture, e.g. ``Arch(9, 0, "a")`` for ``sm_90a``.

    ``suffix`` is ``""`` (portable within the major), ``"a"`` (arch-specific features: runs
    only on exactly this capability) or ``"f"`` (family-specific: this major, minor >= ours).
    """

    major: int
    minor: int
    suffix: str = ""

    def __post_init__(self) -> None:
        if self.major < 1 or not 0 <= self.minor <= 9 or self.suffix not in ("", "a", "f"):
            raise ArchError(f"not a CUDA architecture: {self.major}.{self.minor}{self.suffix}")

    @property
    def number(self) -> str:
        """``"90a"`` for sm_90a: the part nvcc puts after ``sm_`` / ``compute_``."""
        return f"{self.major}{self.minor}{self.suffix}"

    @property
    def sm(self) -> str:
        return f"sm_{self.number}"

    @property
    def compute(self) -> str:
        return f"compute_{self.number}"

    @property
    def tag(self) -> str:
        """``"sm90a"``: the spelling used in wheel local-version labels (no underscore)."""
        return f"sm{self.number}"

    @property
    def capability(self) -> tuple[int, int]:
        return (self.major, self.minor)

    def __str__(self) -> str:
        return self.sm


def parse_arch(text: str) -> Arch:
    """Parse one arch spelling (``sm_80``, ``80``, ``8.0``, ``sm_90a``, ``compute_120``)."""
    m = _ARCH_RE.match(text)
    if not m:
        raise ArchError(f"cannot parse CUDA arch {text!r}: write it as sm_80, 80, 8.0 or sm_90a")
    if m["digits"]:
        digits = m["digits"]
        major, minor = int(digits[:-1]), int(digits[-1])
    else:
        major, minor = int(m["major_dot"]), int(m["minor_dot"])
    return Arch(major, minor, m["suffix"].lower())


def parse_arch_list(text: str | Iterable[str]) -> tuple[Arch, ...]:
    """Parse a list given as ``"sm_80,sm_90"`` (commas, semicolons or spaces) or as strings.

    Duplicates written differently (``80`` and ``sm_80``) collapse; the result is sorted.
    An empty list is allowed: it means "CPU code only".
    """
    items = re.split(r"[,;\s]+", text) if isinstance(text, str) else list(text)
    return tuple(sorted({parse_arch(item) for item in items if item.strip()}))


def check_supported(archs: Iterable[Arch], supported: Iterable[Arch]) -> None:
    """Refuse any arch the compiler cannot build, naming the ones it can.

    ``supported`` is what ``nvcc --list-gpu-code`` prints (plain ``sm_XY`` only); the ``a``
    (arch-specific) suffix exists from 9.0 and the ``f`` (family) suffix from 10.0 on, for
    supported bases.
    """
    supported_plain = {Arch(a.major, a.minor) for a in supported}
    bad = []
    for arch in archs:
        base_ok = Arch(arch.major, arch.minor) in supported_plain
        suffix_ok = (
            arch.suffix == ""
            or (arch.suffix == "a" and arch.major >= 9)
            or (arch.suffix == "f" and arch.major >= 10)
        )
        if not (base_ok and suffix_ok):
            bad.append(arch.sm)
    if bad:
        valid = ", ".join(a.sm for a in sorted(supported_plain))
        raise ArchError(
            f"this nvcc cannot build {', '.join(bad)}. It builds: {valid} "
            "(plus the 'a' suffix, such as sm_90a, from 9.0 on, and the 'f' suffix from 10.0 on)"
        )


class CodeKind(enum.Enum):
    SASS = "sass"  # machine code for this GPU: runs as is
    PTX = "ptx"  # intermediate code: the driver JIT-compiles it on first use
    NONE = "none"  # nothing in the binary runs on this GPU


def sass_runs_on(arch: Arch, capability: tuple[int, int]) -> bool:
    """SASS for sm_XY runs on the same major with minor >= Y; ``sm_XYa`` only on exactly X.Y."""
    major, minor = capability
    if arch.suffix == "a":
        return capability == arch.capability
    return major == arch.major and minor >= arch.minor


def ptx_runs_on(arch: Arch, capability: tuple[int, int]) -> bool:
    """PTX for compute_XY runs on any capability >= X.Y (driver JIT); ``a``/``f`` PTX does not
    leave its arch / family."""
    if arch.suffix == "a":
        return capability == arch.capability
    if arch.suffix == "f":
        return capability[0] == arch.major and capability[1] >= arch.minor
    return capability >= arch.capability


@dataclass(frozen=True)
class CodeChoice:
    kind: CodeKind
    arch: Arch | None  # the arch whose code will run, None when nothing fits


def select_code(
    capability: tuple[int, int], sass: Iterable[Arch], ptx: Iterable[Arch]
) -> CodeChoice:
    """What the CUDA driver will run on a GPU of ``capability``, given the code in a binary.

    Matching SASS wins (the newest matching one, as the driver picks); otherwise the newest
    PTX that is not newer than the GPU; otherwise nothing.
    """
    sass_fit = [a for a in sass if sass_runs_on(a, capability)]
    if sass_fit:
        return CodeChoice(CodeKind.SASS, max(sass_fit))
    ptx_fit = [a for a in ptx if ptx_runs_on(a, capability)]
    if ptx_fit:
        return CodeChoice(CodeKind.PTX, max(ptx_fit))
    return CodeChoice(CodeKind.NONE, None)


def format_capability(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


def arch_for_capability(capability: tuple[int, int]) -> Arch:
    """The plain arch whose SASS is made for this GPU (``(8, 6)`` -> ``sm_86``)."""
    return Arch(capability[0], capability[1])
