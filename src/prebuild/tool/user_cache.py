"""prebuild's folder in the user's cache: what the build tool keeps between runs (the farm's
environments and logs, the preflight's answers). Never used by the runtime, which writes nothing."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def user_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/prebuild``, else ``~/.cache/prebuild`` (``~`` from ``$HOME``)."""
    env = os.environ if environ is None else environ
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]) / "prebuild"
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".cache" / "prebuild"
