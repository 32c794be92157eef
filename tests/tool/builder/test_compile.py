"""prebuild.tool.builder.compile's ninja files: libraries built together by one ninja run,
largest source first, and the object-name clash that would make them overwrite each other; the
record of compiled libraries prebuild wheel hands its setup.py, and the preflight it spares."""

from __future__ import annotations

import ctypes
from dataclasses import replace
from pathlib import Path

import pytest
from packaging.version import Version

from prebuild.runtime.arch import parse_arch_list
from prebuild.tool.builder import flags
from prebuild.tool.builder.compile import (
    BuildError,
    CompiledLibraries,
    LibrarySpec,
    Toolchain,
    compile_libraries,
    host_library_spec,
    read_compiled,
    run_ninja,
    unity_batches,
    unity_sources,
    write_ninja,
)
from prebuild.tool.builder.config import read_config
from prebuild.tool.builder.toolchain import ToolchainError, Torch, find_cxx, find_torch

ROOT = Path(__file__).resolve().parents[3]


def spec(output: str, sources: list[Path]) -> LibrarySpec:
    return LibrarySpec(
        output=output,
        what=f"C++ {output}",
        compiler=find_cxx().command,
        compile_flags=["-O0", "-fPIC"],
        depfile="-MMD -MF $out.d",
        link_flags=["-shared"],
        sources=sources,
    )


def write_sources(root: Path, sizes: dict[str, int]) -> dict[str, Path]:
    """C files each defining `int <stem>(void)`, padded with comments to the given size."""
    paths = {}
    for name, size in sizes.items():
        code = f'extern "C" int {Path(name).stem}(void) {{ return {len(name)}; }}\n'
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(code + "//" + "x" * max(0, size - len(code) - 3) + "\n")
        paths[name] = root / name
    return paths


def test_two_libraries_build_in_one_run_largest_source_first(tmp_path):
    src, build = tmp_path / "csrc", tmp_path / "build"
    (build / "obj").mkdir(parents=True)
    files = write_sources(
        src, {"a/small.cpp": 100, "a/big.cpp": 5000, "b/mid_simt.cpp": 2000, "lib.cpp": 50}
    )
    first = spec("liba.so", [files["a/small.cpp"], files["a/big.cpp"], files["lib.cpp"]])
    second = spec("libb.so", [files["b/mid_simt.cpp"]])

    text = write_ninja(src, build, [first, second]).read_text()
    compiles = [
        line.split(":")[0].removeprefix("build ")
        for line in text.splitlines()
        if line.startswith("build obj/")
    ]
    assert compiles == [
        "obj/a__big.cpp.o",
        "obj/b__mid_simt.cpp.o",
        "obj/a__small.cpp.o",
        "obj/lib.cpp.o",
    ]

    steps = []
    run_ninja(build, 2, lambda done, total, what: steps.append((done, total)))
    assert steps[-1] == (6, 6)  # four compiles and two links, one run
    assert ctypes.CDLL(str(build / "liba.so")).big() == len("a/big.cpp")
    assert ctypes.CDLL(str(build / "libb.so")).mid_simt() == len("b/mid_simt.cpp")
    with pytest.raises(AttributeError):
        ctypes.CDLL(str(build / "libb.so")).small  # each library links only its own objects


def logging_launcher(path: Path) -> Path:
    """A launcher that appends its compiler's source file's name to ``path.log``, then runs it."""
    path.write_text(
        f'#!/bin/sh\nfor a in "$@"; do case "$a" in *.cpp) echo "${{a##*/}}" >> {path}.log;; esac; done\n'
        'exec "$@"\n'
    )
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("cache", [False, True])
def test_compiles_run_through_the_users_launcher_unless_the_build_has_a_cache(tmp_path, cache):
    """$CXX="ccache g++": the CPU library's compiles (not its link) run through the user's
    launcher; with --cache, through the cache's launcher instead, never through both."""
    src, build = tmp_path / "csrc", tmp_path / "build"
    (build / "obj").mkdir(parents=True)
    files = write_sources(src, {"one.cpp": 10, "two.cpp": 10})
    own, cache_launcher = logging_launcher(tmp_path / "own"), logging_launcher(tmp_path / "cache")
    library = replace(spec("liba.so", list(files.values())), launcher=(str(own),))
    write_ninja(src, build, [library], cache_launcher if cache else None)
    run_ninja(build, 2, None)
    used, unused = (cache_launcher, own) if cache else (own, cache_launcher)
    assert sorted(Path(f"{used}.log").read_text().split()) == ["one.cpp", "two.cpp"]
    assert not Path(f"{unused}.log").exists()
    assert ctypes.CDLL(str(build / "liba.so")).two() == len("two.cpp")


def test_a_compiler_the_kernel_killed_is_told_as_memory_with_fewer_jobs(tmp_path):
    """g++'s cc1plus killed by SIGKILL (as the out-of-memory killer does), through g++'s own
    -wrapper: the error says what killed it, and how many jobs to build with instead."""
    src, build = tmp_path / "csrc", tmp_path / "build"
    (build / "obj").mkdir(parents=True)
    files = write_sources(src, {"one.cpp": 10})
    killer = tmp_path / "wrap" / "cc1plus"  # g++ names the program it ran: this one
    killer.parent.mkdir()
    killer.write_text('#!/bin/sh\ncase "$1" in *cc1plus) kill -9 $$;; esac\nexec "$@"\n')
    killer.chmod(0o755)
    launcher = tmp_path / "launcher"
    launcher.write_text(f'#!/bin/sh\nexec "$@" -wrapper {killer}\n')
    launcher.chmod(0o755)
    write_ninja(
        src, build, [replace(spec("liba.so", list(files.values())), launcher=(str(launcher),))]
    )
    with pytest.raises(BuildError) as error:
        run_ninja(build, 4)
    said = str(error.value)
    assert "Killed signal terminated program" in said  # g++'s own words, shown
    assert "The compiler (cc1plus) was killed (signal 9)" in said
    assert "4 compiles at once" in said and "--jobs 2" in said


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("nvcc error   : 'cicc' died due to signal 9 (Kill signal)", "(cicc) was killed"),
        ("nvcc error   : 'cudafe++' died due to signal 9 (Kill signal)", "(cudafe++) was killed"),
        ("c++: fatal error: Killed signal terminated program cc1plus", "(cc1plus) was killed"),
        ("g++: internal compiler error: Killed (program cc1plus)", "(cc1plus) was killed"),
        (
            "error: command '/usr/local/cuda/bin/nvcc' failed with exit code -9",
            "(nvcc) was killed",
        ),
        ("nvcc error   : 'ptxas' died due to signal 11 (Invalid memory reference)", "crashed"),
    ],
)
def test_each_compilers_words_for_a_kill_are_read(line, said):
    from prebuild.tool.builder.compile import killed_compiler_advice

    advice = killed_compiler_advice(f"[3/9] nvcc ...\n{line}\nninja: build stopped\n", 8)
    assert said in advice
    assert ("--jobs 4" in advice) == ("killed" in said)
    assert "this compile alone" in killed_compiler_advice(line, 1) or "crashed" in said
    assert killed_compiler_advice("error: command 'g++' failed with exit code 1", 8) == ""


def test_libraries_built_together_must_not_share_an_object_name(tmp_path):
    files = write_sources(tmp_path, {"x.cpp": 10})
    (tmp_path / "obj").mkdir()
    with pytest.raises(ValueError, match="share an object name"):
        write_ninja(
            tmp_path,
            tmp_path,
            [spec("liba.so", [files["x.cpp"]]), spec("libb.so", [files["x.cpp"]])],
        )


def compiled_in(root: Path, cuda: bool = True) -> CompiledLibraries:
    """A CompiledLibraries whose library files exist (empty) under ``root``."""
    for name in ("_C.abi3.so", "_C_cuda.abi3.so"):
        (root / name).write_bytes(b"")
    torch = Torch(Version("2.13.0"), "2.13.0+cpu", None, (root / "include",), root / "lib")
    return CompiledLibraries(
        root / "_C.abi3.so",
        root / "_C_cuda.abi3.so" if cuda else None,
        None,
        torch,
        "13.0" if cuda else None,
        {"cxx": ["-O3"], "nvcc": ["-gencode=arch=compute_80,code=sm_80"]},
    )


@pytest.mark.parametrize("cuda", [True, False])
def test_the_compiled_record_reads_back_what_was_written(tmp_path, cuda):
    """What prebuild wheel hands its setup.py (PREBUILD_COMPILED), so the setup.py packages
    these libraries instead of compiling them again."""
    compiled = compiled_in(tmp_path, cuda)
    assert read_compiled(compiled.write(tmp_path / "compiled.json")) == compiled


def test_a_compiled_record_that_cannot_be_packaged_is_refused(tmp_path):
    record = compiled_in(tmp_path).write(tmp_path / "compiled.json")
    (tmp_path / "_C_cuda.abi3.so").unlink()
    with pytest.raises(BuildError, match="_C_cuda.abi3.so, which is not there"):
        read_compiled(record)
    record.write_text("{}")
    with pytest.raises(BuildError, match="cannot read the compiled libraries' record"):
        read_compiled(record)
    with pytest.raises(BuildError, match="cannot read"):
        read_compiled(tmp_path / "absent.json")


def test_compile_libraries_given_a_toolchain_runs_no_preflight(tmp_path, monkeypatch):
    """prebuild wheel's preflight found the toolchain once, for every wheel: compile_libraries
    reuses it; given none (a source build's setup.py), it runs its own."""
    from prebuild.tool.builder import compile as compile_module

    preflights = []

    def preflight(options):
        preflights.append(options)
        raise ToolchainError("stop here")

    def stop(*args, **kwargs):  # the first step after the preflight
        raise ToolchainError("compiled")

    monkeypatch.setattr(compile_module, "preflight", preflight)
    monkeypatch.setattr(compile_module, "find_cxx", stop)
    project = read_config(ROOT)
    options = flags.BuildOptions(archs=(), ptx=False, build_dir=tmp_path)
    with pytest.raises(ToolchainError, match="compiled"):
        compile_libraries(project, options, toolchain=Toolchain(find_torch(), None))
    assert preflights == []
    with pytest.raises(ToolchainError, match="stop here"):
        compile_libraries(project, options)
    assert preflights == [options]
    cuda = flags.BuildOptions(archs=parse_arch_list("sm_80"), ptx=False, build_dir=tmp_path)
    with pytest.raises(ValueError, match="needs the toolchain's nvcc"):
        compile_libraries(project, cuda, toolchain=Toolchain(find_torch(), None))


def test_unity_batches_balance_the_sizes_and_keep_name_order():
    sizes = {Path(n): size for n, size in [("a", 10), ("b", 70), ("c", 30), ("d", 40), ("e", 20)]}
    # largest first into the smallest group: b | d | c, then e to c, then a to d
    assert unity_batches(sizes, 3) == [[Path("a"), Path("d")], [Path("b")], [Path("c"), Path("e")]]
    assert unity_batches(sizes, 1) == [sorted(sizes)]
    assert unity_batches(sizes, 9) == [[p] for p in sorted(sizes)]  # never an empty group
    groups = unity_batches(sizes, 2)
    assert sorted(p for g in groups for p in g) == sorted(sizes)
    assert [sum(sizes[p] for p in g) for g in groups] == [80, 90]


def test_unity_sources_compile_and_link_like_the_files_they_include(tmp_path):
    """Each generated unit includes its group's files, so one compile per unit gives the library
    every function; a second call with the same groups leaves the units untouched (ninja then
    has nothing to do), and as many jobs as files compile the files themselves."""
    src, build = tmp_path / "csrc", tmp_path / "build"
    (build / "obj").mkdir(parents=True)
    files = write_sources(src, {"a/one.cpp": 300, "b/two.cpp": 200, "three.cpp": 100})
    sources = sorted(files.values())
    assert unity_sources(sources, 3, build / "unity") == sources
    assert not (build / "unity").exists()
    units = unity_sources(sources, 2, build / "unity")
    assert [u.name for u in units] == ["unity_0.cpp", "unity_1.cpp"]
    assert units[0].read_text().count("#include") == 1  # one.cpp, the largest, alone
    assert f'#include "{files["three.cpp"]}"' in units[1].read_text()
    write_ninja(src, build, [spec("libu.so", units)])
    run_ninja(build, 2)
    library = ctypes.CDLL(str(build / "libu.so"))
    assert (library.one(), library.two(), library.three()) == (9, 9, 9)  # len(name)
    stamps = [u.stat().st_mtime_ns for u in units]
    assert unity_sources(sources, 2, build / "unity") == units
    assert [u.stat().st_mtime_ns for u in units] == stamps
    run_ninja(build, 2)
    assert "no work to do" in (build / "build.log").read_text()


def test_a_unity_build_compiles_the_simt_library_and_a_sanitised_cpu_library_in_units(tmp_path):
    """[tool.prebuild] unity-build: the simt library's *_simt.cpp files in as many units as
    compile jobs, and the CPU library's .cpp files too in a sanitised build, the units named
    apart (the two libraries build in one ninja file), each file in one unit of its own
    library. The CPU library that ships compiles file by file (its code is the speed users get)."""
    src = tmp_path / "csrc"
    cpu_files, simt_files = (
        ["a.cpp", "b/b.cpp", "c.cpp"],
        ["x_simt.cpp", "y_simt.cpp", "z_simt.cpp"],
    )
    files = write_sources(src, dict(zip(cpu_files + simt_files, [300, 200, 100, 50, 40, 30])))
    project = replace(read_config(ROOT), sources=src, unity_build=True)
    options = flags.BuildOptions(archs=(), ptx=False, build_dir=tmp_path / "build")
    sanitized = replace(options, sanitize="address,undefined")
    torch, cxx = find_torch(), find_cxx()
    unity = tmp_path / "build" / "unity"

    def spec_of(simt, options=options, jobs=2, project=project):
        return host_library_spec(project, torch, cxx, options, simt, jobs, unity)

    def included(units):
        return sorted(
            line.split('"')[1]
            for u in units
            for line in u.read_text().splitlines()
            if line.startswith("#include")
        )

    assert spec_of(False).sources == sorted(files[n] for n in cpu_files)  # the one that ships
    simt, cpu = spec_of(True), spec_of(False, sanitized)
    assert [u.name for u in simt.sources] == ["simt_unity_0.cpp", "simt_unity_1.cpp"]
    assert [u.name for u in cpu.sources] == ["cpu_unity_0.cpp", "cpu_unity_1.cpp"]
    assert included(simt.sources) == sorted(str(files[n]) for n in simt_files)
    assert included(cpu.sources) == sorted(str(files[n]) for n in cpu_files)
    assert spec_of(True, jobs=3).sources == sorted(files[n] for n in simt_files)  # a file a job
    one_by_one = spec_of(True, project=replace(project, unity_build=False))
    assert one_by_one.sources == sorted(files[n] for n in simt_files)


def test_nvcc_s_flag_variables_are_written_into_the_commands(tmp_path, monkeypatch):
    """NVCC_PREPEND_FLAGS and NVCC_APPEND_FLAGS go into the CUDA library's compile and link
    commands, where nvcc would add them, and out of ninja's environment: ninja compiles again
    when they change (it compares commands), the manifest's flags hold them, and nvcc does not
    add them a second time."""
    from types import SimpleNamespace

    from prebuild.tool.builder.compile import cuda_library_spec

    project = read_config(ROOT)
    options = flags.BuildOptions(archs=parse_arch_list("sm_90"), ptx=False, build_dir=tmp_path)
    nvcc = SimpleNamespace(path=Path("/cuda/bin/nvcc"))
    monkeypatch.delenv("NVCC_PREPEND_FLAGS", raising=False)
    monkeypatch.delenv("NVCC_APPEND_FLAGS", raising=False)
    plain = cuda_library_spec(project, find_torch(), nvcc, options, [])
    monkeypatch.setenv("NVCC_PREPEND_FLAGS", "-O2")
    monkeypatch.setenv("NVCC_APPEND_FLAGS", '-DX="a b" -lineinfo')
    given = cuda_library_spec(project, find_torch(), nvcc, options, [])
    for made, was in (
        (given.compile_flags, plain.compile_flags),
        (given.link_flags, plain.link_flags),
    ):
        assert made == ["-O2", *was, '-DX="a b"', "-lineinfo"]

    (tmp_path / "build.ninja").write_text(
        'rule env\n  command = echo "[$$NVCC_PREPEND_FLAGS$$NVCC_APPEND_FLAGS]" > $out\n'
        "build seen: env\n"
    )
    run_ninja(tmp_path, 1)
    assert (tmp_path / "seen").read_text().strip() == "[]"


def test_a_failed_step_is_reported_failed(tmp_path):
    """ninja prints a step's line as the step ends, then FAILED: if it failed."""
    (tmp_path / "build.ninja").write_text(
        "rule ok\n  command = touch $out\n  description = ok $out\n"
        "rule bad\n  command = exit 1\n  description = bad $out\n"
        "build a: ok\nbuild b: bad\n"
    )
    steps = []
    with pytest.raises(BuildError, match="FAILED"):
        run_ninja(tmp_path, 1, lambda *step: steps.append(step))
    assert steps == [(1, 2, "ok a"), (2, 2, "bad b"), (2, 2, "bad b", True)]
