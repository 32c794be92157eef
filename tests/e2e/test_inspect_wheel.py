"""`prebuild inspect` on a real wheel: its fatbin reader agrees with cuobjdump, and a wheel
whose manifest is edited to claim another arch is caught."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from build_helpers import run_cli
from cuobjdump import cuobjdump_code

from prebuild.runtime.manifest import Manifest
from prebuild.tool.inspection import library_code

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ptx_wheel(built_wheel) -> Path:
    """Two archs and PTX: the fat wheel test_wheel_build.py also checks."""
    return built_wheel("8.0,sm_90", "--fat", "--ptx")


def test_inspect_agrees_with_cuobjdump_and_the_manifest(ptx_wheel, tmp_path):
    proc = run_cli("inspect", str(ptx_wheel), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] and report["disagreements"] == []
    assert report["manifest"]["sass_archs"] == ["sm_80", "sm_90"]
    assert report["manifest"]["ptx_archs"] == ["compute_90"]
    with zipfile.ZipFile(ptx_wheel) as zf:
        zf.extractall(tmp_path)
    for lib in report["libraries"]:
        path = tmp_path / "prebuild" / lib["file"]
        theirs = cuobjdump_code(path)  # an independent reader of the same binary
        assert lib["sass"] == [a.sm for a in theirs.sass], lib
        assert lib["ptx"] == [a.compute for a in theirs.ptx], lib
        assert lib["linked_sass"] == [a.sm for a in theirs.linked_sass], lib
        assert library_code(path.read_bytes()) == theirs
    cuda = next(lib for lib in report["libraries"] if lib["kind"] == "cuda")
    assert cuda["sass"] == ["sm_80", "sm_90"] and cuda["ptx"] == ["compute_90"]


def test_inspect_catches_a_manifest_edited_to_claim_sm_86(ptx_wheel, tmp_path):
    edited = tmp_path / ptx_wheel.name
    with zipfile.ZipFile(ptx_wheel) as src, zipfile.ZipFile(edited, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "prebuild/_manifest.json":
                data = json.loads(data)
                data["sass_archs"] = ["sm_80", "sm_86", "sm_90"]
                data = Manifest.from_json(json.dumps(data)).to_json().encode()
            dst.writestr(item, data)
    proc = run_cli("inspect", str(edited))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "_C_cuda.abi3.so" in proc.stderr and "sm_86" in proc.stderr
