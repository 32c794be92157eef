"""outputs.py: what a build leaves in its output directory when it fails."""

from __future__ import annotations

import pytest

from prebuild.tool.builder.outputs import prepare_output_dir, removed_if_left_empty


def test_directories_made_for_a_failed_build_go_unless_something_was_written(tmp_path):
    (tmp_path / "kept").mkdir()
    out = tmp_path / "kept" / "a" / "b"
    with pytest.raises(RuntimeError), removed_if_left_empty(out):
        prepare_output_dir(out)
        raise RuntimeError("the build failed")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["kept"]  # only what was there

    with pytest.raises(KeyboardInterrupt), removed_if_left_empty(out):
        prepare_output_dir(out)
        (out / "first.whl").write_text("written before the interrupt")
        raise KeyboardInterrupt
    assert (out / "first.whl").is_file()

    fresh = tmp_path / "fresh"
    with removed_if_left_empty(fresh):  # success: the empty directory stays
        prepare_output_dir(fresh)
    assert fresh.is_dir()
