"""``prebuild inspect``: the CUDA archs really compiled into each library of a wheel, an installed
package or one library, checked against its manifest."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from prebuild.tool.cli.common import err, fail, out


def inspect(
    target: Path = typer.Argument(
        ...,
        metavar="TARGET",
        show_default=False,
        help="A wheel (.whl), an installed package directory, one library (.so), or the name "
        "of an installed distribution (prebuild, or a project prebuild built).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
) -> None:
    """Show the CUDA archs really compiled into each library, and check them against the manifest.

    The SASS (machine code) and PTX archs are read from each library's ELF .nv_fatbin section, not
    taken from the manifest; then each library's sha256 and archs are compared with the manifest:
    prebuild/_manifest.json in prebuild's own wheels, .dist-info/prebuild.json in another project's
    wheel built by `prebuild wheel --arch ... PROJECT` (which also names the torch and CUDA it was
    built with). In prebuild's own libraries, code that statically linked libraries bring along (the
    CUDA runtime's own kernels) is shown as "linked" and not compared. The newest glibc and
    libstdc++ symbol versions the libraries reference are shown too: a machine with older ones
    cannot load them.

    Exit codes: 0 everything agrees (or a lone library with no manifest beside it);
    1 the binaries and the manifest disagree; 2 the path or name cannot be read.

    Examples:

      prebuild inspect dist/prebuild-0.1.0+cu130.sm80-cp310-abi3-linux_x86_64.whl

      prebuild inspect prebuild           # the installed package

      prebuild inspect fused-ssim         # a project prebuild built, installed

      prebuild inspect build/prebuild/cuda/cu130-sm80/_C_cuda.abi3.so --json
    """
    import json

    from prebuild.runtime.c_runtimes import describe
    from prebuild.runtime.manifest import ManifestError
    from prebuild.tool.inspection import InspectionError, inspect_path

    try:
        report = inspect_path(target)
    except (InspectionError, ManifestError, OSError) as exc:
        raise fail(str(exc)) from None
    if as_json:
        out.print_json(json.dumps(report.to_dict()))
        raise typer.Exit(0 if report.ok else 1)

    out.print(f"[bold]{escape(str(report.target))}[/]: {escape(report.summary)}", highlight=False)
    table = Table()
    for column in ("library", "kind", "SASS", "PTX", "linked", "sha256"):
        table.add_column(column, overflow="fold")
    for lib in report.libraries:
        code = report.code_of(lib)
        table.add_row(
            lib.file,
            report.kind_of(lib.file) or "-",
            ", ".join(a.sm for a in code.sass) or "-",
            ", ".join(a.compute for a in code.ptx) or "-",
            ", ".join(a.sm for a in code.linked_sass) or "-",
            lib.sha256[:12],
        )
    out.print(table)
    if needs := describe(report.runtime):
        out.print(f"Needs at least {needs} to load.", highlight=False)
    if report.variant is not None:
        out.print(
            f"PEP 825 variant: {escape(report.variant_text)}", highlight=False, soft_wrap=True
        )
    for d in report.disagreements:
        err.print(f"[bold red]disagrees:[/] {escape(d.file)}: {escape(d.message)}", highlight=False)
    if not report.ok:
        raise typer.Exit(1)
    if report.manifest is not None:
        agree = " and its variant properties" if report.variant is not None else ""
        out.print(f"[green]The binaries match the manifest{agree}.[/]")
