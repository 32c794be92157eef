"""``prebuild index``: a static pip package index (PEP 503) of a folder of wheels, one index per
CUDA version and archs."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from prebuild.tool.cli.common import count, fail, out


def index(
    dist_dir: Path = typer.Argument(
        ..., help="The folder holding the wheels (*.whl).", show_default=False
    ),
    site: Path = typer.Option(
        ...,
        "--out",
        "-o",
        help="Where the index site is written (replaced whole).",
        show_default=False,
    ),
) -> None:
    """Write a pip package index (PEP 503, static files) for the wheels in DIST_DIR.

    One index per index key -- the CUDA version and archs in a wheel's version label, e.g.
    SITE/cu130-sm90/simple/, and for another project's wheels also the torch release, e.g.
    SITE/pt214-cu130-sm90/simple/ -- so pip can only pick a wheel for that GPU, plus
    SITE/simple/ with every wheel. Wheels are stored once in SITE/wheels/; every link carries its
    sha256.
    SITE/index.json lists the same for `prebuild install --from SITE`. Serve SITE as static
    files (GitHub Pages), or use it in place through file://.

    Exit codes: 0 written; 2 no wheels, a bad wheel, or SITE holds something else.

    Examples:

      prebuild index dist --out site

      pip install prebuild --index-url file://$PWD/site/cu130-sm90/simple

      pip install prebuild --index-url https://OWNER.github.io/prebuild/simple
    """
    from prebuild.tool.index import (
        ALL,
        SiteError,
        build_index,
        install_command,
        usual_index_url,
        variant_commands,
        variant_projects,
    )

    try:
        indexes = build_index(dist_dir, site)
    except (SiteError, OSError) as exc:
        raise fail(str(exc)) from None
    out.print(
        f"[bold]{count(len(indexes[ALL]), 'wheel')} indexed in {escape(str(site))}/:[/]",
        highlight=False,
    )
    for key, wheels in indexes.items():
        where = f"{site}/{key}/simple" if key else f"{site}/simple (every wheel)"
        out.print(
            f"  {escape(where)}: {escape(', '.join(w.filename for w in wheels))}",
            highlight=False,
            soft_wrap=True,
        )
    site_url = site.resolve().as_uri()
    extra = usual_index_url()
    if len(indexes) > 1:  # per-key indexes besides the one of every wheel
        out.print(
            f"Install from one index (dependencies such as torch come from {escape(extra)}; "
            "use --no-deps instead when they are installed):",
            highlight=False,
        )
    for key, wheels in indexes.items():
        for project in sorted({w.project for w in wheels}) if key != ALL else ():
            out.print(
                f"  {escape(install_command(site_url, key, project, extra_index=extra))}",
                highlight=False,
                soft_wrap=True,
            )
    for project in variant_projects(
        {p.name: {} for p in (site / "wheels").glob("*-variants.json")}
    ):
        uv, pip = variant_commands(site_url, project, extra)
        out.print(
            f"Any GPU, one command ({escape(project)}'s PEP 825 variant wheels; uv's preview):\n  {escape(uv)}\n"
            f"pip knows no variants and gets the plain wheel:\n  {escape(pip)}",
            highlight=False,
            soft_wrap=True,
        )
