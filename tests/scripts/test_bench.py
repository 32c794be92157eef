"""scripts/bench.py: the --quick run goes end to end and writes well-formed outputs (its
numbers are not judged: benchmarks live in the script, never in timed tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench.py"
# the package scripts/benchmarks/, as the command finds it
sys.path.insert(0, str(ROOT / "scripts"))

from benchmarks.cache import nvcc_share  # noqa: E402
from benchmarks.cli import keep_other_sections  # noqa: E402
from benchmarks.cuda import sfu_exps_per_flop  # noqa: E402
from benchmarks.gpu import parse_resource_usage, short_kernel  # noqa: E402
from benchmarks.report import cache_report, load_note  # noqa: E402
from benchmarks.stats import fmt_share, fmt_stat, stat  # noqa: E402


def test_stat_median_spread_and_noise_flag():
    s = stat([1.0, 1.05, 0.9])
    assert s["median"] == 1.0 and s["min"] == 0.9 and s["max"] == 1.05
    assert s["spread"] == pytest.approx(0.15) and not s["noisy"]
    assert stat([1.0, 1.5, 1.0])["noisy"]
    assert not stat([3.0])["noisy"]
    assert "noisy" in fmt_stat(stat([1.0, 2.0, 1.0]))


def test_parse_resource_usage():
    text = """
Fatbin elf code:
================
arch = sm_80
code version = [1,8]
host = linux
compile_size = 64bit

Resource usage:
 Common:
  GLOBAL:0
 Function _ZN8prebuild4ssim6kernelILb1EEEvPKf:
  REG:40 STACK:8 SHARED:5408 LOCAL:0 CONSTANT[0]:400 TEXTURE:0 SURFACE:0 SAMPLER:0
"""
    (row,) = parse_resource_usage(text)
    assert row == {
        "arch": "sm_80",
        "kernel": "_ZN8prebuild4ssim6kernelILb1EEEvPKf",
        "registers": 40,
        "shared": 5408,
        "local": 0,
        "stack": 8,
    }
    assert (
        short_kernel("void a::(anonymous namespace)::k<true>(float const*, int)")
        == "void a::k<true>"
    )


def test_a_share_over_the_peak_is_flagged_not_printed():
    assert fmt_share(0.256) == "26%" and fmt_share(0.0256, 1) == "2.6%"
    assert fmt_share(1.0) == "100%"
    flagged = fmt_share(1.9)
    assert "impossible" in flagged and "190" not in flagged


def test_the_exp_peak_follows_the_sm_generation():
    # 16 SFU exps per SM and clock against 64 (sm_80) or 128 (sm_86 on) FMA lanes of 2 FLOP
    assert sfu_exps_per_flop((8, 0)) == 16 / 128
    assert sfu_exps_per_flop((9, 0)) == sfu_exps_per_flop((8, 6)) == 16 / 256


def test_cuda_section_code_runs_on_the_cpu(tmp_path):
    """--device cpu: the cuda section's own code (peers found or said absent, rows, shares, the
    report's tables) end to end at tiny sizes; on a GPU machine the same code times the GPU."""
    out = tmp_path / "docs"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--sections",
            "cuda",
            "--device",
            "cpu",
            "--repeats",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    cuda = json.loads((out / "benchmarks.json").read_text())["cuda"]
    assert cuda["device"] == "cpu"
    (ssim,) = cuda["ssim"]
    assert list(ssim["times"]) == ["prebuild.fused_ssim", "plain conv2d", "pytorch_msssim.ssim"]
    assert set(ssim["ratios"]) == {"plain conv2d", "pytorch_msssim.ssim"} and all(
        v > 0 for v in ssim["ratios"].values()
    )
    # upstream fused-ssim and gsplat are CUDA-only peers: each said absent, with why
    assert set(cuda["absent"]) == {"fused-ssim (upstream)", "gsplat.rasterization"}
    (raster,) = cuda["raster"]
    assert (
        raster["gaussians"] == 100 and raster["work"]["composited"] > 0 and raster["peak_share"] > 0
    )
    md = (out / "benchmarks.md").read_text()
    section = md[md.index("## 6. CUDA kernels") :]
    assert (
        "| size | B | prebuild.fused_ssim | plain conv2d | pytorch_msssim.ssim | vs plain conv2d |"
        in section
    )
    assert "Not timed: fused-ssim (upstream)" in section
    assert (
        "| Gaussians | image | intersections | prebuild.rasterization | bound | share |" in section
    )


def test_help_teaches():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=True
    ).stdout
    for word in ("--quick", "--peer-gsplat", "--sections", "contention", "docs/benchmarks.md"):
        assert word in out


def test_unknown_section_is_refused():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--sections", "cpu,nope"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "nope" in proc.stderr


def test_keep_others_takes_the_unmeasured_sections_with_when_and_how(tmp_path):
    earlier = {
        "date": "2026-11-01 10:00",
        "command": "scripts/bench.py",
        "sections": ["build", "cpu", "gpu"],
        "build": {"rows": {}},
        "cpu": {"old": True},
        "gpu": {"rows": [], "measured": "long ago by `x`"},
    }
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(earlier))
    results = {
        "date": "2026-11-23 22:00",
        "command": "scripts/bench.py --sections cpu",
        "cpu": {"new": True},
    }
    keep_other_sections(results, path)
    assert results["cpu"] == {"new": True}  # measured now: never replaced
    assert results["build"]["measured"] == "2026-11-01 10:00 UTC by `scripts/bench.py`"
    assert results["gpu"]["measured"] == "long ago by `x`"  # an older note is kept, not restamped
    assert results["sections"] == ["build", "cpu", "gpu"]
    assert "(measured long ago by `x`)" in load_note({**results["gpu"], "load_after": 1.0})
    with pytest.raises(SystemExit, match="needs an earlier"):
        keep_other_sections({}, tmp_path / "missing.json")


def test_cache_section_report_and_nvcc_share(tmp_path):
    """Section 7's tables from a run's rows (the builds themselves are test_cache_builds.py's
    subject: the section only times them), and nvcc's share read from a classic build's
    build.ninja and .ninja_log as torch writes them."""
    obj = tmp_path / "build" / "temp.linux-x86_64-cpython-311"
    obj.mkdir(parents=True)
    (obj / "build.ninja").write_text(
        "rule compile\n  command = c++ $in\nrule cuda_compile\n  command = nvcc $in\n"
        f"build {obj}/ssim.o: cuda_compile /src/ssim.cu\nbuild {obj}/ext.o: compile /src/ext.cpp\n"
    )
    (obj / "build.ninja").write_text(
        (obj / "build.ninja").read_text() + f"build {obj}/ssim3d.o: cuda_compile /src/ssim3d.cu\n"
    )
    log = "".join(
        f"{a}\t{b}\t1\t{obj}/{name}\tab\n"
        for a, b, name in [(0, 41000, "ext.o"), (5, 12505, "ssim.o"), (6000, 14000, "ssim3d.o")]
    )  # two nvcc at once
    (obj / ".ninja_log").write_text("# ninja log v7\n" + log)
    assert nvcc_share(tmp_path / "build") == 13.995  # 0.005-14.0 s, not 12.5 + 8
    rows = [
        {
            "what": "local directory, cold",
            "from": "copy A",
            "seconds": 195.6,
            "cache": "0 of 22 compiles",
        },
        {
            "what": "local directory, warm",
            "from": "copy B",
            "seconds": 55.2,
            "cache": "22 of 22 compiles",
        },
    ]
    classic = {
        "source": "/src/fused-ssim",
        "rows": [
            {
                "arch": "sm_80",
                "cached": True,
                "seconds": 120.0,
                "nvcc_seconds": 12.5,
                "cache": "0 of 2 compiles",
            }
        ],
    }
    text = "\n".join(
        cache_report(
            {
                "project": "prebuild's own kernels",
                "archs": "sm_80,sm_90",
                "rows": rows,
                "classic": classic,
            },
            quick=False,
        )
    )
    assert "| local directory, warm | copy B | 55.20 s | 22 of 22 compiles |" in text
    assert "| sm_80 | yes | 120 s | 12.50 s | 0 of 2 compiles |" in text
    assert "fused-ssim not measured" in "\n".join(
        cache_report(
            {
                "project": "p",
                "archs": "sm_80",
                "rows": rows,
                "classic": None,
                "classic_skipped": "no venv",
            },
            quick=False,
        )
    )
