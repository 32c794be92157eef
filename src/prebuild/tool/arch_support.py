"""What we build and support: the one table of CUDA versions x GPU archs.

Pure data and pure functions. The CI wheel matrix (``prebuild matrix``, read by
``.github/workflows/wheels.yml``), the support table of ``docs/compatibility.md`` (between
the ``support-table`` markers, checked by a test) and the default arch list of a source build
(``prebuild.tool.builder.flags.DEFAULT_ARCHS``) all come from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from prebuild.runtime import versions
from prebuild.runtime.arch import Arch, parse_arch
from prebuild.runtime.compat import cuda_torch_command
from prebuild.tool.index_keys import index_key_name


@dataclass(frozen=True)
class GpuArch:
    arch: Arch
    family: str
    examples: str


# Turing through Blackwell: every arch both CUDA 12.8+ and 13.x nvcc build SASS for.
GPU_ARCHS: tuple[GpuArch, ...] = (
    GpuArch(parse_arch("sm_75"), "Turing", "T4, RTX 20xx, Quadro RTX"),
    GpuArch(parse_arch("sm_80"), "Ampere", "A100, A30"),
    GpuArch(parse_arch("sm_86"), "Ampere", "RTX 30xx, A10, A40, RTX A6000"),
    GpuArch(parse_arch("sm_89"), "Ada", "RTX 40xx, L4, L40S, RTX 6000 Ada"),
    GpuArch(parse_arch("sm_90"), "Hopper", "H100, H200, GH200"),
    GpuArch(parse_arch("sm_100"), "Blackwell", "B200, GB200"),
    GpuArch(parse_arch("sm_120"), "Blackwell", "RTX 50xx, RTX PRO 6000"),
)


@dataclass(frozen=True)
class CudaRelease:
    version: str  # "13.0": the nvcc the wheels are built with
    archs: tuple[Arch, ...]

    @property
    def tag(self) -> str:
        """``cu130``: as in the wheels' local version label and their index keys."""
        major, minor = self.version.split(".")
        return f"cu{major}{minor}"

    @property
    def ptx_arch(self) -> Arch:
        """PTX of the newest arch goes into that arch's wheel, so GPUs newer than every
        listed arch still run the kernels through the driver's JIT."""
        return max(self.archs)


ALL_ARCHS = tuple(g.arch for g in GPU_ARCHS)

# The CUDA majors we publish wheels for: a wheel's CUDA kernels run with a torch of the same
# CUDA major (prebuild.runtime.compat.cuda_major_error).
CUDA_RELEASES: tuple[CudaRelease, ...] = (
    CudaRelease("12.8", ALL_ARCHS),
    CudaRelease("13.0", ALL_ARCHS),
)


def build_matrix(
    releases: tuple[CudaRelease, ...] = CUDA_RELEASES, archs: tuple[Arch, ...] | None = None
) -> dict:
    """The GitHub Actions matrix: one job per (CUDA version, arch); ``archs`` keeps only those.
    The newest arch of each CUDA version's jobs also gets PTX, for every GPU newer than it.
    An entry's ``index_key`` names its wheel's index (the workflows name the artifact by it)."""
    include = []
    for release in releases:
        chosen = [a for a in release.archs if archs is None or a in archs]
        for arch in chosen:
            include.append(
                {
                    "cuda": release.version,
                    "cuda_tag": release.tag,
                    "arch": arch.sm,
                    "ptx": arch == max(chosen),
                    "index_key": index_key_name(release.tag, (arch,)),
                }
            )
    return {"include": include}


def torch_minor(version: str) -> str:
    """``"2.14"`` from ``2.14``, ``2.14.1`` or ``2.14.1+cu130``; ValueError when it is not a
    torch version."""
    parts = versions.release(version)
    if not parts:
        raise ValueError(f"{version!r} is not a torch version (e.g. 2.14)")
    if len(parts) < 2:
        raise ValueError(f"{version!r}: give torch's minor release too (e.g. 2.14)")
    return f"{parts[0]}.{parts[1]}"


def torch_tag(torch_version: str) -> str:
    """``pt214`` for torch 2.14.1+cu130: the torch minor release a classic extension is tied to
    (its wheels' local label and index key)."""
    return "pt" + torch_minor(torch_version).replace(".", "")


def torch_minor_of(tag: str) -> str:
    """``pt214`` -> ``2.14``: the inverse of ``torch_tag``."""
    return f"{tag[2]}.{tag[3:]}"


def classic_matrix(
    torch_versions: tuple[str, ...],
    releases: tuple[CudaRelease, ...] = CUDA_RELEASES,
    archs: tuple[Arch, ...] | None = None,
) -> dict:
    """The matrix for another project's classic (torch/extension.h) wheels, which are tied to
    one torch minor release: one job per (torch, CUDA version, arch). Each entry also says
    how that job gets its CUDA build of torch (PyTorch's index for that CUDA release)."""
    include = []
    for version in dict.fromkeys(torch_minor(v) for v in torch_versions):
        tag = torch_tag(version)
        for entry in build_matrix(releases, archs)["include"]:
            include.append(
                {
                    "torch": version,
                    "torch_tag": tag,
                    **entry,
                    "index_key": f"{tag}-{entry['index_key']}",
                    "torch_install": cuda_torch_command(entry["cuda"], version, same_minor=True),
                }
            )
    return {"include": include}


def support_table(releases: tuple[CudaRelease, ...] = CUDA_RELEASES) -> str:
    """The docs' support table (Markdown), from the same table as the matrix."""
    head = ["GPU arch", "GPUs"] + [f"CUDA {r.version} (`{r.tag}`)" for r in releases]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for gpu in GPU_ARCHS:
        cells = [f"`{gpu.arch.sm}` ({gpu.family})", gpu.examples]
        for r in releases:
            if gpu.arch not in r.archs:
                cells.append("-")
            else:
                cells.append(
                    f"`{index_key_name(r.tag, (gpu.arch,))}`"
                    + (" + PTX" if gpu.arch == r.ptx_arch else "")
                )
        lines.append("| " + " | ".join(cells) + " |")
    newer = ["newer GPUs", "through the driver's JIT"]
    newer += [f"PTX in `{index_key_name(r.tag, (r.ptx_arch,))}`" for r in releases]
    lines.append("| " + " | ".join(newer) + " |")
    return "\n".join(lines) + "\n"


# Where the support table sits in docs/compatibility.md.
TABLE_START = "<!-- support-table:start -->"
TABLE_END = "<!-- support-table:end -->"


def page_with_table(page: str, table: str | None = None) -> str:
    """A page's text (``docs/compatibility.md``) with the part between the markers replaced by
    the generated table; ValueError when the page lacks a marker."""
    if not isinstance(page, str):
        raise TypeError(f"page_with_table takes the page's text, got {type(page).__name__}")
    table = support_table() if table is None else table
    start, end = page.find(TABLE_START), page.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no {TABLE_START} ... {TABLE_END} markers, in that order")
    return page[: start + len(TABLE_START)] + "\n" + table + page[end:]
