"""``prebuild new``: a native project, created from the templates, that `prebuild wheel` builds."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from prebuild.tool.cli.common import fail, out


def new(
    name: str = typer.Argument(
        ...,
        metavar="NAME",
        show_default=False,
        help="The project's name (its distribution; the package is NAME with '-' as '_').",
    ),
    directory: Path | None = typer.Option(
        None,
        "--dir",
        metavar="DIR",
        help="Where to create it (default: ./NAME); must be absent or empty.",
    ),
) -> None:
    """Create a native project: kernels against PyTorch's stable ABI, built by `prebuild wheel`.

    The project has one example op, scale_add(x, y, alpha) = x + alpha * y: its per-element math in
    one header shared by the CPU kernel and the CUDA kernel, the CUDA kernel written as a block body
    on prebuild's SIMT layer (so its own source also runs on the CPU in tests), a Python wrapper
    with torch.library autograd and fake kernels, tests (plain PyTorch, opcheck, torch.compile, the
    CUDA body on the CPU), a `prebuild selftest` case (the op on each GPU against its CPU kernel),
    and \\[tool.prebuild] in its pyproject.toml. Its wheels carry prebuild's loader: they need only
    torch.

    Examples:

      prebuild new my-kernels

      cd my-kernels && prebuild wheel --arch sm_80,sm_90

      PREBUILD_ARCHS= PREBUILD_SIMT=1 pip install --no-build-isolation -e . && pytest
    """
    from prebuild.tool.scaffold import ScaffoldError, create

    dest = directory or Path(name)
    try:
        written = create(dest, name)
    except (ScaffoldError, OSError) as exc:
        raise fail(str(exc)) from None
    out.print(
        f"[bold]Created {escape(str(dest))}/[/] ({len(written)} files). Next:", highlight=False
    )
    out.print(f"  cd {escape(str(dest))}", highlight=False)
    out.print("  prebuild wheel --arch sm_80,sm_90      # the wheels, in dist/", highlight=False)
    out.print(
        "  PREBUILD_ARCHS= PREBUILD_SIMT=1 pip install --no-build-isolation -e . && pytest",
        highlight=False,
        soft_wrap=True,
    )
