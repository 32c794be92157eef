"""prebuild.tool.user_cache: where the build tool keeps what it keeps between runs."""

from __future__ import annotations

from pathlib import Path

from prebuild.tool.user_cache import user_cache_dir


def test_the_cache_is_under_xdg_cache_home_else_under_home():
    assert user_cache_dir({"XDG_CACHE_HOME": "/x", "HOME": "/h"}) == Path("/x/prebuild")
    assert user_cache_dir({"HOME": "/h"}) == Path("/h/.cache/prebuild")
    assert user_cache_dir({"XDG_CACHE_HOME": "", "HOME": "/h"}) == Path("/h/.cache/prebuild")
