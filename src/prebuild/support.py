"""What we build and support: the one table of CUDA versions x GPU archs.

Pure data and pure functions. The CI wheel matrix (``prebuild matrix``, read by
``.github/workflows/wheels.yml``), README's support table (between the
``support-table`` markers, checked by a test) and the default arch list of a source build
(``prebuild.build.flags.DEFAULT_ARCHS``) all come from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from prebuild.arch import Arch, parse_arch


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
        """``cu130``: as in the wheels' local version label and the index's variant names."""
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


def variant_name(cuda_tag: str, archs: tuple[Arch, ...]) -> str:
    """``cu130-sm90``: one index per variant is named this way (``prebuild index``)."""
    return "-".join([cuda_tag, *(a.tag for a in archs)])


def matrix(releases: tuple[CudaRelease, ...] = CUDA_RELEASES) -> dict:
    """The GitHub Actions matrix: one job per (CUDA version, arch)."""
    include = []
    for release in releases:
        for arch in release.archs:
            include.append({
                "cuda": release.version,
                "cuda_tag": release.tag,
                "arch": arch.sm,
                "ptx": arch == release.ptx_arch,
                "variant": variant_name(release.tag, (arch,)),
            })  # fmt: skip
    return {"include": include}


def support_table(releases: tuple[CudaRelease, ...] = CUDA_RELEASES) -> str:
    """README's support table (Markdown), from the same table as the matrix."""
    head = ["GPU arch", "GPUs"] + [f"CUDA {r.version} (`{r.tag}`)" for r in releases]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for gpu in GPU_ARCHS:
        cells = [f"`{gpu.arch.sm}` ({gpu.family})", gpu.examples]
        for r in releases:
            if gpu.arch not in r.archs:
                cells.append("-")
            else:
                cells.append(f"`{variant_name(r.tag, (gpu.arch,))}`" + (" + PTX" if gpu.arch == r.ptx_arch else ""))
        lines.append("| " + " | ".join(cells) + " |")
    newer = ["newer GPUs", "through the driver's JIT"]
    newer += [f"PTX in `{variant_name(r.tag, (r.ptx_arch,))}`" for r in releases]
    lines.append("| " + " | ".join(newer) + " |")
    return "\n".join(lines) + "\n"


README_START = "<!-- support-table:start -->"
README_END = "<!-- support-table:end -->"


def readme_with_table(readme: str, table: str | None = None) -> str:
    """README's text with the part between the markers replaced by the generated table."""
    table = support_table() if table is None else table
    start, end = readme.index(README_START), readme.index(README_END)
    return readme[: start + len(README_START)] + "\n" + table + readme[end:]
