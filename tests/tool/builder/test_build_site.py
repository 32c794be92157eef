"""prebuild.tool.builder.build_site, the sitecustomize of a classic build: torch.cuda's answer
where no GPU is visible and its setup.py chooses CUDA by torch.cuda.is_available(), torch's
ninja backend where its setup.py turns it off. Run as it is there, in a fresh interpreter with
this venv's torch (a CPU build: nothing answers True by itself)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from prebuild.runtime.arch import parse_arch_list
from prebuild.tool.builder import build_site
from prebuild.tool.builder.classic import (
    answer_may_explain,
    newest_capability,
    no_gpu_may_explain,
    site_env,
)

ASK = """
import json, sys, torch
gpu = torch.cuda.is_available()
print(json.dumps([gpu, torch.cuda.device_count(),
                  list(torch.cuda.get_device_capability()) if gpu else None,
                  torch.cuda.is_bf16_supported() if gpu else None, "torch" in sys.modules]))
"""


def site(tmp_path: Path) -> Path:
    """A directory holding build_site.py as sitecustomize.py, as classic.py lays it out."""
    where = tmp_path / "build-site"
    where.mkdir(parents=True)
    shutil.copyfile(build_site.__file__, where / "sitecustomize.py")
    return where


def run(code: str, pythonpath: list[Path], **extra: str) -> subprocess.CompletedProcess:
    asked = ("PYTHONPATH", build_site.ENV_CAPABILITY, build_site.ENV_NINJA, build_site.ENV_HEADERS)
    env = {k: v for k, v in os.environ.items() if k not in asked}
    env.update(PYTHONPATH=os.pathsep.join(map(str, pythonpath)), **extra)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )  # fmt: skip


def test_torch_cuda_answers_as_a_gpu_of_the_capability_asked(tmp_path):
    answering = site(tmp_path)
    for capability, expected in (
        ("8.6", [True, 1, [8, 6], True, True]),
        ("7.5", [True, 1, [7, 5], False, True]),
    ):
        answered = run(ASK, [answering], PREBUILD_GPU_ANSWER=capability)
        assert answered.returncode == 0, answered.stderr
        assert json.loads(answered.stdout) == expected  # bf16 from sm_80 on
    # without the variable (or off the build's PYTHONPATH) torch answers for itself: here, a
    # CPU build of torch, no GPU
    (tmp_path / "b").mkdir()
    for pythonpath, extra in (([site(tmp_path / "b")], {}), ([], {"PREBUILD_GPU_ANSWER": "8.6"})):
        itself = run(ASK, pythonpath, **extra)
        assert itself.returncode == 0, itself.stderr
        assert json.loads(itself.stdout) == [False, 0, None, None, True]


def test_torch_is_not_imported_until_the_build_imports_it_and_the_gpu_itself_still_fails(
    tmp_path,
):
    code = (
        "import sys; assert 'torch' not in sys.modules\n"
        "import torch\n"
        "try:\n    torch.zeros(1, device='cuda')\nexcept (RuntimeError, AssertionError) as e:\n"
        "    print('refused', type(e).__name__)\n"
    )
    ran = run(code, [site(tmp_path)], PREBUILD_GPU_ANSWER="9.0")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("refused"), ran.stdout


PROPERTIES = """
import json, torch
props = torch.cuda.get_device_properties(torch.cuda.current_device())
try:
    props.total_memory
    missing = None
except AttributeError as e:
    missing = str(e)
print(json.dumps([torch.cuda.current_device(), props.major, props.minor, props.name,
                  torch.cuda.get_device_name(0), missing]))
"""


def test_the_device_properties_answer_the_capability_and_nothing_made_up(tmp_path):
    """NATTEN 0.21.7's setup.py: get_device_properties(current_device()).major and .minor."""
    ran = run(PROPERTIES, [site(tmp_path)], PREBUILD_GPU_ANSWER="9.0")
    assert ran.returncode == 0, ran.stderr
    device, major, minor, name, device_name, missing = json.loads(ran.stdout)
    assert (device, major, minor) == (0, 9, 0)
    assert "compute capability 9.0" in name and device_name == name
    assert "total_memory" in missing and "no GPU is visible" in missing
    # without the answer, torch's own: no driver here
    itself = run(PROPERTIES, [])
    assert itself.returncode != 0


def test_the_environments_own_sitecustomize_still_runs(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = 'yes'\n")
    ran = run(
        "import os, torch; print(os.environ.get('THEIRS_RAN'), torch.cuda.is_available())",
        [site(tmp_path), theirs],
        PREBUILD_GPU_ANSWER="9.0",
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["yes", "True"]


@pytest.mark.parametrize(
    "value, expected", [("9.0", (9, 0)), ("12.1", (12, 1)), ("9", None), ("", None), ("a.b", None)]
)
def test_the_capability_is_read_from_its_variable(value, expected):
    assert build_site.capability(value) == expected


def test_the_answer_is_the_newest_arch_of_the_wheel():
    assert newest_capability(tuple(parse_arch_list("sm_80,sm_90"))) == "9.0"
    assert newest_capability(tuple(parse_arch_list("sm_120,sm_90a"))) == "12.0"


def test_a_missing_module_is_not_blamed_on_the_answer():
    """mmcv 2.2.0's setup.py imports pkg_resources (gone in setuptools 82): building it again
    without the answer would fail the same way, so it is not; a GPU asked for itself is."""
    assert not answer_may_explain("ModuleNotFoundError: No module named 'pkg_resources'")
    assert not answer_may_explain("ImportError: cannot import name 'x' from 'y'")
    assert answer_may_explain("RuntimeError: Found no NVIDIA driver on your system.")
    assert answer_may_explain("AssertionError: Torch not compiled with CUDA enabled")


def test_only_a_failure_naming_the_gpu_is_built_again_with_the_answer():
    """colossalai 0.5.0 asks the GPU's capability outside its setup.py: with none visible its
    build fails so, and is built again with the answer; a failure of another kind is not."""
    assert no_gpu_may_explain("RuntimeError: Found no NVIDIA driver on your system.")
    assert no_gpu_may_explain("RuntimeError: No CUDA GPUs are available")
    assert not no_gpu_may_explain("ModuleNotFoundError: No module named 'cuda_helpers'")
    assert not no_gpu_may_explain("FileNotFoundError: [Errno 2] No such file: 'version.txt'")


NINJA = """
import json, sys
from setuptools import Distribution
from torch.utils.cpp_extension import BuildExtension
pyg = BuildExtension.with_options(no_python_abi_suffix=True, use_ninja=False)(Distribution())
print(json.dumps([pyg.use_ninja, pyg.no_python_abi_suffix, BuildExtension(Distribution()).use_ninja,
                  "torch.cuda" in sys.modules and __import__("torch").cuda.is_available()]))
"""


def test_ninja_is_back_on_whatever_the_setup_py_gives_buildextension(tmp_path):
    """PyG's setup.py: BuildExtension.with_options(no_python_abi_suffix=True, use_ninja=False);
    its other options stay, and torch.cuda answers for itself when only ninja is asked."""
    ran = run(NINJA, [site(tmp_path)], PREBUILD_NINJA="1")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == [True, True, True, False]
    itself = run(NINJA, [site(tmp_path / "b")])
    assert itself.returncode == 0, itself.stderr
    assert json.loads(itself.stdout) == [False, True, True, False]
    both = run(
        NINJA, [tmp_path / "b" / "build-site"], PREBUILD_NINJA="1", PREBUILD_GPU_ANSWER="9.0"
    )
    assert both.returncode == 0, both.stderr
    assert json.loads(both.stdout) == [True, True, True, True]


def test_ninja_back_on_compiles_the_include_directories_setup_py_named(tmp_path, monkeypatch):
    """torch-batch-svd's include_dirs=["torch_batch_svd/include"]: ninja runs the compiler in
    the build's temporary directory, so each relative directory (the extension's and the
    compiler's own) is made absolute where setup.py runs, as a build without ninja reads it."""
    seen = {}

    class BuildExtension:  # what use_ninja changes of torch's: __init__ and build_extensions
        def __init__(self, extensions, use_ninja=False):
            self.extensions, self.use_ninja = extensions, use_ninja
            self.compiler = types.SimpleNamespace(include_dirs=["cc-inc"])

        def build_extensions(self):
            seen["compiler"] = self.compiler.include_dirs
            seen["extensions"] = [e.include_dirs for e in self.extensions]

    module = types.SimpleNamespace(BuildExtension=BuildExtension)
    build_site.use_ninja(module)
    extensions = [
        types.SimpleNamespace(include_dirs=["torch_batch_svd/include", Path("/abs/inc")]),
        types.SimpleNamespace(include_dirs=[]),
    ]
    monkeypatch.chdir(tmp_path)
    command = module.BuildExtension(extensions, use_ninja=False)
    command.build_extensions()
    assert command.use_ninja is True
    assert seen == {
        "compiler": [str(tmp_path / "cc-inc")],
        "extensions": [[str(tmp_path / "torch_batch_svd" / "include"), Path("/abs/inc")], []],
    }


def test_what_is_changed_is_what_the_variables_ask():
    assert build_site.changes({}) == {}
    assert build_site.changes({"PREBUILD_NINJA": "0", "PREBUILD_GPU_ANSWER": "9"}) == {}
    assert set(build_site.changes({"PREBUILD_NINJA": "1"})) == {"torch.utils.cpp_extension"}
    assert set(build_site.changes({"PREBUILD_GPU_ANSWER": "8.6", "PREBUILD_NINJA": "1"})) == {
        "torch.cuda",
        "torch.utils.cpp_extension",
    }
    spec = json.dumps({"pattern": r"boost/.+", "dirs": ["/usr/include"]})
    assert set(build_site.changes({"PREBUILD_SYSTEM_HEADERS": spec})) == {
        "setuptools.command.build_ext"
    }
    for unreadable in (
        "{",
        "[]",
        '{"dirs": []}',
        '{"pattern": "("}',
        '{"pattern": "x", "dirs": 1}',
    ):
        assert build_site.changes({"PREBUILD_SYSTEM_HEADERS": unreadable}) == {}, unreadable


def test_two_such_sitecustomize_directories_on_the_path_each_run_once(tmp_path):
    """A build run inside another prebuild build (its PYTHONPATH handed down): each directory
    runs the next one's after it, never an earlier one's, then the environment's own."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text(
        "import os\nos.environ['RAN'] = os.environ.get('RAN', '') + 'theirs'\n"
    )
    ran = run(
        "import os, torch; print(os.environ.get('RAN'), torch.cuda.is_available())",
        [site(tmp_path), site(tmp_path / "b"), theirs],
        PREBUILD_GPU_ANSWER="9.0",
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.split() == ["theirs", "True"]


GUARDED_HEADER = """\
// a header of the project's own
#pragma once
#ifndef PROJECT_HASHMAP_H
#define PROJECT_HASHMAP_H
#include <google/dense_hash_map>  /* always */
#include "local.h"
#ifdef WITH_BOOST
#include <boost/optional.hpp>
#endif
/*
#include <Eigen/Dense>
*/
// #include <png.h>
#  include   <zlib.h>
#endif
#include <mpi.h>
"""


def test_the_includes_that_count_are_those_no_condition_encloses_but_the_include_guard():
    """torchsparse 385f5ce's hashmap_cpu.hpp includes google/dense_hash_map inside its include
    guard: counted; an include inside ``#ifdef``, or in a comment, is not (the compiler may never
    look for it), whatever the macros are."""
    assert build_site.unconditional_includes(GUARDED_HEADER) == [
        (5, "google/dense_hash_map", True),
        (6, "local.h", False),
        (14, "zlib.h", True),
        (16, "mpi.h", True),
    ]
    not_a_guard = "#ifndef USE_EIGEN\n#define NO_EIGEN\n#include <Eigen/Dense>\n#endif\n"
    assert build_site.unconditional_includes(not_a_guard) == []
    other_guard = "#if !defined(X_H)\n#define X_H 1\n#include <png.h>\n#endif\n"
    assert build_site.unconditional_includes(other_guard) == [(3, "png.h", True)]
    macro = "#include KERNEL_HEADER\n#include_next <zlib.h>\n"
    assert build_site.unconditional_includes(macro) == []


def test_compiler_flags_name_include_directories_in_each_of_their_forms():
    flags = ["-O3", "-Ia", "-I", "b", "-isystem", "c", "-idirafter", "d", "--include-path=e"]
    flags += ["--include-path", "f", 3, "-DI=1", "-I"]  # a trailing -I names nothing
    assert build_site.flag_include_dirs(flags) == ["a", "b", "c", "d", "e", "f"]
    assert build_site.flag_include_dirs(None) == []


def write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_missing_known_headers_are_looked_for_through_the_projects_own_headers(tmp_path):
    """A source's project header (quoted, beside it; or angled, in an include directory) is
    read too; a header outside the project (torch's) is not; a known header any directory
    has is not missing; each missing header is named once, where it is first included."""
    import re

    project, system, outside = tmp_path / "project", tmp_path / "system", tmp_path / "outside"
    write(project, "src/a.cpp", '#include "inc.h"\n#include <proj/api.h>\n#include <torch.h>\n')
    write(project, "src/inc.h", GUARDED_HEADER)
    write(project, "src/local.h", "#include <boost/any.hpp>\n#include <zlib.h>\n")
    write(project, "include/proj/api.h", "#include <google/dense_hash_map>\n#include <png.h>\n")
    write(system, "zlib.h", "")
    write(system, "png.h", "")
    write(outside, "torch.h", "#include <mpi.h>\n#include <Eigen/Core>\n")
    known = re.compile(r"(?:google|sparsehash)/\w+|boost/.+|zlib\.h|png\.h|mpi\.h|Eigen/\w+")
    dirs = [str(project / "include"), str(system), str(outside)]
    sources = [str(project / "src" / "a.cpp"), str(project / "src" / "generated.cpp")]
    missing = build_site.missing_system_headers(sources, dirs, str(project), known)
    inc, local = str(project / "src" / "inc.h"), str(project / "src" / "local.h")
    assert missing == [
        (inc, 5, "google/dense_hash_map"),
        (inc, 16, "mpi.h"),
        (local, 1, "boost/any.hpp"),
    ]
    write(system, "google/dense_hash_map", "")
    write(system, "mpi.h", "")
    write(system, "boost/any.hpp", "")
    assert build_site.missing_system_headers(sources, dirs, str(project), known) == []


NATIVE_C = """\
#include <Python.h>
#include "native.h"
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
"""
HEADERS_SETUP = """\
from setuptools import Extension, setup
setup(name="native", ext_modules=[Extension("_native", ["native.c"], include_dirs=["inc"])])
"""


OWN_BUILD_EXT = """\
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
class BuildExt(build_ext):
    def build_extension(self, ext):
        ext.include_dirs.append("SYSTEM")
        super().build_extension(ext)
setup(name="native", ext_modules=[Extension("_native", ["native.c"], include_dirs=["inc"])],
      cmdclass={"build_ext": BuildExt})
"""
OPTIONAL = """\
from setuptools import Extension, setup
setup(name="native",
      ext_modules=[Extension("_native", ["native.c"], include_dirs=["inc"], optional=True)])
"""


def headers_check(pattern: str) -> str:
    """ENV_HEADERS' value for ``pattern``, with this machine's compiler's own directories."""
    from prebuild.tool.builder.toolchain import compiler_include_dirs, find_cxx

    dirs = compiler_include_dirs(find_cxx())
    assert dirs, "the compiler names the directories it searches"
    return json.dumps({"pattern": pattern, "dirs": dirs})


def setup_py_build(project: Path, checked: Path):
    """``python setup.py build_ext -i`` of ``project`` in a fresh interpreter whose
    sitecustomize is ``checked``'s, with the variables given (CPATH only if given)."""
    code = (
        "import runpy, sys; sys.argv = ['setup.py', 'build_ext', '-i']; runpy.run_path('setup.py')"
    )

    def build(**extra: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("CPATH", "PYTHONPATH")}
        env.update(PYTHONPATH=str(checked), **extra)
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
            cwd=project,
        )  # fmt: skip

    return build


def test_a_setuptools_build_missing_a_known_header_stops_before_compiling(tmp_path):
    """``python setup.py build_ext`` with the sitecustomize: the header no include directory
    has is named and nothing is compiled; with the header on CPATH, or in a directory the
    project's own build_ext adds, the extension compiles (Python.h, in the directory setuptools
    adds, is never missing); an optional extension is left to setuptools, which skips it."""
    project = tmp_path / "project"
    write(project, "setup.py", HEADERS_SETUP)
    write(project, "native.c", NATIVE_C)
    write(project, "inc/native.h", "#include <boost/prebuild_test_absent.hpp>\n")
    spec = headers_check(r"boost/.+|Python\.h")
    build = setup_py_build(project, site(tmp_path))

    stopped = build(PREBUILD_SYSTEM_HEADERS=spec)
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert stopped.stderr.splitlines()[-2:] == [
        "prebuild: inc/native.h:1: <boost/prebuild_test_absent.hpp> is in no include directory "
        "of the build",
        f"{build_site.STOPPED}: the headers above are missing (where the compiler finds them "
        "in a directory this check does not see, build with PREBUILD_NO_HEADER_CHECK=1)",
    ]
    assert not list(project.rglob("*.o")) and not list(project.glob("_native*.so"))
    write(tmp_path / "system", "boost/prebuild_test_absent.hpp", "")
    found = build(PREBUILD_SYSTEM_HEADERS=spec, CPATH=str(tmp_path / "system"))
    assert found.returncode == 0, found.stderr[-3000:]
    assert list(project.glob("_native*.so"))
    # what a project's own build_ext adds to an extension before it compiles counts; an
    # optional extension is not checked (setuptools skips it if it fails)
    for setup_py in (OWN_BUILD_EXT, OPTIONAL):
        shutil.rmtree(project / "build")
        for library in project.glob("_native*.so"):
            library.unlink()
        write(project, "setup.py", setup_py.replace("SYSTEM", str(tmp_path / "system")))
        ran = build(PREBUILD_SYSTEM_HEADERS=spec)
        assert ran.returncode == 0 and build_site.STOPPED not in ran.stderr, ran.stderr[-3000:]
        assert bool(list(project.glob("_native*.so"))) == (setup_py is OWN_BUILD_EXT)


SUBMODULE_SETUP = """\
from setuptools import Extension, setup
setup(name="native", ext_modules=[
    Extension("_native", ["native.c"], include_dirs=["inc"], extra_compile_args=["-Ithird_party/tinylib"])
])
"""


def test_with_an_empty_include_directory_every_header_nowhere_counts(tmp_path):
    """diff-gaussian-rasterization names its glm submodule by ``-Ithird_party/glm/``: cloned
    without its submodules, the directory is there and empty, and its header is no known system
    library's. The build stops naming the header and the empty directory; with the directory
    filled it compiles. A directory that is not there at all changes nothing."""
    project = tmp_path / "project"
    write(project, "setup.py", SUBMODULE_SETUP)
    write(project, "native.c", NATIVE_C)
    write(project, "inc/native.h", '#include <tiny/tiny.h>\n#include "tiny_extra.h"\n')
    (project / "third_party" / "tinylib").mkdir(parents=True)
    build = setup_py_build(project, site(tmp_path))
    spec = headers_check(r"boost/.+")  # tiny/tiny.h is no known header
    stopped = build(PREBUILD_SYSTEM_HEADERS=spec)
    assert stopped.returncode == 1, stopped.stderr[-3000:]
    assert stopped.stderr.splitlines()[-4:-1] == [
        "prebuild: inc/native.h:1: <tiny/tiny.h> is in no include directory of the build",
        "prebuild: inc/native.h:2: <tiny_extra.h> is in no include directory of the build",
        "prebuild: its include directory third_party/tinylib is empty",
    ]
    assert not list(project.rglob("*.o"))
    write(project, "third_party/tinylib/tiny/tiny.h", "")
    write(project, "third_party/tinylib/tiny_extra.h", "")
    built = build(PREBUILD_SYSTEM_HEADERS=spec)
    assert built.returncode == 0, built.stderr[-3000:]
    # no such directory at all, and the headers found elsewhere: nothing said
    shutil.rmtree(project / "third_party")
    write(tmp_path / "system", "tiny/tiny.h", "")
    write(tmp_path / "system", "tiny_extra.h", "")
    again = build(PREBUILD_SYSTEM_HEADERS=spec, CPATH=str(tmp_path / "system"))
    assert again.returncode == 0 and build_site.STOPPED not in again.stderr, again.stderr[-3000:]


def test_quoted_includes_count_only_when_asked(tmp_path):
    import re

    write(tmp_path, "a.c", '#include "absent.h"\n#include <absent_too.h>\n')
    sources, anything = [str(tmp_path / "a.c")], re.compile(".+")
    assert build_site.missing_system_headers(sources, [], str(tmp_path), anything) == [
        (str(tmp_path / "a.c"), 2, "absent_too.h")
    ]
    assert [m[2] for m in build_site.missing_system_headers(
        sources, [], str(tmp_path), anything, quoted=True
    )] == ["absent.h", "absent_too.h"]  # fmt: skip


def test_nvidia_smi_answers_the_capability_for_what_a_setup_py_asks_and_fails_otherwise():
    cap = (9, 0)
    name = "a GPU of compute capability 9.0 (prebuild's build-time answer)"
    smi = build_site.nvidia_smi
    assert smi(["--query-gpu=compute_cap", "--format=csv,noheader"], cap) == (0, "9.0\n", "")
    assert smi(["--query-gpu", "compute_cap,name", "--format", "csv"], cap) == (
        0,
        f"compute_cap, name\n9.0, {name}\n",
        "",
    )
    assert smi(["--id=0", "--query-gpu=count", "--format=csv,noheader,nounits"], cap)[1] == "1\n"
    assert smi(["-i", "1", "--query-gpu=compute_cap", "--format=csv"], cap)[0] == 6
    assert smi(["-L"], cap) == (0, f"GPU 0: {name} (UUID: GPU-prebuild-build-time-answer)\n", "")
    assert smi([], cap)[0] == 0
    # what it does not know fails as nvidia-smi does without a driver, saying what it answers
    for argv in (["-q"], ["--query-gpu=memory.total", "--format=csv"], ["topo", "-m"]):
        code, out, err = smi(argv, cap)
        assert code == 9 and not out and "couldn't communicate with the NVIDIA driver" in err
        assert "--query-gpu=compute_cap,name,count,index" in err


def test_the_builds_nvidia_smi_is_first_on_its_path_where_a_gpu_is_answered_for(tmp_path):
    """site_env's nvidia-smi, run as a setup.py runs it: through PATH, in a shell."""
    env = site_env(tmp_path, {"PATH": os.environ["PATH"]}, capability="8.6")
    bin_dir = tmp_path / "build-site" / "bin"
    assert env["PATH"] == f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    clean = {k: v for k, v in os.environ.items() if k != build_site.ENV_CAPABILITY}
    asked = subprocess.run(
        "nvidia-smi --query-gpu=compute_cap --format=csv,noheader",
        shell=True, capture_output=True, text=True, timeout=60, env={**clean, "PATH": env["PATH"]},
    )  # fmt: skip
    assert (asked.returncode, asked.stdout) == (0, "8.6\n"), asked.stderr
    # no answer asked: no nvidia-smi of prebuild's, the PATH as it was
    (tmp_path / "b").mkdir()
    assert "PATH" not in site_env(tmp_path / "b", {"PATH": "/usr/bin"}, ninja=True)
