"""Index keys, pure: which pip index of a ``prebuild index`` site a wheel belongs in.

A wheel's index key is the CUDA version and SASS archs its name says, with the torch minor
release of another project's wheel in front: ``0.1.0+cu130.sm90.ptx90`` -> ``cu130-sm90``,
``0.1.0+pt214.cu130.sm90`` -> ``pt214-cu130-sm90``. The site serves one pip index per key
(``SITE/cu130-sm90/simple``), so ``pip install --index-url`` that index can only pick a wheel
made for sm_90; ``prebuild install``, ``prebuild wheel --lock`` and the CI matrix name wheels
by the same key. (Not to be confused with a PEP 825 variant label, ``sm90``: see
``variant_wheels``.)

A classic wheel with no GPU code at all serves every GPU: ``+pt214.cu130.host`` (CUDA host code)
-> ``pt214-cu130-host``, ``+pt214.cpu`` (CPU code) -> ``pt214-cpu``. Its key names no arch
(``IndexKey.host``), and ``index.group_by_index`` lists it in every index of its torch too.
"""

from __future__ import annotations

from dataclasses import dataclass

from prebuild.runtime.arch import Arch, ArchError, parse_arch
from prebuild.tool.variant_wheels import VariantError, parse_filename, parse_label

# A host wheel's label (flags.classic_host_label): HOST_TAG after the CUDA tag for host code
# calling CUDA, CPU_TAG in place of the CUDA tag for CPU code only.
HOST_TAG, CPU_TAG = "host", "cpu"


def index_key_name(cuda_tag: str, archs: tuple[Arch, ...]) -> str:
    """``cu130-sm90``: the name of the index of wheels of these archs built with that CUDA."""
    if not cuda_tag or not archs:
        raise ValueError(f"an index key needs a CUDA tag and archs, got {cuda_tag!r}, {archs!r}")
    return "-".join([cuda_tag, *(a.tag for a in archs)])


@dataclass(frozen=True)
class IndexKey:
    """What a wheel's local version label says: ``cu130.sm80.sm90.ptx90`` (prebuild's own
    stable-ABI wheels), or ``pt214.cu130.sm90`` (another project's wheel, tied to torch 2.14)."""

    cuda_tag: str  # "cu130"; "cpu" for a wheel of CPU code only
    sass: tuple[Arch, ...]
    ptx: tuple[Arch, ...]
    # "pt214"; "" for wheels that serve every torch from their target on (the stable ABI's)
    torch_tag: str = ""

    @property
    def host(self) -> bool:
        """A wheel of host code only (no arch): it serves every GPU of its torch (and CUDA)."""
        return not self.sass

    @property
    def name(self) -> str:
        if self.host:
            name = self.cuda_tag if self.cuda_tag == CPU_TAG else f"{self.cuda_tag}-{HOST_TAG}"
        else:
            name = index_key_name(self.cuda_tag, self.sass)
        return f"{self.torch_tag}-{name}" if self.torch_tag else name

    @property
    def cuda_version(self) -> str | None:
        """``"13.0"`` for ``cu130``; None for CPU code."""
        if self.cuda_tag == CPU_TAG:
            return None
        digits = self.cuda_tag[2:]
        return f"{digits[:-1]}.{digits[-1]}"

    def serves(self, other: IndexKey) -> bool:
        """Whether a wheel of this key belongs in ``other``'s index as well: a host wheel in
        every index of its torch, or of every torch where it names none (a CUDA host one: of
        its CUDA too)."""
        if other.name == self.name:  # one index: its wheels may differ in PTX
            return True
        return (
            self.host
            and self.torch_tag in ("", other.torch_tag)
            and (self.cuda_tag == CPU_TAG or self.cuda_tag == other.cuda_tag)
        )


def _is_tag(part: str, prefix: str) -> bool:
    return part.startswith(prefix) and part[len(prefix) :].isdigit()


def parse_index_key(local: str | None) -> IndexKey | None:
    """The index key in a local version label; None for a label that names none (``cpu``,
    ``cu130``). ``[own.][ptNNN.]cuNNN.smXY[.smXY...][.ptxXY]``, or a host wheel's
    ``[own.][ptNNN.]cuNNN.host``, ``[own.]ptNNN.cpu`` or ``[own.]cpu.host``: a project's own
    label may stand in front."""
    if not local:
        return None
    parts = local.lower().split(".")
    at = next((i for i, part in enumerate(parts) if _is_tag(part, "cu")), None)
    if at is None and CPU_TAG in parts[-2:]:
        at = len(parts) - 1 - parts[::-1].index(CPU_TAG)
    if at is None:
        return None
    # a project's own label may stand in front of a stable-ABI classic wheel's too (no torch)
    torch_tag = parts[at - 1] if at > 0 and _is_tag(parts[at - 1], "pt") else ""
    tail = parts[at + 1 :]
    host = tail == [HOST_TAG] or (parts[at] == CPU_TAG and not tail and bool(torch_tag))
    if parts[at] == CPU_TAG or host:
        # A host wheel is another project's: tied to a torch (``pt214.cpu``), or not
        # (``cu130.host``, ``cpu.host``); prebuild's own CPU wheel (``+cpu``) is keyless.
        return IndexKey(parts[at], (), (), torch_tag) if host else None
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
    local one). None for a wheel whose name says no archs (``+cpu``, a plain wheel), unless it
    is a host wheel's (``+pt214.cpu``, ``+pt214.cu130.host``)."""
    _, version, _, _, label = parse_filename(filename)
    if label is None:
        return parse_index_key(version.local)
    try:
        archs = parse_label(label)
    except VariantError:
        return None
    tags = [a.tag for a in archs.sass] + [f"ptx{a.number}" for a in archs.ptx]
    return parse_index_key(".".join([version.local, *tags])) if version.local else None


def is_host_wheel(filename: str) -> bool:
    """A classic wheel with no GPU code (``+pt214.cu130.host``, ``+pt214.cpu``): it serves
    every GPU of its torch."""
    key = index_key_of(filename)
    return key is not None and key.host
