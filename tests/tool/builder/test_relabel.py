"""prebuild.tool.builder.relabel: a classic project's wheel gains the local label, the torch pin and
prebuild.json, with a valid RECORD, its other files untouched."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

import pytest
from wheel.wheelfile import WheelFile

from prebuild.runtime.manifest import PROJECT_MANIFEST_NAME
from prebuild.tool.builder.relabel import add_local_label, relabel_wheel, rewrite_metadata

METADATA = """Metadata-Version: 2.1
Name: fused_ssim
Version: 1.0.0
Requires-Dist: numpy
Requires-Dist: torch>=2.0.0
Requires-Dist: torch; extra == "dev"
Requires-Dist: torchvision

A description: Version: not a header.
Requires-Dist: torch (in the body, untouched)
"""


def test_add_local_label():
    assert add_local_label("1.0.0", "pt214.cu130.sm90") == "1.0.0+pt214.cu130.sm90"
    assert add_local_label("1.0.0+abc", "pt214.cu130.sm90") == "1.0.0+abc.pt214.cu130.sm90"
    assert add_local_label("2.0rc1", "pt214.cu130.sm80.sm90") == "2.0rc1+pt214.cu130.sm80.sm90"
    # a label of its own that ours says all of (AutoAWQ_kernels' cu130) is not said twice
    assert add_local_label("0.0.9+cu130", "pt214.cu130.sm90") == "0.0.9+pt214.cu130.sm90"
    assert add_local_label("0.0.9+cu128", "pt214.cu130.sm90") == "0.0.9+cu128.pt214.cu130.sm90"


def test_rewrite_metadata_pins_torch_and_sets_the_version():
    out = rewrite_metadata(METADATA, "1.0.0+pt214.cu130.sm90", "torch>=2.14,<2.15")
    head, body = out.split("\n\n", 1)
    assert head.splitlines() == [
        "Metadata-Version: 2.1",
        "Name: fused_ssim",
        "Version: 1.0.0+pt214.cu130.sm90",
        "Requires-Dist: numpy",
        "Requires-Dist: torch>=2.14,<2.15",
        "Requires-Dist: torchvision",
    ]
    assert body == METADATA.split("\n\n", 1)[1]
    no_torch = rewrite_metadata("Name: x\nVersion: 1\n", "1+pt214", "torch>=2.14,<2.15")
    assert no_torch == "Name: x\nVersion: 1+pt214\nRequires-Dist: torch>=2.14,<2.15\n"


def make_wheel(dist: Path) -> Path:
    tree = dist / "tree"
    (tree / "fused_ssim").mkdir(parents=True)
    (tree / "fused_ssim" / "__init__.py").write_text("from fused_ssim_cuda import x\n")
    ext = tree / "fused_ssim_cuda.cpython-311-x86_64-linux-gnu.so"
    ext.write_bytes(b"\x7fELF fake")
    ext.chmod(0o755)
    info = tree / "fused_ssim-1.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(METADATA)
    (info / "WHEEL").write_text(
        "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n"
    )
    path = dist / "fused_ssim-1.0.0-cp311-cp311-linux_x86_64.whl"
    with WheelFile(path, "w") as wf:
        wf.write_files(str(tree))
    return path


def test_relabel_wheel(tmp_path):
    original = make_wheel(tmp_path / "dist")
    manifest = '{"schema": 1, "sass_archs": ["sm_90"]}\n'
    out = relabel_wheel(
        original, tmp_path / "out", "pt214.cu130.sm90", "torch>=2.14,<2.15", manifest
    )
    assert out.name == "fused_ssim-1.0.0+pt214.cu130.sm90-cp311-cp311-linux_x86_64.whl"
    assert [p.name for p in (tmp_path / "out").iterdir()] == [out.name]  # nothing partial left
    with WheelFile(out) as wf:  # reading checks every file against RECORD
        names = set(wf.namelist())
        info = "fused_ssim-1.0.0+pt214.cu130.sm90.dist-info"
        assert {
            f"{info}/METADATA",
            f"{info}/RECORD",
            f"{info}/{PROJECT_MANIFEST_NAME}",
            "fused_ssim/__init__.py",
        } <= names
        for name in names:
            wf.read(name)
        assert wf.read(f"{info}/{PROJECT_MANIFEST_NAME}").decode() == manifest
        metadata = wf.read(f"{info}/METADATA").decode()
        assert (
            "Version: 1.0.0+pt214.cu130.sm90" in metadata
            and "Requires-Dist: torch>=2.14,<2.15" in metadata
        )
        assert wf.read("fused_ssim_cuda.cpython-311-x86_64-linux-gnu.so") == b"\x7fELF fake"
    with zipfile.ZipFile(out) as zf:
        mode = zf.getinfo("fused_ssim_cuda.cpython-311-x86_64-linux-gnu.so").external_attr >> 16
        assert mode & stat.S_IXUSR


def test_a_wheel_retagged_for_every_python_says_so_in_its_name_and_wheel_file(tmp_path):
    """No torch pin (a wheel calling nothing of torch's keeps the project's requirement) and a
    new tag: the name's and WHEEL's, RECORD still right."""
    out = relabel_wheel(
        make_wheel(tmp_path / "dist"), tmp_path / "out", "cu130.sm90", None, "{}\n",
        tag="py310-none-linux_x86_64",
    )  # fmt: skip
    assert out.name == "fused_ssim-1.0.0+cu130.sm90-py310-none-linux_x86_64.whl"
    with WheelFile(out) as wf:
        for name in wf.namelist():
            wf.read(name)
        info = "fused_ssim-1.0.0+cu130.sm90.dist-info"
        wheel_info = wf.read(f"{info}/WHEEL").decode()
        metadata = wf.read(f"{info}/METADATA").decode()
    assert [x for x in wheel_info.splitlines() if x.startswith("Tag:")] == [
        "Tag: py310-none-linux_x86_64"
    ]
    assert "Root-Is-Purelib: false" in wheel_info
    assert metadata == METADATA.replace("Version: 1.0.0", "Version: 1.0.0+cu130.sm90")


def test_relabel_refuses_a_wheel_whose_record_does_not_match(tmp_path):
    original = make_wheel(tmp_path / "dist")
    tampered = tmp_path / "tampered.whl"
    with (
        zipfile.ZipFile(original) as src,
        zipfile.ZipFile(tampered.with_name(original.name), "w") as dst,
    ):
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, b"changed" if item.filename.endswith("__init__.py") else data)
    with pytest.raises(Exception, match="(?i)hash"):
        relabel_wheel(
            tampered.with_name(original.name), tmp_path / "out", "pt214", "torch>=2.14,<2.15", {}
        )


def test_a_guard_follows_its_dist_info_when_the_version_changes(tmp_path):
    """A classic wheel's guard names where its manifest is (its .dist-info): a variant twin's new
    version renames that directory, and the guard's line must name the new one."""
    from prebuild.tool.builder.relabel import rewrite_wheel

    per_arch = "fused_ssim-1.0.0+pt214.cu130.sm90.dist-info"
    line = f"import g; g.install({{'manifest': '{per_arch}/prebuild.json'}})\n"
    guarded = relabel_wheel(
        make_wheel(tmp_path / "dist"), tmp_path / "per-arch", "pt214.cu130.sm90",
        "torch>=2.14,<2.15", "{}\n", files={"_prebuild_guard_fused_ssim.pth": line},
    )  # fmt: skip
    twin = rewrite_wheel(guarded, tmp_path / "twin", version="1.0.0+pt214.cu130")
    with WheelFile(twin) as wf:
        text = wf.read("_prebuild_guard_fused_ssim.pth").decode()
        assert "fused_ssim-1.0.0+pt214.cu130.dist-info/prebuild.json" in text, text
        assert "fused_ssim-1.0.0+pt214.cu130.dist-info/METADATA" in wf.namelist()
