"""``prebuild install``: pick the wheel whose code runs on every GPU of this machine, and pip
install it."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from prebuild.runtime.arch import Arch
from prebuild.tool.cli.common import arch_option, count, err, fail, out


def install(
    project: str = typer.Argument(
        "prebuild",
        metavar="[NAME]",
        help="The project to install: prebuild (the default) or another project whose wheels "
        "`prebuild wheel --arch ... PROJECT` built (fused-ssim, ...).",
    ),
    source: str = typer.Option(
        "dist",
        "--from",
        "-f",
        help="A folder of wheels, a site written by `prebuild index`, or an index URL "
        "(file://... or https://.../simple).",
    ),
    arch: list[Arch] | None = arch_option(
        "Choose for these archs instead of this machine's GPUs (sm_90, 8.6, ...); repeatable."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the decision; install nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the decision as JSON on stdout."),
) -> None:
    """Pick the wheel of NAME whose code runs on every GPU of this machine, and pip install it.

    GPUs are listed through NVML (pip install nvidia-ml-py), which creates no CUDA context;
    CUDA_VISIBLE_DEVICES is honoured. A wheel fits when every GPU gets SASS for its arch or, failing
    that, PTX the driver can JIT-compile, its CUDA major equals the installed torch's and the driver
    supports it. Another project's wheel (+pt214.cu130.sm90) also needs the torch minor release it
    was built against. Among fitting wheels: SASS for every GPU first, then the newest release, the
    fewest archs, the closest arch, the newest CUDA. With no GPU visible nothing is picked unless
    --arch says what to pick for. When nothing fits, it says what to run instead. A venv made by
    uv, which has no pip, is installed into with `uv pip install --python`.

    Exit codes: 0 picked (and installed, unless --dry-run); 1 the install failed; 2 bad input;
    3 no wheel fits; 4 no GPU visible and no --arch.

    Examples:

      prebuild install --from dist --dry-run

      prebuild install --from https://OWNER.github.io/prebuild/simple

      prebuild install --from site --arch sm_90 --dry-run  # for an H100

      prebuild install fused-ssim --from site  # a project prebuild built
    """
    import json

    from prebuild.tool.install import SourceError, pip_install, plan_install

    try:
        plan = plan_install(project, source, tuple(arch or ()))
    except SourceError as exc:
        raise fail(str(exc)) from None
    if as_json:
        print(json.dumps(plan.to_dict(dry_run), indent=2))
    else:
        _print_install(plan)
    if plan.exit_code or dry_run:
        raise typer.Exit(plan.exit_code)
    if pip_install(plan.decision.chosen.candidate, output_to_stderr=as_json) != 0:
        raise fail("the install failed (its output is above)", code=1)


def _print_install(plan) -> None:
    """The machine, every wheel considered with its verdict, and the choice (or what to run)."""
    gpus, torch, decision = plan.gpus, plan.torch, plan.decision
    if not gpus.gpus:
        err.print(f"No GPU visible: {escape(gpus.note)}", highlight=False)
    else:
        err.print(
            "GPUs: "
            + ", ".join(
                f"cuda:{g.index} {escape(g.name)} ({g.capability[0]}.{g.capability[1]})"
                for g in gpus.gpus
            )
            + f"; driver CUDA {gpus.driver_cuda}",
            highlight=False,
        )
    err.print(
        f"torch {torch.version or '(not installed)'}, CUDA {torch.cuda or 'none (CPU build)'}",
        highlight=False,
    )
    for warning in plan.warnings:
        err.print(f"[bold yellow]warning:[/] {escape(warning)}", highlight=False)
    table = Table(
        title=f"{count(len(plan.candidates), 'wheel')} of {plan.project} from {plan.source}"
    )
    table.add_column("wheel", overflow="fold")
    table.add_column("verdict", overflow="fold")
    for c in decision.considered:
        mark = (
            "[green]chosen[/]"
            if c is decision.chosen
            else (escape(c.rejected) or ("fits" if plan.targets else "-"))
        )
        table.add_row(escape(c.candidate.filename), mark)
    err.print(table)
    if decision.chosen:
        out.print(
            f"[bold]Chosen:[/] {escape(decision.chosen.candidate.filename)}: {escape(decision.reason)}",
            highlight=False,
        )
    else:
        out.print(f"[bold]Nothing chosen:[/] {escape(decision.reason)}", highlight=False)
        if plan.fix:
            out.print(f"[bold]Instead:[/] {escape(plan.fix)}", highlight=False, soft_wrap=True)
