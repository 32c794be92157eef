"""`prebuild new` end to end: the new project builds its sm_80 and sm_90 wheels with `prebuild wheel`,
which pass `prebuild inspect` and install and run on the CPU where prebuild is not installed, next
to torch 2.13 and 2.14.1; its own tests pass after the README's test command, and so does
`prebuild selftest` of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pip_env import clean_pip_env
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=1800, **kwargs)


@pytest.mark.slow
def test_a_new_project_builds_installs_without_prebuild_and_passes_its_tests(
    tmp_path, fresh_venv, fresh_cuda_venv, dev_venv_copy
):
    prebuild = [sys.executable, "-m", "prebuild"]
    assert run([*prebuild, "new", "demo"], cwd=tmp_path).returncode == 0
    project = tmp_path / "demo"
    built = run(
        [*prebuild, "wheel", "--arch", "sm_80,sm_90", str(project), "--out", str(tmp_path / "dist")]
    )
    assert built.returncode == 0, built.stderr[-4000:]
    wheels = sorted((tmp_path / "dist").glob("*.whl"))
    assert [w.name for w in wheels] == [
        f"demo-0.1.0+cu130.{sm}-cp310-abi3-linux_x86_64.whl" for sm in ("sm80", "sm90")
    ]
    for wheel in wheels:
        inspected = run([*prebuild, "inspect", str(wheel)])
        assert (
            inspected.returncode == 0 and "The binaries match the manifest." in inspected.stdout
        ), inspected.stdout
    script = (
        "import importlib.util, torch, demo\n"
        "x, y = torch.arange(4.0), torch.ones(4)\n"
        "assert importlib.util.find_spec('prebuild') is None, 'prebuild is installed'\n"
        "print(demo.scale_add(x, y, 0.5).tolist(), torch.__version__)"
    )
    for python in (fresh_venv(), fresh_cuda_venv()):  # torch 2.13 (CPU), torch 2.14.1 (CUDA 13.0)
        # offline, the wheel only: none of the machine's pip settings
        env = clean_pip_env({k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        installed = run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-index",
                "--no-deps",
                str(wheels[1]),
            ],
            env=env,
        )
        assert installed.returncode == 0, installed.stderr
        ran = run([str(python), "-c", script], cwd=tmp_path, env=env)
        assert ran.returncode == 0, ran.stderr
        values, version = ran.stdout.split("\n")[-2].rsplit(" ", 1)
        assert values == "[0.5, 1.5, 2.5, 3.5]" and version.startswith(("2.13.0", "2.14.1")), (
            ran.stdout
        )
    # The README's test command, in a copy of the development venv (prebuild, pytest, torch 2.13).
    python = dev_venv_copy()
    env = {
        **os.environ,
        "PREBUILD_ARCHS": "",
        "PREBUILD_SIMT": "1",
        "PATH": f"{python.parent}:{os.environ['PATH']}",
    }
    env.pop("PYTHONPATH", None)
    editable = run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-build-isolation",
            "--no-deps",
            "-e",
            ".",
        ],
        cwd=project,
        env=env,
    )
    assert editable.returncode == 0, editable.stderr[-4000:]
    tests = run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project, env=env)
    assert tests.returncode == 0, tests.stdout[-4000:]
    assert "11 passed" in tests.stdout and "skipped" not in tests.stdout, tests.stdout[-2000:]
    # Its selftest hook, recorded in the manifest of the editable install: scale_add against
    # plain PyTorch on the CPU (no GPU here).
    checked = run(
        [str(python.parent / "prebuild"), "selftest", "demo", "--json"], cwd=tmp_path, env=env
    )
    assert checked.returncode == 0, checked.stdout[-4000:] + checked.stderr[-4000:]
    rows = [
        (r["package"], r["device"], r["op"], r["status"], r["against"])
        for r in json.loads(checked.stdout)["rows"]
    ]
    assert rows == [("demo", "cpu", "scale_add", "pass", "reference")], rows
