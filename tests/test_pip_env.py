"""clean_pip_env: a pip that reads none of the machine's pip or uv settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pip_env import clean_pip_env, installed

MACHINE = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/someone",
    "PIP_FIND_LINKS": "/opt/wheels",
    "PIP_INDEX_URL": "https://mirror.example/simple",
    "PIP_EXTRA_INDEX_URL": "file:///opt/pypi/simple",
    "PIP_NO_INDEX": "1",
    "PIP_CONSTRAINT": "/etc/torch-cap.txt",
    "PIP_REQUIRE_VIRTUALENV": "1",
    "PIP_PRE": "1",
    "PIP_CONFIG_FILE": "/etc/other-pip.conf",
    "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt",
    "PIP_DEFAULT_TIMEOUT": "180",
    "UV_INDEX_URL": "https://mirror.example/simple",
    "UV_EXTRA_INDEX_URL": "file:///opt/pypi/simple",
    "UV_FIND_LINKS": "/opt/wheels",
    "UV_CONFIG_FILE": "/etc/uv.toml",
    "UV_CACHE_DIR": "/tmp/uv-cache",
}


def test_the_machine_settings_go_and_the_rest_stays():
    env = clean_pip_env(MACHINE)
    assert env == {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/someone",
        "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt",  # how to reach an index: kept
        "PIP_DEFAULT_TIMEOUT": "180",
        "UV_CACHE_DIR": "/tmp/uv-cache",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "UV_NO_CONFIG": "1",
    }
    assert MACHINE["PIP_FIND_LINKS"] == "/opt/wheels"  # base is not changed


def test_the_test_settings_go_on_top():
    env = clean_pip_env(MACHINE, PIP_NO_DEPS="1", COLUMNS="200", PIP_CONFIG_FILE="/tmp/own.conf")
    assert env["PIP_NO_DEPS"] == "1" and env["COLUMNS"] == "200"
    assert env["PIP_CONFIG_FILE"] == "/tmp/own.conf" and "PIP_FIND_LINKS" not in env


def test_the_default_base_is_this_process_environment(monkeypatch):
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    monkeypatch.setenv("PREBUILD_TEST_MARK", "kept")
    env = clean_pip_env()
    assert "PIP_FIND_LINKS" not in env and env["PREBUILD_TEST_MARK"] == "kept"
    assert os.environ["PIP_FIND_LINKS"] == "/opt/wheels"


@pytest.mark.parametrize(
    ("base", "extra"),
    [(["PATH=/bin"], {}), ({"PATH": None}, {}), ({1: "x"}, {}), ({}, {"PIP_NO_DEPS": 1})],
)
def test_bad_inputs_are_refused(base, extra):
    with pytest.raises(TypeError):
        clean_pip_env(base, **extra)


def test_a_real_pip_reads_no_config_file_and_no_variable(tmp_path):
    """A user's pip.conf (find-links) and PIP_* variables: pip sees them in the machine's
    environment, none of them in the clean one."""
    config = tmp_path / "config" / "pip" / "pip.conf"
    config.parent.mkdir(parents=True)
    config.write_text("[global]\nfind-links = /from/the/user/file\n")
    machine = {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "PIP_EXTRA_INDEX_URL": "file:///from/the/variable",
    }
    machine.pop("PIP_CONFIG_FILE", None)

    def listed(env: dict[str, str]) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    seen = listed(machine)
    assert "/from/the/user/file" in seen and "/from/the/variable" in seen, seen
    clean = listed(clean_pip_env(machine))
    assert "/from/the" not in clean and "find-links" not in clean, clean


def test_installed_reads_what_the_environment_holds(tmp_path):
    held = installed(Path(sys.executable))
    assert held["torch"].startswith("2.13.") and "prebuild" in held and "pip" in held
    with pytest.raises(FileNotFoundError):
        installed(tmp_path / "no-python")
