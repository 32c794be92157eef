"""source_gaps: files a failed classic build needed that the project's source lacks (the log
lines are ninja's and the compilers' own: fast-hadamard-transform 1.1.0's sdist, a clone of
diff-gaussian-rasterization without its submodule)."""

from __future__ import annotations

from pathlib import Path

from prebuild.tool.builder.source_gaps import (
    empty_submodules,
    missing_files,
    source_gaps_advice,
    source_url,
)

SOURCE = Path("/w/source/fast_hadamard_transform-1.1.0")
NINJA = (
    f"ninja: error: '{SOURCE}/csrc/fast_hadamard_transform.cpp', needed by "
    f"'{SOURCE}/build/temp.linux-x86_64-cpython-311/csrc/fast_hadamard_transform.o', missing "
    "and no known rule to make it"
)
PKG_INFO = (
    "Metadata-Version: 2.4\nName: fast_hadamard_transform\nVersion: 1.1.0\n"
    "Home-page: https://github.com/Dao-AILab/fast-hadamard-transform\nAuthor: Tri Dao\n\n"
    "# Fast Hadamard Transform\n"
)
GITMODULES = """[submodule "third_party/glm"]
\tpath = third_party/glm
\turl = https://github.com/g-truc/glm.git
"""
GLM = "cuda_rasterizer/backward.cu:15:10: fatal error: glm/glm.hpp: No such file or directory"
COMMAND = "prebuild wheel --arch sm_90"


def test_the_missing_files_are_read_from_ninjas_and_the_compilers_words():
    log = "\n".join(
        [NINJA, GLM, "c++: error: csrc/extra.cu: No such file or directory", NINJA, "error: x"]
    )
    assert missing_files(log) == [
        f"{SOURCE}/csrc/fast_hadamard_transform.cpp",
        "glm/glm.hpp",
        "csrc/extra.cu",
    ]


def test_an_incomplete_sdist_is_named_with_its_repository():
    advice = source_gaps_advice(NINJA, SOURCE, "", set(), PKG_INFO, COMMAND)
    assert "The sdist lacks sources its setup.py compiles (csrc/fast_hadamard_transform.cpp)" in (
        advice
    )
    assert (
        "prebuild wheel --arch sm_90 git+https://github.com/Dao-AILab/fast-hadamard-transform"
        "@<its tag or commit of 1.1.0>" in advice
    )
    no_url = PKG_INFO.replace("Home-page: https://github.com", "Home-page: https://example.org")
    assert "its sdist names no repository" in source_gaps_advice(
        NINJA, SOURCE, "", set(), no_url, COMMAND
    )


def test_a_project_url_names_the_repository_before_the_home_page():
    info = (
        "Name: x\nVersion: 1\nHome-page: https://x.example.org\n"
        "Project-URL: Source, https://gitlab.com/x/x\n"
    )
    assert source_url(info) == "https://gitlab.com/x/x"
    assert source_url("Name: x\n") is None


def test_submodules_not_checked_out_are_named_with_the_command_that_fetches_them():
    assert empty_submodules(GITMODULES, set()) == ["third_party/glm"]
    assert empty_submodules(GITMODULES, {"third_party/glm"}) == []
    advice = source_gaps_advice(GLM, Path("/w/source"), GITMODULES, set(), "", COMMAND)
    assert "missing glm/glm.hpp: the project's git submodules (third_party/glm)" in advice
    assert "git submodule update --init --recursive" in advice
    # Checked out: a missing header is something else (an API break, a toolkit gap).
    assert source_gaps_advice(GLM, Path("/w/source"), GITMODULES, {"third_party/glm"}, "", "") == ""


def test_nothing_is_said_where_nothing_is_missing_or_a_directory_lacks_a_header():
    assert source_gaps_advice("a.cu(3): error: x", SOURCE, "", set(), PKG_INFO, COMMAND) == ""
    # A missing header in a directory that is no sdist and has no submodules: not a source gap.
    assert source_gaps_advice(GLM, SOURCE, "", set(), "", COMMAND) == ""


def test_the_error_shown_is_ninjas_own_line_where_no_step_failed():
    """fast-hadamard-transform's build stopped before compiling: ninja's line, not the
    setuptools traceback after it, is what the user reads."""
    from prebuild.tool.builder.classic import compiler_errors

    log = f"running build_ext\n{NINJA}\nTraceback (most recent call last):\n  File ...\n"
    assert compiler_errors(log) == NINJA
    assert compiler_errors("a\nb\nerror: something") == "a\nb\nerror: something"


def test_a_setup_requires_fetch_that_fails_is_told_what_to_install():
    """inplace-abn 1.1.0's setup.py has setuptools fetch setuptools_scm into .eggs, which fails
    (pip's output, cut): installed in the environment first, it builds (sm_90, 111 s)."""
    from prebuild.tool.builder.project import setup_requires_hint

    output = (
        "        dist.fetch_build_eggs(dist.setup_requires)\n"
        '        File "/tmp/pip-download-x/inplace-abn_9/.eggs/setuptools_scm-10.3.4-py3.11.egg/'
        'setuptools_scm/__init__.py", line 8, in <module>\n'
        "      ModuleNotFoundError: No module named 'vcs_versioning'\n"
    )
    hint = setup_requires_hint(output)
    assert "fetch what it needs to build (setuptools_scm)" in hint
    assert hint.endswith("pip install setuptools_scm")
    assert setup_requires_hint("Searching for cython\nfetch_build_eggs\n").endswith(
        "pip install cython"
    )
    assert setup_requires_hint("ModuleNotFoundError: No module named 'torch'") == ""
