"""Index keys, pure: which pip index of a ``prebuild index`` site a wheel belongs in.

A wheel's index key is the CUDA version and SASS archs its name says, with the torch minor
release of another project's wheel in front: ``0.1.0+cu130.sm90.ptx90`` -> ``cu130-sm90``,
``0.1.0+pt214.cu130.sm90`` -> ``pt214-cu130-sm90``. The site serves one pip index per key
(``SITE/cu130-sm90/simple``), so ``pip install --index-url`` that index can only pick a wheel
made for sm_90; ``prebuild install``, ``prebuild wheel --lock`` and the CI matrix name wheels
by the same key. (Not to be confused with a PEP 825 variant label, ``sm90``: see
``variant_wheels``.)
"""

from __future__ import annotations

from dataclasses import dataclass

from prebuild.runtime.arch import Arch, ArchError, parse_arch
from prebuild.tool.variant_wheels import VariantError, parse_filename, parse_label


def index_key_name(cuda_tag: str, archs: tuple[Arch, ...]) -> str:
    """``cu130-sm90``: the name of the index of wheels of these archs built with that CUDA."""
    if not cuda_tag or not archs:
        raise ValueError(f"an index key needs a CUDA tag and archs, got {cuda_tag!r}, {archs!r}")
    return "-".join([cuda_tag, *(a.tag for a in archs)])


@dataclass(frozen=True)
class IndexKey:
    """What a wheel's local version label says: ``cu130.sm80.sm90.ptx90`` (prebuild's own
    stable-ABI wheels), or ``pt214.cu130.sm90`` (another project's wheel, tied to torch 2.14)."""

    cuda_tag: str
    sass: tuple[Arch, ...]
    ptx: tuple[Arch, ...]
    torch_tag: str = ""  # "pt214"; "" for wheels that serve every torch from their target on

    @property
    def name(self) -> str:
        name = index_key_name(self.cuda_tag, self.sass)
        return f"{self.torch_tag}-{name}" if self.torch_tag else name

    @property
    def cuda_version(self) -> str:
        """``"13.0"`` for ``cu130``."""
        digits = self.cuda_tag[2:]
        return f"{digits[:-1]}.{digits[-1]}"


def _is_tag(part: str, prefix: str) -> bool:
    return part.startswith(prefix) and part[len(prefix) :].isdigit()


def parse_index_key(local: str | None) -> IndexKey | None:
    """The index key in a local version label; None for a label that names none (``cpu``).
    ``[own.][ptNNN.]cuNNN.smXY[.smXY...][.ptxXY]``: a project's own label may stand in front."""
    if not local:
        return None
    parts = local.lower().split(".")
    at = next((i for i, part in enumerate(parts) if _is_tag(part, "cu")), None)
    if at is None:
        return None
    torch_tag = parts[at - 1] if at > 0 and _is_tag(parts[at - 1], "pt") else ""
    if at > 0 and not torch_tag:
        return None  # only a torch tag may stand right before the CUDA tag
    sass, ptx = [], []
    try:
        for part in parts[at + 1 :]:
            if part.startswith("sm"):
                sass.append(parse_arch(part[2:]))
            elif part.startswith("ptx"):
                ptx.append(parse_arch(part[3:]))
            else:
                return None
    except ArchError:
        return None
    if not sass:
        return None
    return IndexKey(parts[at], tuple(sorted(sass)), tuple(sorted(ptx)), torch_tag)


def index_key_of(filename: str) -> IndexKey | None:
    """The index key a wheel's name says: its local version label's, or a PEP 825 variant
    wheel's (``...+cu130-...-sm90.whl``: the archs in the variant label, CUDA and torch in the
    local one). None for a wheel whose name says no archs (``+cpu``, a plain wheel)."""
    _, version, _, _, label = parse_filename(filename)
    if label is None:
        return parse_index_key(version.local)
    try:
        archs = parse_label(label)
    except VariantError:
        return None
    tags = [a.tag for a in archs.sass] + [f"ptx{a.number}" for a in archs.ptx]
    return parse_index_key(".".join([version.local, *tags])) if version.local else None
