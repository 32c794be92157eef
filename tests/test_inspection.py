"""prebuild.inspection and `prebuild inspect`: made-up libraries (a real ELF with a
.nv_fatbin section added by objcopy) in made-up wheels, against their manifests."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

import prebuild
from prebuild.arch import Arch, parse_arch_list
from prebuild.cli import app
from prebuild.fatbin import EmbeddedCode, build_container, build_entry
from prebuild.inspection import (
    FoundLibrary,
    InspectionError,
    compare,
    inspect_path,
    library_code,
    read_wheel_manifest,
)
from prebuild.manifest import Library, Manifest, ManifestError

SRC = "/src/csrc/ssim/ssim_cuda.cu"
CPU_SO = Path(prebuild.__file__).parent / "_C.abi3.so"  # a real ELF without GPU code
runner = CliRunner()


def manifest_for(libs: dict[str, bytes], sass="sm_80", ptx="") -> Manifest:
    return Manifest(
        package_version="0.1.0+cu130.sm80", torch_target="2.13", built_with_torch="2.13.0+cpu",
        cuda_version="13.0", sass_archs=parse_arch_list(sass), ptx_archs=parse_arch_list(ptx),
        libraries=tuple(Library(name, "cuda" if "cuda" in name else "cpu",
                                hashlib.sha256(data).hexdigest()) for name, data in libs.items()),
    )  # fmt: skip


# --- compare: pure ----------------------------------------------------------------------


def found(name: str, sass=(), ptx=(), linked=(), sha="0" * 64) -> FoundLibrary:
    return FoundLibrary(name, sha, EmbeddedCode(tuple(sass), tuple(ptx), tuple(linked)))


def test_compare_agreement_ignores_linked_code():
    m = manifest_for({"_C.abi3.so": b"", "_C_cuda.abi3.so": b""}, "sm_80,sm_90", "compute_90")
    sha = {lib.file: lib.sha256 for lib in m.libraries}
    libs = [found("_C.abi3.so", sha=sha["_C.abi3.so"]),
            found("_C_cuda.abi3.so", m.sass_archs, m.ptx_archs, [Arch(7, 5)], sha["_C_cuda.abi3.so"])]  # fmt: skip
    assert compare(m, libs) == []


def test_compare_names_every_disagreement():
    m = manifest_for({"_C.abi3.so": b"", "_C_cuda.abi3.so": b""}, "sm_80,sm_90", "compute_90")
    libs = [found("_C.abi3.so", [Arch(8, 0)]), found("_C_cuda.abi3.so", [Arch(8, 0)]),
            found("_C_extra.abi3.so")]  # fmt: skip
    got = {(d.what, d.file, d.message.split(" inside")[0].split(" ")[0]) for d in compare(m, libs)}
    assert ("file", "_C.abi3.so", "sha256") in got  # altered
    assert ("archs", "_C.abi3.so", "SASS") in got  # GPU code in the CPU library
    assert ("archs", "_C_cuda.abi3.so", "SASS") in got  # sm_90 missing
    assert ("archs", "_C_cuda.abi3.so", "PTX") in got  # compute_90 missing
    assert ("file", "_C_extra.abi3.so", "a") in got  # unlisted
    assert compare(m, libs[:1], complete=False)[0].what == "file"
    missing = compare(m, [])
    assert {d.file for d in missing} == {"_C.abi3.so", "_C_cuda.abi3.so"}
    assert all("missing" in d.message for d in missing)


# --- real ELF files with a made-up fatbin -------------------------------------------------


def elf_with_fatbin(tmp_path: Path, name: str, fatbin: bytes) -> bytes:
    blob = tmp_path / f"{name}.fatbin"
    blob.write_bytes(fatbin)
    out = tmp_path / name
    subprocess.run(["objcopy", "--add-section", f".nv_fatbin={blob}", str(CPU_SO), str(out)], check=True)
    return out.read_bytes()


@pytest.fixture
def libs(tmp_path) -> dict[str, bytes]:
    cuda = elf_with_fatbin(tmp_path, "_C_cuda.abi3.so", build_container(build_entry("sass", Arch(7, 5)))
                           + build_container(build_entry("ptx", Arch(8, 0), SRC),
                                             build_entry("sass", Arch(8, 0), SRC)))  # fmt: skip
    return {"_C.abi3.so": CPU_SO.read_bytes(), "_C_cuda.abi3.so": cuda}


def make_wheel(path: Path, libs: dict[str, bytes], manifest: Manifest | None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in libs.items():
            zf.writestr(f"prebuild/{name}", data)
        if manifest is not None:
            zf.writestr("prebuild/_manifest.json", manifest.to_json())
    return path


def test_library_code_reads_the_elf_section(libs):
    assert library_code(libs["_C_cuda.abi3.so"]) == EmbeddedCode((Arch(8, 0),), (Arch(8, 0),), (Arch(7, 5),))
    assert library_code(libs["_C.abi3.so"]).empty
    with pytest.raises(InspectionError, match="not an ELF"):
        library_code(b"#!/bin/sh\n", "script.so")


def test_inspect_agreeing_wheel_exits_0(tmp_path, libs):
    wheel = make_wheel(tmp_path / "ok.whl", libs, manifest_for(libs, "sm_80", "compute_80"))
    assert read_wheel_manifest(wheel).sass_archs == (Arch(8, 0),)
    result = runner.invoke(app, ["inspect", str(wheel)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "sm_80" in result.output and "compute_80" in result.output and "sm_75" in result.output
    assert "match the manifest" in result.output


def test_inspect_wheel_whose_manifest_lies_exits_1(tmp_path, libs):
    wheel = make_wheel(tmp_path / "lie.whl", libs, manifest_for(libs, "sm_80,sm_90", "compute_80"))
    result = runner.invoke(app, ["inspect", str(wheel), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["ok"] is False
    assert data["manifest"]["sass_archs"] == ["sm_80", "sm_90"]
    cuda = next(lib for lib in data["libraries"] if lib["file"] == "_C_cuda.abi3.so")
    assert cuda["sass"] == ["sm_80"] and cuda["ptx"] == ["compute_80"] and cuda["linked_sass"] == ["sm_75"]
    assert [d["what"] for d in data["disagreements"]] == ["archs"]
    assert "sm_90" in data["disagreements"][0]["message"]


def test_inspect_altered_library_exits_1(tmp_path, libs):
    manifest = manifest_for(libs, "sm_80", "compute_80")
    altered = {**libs, "_C.abi3.so": libs["_C.abi3.so"] + b"\0"}
    wheel = make_wheel(tmp_path / "altered.whl", altered, manifest)
    result = runner.invoke(app, ["inspect", str(wheel)], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "altered or replaced" in result.output
    with pytest.raises(ManifestError, match="_C.abi3.so"):
        read_wheel_manifest(wheel)


def test_inspect_package_directory_and_lone_library(tmp_path, libs):
    pkg = tmp_path / "site" / "prebuild"
    pkg.mkdir(parents=True)
    for name, data in libs.items():
        (pkg / name).write_bytes(data)
    lone = tmp_path / "lone.so"
    shutil.copy(pkg / "_C_cuda.abi3.so", lone)
    # No manifest beside a lone library: it is shown, nothing to disagree with.
    report = inspect_path(lone)
    assert report.manifest is None and report.ok
    assert runner.invoke(app, ["inspect", str(lone)]).exit_code == 0
    # The directory with a manifest recording PTX that is not there.
    (pkg / "_manifest.json").write_text(manifest_for(libs, "sm_80", "compute_80,compute_90").to_json())
    assert inspect_path(pkg / "_C.abi3.so").ok  # the CPU library alone agrees
    result = runner.invoke(app, ["inspect", str(pkg)], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "compute_90" in result.output
    # A library the manifest beside it does not list.
    shutil.copy(lone, pkg / "_C_other.abi3.so")
    assert not inspect_path(pkg / "_C_other.abi3.so").ok


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda p: p, "does not exist"),
        (lambda p: (p.write_text("not a zip"), p)[1], "not a readable wheel"),
        (lambda p: make_wheel(p, {"_C.abi3.so": b"x"}, None), "has no prebuild/_manifest.json"),
        (lambda p: (p.with_suffix(".so").write_text("text"), p.with_suffix(".so"))[1], "not an ELF"),
    ],
)
def test_bad_input_exits_2_with_a_message_not_a_traceback(tmp_path, setup, message):
    target = setup(tmp_path / "thing.whl")
    result = runner.invoke(app, ["inspect", str(target)])
    assert result.exit_code == 2
    assert message in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_malformed_manifest_is_bad_input(tmp_path, libs):
    wheel = make_wheel(tmp_path / "w.whl", libs, None)
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr("prebuild/_manifest.json", "{not json")
    result = runner.invoke(app, ["inspect", str(wheel)])
    assert result.exit_code == 2 and "malformed" in result.output
