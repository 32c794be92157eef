"""The guard a classic wheel carries (prebuild.runtime.classic_guard): the fit rules with
made-up torch versions and GPUs; torch's compile entry points it wraps (these fail when torch
renames or reroutes them); and the guard at work in child processes, installed through its
.pth file into a site directory holding a project shaped like gsplat 1.5.3 (a prebuilt module,
a JIT fallback that deletes the lock in the extensions directory before compiling)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
import torch.utils.cpp_extension as cpp_extension
from c_libraries import shared_library

from prebuild.runtime.arch import parse_arch_list
from prebuild.runtime.classic_guard import (
    ALLOW_ENV,
    COMPILE_ENTRY_POINTS,
    call_key,
    fit_problems,
)
from prebuild.runtime.manifest import (
    CPU_CODE,
    CUDA_HOST_CODE,
    GPU_CODE,
    NO_TORCH_ABI,
    STABLE_ABI,
    ProjectManifest,
)
from prebuild.runtime.nvml import Gpu
from prebuild.tool.builder.guard_files import guard_files


def project_manifest(
    torch_version="2.14.1+cu130", torch_cuda="13.0", sass="sm_90", ptx="", code=GPU_CODE,
    system_libraries=(),
):  # fmt: skip
    return ProjectManifest(
        system_libraries=system_libraries,
        code=code,
        kind="classic",
        torch=torch_version,
        torch_cuda=torch_cuda,
        cuda="13.0",
        python_tag="cp311-cp311-linux_x86_64",
        sass_archs=parse_arch_list(sass),
        ptx_archs=parse_arch_list(ptx),
        libraries=(),
    )


def build(arch="sm_XY"):
    return f"prebuild wheel --arch {arch} gsplat==1.5.3"


def problems(manifest, torch_version="2.14.1+cu130", torch_cuda="13.0", gpus=(), strict=False):
    return fit_problems(manifest, "gsplat", "1.5.3", build, torch_version, torch_cuda, gpus, strict)


H100 = Gpu(0, "NVIDIA H100", (9, 0))
A100 = Gpu(1, "NVIDIA A100", (8, 0))
RTX5090 = Gpu(0, "NVIDIA GeForce RTX 5090", (12, 0))


# ----------------------------------------------------------------------------- fit rules
def test_the_torch_and_gpu_it_was_built_for_fit():
    assert problems(project_manifest(), gpus=[H100]) == ([], [])
    assert problems(project_manifest(), gpus=None) == ([], [])  # no driver: nothing to check


def test_another_torch_minor_names_the_torch_to_install_and_the_build_for_this_one():
    errors, _ = problems(project_manifest(), torch_version="2.13.0+cu130", gpus=[H100])
    (error,) = errors
    assert "2.14" in error and "torch 2.13.0+cu130 is installed" in error
    assert "pip install 'torch==2.14.*' --index-url https://download.pytorch.org/whl/cu130" in error
    assert "prebuild wheel --arch sm_90 gsplat==1.5.3" in error


def test_a_cpu_torch_and_another_cuda_major_are_refused():
    (cpu,), _ = problems(project_manifest(), torch_version="2.14.1+cpu", torch_cuda=None)
    assert "CPU build" in cpu and "whl/cu130" in cpu
    (other,), _ = problems(project_manifest(), torch_version="2.14.1+cu128", torch_cuda="12.8")
    assert "CUDA 12.8" in other and "CUDA 13.0" in other and "whl/cu130" in other


def test_a_gpu_without_code_is_refused_naming_the_wheel_that_would_run_there():
    errors, notes = problems(project_manifest(), gpus=[H100, RTX5090])
    (error,) = errors
    assert "cuda:0 (NVIDIA GeForce RTX 5090, compute capability 12.0)" in error
    assert "sm_90" in error and "prebuild wheel --arch sm_120 gsplat==1.5.3" in error
    assert notes == []


def test_ptx_only_is_a_warning_and_an_error_when_strict():
    manifest = project_manifest(sass="sm_80", ptx="compute_80")
    errors, notes = problems(manifest, gpus=[H100])
    assert errors == [] and "JIT-compiles" in notes[0] and "sm_90 gsplat==1.5.3" in notes[0]
    errors, notes = problems(manifest, gpus=[H100], strict=True)
    assert "PREBUILD_STRICT=1" in errors[0] and notes == []
    assert problems(manifest, gpus=[A100]) == ([], [])


def test_a_host_wheel_runs_on_any_gpu_and_a_cpu_code_one_with_any_build_of_its_torch():
    """No GPU code (a classic project's host code): no GPU is checked. CUDA host code still needs
    a CUDA build of its torch, of its CUDA major; CPU code any build of its torch minor."""
    cuda_host = project_manifest(sass="", code=CUDA_HOST_CODE)
    assert problems(cuda_host, gpus=[H100, RTX5090]) == ([], [])
    (cpu,), _ = problems(cuda_host, torch_version="2.14.1+cpu", torch_cuda=None)
    assert "CPU build" in cpu
    (other,), _ = problems(cuda_host, torch_version="2.14.1+cu128", torch_cuda="12.8")
    assert "CUDA 12.8" in other
    cpu_code = project_manifest(sass="", code=CPU_CODE)
    for torch_version, torch_cuda in (("2.14.1+cpu", None), ("2.14.1+cu128", "12.8")):
        assert problems(cpu_code, torch_version, torch_cuda, gpus=[RTX5090]) == ([], [])
    (minor,), _ = problems(cpu_code, torch_version="2.13.0+cpu", torch_cuda=None)
    assert "torch 2.13.0+cpu is installed" in minor


def test_a_stable_abi_wheel_runs_with_every_torch_from_its_target_of_its_cuda_major():
    """Its libraries use only the stable ABI (a setup.py project on torch/csrc/stable): any
    torch from the target on loads them; an older one is told to upgrade; the CUDA major and
    the GPUs are checked as for any classic wheel."""
    stable = dataclasses.replace(project_manifest(), torch_abi=STABLE_ABI, torch_target="2.10")
    for torch_version, torch_cuda in (("2.10.0+cu130", "13.0"), ("2.15.0+cu132", "13.2")):
        assert problems(stable, torch_version, torch_cuda, gpus=[H100]) == ([], [])
    (old,), _ = problems(stable, torch_version="2.9.1+cu130", gpus=[H100])
    assert "stable ABI of torch 2.10, which torch 2.9.1+cu130 predates" in old
    assert "pip install 'torch>=2.10' --index-url https://download.pytorch.org/whl/cu130" in old
    (cpu,), _ = problems(stable, torch_version="2.15.0+cpu", torch_cuda=None)
    assert "a CUDA build of torch >= 2.10" in cpu and "'torch>=2.10'" in cpu
    (other,), _ = problems(stable, torch_version="2.12.0+cu128", torch_cuda="12.8")
    assert "CUDA 12.8" in other and "CUDA 13.0" in other
    (gpu,), _ = problems(stable, torch_version="2.15.0+cu132", torch_cuda="13.2", gpus=[RTX5090])
    assert "prebuild wheel --arch sm_120 gsplat==1.5.3" in gpu


def test_a_wheel_calling_nothing_of_torch_s_runs_with_every_torch_of_its_cuda_major():
    """Its libraries call nothing of torch's (loaded by ctypes, as bitsandbytes'; or CUDA host
    code on Python's C API): any torch release loads them, older than the build's or newer;
    the CUDA major, a CPU build of torch and the GPUs are checked as for any classic wheel, and
    the torch to install names no release."""
    free = dataclasses.replace(project_manifest(), torch_abi=NO_TORCH_ABI)
    for torch_version, torch_cuda in (("2.9.1+cu130", "13.0"), ("2.15.0+cu132", "13.2")):
        assert problems(free, torch_version, torch_cuda, gpus=[H100]) == ([], [])
    (cpu,), _ = problems(free, torch_version="2.15.0+cpu", torch_cuda=None)
    assert "CPU build" in cpu and "CUDA 13.0 libraries a CUDA build of torch brings" in cpu
    assert "pip install 'torch' --index-url https://download.pytorch.org/whl/cu130" in cpu
    (other,), _ = problems(free, torch_version="2.12.0+cu128", torch_cuda="12.8")
    assert "CUDA 12.8" in other and "CUDA 13.0" in other and "'torch' --index-url" in other
    (gpu,), _ = problems(free, torch_version="2.15.0+cu132", torch_cuda="13.2", gpus=[RTX5090])
    assert "prebuild wheel --arch sm_120 gsplat==1.5.3" in gpu
    host = dataclasses.replace(free, code=CUDA_HOST_CODE)
    assert problems(host, "2.11.0+cu130", "13.0", gpus=[RTX5090]) == ([], [])


# ---------------------------------------------------------- torch's names the guard relies on
def test_torch_still_has_every_compile_entry_point_the_guard_wraps():
    for name in COMPILE_ENTRY_POINTS:
        assert callable(getattr(cpp_extension, name, None)), name
    # gsplat 1.5.3 calls _get_build_directory(name, verbose=...) before deleting the lock
    assert list(inspect.signature(cpp_extension._get_build_directory).parameters)[:2] == [
        "name",
        "verbose",
    ]
    assert list(inspect.signature(cpp_extension._jit_compile).parameters)[0] == "name"


@pytest.mark.parametrize("entry", ["load", "load_inline"])
def test_load_and_load_inline_reach_jit_compile_through_the_module(entry, monkeypatch, tmp_path):
    """The guard wraps the module's _jit_compile: torch's own load and load_inline must look it
    up there at call time (a wrapped name nothing calls would guard nothing)."""

    class Reached(Exception):
        pass

    def reached(*args, **kwargs):
        raise Reached

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpp_extension, "_jit_compile", reached)
    source = tmp_path / "x.cpp"
    source.write_text("int x;\n")
    with pytest.raises(Reached):
        if entry == "load":
            cpp_extension.load("guard_probe", [str(source)])
        else:
            cpp_extension.load_inline("guard_probe", "int x;", functions=[])


def test_a_call_key_writes_the_environment_s_folders_by_what_they_are(monkeypatch):
    """The build's environment and the user's differ: paths under the package's folder, a site
    directory (torch's headers), Python's headers or the CUDA toolkit torch found give one key
    in both (a build's copy of the package is its own folder, an installed one's is the site
    directory); a path anywhere else is part of the key as it is."""
    import site

    def key(env: str, python: str, cuda: str, *more: str) -> str:
        lib = f"{env}/lib/python3.11/site-packages"
        paths = {"purelib": lib, "platlib": lib, "include": python, "platinclude": python}
        monkeypatch.setattr(sysconfig, "get_paths", lambda: paths)
        monkeypatch.setattr(site, "getsitepackages", lambda: [lib])
        monkeypatch.setattr(site, "getusersitepackages", lambda: "/nowhere/.local/site")
        monkeypatch.setattr(cpp_extension, "CUDA_HOME", cuda)
        root = "/build/work/first-use/root" if env == "/build/venv" else lib
        return call_key(
            cpp_extension.load,
            (),
            {
                "name": "x",
                "sources": [f"{root}/pkg/a.cu"],
                "extra_include_paths": [f"{lib}/torch/include", python, f"{cuda}/include"],
                "extra_ldflags": [f"-L{cuda}/lib64", *more],
            },
            root,
        )

    built = key("/build/venv", "/root/.pyenv/versions/3.11.7/include/python3.11", "/w/cuda-shim")
    assert built == key("/home/u/env", "/usr/include/python3.11", "/usr/local/cuda")
    assert built != key("/home/u/env", "/usr/include/python3.11", "/usr/local/cuda", "-L/opt/x")
    # a toolkit in a folder as wide as /usr holds the system's own paths: not written by name
    assert key("/build/venv", "/p/include/python3.11", "/usr", "-I/usr/include/eigen3") != key(
        "/build/venv", "/p/include/python3.11", "/opt/cuda", "-I/opt/cuda/include/eigen3"
    )


# ----------------------------------------------------------------- the guard in a child
BACKEND = """
import os
from torch.utils.cpp_extension import _get_build_directory, load
try:
    from {name} import csrc as _C
except ImportError:
    build_dir = _get_build_directory("{name}_cuda", verbose=False)
    try:  # as gsplat 1.5.3 does: whoever else is building there loses its lock
        os.remove(os.path.join(build_dir, "lock"))
    except OSError:
        pass
    _C = load("{name}_cuda", [os.path.join(os.path.dirname(__file__), "missing.cu")])
"""

OTHER_OP = """
from torch.utils.cpp_extension import load
def build_adam():
    return load("cpu_adam", ["/nonexistent/cpu_adam.cpp"])
"""

# nerfacc 0.3.5's _backend.py: the JIT build's folder asked at every import, before its
# prebuilt module is imported
LOOKUP = """
from torch.utils.cpp_extension import _get_build_directory
BUILD_DIR = _get_build_directory("{name}_cuda", verbose=False)
from {name} import csrc as _C
"""


def guarded_project(
    site: Path, name: str, torch_version: str, torch_cuda: str | None, system_libraries=()
) -> None:
    """Project ``name`` installed in ``site`` as a guarded classic wheel built for
    ``torch_version``: its prebuilt module ``name.csrc`` (pure Python here: it imports), a
    gsplat-like fallback (``name._backend``), an op it compiles on purpose (``name.ops``), and
    the guard's files as guard_files.py writes them into the wheel."""
    package = site / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import torch\n")
    (package / "_backend.py").write_text(BACKEND.format(name=name))
    (package / "ops.py").write_text(OTHER_OP)
    (package / "lookup.py").write_text(LOOKUP.format(name=name))
    (package / "csrc.py").write_text("VALUE = 1\n")
    info = site / f"{name}-1.0+pt.dist-info"
    info.mkdir()
    manifest = project_manifest(torch_version, torch_cuda, system_libraries=system_libraries)
    (info / "prebuild.json").write_text(manifest.to_json())
    wheel = site.parent / f"{name}-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{name}/__init__.py", "")
        zf.writestr(f"{info.name}/METADATA", "")
    for path, text in guard_files(wheel, name, "1.0", info.name, f"{name}==1.0").items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    # guard_files finds no extension module in this pure-Python stand-in: name it by hand.
    pth = site / f"_prebuild_guard_{name}.pth"
    pth.write_text(pth.read_text().replace("'modules': []", f"'modules': ['{name}.csrc']"))


@pytest.fixture
def site(tmp_path) -> Path:
    """A site directory with two guarded projects: ``fakeproj``, built for this torch, and
    ``fakeold``, built for a torch minor release that does not exist; and ``otherpkg``, not
    guarded, which compiles an op of its own."""
    site = tmp_path / "site"
    guarded_project(site, "fakeproj", torch.__version__, torch.version.cuda)
    guarded_project(site, "fakeold", "2.99.0+cu130", "13.0")
    (site / "otherpkg.py").write_text(OTHER_OP)
    return site


def run(site: Path, code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``code`` in a child whose site directories include ``site`` (its .pth files run), with
    no GPU visible and torch's extensions directory in tmp_path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREBUILD_STRICT", ALLOW_ENV)}
    env.update(TORCH_EXTENSIONS_DIR=str(tmp_path / "extensions"), CUDA_VISIBLE_DEVICES="")
    script = f"import site; site.addsitedir({str(site)!r})\n" + STEP + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )


# Each step of a child prints one JSON line: what it returned, raised or warned.
STEP = """
import json, os, sys, warnings

def step(label, call):
    value = raised = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = repr(call())
        except BaseException as exc:
            raised = [type(exc).__name__, str(exc)]
    warned = [[w.category.__name__, str(w.message)] for w in caught]
    print(json.dumps({"step": label, "value": value, "raised": raised, "warned": warned}))
"""


def steps(proc: subprocess.CompletedProcess) -> dict[str, dict]:
    assert proc.returncode == 0, proc.stderr
    return {d["step"]: d for d in map(json.loads, proc.stdout.splitlines())}


def test_a_fitting_project_imports_a_misfit_one_says_what_fits_and_only_their_compiles_are_checked(
    site, tmp_path
):
    proc = run(
        site,
        """
        import importlib
        step("finders", lambda: sum(type(f).__name__ == "_Finder" for f in sys.meta_path))
        step("import fakeproj", lambda: importlib.import_module("fakeproj"))
        step("import fakeold", lambda: importlib.import_module("fakeold"))
        import fakeproj.ops, otherpkg
        step("other package", otherpkg.build_adam)
        step("own op", fakeproj.ops.build_adam)
        step("own op again", fakeproj.ops.build_adam)
        os.environ["PREBUILD_STRICT"] = "1"
        step("own op, strict", fakeproj.ops.build_adam)
        step("a folder's name", lambda: importlib.import_module("fakeproj.lookup")._C.VALUE)
        """,
        tmp_path,
    )
    done = steps(proc)
    assert done["finders"]["value"] == "2"  # one per guarded project
    assert done["import fakeproj"]["raised"] is None
    kind, message = done["import fakeold"]["raised"]
    assert kind == "WheelMisfitError" and "fakeold 1.0" in message
    assert "torch==2.99.*" in message and "prebuild wheel --arch" in message
    # another package's compile reaches torch untouched: torch's own error, no warning
    assert done["other package"]["raised"][0] == "FileNotFoundError"
    assert done["other package"]["warned"] == []
    # the project compiling an op the wheel does not hold: torch is reached, one warning
    assert done["own op"]["raised"][0] == "FileNotFoundError"
    ((category, text),) = done["own op"]["warned"]
    assert category == "JitWarning" and "'cpu_adam'" in text and "fakeproj.csrc" in text
    assert done["own op again"]["warned"] == []
    kind, message = done["own op, strict"]["raised"]
    assert kind == "JitRefusedError" and "PREBUILD_STRICT=1" in message
    # the JIT build's folder asked, no compile: neither refused nor warned of, even strict
    assert done["a folder's name"] == {**done["a folder's name"], "value": "1", "raised": None}
    assert done["a folder's name"]["warned"] == []


def test_a_namespace_package_is_checked_when_its_extension_module_is_imported(site, tmp_path):
    """simple-knn's package has no __init__.py, and users import its module, simple_knn._C: the
    guard checks the fit there (torch imported first: the module links against its libraries)
    and says a misfit there too; a package's fit is checked once."""
    for name in ("fakeproj", "fakeold"):
        (site / name / "__init__.py").unlink()  # namespace packages
    (site / "fakeproj" / "csrc.py").write_text("import sys\nTORCH_FIRST = 'torch' in sys.modules\n")
    proc = run(
        site,
        """
        import importlib
        step("torch before", lambda: "torch" in sys.modules)
        step("import fakeproj.csrc", lambda: importlib.import_module("fakeproj.csrc").TORCH_FIRST)
        step("import fakeold.csrc", lambda: importlib.import_module("fakeold.csrc"))
        """,
        tmp_path,
    )
    done = steps(proc)
    assert done["torch before"]["value"] == "False"
    assert done["import fakeproj.csrc"] == {
        **done["import fakeproj.csrc"],
        "value": "True",
        "raised": None,
    }
    kind, message = done["import fakeold.csrc"]["raised"]
    assert kind == "WheelMisfitError" and "fakeold 1.0" in message and "torch==2.99.*" in message


def test_a_guard_whose_manifest_is_gone_warns_and_lets_the_import_through(site, tmp_path):
    (site / "fakeproj-1.0+pt.dist-info" / "prebuild.json").unlink()
    proc = run(site, 'step("import", lambda: __import__("fakeproj"))', tmp_path)
    done = steps(proc)
    assert done["import"]["raised"] is None
    ((category, text),) = done["import"]["warned"]
    assert category == "RuntimeWarning" and "cannot read the wheel's manifest" in text


def test_a_jit_fallback_is_refused_before_it_touches_the_extensions_directory(site, tmp_path):
    (site / "fakeproj" / "csrc.py").unlink()  # the prebuilt module no longer imports
    lock = tmp_path / "extensions" / "fakeproj_cuda" / "lock"  # a concurrent build's
    lock.parent.mkdir(parents=True)
    lock.write_text("another process is building here\n")
    proc = run(
        site,
        f"""
        import importlib, pathlib
        lock = pathlib.Path({str(lock)!r})
        step("fallback", lambda: importlib.import_module("fakeproj._backend"))
        step("lock kept", lock.exists)
        import otherpkg
        step("other package", otherpkg.build_adam)
        os.environ["PREBUILD_ALLOW_JIT"] = "1"
        step("allowed fallback", lambda: importlib.import_module("fakeproj._backend"))
        """,
        tmp_path,
    )
    done = steps(proc)
    assert done["lock kept"]["value"] == "True"
    kind, message = done["fallback"]["raised"]
    assert kind == "JitRefusedError"
    # why the prebuilt module did not load, what the wheel holds, and the way out
    assert "No module named 'fakeproj.csrc'" in message and "'fakeproj_cuda'" in message
    assert f"torch {torch.__version__}" in message and "sm_90" in message
    assert "PREBUILD_ALLOW_JIT=1" in message
    assert done["other package"]["raised"][0] == "FileNotFoundError"
    # allowed: the project's own fallback runs (deletes the lock, calls torch's build)
    kind, message = done["allowed fallback"]["raised"]
    assert kind != "JitRefusedError" and "missing.cu" in message
    assert not lock.exists()


def test_at_start_up_the_guard_imports_only_itself(tmp_path):
    """Every Python start-up of an environment with a guarded wheel runs its .pth: it imports
    the guard's own two small modules and nothing else (not torch, not typing: ~10 ms), reads
    no file. What it costs is measured by scripts/bench.py (section 2)."""
    site = tmp_path / "site"
    guarded_project(site, "fakeproj", torch.__version__, torch.version.cuda)
    code = (
        "import sys, site\n"
        "before = set(sys.modules)\n"
        f"site.addsitedir({str(site)!r})\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    added = ast.literal_eval(proc.stdout.strip())
    assert set(added) <= {
        "_prebuild_guard_fakeproj",
        "_prebuild_guard_fakeproj.classic_guard",
        "__future__",
    }, added
    assert "_prebuild_guard_fakeproj.classic_guard" in added


MISSING_LIBRARY = "libprebuildgone.so.1"
EXTENSION_C = """\
#include <Python.h>
int prebuild_gone(void);
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "csrc", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_csrc(void) { prebuild_gone(); return PyModule_Create(&module); }
"""


def guarded_extension(site: Path, *link: str) -> None:
    """fakeproj's prebuilt module ``fakeproj.csrc`` (EXTENSION_C, calling prebuild_gone()),
    a real extension module linked with ``link``."""
    (site / "fakeproj" / "csrc.py").unlink()
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    shared_library(
        site / "fakeproj" / f"csrc{suffix}",
        EXTENSION_C,
        f"-I{sysconfig.get_paths()['include']}",
        *link,
    )


def import_and_fall_back(site: Path, tmp_path: Path) -> dict[str, dict]:
    """The steps of importing fakeproj's prebuilt module, then its JIT fallback."""
    code = """
        import importlib
        step("import", lambda: importlib.import_module("fakeproj.csrc"))
        step("fallback", lambda: importlib.import_module("fakeproj._backend"))
        """
    return steps(run(site, code, tmp_path))


def test_a_system_library_the_build_machine_had_and_this_one_lacks_is_named(tmp_path):
    """torch-sparse-solve's wheel links the build machine's libklu.so.2: where the dynamic
    loader finds no such library, the prebuilt module's ImportError names it, what provides it
    and the build for this machine (not "the install is damaged"); the project's JIT fallback
    is refused with that reason. A real extension module here, linking a library since gone."""
    lib = tmp_path / "lib"
    lib.mkdir()
    shared_library(lib / MISSING_LIBRARY, "int prebuild_gone(void) { return 1; }\n")
    (lib / "libprebuildgone.so").symlink_to(MISSING_LIBRARY)
    site = tmp_path / "site"
    guarded_project(site, "fakeproj", torch.__version__, torch.version.cuda, (MISSING_LIBRARY,))
    guarded_extension(site, f"-L{lib}", "-lprebuildgone")
    shutil.rmtree(lib)  # gone: the loader finds no libprebuildgone.so.1
    done = import_and_fall_back(site, tmp_path)
    kind, message = done["import"]["raised"]
    assert kind == "WheelMisfitError", message
    assert message.startswith("fakeproj 1.0: fakeproj.csrc cannot load: it links "), message
    assert f"apt-file search {MISSING_LIBRARY}" in message and "prebuild wheel --arch" in message
    kind, message = done["fallback"]["raised"]
    assert kind == "JitRefusedError" and MISSING_LIBRARY in message
    assert "damaged" not in message and "  " not in message, message


def test_a_cpp_runtime_older_than_the_build_machine_s_is_named(tmp_path):
    """A wheel built with a newer GCC than the libstdc++ loaded where it runs (a conda
    environment's): the loader's "version `GLIBCXX_...' not found" becomes an error naming the
    runtime and the fixes, not "the install is damaged". Real here: the module is linked
    against a libstdc++.so.6 of the test's defining GLIBCXX_3.4.999, and loads the machine's."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "versions.map").write_text("GLIBCXX_3.4.999 { global: prebuild_gone; local: *; };\n")
    shared_library(
        fake / "libstdc++.so.6",
        "int prebuild_gone(void) { return 1; }\n",
        f"-Wl,--version-script={fake / 'versions.map'}",
    )
    site = tmp_path / "site"
    guarded_project(site, "fakeproj", torch.__version__, torch.version.cuda)
    guarded_extension(site, f"-L{fake}", "-l:libstdc++.so.6")
    shutil.rmtree(fake)
    done = import_and_fall_back(site, tmp_path)
    kind, message = done["import"]["raised"]
    assert kind == "WheelMisfitError", message
    assert message.startswith(
        "fakeproj 1.0: fakeproj.csrc cannot load: its libraries need GLIBCXX_3.4.999 of the C++ "
        "runtime, and the libstdc++ loaded here ("
    ), message
    assert "conda install -c conda-forge libstdcxx-ng" in message, message
    kind, message = done["fallback"]["raised"]
    assert kind == "JitRefusedError" and "GLIBCXX_3.4.999" in message
    assert "damaged" not in message, message


def test_only_a_recorded_library_the_loader_misses_is_explained():
    from prebuild.runtime.classic_guard import system_library_problem

    loader = "libklu.so.2: cannot open shared object file: No such file or directory"
    said = system_library_problem(("libaio.so.1", "libklu.so.2"), loader, "prebuild wheel X")
    assert said is not None and said.startswith("it links libklu.so.2, a system library")
    assert said.endswith("or build the wheel on this machine: prebuild wheel X.")
    assert system_library_problem(("libaio.so.1",), loader, "x") is None
    undefined = "undefined symbol: klu_solve (libklu.so.2)"
    assert system_library_problem(("libklu.so.2",), undefined, "x") is None


TORCH_LINKED_C = """\
#include <Python.h>
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "fakecsrc", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_fakecsrc(void) { return PyModule_Create(&module); }
"""


def test_an_extension_imported_before_torch_loads_torch_first(tmp_path):
    """Swin-Transformer's window_process: `import swin_window_process` before torch failed on
    `libc10.so: cannot open shared object file` (its library links torch's, found once torch
    has loaded them), through the guard's frame. The guard imports torch, then loads it. A real
    top-level extension module here, linking torch's libc10.so with no path to it."""
    site = tmp_path / "site"
    guarded_project(site, "fakeproj", torch.__version__, torch.version.cuda)
    torch_lib = Path(torch.__file__).parent / "lib"
    shared_library(
        site / f"fakecsrc{sysconfig.get_config_var('EXT_SUFFIX')}",
        TORCH_LINKED_C,
        f"-I{sysconfig.get_paths()['include']}",
        "-Wl,--no-as-needed",
        f"-L{torch_lib}",
        "-lc10",
    )
    pth = site / "_prebuild_guard_fakeproj.pth"
    pth.write_text(pth.read_text().replace("['fakeproj.csrc']", "['fakeproj.csrc', 'fakecsrc']"))
    code = """
        import importlib
        step("torch before", lambda: "torch" in sys.modules)
        step("import", lambda: importlib.import_module("fakecsrc").__name__)
        step("torch after", lambda: "torch" in sys.modules)
        """
    done = steps(run(site, code, tmp_path))
    assert done["torch before"]["value"] == "False"
    assert done["import"]["value"] == "'fakecsrc'", done["import"]
    assert done["torch after"]["value"] == "True"


def test_torch_s_libraries_and_the_driver_s_missing_are_told_apart():
    from prebuild.runtime.classic_guard import driver_problem, needs_torch_first

    assert needs_torch_first("libc10.so: cannot open shared object file: No such file")
    assert needs_torch_first("libtorch_cuda.so: cannot open shared object file: No such file")
    assert not needs_torch_first("libklu.so.2: cannot open shared object file: No such file")
    assert not needs_torch_first("undefined symbol: _ZN3c104cuda (libc10.so)")
    said = driver_problem("libcuda.so.1: cannot open shared object file: No such file")
    assert said is not None and said.startswith("it links the NVIDIA driver's libcuda.so.1")
    assert "imports only where an NVIDIA driver is installed" in said
    assert driver_problem("libklu.so.2: cannot open shared object file") is None


# ------------------------------------------------- the compiles of a project's first use, held
FIRST_USE = """
import os
from torch.utils.cpp_extension import _get_build_directory, load
HERE = os.path.dirname(__file__)
_C = load(name="fakejit_py", sources=[os.path.join(HERE, "fakejit.cpp")])
BUILD_DIR = _get_build_directory("fakejit_py", False)  # where nvdiffrast looks for a lock
OPS = load("fakejit_ops", [os.path.join(HERE, "ops.cu")], is_python_module=False)

def not_held():
    return load(name="fakejit_other", sources=[os.path.join(HERE, "other.cpp")])

def other_sources():  # a held name, other sources: another compile than the wheel's
    return load(name="fakejit_py", sources=[os.path.join(HERE, "fakejit_v2.cpp")])
"""


def test_the_compiles_a_project_makes_when_first_used_are_served_from_the_wheel(tmp_path):
    """A wheel built of a project that compiles when first used holds those compiles in the
    guard's jit folder (builder/jit_ahead.py), each keyed by its call (call_key: the paths
    under the package's folder written relative to it, so the build's copy and the installed
    package give one key): its load() calls return them, compiling nothing and making nothing
    in the extensions directory; a name it does not hold, or holds built of other sources,
    reaches torch with the guard's warning, as does another package's load() of a held name
    (no warning) and, with PREBUILD_ALLOW_JIT=1, the project's own. A pure-Python stand-in
    for the module, a real library of ops."""
    site = tmp_path / "site"
    (site / "fakejit").mkdir(parents=True)
    (site / "fakejit" / "__init__.py").write_text(FIRST_USE)
    jit = site / "_prebuild_guard_fakejit" / "jit"
    jit.mkdir(parents=True)
    (jit / "fakejit_py.py").write_text("VALUE = 1\n")
    shared_library(jit / "fakejit_ops.so", "int fakejit_ops(void) { return 2; }\n")
    info = site / "fakejit-1.0+pt.dist-info"
    info.mkdir()
    (info / "prebuild.json").write_text(
        project_manifest(torch.__version__, torch.version.cuda).to_json()
    )
    wheel = tmp_path / "fakejit-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("fakejit/__init__.py", "")
        zf.writestr(f"{info.name}/METADATA", "")
    # the keys as the build computed them, in its own copy of the package
    copy = "/build/work/first-use"
    served = {
        "fakejit_py": [
            {
                "path": "_prebuild_guard_fakejit/jit/fakejit_py.py",  # the stand-in
                "key": call_key(
                    cpp_extension.load,
                    (),
                    {"name": "fakejit_py", "sources": [f"{copy}/fakejit/fakejit.cpp"]},
                    copy,
                ),
            }
        ],
        "fakejit_ops": [
            {
                "path": "_prebuild_guard_fakejit/jit/fakejit_ops.so",
                "key": call_key(
                    cpp_extension.load,
                    ("fakejit_ops", [f"{copy}/fakejit/ops.cu"]),
                    {"is_python_module": False},
                    copy,
                ),
            }
        ],
    }
    files = guard_files(wheel, "fakejit", "1.0", info.name, "fakejit==1.0", served)
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    # the stand-in module is Python here: named among the modules by hand
    pth = site / "_prebuild_guard_fakejit.pth"
    pth.write_text(
        pth.read_text().replace(
            "'modules': []", "'modules': ['_prebuild_guard_fakejit.jit.fakejit_py']"
        )
    )
    (site / "otherpkg.py").write_text(
        "import os\nfrom torch.utils.cpp_extension import load\n"
        "def build():\n"
        "    here = os.path.join(os.path.dirname(__file__), 'fakejit')\n"
        "    return load(name='fakejit_py', sources=[os.path.join(here, 'fakejit.cpp')])\n"
    )
    proc = run(
        site,
        """
        import importlib
        step("import", lambda: importlib.import_module("fakejit")._C.VALUE)
        import fakejit, otherpkg
        step("build dir", lambda: (fakejit.BUILD_DIR, os.path.exists(fakejit.BUILD_DIR)))
        step("ops", lambda: fakejit.OPS)
        step("extensions", lambda: os.path.exists(os.environ["TORCH_EXTENSIONS_DIR"]))
        step("not held", fakejit.not_held)
        step("other sources", fakejit.other_sources)
        step("another package", otherpkg.build)
        os.environ["PREBUILD_ALLOW_JIT"] = "1"
        step("allowed", lambda: importlib.reload(fakejit))
        """,
        tmp_path,
    )
    done = steps(proc)
    assert done["import"] == {**done["import"], "value": "1", "raised": None, "warned": []}
    build_dir, made = ast.literal_eval(done["build dir"]["value"])
    assert build_dir.startswith(str(jit)) and not made
    assert done["ops"]["value"] == repr(str(jit / "fakejit_ops.so"))
    assert done["extensions"]["value"] == "False"  # nothing compiled, no lock, no folder
    # a name the wheel does not hold: torch's own compile, and the guard's warning
    assert done["not held"]["raised"][0] == "FileNotFoundError"
    ((category, message),) = done["not held"]["warned"]
    assert category == "JitWarning" and "'fakejit_other'" in message
    # a name it holds, asked of other sources: not the wheel's library, said
    assert done["other sources"]["raised"][0] == "FileNotFoundError"
    ((category, message),) = done["other sources"]["warned"]
    assert category == "JitWarning" and "made from other sources or flags" in message
    assert done["another package"]["raised"][0] == "FileNotFoundError"
    assert done["another package"]["warned"] == []
    kind, message = done["allowed"]["raised"]
    assert kind == "FileNotFoundError" and "fakejit.cpp" in message
