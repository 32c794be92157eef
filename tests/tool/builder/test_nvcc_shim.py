"""prebuild.tool.builder.nvcc_shim: every arch option of a call is replaced by the requested
-gencode options, everything else is kept in order; queries pass through; a C++ standard older
than torch's is raised (never lowered; added only where a call compiles torch's headers
asking none); every call is logged."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from prebuild.tool.builder.nvcc_shim import (
    ARCH_OPTIONS,
    QUERY_OPTIONS,
    SHIM_ENV_COMPRESS,
    SHIM_ENV_GENCODE,
    SHIM_ENV_LOG,
    SHIM_ENV_MIN_STD,
    SHIM_ENV_NO_DEBUG,
    SHIM_ENV_REAL,
    abi_for_torch,
    add_compression,
    raise_std,
    requested_std,
    rewrite_args,
    std_for_torch,
    std_year,
    without_debug_info,
)

WANT = ["-gencode=arch=compute_90,code=sm_90"]


def recording_compiler(path, *words: str, status: int = 0):
    """A compiler at ``path`` that writes its arguments (and ``words``, shell words it expands)
    one a line to ``called`` beside it, and exits with ``status``."""
    extra = "".join(f" {w}" for w in words)
    path.write_text(
        f'#!/bin/sh\nprintf \'%s\\n\' "$@"{extra} > "$(dirname "$0")/called"\nexit {status}\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


TORCH_I = "-I/v/torch/include"  # torch's headers on the path: a compile the standard is raised for


def nvcc_env(fake, log, **more: str) -> dict[str, str]:
    """The shim's environment as nvcc: ``fake`` behind it, the wheel's gencode, its log, C++20."""
    return {
        **os.environ,
        SHIM_ENV_REAL: str(fake),
        SHIM_ENV_GENCODE: json.dumps(WANT),
        SHIM_ENV_LOG: str(log),
        SHIM_ENV_MIN_STD: "c++20",
        **more,
    }


def test_hard_coded_gencodes_are_replaced_and_other_flags_kept():
    given_args = [
        "-c",
        "k.cu",
        "-o",
        "k.o",
        "-gencode",
        "arch=compute_75,code=sm_75",
        "-gencode=arch=compute_80,code=[sm_80,compute_80]",
        "--use_fast_math",
        "--maxrregcount=64",
        "-arch=sm_86",
        "--gpu-architecture",
        "compute_89",
        "-code=sm_89",
        "--generate-code=arch=compute_70,code=sm_70",
        "-O3",
        "-Xptxas",
        "-v",
    ]
    assert rewrite_args(given_args, WANT) == [
        "-c",
        "k.cu",
        "-o",
        "k.o",
        "--use_fast_math",
        "--maxrregcount=64",
        "-O3",
        "-Xptxas",
        "-v",
        *WANT,
    ]


def test_queries_pass_through():
    for query in (["--version"], ["-V"], ["--list-gpu-code"]):
        assert rewrite_args(query, WANT) == query


# Any option but a query (--version, -h, ...: those calls pass through untouched, tested above)
# or an arch option written bare (-code: then it takes the next argument, as nvcc reads it).
plain = (
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz_=.,/0123456789+", min_size=1, max_size=12)
    .map(lambda s: "-" + s)
    .filter(lambda a: a not in QUERY_OPTIONS and a not in ARCH_OPTIONS)
)
arch_option = st.tuples(
    st.sampled_from(ARCH_OPTIONS),
    st.sampled_from(["sm_75", "arch=compute_80,code=sm_80", "native"]),
)


@given(
    st.lists(
        st.one_of(
            plain.map(lambda a: [a]),
            arch_option.map(lambda o: [o[0], o[1]]),
            arch_option.map(lambda o: [f"{o[0]}={o[1]}"]),
        ),
        max_size=12,
    )
)
def test_property_no_arch_option_survives_and_the_rest_keeps_its_order(groups):
    args = [a for g in groups for a in g]
    out = rewrite_args(args, WANT)
    assert out[-1:] == WANT
    kept = [
        g[0]
        for g in groups
        if len(g) == 1
        and not g[0].startswith(tuple(f"{o}=" for o in ARCH_OPTIONS))
        and g[0] not in ARCH_OPTIONS
    ]
    if any(
        a in ("--version", "-V", "--help", "-h", "--list-gpu-code", "--list-gpu-arch") for a in args
    ):
        assert out == args
    else:
        assert out[:-1] == kept


def test_the_shim_runs_the_real_nvcc_with_the_rewritten_command(tmp_path):
    fake = recording_compiler(tmp_path / "nvcc", status=7)
    log = tmp_path / "log.jsonl"
    env = {
        **os.environ,
        SHIM_ENV_REAL: str(fake),
        SHIM_ENV_GENCODE: json.dumps(WANT),
        SHIM_ENV_LOG: str(log),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "prebuild.tool.builder.nvcc_shim", "-c", "a.cu", "-arch=sm_75"],
        env=env,
    )
    assert proc.returncode == 7  # the real nvcc's exit status
    assert (tmp_path / "called").read_text().split() == ["-c", "a.cu", *WANT]
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry == {"given": ["-c", "a.cu", "-arch=sm_75"], "run": ["-c", "a.cu", *WANT]}


def test_std_year_orders_the_standards():
    assert [std_year(s) for s in ("c++98", "c++03", "c++11", "c++17", "c++20")] == [
        1998,
        2003,
        2011,
        2017,
        2020,
    ]
    assert std_year("gnu++17") == 2017 and std_year("gnu++98") == 1998
    assert std_year("c++2a") is None and std_year("c++") is None and std_year("gnu++1z") is None


def test_raise_std_raises_every_spelling_and_nothing_else():
    given = [
        "-c",
        "k.cu",
        "-std=c++17",
        "--std",
        "c++14",
        "--std=c++11",
        "-std",
        "c++20",
        "-Xcompiler",
        "-O3",
    ]
    assert raise_std(given, "c++20") == [
        "-c",
        "k.cu",
        "-std=c++20",
        "--std",
        "c++20",
        "--std=c++20",
        "-std",
        "c++20",
        "-Xcompiler",
        "-O3",
    ]
    assert raise_std(["-std=c++20"], "c++17") == ["-std=c++20"]  # never lowered
    assert raise_std(["-c", "k.cu"], "c++20") == ["-c", "k.cu"]  # never added
    assert raise_std(["-std=c++17"], None) == ["-std=c++17"] and raise_std(["-std=c++17"], "") == [
        "-std=c++17"
    ]
    # GCC's dialect (a host compiler's call) stays GCC's; a draft's name is left as it is.
    assert raise_std(["-std=gnu++17", "--std", "gnu++14"], "c++20") == [
        "-std=gnu++20", "--std", "gnu++20",
    ]  # fmt: skip
    assert raise_std(["-std=gnu++20", "-std=c++2a", "-std=c++1z"], "c++20") == [
        "-std=gnu++20", "-std=c++2a", "-std=c++1z",
    ]  # fmt: skip
    assert (
        requested_std(given) == "c++20" and requested_std(["-c"]) is None
    )  # the last one, as nvcc reads them


def test_a_compile_of_torch_s_headers_asking_no_standard_gets_torch_s():
    """xlstm 2.0.6's CMake build compiles `slstm.cc`, which includes torch/extension.h, with
    no -std (g++'s default, gnu++17): torch 2.14's headers then stop on `#error C++20`. A call
    including torch's headers and asking no standard is given torch's (GCC's dialect to a host
    compiler); one asking a standard is raise_std's; the others are left as they are."""
    torch = "-isystem /v/lib/python3.11/site-packages/torch/include"
    host = ["-O3", *torch.split(), "-o", "slstm.cc.o", "-c", "/w/xlstm/slstm.cc"]
    assert std_for_torch(host, "c++20", host=True) == [*host, "-std=gnu++20"]
    nvcc = ["-I/v/site-packages/torch/include/torch/csrc/api/include", "-c", "k.cu", "-o", "k.o"]
    assert std_for_torch(nvcc, "c++20", host=False) == [*nvcc, "-std=c++20"]
    for left in (
        ["-O3", "-c", "/w/blas.cu", "-o", "blas.o"],  # no torch header: its own standard
        [*torch.split(), "-c", "helper.c", "-o", "helper.o"],  # C
        [*torch.split(), "-std=c++17", "-c", "a.cc"],  # asked: raise_std's to raise
        [*torch.split(), "-o", "_slstm.so", "slstm.cc.o"],  # a link
    ):
        assert std_for_torch(left, "c++20", host=True) == left, left
    assert std_for_torch(host, None, host=True) == host


def test_a_compile_of_torch_s_headers_gets_torch_s_abi_where_it_defines_one():
    """VPTQ's CMake defines _GLIBCXX_USE_CXX11_ABI=0 for every compile (as projects did for
    torch's wheels before 2.7): built so, its library needs functions torch does not export."""
    torch = "-I/v/site-packages/torch/include"
    host = [torch, "-D_GLIBCXX_USE_CXX11_ABI=1", "-D_GLIBCXX_USE_CXX11_ABI=0", "-c", "a.cpp"]
    assert abi_for_torch(host, "1") == [torch, *["-D_GLIBCXX_USE_CXX11_ABI=1"] * 2, "-c", "a.cpp"]
    nvcc = [torch, "-Xcompiler", "-fPIC,-D_GLIBCXX_USE_CXX11_ABI=0", "-c", "k.cu"]
    assert abi_for_torch(nvcc, "1")[2] == "-fPIC,-D_GLIBCXX_USE_CXX11_ABI=1"
    for left in (
        ["-D_GLIBCXX_USE_CXX11_ABI=0", "-c", "own.cpp"],  # no torch header: its own ABI
        [torch, "-c", "b.cpp"],  # defining none: the compiler's (torch's build defines it)
        [torch, "-D_GLIBCXX_USE_CXX11_ABI=0", "-o", "x.so", "a.o"],  # a link
    ):
        assert abi_for_torch(left, "1") == left, left
    assert abi_for_torch(host, "") == host  # torch's unknown


@given(
    st.lists(
        st.sampled_from(
            [
                "-c",
                "k.cu",
                "-O3",
                "-std",
                "--std",
                "-std=c++14",
                "-std=c++17",
                "-std=c++20",
                "c++11",
                "c++17",
                "--std=c++03",
            ]
        ),
        max_size=10,
    )
)
def test_property_raise_std_changes_only_standards_and_only_upwards(args):
    out = raise_std(args, "c++20")
    assert len(out) == len(args)
    for before, after in zip(args, out):
        if before != after:
            old, new = before.rpartition("c++")[2], after.rpartition("c++")[2]
            assert before.startswith(("-std", "--std", "c++")) and after.endswith("c++20"), (
                before,
                after,
            )
            assert std_year("c++" + old) < 2020 and new == "20"


def test_unchanged_calls_are_logged_too_and_the_standard_is_raised(tmp_path):
    """A project passing its own -std leaves torch's -gencode last and right: the call is not
    changed by the arch rewrite, and must be logged all the same (what nvcc wrote is read from
    the log); its C++17 is raised to the C++20 torch 2.14's headers need."""
    fake = recording_compiler(tmp_path / "nvcc")
    log = tmp_path / "log.jsonl"
    env = nvcc_env(fake, log)
    for args in (
        ["-c", "a.cu", "-o", "/b/a.o", TORCH_I, "-std=c++20", *WANT],
        ["-c", "b.cu", "-o", "/b/b.o", TORCH_I, "-std=c++17", *WANT],
    ):
        assert (
            subprocess.run(
                [sys.executable, "-m", "prebuild.tool.builder.nvcc_shim", *args], env=env
            ).returncode
            == 0
        )
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["given"][1] for e in entries] == ["a.cu", "b.cu"]
    assert entries[0]["run"] == entries[0]["given"]
    assert entries[1]["run"] == ["-c", "b.cu", "-o", "/b/b.o", TORCH_I, "-std=c++20", *WANT]
    assert (tmp_path / "called").read_text().split() == entries[1]["run"]


def test_nvcc_s_flag_variables_are_split_as_nvcc_splits_them():
    from prebuild.tool.builder.nvcc_shim import env_flags

    assert env_flags({}) == ([], [])
    environ = {"NVCC_PREPEND_FLAGS": " -O2 ", "NVCC_APPEND_FLAGS": "-DX=\"a b\"  -DY='c d'"}
    assert env_flags(environ) == (["-O2"], ['-DX="a b"', "-DY='c", "d'"])


def test_nvcc_s_flag_variables_become_part_of_the_call(tmp_path):
    """NVCC_PREPEND_FLAGS and NVCC_APPEND_FLAGS are added where nvcc adds them and taken out
    of its environment (not added twice): the arch rewrite and the standard raise reach them,
    and the log holds them. The host compiler's calls are left alone."""
    fake = recording_compiler(tmp_path / "nvcc", '"[$NVCC_PREPEND_FLAGS$NVCC_APPEND_FLAGS]"')
    log = tmp_path / "log.jsonl"
    env = nvcc_env(
        fake,
        log,
        NVCC_PREPEND_FLAGS="-arch=sm_75",
        NVCC_APPEND_FLAGS="-std=c++17 -DFMT_USE_CONSTEXPR=1",
    )
    given = ["-c", "a.cu", "-o", "/b/a.o", TORCH_I]
    shim = [sys.executable, "-m", "prebuild.tool.builder.nvcc_shim"]
    assert subprocess.run([*shim, *given], env=env).returncode == 0
    run = ["-c", "a.cu", "-o", "/b/a.o", TORCH_I, "-std=c++20", "-DFMT_USE_CONSTEXPR=1", *WANT]
    assert (tmp_path / "called").read_text().split() == [*run, "[]"]
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        {"given": ["-arch=sm_75", *given, "-std=c++17", "-DFMT_USE_CONSTEXPR=1"], "run": run}
    ]
    host = {k: v for k, v in env.items() if k != SHIM_ENV_GENCODE}
    assert subprocess.run([*shim, "-c", "m.cpp"], env=host).returncode == 0
    called = (tmp_path / "called").read_text().split()
    assert called == ["-c", "m.cpp", "[-arch=sm_75-std=c++17"] + ["-DFMT_USE_CONSTEXPR=1]"]


def test_a_compile_cache_gets_diag_options_joined_to_their_values(tmp_path):
    """sccache reads "-diag-suppress 20012,186" (gsplat's) as two input files and caches
    nothing; through the launcher the value is joined, as nvcc also reads it. Without a cache
    the call runs as given."""
    from prebuild.tool.builder.nvcc_shim import SHIM_ENV_LAUNCHER, joined_values

    assert joined_values(["-c", "a.cu", "-diag-suppress", "20012,186", "--diag-error", "1"]) == [
        "-c", "a.cu", "-diag-suppress=20012,186", "--diag-error=1",
    ]  # fmt: skip
    assert joined_values(["-diag-suppress=1", "-O3", "-diag-warn"]) == [
        "-diag-suppress=1", "-O3", "-diag-warn",
    ]  # fmt: skip
    launcher = tmp_path / "launcher"
    launcher.write_text('#!/bin/sh\nprintf \'%s\\n\' "$@" > "$(dirname "$0")/launched"\n')
    launcher.chmod(launcher.stat().st_mode | stat.S_IEXEC)
    env = {
        **os.environ,
        SHIM_ENV_REAL: "/opt/cuda/bin/nvcc",
        SHIM_ENV_GENCODE: json.dumps(WANT),
        SHIM_ENV_LAUNCHER: str(launcher),
    }
    given = ["-c", "a.cu", "-diag-suppress", "20012,186"]
    proc = subprocess.run(
        [sys.executable, "-m", "prebuild.tool.builder.nvcc_shim", *given], env=env
    )
    assert proc.returncode == 0
    assert (tmp_path / "launched").read_text().split() == [
        "/opt/cuda/bin/nvcc", "-c", "a.cu", "-diag-suppress=20012,186", *WANT,
    ]  # fmt: skip


def test_without_a_gencode_list_it_is_the_host_compiler(tmp_path):
    """As the build's $CXX: no arch option is added or dropped (a host compiler has none), the
    project's older standard is raised in its own dialect, and the call is logged."""
    fake = recording_compiler(tmp_path / "c++")
    log = tmp_path / "cxx.jsonl"
    env = {k: v for k, v in os.environ.items() if k != SHIM_ENV_GENCODE}
    env.update({SHIM_ENV_REAL: str(fake), SHIM_ENV_LOG: str(log), SHIM_ENV_MIN_STD: "c++20"})
    torch_include = "-I/v/torch/include"
    given = ["-c", "m.cpp", "-o", "m.o", torch_include, "-O3", "-std=gnu++17", "-arch=x"]
    proc = subprocess.run(
        [sys.executable, "-m", "prebuild.tool.builder.nvcc_shim", *given], env=env
    )
    assert proc.returncode == 0
    run = ["-c", "m.cpp", "-o", "m.o", torch_include, "-O3", "-std=gnu++20", "-arch=x"]
    assert (tmp_path / "called").read_text().split() == run
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        {"given": given, "run": run}
    ]
    # without torch's headers its own standard stays (CompressAI's pybind11 modules)
    log.unlink()
    own = [a for a in given if a != torch_include]
    proc = subprocess.run([sys.executable, "-m", "prebuild.tool.builder.nvcc_shim", *own], env=env)
    assert proc.returncode == 0 and (tmp_path / "called").read_text().split() == own
    assert json.loads(log.read_text()) == {"given": own, "run": own}
    # a compile of torch's headers asking for no standard (xlstm's CMake build): given torch's
    given = ["-isystem", "/v/torch/include", "-c", "slstm.cc", "-o", "slstm.o"]
    log.unlink()
    proc = subprocess.run(
        [sys.executable, "-m", "prebuild.tool.builder.nvcc_shim", *given], env=env
    )
    assert proc.returncode == 0
    assert (tmp_path / "called").read_text().split() == [*given, "-std=gnu++20"]
    assert json.loads(log.read_text())["run"] == [*given, "-std=gnu++20"]


def test_a_host_compile_asking_for_debug_information_gets_g0_last():
    for debug in ("-g", "-g3", "-ggdb", "-ggdb3", "-gdwarf-4"):
        args = ["-DNDEBUG", debug, "-O3", "-c", "m.cpp", "-o", "m.o"]
        assert without_debug_info(args) == [*args, "-g0"]
    for unchanged in (
        ["-O3", "-c", "m.cpp", "-o", "m.o"],  # asks for none
        ["-g", "-shared", "m.o", "-o", "m.so"],  # a link
        ["-gencode=arch=compute_90,code=sm_90", "-c", "k.cu"],  # not a -g option
        ["-gz", "-c", "m.cpp"],  # compression of debug sections, none asked
    ):
        assert without_debug_info(unchanged) == unchanged


def test_the_host_compiler_leaves_debug_information_out_only_where_told(tmp_path):
    """As the build's $CXX with PREBUILD_NVCC_NO_DEBUG=1 (a wheel that strips it): Python's -g
    is followed by -g0, logged as run, and a compile failing with it is not run again without
    it (it is not the raised standard); unset (--no-strip), the call is as asked; as nvcc, its
    own -g is dropped instead."""
    fake = recording_compiler(tmp_path / "c++")
    log = tmp_path / "cxx.jsonl"
    env = {k: v for k, v in os.environ.items() if k != SHIM_ENV_GENCODE}
    env.update({SHIM_ENV_REAL: str(fake), SHIM_ENV_LOG: str(log), SHIM_ENV_NO_DEBUG: "1"})
    given = ["-g", "-O3", "-c", "m.cpp", "-o", "m.o"]
    shim = [sys.executable, "-m", "prebuild.tool.builder.nvcc_shim"]
    assert subprocess.run([*shim, *given], env=env).returncode == 0
    assert (tmp_path / "called").read_text().split() == [*given, "-g0"]
    assert json.loads(log.read_text()) == {"given": given, "run": [*given, "-g0"]}
    # a compile failing in the raised standard runs again as asked, -g0 kept
    (tmp_path / "failing").mkdir()
    failing = recording_compiler(tmp_path / "failing" / "c++", status=1)
    older = [*given, "-I/v/torch/include", "-std=c++17"]
    raised = {**env, SHIM_ENV_REAL: str(failing), SHIM_ENV_MIN_STD: "c++20"}
    assert subprocess.run([*shim, *older], env=raised).returncode == 1
    assert (tmp_path / "failing" / "called").read_text().split() == [*older, "-g0"]
    log.unlink()
    assert subprocess.run([*shim, *given], env={**env, SHIM_ENV_NO_DEBUG: ""}).returncode == 0
    assert (tmp_path / "called").read_text().split() == given
    # as nvcc: its own -g (the host code's debug information) dropped, no -g0 added
    as_nvcc = nvcc_env(fake, log, **{SHIM_ENV_NO_DEBUG: "1"})
    cu = ["-g", "-O3", "-c", "k.cu", "-o", "k.o"]
    assert subprocess.run([*shim, *cu], env=as_nvcc).returncode == 0
    called = (tmp_path / "called").read_text().split()
    assert "k.cu" in called and "-g" not in called and "-g0" not in called, called


def test_an_nvcc_compile_asking_for_host_debug_information_runs_without_it():
    from prebuild.tool.builder.nvcc_shim import nvcc_without_debug_info

    for debug in ("-g", "--debug"):
        assert nvcc_without_debug_info(["-O3", debug, "-c", "k.cu"]) == ["-O3", "-c", "k.cu"]
    for unchanged in (
        ["-G", "-c", "k.cu"],  # the device code's: it changes the code
        ["-Xcompiler", "-g", "-c", "k.cu"],  # the host compiler's flag, as given
        ["--compiler-options", "-g", "-c", "k.cu"],
        ["-g", "-dlink", "a.o", "-o", "dlink.o"],  # not a compile
        ["-lineinfo", "-c", "k.cu"],
    ):
        assert nvcc_without_debug_info(unchanged) == unchanged


def test_a_call_asking_for_an_arch_specific_variant_keeps_it_for_that_arch():
    """SageAttention's and FlashAttention 3's Hopper kernels ask for sm_90a (wgmma exists there
    only: "Instruction 'wgmma.fence' not supported on .target 'sm_90'"). Asked for sm_90, such a
    call compiles sm_90a, which the same GPUs run; other archs, PTX and other calls as asked."""
    from prebuild.tool.builder.nvcc_shim import keep_specific, specific_archs

    ours = [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90",
    ]
    hopper = ["-c", "qattn_sm90.cu", "-gencode", "arch=compute_90a,code=sm_90a"]
    assert specific_archs(hopper) == {"90": "a"}
    assert specific_archs(["-arch=sm_100f", "-c", "k.cu", "-DUSE_sm_90a"]) == {"100": "f"}
    assert rewrite_args(hopper, ours) == [
        "-c",
        "qattn_sm90.cu",
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_90,code=compute_90",
    ]
    assert rewrite_args(["-c", "k.cu"], ours) == ["-c", "k.cu", *ours]
    assert keep_specific(["-gencode=arch=compute_90a,code=sm_90a"], {"90": "a"}) == [
        "-gencode=arch=compute_90a,code=sm_90a"
    ]  # asked for sm_90a already
    assert keep_specific(["-gencode=arch=compute_100,code=sm_100"], {"100": "f"}) == [
        "-gencode=arch=compute_100f,code=sm_100f"
    ]


def test_a_native_cpu_target_is_dropped_wherever_it_is_given_and_an_explicit_one_kept():
    """s4's kernels: -march=native put AVX-512 into a wheel (SIGILL on a CPU without it)."""
    from prebuild.tool.builder.nvcc_shim import drop_native

    assert drop_native(["-O3", "-march=native", "-c", "a.cpp"]) == ["-O3", "-c", "a.cpp"]
    assert drop_native(["-Xcompiler", "-march=native", "-c", "a.cu"]) == ["-c", "a.cu"]
    given = ["-Xcompiler", "'-fPIC',-march=native", "--compiler-options=-march=native"]
    given += ["-Xcompiler=-O2,-mcpu=native", "-march=x86-64-v3", "-mtune=native"]
    assert drop_native(given) == [
        "-Xcompiler", "'-fPIC'", "-Xcompiler=-O2", "-march=x86-64-v3", "-mtune=native",
    ]  # fmt: skip
    assert drop_native(["-Xcompiler"]) == ["-Xcompiler"]  # a dangling option, as given


def test_the_shim_runs_the_compiler_without_a_native_cpu_target(tmp_path):
    fake = recording_compiler(tmp_path / "c++")
    env = {k: v for k, v in os.environ.items() if k != SHIM_ENV_GENCODE}
    env.update({SHIM_ENV_REAL: str(fake), SHIM_ENV_LOG: str(tmp_path / "cxx.jsonl")})
    given = ["-c", "m.cpp", "-march=native", "-O3"]
    shim = [sys.executable, "-m", "prebuild.tool.builder.nvcc_shim"]
    assert subprocess.run([*shim, *given], env=env).returncode == 0
    assert (tmp_path / "called").read_text().split() == ["-c", "m.cpp", "-O3"]
    (entry,) = [json.loads(line) for line in (tmp_path / "cxx.jsonl").read_text().splitlines()]
    assert entry == {"given": given, "run": ["-c", "m.cpp", "-O3"]}


def picky_compiler(path, refuses: str):
    """A compiler that fails, saying so on stderr and stdout, when an argument is ``refuses``
    (a standard its code does not compile in); records its arguments like recording_compiler."""
    path.write_text(
        "#!/bin/sh\n"
        'printf \'%s\\n\' "$@" >> "$(dirname "$0")/called"\n'
        f'for a in "$@"; do if [ "$a" = "{refuses}" ]; then\n'
        f'  echo "a.cu(3): error: not in {refuses}" >&2; echo "stdout of {refuses}"; exit 2\n'
        "fi; done\n"
        "echo compiled\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_a_compile_failing_in_the_raised_standard_runs_again_as_asked(tmp_path):
    """A file whose own code does not compile in C++20 (torch's include folder on its path, as
    every CUDAExtension's, and no torch header included, else it would fail as asked too):
    compiled as the project asked, that call logged, the raised run's error not shown; a call
    asking for no older standard runs once."""
    fake = picky_compiler(tmp_path / "nvcc", "-std=c++20")
    log = tmp_path / "log.jsonl"
    args = ["-c", "a.cu", "-o", "/b/a.o", TORCH_I, "-std=c++17"]
    proc = subprocess.run(
        [sys.executable, "-m", "prebuild.tool.builder.nvcc_shim", *args],
        env=nvcc_env(fake, log), capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "error" not in proc.stderr and proc.stdout == "compiled\n"
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry == {"given": args, "run": [*args, *WANT]}
    calls = (tmp_path / "called").read_text().split("-c\n")[1:]
    assert ["-std=c++20" in c for c in calls] == [True, False]  # raised first, then as asked


def test_a_compile_failing_both_ways_shows_the_raised_standard_s_error(tmp_path):
    """Where the file fails as asked too (it includes torch's headers, which need C++20), the
    raised run's output is what the build shows, its exit status what it gets, its call what
    is logged."""
    fake = recording_compiler(tmp_path / "nvcc", status=3)
    picky = picky_compiler(tmp_path / "picky", "-std=c++20")
    log = tmp_path / "log.jsonl"
    args = ["-c", "a.cu", TORCH_I, "-std=c++17"]
    both = f"{picky} -std=c++20"  # refuses C++20 and, through its last word, every call
    for real, status in ((str(fake), 3), (both, 2)):
        log.unlink(missing_ok=True)
        proc = subprocess.run(
            [sys.executable, "-m", "prebuild.tool.builder.nvcc_shim", *args],
            env={**nvcc_env(fake, log), SHIM_ENV_REAL: real}, capture_output=True, text=True,
        )  # fmt: skip
        assert proc.returncode == status
        (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
        assert "-std=c++20" in entry["run"] and "-std=c++17" not in entry["run"]
    assert "a.cu(3): error: not in -std=c++20" in proc.stderr
    assert proc.stdout == "stdout of -std=c++20\n"


SIZE = ["--compress-mode=size"]


def test_compression_is_added_unless_the_call_chooses_its_own():
    """flash-attention's layer_norm objects are a tenth of nvcc 13.0's default size with
    --compress-mode=size; a project that chooses (nixpkgs' -Xfatbin=-compress-all, a
    --no-compress) keeps its choice."""
    assert add_compression(["-c", "a.cu"], SIZE) == ["-c", "a.cu", *SIZE]
    assert add_compression(["-c", "a.cu"], []) == ["-c", "a.cu"]
    for own in (
        ["--no-compress"],
        ["-no-compress"],
        ["--compress-mode=speed"],
        ["--compress-mode", "none"],
        ["-Xfatbin=-compress-all"],
        ["-Xfatbin", "-compress-all"],
    ):
        args = ["-c", "a.cu", *own]
        assert add_compression(args, SIZE) == args, own
    assert add_compression(["--version"], SIZE) == ["--version"]


def test_the_shim_adds_the_compression_to_nvcc_s_calls(tmp_path):
    fake = recording_compiler(tmp_path / "nvcc")
    env = {
        **os.environ,
        SHIM_ENV_REAL: str(fake),
        SHIM_ENV_GENCODE: json.dumps(WANT),
        SHIM_ENV_COMPRESS: json.dumps(SIZE),
    }
    shim = [sys.executable, "-m", "prebuild.tool.builder.nvcc_shim"]
    subprocess.run([*shim, "-c", "a.cu"], env=env, check=True)
    assert (tmp_path / "called").read_text().split() == ["-c", "a.cu", *WANT, *SIZE]


def test_classic_compression_needs_an_nvcc_with_compress_mode():
    from packaging.version import Version

    from prebuild.tool.builder.flags import classic_compress_flags

    assert classic_compress_flags(True, Version("13.0")) == SIZE
    assert classic_compress_flags(True, Version("12.8")) == SIZE
    assert classic_compress_flags(True, Version("12.6")) == []  # no such option: nvcc's default
    assert classic_compress_flags(False, Version("12.6")) == ["--no-compress"]
