"""The farm's environments: which interpreter fits a job, how uv is told where to install
from, and the commands that make one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from prebuild.tool.farm.envs import (
    BUILD_TOOLS,
    EnvError,
    EnvFacts,
    Environments,
    EnvSpec,
    create_commands,
    pip_config,
    prebuild_path,
    probe,
    uv_pip_settings,
)

SPEC = EnvSpec("3.11", "2.14", "13.0")


@pytest.mark.parametrize(
    ("facts", "fits"),
    [
        (EnvFacts("3.11", "2.14.1+cu130", "13.0"), True),
        (EnvFacts("3.11", "2.14.0", "13.0"), True),
        (EnvFacts("3.12", "2.14.1+cu130", "13.0"), False),
        (EnvFacts("3.11", "2.13.0+cu130", "13.0"), False),
        (EnvFacts("3.11", "2.14.1+cu128", "12.8"), False),
        (EnvFacts("3.11", "2.14.1+cpu", None), False),
    ],
)
def test_an_interpreter_fits_a_job_by_python_torch_minor_and_cuda(facts, fits):
    assert facts.fits(SPEC) is fits
    assert SPEC.name == "py3.11-pt2.14-cu130"


def test_pip_config_lines_and_what_uv_is_told():
    config = pip_config(
        "global.index-url='https://mirror.example/simple'\n"
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/more/simple'\n"
        "global.find-links='/opt/wheels'\nnot a setting\n"
    )
    assert uv_pip_settings({}, config) == {
        "UV_INDEX_URL": "https://mirror.example/simple",
        "UV_EXTRA_INDEX_URL": "file:///opt/pypi/simple file:///opt/more/simple",
        "UV_FIND_LINKS": "/opt/wheels",
        # pip picks the best match across its indexes; uv only where told
        "UV_INDEX_STRATEGY": "unsafe-best-match",
    }
    # pip's variables win over its config file; uv's own settings win over both
    assert uv_pip_settings({"PIP_FIND_LINKS": "/a /b"}, config)["UV_FIND_LINKS"] == "/a,/b"
    assert uv_pip_settings({"UV_INDEX_URL": "https://uv.example"}, config) == {}
    strategy = {"UV_INDEX_STRATEGY": "first-index"}
    assert "UV_INDEX_STRATEGY" not in uv_pip_settings(strategy, config)
    assert uv_pip_settings({}, {"find-links": "/opt/wheels"}) == {"UV_FIND_LINKS": "/opt/wheels"}
    assert uv_pip_settings({}, {}) == {}


def test_pip_s_constraint_files_reach_uv_unless_uv_has_its_own():
    # a site's pin (here: torch<=2.14.1 in /etc/xdg/pip/pip.conf) binds uv as it binds pip
    config = {"constraint": "/etc/xdg/pip/constraints.txt", "find-links": "/opt/wheels"}
    assert uv_pip_settings({}, config) == {
        "UV_FIND_LINKS": "/opt/wheels",
        "UV_CONSTRAINT": "/etc/xdg/pip/constraints.txt",
    }
    # pip's variable wins over its file, several files stay a space-separated list
    lifted = uv_pip_settings({"PIP_CONSTRAINT": "/dev/null  /site/more.txt"}, config)
    assert lifted["UV_CONSTRAINT"] == "/dev/null /site/more.txt"
    # uv's own constraint wins, and uv's own indexes leave pip's constraint in force
    assert "UV_CONSTRAINT" not in uv_pip_settings({"UV_CONSTRAINT": "/uv.txt"}, config)
    own_index = uv_pip_settings({"UV_INDEX_URL": "https://uv.example"}, config)
    assert own_index == {"UV_CONSTRAINT": "/etc/xdg/pip/constraints.txt"}


def test_the_commands_that_make_an_environment(tmp_path):
    make, install = create_commands("uv", SPEC, tmp_path / "env", "https://t.example/{cuda_tag}")
    assert make == ["uv", "venv", "--seed", "--python", "3.11", str(tmp_path / "env")]
    assert install[:5] == ["uv", "pip", "install", "--python", str(tmp_path / "env/bin/python")]
    assert install[install.index("--index") + 1] == "https://t.example/cu130"
    assert "torch==2.14.*" in install and set(BUILD_TOOLS) <= set(install)
    _, plain = create_commands("uv", SPEC, tmp_path / "env", "")
    assert "--index" not in plain  # the usual indexes only


def test_prebuild_runs_in_another_environment_through_a_link_to_its_package(tmp_path):
    import prebuild

    folder = prebuild_path(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["prebuild"]
    assert (folder / "prebuild").resolve() == Path(prebuild.__file__).resolve().parent
    assert prebuild_path(tmp_path) == folder  # made once, then reused


def test_this_interpreter_is_probed_and_a_cpu_torch_fits_no_cuda_job(tmp_path):
    facts = probe(Path(sys.executable))
    assert facts is not None and facts.python == f"{sys.version_info[0]}.{sys.version_info[1]}"
    environments = Environments(tmp_path, {Path(sys.executable): facts})
    cuda = facts.cuda or "13.0"
    spec = EnvSpec(facts.python, ".".join(facts.torch.split(".")[:2]), cuda)
    assert (environments.find(spec) == Path(sys.executable)) is (facts.cuda is not None)
    with pytest.raises(EnvError, match="no-python: cannot run it"):
        probe(tmp_path / "no-python")  # a bad --env is named
