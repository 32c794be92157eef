"""``prebuild doctor``: one report of whether prebuild (and every project it built) runs here, and
what to do if not."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from prebuild.tool.cli.common import out


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def doctor(
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    load: bool = typer.Option(
        True, "--load/--no-load", help="Test-load the libraries in a short-lived child process."
    ),
) -> None:
    """Explain in one report whether prebuild runs here, and what to do if not.

    Shows Python; torch's version, CUDA and C++ ABI; the installed wheel's manifest (and
    whether its libraries are intact and load); each visible GPU (NVML: pip install
    nvidia-ml-py); the driver's CUDA version against the wheel's; and for every op and GPU
    whether it runs SASS, PTX through the driver's JIT, or nothing, with the reason and the
    fix. Every other installed project whose wheel prebuild built (`prebuild wheel --arch ...
    PROJECT`) gets its own rows: libraries intact, the torch minor release and CUDA it needs
    against the installed torch, code for each GPU, and its extension modules imported in a
    child process. It also lists JIT lock files that other packages' builds left under
    TORCH_EXTENSIONS_DIR or ~/.cache/torch_extensions, with their age and the process holding
    them if one is alive, and prints the command that removes only the stale ones.

    It needs no nvcc and creates no CUDA context in its own process.

    Exit codes: 0 nothing failed (warnings allowed); 1 something fails (see the fixes).

    Examples:

      prebuild doctor

      prebuild doctor --json | jq .ops
    """
    import json

    from prebuild.tool.doctor import (
        FAIL,
        UNKNOWN,
        WARN,
        clear_command,
        diagnose,
        doctor_json,
        gather,
        op_verdicts,
    )

    facts = gather(check_load=load)
    checks = diagnose(facts)
    verdicts = op_verdicts(facts)
    failed = any(c.status == FAIL for c in checks) or any(v.status == FAIL for v in verdicts)
    if as_json:
        print(json.dumps(doctor_json(facts, checks, verdicts), indent=2))
        raise typer.Exit(1 if failed else 0)

    style = {
        "ok": "[green]ok[/]",
        WARN: "[yellow]warn[/]",
        FAIL: "[red]FAIL[/]",
        UNKNOWN: "[yellow]unknown[/]",
    }
    table = Table(title="prebuild doctor", show_lines=False)
    for column in ("", "check", "finding", "fix"):
        table.add_column(column, overflow="fold")
    for c in checks:
        table.add_row(style[c.status], c.area, escape(c.message), escape(c.fix))
    out.print(table)
    if verdicts:
        ops = Table(title="ops per device")
        for column in ("", "op", "device", "code", "reason / fix"):
            ops.add_column(column, overflow="fold")
        for v in verdicts:
            ops.add_row(
                style[v.status],
                v.op,
                escape(v.device),
                escape(v.code),
                "" if v.status == "ok" else escape(v.reason),
            )
        out.print(ops)
    if facts.locks:
        locks = Table(title="torch JIT lock files")
        for column in ("lock file", "age", "state"):
            locks.add_column(column, overflow="fold")
        for lock in facts.locks:
            locks.add_row(escape(str(lock.path)), _age(lock.age_seconds), escape(lock.state))
        out.print(locks)
        command = clear_command(facts.locks)
        if command:
            out.print("Safe to run (removes only the stale locks):")
            out.print(f"  {escape(command)}", highlight=False, soft_wrap=True)
    raise typer.Exit(1 if failed else 0)
