"""prebuild.tool.inspection and `prebuild inspect`: made-up libraries (a real ELF with a
.nv_fatbin section added by objcopy) in made-up wheels, against their manifests."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from typer.testing import CliRunner

import prebuild
from prebuild.runtime.arch import Arch, parse_arch_list
from prebuild.runtime.manifest import (
    BuiltLibrary,
    CompilerCall,
    Library,
    Manifest,
    ManifestError,
    ProjectManifest,
)
from prebuild.tool.cli import app
from prebuild.tool.fatbin import EmbeddedCode, build_container, build_entry
from prebuild.tool.inspection import (
    FoundLibrary,
    InspectionError,
    compare,
    demangled,
    dynamic_symbols,
    folder_exports,
    inspect_path,
    library_code,
    read_wheel_manifest,
)

SRC = "/src/csrc/ssim/ssim_cuda.cu"
CPU_SO = Path(prebuild.__file__).parent / "_C.abi3.so"  # a real ELF without GPU code
runner = CliRunner()


def manifest_for(libs: dict[str, bytes], sass="sm_80", ptx="") -> Manifest:
    return Manifest(
        package_version="0.1.0+cu130.sm80",
        torch_target="2.13",
        built_with_torch="2.13.0+cpu",
        cuda_version="13.0",
        sass_archs=parse_arch_list(sass),
        ptx_archs=parse_arch_list(ptx),
        libraries=tuple(
            Library(name, "cuda" if "cuda" in name else "cpu", hashlib.sha256(data).hexdigest())
            for name, data in libs.items()
        ),
    )


# --- compare: pure ----------------------------------------------------------------------


def found(name: str, sass=(), ptx=(), linked=(), sha="0" * 64) -> FoundLibrary:
    return FoundLibrary(name, sha, EmbeddedCode(tuple(sass), tuple(ptx), tuple(linked)))


def test_compare_agreement_ignores_linked_code():
    m = manifest_for({"_C.abi3.so": b"", "_C_cuda.abi3.so": b""}, "sm_80,sm_90", "compute_90")
    sha = {lib.file: lib.sha256 for lib in m.libraries}
    libs = [
        found("_C.abi3.so", sha=sha["_C.abi3.so"]),
        found("_C_cuda.abi3.so", m.sass_archs, m.ptx_archs, [Arch(7, 5)], sha["_C_cuda.abi3.so"]),
    ]
    assert compare(m, libs) == []


def test_compare_names_every_disagreement():
    m = manifest_for({"_C.abi3.so": b"", "_C_cuda.abi3.so": b""}, "sm_80,sm_90", "compute_90")
    libs = [
        found("_C.abi3.so", [Arch(8, 0)]),
        found("_C_cuda.abi3.so", [Arch(8, 0)]),
        found("_C_extra.abi3.so"),
    ]
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
    subprocess.run(
        ["objcopy", "--add-section", f".nv_fatbin={blob}", str(CPU_SO), str(out)], check=True
    )
    return out.read_bytes()


@pytest.fixture
def libs(tmp_path) -> dict[str, bytes]:
    cuda = elf_with_fatbin(
        tmp_path,
        "_C_cuda.abi3.so",
        build_container(build_entry("sass", Arch(7, 5)))
        + build_container(
            build_entry("ptx", Arch(8, 0), SRC), build_entry("sass", Arch(8, 0), SRC)
        ),
    )
    return {"_C.abi3.so": CPU_SO.read_bytes(), "_C_cuda.abi3.so": cuda}


def make_wheel(path: Path, libs: dict[str, bytes], manifest: Manifest | None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in libs.items():
            zf.writestr(f"prebuild/{name}", data)
        if manifest is not None:
            zf.writestr("prebuild/_manifest.json", manifest.to_json())
    return path


def test_library_code_reads_the_elf_section(libs):
    assert library_code(libs["_C_cuda.abi3.so"]) == EmbeddedCode(
        (Arch(8, 0),), (Arch(8, 0),), (Arch(7, 5),)
    )
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


def test_inspect_says_the_c_and_cpp_runtimes_the_libraries_need(tmp_path, libs):
    """The newest glibc and libstdc++ symbol versions any library references: a machine with
    older ones cannot load it (a wheel built on a newer machine than torch's manylinux)."""
    from prebuild.runtime.c_runtimes import describe
    from prebuild.tool.inspection import runtime_needs

    needs = runtime_needs(CPU_SO.read_bytes())  # prebuild's CPU library, built on this machine
    assert {"GLIBC", "GLIBCXX"} <= needs.keys(), needs
    wheel = make_wheel(tmp_path / "ok.whl", libs, manifest_for(libs, "sm_80", "compute_80"))
    result = runner.invoke(app, ["inspect", str(wheel)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    said = f"Needs at least {describe(needs)} to load."
    assert said in " ".join(result.output.split()), result.output
    data = json.loads(runner.invoke(app, ["inspect", str(wheel), "--json"]).stdout)
    assert data["runtime"] == needs
    assert [lib["runtime"] for lib in data["libraries"]] == [needs, needs]  # the same ELF


def test_inspect_wheel_whose_manifest_lies_exits_1(tmp_path, libs):
    wheel = make_wheel(tmp_path / "lie.whl", libs, manifest_for(libs, "sm_80,sm_90", "compute_80"))
    result = runner.invoke(app, ["inspect", str(wheel), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["ok"] is False
    assert data["manifest"]["sass_archs"] == ["sm_80", "sm_90"]
    cuda = next(lib for lib in data["libraries"] if lib["file"] == "_C_cuda.abi3.so")
    assert (
        cuda["sass"] == ["sm_80"]
        and cuda["ptx"] == ["compute_80"]
        and cuda["linked_sass"] == ["sm_75"]
    )
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
    (pkg / "_manifest.json").write_text(
        manifest_for(libs, "sm_80", "compute_80,compute_90").to_json()
    )
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
        (lambda p: make_wheel(p, {"_C.abi3.so": b"x"}, None), "has no package _manifest.json"),
        (
            lambda p: (p.with_suffix(".so").write_text("text"), p.with_suffix(".so"))[1],
            "not an ELF",
        ),
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


# --- another project's wheel (.dist-info/prebuild.json) and installed distributions --------

CLASSIC_SO = "plain_ext/_C.cpython-311-x86_64-linux-gnu.so"
DIST_INFO = "plain_ext-0.1.0+pt214.cu130.sm80.dist-info"


def classic_manifest(files: dict[str, bytes], sass="sm_80", ptx="") -> ProjectManifest:
    """As `prebuild wheel --arch ... PROJECT` records it: the archs per library, read back."""
    return ProjectManifest(
        kind="classic",
        torch="2.14.1+cu130",
        torch_cuda="13.0",
        cuda="13.0",
        python_tag="cp311-cp311-linux_x86_64",
        sass_archs=parse_arch_list(sass),
        ptx_archs=parse_arch_list(ptx),
        libraries=tuple(
            BuiltLibrary(
                name,
                hashlib.sha256(data).hexdigest(),
                len(data),
                parse_arch_list(sass),
                parse_arch_list(ptx),
            )
            for name, data in files.items()
        ),
        nvcc_calls=(
            CompilerCall(
                ("-gencode=arch=compute_75,code=sm_75", "k.cu"),
                ("-gencode=arch=compute_80,code=sm_80", "k.cu"),
            ),
        ),
    )


@pytest.fixture
def classic_so(tmp_path) -> bytes:
    # Unnamed SASS entries (no -lineinfo, as torch extensions are built) count as the library's own.
    return elf_with_fatbin(tmp_path, "classic.so", build_container(build_entry("sass", Arch(8, 0))))


def make_classic_wheel(path: Path, files: dict[str, bytes], manifest: ProjectManifest) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(
            f"{DIST_INFO}/METADATA",
            "Metadata-Version: 2.1\nName: plain_ext\nVersion: 0.1.0+pt214.cu130.sm80\n",
        )
        zf.writestr(f"{DIST_INFO}/prebuild.json", manifest.to_json())
    return path


def test_project_manifest_round_trips_and_refuses_what_it_does_not_know(classic_so):
    m = classic_manifest({CLASSIC_SO: classic_so}, "sm_80,sm_90", "compute_90")
    assert ProjectManifest.from_json(m.to_json()) == m and m.torch_minor == "2.14"
    data = json.loads(m.to_json())
    for change, message in [
        ({"schema": 2}, "schema 2"),
        ({"kind": "native"}, "upgrade prebuild"),
        ({"torch": "two"}, "malformed"),
        ({"sass_archs": ["sm_8"]}, "malformed"),
    ]:
        with pytest.raises(ManifestError, match=message):
            ProjectManifest.from_json(json.dumps({**data, **change}))
    escape = {**data, "libraries": [{**data["libraries"][0], "file": "../../etc/x.so"}]}
    with pytest.raises(ManifestError, match="relative path"):
        ProjectManifest.from_json(json.dumps(escape))


def test_inspect_another_projects_wheel(tmp_path, classic_so):
    files = {CLASSIC_SO: classic_so, "plain_ext/__init__.py": b""}
    libs = {CLASSIC_SO: classic_so}
    wheel = make_classic_wheel(tmp_path / "ok.whl", files, classic_manifest(libs))
    result = runner.invoke(app, ["inspect", str(wheel)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert (
        "plain_ext 0.1.0+pt214.cu130.sm80: a classic build by prebuild for torch 2.14"
        in result.output
    )
    assert "match the manifest" in result.output
    data = json.loads(runner.invoke(app, ["inspect", str(wheel), "--json"]).stdout)
    assert data["manifest"]["kind"] == "classic" and data["manifest"]["torch"] == "2.14.1+cu130"
    assert data["libraries"][0]["file"] == CLASSIC_SO and data["libraries"][0]["kind"] == "cuda"
    assert (
        data["libraries"][0]["sass"] == ["sm_80"] and data["libraries"][0]["linked_sass"] == []
    )  # all its own
    assert data["manifest"]["system_libraries"] == [] and "needs the system" not in result.output
    # one that links a system library says so
    linked = dataclasses.replace(
        classic_manifest(libs),
        system_libraries=("libmpi.so.40",),
        bundled_libraries=("libklu.so.2",),
        source_changes=("a.cu:80: x.type() -> x.scalar_type()", "a.cu:90: AT_CHECK -> TORCH_CHECK"),
    )
    klu = make_classic_wheel(tmp_path / "klu.whl", files, linked)
    result = runner.invoke(app, ["inspect", str(klu)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert (
        "; carries the build machine's libklu.so.2; needs the system's libmpi.so.40; its code "
        "changed by prebuild in 2 places to build (source_changes)"
        in " ".join(result.output.split())
    )
    data = json.loads(runner.invoke(app, ["inspect", str(klu), "--json"]).stdout)
    assert data["manifest"]["bundled_libraries"] == ["libklu.so.2"]
    assert data["manifest"]["source_changes"][1] == "a.cu:90: AT_CHECK -> TORCH_CHECK"
    # one whose libraries call nothing of torch's serves any torch
    free = make_classic_wheel(
        tmp_path / "free.whl", files, dataclasses.replace(classic_manifest(libs), torch_abi="none")
    )
    result = runner.invoke(app, ["inspect", str(free)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert (
        "a classic build by prebuild for torch of any release (no torch ABI, built with "
        "2.14.1+cu130)" in " ".join(result.output.split())
    )
    data = json.loads(runner.invoke(app, ["inspect", str(free), "--json"]).stdout)
    assert data["manifest"]["torch_abi"] == "none"
    # A manifest claiming sm_90 too: the library holds sm_80 only.
    lying = make_classic_wheel(tmp_path / "lie.whl", files, classic_manifest(libs, "sm_80,sm_90"))
    result = runner.invoke(app, ["inspect", str(lying)], env={"COLUMNS": "250"})
    assert (
        result.exit_code == 1
        and "SASS [sm_80] inside, manifest says [sm_80, sm_90]" in " ".join(result.output.split())
    )
    # A library the manifest does not list.
    extra = make_classic_wheel(
        tmp_path / "extra.whl",
        {**files, "plain_ext/_D.so": CPU_SO.read_bytes()},
        classic_manifest(libs),
    )
    assert not inspect_path(extra).ok
    with pytest.raises(ManifestError, match="another project's wheel"):
        read_wheel_manifest(wheel)


def test_inspect_an_installed_distribution_by_name(tmp_path, classic_so, monkeypatch):
    site = tmp_path / "site"
    (site / "plain_ext").mkdir(parents=True)
    (site / CLASSIC_SO).write_bytes(classic_so)
    info = site / DIST_INFO
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: plain_ext\nVersion: 0.1.0+pt214.cu130.sm80\n"
    )
    (info / "prebuild.json").write_text(classic_manifest({CLASSIC_SO: classic_so}).to_json())
    monkeypatch.syspath_prepend(str(site))
    result = runner.invoke(app, ["inspect", "plain-ext"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "for torch 2.14" in result.output and "sm_80" in result.output
    (site / CLASSIC_SO).write_bytes(classic_so + b"\0")  # damaged after installing
    result = runner.invoke(app, ["inspect", "plain_ext"], env={"COLUMNS": "250"})
    assert result.exit_code == 1 and "altered or replaced" in result.output
    (site / CLASSIC_SO).unlink()
    assert "missing" in runner.invoke(app, ["inspect", "plain_ext"], env={"COLUMNS": "250"}).output
    for name, message in [
        ("no-such-project", "neither a path nor an installed distribution"),
        ("typer", "carries no prebuild.json"),
    ]:
        result = runner.invoke(app, ["inspect", name])
        assert result.exit_code == 2 and message in result.output, result.output


def test_a_folder_s_exports_are_its_libraries_defined_names(tmp_path):
    shutil.copyfile(CPU_SO, tmp_path / "libone.so")
    (tmp_path / "notes.txt").write_text("not a library")
    defined, _ = dynamic_symbols(CPU_SO.read_bytes())
    with CPU_SO.open("rb") as f:  # an open file reads as its bytes do
        assert dynamic_symbols(f)[0] == defined
    assert folder_exports(tmp_path) == defined and defined


def _symbols_one_by_one(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """What pyelftools says of each symbol, one object per name (the oracle)."""
    defined, undefined = set(), set()
    with path.open("rb") as f:
        for s in ELFFile(f).get_section_by_name(".dynsym").iter_symbols():
            if s.name:
                (undefined if s["st_shndx"] == "SHN_UNDEF" else defined).add(s.name)
    return frozenset(defined), frozenset(undefined)


def test_symbols_read_in_bulk_are_those_pyelftools_reads_one_by_one(tmp_path):
    """dynamic_symbols unpacks the table itself (fast): the same names as the library's own
    reading, for a 64-bit library and a 32-bit one (the other entry layout)."""
    source = tmp_path / "one.c"
    source.write_text(
        "int mine(void) { return 1; }\nextern int theirs(void);\nint both(void) { return theirs(); }\n"
    )
    library = tmp_path / "lib32.so"
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run(
        [cc, "-m32", "-shared", "-fPIC", "-nostdlib", str(source), "-o", str(library)], check=True
    )
    assert dynamic_symbols(library.read_bytes()) == _symbols_one_by_one(library)
    assert dynamic_symbols(library.read_bytes()) == (
        frozenset({"mine", "both"}),
        frozenset({"theirs"}),
    )
    assert dynamic_symbols(CPU_SO.read_bytes()) == _symbols_one_by_one(CPU_SO)
    assert dynamic_symbols(b"not ELF") == (frozenset(), frozenset())


def test_names_are_demangled_by_cxxfilt_or_left_as_they_are(monkeypatch):
    if shutil.which("c++filt"):
        assert demangled(["_Z3fooi", "plain"]) == {"_Z3fooi": "foo(int)", "plain": "plain"}
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert demangled(["_Z3fooi"]) == {"_Z3fooi": "_Z3fooi"}
