"""``prebuild selftest``: the installed kernel packages' ops run on every GPU against their CPU
kernels."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from prebuild.tool.cli.common import fail, out


def _error_cell(error: float | None) -> str:
    if error is None:
        return "-"
    return "0" if error == 0 else f"{error:.1e}"


def selftest(
    packages: list[str] | None = typer.Argument(
        None,
        metavar="PACKAGE",
        show_default=False,
        help="Only these installed packages (distribution or import names). Default: prebuild and "
        "every installed package prebuild built.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON on stdout."),
) -> None:
    """Run the installed kernel packages' ops on every GPU against their CPU kernels.

    For prebuild and each installed native project (see `prebuild new`) that declares self-test
    cases (\\[tool.prebuild] selftest = "package.module:function" in its pyproject.toml, recorded in
    its manifest), each case -- an op's forward and backward on a small seeded input -- runs on the
    CPU and on each visible GPU: once to warm up, once timed (synchronised on CUDA). On a GPU its
    outputs and gradients are compared with the CPU kernels' within the case's tolerances; on the
    CPU with the case's plain-PyTorch reference or, when it has none, with a second run, which must
    give the same bits. Every value must be finite. Without a GPU it says so and checks the CPU
    kernels.

    A package that declares no cases gets a row saying so (not a failure); a hook that cannot be
    imported, or a case that raises, is a failed row with the error.

    Exit codes: 0 every case passed; 1 a case failed or raised, or a hook cannot be loaded; 2 no
    such package.

    Examples:

      prebuild selftest

      prebuild selftest my-kernels --json
    """
    import json

    from prebuild.tool.selftest import (
        FAIL,
        NONE,
        SelftestError,
        describe_device,
        installed_kernel_packages,
        run_package,
        select_packages,
        selftest_json,
        visible_devices,
    )

    try:
        chosen = select_packages(installed_kernel_packages(), list(packages or []))
    except SelftestError as exc:
        raise fail(str(exc)) from None
    devices, note = visible_devices()
    described = [describe_device(d) for d in devices]
    rows = [row for package in chosen for row in run_package(package, devices)]
    failed = any(r.status == FAIL for r in rows)
    if as_json:
        print(json.dumps(selftest_json(rows, described, note), indent=2))
        raise typer.Exit(1 if failed else 0)

    out.print(
        escape(note) if note else "GPUs: " + escape(", ".join(described[1:])), highlight=False
    )
    style = {"pass": "[green]pass[/]", FAIL: "[red]FAIL[/]", NONE: "[yellow]none[/]"}
    table = Table(title="prebuild selftest")
    for column in ("", "package", "device", "op", "against", "max error", "time", "detail"):
        table.add_column(column, overflow="fold")
    for r in rows:
        time_cell = "-" if r.seconds is None else f"{r.seconds * 1e3:.1f} ms"
        table.add_row(
            style[r.status],
            escape(r.package),
            escape(r.device),
            escape(r.op),
            r.against or "-",
            _error_cell(r.max_error),
            time_cell,
            escape(r.detail),
        )
    out.print(table)
    counts = {status: sum(r.status == status for r in rows) for status in ("pass", FAIL, NONE)}
    out.print(
        f"{counts['pass']} passed, {counts[FAIL]} failed, {counts[NONE]} package(s) without cases",
        style="bold red" if failed else "bold",
        highlight=False,
    )
    raise typer.Exit(1 if failed else 0)
