"""The docs' "Building from source with pip" (docs/getting-started.md) works as written in a fresh
venv, and without
the build requirements the build stops at once naming them (pip installs none of them when
build isolation is off)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from build_helpers import copy_checkout

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def docs_block(page: str, heading: str) -> str:
    """The first ```bash block after a heading of a docs/ page."""
    text = (ROOT / "docs" / page).read_text()
    section = text[text.index(heading) :]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match, heading
    return match.group(1)


def test_documented_source_build_in_a_fresh_venv(fresh_venv, tmp_path):
    python = fresh_venv()
    source = copy_checkout(tmp_path / "checkout")
    env = {
        "PATH": f"{python.parent}:{os.environ['PATH']}",
        "HOME": str(tmp_path / "home"),
        "VIRTUAL_ENV": str(python.parent.parent),
        # The docs' first line installs from the machine's indexes: its pip settings given in
        # variables (a CI's mirror) go with it (a config file under the real HOME does not).
        **{k: v for k, v in os.environ.items() if k.startswith(("PIP_", "UV_"))},
    }

    # A fresh venv has torch only: the build names what is missing instead of a traceback.
    bare = subprocess.run(
        ["pip", "install", "--no-build-isolation", "."],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bare.returncode != 0
    said = " ".join((bare.stdout + bare.stderr).split())
    assert "prebuild's build needs" in said and "ninja" in said and "Traceback" not in said, said
    assert re.search(r"pip install [^\n]*ninja", said), said

    block = docs_block("getting-started.md", "## Building from source with pip")
    assert "--no-build-isolation" in block and "PREBUILD_ARCHS=sm_86" in block
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    check = """
import json, torch, prebuild
from prebuild.ops._library import LIBRARY
x = torch.rand(1, 3, 16, 16)
print(json.dumps({"file": prebuild.__file__, "version": prebuild.__version__, "ssim": prebuild.fused_ssim(x, x).item(),
                  "sass": [a.sm for a in LIBRARY.manifest.sass_archs]}))
"""
    ran = subprocess.run(
        [str(python), "-c", check],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["file"].startswith(
        str(python.parent.parent)
    )  # the installed copy, not the checkout
    assert result["version"].endswith(".sm86") and result["sass"] == ["sm_86"]
    assert result["ssim"] == pytest.approx(1.0, abs=1e-6)
