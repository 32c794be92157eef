"""`prebuild wheel --lock FILE`: a requirements file that pip accepts with --require-hashes
(and refuses once the wheel changes)."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest
from pip_env import clean_pip_env, pip_require_hashes

from prebuild.tool.builder.outputs import check_lock_target, lock_line, write_lock

ROOT = Path(__file__).resolve().parents[3]
PREBUILD = Path(sys.executable).parent / "prebuild"
TAGS = "cp310-abi3-linux_x86_64"


def test_lock_line_is_a_hashed_direct_reference(tmp_path):
    wheel = tmp_path / "a b" / f"prebuild-0.1.0+cu130.sm90-{TAGS}.whl"
    line = lock_line("prebuild", wheel, "ab" * 32)
    assert (
        line
        == f"prebuild @ file://{tmp_path}/a%20b/prebuild-0.1.0%2Bcu130.sm90-{TAGS}.whl --hash=sha256:{'ab' * 32}\n"
    )


def test_several_wheels_need_an_index_key_placeholder():
    check_lock_target("x.lock", 1)
    check_lock_target("locks/{index_key}.txt", 3)
    with pytest.raises(ValueError, match=r"\{index_key\}"):
        check_lock_target("x.lock", 2)


def test_cli_refuses_before_building(tmp_path):
    proc = subprocess.run(
        [
            str(PREBUILD),
            "wheel",
            "--arch",
            "80,90",
            "--lock",
            str(tmp_path / "x.lock"),
            "--out",
            str(tmp_path / "out"),
            "--build-dir",
            str(tmp_path / "obj"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "{index_key}" in proc.stderr
    assert not (tmp_path / "obj").exists() and not (tmp_path / "x.lock").exists()


def test_write_lock_for_a_cpu_wheel_and_pip_accepts_it(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "tool"))  # test_index.py
    from test_index import fake_wheel

    wheel = fake_wheel(tmp_path / "dist", "0.1.0+cpu")
    path = write_lock(str(tmp_path / "{index_key}.lock"), wheel)
    assert path.name == "cpu.lock"
    # A bare venv: the lock installs with --no-deps, so no torch is needed (seconds, not a minute).
    venv.create(tmp_path / "venv", with_pip=True)
    pip = pip_require_hashes(tmp_path / "venv" / "bin" / "python")
    ok = subprocess.run(
        [*pip, "-r", str(path)], capture_output=True, text=True, timeout=600, env=clean_pip_env()
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_lock_of_a_classic_wheel_is_named_by_its_torch_cuda_and_arch(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "tool"))  # test_index.py
    from test_index import fake_wheel

    wheel = fake_wheel(tmp_path / "dist", "1.0.0+pt214.cu130.sm90", name="fused_ssim")
    path = write_lock(str(tmp_path / "{index_key}.lock"), wheel)
    assert path.name == "pt214-cu130-sm90.lock"
    assert (
        path.read_text().splitlines()[1].startswith("fused-ssim @ file://")
    )  # the normalised name
