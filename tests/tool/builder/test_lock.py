"""`prebuild wheel --lock FILE`: a requirements file that pip accepts with --require-hashes
(and refuses once the wheel changes)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pip_env import clean_pip_env, installed

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


def pip_require_hashes(python: Path) -> list[str]:
    # run with clean_pip_env(): the lock's wheel only, whatever the machine's pip settings
    return [
        str(python),
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-deps",
        "--require-hashes",
    ]


@pytest.mark.slow
def test_pip_accepts_the_lock_of_a_real_wheel_and_refuses_a_changed_one(
    tmp_path, shared_objects, fresh_venv
):
    lock = tmp_path / "locks" / "{index_key}.txt"
    out = tmp_path / "dist"
    proc = subprocess.run(
        [
            str(PREBUILD),
            "wheel",
            "--arch",
            "sm_80",
            "--lock",
            str(lock),
            "--out",
            str(out),
            "--build-dir",
            str(shared_objects),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = out.glob("*.whl")
    (written,) = (tmp_path / "locks").glob("*.txt")
    assert written.name.startswith("cu") and written.name.endswith("-sm80.txt")
    python = fresh_venv()
    pip = pip_require_hashes(python)
    ok = subprocess.run(
        [*pip, "-r", str(written)], capture_output=True, text=True, timeout=600, env=clean_pip_env()
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert list((tmp_path / "venv" / "lib").glob("python*/site-packages/prebuild/_C_cuda.abi3.so"))
    before = installed(python)
    with open(wheel, "ab") as f:  # the wheel changes after it was locked
        f.write(b"\0")
    bad = subprocess.run(
        [*pip, "--force-reinstall", "-r", str(written)],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_pip_env(),
    )
    # Refused for its hash (the locked one and the changed file's both named), not pip's words.
    said = bad.stdout + bad.stderr
    locked = written.read_text().split("--hash=sha256:")[1].split()[0]
    changed = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert bad.returncode != 0 and locked in said and changed in said, said[-3000:]
    assert installed(python) == before  # the locked install stays


def test_write_lock_for_a_cpu_wheel_and_pip_accepts_it(tmp_path, fresh_venv):
    sys.path.insert(0, str(ROOT / "tests" / "tool"))  # test_index.py
    from test_index import fake_wheel

    wheel = fake_wheel(tmp_path / "dist", "0.1.0+cpu")
    path = write_lock(str(tmp_path / "{index_key}.lock"), wheel)
    assert path.name == "cpu.lock"
    pip = pip_require_hashes(fresh_venv())
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
