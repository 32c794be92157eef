"""The wheel workflow's scripts on a real wheel: publish_index.sh inspects it and writes the
index; test_wheel.sh tests the installed wheel (not the source tree) in a fresh venv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "scripts" / "ci"
PREBUILD = Path(sys.executable).parent / "prebuild"


def test_publish_index_and_test_wheel_on_a_real_wheel(tmp_path, built_wheel, fresh_venv):
    env = {**os.environ, "COLUMNS": "200"}
    wheel = built_wheel("sm_80")
    dist = wheel.parent

    site = tmp_path / "site"
    before = sorted(p.name for p in dist.iterdir())
    proc = subprocess.run(
        [str(CI / "publish_index.sh"), str(dist), str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "match the manifest" in proc.stdout
    assert list(site.glob("cu*-sm80/simple/prebuild/index.html"))
    # the per-arch wheel's PEP 825 variant twin, linked with the variants file in the index of every GPU
    every = (site / "simple" / "prebuild" / "index.html").read_text()
    assert (
        "prebuild-0.1.0+cu130-cp310-abi3-linux_x86_64-sm80.whl" in every
        and "-variants.json" in every
    )
    assert sorted(p.name for p in dist.iterdir()) == before  # DIST_DIR as it was

    py = fresh_venv()
    env_dir = py.parent.parent
    # the test tools and the wheel's requirements from the machine's indexes, as CI's pip would
    subprocess.run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "torch==2.13.0",
            "pytest",
            "hypothesis",
            "numpy",
            str(wheel),
        ],
        check=True,
        timeout=900,
    )
    test_env = {
        "PATH": f"{env_dir / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "COLUMNS": "200",
        "PYTEST_ARGS": " ".join(
            [
                str(ROOT / "tests" / "runtime" / "test_arch.py"),
                str(ROOT / "tests" / "runtime" / "test_manifest.py"),
                "-q",
            ]
        ),
    }
    proc = subprocess.run(
        ["bash", str(CI / "test_wheel.sh"), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
        env=test_env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "match the manifest" in proc.stdout and " passed" in proc.stdout
    assert str(env_dir) in proc.stdout  # inspect ran on the installed package
