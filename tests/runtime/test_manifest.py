"""prebuild.runtime.manifest: the one reader and writer of ``_manifest.json``."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from prebuild.runtime.arch import Arch
from prebuild.runtime.manifest import (
    MANIFEST_NAME,
    SCHEMA_VERSION,
    Library,
    Manifest,
    ManifestError,
    check_libraries,
    library_path,
    read_manifest,
    sha256_file,
    verify_libraries,
)


def make_manifest(**overrides) -> Manifest:
    fields = dict(
        package_version="0.1.0+cu130.sm80.sm90.ptx90",
        torch_target="2.13",
        built_with_torch="2.13.0+cpu",
        cuda_version="13.0",
        sass_archs=(Arch(8, 0), Arch(9, 0), Arch(9, 0, "a")),
        ptx_archs=(Arch(9, 0),),
        libraries=(
            Library("_C.abi3.so", "cpu", "a" * 64),
            Library("_C_cuda.abi3.so", "cuda", "b" * 64),
        ),
        flags={"cxx": ["-O3", "-fPIC"], "nvcc": ["-gencode=arch=compute_80,code=sm_80"]},
    )
    fields.update(overrides)
    return Manifest(**fields)


def good_data() -> dict:
    return json.loads(make_manifest().to_json())


# --- round trip --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "manifest",
    [
        make_manifest(),
        make_manifest(
            cuda_version=None,
            sass_archs=(),
            ptx_archs=(),
            flags={},
            libraries=(Library("_C.abi3.so", "cpu", "c" * 64),),
        ),
        make_manifest(sass_archs=(Arch(10, 0, "f"), Arch(12, 0)), ptx_archs=(Arch(12, 0),)),
        make_manifest(
            libraries=(
                Library("_C.abi3.so", "cpu", "a" * 64, 270144),
                Library("_C_cuda.abi3.so", "cuda", "b" * 64, 0),
            )
        ),
    ],
)
def test_json_round_trip(manifest):
    text = manifest.to_json()
    assert Manifest.from_json(text) == manifest
    assert text.endswith("\n")


def test_json_layout():
    data = good_data()
    assert data["schema"] == SCHEMA_VERSION
    assert data["sass_archs"] == ["sm_80", "sm_90", "sm_90a"]
    assert data["ptx_archs"] == ["compute_90"]
    assert data["libraries"][0] == {
        "file": "_C.abi3.so",
        "kind": "cpu",
        "sha256": "a" * 64,
        "size": None,
    }
    # Manifests written before sizes were recorded have no "size" key: still readable.
    del data["libraries"][0]["size"]
    assert Manifest.from_json(json.dumps(data)).libraries[0].size is None


def test_write_and_read_manifest(tmp_path):
    manifest = make_manifest()
    path = manifest.write(tmp_path)
    assert path == tmp_path / MANIFEST_NAME
    assert read_manifest(tmp_path) == manifest


def test_the_packaged_manifest_is_readable():
    from pathlib import Path

    import prebuild

    manifest = read_manifest(Path(prebuild.__file__).parent)
    assert manifest.library("cpu") is not None


def test_has_cuda_and_library_lookup():
    manifest = make_manifest()
    assert manifest.has_cuda
    assert manifest.library("cuda").file == "_C_cuda.abi3.so"
    assert manifest.library("rocm") is None
    cpu_only = make_manifest(libraries=(Library("_C.abi3.so", "cpu", "a" * 64),))
    assert not cpu_only.has_cuda


# --- malformed manifests -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "{", "not json", "[]", "null", "42", '"a string"', "{'single': 'quotes'}"],
)
def test_malformed_json(text):
    with pytest.raises(ManifestError):
        Manifest.from_json(text)


@pytest.mark.parametrize("schema", [None, 0, 2, "1", 1.5])
def test_wrong_schema(schema):
    data = good_data()
    if schema is None:
        del data["schema"]
    else:
        data["schema"] = schema
    with pytest.raises(ManifestError, match="schema"):
        Manifest.from_json(json.dumps(data))


@pytest.mark.parametrize(
    "key",
    [
        "package_version",
        "torch_target",
        "built_with_torch",
        "cuda_version",
        "sass_archs",
        "ptx_archs",
        "libraries",
        "op_namespace",
    ],
)
def test_missing_key(key):
    data = good_data()
    del data[key]
    with pytest.raises(ManifestError, match=key):
        Manifest.from_json(json.dumps(data))


def test_flags_are_optional():
    data = good_data()
    del data["flags"]
    assert Manifest.from_json(json.dumps(data)).flags == {}


@pytest.mark.parametrize(
    "change",
    [
        {"sass_archs": ["sm_80", "sm_8"]},
        {"sass_archs": ["garbage"]},
        {"ptx_archs": ["compute_80b"]},
        {"sass_archs": "sm_80"},  # a string, not a list
        {"sass_archs": [80]},
        {"sass_archs": None},
        {"libraries": [{"file": "_C.abi3.so", "kind": "cpu"}]},  # no sha256
        {"libraries": [{"file": "_C.abi3.so", "kind": "cpu", "sha256": "a" * 64, "size": -1}]},
        {"libraries": [{"file": "_C.abi3.so", "kind": "cpu", "sha256": "a" * 64, "size": "12"}]},
        {"libraries": [{"file": "_C.abi3.so", "kind": "cpu", "sha256": "a" * 64, "size": True}]},
        {"libraries": ["_C.abi3.so"]},
        {"libraries": None},
        {"flags": None},
        {"flags": {"cxx": 3}},
        {"torch_target": "banana"},
        {"torch_target": 2.13},
        {"cuda_version": "thirteen"},
        {"cuda_version": 13.0},
        {"package_version": "not a version"},
        {"op_namespace": "pre-build"},
        {"cuda_version": None},  # with a CUDA library listed
    ],
)
def test_bad_contents(change):
    data = good_data()
    data.update(change)
    with pytest.raises(ManifestError, match="malformed"):
        Manifest.from_json(json.dumps(data))


def test_manifest_error_is_value_error():
    assert issubclass(ManifestError, ValueError)


def test_read_manifest_missing(tmp_path):
    with pytest.raises(ManifestError, match="does not exist"):
        read_manifest(tmp_path)
    with pytest.raises(ManifestError):
        read_manifest(tmp_path / "no" / "such" / "dir")


def test_read_manifest_unreadable(tmp_path):
    (tmp_path / MANIFEST_NAME).mkdir()  # a directory where the file should be
    with pytest.raises(ManifestError):
        read_manifest(tmp_path)


def test_read_manifest_not_utf8(tmp_path):
    (tmp_path / MANIFEST_NAME).write_bytes(b"\xff\xfe{")
    with pytest.raises(ManifestError):
        read_manifest(tmp_path)


# --- libraries against the files beside the manifest -------------------------------------


@pytest.fixture
def package(tmp_path):
    data = bytes(range(256)) * 4096  # 1 MiB: more than one read chunk
    (tmp_path / "_C.abi3.so").write_bytes(data)
    (tmp_path / "_C_cuda.abi3.so").write_bytes(b"cuda" * 1000)
    manifest = make_manifest(
        libraries=(
            Library("_C.abi3.so", "cpu", hashlib.sha256(data).hexdigest()),
            Library("_C_cuda.abi3.so", "cuda", sha256_file(tmp_path / "_C_cuda.abi3.so")),
        )
    )
    return tmp_path, manifest


def test_sha256_file(tmp_path):
    path = tmp_path / "f"
    data = b"x" * ((1 << 20) + 17)
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()


def test_verify_libraries_ok(package):
    directory, manifest = package
    verify_libraries(directory, manifest)


def test_verify_libraries_missing_file(package):
    directory, manifest = package
    (directory / "_C_cuda.abi3.so").unlink()
    with pytest.raises(
        ManifestError, match="_C_cuda.abi3.so is listed in the manifest but missing"
    ):
        verify_libraries(directory, manifest)


def test_verify_libraries_truncated_file(package):
    directory, manifest = package
    path = directory / "_C.abi3.so"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ManifestError, match="_C.abi3.so does not match the manifest"):
        verify_libraries(directory, manifest)


def test_verify_libraries_changed_bytes(package):
    directory, manifest = package
    path = directory / "_C.abi3.so"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ManifestError) as info:
        verify_libraries(directory, manifest)
    message = str(info.value)
    assert "sha256" in message
    assert manifest.library("cpu").sha256[:12] in message
    assert sha256_file(path)[:12] in message


def test_verify_libraries_directory_instead_of_file(package):
    directory, manifest = package
    (directory / "_C_cuda.abi3.so").unlink()
    (directory / "_C_cuda.abi3.so").mkdir()
    with pytest.raises(ManifestError, match="missing"):
        verify_libraries(directory, manifest)


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../_C.abi3.so", "sub/_C.abi3.so", "/etc/passwd", "..\\evil.dll"]
)
def test_library_path_refuses_non_plain_names(tmp_path, name):
    with pytest.raises(ManifestError, match="not a plain file name"):
        library_path(tmp_path, Library(name, "cpu", "0" * 64))


def test_library_path_refusal_also_stops_verification(tmp_path):
    manifest = make_manifest(libraries=(Library("../outside.so", "cpu", "0" * 64),))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "outside.so").write_bytes(b"x")
    with pytest.raises(ManifestError, match="not a plain file name"):
        verify_libraries(tmp_path / "pkg", manifest)


def test_library_path_plain_name(tmp_path):
    assert library_path(tmp_path, Library("_C.abi3.so", "cpu", "0")) == tmp_path / "_C.abi3.so"
    assert library_path(tmp_path, Library("..._x.so", "cpu", "0")) == tmp_path / "..._x.so"


# --- the import-time check: sizes -------------------------------------------------------


@pytest.fixture
def sized_package(package):
    directory, manifest = package
    sized = tuple(
        Library(lib.file, lib.kind, lib.sha256, (directory / lib.file).stat().st_size)
        for lib in manifest.libraries
    )
    return directory, make_manifest(libraries=sized)


def test_check_libraries_catches_missing_and_truncated_by_size(sized_package):
    directory, manifest = sized_package
    check_libraries(directory, manifest)
    path = directory / "_C.abi3.so"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(
        ManifestError,
        match=r"_C.abi3.so does not match the manifest \(1000 bytes, expected 1048576\)",
    ):
        check_libraries(directory, manifest)
    path.unlink()
    with pytest.raises(ManifestError, match="missing"):
        check_libraries(directory, manifest)


def test_same_size_change_passes_the_import_check_and_fails_verification(sized_package):
    """The documented trade (docs/guarantees.md): import reads no library bytes; a change
    that keeps the size is found by verify_libraries (prebuild doctor / inspect)."""
    directory, manifest = sized_package
    path = directory / "_C.abi3.so"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    check_libraries(directory, manifest)
    with pytest.raises(ManifestError, match="sha256"):
        verify_libraries(directory, manifest)


def test_check_libraries_hashes_when_no_size_is_recorded(package):
    """Manifests of older builds carry no sizes: the import check then hashes, as before."""
    directory, manifest = package
    path = directory / "_C.abi3.so"
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="sha256"):
        check_libraries(directory, manifest)


def test_check_libraries_reads_no_library_bytes(sized_package, monkeypatch):
    directory, manifest = sized_package
    import prebuild.runtime.manifest as m

    monkeypatch.setattr(m, "sha256_file", lambda path: pytest.fail(f"hashed {path} at import"))
    check_libraries(directory, manifest)


def classic_manifest():
    """A classic wheel's manifest with no libraries, built against torch 2.14.1+cu130."""
    from prebuild.runtime.manifest import ProjectManifest

    return ProjectManifest(
        kind="classic",
        torch="2.14.1+cu130",
        torch_cuda="13.0",
        cuda="13.0",
        python_tag="cp311-cp311-linux_x86_64",
        sass_archs=(),
        ptx_archs=(),
        libraries=(),
    )


def test_a_project_manifest_says_what_its_libraries_hold():
    """``code``: GPU code (the default, and what manifests written before host wheels mean),
    CUDA host code or CPU code; an unknown one names the fix."""
    from prebuild.runtime.manifest import CODES, GPU_CODE, ProjectManifest

    base = classic_manifest()
    assert base.code == GPU_CODE and not base.host_only
    for code in CODES:
        m = ProjectManifest.from_json(dataclasses.replace(base, code=code).to_json())
        assert m.code == code and m.host_only == (code != GPU_CODE)
        assert m.needs_cuda == (code != "cpu")
    data = json.loads(base.to_json())
    del data["code"]
    assert ProjectManifest.from_json(json.dumps(data)).code == GPU_CODE
    data["code"] = "fpga"
    with pytest.raises(ManifestError, match="'fpga'.*upgrade prebuild"):
        ProjectManifest.from_json(json.dumps(data))
    # the system libraries its libraries link, read back; none in a manifest written before
    linked = dataclasses.replace(base, system_libraries=("libklu.so.2", "libaio.so.1"))
    assert ProjectManifest.from_json(linked.to_json()).system_libraries == linked.system_libraries
    data = json.loads(base.to_json())
    del data["system_libraries"]
    assert ProjectManifest.from_json(json.dumps(data)).system_libraries == ()
    # and those copied into the wheel (bundle.py)
    carried = dataclasses.replace(base, bundled_libraries=("libklu.so.2", "libamd.so.3"))
    assert ProjectManifest.from_json(carried.to_json()).bundled_libraries == (
        "libklu.so.2",
        "libamd.so.3",
    )
    del data["bundled_libraries"]
    assert ProjectManifest.from_json(json.dumps(data)).bundled_libraries == ()
    # and the changes prebuild made to its code to build it (api_mends.py)
    mended = dataclasses.replace(base, source_changes=("a.cu:80: x.type() -> x.scalar_type()",))
    assert ProjectManifest.from_json(mended.to_json()).source_changes == mended.source_changes
    del data["source_changes"]
    assert ProjectManifest.from_json(json.dumps(data)).source_changes == ()


def test_a_project_manifest_says_which_torch_abi_its_libraries_use():
    """The C++ ABI (the default, and what manifests written before mean): its torch minor
    release alone; the stable ABI: its target and every later torch; no torch ABI: any torch.
    Unknown: the fix."""
    from prebuild.runtime.manifest import CXX_ABI, NO_TORCH_ABI, STABLE_ABI, ProjectManifest

    base = classic_manifest()
    assert base.torch_abi == CXX_ABI and not base.stable_abi and base.torch_needed == "2.14"
    assert [base.torch_fits(v) for v in ("2.14.0", "2.14.1+cpu", "2.13.0", "2.15.0")] == [
        True, True, False, False,
    ]  # fmt: skip
    stable = dataclasses.replace(base, torch_abi=STABLE_ABI, torch_target="2.10")
    read = ProjectManifest.from_json(stable.to_json())
    assert read == stable and read.stable_abi and read.torch_needed == ">= 2.10"
    assert [read.torch_fits(v) for v in ("2.9.1", "2.10.0", "2.14.1", "2.15.0+cu132", "3.0")] == [
        False, True, True, True, True,
    ]  # fmt: skip
    data = json.loads(base.to_json())
    del data["torch_abi"], data["torch_target"]
    assert ProjectManifest.from_json(json.dumps(data)).torch_abi == CXX_ABI
    data["torch_abi"] = "abi4"
    with pytest.raises(ManifestError, match="'abi4'.*upgrade prebuild"):
        ProjectManifest.from_json(json.dumps(data))
    free = dataclasses.replace(base, torch_abi=NO_TORCH_ABI)
    read = ProjectManifest.from_json(free.to_json())
    assert read == free and read.torch_free and not read.stable_abi
    assert (read.torch_needed, read.torch_spec, read.torch_target) == ("of any release", "", None)
    assert all(read.torch_fits(v) for v in ("1.13.1", "2.9.1", "2.14.1+cpu", "3.0"))
    assert (base.torch_spec, stable.torch_spec) == ("==2.14.*", ">=2.10")
    data = json.loads(stable.to_json())
    data["torch_target"] = "newest"
    with pytest.raises(ManifestError, match="torch_target"):
        ProjectManifest.from_json(json.dumps(data))
