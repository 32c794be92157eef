"""The loader's GPU checks for real (docs/compatibility.md), on wheels built by
``prebuild wheel --arch`` for an arch that is not this GPU's:

- a wheel whose only code is SASS for another arch: the CPU op still runs, and the first
  CUDA op call raises UnsupportedGPUError naming the GPU, its compute capability, the
  wheel's archs and the ``prebuild wheel --arch sm_XY`` command that fixes it;
- a wheel whose only code this GPU can run is PTX: the first CUDA call runs it through the
  driver's JIT with one PTXJitWarning (and gives the CPU kernel's result), and is refused
  with UnsupportedGPUError under PREBUILD_STRICT=1.

The arch is the newest one nvcc builds whose major is below the GPU's (sm_89 on a 9.0 GPU):
compat.device_verdict takes SASS only of the GPU's major with a minor not above the GPU's
(runtime/arch.py, sass_runs_on), so that SASS never runs here, and PTX of any capability up
to the GPU's (ptx_runs_on), so its PTX does. ``--ptx`` embeds PTX of the wheel's newest arch,
the same one: ``--arch sm_89`` gives "nothing runs", ``--arch sm_89 --ptx`` "only the PTX
runs" (SASS of a newer arch plus an older PTX would give the same verdict, nothing more).

The wheels are of a project made by ``prebuild new`` (one small op, scale_add), not of
prebuild itself: its wheels carry the same loader (prebuild.runtime, copied in by the build
as ``_prebuild_runtime``) and call it the same way before each CUDA launch, and its two
builds take seconds where prebuild's own kernels take minutes per arch. Each wheel goes into
its own throwaway venv and is used by child processes, so a refused wheel never touches the
test process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import site
import subprocess
import sys
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from pip_env import clean_pip_env

from prebuild.runtime.arch import (
    Arch,
    CodeKind,
    arch_for_capability,
    format_capability,
    select_code,
)

PROJECT, PACKAGE = "loader-probe", "loader_probe"
BUILD_TIMEOUT = 1200

# The op on the CPU, then on cuda:0, in a fresh interpreter of the venv; one JSON line.
CHILD = r"""
import json
import warnings

import torch
import loader_probe

report = {"file": loader_probe.__file__}
x, y = torch.arange(6.0), torch.linspace(-1.0, 1.0, 6)
report["cpu"] = loader_probe.scale_add(x, y, 0.5).tolist()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        report["cuda"] = loader_probe.scale_add(x.to("cuda:0"), y.to("cuda:0"), 0.5).tolist()
    except Exception as exc:  # the wheel's loader has its own copy of the error classes
        report["error"] = [type(exc).__name__, str(exc), [c.__name__ for c in type(exc).__mro__]]
report["warnings"] = [[w.category.__name__, str(w.message)] for w in caught]
print("REPORT " + json.dumps(report))
"""


@dataclass(frozen=True)
class Gpu:
    name: str
    capability: tuple[int, int]

    @property
    def fix(self) -> str:
        return f"prebuild wheel --arch {arch_for_capability(self.capability).sm}"


@pytest.fixture(scope="module")
def gpu() -> Gpu:
    return Gpu(torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))


@pytest.fixture(scope="module")
def older_arch(gpu) -> Arch:
    """The newest plain arch nvcc builds whose major is below the GPU's."""
    from prebuild.tool.builder.toolchain import Nvcc, ToolchainError, find_nvcc

    try:
        supported = Nvcc(find_nvcc()).supported_archs
    except ToolchainError as exc:
        pytest.skip(f"building the test wheels needs nvcc: {exc}")
    older = [a for a in supported if a.suffix == "" and a.major < gpu.capability[0]]
    if not older:
        pytest.skip(
            f"nvcc builds no arch of a major below this GPU's {format_capability(gpu.capability)} "
            f"(it builds {', '.join(a.sm for a in supported)})"
        )
    return max(older)


def prebuild_cli(*args: str) -> list[str]:
    # python -m prebuild: the `prebuild` script exists only where prebuild was pip-installed.
    return [sys.executable, "-m", "prebuild", *args]


def build_command(
    project: Path, arch: Arch, ptx: bool, out: Path
) -> tuple[list[str], dict[str, str]]:
    """``prebuild wheel --arch ARCH [--ptx] PROJECT``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREBUILD_")}
    env["COLUMNS"] = "200"
    if importlib.util.find_spec("elftools") is not None:
        ptx_flag = ["--ptx"] if ptx else []
        return prebuild_cli(
            "wheel", "--arch", arch.sm, *ptx_flag, "--out", str(out), str(project)
        ), env
    # `prebuild wheel` reads every built library back with pyelftools, which this Python
    # lacks: the project's own setup.py (docs/getting-started.md, "Building from source with pip") runs the
    # same build backend, without that check.
    env.update(PREBUILD_ARCHS=arch.sm, PREBUILD_PTX="1" if ptx else "0")
    env = clean_pip_env(env)  # offline, the project only: none of the machine's pip settings
    return [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-build-isolation",
        "--no-deps",
        "--no-index",
        "--no-cache-dir",
        "--wheel-dir",
        str(out),
        str(project),
    ], env


@pytest.fixture(scope="module")
def wheels(older_arch, tmp_path_factory) -> dict[bool, Path]:
    """{ptx: wheel} for ``--arch older_arch`` without and with ``--ptx``: two projects made
    by ``prebuild new``, built at once (each has its own build directory and lock)."""
    root = tmp_path_factory.mktemp("loader-probe")
    builds = {}
    for ptx in (False, True):
        project, out = root / f"project-ptx{int(ptx)}", root / f"dist-ptx{int(ptx)}"
        made = subprocess.run(
            prebuild_cli("new", PROJECT, "--dir", str(project)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert made.returncode == 0, made.stdout + made.stderr
        cmd, env = build_command(project, older_arch, ptx, out)
        log = root / f"build-ptx{int(ptx)}.log"
        with open(log, "w", encoding="utf-8") as sink:  # the child keeps its own copy of the file
            proc = subprocess.Popen(
                cmd, cwd=project, env=env, stdout=sink, stderr=subprocess.STDOUT
            )
        builds[ptx] = (cmd, out, log, proc)
    built = {}
    for ptx, (cmd, out, log, proc) in builds.items():
        proc.wait(timeout=BUILD_TIMEOUT)
        found = sorted(out.glob("*.whl"))
        assert proc.returncode == 0 and len(found) == 1, (
            f"{' '.join(cmd)}\n{log.read_text()[-6000:]}"
        )
        built[ptx] = found[0]
    return built


def wheel_manifest(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as zf:
        return json.loads(zf.read(f"{PACKAGE}/_manifest.json"))


def venv_with(wheel: Path, where: Path) -> tuple[Path, Path]:
    """A new venv holding ``wheel`` and seeing this interpreter's torch: (its python, its
    site-packages). ``--system-site-packages`` shows it the base interpreter's packages only;
    when this interpreter is itself a venv (the GPU image's python3 is one), torch is in this
    venv's site-packages, so a .pth file names those, after the new venv's own."""
    venv.create(where, system_site_packages=True, with_pip=False, symlinks=True)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()
    site_dir = Path(purelib)
    ours = [str(Path(torch.__file__).resolve().parents[1]), *site.getsitepackages()]
    (site_dir / "test_process_packages.pth").write_text(
        "\n".join(dict.fromkeys(ours)) + "\n", encoding="utf-8"
    )
    # This interpreter's pip installs it (the venv has none: ensurepip may be absent).
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-compile",
            "--disable-pip-version-check",
            "--target",
            str(site_dir),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_pip_env(),  # offline, the wheel only: none of the machine's pip settings
    )
    return python, site_dir


def run_child(python: Path, home: Path, strict: bool) -> dict:
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREBUILD_", "PYTHON"))}
    # A fresh HOME (the driver's JIT cache goes there), no user site, no PYTHONPATH: the
    # venv's copy of the package is the one imported.
    env.update(HOME=str(home), PYTHONNOUSERSITE="1")
    if strict:
        env["PREBUILD_STRICT"] = "1"
    proc = subprocess.run(
        [str(python), "-c", CHILD], cwd=home, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    report = json.loads(line[len("REPORT ") :])
    # x + 0.5 y: halving is exact, so one rounding whatever the kernel's instructions.
    assert report["cpu"] == (torch.arange(6.0) + 0.5 * torch.linspace(-1.0, 1.0, 6)).tolist(), (
        report["cpu"]
    )
    return report


def assert_installed_from(report: dict, site_dir: Path) -> None:
    assert Path(report["file"]).resolve().is_relative_to(site_dir.resolve()), report["file"]


def assert_refused(report: dict, gpu: Gpu, *parts: str) -> None:
    """The CUDA call raised the wheel's loader's UnsupportedGPUError, saying ``parts``."""
    assert "cuda" not in report, report
    kind, message, bases = report["error"]
    assert kind == "UnsupportedGPUError" and "PrebuildError" in bases, (kind, message)
    for part in (
        gpu.name,
        f"compute capability {format_capability(gpu.capability)}",
        gpu.fix,
        *parts,
    ):
        assert part in message, (part, message)


def test_wheel_without_code_for_this_gpu_raises_unsupported_gpu_error(
    gpu, older_arch, wheels, tmp_path
):
    manifest = wheel_manifest(wheels[False])
    assert manifest["sass_archs"] == [older_arch.sm] and manifest["ptx_archs"] == []
    assert select_code(gpu.capability, [older_arch], []).kind is CodeKind.NONE
    python, site_dir = venv_with(wheels[False], tmp_path / "venv")

    report = run_child(python, tmp_path / "home", strict=False)
    assert_installed_from(report, site_dir)
    # The CPU op ran (run_child checked its values); the first CUDA call is refused before
    # any launch, naming the wheel's only arch.
    assert_refused(report, gpu, older_arch.sm)


def test_ptx_only_wheel_runs_through_the_jit_with_one_warning(gpu, older_arch, wheels, tmp_path):
    manifest = wheel_manifest(wheels[True])
    assert manifest["sass_archs"] == [older_arch.sm] and manifest["ptx_archs"] == [
        older_arch.compute
    ]
    assert select_code(gpu.capability, [older_arch], [older_arch]).kind is CodeKind.PTX
    python, site_dir = venv_with(wheels[True], tmp_path / "venv")

    report = run_child(python, tmp_path / "home", strict=False)
    assert_installed_from(report, site_dir)
    assert "error" not in report, report["error"]
    jit_warnings = [message for kind, message in report["warnings"] if kind == "PTXJitWarning"]
    assert len(jit_warnings) == 1, report["warnings"]
    for part in (
        gpu.name,
        f"compute capability {format_capability(gpu.capability)}",
        older_arch.compute,
        gpu.fix,
    ):
        assert part in jit_warnings[0], (part, jit_warnings[0])
    # The JIT-compiled kernel computes what the CPU kernel does.
    assert report["cuda"] == report["cpu"]


def test_ptx_only_wheel_is_refused_under_prebuild_strict(gpu, older_arch, wheels, tmp_path):
    python, site_dir = venv_with(wheels[True], tmp_path / "venv")

    report = run_child(python, tmp_path / "home", strict=True)
    assert_installed_from(report, site_dir)
    assert_refused(report, gpu, older_arch.compute, "refused because PREBUILD_STRICT=1")
