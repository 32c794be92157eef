"""source_gaps: files a failed classic build needed that the project's source lacks (the log
lines are ninja's and the compilers' own: fast-hadamard-transform 1.1.0's sdist, a clone of
diff-gaussian-rasterization without its submodule)."""

from __future__ import annotations

from pathlib import Path

import pytest

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


# auto-gptq 0.7.1's sdist: its marlin sources include a header of their own it does not ship
MARLIN = (
    "/w/auto_gptq-0.7.1/autogptq_extension/marlin/marlin_cuda_kernel.cu:27:10: fatal error: "
    "marlin_cuda_kernel.cuh: No such file or directory\n"
    '   27 | #include "marlin_cuda_kernel.cuh"\n'
    "      |          ^~~~~~~~~~~~~~~~~~~~~~~~\ncompilation terminated.\n"
)
AUTO_GPTQ = "Metadata-Version: 2.1\nName: auto_gptq\nVersion: 0.7.1\nHome-page: https://github.com/PanQiWei/AutoGPTQ\n"


def test_an_sdist_lacking_a_header_its_sources_include_in_quotes_is_named(tmp_path):
    marlin = tmp_path / "autogptq_extension" / "marlin"
    marlin.mkdir(parents=True)
    (marlin / "marlin_cuda_kernel.cu").write_text('#include "marlin_cuda_kernel.cuh"\n')
    advice = source_gaps_advice(MARLIN, tmp_path, "", set(), AUTO_GPTQ, COMMAND)
    assert advice.startswith(
        "The sdist lacks headers its sources include (marlin_cuda_kernel.cuh, in quotes: its own)"
    )
    assert "git+https://github.com/PanQiWei/AutoGPTQ@<its tag or commit of 0.7.1>" in advice
    # there in the source (an include path the build lacks): no gap of the sdist's
    (marlin / "include").mkdir()
    (marlin / "include" / "marlin_cuda_kernel.cuh").write_text("")
    assert "The sdist lacks" not in source_gaps_advice(
        MARLIN, tmp_path, "", set(), AUTO_GPTQ, COMMAND
    )
    # a system's header (in angle brackets) is not the sdist's
    system = MARLIN.replace('"marlin_cuda_kernel.cuh"', "<marlin_cuda_kernel.cuh>")
    (marlin / "include" / "marlin_cuda_kernel.cuh").unlink()
    assert "The sdist lacks" not in source_gaps_advice(
        system, tmp_path, "", set(), AUTO_GPTQ, COMMAND
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


def test_a_build_stopping_on_a_submodule_it_checks_for_itself_is_told_the_command():
    """VPTQ's setup.py raises before compiling where its CUTLASS submodule is not there."""
    gitmodules = '[submodule "third_party/cutlass"]\n\tpath = third_party/cutlass\n'
    log = (
        "RuntimeError: third_party/cutlass is missing, please use source distribution or git "
        "clone\n"
    )
    advice = source_gaps_advice(log, SOURCE, gitmodules, set(), "", COMMAND)
    assert advice == (
        "The build failed naming third_party/cutlass, the project's git submodule not in its "
        "source. Get them in a git checkout: git submodule update --init --recursive (a copy "
        "without git data: their sources put in those folders), then build again (a "
        "git+https:// URL gets them: pip clones them too)."
    )
    # in place, or another path: not said
    assert source_gaps_advice(log, SOURCE, gitmodules, {"third_party/cutlass"}, "", "") == ""
    assert "cutlass" not in source_gaps_advice(
        "RuntimeError: third_party/cutlass_extra failed", SOURCE, gitmodules, set(), "", ""
    )


def test_nothing_is_said_where_nothing_is_missing_or_a_directory_lacks_a_header():
    assert source_gaps_advice("a.cu(3): error: x", SOURCE, "", set(), PKG_INFO, COMMAND) == ""
    # A missing header in a directory that is no sdist and has no submodules: not a source gap.
    assert source_gaps_advice(GLM, SOURCE, "", set(), "", COMMAND) == ""


def test_the_error_shown_is_ninjas_own_line_where_no_step_failed():
    """fast-hadamard-transform's build stopped before compiling: ninja's line, not the
    setuptools traceback after it, is what the user reads."""
    from prebuild.tool.builder.build_log import compiler_errors

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


# The tools' own words, as each printed them here with no route to the host (CMake 4.4's
# ExternalProject in torch-kdtree 1.0's build, cut; CMake 3.25's FetchContent; curl; Python's
# urllib; requests 2).
CMAKE_URL = """-- Retry after 60 seconds (attempt #5) ...
CMake Error at build/eigen-prefix/src/eigen-stamp/download-eigen.cmake:163 (message):
  Each download failed!

    error: downloading 'https://gitlab.com/libeigen/eigen/-/archive/3.4.0/eigen-3.4.0.tar.bz2' failed
          status_code: 6
          status_string: "Could not resolve hostname"
          log:
          --- LOG BEGIN ---
"""
FETCH_CONTENT = """[ 22%] Performing download step (git clone) for 'glm-populate'
Cloning into 'glm-src'...
fatal: unable to access 'https://github.com/g-truc/glm.git/': Could not resolve host: github.com
CMake Error at glm-subbuild/glm-populate-prefix/tmp/glm-populate-gitclone.cmake:39 (message):
  Failed to clone repository: 'https://github.com/g-truc/glm.git'
"""
CURL = "curl: (6) Could not resolve host: github.com\n"
URLLIB = "urllib.error.URLError: <urlopen error [Errno -2] Name or service not known>\n"
REQUESTS = (
    "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='github.com', port=443): Max "
    "retries exceeded with url: /o/x/releases/download/v1/x.whl (Caused by NameResolutionError("
    "\"HTTPSConnection(host='github.com', port=443): Failed to resolve 'github.com' ([Errno -2] "
    'Name or service not known)"))\n'
)


def test_failed_downloads_are_read_from_each_tools_words():
    from prebuild.tool.builder.source_gaps import FailedDownload, failed_downloads

    log = CMAKE_URL + FETCH_CONTENT + FETCH_CONTENT + CURL + URLLIB + REQUESTS
    assert failed_downloads(log) == [
        FailedDownload(
            "https://gitlab.com/libeigen/eigen/-/archive/3.4.0/eigen-3.4.0.tar.bz2",
            "Could not resolve hostname",
        ),
        FailedDownload("https://github.com/g-truc/glm.git", "Could not resolve host: github.com"),
        FailedDownload("github.com", "Could not resolve host: github.com"),
        FailedDownload("", "[Errno -2] Name or service not known"),
        FailedDownload(
            "https://github.com/o/x/releases/download/v1/x.whl",
            "[Errno -2] Name or service not known",
        ),
    ]
    assert failed_downloads("error: x\nfatal error: glm/glm.hpp: No such file") == []


# ctcdecode 1.0.2's setup.py, in pip's metadata step (cut): urllib's error names no URL, the
# traceback's code line that passed it does.
URLLIB_TRACEBACK = (
    "      Traceback (most recent call last):\n"
    '        File "/usr/lib/python3.11/socket.py", line 962, in getaddrinfo\n'
    "      socket.gaierror: [Errno -2] Name or service not known\n\n"
    "      During handling of the above exception, another exception occurred:\n\n"
    "      Traceback (most recent call last):\n"
    '        File "/tmp/pip-download-x/ctcdecode/setup.py", line 27, in <module>\n'
    "          download_extract('https://github.com/parlance/ctcdecode/releases/download/v1.0/"
    "openfst-1.6.7.tar.gz',\n"
    '        File "/usr/lib/python3.11/urllib/request.py", line 1351, in do_open\n'
    "          raise URLError(err)\n      " + URLLIB
)


def test_urllib_s_failed_download_is_named_by_the_url_in_its_traceback():
    from prebuild.tool.builder.project import METADATA_DOWNLOADS
    from prebuild.tool.builder.source_gaps import FailedDownload, downloads_advice, failed_downloads

    url = "https://github.com/parlance/ctcdecode/releases/download/v1.0/openfst-1.6.7.tar.gz"
    assert failed_downloads(URLLIB_TRACEBACK) == [
        FailedDownload(url, "[Errno -2] Name or service not known")
    ]
    # a URL of an earlier traceback is not this error's
    assert (
        failed_downloads(
            f"Traceback (most recent call last):\n  x('{url}')\n"
            "Traceback (most recent call last):\n" + URLLIB
        )[0].what
        == ""
    )
    advice = downloads_advice(URLLIB_TRACEBACK, METADATA_DOWNLOADS)
    assert advice.startswith(
        "Its setup.py downloads what its source lacks as soon as it runs (pip's metadata step, "
        f"before anything is built), and that failed here: {url} ([Errno -2] Name or service"
    )


def test_a_failed_download_is_explained_with_what_could_not_be_reached():
    from prebuild.tool.builder.source_gaps import downloads_advice

    advice = downloads_advice("x\n" + CMAKE_URL)
    assert advice.startswith("The build downloads what its source lacks while it builds")
    assert "eigen-3.4.0.tar.bz2 (Could not resolve hostname). This machine does not reach it" in (
        advice
    )
    assert "FETCHCONTENT" not in advice
    # FetchContent's dependency is named with the variable that takes a local copy.
    assert "-DFETCHCONTENT_SOURCE_DIR_GLM=<its directory>" in downloads_advice(FETCH_CONTENT)
    assert downloads_advice(URLLIB).endswith(
        "failed here: [Errno -2] Name or service not known. This machine does not reach it: "
        "build where it does (the wheel then installs offline), or put it in place the way the "
        "project's build files allow."
    )
    assert downloads_advice(GLM) == ""


def test_the_log_end_shown_has_each_python_traceback_cut_to_its_exception():
    from prebuild.tool.builder.build_log import compiler_errors

    log = (
        "gmake: *** [Makefile:101: all] Error 2\nTraceback (most recent call last):\n"
        '  File "setup.py", line 132, in build_extension\n    subprocess.check_call(\n'
        "subprocess.CalledProcessError: Command '['cmake', '--build', '.']' returned non-zero "
        "exit status 2.\n\n"
    )
    assert compiler_errors(log) == (
        "gmake: *** [Makefile:101: all] Error 2\nsubprocess.CalledProcessError: Command "
        "'['cmake', '--build', '.']' returned non-zero exit status 2."
    )


def test_a_build_that_fails_on_a_download_says_so_after_the_logs_words(tmp_path):
    """The advice reaches the user: a project whose setup.py clones a dependency, here, with
    no route to it (its words are git's)."""
    from types import SimpleNamespace

    from prebuild.runtime.arch import parse_arch_list
    from prebuild.tool.builder.classic import ClassicBuilder
    from prebuild.tool.builder.compile import BuildError

    project = tmp_path / "project"
    project.mkdir()
    (project / "setup.py").write_text(
        "import sys\nfrom setuptools import setup\n"
        "if 'bdist_wheel' in sys.argv:\n"
        "    print(\"fatal: unable to access 'https://github.com/g-truc/glm.git/': Could not "
        'resolve host: github.com", file=sys.stderr)\n'
        "    raise RuntimeError('git clone failed')\n"
        "setup(name='x', version='1')\n"
    )
    toolchain = SimpleNamespace(
        nvcc=None, cxx_standard="c++17", torch=SimpleNamespace(version_string="2.13.0")
    )
    builder = ClassicBuilder(project, toolchain, tmp_path / "work")
    log = tmp_path / "build.log"
    with pytest.raises(BuildError) as failed:
        progress = SimpleNamespace(note=print, step=print)
        builder.project_build({}, log, tmp_path / "out", parse_arch_list("sm_90"), progress)
    said = str(failed.value)
    assert f"the project's build failed (full log: {log})" in said
    assert "RuntimeError: git clone failed" in said and "Traceback" not in said
    assert "downloads what its source lacks while it builds, and that failed here: " in said
    assert "https://github.com/g-truc/glm.git (Could not resolve host: github.com)" in said


def test_a_module_its_tools_removed_is_named_with_what_removed_it_and_the_fix():
    """tiny-cuda-nn's bindings/torch/setup.py imports pkg_resources, which setuptools 82
    removed (the environment's setuptools: 84.2.1); with setuptools 81 it builds on."""
    from prebuild.tool.builder.project import environment_hints, removed_module_hint

    output = (
        '  File "/w/source/bindings/torch/setup.py", line 5, in <module>\n'
        "    from pkg_resources import parse_version\n"
        "ModuleNotFoundError: No module named 'pkg_resources'\n"
    )
    hint = removed_module_hint(output)
    assert hint == (
        "Its setup.py imports pkg_resources, and setuptools removed it in 82.0: install an older "
        "setuptools in this environment, then build again: pip install 'setuptools>=72.2,<82'."
    )
    assert "Python removed it in 3.12" in removed_module_hint("No module named 'imp'")
    assert removed_module_hint("No module named 'torch'") == ""
    both = environment_hints(output + "Searching for setuptools_scm\nfetch_build_eggs\n")
    assert both.startswith("Its setup.py has setuptools fetch") and both.endswith("<82'.")
    assert both.count("\n\n") == 1
    assert environment_hints("error: x") == ""


def test_a_system_librarys_header_is_named_with_where_to_get_it():
    """torch-sparse-solve 0.0.5 includes SuiteSparse's klu.h (g++'s words); with Debian's
    libsuitesparse-dev installed and CPATH=/usr/include/suitesparse it compiles."""
    from prebuild.tool.builder.source_gaps import system_library_advice

    log = (
        "/w/source/torch_sparse_solve-0.0.5/torch_sparse_solve.cpp:4:10: fatal error: klu.h: "
        "No such file or directory\n"
    )
    advice = source_gaps_advice(log, SOURCE, "", set(), PKG_INFO, COMMAND)
    assert advice.startswith("The build is missing headers of a system library")
    assert (
        "klu.h, of SuiteSparse (Debian and Ubuntu: apt install libsuitesparse-dev, then "
        "CPATH=/usr/include/suitesparse; conda: conda install -c conda-forge suitesparse)"
    ) in advice
    both = system_library_advice(["Eigen/Dense", "libaio.h", "Eigen/Sparse", "mine.h"])
    assert "Eigen/Dense, Eigen/Sparse, of Eigen (" in both and "libaio.h, of libaio (" in both
    assert system_library_advice(["mine.h", "glm/glm.hpp"]) == ""
    assert both.endswith("prebuild copies what the wheel's libraries link of it into the wheel, "
                         "so a machine installing the wheel needs none of it.")  # fmt: skip
    # Eigen is headers only (raytracing, 2932926): compiled in, nothing to copy
    eigen = system_library_advice(["Eigen/Core", "Eigen/Dense"])
    assert eigen.endswith("CPATH=/usr/include/eigen3; conda: conda install -c conda-forge "
                          "eigen). Install it, then build again.")  # fmt: skip
    # DeepEP's kernels include NVSHMEM's InfiniBand transport, which includes rdma-core's verbs
    assert (
        "infiniband/mlx5dv.h, of rdma-core's InfiniBand verbs (Debian and Ubuntu: apt install "
        "libibverbs-dev; conda: conda install -c conda-forge rdma-core)"
        in system_library_advice(["infiniband/mlx5dv.h"])
    )
    # Pointcept's pointgroup_ops (g++'s words); with Debian's libsparsehash-dev it compiles
    log = (
        "src/bfs_cluster.cpp:15:10: fatal error: google/dense_hash_map: No such file or directory\n"
    )
    assert (
        "google/dense_hash_map, of Google's sparsehash (Debian and Ubuntu: apt install "
        "libsparsehash-dev; conda: conda install -c conda-forge sparsehash)"
        in source_gaps_advice(log, SOURCE, "", set(), "", COMMAND)
    )
    # a submodule not checked out is said first: the header is in the project's own source
    assert "submodules" in source_gaps_advice(
        "a.cu:1:10: fatal error: Eigen/Dense: No such file or directory",
        Path("/w/source"),
        '[submodule "eigen"]\n\tpath = third_party/eigen\n',
        set(),
        "",
        COMMAND,
    )


def test_the_header_check_before_compiling_is_read_and_shown_as_the_compilers_words_are():
    """build_site.py's check stopped torchsparse 385f5ce's build before compiling: the error
    shows the check's own lines, and the advice is the one g++'s words would have had."""
    import re

    from prebuild.tool.builder import build_site
    from prebuild.tool.builder.build_log import compiler_errors
    from prebuild.tool.builder.source_gaps import system_header_pattern

    log = (
        "copying torchsparse/nn/utils.py -> build/lib/torchsparse/nn\nrunning build_ext\n"
        "prebuild: torchsparse/backend/others/query_cpu.cpp:6: <google/dense_hash_map> is in no "
        "include directory of the build\n"
        "prebuild: my project/b.h:2: <boost/any.hpp> is in no include directory of the build\n"
        f"{build_site.STOPPED}: the headers above are missing\n"
    )
    assert missing_files(log) == ["google/dense_hash_map", "boost/any.hpp"]
    shown = compiler_errors(log).splitlines()
    assert len(shown) == 3 and all(line.startswith("prebuild: ") for line in shown)
    advice = source_gaps_advice(log, SOURCE, "", set(), "", COMMAND)
    assert "of Google's sparsehash (Debian and Ubuntu: apt install libsparsehash-dev" in advice
    assert "boost/any.hpp, of Boost" in advice
    # one pattern for every library's headers, and for nothing else
    known = re.compile(system_header_pattern())
    for header in ("klu.h", "libaio.h", "Eigen/Dense", "sparsehash/dense_hash_map", "mpi.h"):
        assert known.fullmatch(header), header
    for header in ("mine.h", "glm/glm.hpp", "cuda_runtime.h", "torch/extension.h", "xklu.h"):
        assert not known.fullmatch(header), header


def test_headers_of_a_cuda_library_nowhere_here_are_told_how_to_install():
    """A CUDA library's header the build did not find (the shim toolkit holds those of torch's
    nvidia-* wheels) is named with where its development files come from."""
    from prebuild.tool.builder.source_gaps import cuda_library_advice

    log = "compat.cuh:181:10: fatal error: cublasLt.h: No such file or directory\n"
    said = source_gaps_advice(log, Path("/src"), "", set(), "", "prebuild wheel")
    assert said.startswith("The build is missing cublasLt.h, headers of a CUDA library")
    assert "install the library's development files" in said and "CPATH" not in said
    assert cuda_library_advice(["nccl.h", "cudnn.h"]).startswith(
        "The build is missing nccl.h, cudnn.h,"
    )
    assert cuda_library_advice(["klu.h"]) == ""  # a system library's: not CUDA's


def test_a_system_library_the_linker_cannot_find_is_named_with_where_to_get_it():
    """MinkowskiEngine 0.5.4 links a BLAS (its --blas=openblas); GNU ld 2.40's words, and an
    older ld's and lld's."""
    from prebuild.tool.builder.source_gaps import link_advice, unlinked_libraries

    log = (
        "g++ -shared build/temp/src/math.o -L/usr/lib -lopenblas -lc10 -o build/lib/ME.so\n"
        "/usr/bin/ld: cannot find -lopenblas: No such file or directory\n"
        "/usr/bin/ld: cannot find -lmine: No such file or directory\n"
        "/usr/bin/ld: cannot find -lboost_system\n"
        "ld.lld: error: unable to find library -lklu\n"
        "collect2: error: ld returned 1 exit status\n"
    )
    assert unlinked_libraries(log) == ["openblas", "mine", "boost_system", "klu"]
    advice = source_gaps_advice(log, SOURCE, "", set(), PKG_INFO, COMMAND)
    assert advice.startswith("The build could not link a system library this machine lacks: ")
    assert (
        "-lopenblas, of a BLAS (OpenBLAS) (Debian and Ubuntu: apt install libopenblas-dev; "
        "conda: conda install -c conda-forge openblas)" in advice
    )
    assert "-lboost_system, of Boost (" in advice and "-lklu, of SuiteSparse (" in advice
    assert "-lmine" not in advice  # a library of the project's own, or unknown: not guessed
    assert link_advice("/usr/bin/ld: cannot find -lmine\n") == ""
    assert link_advice("collect2: error: ld returned 1 exit status\n") == ""


# CMake 3.25's own words (this machine's), from CMakeLists.txt files asking for each package.
CMAKE_MODULE = """-- Looking for sgemm_
-- Could NOT find OpenMP_C (missing: OpenMP_C_FLAGS OpenMP_C_LIB_NAMES)
CMake Error at /usr/share/cmake-3.25/Modules/FindPackageHandleStandardArgs.cmake:230 (message):
  Could NOT find BLAS (missing: BLAS_LIBRARIES)
Call Stack (most recent call first):
  /usr/share/cmake-3.25/Modules/FindBLAS.cmake:1346 (find_package_handle_standard_args)
  CMakeLists.txt:3 (find_package)
"""
CMAKE_CONFIG = """CMake Error at CMakeLists.txt:3 (find_package):
  By not providing "FindSomeVeryLongPackageNameForWrapping.cmake" in
  CMAKE_MODULE_PATH this project has asked CMake to find a package
  configuration file provided by "SomeVeryLongPackageNameForWrapping", but
  CMake did not find one.

  Could not find a package configuration file provided by
  "SomeVeryLongPackageNameForWrapping" with any of the following names:

    SomeVeryLongPackageNameForWrappingConfig.cmake
CMake Error at CMakeLists.txt:4 (find_package):
  Could not find a package configuration file provided by "Eigen3" (requested
  version 3.3) with any of the following names:
CMake Error at CMakeLists.txt:5 (find_package):
  Could not find a package configuration file provided by "Torch" with any of
  the following names:
"""


def test_a_package_cmake_did_not_find_is_named_with_where_to_get_it():
    """A CMake build (scikit-build-core's, a setup.py running cmake) stops at its configure
    step where a required package is missing: a find module's words and config mode's, wrapped
    over lines; an optional package CMake did not find (OpenMP here) is no error."""
    from prebuild.tool.builder.source_gaps import cmake_advice, cmake_packages

    assert cmake_packages(CMAKE_MODULE) == ["BLAS"]
    assert cmake_packages(CMAKE_CONFIG) == ["SomeVeryLongPackageNameForWrapping", "Eigen3", "Torch"]
    advice = source_gaps_advice(CMAKE_MODULE, SOURCE, "", set(), PKG_INFO, COMMAND)
    assert advice.startswith(
        "CMake did not find a system library the project needs and this machine lacks: BLAS, "
        "a BLAS (OpenBLAS) (Debian and Ubuntu: apt install libopenblas-dev; conda: conda "
        "install -c conda-forge openblas). Install it, then build again"
    ), advice
    advice = cmake_advice(CMAKE_CONFIG)
    assert "lacks: Eigen3, Eigen (Debian and Ubuntu: apt install libeigen3-dev, then " in advice
    assert "CMake did not find torch (its TorchConfig.cmake), although the build's " in advice
    assert advice.endswith(
        "CMake did not find SomeVeryLongPackageNameForWrapping, which the project requires: "
        "install its development package, or, where it is installed under a prefix of its own, "
        "name that prefix for the build (CMAKE_PREFIX_PATH=<prefix>, or "
        "SomeVeryLongPackageNameForWrapping_ROOT=<prefix>, before the prebuild command)."
    ), advice
    assert cmake_advice("-- Could NOT find OpenMP_C (missing: OpenMP_C_FLAGS)\n") == ""
    assert cmake_advice("-- Configuring done\n") == ""
