"""Real wheels indexed by `prebuild index`: the sm_80 wheel installs into a fresh venv from
`--index-url file://SITE/cu130-sm80/simple` (not the fat sm_80+sm_90 wheel beside it, which
has its own index) and imports and runs there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pip_env import clean_pip_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PREBUILD = Path(sys.executable).parent / "prebuild"


def run(*cmd: str, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=900, **kw)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_pip_installs_from_its_key_index_in_a_fresh_venv(tmp_path, built_wheel, fresh_venv):
    built, fat = built_wheel("sm_80"), built_wheel("8.0,sm_90", "--fat", "--ptx")
    dist = tmp_path / "dist"
    dist.mkdir()
    for wheel in (built, fat):
        shutil.copyfile(wheel, dist / wheel.name)
    env = {**os.environ, "COLUMNS": "200"}
    site = tmp_path / "site"
    run(str(PREBUILD), "index", str(dist), "--out", str(site), env=env)
    cuda_tag = built.name.split("+")[1].split(".")[0]  # cu130 with this nvcc
    assert (site / f"{cuda_tag}-sm80" / "simple" / "prebuild" / "index.html").is_file()
    assert (site / f"{cuda_tag}-sm80-sm90" / "simple" / "prebuild" / "index.html").is_file()

    py = str(fresh_venv())  # a fresh venv: no system site-packages
    env_dir = Path(py).parent.parent
    pip = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # torch, and the runtime's one other import: from the machine's indexes, as a user's would
    run(*pip, "torch==2.13.0", "packaging")
    # prebuild from the key's index only: no index or find-links of the machine's beside it
    index_url = f"file://{site}/{cuda_tag}-sm80/simple"
    run(*pip, "prebuild", "--index-url", index_url, "--no-deps", env=clean_pip_env())
    script = (
        "import json, torch, prebuild\n"
        "x = torch.rand(1, 1, 16, 16)\n"
        "print(json.dumps({'version': prebuild.__version__, 'file': prebuild.__file__,\n"
        "                  'ssim': prebuild.fused_ssim(x, x).item()}))\n"
    )
    proc = run(py, "-c", script, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["version"] == f"0.1.0+{cuda_tag}.sm80"
    assert result["file"].startswith(str(env_dir))
    assert result["ssim"] == pytest.approx(1.0, abs=1e-5)
