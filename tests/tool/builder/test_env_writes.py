"""env_writes: what a classic build installed into its environment's site-packages itself."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from prebuild.tool.builder.env_writes import (
    env_writes_message,
    installed_distributions,
    site_dirs,
    snapshot,
    written,
)


def test_the_build_environment_s_site_packages_are_this_interpreter_s():
    dirs = site_dirs()
    assert dirs and len(dirs) == len(set(dirs))
    assert any(Path(p) in dirs for p in sys.path if p.endswith("site-packages"))


def test_new_and_rewritten_entries_are_found_and_byte_code_is_not(tmp_path):
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "torch").mkdir()
    (site / "old.py").write_text("")
    before = snapshot([site, tmp_path / "missing"])
    assert before == {
        site: {"torch": before[site]["torch"], "old.py": before[site]["old.py"]},
        tmp_path / "missing": {},
    }
    (site / "hqq_aten.so").write_bytes(b"")
    (site / "hqq_aten-0.0.0-py3.11.egg-info").mkdir()
    (site / "__pycache__").mkdir()  # an import during any build writes this
    os.utime(site / "old.py", ns=(1, 1))  # rewritten
    (site / "torch" / "__pycache__").mkdir()  # an import in a package: its folder changes
    changes = written(before, snapshot([site, tmp_path / "missing"]))
    assert changes == {site: ["hqq_aten-0.0.0-py3.11.egg-info", "hqq_aten.so", "old.py"]}
    assert written(before, before) == {}


def test_the_message_names_what_was_installed_where_and_how_to_remove_it():
    changes = {
        Path("/venv/lib/site-packages"): ["hqq_aten-0.0.0-py3.11.egg-info", "hqq_aten.so"],
        Path("/venv/lib64/site-packages"): ["x_part-1.0.dist-info", "x_part-1.0-py3.11.egg"],
    }
    assert installed_distributions(changes) == ["hqq_aten", "x_part"]
    said = env_writes_message(changes)
    assert said.startswith(
        "the project's build installed into this environment itself, outside its wheel: "
        "hqq_aten-0.0.0-py3.11.egg-info, hqq_aten.so in /venv/lib/site-packages; "
        "x_part-1.0.dist-info, x_part-1.0-py3.11.egg in /venv/lib64/site-packages"
    )
    assert said.endswith("; pip uninstall hqq_aten x_part removes them here")
    no_metadata = env_writes_message({Path("/s"): ["loose.py"]})
    assert "pip uninstall" not in no_metadata and "loose.py in /s" in no_metadata
    assert env_writes_message({}) == ""


def test_a_failure_or_refusal_is_followed_by_what_was_installed_if_anything():
    from prebuild.tool.builder.env_writes import with_installed

    assert with_installed("it failed", "") == "it failed"
    assert with_installed("it failed", "x installed y") == "it failed\n\nAlso, x installed y."


def test_a_wheel_prebuild_built_installed_meanwhile_is_not_blamed_on_the_build(tmp_path):
    """Trials installing one prebuilt wheel while another project built in the same venv:
    chamfer_dist's build was said to have installed pointnet2_cuda's wheel and its guard."""
    from prebuild.tool.builder.env_writes import installed_since

    site = tmp_path / "site-packages"
    site.mkdir()
    before = snapshot([site])
    info = site / "pointnet2_cuda-0.0.0+pt214.cu130.sm90.dist-info"
    info.mkdir()
    (info / "prebuild.json").write_text("{}")
    (info / "RECORD").write_text(
        "pointnet2_cuda.cpython-311-x86_64-linux-gnu.so,sha256=x,1\n"
        "_prebuild_guard_pointnet2_cuda/__init__.py,sha256=y,1\n"
        "_prebuild_guard_pointnet2_cuda.pth,sha256=z,1\n"
        f"{info.name}/RECORD,,\n"
    )
    for name in (
        "pointnet2_cuda.cpython-311-x86_64-linux-gnu.so",
        "_prebuild_guard_pointnet2_cuda.pth",
    ):
        (site / name).write_bytes(b"")
    (site / "_prebuild_guard_pointnet2_cuda").mkdir()
    assert installed_since(before) == ""
    # what the build itself installed is still said
    (site / "hqq_aten.so").write_bytes(b"")
    said = installed_since(before)
    assert said.startswith("the project's build installed into this environment itself") and (
        "hqq_aten.so in" in said and "pointnet2" not in said
    ), said
