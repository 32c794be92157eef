"""The `prebuild` command line as a user meets it: --help that reads right in an
80-column terminal, and `prebuild wheel` refusing bad input before it takes a lock or
compiles anything."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from prebuild.runtime.arch import Arch
from prebuild.tool.cli import app, reflow_help
from prebuild.tool.cli.common import arch_option

PREBUILD = Path(sys.executable).parent / "prebuild"
COMMANDS = sorted(c.callback.__name__ for c in app.registered_commands)


def run_cli(*args: str, columns: int = 200, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "dumb"}
    return subprocess.run(
        [str(PREBUILD), *args], capture_output=True, text=True, timeout=300, env=env, **kwargs
    )


def test_reflow_help_joins_prose_and_keeps_examples():
    doc = """Summary line.

    A paragraph written
    over three
    lines.

      prebuild wheel --arch sm_80   # an example, kept as written
    """
    assert reflow_help(doc) == (
        "Summary line.\n\nA paragraph written over three lines.\n\n"
        "  prebuild wheel --arch sm_80   # an example, kept as written"
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_help_fits_80_columns(command):
    proc = run_cli(command, "--help", columns=80)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "…" not in text, text  # nothing truncated
    # Every default is shown whole, on one line.
    for line in text.splitlines():
        if "[default:" in line:
            assert re.search(r"\[default: [^\]]+\]", line), line
    # Every example of the docstring appears intact, on a line of its own.
    doc = next(
        c.callback.__doc__ for c in app.registered_commands if c.callback.__name__ == command
    )
    # Bracketed words ([tool.prebuild]) are shown, not taken for rich markup and dropped.
    click_command = typer.main.get_command(app).commands[command]
    texts = [doc, *(getattr(p, "help", None) or "" for p in click_command.params)]
    bracketed = {m.replace("\\", "") for t in texts for m in re.findall(r"\\?\[[a-z][\w.]*\]", t)}
    flat = " ".join(text.split())
    for word in bracketed:
        assert word in flat, f"{word} is missing from {command} --help"
    examples = [
        line.strip()
        for line in doc.splitlines()
        if line.strip().startswith(("prebuild ", "pip ", "echo "))
    ]
    assert examples, f"{command} --help shows no example"
    shown = [line.strip() for line in text.splitlines()]
    for example in examples:
        assert example in shown, f"example wrapped or missing at 80 columns: {example}\n{text}"


def test_wheel_refuses_an_unwritable_out_before_locking_or_compiling(tmp_path):
    objects = tmp_path / "objects"
    for out in ("/proc/prebuild-test/dist", str(tmp_path / "a-file")):
        (tmp_path / "a-file").write_text("")
        proc = run_cli("wheel", "--arch", "sm_80", "--out", out, "--build-dir", str(objects))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"--out {out}" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not objects.exists()  # no lock taken, nothing compiled


def test_a_failed_build_leaves_no_empty_out_directory(tmp_path):
    """--out is made before anything is built (proved writable); when the build then fails,
    the directories it made are removed again (a wheel written before the failure stays)."""
    broken = tmp_path / "broken-1.0.tar.gz"
    broken.write_text("not an archive")
    out = tmp_path / "new" / "dist"
    objects = ["--build-dir", str(tmp_path / "objects")]
    proc = run_cli("wheel", "--arch", "sm_80", str(broken), "--out", str(out), *objects)
    assert proc.returncode == 2 and f"cannot unpack {broken}" in proc.stderr, proc.stderr
    assert not (tmp_path / "new").exists()
    # A directory that is no project is said first, before any toolchain check.
    (tmp_path / "empty").mkdir()
    proc = run_cli("wheel", "--arch", "sm_80", str(tmp_path / "empty"), "--out", str(out), *objects)
    assert proc.returncode == 2 and "has no setup.py or pyproject.toml" in proc.stderr, proc.stderr


def test_wheel_refuses_an_unwritable_lock_target_before_compiling(tmp_path):
    objects = tmp_path / "objects"
    proc = run_cli(
        "wheel",
        "--arch",
        "sm_80",
        "--out",
        str(tmp_path / "dist"),
        "--build-dir",
        str(objects),
        "--lock",
        "/proc/prebuild-test/prebuild.lock",
    )
    assert proc.returncode == 2, proc.stderr
    assert "--lock /proc/prebuild-test" in proc.stderr and "Traceback" not in proc.stderr, (
        proc.stderr
    )
    assert not objects.exists()


@pytest.mark.parametrize(
    "module, extra_hint", [("ninja", "'ninja'"), ("build", "'build'"), ("filelock", "'filelock'")]
)
def test_wheel_without_the_build_extra_names_it(tmp_path, module, extra_hint):
    """An install without `prebuild[build]`: one line saying what to install, no traceback."""
    script = (
        f"import sys; sys.modules[{module!r}] = None; sys.argv = ['prebuild', 'wheel', '--arch', 'sm_80', "
        f"'--out', {str(tmp_path / 'dist')!r}]; from prebuild.tool.cli import main; main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'prebuild[build]'" in proc.stderr and extra_hint in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "command",
    [["wheel", "--out", "/proc/prebuild-test/dist"], ["install", "--dry-run"], ["matrix"]],
)
def test_a_bad_arch_reads_the_same_in_every_command(command):
    """--arch is parsed once, by one option (cli.common.arch_option): a usage error naming it,
    exit 2, before the command runs."""
    proc = run_cli(*command, "--arch", "sm_80,sm_8x")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    flat = " ".join(proc.stderr.replace("│", " ").split())
    assert "Invalid value for '--arch' / '-a': cannot parse CUDA arch 'sm_8x'" in flat, flat
    assert "Traceback" not in proc.stderr


def test_every_arch_option_hands_its_command_parsed_archs():
    """Repeated and comma-separated values, each spelling, merged into one sorted set."""
    seen = {}
    probe = typer.Typer()

    @probe.command()
    def archs(arch: list[Arch] | None = arch_option("Archs.")) -> None:
        seen["archs"] = arch

    result = CliRunner().invoke(probe, ["--arch", "9.0,sm_80", "-a", "80", "--arch", "sm_90a"])
    assert result.exit_code == 0, result.output
    assert seen["archs"] == [Arch(8, 0), Arch(9, 0), Arch(9, 0, "a")]
    assert CliRunner().invoke(probe, []).exit_code == 0 and seen["archs"] is None


def test_version_prints_prebuilds_version():
    import prebuild

    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"prebuild {prebuild.__version__}"
    assert proc.stdout.strip() == f"prebuild {importlib.metadata.version('prebuild')}"


def test_wheel_progress_in_a_log_is_a_line_per_phase_and_a_heartbeat():
    """Where stderr is not a terminal (a CI log) no live line is drawn: each phase is printed
    as it starts, a heartbeat says where each unfinished build is, and nothing is wrapped."""
    import io
    import time
    from types import SimpleNamespace

    from rich.console import Console

    from prebuild.tool.cli.wheel import _WheelConsole

    log = io.StringIO()
    console = _WheelConsole(Console(file=log, width=80, soft_wrap=True), heartbeat=0.05)
    assert console.plain
    from collections import namedtuple

    planned = namedtuple("Planned", "name")("gsplat-1.5.3+pt214.cu130.sm90")  # hashable
    nvcc = SimpleNamespace(version="13.0", path="/a/very/long/path/to/the/cuda/toolkit/bin/nvcc")
    console.starting([planned], nvcc, "gsplat==1.5.3", Path("/a/long/output/directory/dist"))
    line = console.wheel(planned)
    line.phase("compiling (the project's own build)")
    line.step(3, 20, "rasterize_to_pixels_3dgs_fwd.cu")
    time.sleep(0.3)
    console.built(SimpleNamespace(planned=planned, seconds=12.0))
    time.sleep(0.2)
    console.close()
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("Building 1 wheel with nvcc 13.0") and lines[0].endswith("dist/")
    assert lines[1].startswith(f"{planned.name}: compiling (the project's own build) (")
    beats = [x for x in lines if "[3/20] rasterize_to_pixels_3dgs_fwd.cu done, 17 to go" in x]
    assert beats and all(x.startswith(f"{planned.name}: compiling") for x in beats)
    # a beat with nothing moved since the last line says the build runs on
    assert all(", still running (" in x for x in beats[1:]), beats
    assert lines[-1] == f"{planned.name}: done in 12 s"  # and no heartbeat after it
    # a build without ninja: the compiles are counted, their total is not known
    line.step(4, 0, "knn.cpp")
    assert line.where() == "compiling (the project's own build), [4/?] knn.cpp"
    line.step(5, 20, "correlation_kernel.cu", True)  # ninja's FAILED: after its line
    assert (
        line.where() == "compiling (the project's own build), [5/20] correlation_kernel.cu failed"
    )
    # a build running ninja once per extension (PyG's): each counts from 1, the steps in all too
    line.step(1, 2, "torch_cluster._grid_cpu: csrc/grid.cpp")
    assert line.where().endswith(
        "[1/2] torch_cluster._grid_cpu: csrc/grid.cpp done, 2 steps done in all, 1 to go"
    )
    # a phase that began just before the heartbeat is not said again by it
    line.finished = False
    line.phase("writing the wheel")
    line.beat(60.0)
    line.beat(60.0)
    assert log.getvalue().splitlines()[-1].startswith(f"{planned.name}: writing the wheel (")
    assert sum("writing the wheel" in x for x in log.getvalue().splitlines()) == 1
    line.said = (line.said[0], line.said[1] - 31.0)  # half a beat later: said again
    line.beat(60.0)
    assert sum("writing the wheel" in x for x in log.getvalue().splitlines()) == 2
    assert (
        log.getvalue()
        .splitlines()[-1]
        .startswith(f"{planned.name}: writing the wheel, still running (")
    )
    line.finished = True


def test_the_summary_says_a_note_every_wheel_has_once(monkeypatch, tmp_path):
    """The glibc note of a build on a newer machine than torch's is every wheel's: said once
    after the wheels; a note of one wheel (its kernels spill) stays under it."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from prebuild.tool.cli import wheel as wheel_cli

    log = io.StringIO()
    monkeypatch.setattr(wheel_cli, "out", Console(file=log, width=80, soft_wrap=True))
    shared, own = "it needs glibc 2.32, newer than what torch 2.13.0 itself needs", "it spills"
    built = []
    for sm, notes in (("sm80", (own, shared)), ("sm90", (shared,))):
        path = tmp_path / f"prebuild-0.1.0+cu130.{sm}-cp310-abi3-linux_x86_64.whl"
        path.write_bytes(b"wheel")
        built.append(
            SimpleNamespace(
                path=path, sass_archs=(), ptx_archs=(), seconds=1.0, notes=notes, size=5
            )
        )
    result = SimpleNamespace(wheels=built, seconds=2.0, variants_file=None, locks=[], cache=None)
    console = wheel_cli._WheelConsole(Console(file=io.StringIO()), heartbeat=0.05)
    console.summary(result, tmp_path)
    console.close()
    lines = log.getvalue().splitlines()
    assert [x.strip() for x in lines if x.strip().startswith("note")] == [
        f"note: {own}",
        f"note (every wheel): {shared}",
    ], lines
    assert lines[-1] == f"  note (every wheel): {shared}"
    built.pop()  # one wheel: its notes are its own
    log.truncate(0), log.seek(0)
    console.summary(result, tmp_path)
    assert [x.strip() for x in log.getvalue().splitlines() if x.strip().startswith("note")] == [
        f"note: {own}",
        f"note: {shared}",
    ]


def test_an_interrupted_wheel_build_says_what_was_kept_and_what_the_next_run_reuses(
    monkeypatch, tmp_path
):
    """With --build-dir, Ctrl-C names what is kept there for the next run of the same command
    (a classic project's too: classic_objects.py); without, how to keep it next time."""
    from prebuild.tool.builder import pipeline

    def interrupted(request, report):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "build_wheels", interrupted)
    args = ["wheel", "--arch", "sm_90", str(tmp_path), "--out", str(tmp_path / "dist")]
    runner = CliRunner()
    # a build that compiles in a folder of its own (NATTEN's CMake build) leaves none there
    result = runner.invoke(app, [*args, "--build-dir", str(tmp_path / "objects")])
    said = " ".join(result.output.split())
    assert result.exit_code == 130, result.output
    assert said.endswith(
        f"no compiled object is in {tmp_path / 'objects'}: the project's build compiles in a "
        "folder of its own (or had compiled nothing yet), so the same command starts over"
    )
    (tmp_path / "objects" / "cu130.sm90" / "build").mkdir(parents=True)
    (tmp_path / "objects" / "cu130.sm90" / "build" / "a.o").write_bytes(b"\x7fELF")
    result = runner.invoke(app, [*args, "--build-dir", str(tmp_path / "objects")])
    said = " ".join(result.output.split())
    assert result.exit_code == 130, result.output
    assert (
        f"interrupted: no wheel was written; the objects compiled so far are kept in {tmp_path / 'objects'}"
        in said
    )
    assert "kept in" in said and said.endswith("the same command goes on from them")
    result = runner.invoke(app, args)
    said = " ".join(result.output.split())
    assert said.endswith(
        "interrupted: no wheel was written (with --build-dir DIR, a run keeps its objects for "
        "the next)"
    )


@pytest.fixture
def asked(monkeypatch) -> list:
    """The WheelRequests `prebuild wheel` hands its pipeline, which stops at once (Ctrl-C)."""
    from prebuild.tool.builder import pipeline

    requests = []

    def build(request, report):
        requests.append(request)
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "build_wheels", build)
    return requests


def test_wheel_hands_config_settings_on_as_pip_reads_them(asked, tmp_path):
    """-C and --config-setting give one setting each, a repeated key a list; one naming no key
    is refused before anything runs."""
    args = ["wheel", "--arch", "sm_90", str(tmp_path), "--out", str(tmp_path / "dist")]
    runner = CliRunner()
    settings = ["-C--build-option=--cpp_ext", "--config-setting", "--build-option=--cuda_ext"]
    result = runner.invoke(app, [*args, *settings, "--config-setting=verbose"])
    assert result.exit_code == 130, result.output
    assert asked[0].config_settings == {
        "--build-option": ["--cpp_ext", "--cuda_ext"],
        "verbose": "",
    }
    result = runner.invoke(app, [*args, "-C", "=openblas"])
    assert result.exit_code == 2 and len(asked) == 1, result.output
    assert "-C '=openblas' names no setting: give KEY=VALUE" in " ".join(result.output.split())


def test_wheel_hands_first_use_code_on_and_refuses_what_is_not_python(asked, tmp_path):
    args = ["wheel", "--arch", "sm_90", str(tmp_path), "--out", str(tmp_path / "dist")]
    runner = CliRunner()
    code = ["--first-use", "from pkg import Ops; Ops.load(False)", "--first-use", "import pkg.x"]
    assert runner.invoke(app, [*args, *code]).exit_code == 130
    assert asked[0].first_use == ("from pkg import Ops; Ops.load(False)", "import pkg.x")
    result = runner.invoke(app, [*args, "--first-use", "Ops.load(False"])
    assert result.exit_code == 2 and len(asked) == 1, result.output
    assert "--first-use 'Ops.load(False' is not Python: '(' was never closed (line 1)" in " ".join(
        result.output.split()
    )


def test_wheel_copies_the_system_libraries_in_unless_told_not_to(asked, tmp_path):
    args = ["wheel", "--arch", "sm_90", str(tmp_path), "--out", str(tmp_path / "dist")]
    runner = CliRunner()
    assert runner.invoke(app, args).exit_code == 130
    assert runner.invoke(app, [*args, "--no-bundle"]).exit_code == 130
    assert [request.bundle for request in asked] == [True, False]


def test_a_compilers_words_are_printed_as_they_are(capsys):
    """rich turns ":100:" into an emoji: openpoints' subsampling error read
    "wrapper.cpp💯74: error" on the console."""
    from prebuild.tool.cli.common import fail, out

    words = "cpp_wrappers/src/wrapper.cpp:100:74: error: 'NPY_IN_ARRAY' was not declared"
    fail(words)
    out.print(words)
    captured = capsys.readouterr()
    assert words in " ".join(captured.err.split()) and words in captured.out
