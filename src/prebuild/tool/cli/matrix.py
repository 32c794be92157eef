"""``prebuild matrix``: the CI wheel matrix (CUDA versions x GPU archs) of the support table, as
JSON for GitHub Actions, or the docs' support table."""

from __future__ import annotations

import typer

from prebuild.runtime.arch import Arch
from prebuild.tool.cli.common import arch_option, fail, listed


def matrix(
    markdown: bool = typer.Option(
        False,
        "--markdown",
        help="Print the support table (Markdown) instead of the JSON matrix: the table "
        "docs/compatibility.md holds between its support-table markers (page_with_table in "
        "prebuild.tool.arch_support writes it there).",
    ),
    cuda: list[str] | None = typer.Option(
        None,
        "--cuda",
        metavar="VERSIONS",
        help="Only these CUDA versions (e.g. --cuda 13.0); comma-separated or repeated.",
    ),
    arch: list[Arch] | None = arch_option(
        "Only these archs of the table (e.g. --arch sm_80,sm_90)."
    ),
    torch: list[str] | None = typer.Option(
        None,
        "--torch",
        metavar="VERSIONS",
        help="For another project's classic (torch/extension.h) wheels, which are tied to one torch "
        "minor release: one job per torch too (e.g. --torch 2.13,2.14).",
    ),
) -> None:
    """Print the CI wheel matrix (CUDA versions x GPU archs) as JSON for GitHub Actions.

    One job per (CUDA version, arch); each entry has cuda, cuda_tag, arch, ptx (true for the newest
    arch, whose wheel also carries PTX for GPUs newer than any listed) and index_key (the pip
    index the wheel is published under, e.g. cu130-sm90). The same table in
    src/prebuild/tool/arch_support.py makes the docs' support table (--markdown) and the default
    archs of a source build.

    With --torch, the matrix is for another project's wheels (`prebuild wheel --arch ARCH PROJECT`):
    one job per (torch, CUDA version, arch), each entry also with torch, torch_tag, an index_key
    such as pt214-cu130-sm90, and torch_install, the pip command that installs that torch's CUDA
    build in the job. Each torch is paired with each CUDA version given: pass --cuda for the ones PyTorch
    publishes builds of that torch for.

    Examples:

      prebuild matrix               # {"include": [{"cuda": "12.8", ...}, ...]}

      echo "matrix=$(prebuild matrix)" >> "$GITHUB_OUTPUT"  # in a workflow

      prebuild matrix --cuda 13.0 --markdown

      prebuild matrix --torch 2.14 --cuda 13.0 --arch sm_80,sm_90  # a project's
    """
    import json

    from prebuild.tool import arch_support

    releases = arch_support.CUDA_RELEASES
    if cuda:
        wanted = set(listed(cuda))
        known = {r.version for r in releases}
        unknown = sorted(wanted - known)
        if unknown:
            raise fail(
                f"no CUDA {', '.join(unknown)} in the support table; it has {', '.join(sorted(known))}"
            )
        releases = tuple(r for r in releases if r.version in wanted)
    archs = tuple(arch) if arch else None
    if archs:
        missing = [a.sm for a in archs if a not in arch_support.ALL_ARCHS]
        if missing:
            raise fail(
                f"{', '.join(missing)} is not in the support table; it has "
                f"{', '.join(a.sm for a in arch_support.ALL_ARCHS)}"
            )
    if markdown:
        if torch or arch:
            raise fail(
                "--markdown prints the support table of prebuild's own wheels: it takes --cuda only"
            )
        print(arch_support.support_table(releases), end="")
    elif torch:
        try:
            print(
                json.dumps(
                    arch_support.classic_matrix(tuple(listed(torch)), releases, archs),
                    separators=(",", ":"),
                )
            )
        except ValueError as exc:
            raise fail(str(exc)) from None
    else:
        print(json.dumps(arch_support.build_matrix(releases, archs), separators=(",", ":")))
