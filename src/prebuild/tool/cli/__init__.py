"""The ``prebuild`` command line: the typer app, and each command from a module of its own
(``prebuild.tool.cli.wheel``, ...; what they share is in ``common``). Command modules import
their heavy dependencies (torch, the builder) inside the command, so ``prebuild --help`` starts
fast."""

from __future__ import annotations

import typer

# The modules, not their functions: prebuild.tool.cli.wheel stays the module of that name.
from prebuild.tool.cli import (
    doctor,
    farm,
    index,
    inspect,
    install,
    matrix,
    new,
    selftest,
    variant,
    wheel,
)
from prebuild.tool.cli.common import out, reflow_help

app = typer.Typer(
    name="prebuild",
    help="Build, check, index and install ahead-of-time compiled PyTorch CUDA kernels, and "
    "diagnose why they do or do not run. Kernels are compiled once, into wheels; importing "
    "them never compiles. Start with `prebuild wheel --arch sm_90` or `prebuild doctor`.",
    no_args_is_help=True,
    add_completion=False,
)

# In the order --help lists them.
COMMANDS = (
    wheel.wheel,
    variant.variant,
    inspect.inspect,
    matrix.matrix,
    index.index,
    install.install,
    doctor.doctor,
    selftest.selftest,
    new.new,
)
for _command in COMMANDS:
    app.command(help=reflow_help(_command.__doc__))(_command)
app.add_typer(farm.app)  # prebuild farm plan / build


def _print_version(asked: bool) -> None:
    if asked:
        import prebuild

        # The installed distribution's version, or a checkout's (prebuild.__version__ says how).
        out.print(f"prebuild {prebuild.__version__}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print prebuild's version and exit.",
    ),
) -> None:
    """Build, check, index and install ahead-of-time compiled PyTorch CUDA kernels."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
