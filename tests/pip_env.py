"""The environment of a pip (or uv) whose view of packages a test controls.

pip and uv also read the machine's configuration: ``PIP_*``/``UV_*`` variables (a CI image's
``PIP_FIND_LINKS``, a constraint file capping torch) and config files (``pip.conf``,
``uv.toml``). A test that means to control what they see (``--no-index``, a folder or an
index it made, a refusal or a choice it asserts) runs them with ``clean_pip_env()``, so the
outcome is the same on every machine. Importable by name: pytest puts tests/ on sys.path
(tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

# Settings that change only how pip and uv reach an index or show progress, never which
# distributions they see or what they install: kept.
KEPT = frozenset(
    {
        "PIP_CACHE_DIR",
        "PIP_NO_CACHE_DIR",
        "PIP_CERT",
        "PIP_CLIENT_CERT",
        "PIP_PROXY",
        "PIP_TIMEOUT",
        "PIP_DEFAULT_TIMEOUT",
        "PIP_RETRIES",
        "PIP_NO_COLOR",
        "PIP_PROGRESS_BAR",
        "UV_CACHE_DIR",
        "UV_NO_CACHE",
        "UV_HTTP_TIMEOUT",
        "UV_NATIVE_TLS",
        "UV_NO_PROGRESS",
    }
)
CLEAN = {
    "PIP_CONFIG_FILE": os.devnull,  # pip then reads no config file at all (global, user, site)
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",  # with no config, the check would ask pypi.org
    "UV_NO_CONFIG": "1",  # uv then reads no uv.toml or [tool.uv]
}


def clean_pip_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``base`` (default: this process's environment) with every ``PIP_*``/``UV_*`` variable
    removed but the transport ones in KEPT, no pip or uv config file read, then ``extra``
    (a test's own settings, ``PIP_NO_DEPS="1"`` say) on top. Everything else (PATH, HOME, ...)
    is kept. A new dict: ``base`` is not changed."""
    source = os.environ if base is None else base
    if not isinstance(source, Mapping):
        raise TypeError(f"base must be a mapping of names to strings, not {type(base).__name__}")
    given = {**source, **extra}
    bad = [repr(k) for k, v in given.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise TypeError(f"environment names and values must be strings: {bad}")
    kept = {k: v for k, v in source.items() if not k.startswith(("PIP_", "UV_")) or k in KEPT}
    return {**kept, **CLEAN, **extra}


def installed(python: Path) -> dict[str, str]:
    """Name -> version of every distribution ``python`` imports from: what a pip run left in
    its environment, read without asking pip (whose output differs between versions)."""
    if not Path(python).is_file():
        raise FileNotFoundError(f"no python at {python}")
    script = (
        "import json, importlib.metadata as m\n"
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    proc = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(proc.stdout)


def pip_require_hashes(python: Path | str) -> list[str]:
    # run with clean_pip_env(): the lock's wheel only, whatever the machine's pip settings
    return [
        str(python),
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-deps",
        "--require-hashes",
    ]
