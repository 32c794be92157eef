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
    asked = ("PYTHONPATH", build_site.ENV_CAPABILITY, build_site.ENV_NINJA)
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
