"""The build pipeline's own logic, without compiling: which errors come before anything is
touched (exit 2) and which are the build's (exit 1), the events a reporter hears, and the
workspace that no outcome leaves behind. (Real builds through the CLI: test_wheel_build.py and
test_classic_build.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version
from sdists import write_sdist

from prebuild.runtime.arch import ArchError, parse_arch_list
from prebuild.tool.builder import pipeline
from prebuild.tool.builder.base import BuiltWheel
from prebuild.tool.builder.compile import BuildError
from prebuild.tool.builder.pipeline import WheelError, WheelRequest, build_wheels
from prebuild.tool.builder.project import DownloadError
from prebuild.tool.builder.toolchain import Torch

ROOT = Path(__file__).resolve().parents[3]


class Recorder:
    """A Reporter that writes down what it hears."""

    def __init__(self):
        self.events: list[tuple] = []

    def fetching(self, spec):
        self.events.append(("fetching", spec))

    def fetch_note(self, text):
        self.events.append(("fetch note", text))

    def waiting(self, text):
        self.events.append(("waiting", text))

    def starting(self, planned, nvcc, origin, out_dir):
        self.events.append(("starting", [w.name for w in planned]))

    def wheel(self, planned):
        self.events.append(("wheel", planned.name))
        return self

    def phase(self, text):
        self.events.append(("phase", text))

    def step(self, done, total, what, failed=False):
        pass

    def note(self, text):
        self.events.append(("note", text))

    def built(self, wheel):
        self.events.append(("built", wheel.path.name))

    def failed(self, planned, interrupted):
        self.events.append(("failed", planned.name, interrupted))

    def cache_warning(self, message):
        self.events.append(("cache warning", message))


class FakeBuilder:
    """A WheelBuilder that compiles nothing: it writes an empty file, or raises."""

    def __init__(self, nvcc, raises: BaseException | None = None):
        self.nvcc, self.raises = nvcc, raises

    def order(self, planned):
        return planned

    def build(self, planned, out_dir, progress):
        progress.phase("compiling")
        if self.raises is not None:
            raise self.raises
        path = out_dir / f"demo-1.0+cu130.{planned.archs[0].sm.replace('_', '')}-py3-none-any.whl"
        path.write_bytes(b"")
        return BuiltWheel(path, planned, planned.archs, (), None, 0.1)


def classic_manifest(**fields):
    """A classic wheel's manifest (torch 2.14.1, CUDA 13.0, no libraries), ``fields`` changed."""
    from prebuild.runtime.manifest import ProjectManifest

    base = dict(
        kind="classic",
        torch="2.14.1+cu130",
        torch_cuda="13.0",
        cuda="13.0",
        python_tag="cp311-cp311-linux_x86_64",
        sass_archs=(),
        ptx_archs=(),
        libraries=(),
    )
    return ProjectManifest(**{**base, **fields})


@pytest.fixture
def fake_builder(monkeypatch):
    """make_builder returns a FakeBuilder (with the nvcc the real preflight found)."""
    made = {}

    def use(raises=None):
        def make(project, toolchain, request, planned, work, launcher=None):
            made["work"], made["launcher"], made["project"] = work, launcher, project
            return FakeBuilder(toolchain.nvcc, raises)

        monkeypatch.setattr(pipeline, "make_builder", make)
        return made

    return use


def temporary_workspaces() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("prebuild-wheel-*"))


def test_plan_request_refuses_bad_archs_and_a_lock_name_for_several_wheels():
    # Archs are parsed once, by the CLI's --arch (a bad one: tests/tool/test_cli.py); a request
    # takes them parsed, never as text.
    with pytest.raises(ArchError):
        parse_arch_list("sm_8x")
    with pytest.raises(TypeError, match="parsed archs"):
        WheelRequest(None, ("sm_80",))
    with pytest.raises(ValueError, match=r"\{index_key\}"):
        pipeline.plan_request(WheelRequest(None, parse_arch_list("sm_80,sm_90"), lock="one.lock"))
    fat = pipeline.plan_request(
        WheelRequest(None, parse_arch_list(["sm_90", "8.0"]), fat=True, lock="one.lock")
    )
    assert [w.name for w in fat] == ["sm_80,sm_90"]


def test_request_errors_exit_2_before_the_project_is_touched(tmp_path, fake_builder):
    made = fake_builder()
    before = temporary_workspaces()
    out_file = tmp_path / "a-file"
    out_file.write_text("")
    for request in (
        WheelRequest(
            str(ROOT), parse_arch_list("sm_13"), tmp_path / "dist"
        ),  # nvcc cannot build it
        WheelRequest(str(ROOT), parse_arch_list("sm_80"), out_file),  # --out is a file
    ):
        with pytest.raises(WheelError) as caught:
            build_wheels(request, Recorder())
        assert caught.value.exit_code == 2
    assert "work" not in made  # no builder was made: nothing compiled
    assert temporary_workspaces() == before


def test_a_build_error_exits_1_and_the_reporter_hears_the_failure(tmp_path, fake_builder):
    fake_builder(raises=BuildError("nvcc said no"))
    report = Recorder()
    with pytest.raises(WheelError, match="nvcc said no") as caught:
        build_wheels(WheelRequest(str(ROOT), parse_arch_list("sm_80"), tmp_path / "dist"), report)
    assert caught.value.exit_code == 1
    assert report.events == [
        ("starting", ["sm_80"]),
        ("wheel", "sm_80"),
        ("phase", "compiling"),
        ("failed", "sm_80", False),
    ]


def test_ctrl_c_propagates_after_the_reporter_hears_it(tmp_path, fake_builder):
    fake_builder(raises=KeyboardInterrupt())
    report = Recorder()
    before = temporary_workspaces()
    with pytest.raises(KeyboardInterrupt):
        build_wheels(WheelRequest(str(ROOT), parse_arch_list("sm_80"), tmp_path / "dist"), report)
    assert report.events[-1] == ("failed", "sm_80", True)
    assert temporary_workspaces() == before


def test_every_wheel_is_built_reported_and_locked(tmp_path, fake_builder):
    fake_builder()
    report = Recorder()
    result = build_wheels(
        WheelRequest(
            str(ROOT),
            parse_arch_list("sm_90,sm_80"),
            tmp_path / "dist",
            lock=str(tmp_path / "locks" / "{index_key}.txt"),
        ),
        report,
    )
    assert [w.planned.name for w in result.wheels] == ["sm_80", "sm_90"]  # in arch order
    assert [e for e in report.events if e[0] == "built"] == [
        ("built", w.path.name) for w in result.wheels
    ]
    assert [p.name for p in result.locks] == ["cu130-sm80.txt", "cu130-sm90.txt"]  # one per wheel
    assert [p.read_text().count(" --hash=sha256:") for p in result.locks] == [1, 1]


def test_a_wheel_with_no_gpu_code_is_built_once_for_every_arch(tmp_path, monkeypatch):
    """A classic project's host code (no GPU code) serves every arch: the first wheel is the
    only one built, and it says why the others were not."""
    from prebuild.runtime.manifest import CUDA_HOST_CODE

    host = classic_manifest(code=CUDA_HOST_CODE)

    class HostBuilder(FakeBuilder):
        def build(self, planned, out_dir, progress):
            self.calls = getattr(self, "calls", 0) + 1
            path = out_dir / "tms-0.0.10+pt214.cu130.host-py3-none-any.whl"
            path.write_bytes(b"")
            return BuiltWheel(path, planned, (), (), host, 0.1, ("its libraries hold host code",))

    builders = []

    def make(project, toolchain, request, planned, work, launcher=None):
        builders.append(HostBuilder(toolchain.nvcc))
        return builders[-1]

    monkeypatch.setattr(pipeline, "make_builder", make)
    report = Recorder()
    result = build_wheels(
        WheelRequest(str(ROOT), parse_arch_list("sm_80,sm_90,sm_120"), tmp_path / "dist"), report
    )
    assert builders[0].calls == 1 and len(result.wheels) == 1
    assert [e for e in report.events if e[0] == "built"] == [
        ("built", "tms-0.0.10+pt214.cu130.host-py3-none-any.whl")
    ]
    assert result.wheels[0].notes == (
        "its libraries hold host code",
        "it serves every arch: the other planned wheels (sm_90; sm_120) would be the same",
    )


def test_a_cached_build_copies_the_project_into_a_fixed_workspace_and_hands_the_builder_the_launcher(
    tmp_path, fake_builder, monkeypatch
):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the fixed-name workspaces, under it
    monkeypatch.setattr(tempfile, "tempdir", None)
    made = fake_builder()
    report = Recorder()
    result = build_wheels(
        WheelRequest(
            str(ROOT), parse_arch_list("sm_80"), tmp_path / "dist", cache=str(tmp_path / "cache")
        ),
        report,
    )
    workspace = tmp_path / "prebuild-cached-builds" / "0"
    assert made["work"] == workspace and made["project"].source == workspace / "source"
    assert (made["project"].kind, made["project"].origin) == ("native", str(ROOT))
    assert made["launcher"] is not None and made["launcher"].is_relative_to(workspace)
    assert result.cache is not None and result.cache.active and result.cache.stats.compiles == 0
    assert not workspace.exists()  # emptied and removed after the build
    assert not [e for e in report.events if e[0] == "cache warning"]


def test_an_unreadable_cache_spec_exits_2_before_anything_and_off_means_none(
    tmp_path, fake_builder
):
    made = fake_builder()
    with pytest.raises(WheelError, match="--cache sccache") as caught:
        build_wheels(
            WheelRequest(
                str(ROOT), parse_arch_list("sm_80"), tmp_path / "dist", cache="s3://bucket"
            ),
            Recorder(),
        )
    assert caught.value.exit_code == 2 and "work" not in made
    result = build_wheels(
        WheelRequest(str(ROOT), parse_arch_list("sm_80"), tmp_path / "dist", cache="off"),
        Recorder(),
    )
    assert (
        result.cache is None and made["launcher"] is None and made["project"].source == ROOT
    )  # in place


def test_a_temporary_workspace_keeps_only_the_log_the_error_names():
    with pytest.raises(WheelError) as caught:
        with pipeline.workspace(None) as work:
            log = work.path / "cu130.sm90" / "build.log"
            log.parent.mkdir(parents=True)
            log.write_text("the compiler's words")
            try:
                raise BuildError(f"the build failed (full log: {log})", log=log)
            except BuildError as exc:
                raise WheelError(work.message(exc), 1) from None
    assert not work.path.exists()
    kept = Path(tempfile.gettempdir()) / f"{work.path.name}.log"
    try:
        assert str(caught.value) == f"the build failed (full log: {kept})"
        assert kept.read_text() == "the compiler's words"
    finally:
        kept.unlink()


def test_a_build_directory_is_the_users_and_stays(tmp_path):
    objects = tmp_path / "objects"
    with pipeline.workspace(objects) as work:
        log = objects / "cu130.sm90" / "build.log"
        log.parent.mkdir(parents=True)
        log.write_text("x")
        assert work.message(BuildError(f"see {log}", log=log)) == f"see {log}"  # nothing moved
    assert log.is_file() and (objects / pipeline.WORKSPACE_MARK).is_file()


def test_a_build_directory_holding_what_prebuild_did_not_put_there_is_refused(tmp_path):
    """``--build-dir .`` in a project (or the home folder): its build would replace a folder
    named source or download there. Refused before anything is written, naming what is there
    and another folder; prebuild's own (marked, or made before the mark) and empty ones are
    used."""
    project = tmp_path / "project"
    (project / "source").mkdir(parents=True)
    (project / "setup.py").write_text("x")
    before = sorted(p.name for p in project.iterdir())
    with pytest.raises(WheelError, match="holds what prebuild did not put there") as caught:
        with pipeline.workspace(project):
            pytest.fail("the build went on")
    assert caught.value.exit_code == 2
    assert "(setup.py)" in str(caught.value)  # source is a name prebuild makes: not named
    assert f"--build-dir {project / 'prebuild-build'}" in str(caught.value)
    assert sorted(p.name for p in project.iterdir()) == before  # no mark written
    many = [f"f{i}" for i in range(8)]
    assert pipeline.foreign_entries(many) == many
    # made before the mark: a classic build's, a native build's (its lock left behind)
    assert pipeline.foreign_entries(["source", "cuda-shim", "cu130.sm90", "build-site"]) == []
    assert pipeline.foreign_entries(["host", "cuda", "wheels", ".prebuild-wheel.lock"]) == []
    assert pipeline.foreign_entries([pipeline.WORKSPACE_MARK, "anything"]) == []
    (tmp_path / "empty").mkdir()
    with pipeline.workspace(tmp_path / "empty"):
        (tmp_path / "empty" / "notes.txt").write_text("written by a build")
    with pipeline.workspace(tmp_path / "empty"):  # marked: its own now
        pass
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(WheelError, match="is a file, not a folder"):
        with pipeline.workspace(tmp_path / "a-file"):
            pass


def test_one_build_at_a_time_in_a_build_directory_and_the_next_says_it_waits(tmp_path):
    """Two builds in one --build-dir would copy the project over each other's and compile into
    the same objects: the second waits for the first, saying so, then goes on."""
    import threading

    heard: list[str] = []
    entered = threading.Event()

    def second():
        with pipeline.workspace(tmp_path / "objs", on_wait=heard.append):
            entered.set()

    with pipeline.workspace(tmp_path / "objs") as first:
        thread = threading.Thread(target=second)
        thread.start()
        deadline = time.monotonic() + 30
        while not heard and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not entered.is_set()  # still waiting
        lock = tmp_path / ".objs.prebuild.lock"
        assert heard == [f"waiting for another build in {first.path} (lock {lock})"]
    thread.join(timeout=30)
    assert entered.is_set()
    with pytest.raises(WheelError, match="--build-dir .*: cannot lock it") as caught:
        (tmp_path / "file").write_text("")
        with pipeline.workspace(tmp_path / "file" / "objs"):
            pass
    assert caught.value.exit_code == 2


def test_a_checkout_too_large_to_copy_around_a_project_is_linked_and_said(monkeypatch, tmp_path):
    """A classic directory in a large checkout: its build reads the rest through links, which
    it could write through, and the user is told before it starts."""
    from prebuild.tool.builder import project as project_module

    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "weights.bin").write_bytes(b"w" * 64)
    ext = repo / "ext"
    ext.mkdir()
    (ext / "setup.py").write_text("from setuptools import setup\nsetup(name='ext')\n")
    cuda = pipeline.Toolchain(
        Torch(Version("2.14.1"), "2.14.1+cu130", "13.0", (), Path("/t")), None
    )
    report = Recorder()
    project = pipeline.resolve(str(ext), tmp_path / "small", cuda, report)
    assert project.linked_checkout is None and report.events == []
    monkeypatch.setattr(project_module, "MIRROR_COPY_LIMIT", 16)
    project = pipeline.resolve(str(ext), tmp_path / "large", cuda, report)
    assert project.linked_checkout == repo
    ((kind, note),) = report.events
    assert kind == "fetch note" and f"the git checkout around it ({repo})" in note
    assert "lands in the checkout" in note


def test_a_requirement_whose_setup_py_needs_cuda_gets_the_cpu_torch_refusal(monkeypatch, tmp_path):
    def fail(spec, work, copy_native=False, metadata_env=None, leave_out=()):
        raise DownloadError(
            "pip failed", metadata_failed=True, reason="OSError: CUDA_HOME is not set"
        )

    monkeypatch.setattr(pipeline, "resolve_project", fail)
    cpu = pipeline.Toolchain(Torch(Version("2.13.0"), "2.13.0+cpu", None, (), Path("/torch")), None)
    with pytest.raises(Exception, match="is a CPU build") as caught:
        pipeline.resolve("gsplat==1.5.3", tmp_path, cpu, Recorder())
    assert "CUDA_HOME is not set" in str(caught.value)


def test_variants_and_the_plain_wheel_are_planned():
    planned = pipeline.plan_request(
        WheelRequest(None, parse_arch_list("sm_80,sm_90"), variants=True)
    )
    assert [(w.name, w.label, w.plain, w.archs_in_version) for w in planned] == [
        ("sm_80 [sm80]", "sm80", False, False),
        ("sm_90 [sm90]", "sm90", False, False),
        ("sm_80,sm_90 +PTX [plain]", None, True, False),
    ]
    (plain,) = pipeline.plan_request(WheelRequest(None, parse_arch_list("sm_80,sm_90"), plain=True))
    assert plain.plain and plain.ptx_archs == parse_arch_list("sm_90")
    with pytest.raises(ValueError, match="--plain"):
        pipeline.plan_request(
            WheelRequest(None, parse_arch_list("sm_80"), plain=True, variants=True)
        )
    with pytest.raises(ValueError, match="exact GPU only"):  # no label can say "only this GPU"
        pipeline.plan_request(WheelRequest(None, parse_arch_list("sm_90a"), variants=True))


# The setup.py side of test_a_native_build_...: what setuptools_ext does under prebuild wheel,
# with every way to compile or to ask nvcc refused. Prints [archs, the libraries' directory, version].
SETUP_PY = """
import json, sys
from pathlib import Path
from prebuild.tool.builder import compile as compile_module, flags, setuptools_ext

def refuse(*args, **kwargs):
    raise AssertionError("the setup.py under prebuild wheel compiled or asked nvcc")

compile_module.preflight = refuse
for name in ("compile_libraries", "compile_through_cache", "find_nvcc"):
    setattr(setuptools_ext, name, refuse)
options = flags.BuildOptions.from_env(json.loads(sys.argv[2]))
config = setuptools_ext.read_config(Path(sys.argv[1]))
compiled = setuptools_ext.compiled_libraries(config, options)
version = setuptools_ext.package_version(
    config, options, setuptools_ext.build_cuda_version(options)
)
print(json.dumps([",".join(a.sm for a in options.archs), compiled.cuda_library.parent.name, version]))
"""


def test_a_native_build_runs_the_preflight_once_and_compiles_each_wheel_once(tmp_path, monkeypatch):
    """Per `prebuild wheel`: one preflight (the pipeline's, for every wheel), one compile per
    wheel with the toolchain it found, and a setup.py that is handed the record of what was
    compiled, so it runs neither a preflight nor a compile of its own (the setup.py is played
    from the environment it is given in a process of its own, as a real one runs, so nothing
    this test process imported earlier changes setuptools; its own side: test_setuptools_ext.py)."""
    from types import SimpleNamespace

    from prebuild.tool.builder import compile as compile_module
    from prebuild.tool.builder import native
    from prebuild.tool.builder.compile import CompiledLibraries
    from prebuild.tool.scaffold import create

    project = tmp_path / "demo"
    create(project, "demo")
    preflights, compiles, packaged = [], [], []
    real_preflight = compile_module.preflight

    def preflight(options):
        preflights.append(options.archs)
        return real_preflight(options)

    def compile_libraries(project, options, on_progress=None, toolchain=None):
        compiles.append((options.archs, toolchain))
        libraries = tmp_path / "objects" / options.archs[0].sm
        libraries.mkdir(parents=True)
        for name in ("_C.abi3.so", "_C_cuda.abi3.so"):
            (libraries / name).write_bytes(b"")
        nvcc = toolchain.nvcc
        return CompiledLibraries(
            libraries / "_C.abi3.so",
            libraries / "_C_cuda.abi3.so",
            None,
            toolchain.torch,
            str(nvcc.version),
        )

    class SetupPy:
        """ProjectBuilder, its setup.py played from the environment it is handed."""

        def __init__(self, source, python_executable, runner):
            self.source, self.env = Path(source), runner

        def build(self, distribution, out):
            proc = subprocess.run(
                [sys.executable, "-c", SETUP_PY, str(self.source), json.dumps(self.env)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert proc.returncode == 0, proc.stderr[-4000:]
            archs, library_dir, version = json.loads(proc.stdout.splitlines()[-1])
            packaged.append((parse_arch_list(archs), library_dir))
            Path(out).mkdir(parents=True)
            wheel = Path(out) / f"demo-{version}-py3-none-any.whl"
            zipfile.ZipFile(wheel, "w").close()  # a wheel of nothing: the compile is a stand-in
            return str(wheel)

    monkeypatch.setattr(pipeline, "preflight", preflight)
    monkeypatch.setattr(compile_module, "preflight", preflight)
    monkeypatch.setattr(native, "compile_libraries", compile_libraries)
    monkeypatch.setattr(native, "quiet_runner", lambda log, env: env)
    monkeypatch.setattr(native, "ProjectBuilder", SetupPy)
    monkeypatch.setattr(
        native,
        "check_embedded_archs",  # the archs the setup.py was told to package
        lambda wheel: SimpleNamespace(sass_archs=packaged[-1][0], ptx_archs=()),
    )

    archs = parse_arch_list("sm_80,sm_90")
    result = build_wheels(
        WheelRequest(str(project), archs, tmp_path / "dist", build_dir=tmp_path / "build"),
        Recorder(),
    )
    assert preflights == [archs]  # once, for both wheels
    ((_, toolchain), _) = compiles
    assert [a for a, _ in compiles] == [archs[:1], archs[1:]]  # each wheel compiled once
    assert all(t is toolchain and t.nvcc is not None for _, t in compiles)  # the preflight's
    assert packaged == [(archs[:1], "sm_80"), (archs[1:], "sm_90")]  # what was compiled
    assert [w.path.name.split("+")[1].split("-")[0] for w in result.wheels] == [
        f"cu{toolchain.nvcc.version.major}{toolchain.nvcc.version.minor}.sm80",
        f"cu{toolchain.nvcc.version.major}{toolchain.nvcc.version.minor}.sm90",
    ]


def test_pips_metadata_step_gets_the_found_toolkit_as_cuda_home():
    """A requirement's setup.py runs in pip's metadata step before prebuild's build: with an
    nvcc wrapper on PATH and no CUDA_HOME, torch guesses dirname(dirname(wrapper)), which is no
    toolkit, and DeepSpeed 0.19.8's setup.py fails there running $CUDA_HOME/bin/nvcc -V."""
    from types import SimpleNamespace

    from prebuild.tool.builder.pipeline import metadata_env

    found = SimpleNamespace(nvcc=SimpleNamespace(toolkit=SimpleNamespace(root=Path("/opt/cuda"))))
    assert metadata_env(found, {"PATH": "/x"}) == {"PATH": "/x", "CUDA_HOME": "/opt/cuda"}
    assert metadata_env(found, {"CUDA_HOME": "/mine"}) == {"CUDA_HOME": "/mine"}  # the user's
    assert metadata_env(SimpleNamespace(nvcc=None), {}) == {}


def test_a_relative_build_dir_is_made_absolute(tmp_path, monkeypatch):
    """A classic build hands the shim toolkit's paths under it to the project's build, which
    runs in the project's copy: `--build-dir objs` gave it CXX=objs/cuda-shim/host-bin/c++,
    not found there (torch_memory_saver 0.0.10)."""
    monkeypatch.chdir(tmp_path)
    with pipeline.workspace(Path("objs")) as work:
        assert work.path == tmp_path / "objs" and not work.temporary


def needs_gpu_sdist(links: Path) -> None:
    """An sdist whose setup.py raises without a GPU, as Deformable-DETR's ops do (``raise
    NotImplementedError('Cuda is not availabel')``), in a find-links directory. It asks in a
    module of its own, as colossalai 0.5.0 does: its setup.py's text names no question."""
    ask = (
        "import torch\n"
        "if not torch.cuda.is_available():\n"
        "    raise NotImplementedError('Cuda is not available')\n"
    )
    setup = (
        "import sys\nsys.path.insert(0, '.')\nimport ask_gpu\nfrom setuptools import setup\n"
        "setup(name='needs_gpu', version='0.1.0')\n"
    )
    pkg_info = "Name: needs_gpu\nVersion: 0.1.0\n"
    files = {"setup.py": setup, "ask_gpu.py": ask, "PKG-INFO": pkg_info}
    write_sdist(links, "needs_gpu", "0.1.0", files)


@pytest.mark.parametrize("gpu_visible", [False, True])
def test_a_requirement_whose_setup_py_fails_without_a_gpu_is_fetched_with_torch_cuda_answering(
    tmp_path, monkeypatch, gpu_visible
):
    """pip runs a requirement's setup.py for its metadata before prebuild's build: one that
    raises with no GPU visible is asked again with torch.cuda answering for the wheels' newest
    arch (its build gets the same answer from the start), and the user is told. With a GPU
    visible its failure is its own, and stands."""
    from types import SimpleNamespace

    from prebuild.runtime import nvml
    from prebuild.tool.builder import build_site
    from prebuild.tool.builder.classic import ClassicToolchain

    needs_gpu_sdist(tmp_path / "links")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setattr(nvml, "any_gpu_visible", lambda environ: gpu_visible)
    toolchain = SimpleNamespace(torch=SimpleNamespace(cuda="13.0"))
    report = Recorder()
    archs = tuple(parse_arch_list(["sm_80", "sm_90"]))
    work = tmp_path / "work"
    work.mkdir()
    if gpu_visible:
        with pytest.raises(DownloadError) as error:
            pipeline.resolve("needs_gpu==0.1.0", work, toolchain, report, archs=archs)
        assert "Cuda is not available" in error.value.reason
        assert not any(event[0] == "fetch note" for event in report.events)
        return
    project = pipeline.resolve("needs_gpu==0.1.0", work, toolchain, report, archs=archs)
    assert (project.source / "setup.py").is_file() and project.kind == "classic"
    assert report.events[-1] == (
        "fetch note",
        "pip's metadata step failed with no GPU visible (NotImplementedError: Cuda is not "
        "available); it passed with torch.cuda and nvidia-smi answering as a GPU of compute capability 9.0 would",
    )
    nvcc = SimpleNamespace(toolkit=SimpleNamespace(include_dirs=()))  # the header check's
    classic = ClassicToolchain(toolchain.torch, nvcc, work / "shim", "17")
    request = pipeline.WheelRequest(None, ())  # its defaults: what `prebuild wheel` asks
    builder = pipeline.make_builder(project, classic, request, [], work)
    assert builder.site_env(archs)[build_site.ENV_CAPABILITY] == "9.0"


def test_a_release_whose_setup_py_labels_its_version_is_fetched_and_the_user_told(
    tmp_path, monkeypatch
):
    """auto-gptq 0.7.1's setup.py says 0.7.1+cu130: pip refuses the index's 0.7.1 for it, and
    prebuild fetches that sdist by its URL, saying why (project.relabelled_sdist)."""
    from types import SimpleNamespace

    setup = "from setuptools import setup\nsetup(name='labelled', version='1.0.0+cu130')\n"
    links = tmp_path / "links"
    write_sdist(links, "labelled", "1.0.0", {"setup.py": setup})
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    report = Recorder()
    work = tmp_path / "work"
    work.mkdir()
    toolchain = SimpleNamespace(torch=SimpleNamespace(cuda="13.0"))
    project = pipeline.resolve("labelled==1.0.0", work, toolchain, report)
    assert project.kind == "classic" and (project.source / "setup.py").read_text() == setup
    assert report.events[-1] == (
        "fetch note",
        "pip refused the sdist of 1.0.0: its setup.py labels the version 1.0.0+cu130 as it runs, "
        "which pip calls inconsistent with the index's 1.0.0 (it then takes an older release, or "
        f"none); fetched by its URL instead ({(links / 'labelled-1.0.0.tar.gz').as_uri()})",
    )


@pytest.mark.parametrize("then_fails", [False, True])
def test_what_pip_s_metadata_step_installs_into_the_environment_is_told(
    tmp_path, monkeypatch, then_fails
):
    """hqq 0.2.8's setup.py runs `python setup_cuda.py install` from its egg_info command, so
    pip's metadata step (before prebuild's build) already compiles and installs its extension
    into the environment. Here the setup.py writes a module into a stand-in site-packages: a
    note says so, and where the setup.py then fails, the fetch's error does."""
    from types import SimpleNamespace

    from prebuild.tool.builder import env_writes

    site = tmp_path / "site-packages"
    site.mkdir()
    setup = (
        "import os\nfrom pathlib import Path\nfrom setuptools import setup\n"
        "Path(os.environ['STAND_IN_SITE'], 'sneaky_ext.py').write_text('')\n"
        + ("raise RuntimeError('no GPU, no build')\n" if then_fails else "")
        + "setup(name='sneaky', version='1.0.0')\n"
    )
    write_sdist(tmp_path / "links", "sneaky", "1.0.0", {"setup.py": setup})
    monkeypatch.setenv("STAND_IN_SITE", str(site))
    monkeypatch.setattr(env_writes, "site_dirs", lambda: [site])
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    report = Recorder()
    work = tmp_path / "work"
    work.mkdir()
    toolchain = SimpleNamespace(torch=SimpleNamespace(cuda="13.0"))
    told = (
        "pip's metadata step (the project's setup.py, run to read its name) installed into this "
        f"environment itself, outside its wheel: sneaky_ext.py in {site} (its setup.py runs an "
        "install of its own, as hqq 0.2.8's `python setup_cuda.py install` does, unless another "
        "process installed them meanwhile). Other environments installing the wheel will not "
        "have them"
    )
    if then_fails:
        with pytest.raises(BuildError) as failed:
            pipeline.resolve("sneaky==1.0.0", work, toolchain, report)
        said = str(failed.value)
        assert "RuntimeError: no GPU, no build" in said, said
        assert said.endswith(f"\n\nAlso, {told}."), said
        return
    pipeline.resolve("sneaky==1.0.0", work, toolchain, report)
    notes = [text for kind, text in report.events if kind == "fetch note"]
    assert notes == [told]


def test_a_classic_project_versioning_each_wheel_differently_is_told(tmp_path):
    """FlashMLA's setup.py, with no git data, versions itself with the time of the build: the
    sm_80 and sm_90 wheels of one run are two releases. The second wheel's notes say so; a
    project's own label (auto-gptq's +cu130) that every wheel shares is no difference."""
    from prebuild.tool.builder.relabel import project_version

    assert project_version("1.0.0+abc.pt214.cu130.sm90") == "1.0.0+abc"
    assert project_version("1.0.0+pt214.cpu") == project_version("1.0.0") == "1.0.0"
    # a stable-ABI wheel's label names no torch
    assert project_version("1.0.0+abc.cu130.sm90.ptx90") == "1.0.0+abc"
    assert project_version("1.0.0+cu130.host") == project_version("1.0.0+cpu") == "1.0.0"
    assert project_version("1.0.0+abc.cpu.host") == "1.0.0+abc"  # CPU code tied to no torch
    manifest = classic_manifest()

    class Timestamped(FakeBuilder):
        def __init__(self, locals_: list[str]):
            super().__init__(None)
            self.locals = locals_

        def build(self, planned, out_dir, progress):
            arch = planned.archs[0].sm.replace("_", "")
            label = f"{self.locals.pop(0)}.pt214.cu130.{arch}"
            path = out_dir / f"flash_mla-1.0.0+{label}-cp311-cp311-linux_x86_64.whl"
            path.write_bytes(b"")
            return BuiltWheel(path, planned, planned.archs, (), manifest, 0.1)

    planned = pipeline.plan_request(WheelRequest(None, parse_arch_list("sm_80,sm_90")))
    wheels = pipeline.build_planned(
        Timestamped(["2026.12.1.22.33.54", "2026.12.1.22.41.10"]), planned, tmp_path, Recorder()
    )
    assert wheels[0].notes == ()
    assert wheels[1].notes == (
        "its version of the project is 1.0.0+2026.12.1.22.41.10, the first wheel's "
        "1.0.0+2026.12.1.22.33.54: the project's build versioned each wheel differently (as a "
        "setup.py versioning itself with the time of the build does), so pip and an index see a "
        "release for each, not one release for every arch",
    )
    same = pipeline.build_planned(Timestamped(["cu130", "cu130"]), planned, tmp_path, Recorder())
    assert [w.notes for w in same] == [(), ()]
    # a variant wheel's name has its label after the platform tag (--variants)
    plain = "x-1.0.0+lab1.pt214.cu130.sm90-cp311-cp311-linux_x86_64.whl"
    assert pipeline.other_version(plain, plain.replace(".whl", "-sm90.whl")) == ""


def test_config_settings_are_refused_for_a_native_project(tmp_path):
    """-C is for a classic project's own backend: a native project's build reads its
    pyproject.toml only, and is refused before anything is compiled rather than ignoring it."""
    from types import SimpleNamespace

    from prebuild.tool.builder.project import Project

    project = Project(kind="native", source=tmp_path, origin="kernels/")
    request = SimpleNamespace(config_settings={"--build-option": "--cuda_ext"})
    with pytest.raises(ValueError, match="leave -C out") as error:
        pipeline.make_builder(project, SimpleNamespace(), request, [], tmp_path)
    assert "kernels/ is a native project ([tool.prebuild])" in str(error.value)


def test_first_use_code_is_refused_for_a_native_project(tmp_path):
    """--first-use runs code making a classic project's compiles at first use: a native
    project compiles every kernel ahead of time, and is refused rather than ignoring it."""
    from types import SimpleNamespace

    from prebuild.tool.builder.project import Project

    project = Project(kind="native", source=tmp_path, origin="kernels/")
    request = SimpleNamespace(config_settings={}, first_use=("import kernels",))
    with pytest.raises(ValueError, match="leave --first-use out") as error:
        pipeline.make_builder(project, SimpleNamespace(), request, [], tmp_path)
    assert "kernels/ is a native project ([tool.prebuild])" in str(error.value)
