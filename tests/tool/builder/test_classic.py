"""prebuild.tool.builder.classic and the refusals it writes (classic_messages), the parts that
need no CUDA torch: why a wheel without a library is refused (JIT or pure Python) or one of host
code only, TORCH_CUDA_ARCH_LIST, the preflight refusing a CPU torch, torch.cuda's answer, ninja
and the header check asked of a build, its requirements asked once."""

from __future__ import annotations

from pathlib import Path

import pytest

from prebuild.runtime.arch import parse_arch_list
from prebuild.runtime.manifest import BuiltLibrary
from prebuild.tool.builder.classic import preflight_classic, torch_cuda_arch_list
from prebuild.tool.builder.classic_messages import no_extension_message
from prebuild.tool.builder.compile import BuildError
from prebuild.tool.builder.toolchain import ToolchainError
from prebuild.tool.jit_sites import jit_sites

A = parse_arch_list


def test_torch_cuda_arch_list():
    assert torch_cuda_arch_list(A("sm_80,sm_90"), ()) == "8.0;9.0"
    assert torch_cuda_arch_list(A("sm_80,sm_90"), A("compute_90")) == "8.0;9.0+PTX"
    assert torch_cuda_arch_list(A("sm_90a"), ()) == "9.0a"


def test_preflight_refuses_a_cpu_torch_naming_the_torch_to_install(monkeypatch):
    from packaging.version import Version

    from prebuild.tool.builder.toolchain import Torch

    cpu_torch = Torch(Version("2.13.0"), "2.13.0+cpu", None, (), Path("/nowhere"))
    monkeypatch.setattr("prebuild.tool.builder.classic.find_torch", lambda: cpu_torch)
    monkeypatch.setattr(
        "prebuild.tool.builder.classic.find_nvcc",
        lambda: pytest.fail("nvcc looked for before torch"),
    )
    with pytest.raises(ToolchainError, match="2.13.0.cpu is a CPU build") as info:
        preflight_classic(A("sm_90"), Path("/nowhere"))
    assert "CUDA build of torch" in str(info.value) and "pip install" in str(info.value)


def write(root: Path, name: str, text: str) -> None:
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(text)


def test_jit_sites_finds_cpp_extension_load_calls_and_nothing_else(tmp_path):
    # As gsplat 1.5.3's _backend.py does it: load imported by name, called at module level.
    write(
        tmp_path,
        "pkg/cuda/_backend.py",
        "import json\nfrom torch.utils.cpp_extension import _get_build_directory, load\n"
        "cfg = json.load(open('x'))\n\n_C = load(name='gsplat_cuda', sources=srcs)\n",
    )
    write(
        tmp_path,
        "pkg/other.py",
        "import torch.utils.cpp_extension as cpp_extension\n"
        "mod = cpp_extension.load_inline('m', cpp_sources=[src])  # compiled at first use\n",
    )
    write(
        tmp_path,
        "pkg/model.py",
        "import torch\nstate = torch.load('w.pt')\n# cpp_extension.load( in a comment\n",
    )
    write(
        tmp_path, "pkg/loader.py", "def load(path):\n    return open(path).read()\nload('x')\n"
    )  # no cpp_extension
    # gsplat 1.5.3's own way: torch's private _jit_compile, imported in parentheses over lines.
    write(
        tmp_path,
        "pkg/zz_private.py",
        "from torch.utils.cpp_extension import (\n    _TORCH_PATH,\n    _jit_compile,\n)\n"
        "def build():\n    return _jit_compile(name, sources)\n",
    )
    # the module imported under another name; a docstring naming the call is no call
    write(
        tmp_path,
        "pkg/aliased.py",
        "from torch.utils import cpp_extension as ce\nfrom torch.utils.cpp_extension import load\n"
        '"""load(name) compiles"""\n\n\ndef get():\n    return ce.load("a", ["a.cu"])\n',
    )
    # what the build copied (DeepSpeed's left build/lib/... in the refusal, one file twice)
    write(tmp_path, "build/lib/pkg/other.py", "cpp_extension.load_inline('m')\n")
    assert jit_sites(tmp_path, limit=4) == [
        "pkg/aliased.py:7",
        "pkg/cuda/_backend.py:5",
        "pkg/other.py:2",
        "pkg/zz_private.py:6",
    ]
    assert jit_sites(tmp_path, limit=1) == ["pkg/aliased.py:7"]


def test_a_wheel_without_a_library_is_explained():
    advice = "its setup.py reads BUILD_NO_CUDA: one of them may make it build the extension"
    jit = no_extension_message(
        "gsplat-1.5.3-py3-none-any.whl", ["gsplat/cuda/_backend.py:5"], advice
    )
    assert "builds no extension at install time" in jit and "compiles when first used" in jit
    assert "gsplat/cuda/_backend.py:5" in jit and "No wheel was written" in jit
    assert "_backend.py:5). Its setup.py reads BUILD_NO_CUDA: one of" in jit  # a sentence
    # where running its compiles ahead of time made nothing, how they failed comes first
    tried = "prebuild ran them ahead of time (`import gsplat`), and none made a library: ..."
    failed_ahead = no_extension_message(
        "gsplat-1.5.3-py3-none-any.whl", ["gsplat/cuda/_backend.py:5"], advice, tried=tried
    )
    assert f"_backend.py:5). {tried} Its setup.py reads" in failed_ahead
    pure = no_extension_message("tool-1.0-py3-none-any.whl", [], advice)
    assert "pure Python" in pure and "pip install it as it is" in pure and "first used" not in pure
    assert advice not in pure
    # a setup.py that reads build switches is not called pure Python: its switches are named
    switched = no_extension_message("tool-1.0-py3-none-any.whl", [], advice, switches=True)
    assert (
        "compiled nothing at install time as it is (if it is pure Python, pip install it as it "
        "is). Its setup.py reads" in switched
    )  # the advice last: torch.cuda's answer may follow it
    # NATTEN 0.21.7 asked get_device_properties() of an answer that lacked it, then built
    # nothing with torch's own answers: the failure is quoted, and a GPU machine named
    command = "prebuild wheel --arch sm_90 natten==0.21.7"
    failed = no_extension_message(
        "natten-0.21.7-py3-none-any.whl",
        [],
        advice,
        switches=True,
        answer_error="RuntimeError: Found no NVIDIA driver on your system.",
        command=command,
    )
    assert "failed with torch.cuda answering for a GPU (RuntimeError: Found no NVIDIA" in failed
    assert f"run `{command}` on such a machine" in failed and advice in failed
    assert "pure Python" not in failed and failed.endswith("No wheel was written.")


# KNN_CUDA (unlimblue/KNN_CUDA 619617b): setup.py's third line imports the package for its
# version, whose __init__.py calls load() at import: its build ran the JIT compile itself.
KNN_SETUP = "import os\nfrom setuptools import setup\nfrom knn_cuda import __version__\n"


@pytest.mark.parametrize(
    ("setup_text", "sites", "line"),
    [
        (KNN_SETUP, ["knn_cuda/__init__.py:26"], 3),
        ("import pkg.ops as o\n", ["pkg/ops.py:3"], 1),  # importing pkg.ops runs it
        ("import os\nfrom pkg import ops\n", ["pkg/ops.py:3"], 2),  # a submodule imported
        ("from pkg.ops import x\n", ["pkg/__init__.py:3"], 1),  # its package runs first
        ("from pkg import ops\n", ["src/pkg/ops.py:3"], 1),  # a src layout
        ("from pkg import version\n", ["pkg/ops.py:3"], None),  # another module of pkg
        ("# from knn_cuda import __version__\n", ["knn_cuda/__init__.py:26"], None),
        ("import knn_cudax\n", ["knn_cuda/__init__.py:26"], None),
    ],
)
def test_a_setup_py_importing_code_that_compiles_at_import_is_found(setup_text, sites, line):
    from prebuild.tool.jit_sites import setup_imports_jit

    found = setup_imports_jit(setup_text, sites)
    assert (found[0] if found else None) == line


def test_a_jit_project_whose_build_ran_its_compile_is_told_so_and_what_to_change():
    command = "prebuild wheel --arch sm_90 ."
    advice = "its setup.py reads no variable that looks like a build switch"
    text = no_extension_message(
        "knn_cuda-0.2-py3-none-any.whl",
        ["knn_cuda/__init__.py:26"],
        advice,
        command=command,
        imported=(3, "from knn_cuda import __version__"),
        compiled=2,
    )
    assert "Its setup.py imports that code (line 3: `from knn_cuda import __version__`)" in text
    assert "the compile ran during this build (2 objects compiled)" in text
    assert "none of it is in the wheel" in text
    assert "`ext_modules=[CUDAExtension(name, sources)]`" in text
    assert "its setup.py not importing it for its version" in text
    assert f"then `{command}` builds it. No wheel was written." in text
    # imported, nothing compiled (its compile failed or was skipped): not said to have run
    quiet = no_extension_message(
        "k-0.2-py3-none-any.whl", ["k/__init__.py:2"], advice, imported=(1, "import k")
    )
    assert "which compiles when imported" in quiet and "ran during this build" not in quiet
    # a project with switches of its own is told those, not to port
    switched = no_extension_message("d-1-py3-none-any.whl", ["d/op.py:9"], advice, switches=True)
    assert "CUDAExtension" not in switched and "its setup.py not importing" not in switched


def test_libraries_without_gpu_code_are_explained_with_the_build_logs_words(tmp_path):
    """DeepSpeed with no GPU visible picks its CPU accelerator and builds host-only ops: the
    refusal says so, quotes the log and names it."""
    from prebuild.tool.builder.classic_messages import host_only_message

    log = tmp_path / "build.log"
    log.write_text("running build_ext\n[WARNING] Setting accelerator to CPU. If you have GPU...\n")
    lib = BuiltLibrary("deepspeed/ops/adam/fused_adam_op.cpython-311-x86_64-linux-gnu.so", "0", 1)
    text = host_only_message("deepspeed-0.19.8-cp311.whl", (lib,), log, "set DS_ACCELERATOR=cuda")
    assert "fused_adam_op" in text and "hold no GPU code" in text
    assert "Setting accelerator to CPU" in text and str(log) in text
    assert "set DS_ACCELERATOR=cuda" in text and "No wheel was written" in text
    assert "answering for a GPU" not in text
    # a setup.py that asked the GPU's memory of the answer, then built for the CPU only
    command = "prebuild wheel --arch sm_90 ./dcn"
    answered = host_only_message(
        "dcn-0.4-cp311.whl",
        (lib,),
        log,
        "set DS_ACCELERATOR=cuda",
        "AttributeError: torch.cuda.get_device_properties().total_memory: no GPU is visible",
        command,
    )
    assert "failed with torch.cuda answering for a GPU (AttributeError: torch.cuda" in answered
    assert f"run `{command}` on such a machine. Or here: set DS_ACCELERATOR=cuda." in answered
    # advice that names no switch is no alternative to a GPU machine: it is left out
    none = "its setup.py reads no variable that looks like a build switch"
    alone = host_only_message(
        "dcn-0.4-cp311.whl", (lib,), log, none, "AttributeError: x", command, switches=False
    )
    assert f"run `{command}` on such a machine. Full build log: {log}." in alone
    assert none not in alone and "Or here" not in alone
    alone = host_only_message("dcn-0.4-cp311.whl", (lib,), log, none, switches=False)
    assert "Its setup.py reads no variable that looks like a build switch." in alone
    # CMake's checks name prebuild's shim toolkit (bitsandbytes 0.50.1): never the reason.
    log.write_text(
        "-- Check for working CXX compiler: /w/cuda-shim/host-bin/c++ - skipped\n"
        "-- Configuring bitsandbytes (Backend: cpu)\n"
    )
    text = host_only_message("bitsandbytes-0.50.1.whl", (lib,), log, "CMAKE_ARGS=...")
    assert "Its build log says" not in text and "cuda-shim" not in text


def test_where_no_gpu_is_visible_torch_cuda_answers_for_a_gated_setup_py_and_the_errors_say_so(
    tmp_path, monkeypatch
):
    """A setup.py that chooses CUDA by torch.cuda.is_available() (line 3 here), no GPU visible:
    its build gets the sitecustomize and the wheel's newest capability, the
    user a note; once the setup.py failed with it (classic.py builds again), neither."""
    from types import SimpleNamespace

    from prebuild.runtime import nvml
    from prebuild.tool.builder import build_site
    from prebuild.tool.builder.classic import ClassicBuilder

    monkeypatch.setattr(nvml, "any_gpu_visible", lambda environ: False)
    monkeypatch.setenv("PYTHONPATH", "/users/own")
    project = tmp_path / "project"
    write(project, "setup.py", "import torch\n\nif torch.cuda.is_available():\n    pass\n")
    builder = ClassicBuilder(project, SimpleNamespace(nvcc=None), tmp_path / "work")
    archs = parse_arch_list("sm_80,sm_90")
    (tmp_path / "work").mkdir()
    env = builder.site_env(archs)
    site, users = env["PYTHONPATH"].split(":")
    assert users == "/users/own" and env[build_site.ENV_CAPABILITY] == "9.0"
    assert build_site.ENV_NINJA not in env
    assert (Path(site) / "sitecustomize.py").read_text() == Path(build_site.__file__).read_text()
    note = builder.gpu_answer_note(archs, "")
    assert note.startswith("No GPU is visible here") and "(setup.py line 3)" in note
    # once its setup.py failed with the answer, the next wheels are built without it
    builder._answer = False
    assert build_site.ENV_CAPABILITY not in builder.site_env(archs)
    assert builder.gpu_answer_note(archs, "") == ""
    builder._answer = None
    # a GPU visible, or a setup.py that never asks: nothing answered, nothing said
    monkeypatch.setattr(nvml, "any_gpu_visible", lambda environ: True)
    assert build_site.ENV_CAPABILITY not in builder.site_env(archs)
    assert builder.gpu_answer_note(archs, "") == ""
    monkeypatch.setattr(nvml, "any_gpu_visible", lambda environ: False)
    write(project, "setup.py", "import torch\n")
    assert build_site.ENV_CAPABILITY not in builder.site_env(archs)
    assert builder.gpu_answer_note(archs, "") == ""
    # one asking nvidia-smi for its arch: answered too, the build's own PATH after its script
    write(project, "setup.py", "import os\narch = os.popen('nvidia-smi -L').read()\n")
    env = builder.site_env(archs, {"PATH": "/shim/bin:/usr/bin"})
    assert env[build_site.ENV_CAPABILITY] == "9.0"
    assert env["PATH"] == f"{tmp_path / 'work' / 'build-site' / 'bin'}:/shim/bin:/usr/bin"
    assert "its setup.py asks nvidia-smi (setup.py line 2)" in builder.gpu_answer_note(archs, "")


def test_every_classic_build_checks_the_known_system_headers_before_compiling(
    tmp_path, monkeypatch
):
    """The sitecustomize is every classic build's (build_site.py): it gets the known headers'
    pattern and the directories this machine's compiler searches; where the compiler cannot
    say which, no check (its own headers would be taken for missing)."""
    import re
    from types import SimpleNamespace

    from prebuild.tool.builder import build_site
    from prebuild.tool.builder.classic import ClassicBuilder, headers_spec

    project = tmp_path / "project"
    write(project, "setup.py", "import torch\n")
    (tmp_path / "work").mkdir()
    builder = ClassicBuilder(project, SimpleNamespace(nvcc=None), tmp_path / "work")
    env = builder.site_env(parse_arch_list("sm_90"))
    assert (Path(env["PYTHONPATH"].split(":")[0]) / "sitecustomize.py").is_file()
    spec = build_site.read_headers_spec(env[build_site.ENV_HEADERS])
    assert re.compile(spec["pattern"]).fullmatch("google/dense_hash_map")
    assert "/usr/include" in spec["dirs"]
    assert headers_spec(None) == ""
    assert build_site.read_headers_spec(headers_spec(["/i"]))["dirs"] == ["/i"]
    # the user's way out, for a directory the check does not see
    monkeypatch.setenv("PREBUILD_NO_HEADER_CHECK", "1")
    unchecked = ClassicBuilder(project, SimpleNamespace(nvcc=None), tmp_path / "work")
    assert build_site.ENV_HEADERS not in unchecked.site_env(parse_arch_list("sm_90"))


def test_a_setup_py_that_turns_ninja_off_is_built_with_ninja_unless_ninja_failed(
    tmp_path, monkeypatch
):
    """torch-spline-conv 1.2.2's setup.py (use_ninja=False, line 4 here): its build gets the
    sitecustomize and PREBUILD_NINJA=1; beside the GPU answer, both; once ninja itself failed
    (classic.py builds again), neither the variable nor the note's line."""
    from types import SimpleNamespace

    from prebuild.runtime import nvml
    from prebuild.tool.builder import build_site
    from prebuild.tool.builder.classic import ClassicBuilder

    monkeypatch.setattr(nvml, "any_gpu_visible", lambda environ: False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    project = tmp_path / "project"
    pyg = (
        "from torch.utils.cpp_extension import BuildExtension\n"
        "setup(\n"
        "    cmdclass={\n"
        "        'build_ext': BuildExtension.with_options(no_python_abi_suffix=True, use_ninja=False)\n"
        "    })\n"
    )
    write(project, "setup.py", pyg)
    builder = ClassicBuilder(project, SimpleNamespace(nvcc=None), tmp_path / "work")
    archs = parse_arch_list("sm_90")
    (tmp_path / "work").mkdir()
    assert builder.ninja_line() == 4
    env = builder.site_env(archs)
    assert env[build_site.ENV_NINJA] == "1" and build_site.ENV_CAPABILITY not in env
    assert (Path(env["PYTHONPATH"]) / "sitecustomize.py").is_file()
    write(project, "setup.py", "import torch\nif torch.cuda.is_available():\n    pass\n" + pyg)
    both = builder.site_env(archs)
    assert both[build_site.ENV_NINJA] == "1" and both[build_site.ENV_CAPABILITY] == "9.0"
    builder._ninja = False
    assert builder.ninja_line() is None and build_site.ENV_NINJA not in builder.site_env(archs)


def test_the_builder_reads_the_projects_submodules_and_sdist_metadata_for_the_advice(tmp_path):
    """What source_gaps is given comes from the project's copy: its .gitmodules, which of their
    paths hold something, and its PKG-INFO."""
    from types import SimpleNamespace

    from prebuild.runtime.arch import parse_arch_list
    from prebuild.tool.builder.classic import ClassicBuilder

    project = tmp_path / "project"
    (project / "third_party" / "glm").mkdir(parents=True)
    (project / "third_party" / "fmt" / "include").mkdir(parents=True)
    (project / ".gitmodules").write_text(
        '[submodule "glm"]\n\tpath = third_party/glm\n[submodule "fmt"]\n\tpath = third_party/fmt\n'
    )
    builder = ClassicBuilder(project, SimpleNamespace(nvcc=None), tmp_path / "work")
    log = "a.cu:1:10: fatal error: glm/glm.hpp: No such file or directory"
    advice = builder.source_gaps_advice(log, parse_arch_list("sm_90"))
    assert "the project's git submodules (third_party/glm) are not in its source" in advice
    (project / ".gitmodules").unlink()
    (project / "PKG-INFO").write_text("Name: x\nVersion: 2.0\nHome-page: https://github.com/o/x\n")
    missing = f"ninja: error: '{project}/csrc/x.cu', needed by 'x.o', missing and no known rule"
    advice = builder.source_gaps_advice(missing + " to make it", parse_arch_list("sm_80,sm_90"))
    assert "prebuild wheel --arch sm_80,sm_90 git+https://github.com/o/x@<its tag" in advice


def test_a_run_asks_its_backend_for_the_build_requirements_once(tmp_path):
    """get_requires_for_build_wheel runs the project's setup.py (seconds, importing torch):
    its answer holds for every wheel of the run."""
    from types import SimpleNamespace

    from prebuild.tool.builder.classic import ClassicBuilder

    project, runs = tmp_path / "project", tmp_path / "setup-runs"
    write(
        project,
        "setup.py",
        f"from setuptools import setup\nopen({str(runs)!r}, 'a').write('run\\n')\n"
        "setup(name='x', version='1')\n",
    )
    toolchain = SimpleNamespace(
        nvcc=None, cxx_standard="c++17", torch=SimpleNamespace(version_string="2.13.0")
    )
    builder = ClassicBuilder(project, toolchain, tmp_path / "work")
    progress = SimpleNamespace(note=lambda text: None, step=lambda done, total, what: None)
    for n in range(2):
        out = tmp_path / f"out{n}"
        assert builder.project_build(
            {}, tmp_path / "build.log", out, A("sm_90"), progress
        ).is_file()
    assert runs.read_text().split() == ["run"] * 3  # get_requires once, build_wheel twice


def test_the_project_build_goes_on_past_a_torch_pin_and_stops_on_another_requirement(tmp_path):
    from types import SimpleNamespace

    from prebuild.tool.builder.classic import ClassicBuilder

    project = tmp_path / "project"
    write(project, "setup.py", "from setuptools import setup\nsetup(name='x', version='1')\n")
    write(
        project,
        "pyproject.toml",
        '[build-system]\nrequires = ["setuptools", "torch==0.0.1"]\n'
        'build-backend = "setuptools.build_meta"\n',
    )
    toolchain = SimpleNamespace(
        nvcc=None, cxx_standard="c++17", torch=SimpleNamespace(version_string="2.13.0")
    )

    def project_build():  # each variation of the project is a run of its own: a builder each
        builder = ClassicBuilder(project, toolchain, tmp_path / "work")
        return builder.project_build({}, log, out, A("sm_90"), progress)

    log, out = tmp_path / "build.log", tmp_path / "out"
    said: list[str] = []
    progress = SimpleNamespace(note=said.append, step=lambda done, total, what: None)
    built = project_build()
    assert built.name == "x-1-py3-none-any.whl" and built.is_file()
    assert len(said) == 1 and "its build asks for torch==0.0.1" in said[0]
    write(
        project,
        "pyproject.toml",
        '[build-system]\nrequires = ["setuptools", "no-such-package-here>=1"]\n'
        'build-backend = "setuptools.build_meta"\n',
    )
    with pytest.raises(ToolchainError, match="needs no-such-package-here>=1, not installed"):
        project_build()
    # A pin an installed package does not meet is for an isolated build: built with what is
    # installed, as pip install --no-build-isolation builds, and said (SageAttention's
    # setuptools<75, wheel<0.44).
    write(
        project,
        "pyproject.toml",
        '[build-system]\nrequires = ["setuptools<1", "packaging<1"]\n'
        'build-backend = "setuptools.build_meta"\n',
    )
    said.clear()
    assert project_build().is_file()
    (note,) = said
    assert note.startswith("its build asks for packaging<1 (installed: ") and (
        "setuptools<1 (installed: " in note and "as pip install --no-build-isolation would" in note
    ), note
    # A backend not installed (hatchling; scikit-build-core without its pathspec) fails its
    # first hook with nothing in the log: what it needs is said before any hook runs.
    write(
        project,
        "pyproject.toml",
        '[build-system]\nrequires = ["no-such-backend>=1"]\nbuild-backend = "no_such_backend"\n',
    )
    with pytest.raises(ToolchainError, match="needs no-such-backend>=1, not installed here. "):
        project_build()
    # A git submodule not checked out is said with it (cubvh's third_party/eigen): the build
    # that would show it missing cannot run before what it needs is installed.
    write(project, ".gitmodules", '[submodule "eigen"]\n\tpath = third_party/eigen\n')
    (project / "third_party" / "eigen").mkdir(parents=True)
    with pytest.raises(ToolchainError, match="Its git submodules third_party/eigen are empty"):
        project_build()
    (project / ".gitmodules").unlink()
    # A backend of the project's own that does not import: its words, not an empty error.
    write(project, "in_tree.py", "import no_such_module_of_the_backend\n")
    write(
        project,
        "pyproject.toml",
        '[build-system]\nrequires = []\nbuild-backend = "in_tree"\nbackend-path = ["."]\n',
    )
    log.unlink(missing_ok=True)
    with pytest.raises(BuildError) as failed:
        project_build()
    said = str(failed.value)
    assert "Backend 'in_tree' is not available." in said
    assert "No module named 'no_such_module_of_the_backend'" in said


def test_cuda_sources_are_told_apart_from_a_builds_outputs(tmp_path):
    """A project with CUDA sources whose libraries hold no GPU code lost them (refused); one
    with none (torch-sparse-solve 0.0.5, SuiteSparse's KLU) is a CPU extension. An earlier
    build's outputs are no source."""
    from prebuild.tool.builder.classic import has_cuda_sources

    project = tmp_path / "project"
    write(project, "torch_sparse_solve.cpp", "// KLU\n")
    write(project, "build/temp/generated.cu", "// an earlier build's output\n")
    assert not has_cuda_sources(project)
    write(project, "csrc/kernels/solve.cuh", "// a kernel\n")
    assert has_cuda_sources(project)


def test_native_sources_are_the_projects_own_files_with_their_text(tmp_path):
    from prebuild.tool.builder.classic import native_sources

    project = tmp_path / "project"
    write(project, "src/op/op_cuda.cpp", "#include <THC/THC.h>\n")
    write(project, "src/op/op.cu", "// kernel\n")
    write(project, "src/op/op.py", "# not native\n")
    write(project, "lib/build/temp/op.o.cpp", "// an earlier build's copy\n")
    write(project, ".eggs/dep/x.h", "// a build requirement's\n")
    assert native_sources(project) == {
        "src/op/op.cu": "// kernel\n",
        "src/op/op_cuda.cpp": "#include <THC/THC.h>\n",
    }


def test_the_command_said_back_gives_the_config_settings_again(tmp_path):
    """An advice's command (BUILD_EXT=1 prebuild wheel ...) is one the user can run as it is:
    the -C settings of this build in it, quoted for the shell."""
    from types import SimpleNamespace

    from prebuild.tool.builder.classic import ClassicBuilder

    settings = {"--build-option": ["--cpp_ext", "--cuda_ext"], "--global-option": "--x=a b"}
    builder = ClassicBuilder(
        tmp_path, SimpleNamespace(nvcc=None), tmp_path, origin="apex/", config_settings=settings
    )
    assert builder.command(parse_arch_list("sm_80,sm_90")) == (
        "prebuild wheel --arch sm_80,sm_90 -C--build-option=--cpp_ext -C--build-option=--cuda_ext "
        "'-C--global-option=--x=a b' apex/"
    )
    plain = ClassicBuilder(tmp_path, SimpleNamespace(nvcc=None), tmp_path, origin="apex/")
    assert plain.command(parse_arch_list("sm_90")) == "prebuild wheel --arch sm_90 apex/"


def test_a_cmake_build_is_given_torch_s_prefix_after_the_user_s():
    """find_package(Torch) finds the build's torch (TorchConfig.cmake under torch/share/cmake,
    torch.utils.cmake_prefix_path) with no setting of the user's, and a prefix of theirs first."""
    from prebuild.tool.builder.classic import cmake_prefix_env

    lib = Path("/venv/lib/python3.11/site-packages/torch/lib")
    prefix = "/venv/lib/python3.11/site-packages/torch/share/cmake"
    assert cmake_prefix_env(lib, {}) == {"CMAKE_PREFIX_PATH": prefix}
    assert cmake_prefix_env(lib, {"CMAKE_PREFIX_PATH": "/opt/eigen:/opt/x"}) == {
        "CMAKE_PREFIX_PATH": f"/opt/eigen:/opt/x:{prefix}"
    }
    import torch
    import torch.utils

    real = Path(torch.utils.cmake_prefix_path)
    assert cmake_prefix_env(Path(torch.__file__).parent / "lib", {}) == {
        "CMAKE_PREFIX_PATH": str(real)
    }


def test_a_failed_build_whose_log_shows_a_mendable_break_is_mended_and_built_again(tmp_path):
    """rebuild_reason: the log shows `x.type()` given to AT_DISPATCH_* (ngp_pl's vren): every
    source of the copy is mended, the changes kept for the wheel's manifest, and the build goes
    again; the same failure again has nothing left to mend, and with --no-mend nothing is."""
    from types import SimpleNamespace

    from prebuild.tool.builder.classic import ClassicBuilder, _BuildRun, _CallLogs

    project = tmp_path / "project"
    write(project, "setup.py", "")
    dispatch = 'AT_DISPATCH_FLOATING_TYPES(x.type(), "f", [&] {});\n'
    write(project, "csrc/a.cu", dispatch)
    write(project, "csrc/b.cpp", dispatch)
    log = (
        f'{project}/csrc/a.cu(1): error: no suitable conversion function from "const '
        'at::DeprecatedTypeProperties" to "c10::ScalarType" exists\n'
    )
    logs = _CallLogs(tmp_path / "nvcc.jsonl", tmp_path / "cxx.jsonl")
    toolchain = SimpleNamespace(nvcc=None, cxx_standard="c++20")
    off = ClassicBuilder(project, toolchain, tmp_path / "work", mend=False)
    assert off.rebuild_reason(_BuildRun(), {}, log, logs, A("sm_90")) is None
    assert (project / "csrc/a.cu").read_text() == dispatch
    # its error says what a build without --no-mend would do (a helper's DINO trial)
    assert off.unmended_advice(log) == (
        "Without --no-mend, prebuild makes 2 changes in 2 files of its copy of the project, each "
        "with an exact replacement (the project's source untouched), and builds again."
    )
    builder = ClassicBuilder(project, toolchain, tmp_path / "work")
    again = builder.rebuild_reason(_BuildRun(), {}, log, logs, A("sm_90"))
    assert again == (
        "its code meets APIs that were removed, each with an exact replacement: 2 changes in 2 "
        "files of prebuild's copy (said with the wheel), built again"
    )
    for name in ("csrc/a.cu", "csrc/b.cpp"):
        assert (project / name).read_text() == dispatch.replace("x.type()", "x.scalar_type()")
    assert [str(c) for c in builder.source_changes] == [
        "csrc/a.cu:1: x.type() -> x.scalar_type()",
        "csrc/b.cpp:1: x.type() -> x.scalar_type()",
    ]
    assert builder.rebuild_reason(_BuildRun(), {}, log, logs, A("sm_90")) is None
    assert builder.unmended_advice(log) == ""  # mends on: nothing to tell


def test_a_build_run_again_says_why_and_starts_its_progress_afresh(tmp_path, monkeypatch):
    """run_build: a build that failed in a way a change mends (rebuild_reason) is said, and
    its progress starts a new phase: the steps said are the new run's, not the failed one's."""
    from types import SimpleNamespace

    from prebuild.tool.builder.classic import ClassicBuilder, _CallLogs

    project = tmp_path / "project"
    write(project, "setup.py", "")
    builder = ClassicBuilder(project, SimpleNamespace(nvcc=None), tmp_path / "work")
    runs: list[dict] = []

    def project_build(env, build_log, out, sass, progress):
        runs.append(env)
        if len(runs) == 1:
            raise BuildError("csrc/a.cu(1): error: the first run's")
        return out / "x-1-cp311-cp311-linux_x86_64.whl"

    reason = "its code meets APIs that were removed, ...: built again"
    monkeypatch.setattr(builder, "project_build", project_build)
    monkeypatch.setattr(builder, "rebuild_reason", lambda *args: reason)
    monkeypatch.setattr(builder, "site_env", lambda sass, env: {})
    said: list[tuple[str, str]] = []
    progress = SimpleNamespace(
        note=lambda text: said.append(("note", text)),
        phase=lambda text: said.append(("phase", text)),
    )
    log, logs = tmp_path / "build.log", _CallLogs(tmp_path / "n.jsonl", tmp_path / "c.jsonl")
    run = builder.run_build({}, log, tmp_path / "out", A("sm_90"), logs, 0, progress)
    assert run.built.name == "x-1-cp311-cp311-linux_x86_64.whl" and len(runs) == 2
    assert said == [("note", reason), ("phase", "compiling again (the project's own build)")]
    assert f"==== prebuild: {reason}" in log.read_text()


def test_a_build_going_on_from_kept_objects_makes_the_earlier_mends_again(tmp_path):
    """The copy is made afresh each run and the objects kept: ninja, seeing the project's file
    as old as before, keeps the object compiled from the mended text, so the same mends are
    made again in the new copy (with its time) and recorded; a file the user changed since is
    built as it is."""
    import os
    from types import SimpleNamespace

    from prebuild.tool.builder.classic import MENDS_FILE, ClassicBuilder

    dispatch = 'AT_DISPATCH_FLOATING_TYPES(x.type(), "f", [&] {});\n'
    log = (
        'csrc/a.cu(1): error: no suitable conversion function from "const '
        'at::DeprecatedTypeProperties" to "c10::ScalarType" exists\n'
    )
    toolchain = SimpleNamespace(nvcc=None, cxx_standard="c++20")
    work = tmp_path / "work"
    work.mkdir()

    def copy(name: str) -> Path:  # the run's fresh copy of the project, times kept
        project = tmp_path / name
        write(project, "setup.py", "")
        write(project, "csrc/a.cu", dispatch)
        write(project, "csrc/b.cu", dispatch)
        for file in project.rglob("*.cu"):
            os.utime(file, ns=(10**18, 10**18))
        return project

    first = ClassicBuilder(copy("run1"), toolchain, work)
    assert len(first.mend_sources(log)) == 2
    assert (work / MENDS_FILE).is_file()
    project = copy("run2")
    write(project, "csrc/b.cu", dispatch + "// changed by its author\n")
    again = ClassicBuilder(project, toolchain, work)
    again.restore_mends()
    assert (project / "csrc/a.cu").read_text() == dispatch.replace("x.type()", "x.scalar_type()")
    assert (project / "csrc/a.cu").stat().st_mtime_ns == 10**18  # ninja: the object is current
    assert "x.type()" in (project / "csrc/b.cu").read_text()  # the author's: as it is
    assert [str(c) for c in again.source_changes] == ["csrc/a.cu:1: x.type() -> x.scalar_type()"]


def test_python_in_a_build_is_the_python_prebuild_builds_with(tmp_path):
    """A setup.py running a bare `python` (ThunderKittens') gets this Python, its venv's
    packages included, whether or not the venv is activated."""
    import subprocess
    import sys

    from prebuild.tool.builder.classic import python_here

    folder = python_here(tmp_path / "work")
    for name in ("python", "python3"):
        ran = subprocess.run(
            [str(folder / name), "-c", "import sys; print(sys.prefix)"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert ran.stdout.strip() == sys.prefix
    assert python_here(tmp_path / "work") == folder  # written again for the next wheel


def test_a_file_that_is_not_utf8_is_never_rewritten_by_a_mend(tmp_path):
    """Its bytes would come back with replacement characters: it is left as it is."""
    from types import SimpleNamespace

    from prebuild.tool.builder.classic import ClassicBuilder

    project = tmp_path / "project"
    write(project, "setup.py", "")
    latin1 = '// caf\xe9\nAT_DISPATCH_FLOATING_TYPES(x.type(), "f", [&] {});\n'.encode("latin-1")
    (project / "a.cu").write_bytes(latin1)
    write(project, "b.cu", 'AT_DISPATCH_FLOATING_TYPES(x.type(), "f", [&] {});\n')
    log = (
        'a.cu(2): error: no suitable conversion function from "const at::DeprecatedTypeProperties"'
    )
    builder = ClassicBuilder(project, SimpleNamespace(nvcc=None, cxx_standard="c++20"), tmp_path)
    changes = builder.mend_sources(log)
    assert [str(c) for c in changes] == ["b.cu:1: x.type() -> x.scalar_type()"]
    assert (project / "a.cu").read_bytes() == latin1
