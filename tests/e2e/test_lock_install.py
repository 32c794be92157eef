"""`prebuild wheel --lock FILE` on a real wheel: pip accepts the lock with --require-hashes, and
refuses it once the wheel changes."""

from __future__ import annotations

import hashlib
import os
import subprocess

import pytest
from build_helpers import PREBUILD, ROOT
from pip_env import clean_pip_env, installed, pip_require_hashes


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
