"""prebuild.tool.builder.project: what PROJECT names becomes a private copy (a directory, an sdist,
a pip requirement or URL); prebuild's own checkout is recognised; nothing is written into the
user's tree."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from sdists import write_sdist

from prebuild.tool.builder.classic_objects import STATE_FILE as OBJECTS_RECORD
from prebuild.tool.builder.compile import BuildError
from prebuild.tool.builder.project import CLASSIC, NATIVE, project_kind, resolve_project, unpack

ROOT = Path(__file__).resolve().parents[3]
SETUP = "from setuptools import setup\nsetup(name='tinyproj', version='1.0', py_modules=['tiny'])\n"


def tiny_project(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "setup.py").write_text(SETUP)
    (path / "tiny.py").write_text("X = 1\n")
    for junk in (".git/config", "build/lib/old.so", "tinyproj.egg-info/PKG-INFO"):
        (path / junk).parent.mkdir(parents=True, exist_ok=True)
        (path / junk).write_text("junk")
    return path


def snapshot(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


def test_a_directory_is_copied_without_vcs_data_or_old_build_outputs(tmp_path):
    user = tiny_project(tmp_path / "user")
    before = snapshot(user)
    project = resolve_project(str(user), tmp_path / "work")
    assert project.kind == CLASSIC and project.source != user
    assert sorted(p.name for p in project.source.iterdir()) == ["setup.py", "tiny.py"]
    (project.source / "build").mkdir()  # the build writes into the copy only
    assert snapshot(user) == before


def test_a_workspace_and_wheel_folder_inside_the_project_are_not_copied(tmp_path, monkeypatch):
    """``cd project; prebuild wheel . --build-dir work --out wheels``: the copy, made in
    work/source, once copied work into itself without end (RecursionError); now work and the
    wheels' folder are left out, here and in a checkout's mirror, and nothing else is."""
    user = tiny_project(tmp_path / "user")
    (user / "wheels").mkdir()
    (user / "wheels" / "old-1.0-py3-none-any.whl").write_text("w")
    (user / "work" / "source").mkdir(parents=True)
    (user / "work" / "source" / "old.txt").write_text("an earlier run's copy")
    (user / "workbench.py").write_text("Y = 2\n")  # a name that only starts like the workspace
    monkeypatch.chdir(user)
    for spec in (".", str(user)):
        project = resolve_project(spec, Path("work"), leave_out=(Path("wheels"),))
        assert sorted(p.name for p in project.source.iterdir()) == [
            "setup.py",
            "tiny.py",
            "workbench.py",
        ]
    # the workspace in the checkout around a project in its subdirectory
    (user / ".git" / "config").unlink()
    (user / ".git").rmdir()
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    shutil.move(user, repo / "ext")
    monkeypatch.chdir(repo)
    project = resolve_project("ext", repo / "work")
    assert sorted(p.name for p in (repo / "work" / "source").iterdir()) == ["ext"]
    assert project.source == repo / "work" / "source" / "ext"
    assert "wheels" in [p.name for p in project.source.iterdir()]  # not asked to leave it out


def test_a_project_in_a_checkouts_subdirectory_sees_the_checkout_around_its_copy(tmp_path):
    """tiny-cuda-nn's bindings/torch/setup.py compiles ../../src/*.cu: the copy sits in a
    mirror of the checkout whose other entries are copies (VCS data and build outputs left
    out), and the build writes only in the workspace, even outside its own directory."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    for name, text in {
        "CMakeLists.txt": "project(x)\n",
        ".gitmodules": "[submodule]\n",
        "src/common.cu": "// kernels\n",
        "build/old.o": "junk",
        "bindings/other/README": "other\n",
    }.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    user = tiny_project(repo / "bindings" / "torch")
    (user / ".git" / "config").unlink()
    (user / ".git").rmdir()  # a subdirectory of the checkout, not a checkout of its own
    before = snapshot(repo)
    project = resolve_project(str(user), tmp_path / "work")
    mirror = tmp_path / "work" / "source"
    assert project.source == mirror / "bindings" / "torch" and not project.source.is_symlink()
    assert sorted(p.name for p in project.source.iterdir()) == ["setup.py", "tiny.py"]
    assert sorted(p.name for p in mirror.iterdir()) == [
        ".gitmodules",
        "CMakeLists.txt",
        "bindings",
        "src",
    ]
    assert (project.source / "../../src/common.cu").read_text() == "// kernels\n"
    assert project.linked_checkout is None
    assert not any(p.is_symlink() for p in mirror.rglob("*"))
    (project.source / "build").mkdir()  # the build writes into the copy only
    (project.source / "../../src/generated.h").write_text("// written by a build\n")
    assert snapshot(repo) == before
    assert resolve_project(str(user), tmp_path / "work").source == project.source
    assert snapshot(repo) == before


def test_a_large_checkout_around_a_project_is_linked_and_the_user_told(tmp_path):
    """Past MIRROR_COPY_LIMIT the checkout's other entries are links (a checkout holding data
    or weights is not copied whole); resolve_project says so in Project.linked_checkout, and
    the workspace is cleared through the links, never into the checkout."""
    from prebuild.tool.builder.project import IGNORED, copy_in_checkout, tree_size

    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "data").mkdir()
    (repo / "data" / "weights.bin").write_bytes(b"w" * 4096)
    (repo / "src.cu").write_text("// kernels\n")
    (repo / "build").mkdir()
    (repo / "build" / "big.o").write_bytes(b"o" * 100_000)  # an earlier build's: not counted
    user = tiny_project(repo / "ext")
    (user / ".git" / "config").unlink()
    (user / ".git").rmdir()
    ignored = shutil.ignore_patterns(*IGNORED)
    assert tree_size([repo / "data", repo / "src.cu"], ignored, 10**9) == 4096 + 11
    assert tree_size([repo], ignored, 10**9) < 100_000  # build/ left out
    assert tree_size([repo / "data", repo / "src.cu"], ignored, 100) == 4096  # stops past it
    before = snapshot(repo)
    place, linked = copy_in_checkout(user, repo, tmp_path / "small", limit=10**6)
    assert not linked and not (tmp_path / "small" / "data").is_symlink()
    place, linked = copy_in_checkout(user, repo, tmp_path / "large", limit=1024)
    assert linked and (tmp_path / "large" / "data").resolve() == repo / "data"
    assert (place / "../src.cu").read_text() == "// kernels\n"
    shutil.rmtree(tmp_path / "large")
    assert snapshot(repo) == before
    # the checkout's root itself, or a directory in no checkout: a plain copy
    from prebuild.tool.builder.project import enclosing_checkout

    assert enclosing_checkout(user) == repo and enclosing_checkout(repo) == repo
    assert enclosing_checkout(tmp_path) is None


def test_a_native_project_is_built_in_place_and_found_from_inside(monkeypatch, tmp_path):
    """prebuild's own checkout declares [tool.prebuild]: a native project, built in place."""
    project = resolve_project(str(ROOT), Path("/unused"))
    assert (project.kind, project.source) == (NATIVE, ROOT) and project_kind(str(ROOT)) == NATIVE
    monkeypatch.chdir(
        ROOT / "tests" / "ops"
    )  # no PROJECT: the project around the current directory
    assert project_kind(None) == NATIVE and resolve_project(None, Path("/unused")).source == ROOT
    user = tiny_project(tmp_path / "user")  # a classic project's directory: a private copy of "."
    monkeypatch.chdir(user)
    assert project_kind(None) == CLASSIC
    copied = resolve_project(None, tmp_path / "work")
    assert copied.kind == CLASSIC and copied.source == tmp_path / "work" / "source"


def test_the_objects_an_earlier_build_left_in_the_copy_are_carried_into_the_next_copy(tmp_path):
    """--build-dir: the copy is made afresh, with the user's edits, but the build/ marked by a
    classic build's record goes with it where the source is in the same place."""
    user = tiny_project(tmp_path / "user")
    work = tmp_path / "work"
    first = resolve_project(str(user), work)
    assert first.identity == str(user.resolve())
    (first.source / "build" / "temp.x").mkdir(parents=True)
    (first.source / "build" / "temp.x" / "tiny.o").write_bytes(b"object")
    (first.source / "build" / OBJECTS_RECORD).write_text("{}")
    (user / "tiny.py").write_text("X = 2\n")  # an edit between runs
    again = resolve_project(str(user), work)
    assert again.source == first.source and (again.source / "tiny.py").read_text() == "X = 2\n"
    assert (again.source / "build" / "temp.x" / "tiny.o").read_bytes() == b"object"
    assert sorted(p.name for p in work.iterdir()) == ["source"]  # nothing left set aside
    # Another source in another place of the copy (an sdist's root): not carried.
    sdist = tmp_path / "tinyproj-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        tf.add(user / "setup.py", "tinyproj-1.0/setup.py")
    other = resolve_project(str(sdist), work)
    assert other.source == work / "source" / "tinyproj-1.0"
    assert not (other.source / "build").exists() and not (work / "source" / "build").exists()
    assert other.identity.startswith("tinyproj-1.0.tar.gz sha256:")
    # A build/ without the record (not prebuild's) is never carried.
    (other.source / "build").mkdir()
    assert not (resolve_project(str(sdist), work).source / "build").exists()


def test_an_sdist_is_unpacked_to_its_root(tmp_path):
    user = tiny_project(tmp_path / "tinyproj-1.0")
    sdist = tmp_path / "tinyproj-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        tf.add(user / "setup.py", "tinyproj-1.0/setup.py")
        tf.add(user / "tiny.py", "tinyproj-1.0/tiny.py")
    assert project_kind(str(sdist)) is None  # known once unpacked
    project = resolve_project(str(sdist), tmp_path / "work")
    assert project.kind == CLASSIC and (project.source / "setup.py").read_text() == SETUP


def test_archives_pointing_outside_are_refused(tmp_path):
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../escaped.txt", "x")
    with pytest.raises(BuildError, match="outside"):
        unpack(evil, tmp_path / "out")
    assert not (tmp_path / "escaped.txt").exists()
    evil_tar = tmp_path / "evil.tar.gz"
    with tarfile.open(evil_tar, "w:gz") as tf:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(BuildError):
        unpack(evil_tar, tmp_path / "out2")
    assert not (tmp_path / "escaped.txt").exists()


@pytest.mark.parametrize(
    "spec, message",
    [("nothing/here/at/all==", "cannot get the source"), ("README.md", "not a source archive")],
)
def test_bad_projects_are_refused(tmp_path, spec, message):
    with pytest.raises(BuildError, match=message):
        resolve_project(str(ROOT / spec) if spec == "README.md" else spec, tmp_path / "work")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BuildError, match="no setup.py or pyproject.toml"):
        resolve_project(str(empty), tmp_path / "work")


def git_repo(path: Path, files: dict[str, str]) -> list[str]:
    """A git repository at ``path`` holding ``files``, committed; its git command prefix."""
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git = ["git", "-C", str(path), "-c", "user.email=t@t", "-c", "user.name=t"]
    if not (path / ".git").exists():
        subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    return git


def test_a_git_url_is_cloned_whole_with_its_submodules_at_its_revision(tmp_path, monkeypatch):
    """pip download would archive the subdirectory alone; tiny-cuda-nn's bindings/torch
    (``pip install git+https://github.com/NVlabs/tiny-cuda-nn/#subdirectory=bindings/torch``)
    compiles ../../src and needs its submodules."""
    # git refuses file:// submodules unless told (only this test's repositories are local)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.file.allow")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")
    git_repo(tmp_path / "fmt", {"include/fmt.h": "// fmt\n"})
    repo = tmp_path / "repo"
    git = git_repo(repo, {"src/a.cu": "// v1\n", "bindings/torch/setup.py": SETUP})
    subprocess.run(
        [*git, "submodule", "add", "-q", f"file://{tmp_path / 'fmt'}", "deps/fmt"], check=True
    )
    git_repo(repo, {})
    subprocess.run([*git, "tag", "v1"], check=True)
    git_repo(repo, {"src/a.cu": "// v2\n"})

    spec = f"git+file://{repo}@v1#subdirectory=bindings/torch"
    project = resolve_project(spec, tmp_path / "work")
    assert project.kind == CLASSIC and project.origin == spec
    assert (project.source / "setup.py").read_text() == SETUP
    assert (project.source / "../../src/a.cu").read_text() == "// v1\n"
    assert (project.source / "../../deps/fmt/include/fmt.h").read_text() == "// fmt\n"
    assert (project.source / "../../.git").exists()  # setuptools_scm reads the version there
    # the default branch, with a name in front as in a requirements file
    latest = resolve_project(
        f"tiny @ git+file://{repo}#subdirectory=bindings/torch", tmp_path / "w2"
    )
    assert (latest.source / "../../src/a.cu").read_text() == "// v2\n"
    with pytest.raises(BuildError, match="the repository has no directory 'nowhere'"):
        resolve_project(f"git+file://{repo}#subdirectory=nowhere", tmp_path / "w3")
    with pytest.raises(BuildError, match="the source has no setup.py or pyproject.toml"):
        resolve_project(f"git+file://{repo}#subdirectory=src", tmp_path / "w4")
    with pytest.raises(BuildError, match="cannot get the source of .* with git"):
        resolve_project(f"git+file://{repo}@no-such-tag", tmp_path / "w5")


def test_git_requirements_are_read_as_pip_reads_them():
    from prebuild.tool.builder.project import git_source

    assert git_source(
        "git+https://github.com/NVlabs/tiny-cuda-nn/#subdirectory=bindings/torch"
    ) == (
        "https://github.com/NVlabs/tiny-cuda-nn/",
        None,
        "bindings/torch",
    )
    assert git_source("x @ git+ssh://git@github.com/o/r.git@v1.0#egg=x&subdirectory=a/b") == (
        "ssh://git@github.com/o/r.git",
        "v1.0",
        "a/b",
    )
    assert git_source("git+https://github.com/o/r@59f5f77") == (
        "https://github.com/o/r",
        "59f5f77",
        "",
    )
    assert git_source("gsplat==1.5.3") is None and git_source("./gsplat") is None


def test_a_classic_project_is_refused_with_a_cpu_torch_before_or_after_unpacking(tmp_path):
    """This venv's torch is a CPU build: a directory is refused before it is copied, an sdist
    once unpacked shows it is classic; the message names the torch to install."""
    from typer.testing import CliRunner

    from prebuild.tool.cli import app

    user = tiny_project(tmp_path / "tinyproj-1.0")
    sdist = tmp_path / "tinyproj-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        tf.add(user / "setup.py", "tinyproj-1.0/setup.py")
    for spec in (str(user), str(sdist)):
        result = CliRunner().invoke(
            app,
            [
                "wheel",
                "--arch",
                "sm_90",
                spec,
                "--out",
                str(tmp_path / "dist"),
                "--build-dir",
                str(tmp_path / "work"),
            ],
            env={"COLUMNS": "300"},
        )
        text = " ".join(result.output.split())
        assert result.exit_code == 2 and "is a CPU build" in text and "pip install" in text, text
        assert not list((tmp_path / "dist").glob("*.whl"))


# A classic setup.py, as gsplat's: it builds its CUDAExtension even to say its name, which a CPU
# torch refuses (CUDA_HOME is None there).
CUDA_SETUP = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
setup(name="needscuda", version="1.0", ext_modules=[CUDAExtension("needscuda._C", ["k.cu"])],
      cmdclass={"build_ext": BuildExtension})
"""


def test_a_requirement_whose_setup_needs_cuda_torch_gets_the_cpu_torch_refusal(
    tmp_path, monkeypatch
):
    """`prebuild wheel gsplat==1.5.3` with a CPU torch: pip's metadata step runs the project's
    setup.py, which dies; the user is told what a directory or an sdist is told, not pip's
    nested traceback. Nothing is left in the temporary directory."""
    from typer.testing import CliRunner

    from prebuild.tool.cli import app

    project = tmp_path / "needscuda"
    project.mkdir()
    (project / "setup.py").write_text(CUDA_SETUP)
    (project / "k.cu").write_text("__global__ void k() {}\n")
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    result = CliRunner().invoke(
        app,
        [
            "wheel",
            "--arch",
            "sm_90",
            f"needscuda @ {project.as_uri()}",
            "--out",
            str(tmp_path / "dist"),
        ],
        env={"COLUMNS": "300"},
    )
    text = " ".join(result.output.split())
    assert result.exit_code == 2, text
    assert "is a CPU build" in text and "pip install 'torch==2.14.1'" in text, text
    assert "pip could not even read needscuda @ file:" in text and "CUDA_HOME" in text, text
    assert "Traceback" not in text and "metadata-generation-failed" not in text
    assert list(temp.iterdir()) == []


def test_the_reason_read_from_pips_output_is_the_projects_exception_even_a_bare_one():
    """warp-rnnt 0.7.0's setup.py raises a bare Exception with no GPU visible; pip's output
    (cut) ends with its own hint, which says nothing."""
    from prebuild.tool.builder.project import last_error

    output = """  ╰─> [7 lines of output]
      Traceback (most recent call last):
        File "/tmp/pip-download-x/warp-rnnt/setup.py", line 22, in <module>
          raise Exception("CPU version is not implemented")
      Exception: CPU version is not implemented
      [end of output]
  note: This error originates from a subprocess, and is likely not a problem with pip.
error: metadata-generation-failed
hint: See above for details.
"""
    assert last_error(output) == "Exception: CPU version is not implemented"
    assert last_error("a\n  torch.OutOfMemoryError: b\nlast") == "torch.OutOfMemoryError: b"
    assert last_error("nothing named\nhint: See above for details.\n") == (
        "hint: See above for details."
    )


def fake_setuptools_scm(tmp_path: Path, monkeypatch, version: str | None = "1.2.3") -> Path:
    """A ``python -m setuptools_scm`` that prints ``version`` (None: fails, as with no tag) and
    records where it ran and GIT_OPTIONAL_LOCKS (the real one: checked by hand with
    setuptools_scm 10.3.4)."""
    site = tmp_path / "fake-site"
    (site / "setuptools_scm").mkdir(parents=True, exist_ok=True)
    (site / "setuptools_scm" / "__init__.py").write_text("")
    (site / "setuptools_scm" / "__main__.py").write_text(
        "import os, pathlib\n"
        f"pathlib.Path({str(tmp_path / 'ran')!r}).write_text("
        "os.getcwd() + ' ' + os.environ.get('GIT_OPTIONAL_LOCKS', ''))\n"
        + (f"print('some warning')\nprint({version!r})\n" if version else "raise SystemExit(1)\n")
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    return tmp_path / "ran"


def test_a_setuptools_scm_project_in_a_checkout_gets_its_checkouts_version(tmp_path, monkeypatch):
    """Its copy has no .git, so setuptools_scm could not read the version there: it is read
    in the checkout (git told to write nothing), and given to the build."""
    from types import SimpleNamespace

    from prebuild.tool.builder.classic import ClassicBuilder
    from prebuild.tool.builder.project import SCM_VERSION_ENV, scm_version, uses_setuptools_scm

    ran = fake_setuptools_scm(tmp_path, monkeypatch)
    user = tiny_project(tmp_path / "user")  # a checkout: it holds .git
    assert not uses_setuptools_scm(user) and scm_version(user) is None and not ran.exists()
    (user / "pyproject.toml").write_text('[tool.setuptools_scm]\nversion_scheme = "x"\n')
    assert uses_setuptools_scm(user)
    project = resolve_project(str(user), tmp_path / "work")
    assert project.scm_version == "1.2.3"
    assert ran.read_text() == f"{user} 0"
    builder = ClassicBuilder(
        project.source, SimpleNamespace(nvcc=None), tmp_path / "work", scm_version="1.2.3"
    )
    assert builder.scm_env({}) == {SCM_VERSION_ENV: "1.2.3"}
    assert builder.scm_env({SCM_VERSION_ENV: "9"}) == {}  # the user's own wins
    # the user is told, once, where the version came from
    from prebuild.tool.builder import pipeline

    said: list[str] = []
    report = SimpleNamespace(fetching=said.append, fetch_note=said.append)
    pipeline.resolve(str(user), tmp_path / "work", SimpleNamespace(), report)
    assert said == [
        "version 1.2.3, read by setuptools_scm in its git checkout itself, as pip's in-tree "
        "build reads it"
    ]
    monkeypatch.setenv(SCM_VERSION_ENV, "9")
    pipeline.resolve(str(user), tmp_path / "work", SimpleNamespace(), report)
    assert len(said) == 1
    # not in a checkout, or setuptools_scm cannot say: nothing given, the build says why
    (user / ".git" / "config").unlink()
    (user / ".git").rmdir()
    assert scm_version(user) is None
    (user / ".git").mkdir()
    assert scm_version(user) == "1.2.3"
    fake_setuptools_scm(tmp_path, monkeypatch, version=None)
    assert scm_version(user) is None


REPORT = {
    "install": [
        {
            "download_info": {
                "url": "https://files.example/packages/bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl"
            },
            "metadata": {
                "name": "bitsandbytes",
                "version": "0.50.2",
                "project_url": [
                    "docs, https://huggingface.co/docs/bitsandbytes/main",
                    "homepage, https://github.com/bitsandbytes-foundation/bitsandbytes",
                ],
            },
        }
    ]
}


def test_a_requirement_published_as_wheels_only_is_told_where_its_source_is(monkeypatch):
    """pip finds no sdist of bitsandbytes 0.50.2 (its makers publish wheels only): the error
    says so, names the wheel pip would take, and the repository to build from."""
    import json

    from prebuild.tool.builder import project as project_module

    asked = []

    def run(command, **kwargs):
        asked.append(command)
        return subprocess.CompletedProcess(command, 0, json.dumps(REPORT), "")

    monkeypatch.setattr(project_module.processes, "run", run)
    output = "ERROR: No matching distribution found for bitsandbytes==0.50.2\n"
    said = project_module.wheels_only_hint("bitsandbytes==0.50.2", output, None)
    assert said == (
        "bitsandbytes 0.50.2 has no source distribution on the package index, only wheels "
        "(bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl: built by its makers, for the "
        "archs and torch they chose). prebuild compiles a project from its source: build it "
        "from its repository, https://github.com/bitsandbytes-foundation/bitsandbytes, at the "
        "tag of 0.50.2: prebuild wheel --arch ... "
        "'git+https://github.com/bitsandbytes-foundation/bitsandbytes@TAG'."
    )
    (command,) = asked
    assert {"--dry-run", "--only-binary", "--report"} <= set(command)  # nothing installed
    # with a pip constraint on it (this machine's pip.conf caps torchvision), pip says so as a
    # conflict (torchvision 0.29.1 has wheels only)
    constrained = (
        "ERROR: Cannot install torchvision==0.29.1 because these package versions have "
        "conflicting dependencies.\nThe conflict is caused by:\n    The user requested "
        "torchvision==0.29.1\n    The user requested (constraint) torchvision<=0.29.1\n"
        "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/...\n"
    )
    assert project_module.wheels_only_hint("torchvision==0.29.1", constrained, None)
    assert len(asked) == 2
    assert project_module.wheels_only_hint("x", "ERROR: Could not install", None) == ""
    assert len(asked) == 2  # another failure: pip is not asked again
    no_url = {"install": [{**REPORT["install"][0], "metadata": {"name": "x", "version": "1"}}]}
    assert project_module.wheels_only_message("x", json.dumps(no_url)).endswith(
        "build it from its repository (a git URL: git+https://...@TAG)."
    )
    for report in ("", "{}", '{"install": []}'):
        assert project_module.wheels_only_message("x", report) == ""


def test_an_environment_without_pip_is_told_to_install_it_or_give_the_source(monkeypatch, tmp_path):
    """uv makes its venvs without pip: fetching a requirement's source says so, and what to do,
    before anything runs (a directory, an sdist or a git URL builds without pip)."""
    import importlib.util

    from prebuild.tool.builder import project as project_module

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pip" else find_spec(name, *a)
    )
    ran = []
    monkeypatch.setattr(project_module.processes, "run", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(project_module.processes, "popen", lambda *a, **k: ran.append(a))
    with pytest.raises(project_module.DownloadError) as info:
        project_module.download_source("diso==0.1.4", tmp_path / "download")
    said = str(info.value)
    assert said.startswith("cannot get the source of 'diso==0.1.4': prebuild fetches it with pip")
    assert "`uv pip install pip`" in said and "an sdist (.tar.gz)" in said
    assert ran == [] and not info.value.metadata_failed


# pip 23.2's line for auto-gptq 0.7.1, whose setup.py appends the CUDA version to its version.
PIP_DISCARDED = (
    "Discarding https://files.example/auto_gptq-0.7.1.tar.gz#sha256=ab12 (from "
    "https://pypi.org/simple/auto-gptq/) (requires-python:>=3.8.0): Requested auto-gptq==0.7.1 "
    "from https://files.example/auto_gptq-0.7.1.tar.gz#sha256=ab12 has inconsistent version: "
    "expected '0.7.1', but metadata has '0.7.1+cu130'\n"
)


def test_an_sdist_refused_only_for_its_setup_py_s_local_label_is_recognised():
    from prebuild.tool.builder.project import Relabelled, relabelled_sdist

    assert relabelled_sdist(PIP_DISCARDED) == Relabelled(
        "https://files.example/auto_gptq-0.7.1.tar.gz#sha256=ab12", "0.7.1", "0.7.1+cu130"
    )
    # another version altogether, a label on the index's side, or no label: a wrong sdist
    for expected, got in (("0.7.1", "0.7.2+cu130"), ("0.7.1+a", "0.7.1+b"), ("0.7.1", "0.7.1.0")):
        line = PIP_DISCARDED.replace("'0.7.1'", f"'{expected}'").replace(
            "'0.7.1+cu130'", f"'{got}'"
        )
        assert relabelled_sdist(line) is None, (expected, got)
    assert relabelled_sdist(PIP_DISCARDED.replace("'0.7.1+cu130'", "'not a version'")) is None
    assert relabelled_sdist("Collecting auto-gptq==0.7.1\n") is None


@pytest.mark.parametrize("spec", ["labelled", "labelled==1.0.0"])
def test_the_release_asked_for_is_fetched_although_its_setup_py_labels_its_version(tmp_path, spec):
    """A setup.py that labels its version as it runs (auto-gptq 0.7.1: ``0.7.1+cu130``) makes
    pip refuse the sdist as inconsistent, then fetch an older release (unpinned) or fail
    (pinned, with a misleading "No matching distribution"). Real pip, offline, on a folder
    holding 1.0.0 (labelling itself) and 0.9.0 (not): 1.0.0 is fetched by its URL."""
    from pip_env import clean_pip_env

    from prebuild.tool.builder.project import download_source

    links = tmp_path / "links"
    for version, says in (("1.0.0", "1.0.0+cu130"), ("0.9.0", "0.9.0")):
        setup = f"from setuptools import setup\nsetup(name='labelled', version={says!r})\n"
        write_sdist(links, "labelled", version, {"setup.py": setup})
    env = clean_pip_env(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(links))
    archive, relabelled = download_source(spec, tmp_path / "download", env)
    assert archive.name == "labelled-1.0.0.tar.gz"
    assert [p.name for p in (tmp_path / "download").iterdir()] == [archive.name]
    assert relabelled is not None
    assert (relabelled.version, relabelled.labelled) == ("1.0.0", "1.0.0+cu130")
    assert relabelled.url.split("#")[0] == (links / "labelled-1.0.0.tar.gz").as_uri()
    # a release pip takes as it is comes with no note
    archive, relabelled = download_source("labelled==0.9.0", tmp_path / "download", env)
    assert archive.name == "labelled-0.9.0.tar.gz" and relabelled is None


@pytest.mark.parametrize(
    ("setup", "told"),
    [
        (  # torch-memory-saver 0.0.10
            "raise RuntimeError('TMS_CUDA_MAJOR env var must be set for CUDA builds')\n",
            "Its setup.py asks for the environment variable TMS_CUDA_MAJOR (RuntimeError: "
            "TMS_CUDA_MAJOR env var must be set for CUDA builds). The project's build runs in "
            "prebuild's environment: set it for the command, as the project's documentation "
            "says: TMS_CUDA_MAJOR=<value> prebuild wheel ...",
        ),
        (  # marlin-kernels 0.3.7's sdist lacks the envs.py its setup.py loads
            "import os\nopen(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'envs.py'))\n",
            "Its sdist lacks envs.py, which its setup.py reads as it runs: the sdist was published "
            "without it (its makers' packaging leaves it out), so it cannot be built as it is, by "
            "prebuild or pip. Build it from its repository instead, at the release's tag: "
            "prebuild wheel --arch ... 'git+https://...@TAG'.",
        ),
        (  # sru 2.6.0's opens requirements.txt, relative to the sdist (pip's working directory)
            "open('requirements.txt')\n",
            "Its sdist lacks requirements.txt, which its setup.py reads",
        ),
        (  # MinkowskiEngine 0.5.4 asks numpy.distutils, which passes it by position
            "from setuptools._distutils.ccompiler import new_compiler\nnew_compiler(dry_run=0)\n",
            "Its build passes distutils the `dry_run` argument, which setuptools removed in 81.0: "
            "install an older setuptools in this environment, then build again: pip install "
            "'setuptools>=72.2,<81'.",
        ),
    ],
    ids=["a variable", "a file", "a relative file", "dry_run"],
)
def test_a_setup_py_failing_in_pip_s_metadata_step_on_what_it_lacks_is_told_what(
    tmp_path, setup, told
):
    """Real pip, offline, on a find-links folder: the error ends with what the project's
    setup.py lacked and what to do."""
    from pip_env import clean_pip_env

    from prebuild.tool.builder.project import DownloadError, download_source

    links = tmp_path / "links"
    write_sdist(links, "lacking", "1.0.0", {"setup.py": setup})
    env = clean_pip_env(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(links))
    with pytest.raises(DownloadError) as failed:
        download_source("lacking==1.0.0", tmp_path / "download", env)
    said = str(failed.value)
    assert failed.value.metadata_failed and f"\n\n{told}" in said, said


def test_only_an_error_asking_for_a_variable_names_one():
    from prebuild.tool.builder.project import variable_hint

    environ = "  File 'setup.py', line 3\n    os.environ['FOO_HOME']\nKeyError: 'FOO_HOME'\n"
    assert "variable FOO_HOME (KeyError: 'FOO_HOME')" in variable_hint(environ)
    both = variable_hint("OSError: Set the environment variables CUDA_HOME and NVCC_ARCHS.")
    assert "variables CUDA_HOME, NVCC_ARCHS (" in both and "CUDA_HOME=<value> NVCC_ARCHS=" in both
    assert variable_hint("KeyError: 'FOO_HOME'\n") == ""  # a dict's, not the environment's
    kaolin = (
        "ImportError: Kaolin requires PyTorch >= 2.5.1, <= 2.12.1, but found version "
        "2.14.1+cu130. Set IGNORE_TORCH_VER=1 to proceed with this version."
    )
    assert variable_hint(kaolin).endswith(": IGNORE_TORCH_VER=1 prebuild wheel ...")
    assert variable_hint("RuntimeError: CUDA_ERROR_NO_DEVICE: no device\n") == ""
    assert variable_hint("RuntimeError: env var must be set\n") == ""  # none named


def test_numpy_distutils_passing_dry_run_is_named():
    """MinkowskiEngine 0.5.4's setup.py asks numpy.distutils for BLAS, and its new_compiler
    passes dry_run by position (setuptools 84.2.1 here; with 80.10.2 it went on)."""
    from prebuild.tool.builder.project import dry_run_hint

    output = (
        '  File "/v/site-packages/numpy/distutils/ccompiler.py", line 792, in new_compiler\n'
        "    compiler = klass(None, dry_run, force)\n"
        "TypeError: Compiler.__init__() takes from 1 to 3 positional arguments but 4 were given\n"
    )
    assert "argument (through numpy.distutils, which its setup.py uses)," in dry_run_hint(output)
    assert dry_run_hint("TypeError: f() takes 1 positional argument but 2 were given") == ""


@pytest.mark.parametrize(
    ("spec", "path"),
    [("./fused-ssim", True), ("dist/x-1.0.tar.gz", True), ("x.zip", True), ("~/p", True)]
    + [("gsplat==1.5.3", False), ("gsplat", False), ("git+https://h/r@v", False)]
    + [("x @ https://h/x-1.0.tar.gz", False), ("https://h/x-1.0.tar.gz", False)],
)
def test_a_spec_that_can_only_be_a_path_is_told_apart(spec, path):
    from prebuild.tool.builder.project import names_a_path

    assert names_a_path(spec) is path


def test_a_path_that_is_not_there_is_said_to_be_missing_before_anything_runs(tmp_path):
    """A mistyped sdist path used to go to pip as a requirement, which failed in a traceback."""
    missing = str(tmp_path / "sru-2.6.0.tar.gz")
    with pytest.raises(BuildError, match=r"sru-2\.6\.0\.tar\.gz: no such file or directory\."):
        project_kind(missing)
    assert project_kind("sru==2.6.0") is None  # a requirement: fetched


@pytest.mark.parametrize("detached", [False, True])
def test_the_copy_of_a_checkout_has_git_data_of_its_own_at_the_checkouts_head(tmp_path, detached):
    """FlashMLA's setup.py versions itself with `git rev-parse --short HEAD` (else the time of
    the build, another for each arch's wheel): in the copy, git answers as in the checkout, at
    its branch or detached HEAD, and nothing is written in the checkout's .git."""
    repo = tmp_path / "repo"
    git = git_repo(repo, {"ext/setup.py": "from setuptools import setup\nsetup()\n"})
    first = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    git_repo(repo, {"ext/kernel.cu": "// kernels\n"})  # a second commit, the one checked out
    subprocess.run([*git, "checkout", "-q", "-b", "feature"], check=True)
    if detached:
        subprocess.run([*git, "checkout", "-q", "--detach"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert head != first
    before = snapshot(repo / ".git")
    project = resolve_project(str(repo / "ext"), tmp_path / "work")
    copy = tmp_path / "work" / "source"
    assert project.source == copy / "ext"

    def in_copy(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(project.source), *args], capture_output=True)
        return done.stdout.decode()

    assert in_copy("rev-parse", "HEAD") == head
    assert in_copy("rev-parse", "--abbrev-ref", "HEAD").strip() == (
        "HEAD" if detached else "feature"
    )
    assert in_copy("status", "--porcelain") == ""  # the copy's files are HEAD's
    assert in_copy("rev-parse", "--show-toplevel").strip() == str(copy)
    assert snapshot(repo / ".git") == before


def test_a_directory_in_no_git_repository_gets_no_git_data(tmp_path):
    """A .git that git cannot read (the tests' stand-in checkouts) gives the copy none."""
    from prebuild.tool.builder.project import copy_git_data

    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "copy").mkdir()
    assert copy_git_data(tmp_path / "repo", tmp_path / "copy") is False
    assert list((tmp_path / "copy").iterdir()) == []


def test_a_setup_script_under_another_name_is_named_with_what_to_do(tmp_path):
    """GPTQ-for-LLaMa's cuda branch has setup_cuda.py alone (`python setup_cuda.py install`):
    the refusal names it and the copy that makes it buildable; a folder with neither, nothing."""
    project = tmp_path / "gptq"
    project.mkdir()
    (project / "setup_cuda.py").write_text(
        "from setuptools import setup\nsetup(name='quant_cuda', ext_modules=[])\n"
    )
    (project / "setup_utils.py").write_text("def helper():\n    pass\n")  # no setup() call
    with pytest.raises(BuildError) as refused:
        project_kind(str(project))
    said = str(refused.value)
    assert said.startswith(f"{project} has no setup.py or pyproject.toml")
    assert "It has setup_cuda.py, a setup script under another name" in said
    assert f"copy it to setup.py in {project} (cp setup_cuda.py setup.py)" in said
    with pytest.raises(BuildError) as refused:
        resolve_project(str(project), tmp_path / "work")
    assert "(cp setup_cuda.py setup.py)" in str(refused.value)
    (project / "setup_cuda.py").unlink()
    with pytest.raises(BuildError) as refused:
        project_kind(str(project))
    assert str(refused.value).endswith("not a project prebuild can build.")
