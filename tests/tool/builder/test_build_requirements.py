"""prebuild.tool.builder.build_requirements: a build's requirements against this environment
(torch pins and isolated-build pins noted, the missing ones named with what needs them)."""

from __future__ import annotations


def test_a_torch_pin_in_the_build_requirements_is_not_followed_and_said_so():
    """``torch==2.5.1`` in build-system.requires is for an isolated build; prebuild builds
    against the torch installed, so it is set apart from what must be installed."""
    from prebuild.tool.builder.build_requirements import split_torch_pins, torch_pins_note

    unmet = {("torch==2.5.1",), ("numpy<2",), ("helper", "Torch[opt]>=9")}
    rest, pins = split_torch_pins(unmet)
    assert rest == {("numpy<2",)} and pins == ["Torch[opt]>=9", "torch==2.5.1"]
    assert split_torch_pins({("torchvision==0.1",)}) == ({("torchvision==0.1",)}, [])
    note = torch_pins_note(["torch==2.5.1"], "2.14.1+cu130")
    assert note.startswith("its build asks for torch==2.5.1 (what pip would install")
    assert "built against the installed torch 2.14.1+cu130 instead" in note


def test_unmet_build_requirements_installed_at_another_version_are_set_apart():
    from prebuild.tool.builder.build_requirements import split_installed

    versions = {"setuptools": "80.9.0", "pathspec": "0.10.1"}
    absent, pins = split_installed(
        {("setuptools<75",), ("scikit-build-core", "pathspec>=0.12"), ("cmake>=3.26",)},
        versions.get,
    )
    assert absent == {("cmake>=3.26",)}
    assert pins == ["pathspec>=0.12 (installed: 0.10.1)", "setuptools<75 (installed: 80.9.0)"]


def test_unmet_build_requirements_are_named_with_what_needs_them():
    from prebuild.tool.builder.build_requirements import missing_requirements_message

    said = missing_requirements_message(
        {("pathspec>=0.12.0",), ("scikit-build-core", "pathspec>=0.12.0"), ("cmake>=3.26",)}
    )
    assert said == (
        "the project's build needs cmake>=3.26, pathspec>=0.12.0, not installed here "
        "(pathspec>=0.12.0 for scikit-build-core). prebuild builds without isolation (so that "
        "this torch is used): pip install 'cmake>=3.26' 'pathspec>=0.12.0'"
    )


def test_empty_submodules_are_said_with_the_unmet_requirements():
    """cubvh (ashawkey/cubvh 7855c00) asked for pybind11 first, and only a second run showed
    its third_party/eigen not checked out: the build that would show it cannot run before."""
    from prebuild.tool.builder.build_requirements import missing_requirements_message

    said = missing_requirements_message({("pybind11",)}, ["third_party/eigen"])
    assert said.startswith("the project's build needs pybind11, not installed here.")
    assert said.endswith(
        "pip install pybind11. Its git submodules third_party/eigen are empty as well: should "
        "its build need them, get them in a git checkout: git submodule update --init "
        "--recursive (a copy without git data: their sources put in those folders)"
    )
