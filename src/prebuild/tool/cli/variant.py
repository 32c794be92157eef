"""``prebuild variant``: the PEP 825 variant twin of each per-arch wheel already built, and their
variants file."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from prebuild.tool.cli.common import fail, missing_build_extra, out


def variant(
    wheels: list[Path] = typer.Argument(
        ...,
        metavar="WHEEL...",
        show_default=False,
        help="Per-arch wheels prebuild built (+cu130.sm90: prebuild's own, a native or another project's).",
    ),
    out_dir: Path = typer.Option(
        Path("dist"),
        "--out",
        "-o",
        metavar="DIR",
        help="Where the variant wheels and the variants file go.",
    ),
) -> None:
    """Make the PEP 825 variant wheel of each per-arch wheel already built, and their variants file.

    The same libraries, checked against their manifest first; the archs move from the version into a
    variant label (x-0.1.0+cu130-...-sm90.whl) that uv --preview-features wheel-variants matches to
    the GPU. For a release built per arch (by cibuildwheel): publish both with `prebuild index`, the
    per-arch wheels for pip's per-key indexes, the variant wheels for one index of every GPU;
    the plain wheel pip gets there is built with every arch and PTX, PREBUILD_ARCHS_IN_VERSION=0.
    `prebuild wheel --variants` does it all in one build.

    Examples:

      prebuild variant dist/*.whl --out dist

      prebuild index dist --out site
    """
    try:
        from prebuild.tool.builder.compile import BuildError
        from prebuild.tool.builder.outputs import prepare_output_dir
        from prebuild.tool.builder.variant_twin import variant_twin
        from prebuild.tool.variants_files import write_variants_files
    except ModuleNotFoundError as exc:
        raise fail(missing_build_extra(exc)) from None
    from prebuild.runtime.manifest import ManifestError
    from prebuild.tool.inspection import InspectionError

    try:
        prepare_output_dir(out_dir)
        made = [variant_twin(wheel, out_dir) for wheel in wheels]
        written = write_variants_files(made, out_dir)
    except (BuildError, ValueError, InspectionError, ManifestError, OSError) as exc:
        raise fail(str(exc)) from None
    for wheel, twin in zip(wheels, made):
        out.print(f"  {escape(wheel.name)} -> {escape(twin.name)}", highlight=False, soft_wrap=True)
    for path in written:
        out.print(f"Variants file {escape(str(path))}", highlight=False, soft_wrap=True)
