"""`prebuild wheel --arch ... PROJECT` on classic (torch/extension.h) projects, unmodified:
fixture projects written for these tests (tests/e2e/fixtures/classic/), built in a venv
with the CUDA build of torch 2.14.1.

- plain_ext (torch/extension.h + pybind11, a package with its extension inside): two wheels,
  each holding exactly its arch, a torch pin, prebuild.json, the second built without
  compiling the binding again; installs and runs its CPU function next to its torch, and pip
  refuses it next to another torch minor release;
- gencode_ext (hard-coded -gencode for sm_75 plus --use_fast_math/--maxrregcount, a top-level
  extension module beside a package): its sm_80 and sm_90 wheels hold their arch only (nvcc's
  command is the same for both: its object must not carry over), the other flags kept;
- broken_ext: the compiler's error is shown (its texture reference explained as CUDA 12's
  break), no wheel appears, and a second run fails the
  same way (nothing left locked);
- jit_ext (compiles at first use with torch.utils.cpp_extension.load): those compiles made in
  the build and served from the wheel; a broken one stops the build with its error;
- cuda_host_ext (CUDA host code, no kernel) and cpu_ext (CPU code, PyG's build_ext with ninja
  off), neither calling anything of torch's: one wheel each for every GPU and torch, labelled
  with no arch and no torch, which prebuild install picks with no GPU, and which runs; cpu_ext
  built with ninja turned back on;
- twin_ext (ninja off, two sources making one object): ninja, turned back on, fails on its
  own, and the wheel is built again without it.
- argv_ext (its setup.py reads an option from its command line, as MinkowskiEngine's): told
  how to give it, then built with it through -C; optin_ext (builds its extension only when an
  option on its command line asks, as Uni-Core's): the refusal names the option and the command.
- system_header_ext (a header of its own includes a system library's header the machine
  lacks, as torchsparse's does): stopped before compiling, naming it; built once it is on CPATH.
- stable_ext (a setup.py project on PyTorch's stable ABI alone): one wheel for every torch
  from its target on, labelled and pinned so, which pip installs beside another torch.
- ctypes_ext (a CUDA library loaded by ctypes, as bitsandbytes'): one wheel for every Python
  (py310-none) and every torch; its C++17 code, which C++20 refuses, compiled as asked.
- old_api_ext (`x.type()` given to AT_DISPATCH_FLOATING_TYPES, AT_CHECK, CHECK_EQ, TH/THC,
  AT_ASSERT with no `;`, its own lerp: written for torch 1.x, as ngp_pl's vren): mended in
  prebuild's copy, built, each change said and recorded, and its op runs; the fixture itself
  untouched.
- undefined_ext (its binding calls a function from a source its setup.py does not compile):
  its library, loaded beside torch before the wheel is written, fails: refused, naming it.

Every build reaches nvcc as our machines do: through a wrapper script on PATH (not in a
toolkit's bin/), with CUDA_HOME unset; plain_ext's binding includes CUDA headers
(ATen/cuda/CUDAContext.h), which compile only if the toolkit was found whole.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import background
import pytest
from build_helpers import prebuild_wheel, tree_snapshot
from job_steps import read_steps
from pip_env import clean_pip_env, installed
from wheel.wheelfile import WheelFile

from prebuild.tool.builder.runtime_floor import floor_note, torch_runtime, wheel_runtime
from prebuild.tool.index_keys import index_key_of
from prebuild.tool.inspection import inspect_path, library_code

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "classic"


def prebuild(python: Path, *args: str) -> subprocess.CompletedProcess:
    """Any other prebuild command, run the same way."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    return subprocess.run(
        [str(python), "-m", "prebuild", *args], capture_output=True, text=True, timeout=600, env=env
    )


def python_c(python: Path, script: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -c script`` in ``cwd`` (not the checkout, whose src/ would shadow what is
    installed), its output captured."""
    return subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def all_sass(code) -> list[str]:
    """Named or not: without -lineinfo nvcc names no source in the fatbin entries."""
    return [a.sm for a in sorted({*code.sass, *code.linked_sass})]


def wheel_contents(wheel: Path) -> tuple[dict, str, dict[str, bytes]]:
    """prebuild.json, METADATA and the shared libraries, read through WheelFile (which checks
    every file against RECORD)."""
    with WheelFile(wheel) as wf:
        info = wf.dist_info_path
        files = {name: wf.read(name) for name in wf.namelist()}
    libraries = {n: data for n, data in files.items() if n.endswith(".so")}
    return json.loads(files[f"{info}/prebuild.json"]), files[f"{info}/METADATA"].decode(), libraries


@pytest.fixture(scope="module")
def plain_job() -> tuple[Path, dict]:
    """The plain_ext build's folder and its step (classic_plain_job.py, in the background)."""
    job, work = background.result("classic-plain", timeout=3600)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-6000:]
    (step,) = read_steps(work)
    return work, step


@pytest.fixture(scope="module")
def plain_work(plain_job) -> Path:
    """plain_wheels' --build-dir: its build logs are checked, and a later run goes on from it."""
    return plain_job[0] / "build"


@pytest.fixture(scope="module")
def plain_wheels(plain_job, plain_work) -> list[Path]:
    work, step = plain_job
    assert step["returncode"] == 0, step["stdout"] + step["stderr"][-6000:]
    trees = json.loads((work / "trees.json").read_text())
    assert trees["after"] == trees["before"]  # built from a private copy
    assert "2 wheels in" in step["stdout"]
    # The second wheel compiles the kernel for its arch and reuses the binding's object.
    assert compiled(plain_work / "cu130.sm80" / "build.log") == ["binding.cpp", "kernels.cu"]
    assert compiled(plain_work / "cu130.sm90" / "build.log") == ["kernels.cu"]
    # Its build requirements are asked of its backend once (get_requires_for_build_wheel runs
    # setup.py's egg_info), not again for the second wheel.
    asked = [requirements_asked(plain_work / w / "build.log") for w in ("cu130.sm80", "cu130.sm90")]
    assert asked == [True, False]
    # The binding's compile asked for Python's -g; the wheels strip debug information, so it
    # ran with -g0 after it (a third less compile time), said once for both wheels (the
    # second's object is the first's).
    logged = (plain_work / "cu130.sm80" / "cxx-calls.jsonl").read_text().splitlines()
    (binding,) = [c for c in map(json.loads, logged) if "-c" in c["given"]]
    assert "-g" in binding["given"] and binding["run"][: len(binding["given"]) + 1] == [
        *binding["given"],
        "-g0",
    ], binding
    said = " ".join(step["stdout"].split())
    assert "note (every wheel): debug information left out of 1 compile asking for it" in said
    return sorted((work / "dist").glob("*.whl"))


def requirements_asked(build_log: Path) -> bool:
    text = build_log.read_text()
    return "running egg_info" in text[: text.index("running bdist_wheel")]


def compiled(build_log: Path) -> list[str]:
    """The sources ninja compiled in a classic build (its "[i/n] command" lines)."""
    lines = [line for line in build_log.read_text().splitlines() if re.match(r"\[\d+/\d+\] ", line)]
    return sorted({Path(m).name for line in lines for m in re.findall(r"\S+\.(?:cpp|cu)\b", line)})


def test_plain_extension_gets_one_wheel_per_arch_holding_exactly_it(plain_wheels, tmp_path):
    assert [w.name for w in plain_wheels] == [
        f"plain_ext-0.1.0+pt214.cu130.{sm}-cp311-cp311-linux_x86_64.whl" for sm in ("sm80", "sm90")
    ]
    for wheel, sm in zip(plain_wheels, ("sm_80", "sm_90")):
        manifest, metadata, libraries = wheel_contents(wheel)
        (name,) = libraries
        assert name.startswith("plain_ext/_C.") and name.endswith(".so")
        code = library_code(libraries[name], name)  # our own reader, on the bytes in the wheel
        assert all_sass(code) == [sm] and code.ptx == ()
        assert "Requires-Dist: torch>=2.14,<2.15" in metadata.splitlines()
        assert f"Version: 0.1.0+pt214.cu130.{sm.replace('_', '')}" in metadata.splitlines()
        assert manifest["torch"].startswith("2.14.1") and manifest["cuda"] == "13.0"
        assert manifest["sass_archs"] == [sm] and manifest["ptx_archs"] == []
        assert manifest["python_tag"] == "cp311-cp311-linux_x86_64"
        (listed,) = manifest["libraries"]
        assert (
            listed["file"] == name
            and listed["sass"] == [sm]
            and listed["size"] == len(libraries[name])
        )
        # Every nvcc call is logged, though the shim changed nothing in it but the fatbin's
        # compression, as prebuild's own (the project's own -std=c++20, torch's -gencode last):
        # one, for the kernel.
        query, call = sorted(
            manifest["nvcc_calls"], key=lambda c: len(c["given"])
        )  # torch asks --version too
        assert query == {"given": ["--version"], "run": ["--version"]}
        assert (
            call["run"] == [*call["given"], "--compress-mode=size"]
            and call["given"][-1] == f"-gencode=arch=compute_{sm[3:]},code={sm}"
        )
        assert manifest["cxx_standard"] == {"needed": "c++20", "raised": {}, "raised_host": {}}
        report = inspect_path(
            wheel
        )  # prebuild inspect's reader agrees with the bytes and prebuild.json
        assert report.ok and report.summary.startswith(
            f"plain_ext 0.1.0+pt214.cu130.{sm.replace('_', '')}: a classic"
        )
    # One index per torch and arch, each with the pip command that names the project.
    indexed = prebuild(
        Path(sys.executable), "index", str(plain_wheels[0].parent), "--out", str(tmp_path / "site")
    )
    assert indexed.returncode == 0, indexed.stderr
    assert (
        "pip install plain-ext --index-url "
        + (tmp_path / "site").as_uri()
        + "/pt214-cu130-sm90/simple"
        in indexed.stdout
    )
    # This environment's torch is 2.13: install refuses and says which torch, or what to build.
    refused = prebuild(
        Path(sys.executable),
        "install",
        "plain-ext",
        "--from",
        str(tmp_path / "site"),
        "--arch",
        "sm_90",
        "--dry-run",
    )
    said = " ".join(refused.stdout.split())
    assert (
        refused.returncode == 3
        and "Instead: install the torch these wheels were built for (pip install 'torch==2.14.*')"
        in said
    )


def test_the_same_command_goes_on_from_the_objects_an_earlier_run_left(
    plain_wheels, plain_work, cuda_torch_python, tmp_path
):
    """--build-dir: a run of the same command compiles only what an earlier one did not finish.
    As if plain_wheels' last wheel (sm_90) had been interrupted before nvcc wrote the kernel's
    object: the source is copied afresh, its build/ carried into the copy, the binding's object
    reused, and only the kernel compiled again, for sm_90."""
    (kernel,) = plain_work.glob("source/**/build/temp.*/**/kernels.o")
    kernel.unlink()
    out = tmp_path / "dist"
    args = ["--arch", "sm_90", str(FIXTURES / "plain_ext"), "--out", str(out)]
    proc = prebuild_wheel(cuda_torch_python, *args, "--build-dir", str(plain_work))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    assert compiled(plain_work / "cu130.sm90" / "build.log") == ["kernels.cu"]
    said = " ".join((proc.stdout + proc.stderr).split())
    assert f"1 object an earlier run compiled for this wheel in {plain_work} is kept" in said
    (wheel,) = out.glob("*.whl")
    manifest, _, libraries = wheel_contents(wheel)
    (name,) = libraries
    assert all_sass(library_code(libraries[name], name)) == ["sm_90"]
    # The kernel's call, made again by this run; the binding's object's, by the earlier one.
    compiles = [c for c in manifest["nvcc_calls"] if "-c" in c["run"]]
    assert len(compiles) == 1 and compiles[0]["run"][-2:] == [
        "-gencode=arch=compute_90,code=sm_90",
        "--compress-mode=size",
    ]


def test_plain_wheel_installs_and_runs_next_to_its_torch_and_is_refused_next_to_another(
    plain_wheels, fresh_cuda_venv, fresh_venv, tmp_path
):
    python = fresh_cuda_venv()
    # prebuild install chooses by the torch installed (2.14.1 here) and the GPU asked for.
    chosen = prebuild(
        python,
        "install",
        "plain-ext",
        "--from",
        str(plain_wheels[0].parent),
        "--arch",
        "sm_90",
        "--json",
    )
    assert chosen.returncode == 0, chosen.stdout + chosen.stderr
    assert json.loads(chosen.stdout)["chosen"]["wheel"] == plain_wheels[1].name
    script = (
        "import torch, plain_ext\n"
        "print(plain_ext.add_one(torch.arange(3.0)).tolist(), torch.cuda.is_initialized())"
    )
    ran = python_c(python, script, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split("\n")[-2] == "[1.0, 2.0, 3.0] False"  # a CPU function; no GPU touched
    # Installed, inspect finds it by name and doctor checks it against this torch.
    inspected = prebuild(python, "inspect", "plain-ext", "--json")
    assert inspected.returncode == 0, inspected.stdout + inspected.stderr
    report = json.loads(inspected.stdout)
    assert report["manifest"]["kind"] == "classic" and report["manifest"]["sass_archs"] == ["sm_90"]
    (lib,) = report["libraries"]
    assert (
        lib["file"].startswith("plain_ext/_C.")
        and lib["sass"] == ["sm_90"]
        and lib["linked_sass"] == []
    )
    doctor = json.loads(prebuild(python, "doctor", "--json").stdout)
    (found,) = doctor["projects"]
    assert (
        found["name"] == "plain_ext"
        and found["modules"] == ["plain_ext._C"]
        and found["problem"] == ""
    )
    assert [c["status"] for c in found["checks"]] == ["ok", "ok"], found[
        "checks"
    ]  # intact; imports
    assert found["checks"][-1]["message"] == "plain_ext._C import (checked in a child process)"
    site = Path(report["target"])
    damaged = site / (lib["file"] + ".damaged")  # a new file: the venv is a hard-linked copy
    damaged.write_bytes((site / lib["file"]).read_bytes()[:-1])
    damaged.replace(site / lib["file"])  # damaged after installing
    assert prebuild(python, "inspect", "plain-ext").returncode == 1
    doctor = prebuild(python, "doctor", "--json")
    (found,) = json.loads(doctor.stdout)["projects"]
    assert doctor.returncode == 1 and found["checks"][0]["status"] == "fail"
    assert found["problem"].startswith(f"{lib['file']}: damaged: "), found["problem"]
    # Next to torch 2.13, pip refuses the wheel instead of the user meeting `undefined symbol`.
    # Its pip sees the wheel and the venv only (not the machine's find-links or indexes), and
    # the outcome is checked, not pip's wording (which changes with what it sees and its version).
    other = fresh_venv()
    before = installed(other)
    refused = subprocess.run(
        [str(other), "-m", "pip", "install", "--no-index", str(plain_wheels[1])],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_pip_env(),
    )
    said = " ".join((refused.stdout + refused.stderr).split())
    assert refused.returncode != 0, said
    assert re.search(r"plain[-_]ext", said) and "torch" in said, said  # who needs what
    assert "2.14" in said and "2.15" in said, said  # the range the wheel was built for
    assert installed(other) == before and before["torch"].startswith("2.13."), before


def test_host_code_gets_one_wheel_for_every_gpu_and_torch_which_installs_and_runs(
    host_code_wheels, cuda_torch_python, fresh_cuda_venv, tmp_path
):
    """A project with no GPU code: CUDA host code (cuda_host_ext) and CPU code (cpu_ext). Asked
    for two archs, each gets one wheel labelled with no arch, which prebuild install picks with
    no GPU here, and which imports and runs. Neither calls anything of torch's (Python's and
    CUDA's C APIs alone): the label names no torch, the project's own torch requirement stays
    unpinned, and the summary says why (test_torch_versions.py runs cuda_host_ext in other
    torch releases). cpu_ext's setup.py turns ninja off as PyG's do: it is built with ninja all
    the same, and says so."""
    python = fresh_cuda_venv()
    built = {}
    for project, label, library in (
        ("cuda_host_ext", "cu130.host", "_C.cpython-311-x86_64-linux-gnu.so"),
        ("cpu_ext", "cpu.host", "_C.so"),  # no_python_abi_suffix=True
    ):
        b = host_code_wheels[project]
        wheel, proc, work, took = b.wheel, b.proc, b.work, b.took
        (done,) = re.findall(r"sm_80: done in (\d+) s", proc.stderr)
        assert int(done) <= took + 1, (done, took)  # its own time, not the machine's uptime
        said = " ".join(proc.stdout.split())
        assert "1 wheel in" in said and "no GPU code" in said, said
        assert "the other planned wheels (sm_90) would be the same" in said, said
        builds = " (its CUDA 13 builds)" if project == "cuda_host_ext" else ""
        assert (
            "its libraries call nothing of torch's (no symbol of its C++ or stable ABI): the "
            "wheel keeps the project's own torch requirement and serves every torch release"
            f"{builds}, not 2.14 alone"
        ) in said, said
        line = next(
            n
            for n, text in enumerate(
                (FIXTURES / "cpu_ext" / "setup.py").read_text().splitlines(), 1
            )
            if "use_ninja=False" in text
        )
        ninja = f"its setup.py turns torch's ninja backend off (setup.py line {line})"
        if project == "cuda_host_ext":
            assert "CUDA host code (it links libcudart.so.13" in said, said
            assert "ninja backend off" not in said + proc.stderr
        else:
            assert ninja in " ".join((proc.stdout + proc.stderr).split())
        # torch writes build.ninja where ninja compiles: both built with it
        assert len(list(work.rglob("build.ninja"))) == 1, sorted(work.rglob("*"))
        assert wheel.name == f"{project}-0.1.0+{label}-cp311-cp311-linux_x86_64.whl"
        # cpu_ext's shared_ptr: built on a machine newer than torch's manylinux_2_28 (glibc 2.32
        # or later, GCC 11 or later), it needs more of glibc than torch does, which is said.
        (torch_lib,) = cuda_torch_python.parent.parent.glob("lib/python*/site-packages/torch/lib")
        floor = floor_note(wheel_runtime(wheel), torch_runtime(torch_lib), "2.14.1+cu130")
        notes = [" ".join(x.split()) for x in proc.stdout.splitlines() if "itself needs" in x]
        assert notes == ([f"note: {floor}"] if floor else []), proc.stdout
        manifest, metadata, libraries = wheel_contents(wheel)
        assert (manifest["sass_archs"], manifest["ptx_archs"]) == ([], [])
        assert (manifest["torch_abi"], manifest["torch_target"]) == ("none", None)
        requires = [x for x in metadata.splitlines() if x.startswith("Requires-Dist:")]
        assert requires == ["Requires-Dist: torch"], requires  # its setup.py's
        assert list(libraries) == [f"{project}/{library}"]
        built[project] = (wheel, manifest)
        key = index_key_of(wheel.name)
        assert key is not None and key.host and key.torch_tag == ""
        chosen = prebuild(python, "install", project, "--from", str(wheel.parent), "--json")
        assert chosen.returncode == 0, chosen.stdout + chosen.stderr  # no GPU here: still fits
        assert json.loads(chosen.stdout)["chosen"]["wheel"] == wheel.name
    assert built["cuda_host_ext"][1]["code"] == "cuda-host"
    assert built["cpu_ext"][1]["code"] == "cpu"
    script = (
        "import cuda_host_ext, cpu_ext, torch\n"
        "count, error = cuda_host_ext.device_count()\n"
        "print(count, error.startswith('cuda'), cpu_ext.add(2, 3), torch.cuda.is_initialized())"
    )
    ran = python_c(python, script, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split("\n")[-2] == "0 True 5 False"  # no GPU here: the runtime says so
    inspected = prebuild(python, "inspect", "cuda-host-ext")
    assert inspected.returncode == 0, inspected.stdout + inspected.stderr
    said = " ".join(inspected.stdout.split())
    assert "for torch of any release (no torch ABI, built with 2.14.1+cu130)" in said, said
    assert "CUDA host code (no GPU code), for every GPU" in said, said
    doctor = json.loads(prebuild(python, "doctor", "--json").stdout)
    checks = {p["name"]: [c["status"] for c in p["checks"]] for p in doctor["projects"]}
    assert checks == {"cuda_host_ext": ["ok", "ok"], "cpu_ext": ["ok", "ok"]}, doctor["projects"]


def test_a_stable_abi_project_gets_one_wheel_for_every_torch_from_its_target(
    stable_ext_wheel, fresh_cuda_venv, fresh_venv, tmp_path
):
    """stable_ext, a setup.py project on the stable ABI alone (every compile targeting torch
    2.10), built against torch 2.14.1: no torch in its label, torch>=2.10 as its pin, said so;
    it runs beside 2.14.1, and next to the CPU torch 2.13 pip installs it and its guard says
    that a CUDA build of torch >= 2.10 is needed (test_torch_versions.py runs it in 2.15.0)."""
    wheel, said = stable_ext_wheel
    said = " ".join(said.split())
    assert wheel.name == "stable_ext-0.1.0+cu130.sm90-cp310-abi3-linux_x86_64.whl"
    assert (
        "its libraries use only PyTorch's stable ABI: the wheel requires torch>=2.10 and "
        "serves every torch from 2.10 on (its CUDA 13 builds), not 2.14 alone"
    ) in said, said
    manifest, metadata, libraries = wheel_contents(wheel)
    assert (manifest["torch_abi"], manifest["torch_target"]) == ("stable", "2.10")
    assert manifest["torch"] == "2.14.1+cu130" and manifest["sass_archs"] == ["sm_90"]
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires == ["Requires-Dist: torch>=2.10"], requires
    assert list(libraries) == ["stable_ext/_C.abi3.so"]
    key = index_key_of(wheel.name)
    assert key is not None and key.torch_tag == "" and key.cuda_tag == "cu130"
    python = fresh_cuda_venv()
    # prebuild install takes it for this torch: its index key names none
    chosen = prebuild(
        python, "install", "stable-ext", "--from", str(wheel.parent), "--arch", "sm_90", "--json"
    )
    assert chosen.returncode == 0, chosen.stdout + chosen.stderr
    assert json.loads(chosen.stdout)["chosen"]["wheel"] == wheel.name
    script = (
        "import torch, stable_ext\n"
        "print(stable_ext.scale(torch.arange(3.0), 2.5).tolist(), torch.cuda.is_initialized())"
    )
    ran = python_c(python, script, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split("\n")[-2] == "[0.0, 2.5, 5.0] False"
    inspected = prebuild(python, "inspect", "stable-ext")
    assert inspected.returncode == 0, inspected.stdout + inspected.stderr
    assert "for torch >= 2.10 (the stable ABI, built with 2.14.1+cu130)" in " ".join(
        inspected.stdout.split()
    )
    doctor = json.loads(prebuild(python, "doctor", "--json").stdout)
    (found,) = doctor["projects"]
    assert [c["status"] for c in found["checks"]] == ["ok", "ok"], found["checks"]
    # A classic wheel tied to torch 2.14 is refused by pip next to torch 2.13 (the plain test
    # above); this one installs, and its guard says what it needs.
    other = fresh_venv()
    done = subprocess.run(
        [str(other), "-m", "pip", "install", "--quiet", "--no-index", str(wheel)],
        capture_output=True, text=True, timeout=600, env=clean_pip_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    refused = subprocess.run(
        [str(other), "-c", "import stable_ext"], capture_output=True, text=True, timeout=300
    )
    error = " ".join(refused.stderr.split())
    assert refused.returncode != 0 and "WheelMisfitError" in error, error
    assert "torch 2.13.0+cpu is a CPU build" in error, error
    assert "pip install 'torch>=2.10' --index-url https://download.pytorch.org/whl/cu130" in error


def test_a_ctypes_library_gets_one_wheel_for_every_python_and_torch(
    cuda_torch_python, fresh_cuda_venv, fresh_venv, tmp_path
):
    """ctypes_ext, a CUDA library loaded by ctypes as bitsandbytes' is (no Python C API, nothing
    of torch's, though built as a CUDAExtension): tagged py310-none (pip and uv take it for
    every Python from 3.10 on), labelled with no torch and not pinned, each said; its C++17 code,
    which C++20 refuses, compiled as asked, said; it runs beside torch 2.14.1, and beside the
    CPU torch 2.13 pip installs it and its guard says which torch to install."""
    out = tmp_path / "dist"
    proc = prebuild_wheel(
        cuda_torch_python, "--arch", "sm_90", str(FIXTURES / "ctypes_ext"), "--out", str(out)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    (wheel,) = out.glob("*.whl")
    assert wheel.name == "ctypes_ext-0.1.0+cu130.sm90-py310-none-linux_x86_64.whl"
    said = " ".join(proc.stdout.split())
    assert (
        "its libraries use nothing of Python's C API (none is an extension module): tagged "
        "py310-none, for every Python from 3.10 on, not cp311 alone"
    ) in said, said
    assert "its libraries call nothing of torch's" in said, said
    # its C++17 code fails in the C++20 the shim raises it to: compiled as asked
    assert (
        "Compiled as the project asks, not in C++20: nvcc's -std=c++17 (1 call), whose code "
        "does not compile in C++20"
    ) in said, said
    manifest, metadata, libraries = wheel_contents(wheel)  # RECORD checked
    (compiled,) = [c for c in manifest["nvcc_calls"] if "-c" in c["given"]]
    assert "-std=c++17" in compiled["run"] and "-std=c++20" not in compiled["run"]
    assert list(libraries) == ["ctypes_ext/_kernels.so"]
    assert manifest["python_tag"] == "py310-none-linux_x86_64"
    assert (manifest["torch_abi"], manifest["sass_archs"]) == ("none", ["sm_90"])
    requires = [x for x in metadata.splitlines() if x.startswith("Requires-Dist:")]
    assert requires == ["Requires-Dist: torch"], requires
    with zipfile.ZipFile(wheel) as zf:
        info = zf.read("ctypes_ext-0.1.0+cu130.sm90.dist-info/WHEEL").decode()
    assert [x for x in info.splitlines() if x.startswith("Tag:")] == [
        "Tag: py310-none-linux_x86_64"
    ]
    python = fresh_cuda_venv()

    def pip_takes(version: str) -> bool:  # pip's own tag check for another Python
        return (
            subprocess.run(
                [str(python), "-m", "pip", "install", "--dry-run", "--quiet", "--no-index",
                 "--no-deps", "--only-binary=:all:", "--python-version", version,
                 "--target", str(tmp_path / "target"), str(wheel)],
                capture_output=True, text=True, timeout=300, env=clean_pip_env(),
            ).returncode
            == 0
        )  # fmt: skip

    assert [pip_takes(v) for v in ("3.9", "3.10", "3.13", "3.14")] == [False, True, True, True]

    def uv_takes(version: str) -> bool:  # and uv's (bootstrap's, in .venv)
        return (
            subprocess.run(
                [str(ROOT / ".venv" / "bin" / "uv"), "pip", "install", "--dry-run", "--no-deps",
                 "--no-index", "--find-links", str(out), "--python-version", version,
                 "--python", str(python), "--target", str(tmp_path / "uv-target"), "ctypes_ext"],
                capture_output=True, text=True, timeout=300, env={**os.environ, "UV_NO_CACHE": "1"},
            ).returncode
            == 0
        )  # fmt: skip

    assert [uv_takes(v) for v in ("3.9", "3.10", "3.13", "3.14")] == [False, True, True, True]
    chosen = prebuild(
        python, "install", "ctypes-ext", "--from", str(out), "--arch", "sm_90", "--json"
    )
    assert chosen.returncode == 0, chosen.stdout + chosen.stderr
    assert json.loads(chosen.stdout)["chosen"]["wheel"] == wheel.name
    ran = python_c(
        python,
        "import ctypes, ctypes_ext, torch\n"
        "ctypes_ext._lib.ctypes_ext_name.restype = ctypes.c_char_p\n"
        "print(ctypes_ext.add(2, 3), ctypes_ext._lib.ctypes_ext_name().decode(),"
        " torch.cuda.is_initialized())",
        tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split("\n")[-2] == "5 ctypes_ext False"
    doctor = json.loads(prebuild(python, "doctor", "--json").stdout)
    (found,) = doctor["projects"]
    assert {c["status"] for c in found["checks"]} == {"ok"}, found["checks"]
    assert "for torch of any release (no torch ABI" in found["checks"][0]["message"]
    other = fresh_venv()
    done = subprocess.run(
        [str(other), "-m", "pip", "install", "--quiet", "--no-index", str(wheel)],
        capture_output=True, text=True, timeout=600, env=clean_pip_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr  # no torch pin: beside torch 2.13 too
    refused = python_c(other, "import ctypes_ext", tmp_path)
    error = " ".join(refused.stderr.split())
    assert refused.returncode != 0 and "WheelMisfitError" in error, error
    assert "torch 2.13.0+cpu is a CPU build" in error, error
    assert "pip install 'torch' --index-url https://download.pytorch.org/whl/cu130" in error


def test_hard_coded_gencode_is_overridden_and_other_nvcc_flags_kept(
    cuda_torch_python, fresh_cuda_venv, tmp_path
):
    out, work = tmp_path / "dist", tmp_path / "work"
    proc = prebuild_wheel(
        cuda_torch_python,
        "--arch",
        "sm_80,sm_90",
        str(FIXTURES / "gencode_ext"),
        "--out",
        str(out),
        "--build-dir",
        str(work),
        # nvcc's own variable: part of each call, its arch rewritten as the command's
        env={"NVCC_APPEND_FLAGS": "-arch=sm_75 -lineinfo"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    summary = " ".join(proc.stdout.split())
    assert (
        "the wheel holds gencode_ext_cuda and none of the Python beside its setup.py that "
        "imports it (gencode_answer.py)" in summary
    ), summary
    wheels = sorted(out.glob("*.whl"))
    assert [w.name for w in wheels] == [
        f"gencode_ext-0.2.0+lab1.pt214.cu130.{sm}-cp311-cp311-linux_x86_64.whl"
        for sm in ("sm80", "sm90")
    ]
    for wheel, sm in zip(wheels, ("sm_80", "sm_90")):
        manifest, _, libraries = wheel_contents(wheel)
        (name,) = libraries
        assert name.startswith("gencode_ext_cuda.")  # a top-level module
        code = library_code(libraries[name], name)
        assert all_sass(code) == [sm] and code.ptx == ()
        (call,) = [
            c for c in manifest["nvcc_calls"] if any(a.endswith("kernel.cu") for a in c["given"])
        ]
        assert "-gencode=arch=compute_75,code=sm_75" in call["given"]
        assert "-gencode=arch=compute_75,code=sm_75" not in call["run"]
        assert (
            call["given"][-2:] == ["-arch=sm_75", "-lineinfo"] and "-arch=sm_75" not in call["run"]
        )
        assert "-lineinfo" in call["run"]
        # -march=native is left out, for nvcc's host compiler and for the host compiler
        assert "-Xcompiler=-march=native" in call["given"]
        assert not any("native" in a for a in call["run"])
        assert {
            "--use_fast_math",
            "--maxrregcount=40",
            f"-gencode=arch=compute_{sm[3:]},code={sm}",
        } <= set(call["run"])
        # torch 2.14's headers need C++20: the project's -std=c++17 is raised, and recorded.
        assert (
            "-std=c++17" in call["given"]
            and "-std=c++17" not in call["run"]
            and "-std=c++20" in call["run"]
        )
        # ... and the host compiler's -std=c++17 too (module.cpp includes a torch header that
        # compiles in C++20 only); sm_90 reuses sm_80's host object, made by that raised call.
        assert manifest["cxx_standard"] == {
            "needed": "c++20",
            "raised": {"c++17": 1},
            "raised_host": {"c++17": 1},
        }
    # Its bdist_wheel would fetch a prebuilt wheel (failing offline) unless told to compile.
    forced = [line for line in proc.stderr.splitlines() if "GENCODE_EXT_FORCE_BUILD" in line]
    assert [" ".join(line.split()) for line in forced] == [
        f"{sm}: set GENCODE_EXT_FORCE_BUILD=TRUE: the project's setup.py would otherwise download "
        "a prebuilt wheel of its own instead of compiling"
        for sm in ("sm_80", "sm_90")
    ], proc.stderr[-3000:]
    # the summary says it once for both wheels (it changes what was compiled)
    notes = [" ".join(line.split()) for line in proc.stdout.splitlines() if "headers need" in line]
    assert notes == [
        "note (every wheel): The project asks nvcc for -std=c++17 (1 of its 1 calls) and the host "
        "compiler for -std=c++17 (1 of its 1 calls); torch 2.14.1+cu130's headers need C++20: "
        "raised to it (recorded in prebuild.json)."
    ], proc.stdout
    # the host compiler's calls as the shim logged them in the wheel's workspace
    logged = (work / "cu130.sm80" / "cxx-calls.jsonl").read_text().splitlines()
    host = [json.loads(line) for line in logged if "-march=native" in line]
    assert host and not any("native" in a for c in host for a in c["run"])
    asked = [" ".join(line.split()) for line in proc.stdout.splitlines() if "itself" in line]
    assert asked == [
        "note: The project asks nvcc for sm_75 itself (1 of its 1 calls): compiled for this "
        f"wheel's {sm} instead (prebuild.json has each call as given and as run)."
        for sm in ("sm_80", "sm_90")
    ], proc.stdout
    native = [
        " ".join(line.split()) for line in proc.stdout.splitlines() if "-march=native" in line
    ]
    assert native == [
        "note (every wheel): The project asks for -march=native (2 compiler calls): left out, "
        "since the wheel would run only on CPUs with every instruction set of this machine's "
        "(prebuild.json has each nvcc call as given and as run). An explicit target "
        "(-march=x86-64-v3) is kept."
    ], proc.stdout
    # Its setup.py builds CUDA only where torch.cuda.is_available(): with no GPU here, torch.cuda
    # answered (in its build only) as a GPU of each wheel's arch would.
    answered = [" ".join(line.split()) for line in proc.stderr.splitlines() if "answers as" in line]
    assert answered == [
        f"{sm}: No GPU is visible here, and its setup.py asks "
        "torch.cuda.is_available() (setup.py line 39): in its build, torch.cuda answers as a GPU "
        f"of compute capability {cap} would (is_available, device_count, get_device_capability, "
        "is_bf16_supported, current_device, get_device_properties (major, minor, name), "
        "get_device_name), and so does nvidia-smi (--query-gpu=compute_cap,name,count,index with "
        "--format=csv, and -L)"
        for sm, cap in (("sm_80", "8.0"), ("sm_90", "9.0"))
    ], proc.stderr[-3000:]
    for sm, cap in (("sm80", "8.0"), ("sm90", "9.0")):  # and nvidia-smi, on its build's PATH
        assert (
            f"gencode_ext: nvidia-smi says {cap}"
            in (work / f"cu130.{sm}" / "build.log").read_text()
        )
    # It links -lcuda: where no driver is installed (here), against the shim toolkit's stub.
    assert "-lcuda" in (work / "cu130.sm90" / "build.log").read_text()
    assert (work / "cuda-shim" / "lib64" / "libcuda.so").exists()
    # nvcc is given the same command for both (torch ignores TORCH_CUDA_ARCH_LIST when a
    # project names its archs): the kernel is compiled again because its object was deleted.
    assert compiled(work / "cu130.sm90" / "build.log") == ["kernel.cu"]
    wheel = wheels[1]
    python = fresh_cuda_venv()
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-index", str(wheel)],
        check=True,
        timeout=600,
        env=clean_pip_env(),
    )
    ran = subprocess.run(
        [str(python), "-c", "import gencode_ext; print(gencode_ext.ANSWER)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert ran.returncode == 0 and ran.stdout.strip() == "42", ran.stderr


def test_relocatable_device_code_is_device_linked_for_the_arch_asked(cuda_torch_python, tmp_path):
    """rdc_ext (dlink=True, -rdc=true): its device link, which torch gives -dlto, runs where
    nvlink finds libnvvm, for exactly the arch asked; the wheel holds that arch's SASS. Its
    code imports the extension from its package (a build in place, CenterPoint's): said."""
    out = tmp_path / "dist"
    proc = prebuild_wheel(
        cuda_torch_python, "--arch", "sm_90", str(FIXTURES / "rdc_ext"), "--out", str(out)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    summary = " ".join(proc.stdout.split())
    assert (
        "the project's code imports rdc_ext_cuda from inside its package "
        "(`rdc_ops.py: from . import rdc_ext_cuda`)" in summary
    ), summary
    (wheel,) = out.glob("*.whl")
    manifest, _, libraries = wheel_contents(wheel)
    (name,) = libraries
    assert all_sass(library_code(libraries[name], name)) == ["sm_90"]
    (link,) = [c for c in manifest["nvcc_calls"] if "-dlink" in c["given"]]
    assert "-dlto" in link["run"] and "-gencode=arch=compute_90,code=sm_90" in link["run"]
    # the calls name the build's folders, not the build machine's paths
    args = [a for c in manifest["nvcc_calls"] for a in (*c["given"], *c["run"])]
    assert any(a.startswith("<work>/source/") and a.endswith("/csrc/kernel.cu") for a in args)
    assert any(a.startswith("-I<venv>/") for a in args), args
    assert not [a for a in args if "prebuild-wheel-" in a or str(cuda_torch_python.parent) in a]


def test_a_library_needing_a_function_nobody_defines_is_refused(cuda_torch_python, tmp_path):
    """undefined_ext links (a shared library may leave names to others) but cannot load: its
    scale_by_two is in a source its setup.py leaves out. Tried beside torch, it is refused,
    naming the library and the function; no wheel is written."""
    out = tmp_path / "dist"
    proc = prebuild_wheel(
        cuda_torch_python, "--arch", "sm_90", str(FIXTURES / "undefined_ext"), "--out", str(out)
    )
    assert proc.returncode != 0
    said = " ".join(proc.stderr.split())
    assert "undefined_ext-0.1.0-cp311-cp311-linux_x86_64.whl would not load: " in said, said
    assert "(undefined_ext/_native.cpython-311-x86_64-linux-gnu.so: `scale_by_two`)" in said
    assert "a source its setup.py leaves out of the extension" in said
    assert not list(out.glob("*.whl"))


def test_a_kernel_asking_for_sm_90a_keeps_it_and_the_manifest_says_so(cuda_torch_python, tmp_path):
    """hopper_ext's wgmma kernel asks for sm_90a itself (its flags from the GPU's capability,
    asked outside setup.py); asked for sm_90, prebuild compiled it for sm_90, which ptxas
    refused. Its SASS is sm_90a now, and the manifest and the wheel's name (its index key)
    record that: an index of sm_90 wheels would promise every 9.x GPU."""
    out = tmp_path / "dist"
    proc = prebuild_wheel(
        cuda_torch_python, "--arch", "sm_90", str(FIXTURES / "hopper_ext"), "--out", str(out)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    # Its flags ask the GPU's capability outside setup.py, which fails with no GPU visible: built
    # again with torch.cuda answering for one (colossalai 0.5.0's kernels).
    said = " ".join(proc.stderr.split())
    assert "sm_90: its build failed with no GPU visible (RuntimeError: " in said, said[-3000:]
    assert (
        "built again with torch.cuda and nvidia-smi answering as a GPU of compute capability 9.0"
        in said
    )
    (wheel,) = out.glob("*.whl")
    assert ".sm90a-" in wheel.name and "sm_90a" in proc.stdout, proc.stdout
    assert index_key_of(wheel.name).name == "cu130-sm90a"  # Python's C API alone: no torch
    manifest, _, libraries = wheel_contents(wheel)
    (name,) = libraries
    assert all_sass(library_code(libraries[name], name)) == ["sm_90a"]
    assert manifest["sass_archs"] == ["sm_90a"]


def test_a_cmake_project_finding_torch_builds_on_a_toolkit_of_nvcc_alone(
    cuda_torch_python, tmp_path
):
    """cmake_torch_ext (scikit-build-core, find_package(Torch) with no prefix of its own: the
    build's CMAKE_PREFIX_PATH names torch's): CMake takes the real toolkit's include folder
    from nvcc, where torch's ATen/cuda headers missed cusparse.h; the build's CPATH ends with
    the shim's. It sets no C++ standard: CMake asks nvcc for C++17 and the host compiler for
    none (its default, C++17); both include torch's headers, and are given C++20, said. The
    wheel holds sm_90 SASS and its op runs beside torch."""
    out = tmp_path / "dist"
    proc = prebuild_wheel(
        cuda_torch_python, "--arch", "sm_90", str(FIXTURES / "cmake_torch_ext"), "--out", str(out)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    summary = " ".join(proc.stdout.split())
    assert "the host compiler for no standard (its default, C++17) (1 of its" in summary, summary
    (wheel,) = out.glob("*.whl")
    assert wheel.name.startswith("cmake_torch_ext-0.1.0+pt214.cu130.sm90-"), wheel.name
    _, _, libraries = wheel_contents(wheel)
    (name,) = libraries
    assert all_sass(library_code(libraries[name], name)) == ["sm_90"]
    with WheelFile(wheel) as wf:
        wf.extractall(tmp_path / "unpacked")
    ran = subprocess.run(
        [str(cuda_torch_python), "-c",
         "import torch, cmake_torch_ext; print(torch.ops.cmake_torch_ext.add_one(torch.zeros(2)).tolist())"],
        cwd=tmp_path / "unpacked", capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0 and ran.stdout.strip() == "[1.0, 1.0]", ran.stderr


def test_a_project_that_does_not_compile_shows_the_error_and_leaves_no_wheel(
    cuda_torch_python, tmp_path
):
    out = tmp_path / "dist"
    for attempt in range(2):  # the second run meets no lock or leftover from the first
        proc = prebuild_wheel(
            cuda_torch_python,
            "--arch",
            "sm_90",
            str(FIXTURES / "broken_ext"),
            "--out",
            str(out),
            "--build-dir",
            str(tmp_path / "work"),
        )
        assert proc.returncode == 1, (attempt, proc.stdout + proc.stderr)
        assert "undeclared_in_this_kernel" in proc.stderr and "build.log" in proc.stderr, (
            proc.stderr[-3000:]
        )
        assert "Traceback" not in proc.stderr
        # Its texture reference is a known break of CUDA 12: named, with what to do.
        assert "meeting a change of torch, CUDA or the C++ standard library" in proc.stderr, (
            proc.stderr[-3000:]
        )
        assert "texture references (texture<...>, cudaBindTexture), removed in CUDA 12" in (
            proc.stderr
        )
        # Its setup.py asks the GPU's memory once torch.cuda says a GPU is there: with torch
        # answering for one (no GPU here; the answer makes up no memory), it failed before
        # compiling, so it was built again with torch's own answers, and the compiler's error is
        # what is shown.
        said = " ".join(proc.stderr.split())
        assert (
            "sm_90: its setup.py failed with torch.cuda answering for a GPU (AttributeError: "
            "torch.cuda.get_device_properties().total_memory: no GPU is visible"
            in said
            and "built again with torch's own answers" in said
        ), said[-3000:]
        assert not out.exists()  # made for the build, removed with its failure


def test_where_ninja_turned_back_on_fails_on_its_own_the_wheel_is_built_again_without_it(
    cuda_torch_python, tmp_path
):
    """twin_ext turns ninja off, and two of its sources make one object: ninja, turned back on,
    refuses that, so the wheel is built again as its setup.py says. That build fails on the
    project's own mistake (the linker gets the object twice), and the error shown is that
    build's, not ninja's from the first."""
    work = tmp_path / "work"
    proc = prebuild_wheel(
        cuda_torch_python,
        *("--arch", "sm_90", str(FIXTURES / "twin_ext")),
        *("--out", str(tmp_path / "dist"), "--build-dir", str(work)),
    )
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 1, said[-3000:]
    assert "its setup.py turns torch's ninja backend off (setup.py line 13)" in said, said
    assert (
        "sm_90: ninja failed on the project's build (ninja: error: build.ninja" in said
        and "multiple rules generate" in said
        and "built again without it, as its setup.py says" in said
    ), said[-3000:]
    error = said[said.index("error: the project's build failed") :]
    assert "multiple definition of `PyInit_twin_ext'" in error, error
    assert "ninja: error" not in error, error
    (log,) = work.glob("*/build.log")
    first, again = log.read_text().split("==== prebuild: ninja failed")
    _, second = again.split("\n", 1)  # the marker's line, then the second build's output
    assert "multiple rules generate" in first and "build.ninja" not in second


@pytest.mark.in_background
def test_a_project_that_compiles_at_first_use_gets_those_compiles_in_its_wheel(
    fresh_cuda_venv, tmp_path
):
    """jit_ext compiles when first used: a library of ops (CUDA) at import, a Python module
    (C++) at its first op, as KNN_CUDA and nvdiffrast 0.3 do. Its wheel holds both, made in
    the build (with the archs asked), and its load() calls get them at run time: the op runs,
    and nothing is compiled or written in the user's extensions directory, at build time or
    at run time. Its setup.py imports the package (KNN_CUDA's does), so that compile also ran
    in the build, into the workspace. A class method needing an argument (ColBERT's shape)
    is run by the code given with --first-use, its library served too. Also quiet: in a venv
    without numpy (torch warns at every import then) and with a setup.py that warns,
    prebuild's output holds neither warning: the build's chatter goes to its log."""
    python = fresh_cuda_venv()
    subprocess.run(
        [str(python), "-m", "pip", "uninstall", "--quiet", "--yes", "numpy"],
        check=True,
        timeout=300,
    )
    out, work, user_cache = tmp_path / "dist", tmp_path / "work", tmp_path / "torch_extensions"
    proc = prebuild_wheel(
        python,
        *("--arch", "sm_90", str(FIXTURES / "jit_ext"), "--out", str(out)),
        *("--build-dir", str(work)),
        *("--first-use", "from jit_ext import Codec\nCodec.load_ops(False)"),
        env={"TORCH_EXTENSIONS_DIR": str(user_cache)},
    )
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, said
    assert "the project compiles its code when first used" in said, said
    assert (
        "by `import jit_ext`, `jit_ext._cpu_ops()`, `from jit_ext import Codec; "
        "Codec.load_ops(False)`: 'jit_ext_ops' (jit_ext/__init__.py:11)" in said
    ), said
    assert "'jit_ext_codec' (jit_ext/__init__.py:42), in the wheel" in said, said
    assert "'jit_ext_cpu' (jit_ext/__init__.py:26)" in said and "Not made" not in said
    # its module's source, written for torch 1.x, mended in the wheel's copy it compiled from
    assert "`x.scalar_type()` (1 place in jit_ext/cpu_ops.cpp)" in said, said
    assert "NumPy" not in said and "nobody asked for" not in said and "Warning" not in said, said
    assert not user_cache.exists()
    assert list(work.glob("*/torch-extensions/jit_ext_ops/jit_ext_ops.so")), tree_snapshot(work)
    (wheel,) = out.glob("*.whl")
    tag = sysconfig.get_config_var("py_version_nodot")
    assert wheel.name == f"jit_ext-0.1.0+pt214.cu130.sm90-cp{tag}-cp{tag}-linux_x86_64.whl"
    manifest, _, files = wheel_contents(wheel)
    assert {
        "_prebuild_guard_jit_ext/jit/jit_ext_ops.so",
        "_prebuild_guard_jit_ext/jit/jit_ext_cpu.so",
        "_prebuild_guard_jit_ext/jit/jit_ext_codec.so",
    } <= set(files)
    assert manifest["sass_archs"] == ["sm_90"]
    assert manifest["source_changes"] == ["jit_ext/cpu_ops.cpp:7: x.type() -> x.scalar_type()"]
    with zipfile.ZipFile(wheel) as zf:  # the project's own file, as it is
        assert b"x.type()" in zf.read("jit_ext/cpu_ops.cpp")
    # the module's kernel too, for the arch asked where its load() emptied the arch list
    name = "_prebuild_guard_jit_ext/jit/jit_ext_cpu.so"
    code = library_code(files[name], name)
    assert all_sass(code) == ["sm_90"], code
    installed_cache = tmp_path / "run_extensions"
    # installed in another environment than the build's: its paths (torch's headers, which
    # the project passes) are another folder's
    user = fresh_cuda_venv("venv-user")
    subprocess.run(
        [str(user), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
        check=True,
        timeout=300,
    )
    run = subprocess.run(
        [
            str(user),
            "-c",
            "import torch, jit_ext; print(jit_ext.add_one(torch.zeros(2)).tolist()); "
            "print(jit_ext.Codec.load_ops(False))",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TORCH_EXTENSIONS_DIR": str(installed_cache), "PREBUILD_STRICT": "1"},
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    added, codec = run.stdout.strip().splitlines()
    assert added == "[1.0, 1.0]" and codec.endswith("/_prebuild_guard_jit_ext/jit/jit_ext_codec.so")
    assert not installed_cache.exists()

    # Its first-op kernel broken: the compiler's error, as a build's, and no wheel. Built where
    # the wheel above is installed: its guard, which serves those names, lets this build compile
    broken = tmp_path / "broken"
    shutil.copytree(FIXTURES / "jit_ext", broken)
    (broken / "jit_ext" / "kernel.cu").write_text("__global__ void k() { undefined_thing(); }\n")
    cpu_ops = broken / "jit_ext" / "cpu_ops.cpp"  # nothing to mend: one run
    cpu_ops.write_text(cpu_ops.read_text().replace("x.type()", "x.scalar_type()"))
    proc = prebuild_wheel(
        python,
        *("--arch", "sm_90", str(broken), "--out", str(tmp_path / "broken-dist")),
        *("--build-dir", str(tmp_path / "broken-work")),
    )
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 1, said
    assert (
        "its compile of 'jit_ext_cpu' when first used, run ahead of time by "
        "`jit_ext._cpu_ops()`, failed (full log:" in said
    ), said
    assert 'jit_ext/kernel.cu(1): error: identifier "undefined_thing" is undefined' in said, said
    assert not (tmp_path / "broken-dist").exists()

    # The kernel mended, the same command goes on from what that run compiled: the library of
    # ops it made at import is not compiled again.
    kept = {p: p.stat().st_mtime_ns for p in (tmp_path / "broken-work").glob("first-use/*/**/*.o")}
    assert any("jit_ext_ops" in str(p) for p in kept), tree_snapshot(tmp_path / "broken-work")
    shutil.copyfile(
        FIXTURES / "jit_ext" / "jit_ext" / "kernel.cu", broken / "jit_ext" / "kernel.cu"
    )
    proc = prebuild_wheel(
        python,
        *("--arch", "sm_90", str(broken), "--out", str(tmp_path / "broken-dist")),
        *("--build-dir", str(tmp_path / "broken-work")),
    )
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, said
    assert "what an earlier run compiled of them in" in said and "was kept" in said, said
    assert all(p.stat().st_mtime_ns == kept[p] for p in kept if "jit_ext_ops" in str(p)), kept
    assert "'jit_ext_cpu' (jit_ext/__init__.py:26), in the wheel" in said, said
    # without --first-use, the class method's compile is said with the call to give
    assert (
        "Not made, or not usable: the compile at jit_ext/__init__.py:42 runs only inside the method "
        "`Codec.load_ops`, which needs arguments (give the call its users' code makes, with "
        "their arguments, and the build makes it: `--first-use 'from jit_ext import Codec; "
        "Codec.load_ops(...)'`)" in said
    ), said


# A module of CPU code calling one function of torch's (TORCH_CHECK with a message built at run
# time: c10::detail::torchCheckFail taking a std::string), through c10's header alone, which
# compiles in seconds; its setup.py asks for the pre-C++11 ABI, as VPTQ's CMake does.
OLD_ABI_SETUP = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="old_abi",
    version="0.1.0",
    ext_modules=[
        CppExtension(
            "old_abi", ["check.cpp"], extra_compile_args=["-D_GLIBCXX_USE_CXX11_ABI=0"]
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
"""
OLD_ABI_SOURCE = """\
#include <Python.h>
#include <c10/util/Exception.h>

static PyObject* check(PyObject*, PyObject* args) {
  long n = 0;
  if (!PyArg_ParseTuple(args, "l", &n)) return nullptr;
  TORCH_CHECK(n >= 0, "expected a count, got ", n);
  return PyLong_FromLong(n);
}

static PyMethodDef methods[] = {{"check", check, METH_VARARGS, ""}, {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "old_abi", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_old_abi() { return PyModule_Create(&module); }
"""


def test_the_pre_cxx11_abi_is_torch_s_and_a_wheel_that_would_not_load_is_refused(
    fresh_cuda_venv, tmp_path
):
    """A build asking for libstdc++'s pre-C++11 ABI would make a library needing a function of
    torch's that torch 2.14 (built with the C++11 ABI) does not export, under another name:
    its calls of torch's headers get torch's ABI, which is said, and the wheel loads and runs.
    A library calling a function of torch's namespaces that torch does not export (an internal
    of at::native) would fail to import with `undefined symbol`: refused, naming it."""
    python = fresh_cuda_venv()
    project = tmp_path / "old_abi"
    project.mkdir()
    (project / "setup.py").write_text(OLD_ABI_SETUP)
    (project / "check.cpp").write_text(OLD_ABI_SOURCE)
    out = tmp_path / "dist"
    # a --first-use where the project's own build made its library: run, and said to make none
    code = ("--first-use", "import old_abi")
    proc = prebuild_wheel(python, "--arch", "sm_90", str(project), "--out", str(out), *code)
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, said
    assert (
        "--first-use made nothing: `import old_abi` (--first-use) ran and compiled nothing"
    ) in said, said
    assert (
        "The project asks for libstdc++'s pre-C++11 ABI (-D_GLIBCXX_USE_CXX11_ABI=0, 1 of its 1 "
        "compiler calls); torch 2.14.1+cu130 is built with the C++11 ABI: compiled with it"
    ) in said, said
    (wheel,) = out.glob("*.whl")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
        check=True,
        timeout=300,
    )
    ran = python_c(python, "import torch, old_abi; print(old_abi.check(3))", tmp_path)
    assert ran.returncode == 0 and ran.stdout.split()[-1] == "3", ran.stderr

    internal = tmp_path / "internal"
    shutil.copytree(project, internal)
    (internal / "setup.py").write_text(OLD_ABI_SETUP.replace('"old_abi"', '"internal"'))
    (internal / "check.cpp").write_text(
        OLD_ABI_SOURCE.replace("old_abi", "internal")
        .replace(
            "#include <c10/util/Exception.h>\n",
            "#include <c10/util/Exception.h>\n\nnamespace at::native {\nlong not_exported(long);\n}\n",
        )
        .replace("PyLong_FromLong(n)", "PyLong_FromLong(at::native::not_exported(n))")
    )
    proc = prebuild_wheel(python, "--arch", "sm_90", str(internal), "--out", str(out))
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 1, said
    assert re.search(
        r"internal-0\.1\.0-cp\d+-cp\d+-linux_x86_64\.whl would not load: its libraries need 1 "
        r"function of torch 2\.14\.1\+cu130's that torch's libraries do not export \(internal"
        r"\.cpython-[^:]+\.so: `at::native::not_exported\(long\)`\), so importing one fails "
        r"with `undefined symbol: _ZN2at6native12not_exportedEl`\. They are functions torch "
        r"removed or keeps internal",
        said,
    ), said
    assert [w.name for w in out.glob("*.whl")] == [wheel.name]


def test_a_project_whose_build_installs_into_the_environment_is_told_so(fresh_cuda_venv, tmp_path):
    """hqq 0.2.8's setup.py installs its CUDA extension itself (`python setup_cuda.py install`
    from its egg_info command): its wheel holds no library, and the build environment changed.
    The refusal says what was installed where, and how to remove it, not "pure Python"."""
    python = fresh_cuda_venv()
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    out = tmp_path / "dist"
    fixture = str(FIXTURES / "self_install_ext")
    proc = prebuild_wheel(python, "--arch", "sm_90", fixture, "--out", str(out))
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 1, said
    assert "holds no compiled library: the project's build installed into this environment" in said
    assert "self_installed_part.py" in said and f"in {site}" in said, said
    assert "pip uninstall self_installed_part removes them here" in said, said
    assert "pure Python" not in said and not out.exists()
    assert (Path(site) / "self_installed_part.py").is_file()  # what the user is told of


def test_a_setup_py_reading_its_command_line_gets_the_options_given_with_c(
    cuda_torch_python, tmp_path
):
    """MinkowskiEngine 0.5.4 reads --blas=... from its command line, and says so: without it,
    the error shows how to give it through prebuild (-C, pip's --config-settings); with it, the
    wheel is built and its library loads."""
    out = tmp_path / "dist"
    fixture = str(FIXTURES / "argv_ext")
    proc = prebuild_wheel(cuda_torch_python, "--arch", "sm_90", fixture, "--out", str(out))
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 1 and not out.exists(), said
    assert "argv_ext: no --with-native given" in said, said
    command = f"prebuild wheel --arch sm_90 {fixture} -C--global-option=--with-native"
    assert "asks for --with-native on its command line" in said and command in said, said
    option = "-C--global-option=--with-native"
    proc = prebuild_wheel(cuda_torch_python, "--arch", "sm_90", option, fixture, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("argv_ext-0.1.0+*.whl")
    with zipfile.ZipFile(wheel) as built:
        assert any(n.startswith("argv_ext/_native") for n in built.namelist()), built.namelist()


def test_a_setup_py_building_its_extension_only_when_asked_on_its_command_line_is_told_how(
    cuda_torch_python, tmp_path
):
    """Uni-Core builds its CUDA extensions only with --enable-cuda-ext on its setup.py's
    command line, and builds a pure-Python wheel without: the refusal names the option, its
    line and the prebuild command that gives it, which builds the wheel."""
    out = tmp_path / "dist"
    fixture = str(FIXTURES / "optin_ext")
    proc = prebuild_wheel(cuda_torch_python, "--arch", "sm_90", fixture, "--out", str(out))
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 1 and not out.exists(), said
    assert "holds no compiled library" in said, said
    assert "looks for --with-native-ext (line 10) on its command line" in said, said
    command = f"prebuild wheel --arch sm_90 {fixture} -C--global-option=--with-native-ext"
    assert command in said, said
    option = "-C--global-option=--with-native-ext"
    proc = prebuild_wheel(cuda_torch_python, "--arch", "sm_90", fixture, option, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("optin_ext-0.1.0+*.whl")
    with zipfile.ZipFile(wheel) as built:
        assert any(n.startswith("optin_ext/_native") for n in built.namelist()), built.namelist()


def test_a_known_system_header_the_machine_lacks_stops_the_build_before_compiling(
    cuda_torch_python, tmp_path
):
    """torchsparse 385f5ce compiled for 6 minutes before its hashmap_cpu.hpp met its missing
    google/dense_hash_map. The fixture's header includes a Boost header no machine has: the
    build stops before compiling (with torch.cuda answering, not built again without it),
    naming it, where it is included and what to install; with the header on CPATH it builds.
    A header that is there but does not compile fails the build with the compiler's words. A
    library of the machine's that it links is said and recorded (the guard names it where it
    is missing: tests/runtime/test_classic_guard.py)."""
    out, work = tmp_path / "dist", tmp_path / "work"
    fixture = str(FIXTURES / "system_header_ext")
    args = ("--arch", "sm_90", fixture, "--out", str(out), "--build-dir", str(work))
    proc = prebuild_wheel(cuda_torch_python, *args)
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 1 and not out.exists(), said
    assert (
        "prebuild: system_header_ext/include/native.h:4: <boost/prebuild_fixture_absent.hpp> "
        "is in no include directory of the build" in said
    ), said
    assert "Eigen" not in said  # included only #ifdef SYSTEM_HEADER_EXT_WITH_EIGEN
    assert "of Boost (Debian and Ubuntu: apt install libboost-dev" in said, said
    assert "built again" not in said and "[1/" not in said, said
    build_log = work / "cu130.sm90" / "build.log"
    compile_line = "-c system_header_ext/native.c -o"  # setuptools prints it as it compiles
    assert compile_line not in build_log.read_text()
    system = tmp_path / "system"
    (system / "boost").mkdir(parents=True)
    header = system / "boost" / "prebuild_fixture_absent.hpp"
    cpath = ":".join(p for p in (str(system), os.environ.get("CPATH", "")) if p)
    # found, but it does not compile: gcc's error is the one shown (gcc's compiles are in no
    # shim's record: the build, which did compile, was once built again without the answer,
    # and the error became "builds for a GPU only")
    header.write_text('#error "the fixture header, broken"\n')
    proc = prebuild_wheel(cuda_torch_python, *args, env={"CPATH": cpath})
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 1 and "the fixture header, broken" in said, said
    assert "built again" not in said and "builds for a GPU only" not in said, said
    header.write_text("#define PREBUILD_FIXTURE_VALUE 42\n")
    # linking a library of the machine's that nothing installed with the wheel provides
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "fixture.c").write_text("int prebuild_fixture(void) { return 42; }\n")
    linked = "libprebuildfixture.so.1"
    subprocess.run(
        [sysconfig.get_config_var("CC").split()[0], "-shared", "-fPIC",
         f"-Wl,-soname,{linked}", str(lib / "fixture.c"),
         "-o", str(lib / linked)],
        check=True, timeout=120,
    )  # fmt: skip
    (lib / "libprebuildfixture.so").symlink_to(linked)
    env = {
        "CPATH": cpath,
        "LIBRARY_PATH": str(lib),
        "LD_LIBRARY_PATH": str(lib),
        "SYSTEM_HEADER_EXT_LIBRARIES": "prebuildfixture",
    }
    proc = prebuild_wheel(cuda_torch_python, *args, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert compile_line in build_log.read_text()
    said = " ".join(proc.stdout.split())
    assert (
        "copied the system libraries its libraries link into the wheel (system_header_ext.libs/"
        in said
    ), said
    assert f"{linked} ({lib / linked}). A machine installing it needs none of them" in said, said
    (wheel,) = out.glob("system_header_ext-0.1.0+*.whl")
    with zipfile.ZipFile(wheel) as built:
        names = built.namelist()
        built.extractall(tmp_path / "installed")
    assert any(n.startswith("system_header_ext/_native") for n in names), names
    assert any(n.startswith("system_header_ext.libs/libprebuildfixture-") for n in names), names
    manifest, _, _ = wheel_contents(wheel)
    assert manifest["system_libraries"] == [] and manifest["bundled_libraries"] == [linked]
    # --no-bundle: the wheel links the machine's, says so and records it
    proc = prebuild_wheel(cuda_torch_python, *args, "--no-bundle", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = " ".join(proc.stdout.split())
    assert f"its libraries link {linked} ({lib / linked}), which neither" in said, said
    assert "not copied into the wheel: --no-bundle" in said, said
    manifest, _, _ = wheel_contents(wheel)
    assert manifest["system_libraries"] == [linked] and manifest["bundled_libraries"] == []
    # The bundled wheel's module loads its copy: the machine's library gone, on no search path.
    shutil.rmtree(lib)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    loaded = subprocess.run(
        [str(cuda_torch_python), "-c", "import system_header_ext._native as n; print(n.value)"],
        cwd=tmp_path / "installed", env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert loaded.stdout.strip() == "42", loaded.stderr


@pytest.fixture(scope="module")
def cached_variants_build(
    cuda_torch_python, tmp_path_factory
) -> tuple[subprocess.CompletedProcess, Path, dict]:
    """gencode_ext's `--variants` build for sm_90 (its binding compiles in seconds), through a
    compile cache (a directory) that test_a_cached_build_of_another_arch_reuses_the_host_object
    builds from again: (the build, its output directory, the environment and --cache of both
    builds)."""
    root = tmp_path_factory.mktemp("classic-cache")
    out = root / "dist"
    # TMPDIR: the cached builds' fixed-name workspaces, apart from any other build's.
    settings = {"env": {"TMPDIR": str(root)}, "cache": str(root / "cache")}
    proc = prebuild_wheel(
        cuda_torch_python,
        "--arch",
        "sm_90",
        "--variants",
        str(FIXTURES / "gencode_ext"),
        "--out",
        str(out),
        "--cache",
        settings["cache"],
        env=settings["env"],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    return proc, out, settings


def test_classic_variant_wheels_name_their_archs_in_the_label(
    cached_variants_build, cuda_torch_python
):
    """`--variants` for a classic project: the sm_90 variant wheel (version +lab1.pt214.cu130,
    the project's own label first; variant label sm90, variant.json), the plain wheel (sm_90
    SASS and PTX) and the variants file; prebuild inspect finds each one's binaries, manifest
    and variant properties in agreement."""
    proc, out, _ = cached_variants_build
    # Two wheels, the plain one's binding object reused from the first (no cache needed):
    # the cache was asked for the binding and kernels once, and for the kernels with PTX.
    assert "Compile cache " in proc.stdout and "0 of 3 compiles from the cache" in proc.stdout, (
        proc.stdout
    )
    base = "gencode_ext-0.2.0+lab1.pt214.cu130-cp311-cp311-linux_x86_64"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{base}-sm90.whl", f"{base}.whl", "gencode_ext-0.2.0+lab1.pt214.cu130-variants.json"]
    )
    reports = {}
    for wheel in (out / f"{base}-sm90.whl", out / f"{base}.whl"):
        inspected = prebuild(cuda_torch_python, "inspect", str(wheel), "--json")
        assert inspected.returncode == 0, inspected.stdout + inspected.stderr
        reports[wheel.name] = json.loads(inspected.stdout)
    labelled, plain = reports[f"{base}-sm90.whl"], reports[f"{base}.whl"]
    assert labelled["ok"] and labelled["variant"]["variants"] == {
        "sm90": {"nvidia": {"cuda_version_lower_bound": ["13.0"], "sm_arch": ["90_real"]}}
    }
    assert [(lib["sass"], lib["ptx"]) for lib in labelled["libraries"]] == [(["sm_90"], [])]
    assert plain["ok"] and plain["variant"] is None
    assert [(lib["sass"], lib["ptx"]) for lib in plain["libraries"]] == [
        (["sm_90"], ["compute_90"])
    ]
    variants = json.loads((out / "gencode_ext-0.2.0+lab1.pt214.cu130-variants.json").read_text())
    assert variants["variants"] == labelled["variant"]["variants"]


def test_a_cached_build_of_another_arch_reuses_the_host_object(
    cached_variants_build, cuda_torch_python, tmp_path
):
    """A second build, for sm_80, through the cache the sm_90 build filled: the binding (host
    C++) comes from the cache, the kernels are compiled for sm_80 (their host-side step reused),
    and the wheel holds sm_80 SASS alone: a hit is never another arch's code."""
    _, _, settings = cached_variants_build
    out = tmp_path / "dist"
    proc = prebuild_wheel(
        cuda_torch_python,
        "--arch",
        "sm_80",
        str(FIXTURES / "gencode_ext"),
        "--out",
        str(out),
        "--cache",
        settings["cache"],
        env=settings["env"],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    summary = [line for line in proc.stdout.splitlines() if line.startswith("Compile cache ")]
    assert summary == [
        f"Compile cache {settings['cache']}: 1 of 2 compiles from the cache (host C++ 1 of 1; nvcc "
        "0 of 1; 1 of nvcc's 3 steps reused (the host side of other archs' compiles))."
    ], proc.stdout
    (wheel,) = out.glob("*.whl")
    manifest, _, libraries = wheel_contents(wheel)
    (name,) = libraries
    assert all_sass(library_code(libraries[name], name)) == ["sm_80"]
    assert manifest["sass_archs"] == ["sm_80"]


@pytest.mark.in_background
def test_code_written_for_an_older_torch_is_mended_in_the_copy_and_runs(
    cuda_torch_python, tmp_path
):
    """old_api_ext fails on torch 2.14's headers (`x.type()` in AT_DISPATCH_*, AT_CHECK,
    CHECK_EQ, TH/THC, AT_ASSERT with no `;`, its own lerp against C++20's) and on sm_90
    (__shfl_down, __ballot without _sync); the replacements
    do what the removed APIs did, so prebuild makes them in its copy, builds again, says so,
    and lists each change in prebuild.json; the library then loads (every THC successor is
    exported by torch's libraries) and the op runs, its THArgCheck raising with THArgCheck's
    message."""
    fixture = FIXTURES / "old_api_ext"
    before = {p: p.read_text() for p in fixture.rglob("*.c*")}
    out = tmp_path / "dist"
    proc = prebuild_wheel(cuda_torch_python, "--arch", "sm_90", str(fixture), "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    said = " ".join(proc.stderr.split())
    assert "of prebuild's copy (said with the wheel), built again" in said
    summary = " ".join(proc.stdout.split())
    assert "`x.type()` passed to a dispatch macro is `x.scalar_type()` (1 place in " in summary
    assert "AT_CHECK is TORCH_CHECK (1 place in old_api_ext/ops.cpp)" in summary
    assert "CHECK_EQ is TORCH_CHECK_EQ (1 place in old_api_ext/ops.cpp)" in summary
    assert "TH/THC, PyTorch's old backend, is the ATen and c10 that replaced it" in summary
    assert "`AT_ASSERT(...)` with no `;` after it (torch's macro is a statement now)" in summary
    assert "the project's own `lerp`, which C++20's `std::lerp` meets, is `project_lerp`" in summary
    assert "`__shfl_down(...)` is `__shfl_down_sync(0xffffffff, ...)` (every lane" in summary
    (wheel,) = out.glob("*.whl")
    assert wheel.name.startswith("old_api_ext-0.1.0+pt214.cu130.sm90-"), wheel.name
    manifest, _, _ = wheel_contents(wheel)
    changes = manifest["source_changes"]
    for change in (  # lines in the mended files, a header added on top of ops.cpp, 3 of kernels.cu
        "old_api_ext/ops.cpp:6: lerp -> project_lerp",
        "old_api_ext/ops.cpp:14: AT_CHECK -> TORCH_CHECK",
        "old_api_ext/ops.cpp:15: THArgCheck -> TORCH_CHECK",
        "old_api_ext/ops.cpp:18: AT_ASSERT(...) -> AT_ASSERT(...);",
        "old_api_ext/ops.cpp:20: CHECK_EQ -> TORCH_CHECK_EQ",
        "old_api_ext/ops.cpp:21: x.type() -> x.scalar_type()",
        "old_api_ext/ops.cpp:27: lerp -> project_lerp",
        "old_api_ext/kernels.cu:8: extern THCState *state; -> (removed)",
        "old_api_ext/kernels.cu:20: THCudaFree -> c10::cuda::CUDACachingAllocator::raw_delete",
        "old_api_ext/kernels.cu:20: THCudaMalloc -> c10::cuda::CUDACachingAllocator::raw_alloc",
        "old_api_ext/kernels.cu:23: THCudaCheck -> C10_CUDA_CHECK",
        "old_api_ext/kernels.cu:32: __shfl_down -> __shfl_down_sync",
        "old_api_ext/kernels.cu:33: __ballot -> __ballot_sync",
    ):
        assert change in changes, changes
    assert {p: p.read_text() for p in fixture.rglob("*.c*")} == before
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    ran = python_c(
        cuda_torch_python,
        f"import site; site.addsitedir({str(site)!r})\n"
        "import torch, old_api_ext\n"
        "print(old_api_ext.double(torch.arange(3.0)).tolist())\n"
        "try:\n"
        "    old_api_ext.double(torch.zeros(2, 2))\n"
        "except RuntimeError as e:\n"
        "    print(str(e).splitlines()[0])\n",
        tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [
        "[0.0, 2.0, 4.0]",
        "invalid argument 1: double: a 1-d tensor",
    ], ran.stdout
