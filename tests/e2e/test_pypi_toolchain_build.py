"""A wheel built with no system CUDA: PyPI's compiler (`prebuild[toolchain]`) found and used when
CUDA_HOME is unset, PATH has no nvcc and /usr/local/cuda is out of reach (a private mount namespace
where one can be made). The project built is the one ``prebuild new`` scaffolds
(``small_native_project``): the subject is the toolchain, not prebuild's kernels."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from build_helpers import PREBUILD

from prebuild.tool.builder.toolchain import SYSTEM_CUDA_ENV, find_cuda_tool


def can_hide_system_cuda() -> bool:
    if not shutil.which("unshare") or not Path("/usr/local/cuda").is_dir():
        return False
    probe = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount -t tmpfs none /usr/local/cuda && test -z "$(ls -A /usr/local/cuda)"',
        ],
        capture_output=True,
    )
    return probe.returncode == 0


@pytest.mark.slow
def test_wheel_builds_with_system_cuda_hidden(tmp_path, small_native_project):
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env.update(PATH=f"{PREBUILD.parent}:/usr/bin:/bin", COLUMNS="200", **{SYSTEM_CUDA_ENV: ""})
    assert shutil.which("nvcc", path=env["PATH"]) is None
    project = small_native_project(tmp_path / "demo")
    out, objects = tmp_path / "dist", tmp_path / "objects"
    command = [
        str(PREBUILD),
        "wheel",
        "--arch",
        "sm_80",
        "--out",
        str(out),
        "--build-dir",
        str(objects),
    ]
    hidden = can_hide_system_cuda()
    if hidden:  # also make /usr/local/cuda empty for this build (a private mount namespace)
        script = 'mount -t tmpfs none /usr/local/cuda && exec "$@"'
        command = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *command]
    proc = subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "site-packages/nvidia/cu" in proc.stderr  # "Building ... with nvcc X (path)"
    (wheel,) = out.glob("*.whl")
    ninja_files = list(objects.glob("cuda/*/build.ninja"))
    assert ninja_files and all("/usr/local/cuda" not in p.read_text() for p in ninja_files)
    report = subprocess.run(
        [str(PREBUILD), "inspect", str(wheel), "--json"], capture_output=True, text=True
    )
    assert report.returncode == 0, report.stdout + report.stderr
    data = json.loads(report.stdout)
    assert data["ok"] and data["manifest"]["sass_archs"] == ["sm_80"]
    nvcc = find_cuda_tool("nvcc", {"PATH": "", SYSTEM_CUDA_ENV: ""})
    version = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout
    assert f"release {data['manifest']['cuda_version']}," in version  # built by PyPI's nvcc
    print(f"system CUDA hidden by a mount namespace: {hidden}")
