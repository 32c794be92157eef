"""gsplat 1.5.3, as published, built by `prebuild wheel` as a new user would: prebuild installed
from a checkout with the docs' command (docs/classic-projects.md) into a fresh venv with torch
2.14.1, gsplat's sdist from the registry, nvcc reached through a wrapper script on PATH,
CUDA_HOME unset. Before prebuild found the toolkit from nvcc and raised gsplat's -std=c++17 to
the C++20 torch 2.14 needs, this failed twice over (crt/host_config.h not found; std::strong_ordering missing).

The wheel holds sm_90 SASS only, its prebuild.json lists every nvcc call, and installed in
another fresh venv, `import gsplat` takes its extension without compiling anything.
Minutes: the test reports how long each step took (docs/classic-projects.md quotes them)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from test_classic_build import all_sass, nvcc_wrapper, wheel_contents
from test_source_install import copy_checkout

from prebuild.tool.inspection import library_code

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
GSPLAT = "gsplat==1.5.3"


def documented_classic_commands(checkout: Path) -> list[str]:
    """The set-up lines of docs/classic-projects.md's first block (before `prebuild wheel`), with the
    checkout's path for ./prebuild, comments dropped."""
    text = (ROOT / "docs" / "classic-projects.md").read_text()
    section = text[text.index("builds other people's classic extensions") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    setup = lines[: next(i for i, line in enumerate(lines) if line.startswith("prebuild wheel"))]
    assert any("./prebuild[build]" in line and "--no-build-isolation" in line for line in setup), (
        setup
    )
    return [line.replace("./prebuild", str(checkout)) for line in setup if line]


def test_gsplat_as_published_builds_for_sm_90_and_imports_without_compiling(
    fresh_cuda_venv, tmp_path, capsys
):
    timings = []

    def step(what: str, started: float) -> None:
        timings.append(f"{what} {time.monotonic() - started:.0f} s")

    python = fresh_cuda_venv("venv-build")
    bin_dir = python.parent
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "PYTHONPATH")}
    env.update(
        PATH=f"{bin_dir}:{nvcc_wrapper(tmp_path / 'wrapper')}:{env['PATH']}",
        VIRTUAL_ENV=str(bin_dir.parent),
        COLUMNS="200",
        HOME=str(tmp_path / "home"),
    )

    started = time.monotonic()
    checkout = copy_checkout(tmp_path / "prebuild")
    for command in documented_classic_commands(checkout):
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert proc.returncode == 0, (command, proc.stdout[-3000:], proc.stderr[-3000:])
    step("installing prebuild from a checkout (docs/classic-projects.md)", started)

    started = time.monotonic()
    dist = tmp_path / "dist"
    proc = subprocess.run(
        [str(bin_dir / "prebuild"), "wheel", "--arch", "sm_90", GSPLAT, "--out", str(dist)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    step(f"prebuild wheel --arch sm_90 {GSPLAT}", started)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert f"({tmp_path / 'wrapper' / 'nvcc'})" in proc.stderr  # the nvcc it was given, a wrapper
    assert "raised to -std=c++20" in proc.stderr  # gsplat asks for C++17
    (wheel,) = dist.glob("*.whl")
    assert wheel.name == "gsplat-1.5.3+pt214.cu130.sm90-cp311-cp311-linux_x86_64.whl"

    manifest, metadata, libraries = wheel_contents(wheel)
    assert "Requires-Dist: torch>=2.14,<2.15" in metadata.splitlines()
    assert list(libraries) == ["gsplat/csrc.so"]
    code = library_code(libraries["gsplat/csrc.so"], "gsplat/csrc.so")
    assert all_sass(code) == ["sm_90"] and code.ptx == ()
    # Every nvcc call is listed: one per CUDA source of the sdist, each run for sm_90 in C++20.
    with zipfile.ZipFile(wheel) as zf:  # gsplat ships its CUDA sources (its JIT fallback)
        sources = {
            Path(n).name
            for n in zf.namelist()
            if n.startswith("gsplat/cuda/csrc/") and n.endswith(".cu")
        }
    compiles = [c for c in manifest["nvcc_calls"] if any(a.endswith(".cu") for a in c["given"])]
    compiled = [Path(a).name for c in compiles for a in c["given"] if a.endswith(".cu")]
    assert len(sources) == 20 and sorted(compiled) == sorted(sources), (sources, compiled)
    assert all(
        "-gencode=arch=compute_90,code=sm_90" in c["run"] and "-std=c++20" in c["run"]
        for c in compiles
    )
    assert manifest["cxx_standard"] == {"needed": "c++20", "raised": {"c++17": len(compiles)}}

    started = time.monotonic()
    user = fresh_cuda_venv("venv-use")
    # gsplat's requirements from the machine's indexes, as a user's pip would get them
    installed = subprocess.run(
        [str(user), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    extensions = tmp_path / "torch_extensions"
    check = (
        "import gsplat, json; from gsplat.cuda._backend import _C; "
        "print(json.dumps({'module': _C.__name__, 'file': _C.__file__}))"
    )
    ran = subprocess.run(
        [str(user), "-c", check],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env={**env, "TORCH_EXTENSIONS_DIR": str(extensions)},
    )
    step("installing the wheel and importing gsplat", started)
    assert ran.returncode == 0, ran.stderr[-3000:]
    loaded = json.loads(ran.stdout.strip().splitlines()[-1])
    assert loaded["module"] == "gsplat.csrc" and "site-packages/gsplat/csrc" in loaded["file"], (
        loaded
    )
    assert not extensions.exists() or not any(extensions.rglob("*")), "gsplat compiled at import"
    with capsys.disabled():  # shown in every run, not only when the test fails
        print(f"\ngsplat 1.5.3 on {os.cpu_count()} cores: " + "; ".join(timings))
