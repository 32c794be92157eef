"""prebuild.tool.builder.flags: the pure build rules (defines, gencode flags, wheel labels, jobs,
and the PREBUILD_* environment)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from prebuild.runtime.arch import Arch, ArchError, parse_arch_list
from prebuild.tool.builder.flags import (
    DEFAULT_ARCHS,
    DEFAULT_PTX,
    BuildOptions,
    classic_local_label,
    gencode_flags,
    local_version_label,
    nvcc_flags,
    nvcc_threads,
    parallel_jobs,
    ptx_archs_for,
    sanitizer_flags,
    torch_pin,
    torch_target_define,
)

A = parse_arch_list
CU130 = Version("13.0")


# --- torch target ------------------------------------------------------------------------


def test_torch_target_define_2_13():
    assert torch_target_define(Version("2.13")) == "-DTORCH_TARGET_VERSION=0x020d000000000000"


def test_torch_target_define_matches_torch_header_formula():
    # torch/csrc/stable/version.h: (((0ULL + major) << 56) | ((0ULL + minor) << 48))
    assert torch_target_define(Version("2.9")) == "-DTORCH_TARGET_VERSION=0x0209000000000000"
    assert torch_target_define(Version("3.0")) == "-DTORCH_TARGET_VERSION=0x0300000000000000"
    assert torch_target_define(Version("2.13.5")) == torch_target_define(Version("2.13"))


# --- gencode and PTX ---------------------------------------------------------------------


def test_gencode_flags_sass_only_by_default():
    assert gencode_flags(A("sm_80,sm_90"), ()) == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
    ]


def test_gencode_flags_with_ptx():
    assert gencode_flags(A("sm_80,sm_90"), A("compute_90")) == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90",
    ]


def test_gencode_flags_suffixed_arch():
    assert gencode_flags(A("sm_90a,sm_100f"), ()) == [
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_100f,code=sm_100f",
    ]


def test_gencode_flags_cpu_only():
    assert gencode_flags((), ()) == []


def test_nvcc_flags_hold_gencodes_defines_and_threads():
    flags = nvcc_flags(
        (Path("/inc"),), A("sm_80"), A("compute_80"), 2, True, Version("2.13"), "prebuild"
    )
    assert "--threads=2" in flags
    assert "-I/inc" in flags
    assert "-DTORCH_TARGET_VERSION=0x020d000000000000" in flags
    assert "-DPREBUILD_PACKAGE=prebuild" in flags  # named by the launch helper's errors
    assert flags[-2:] == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_80,code=compute_80",
    ]
    assert "--compress-mode=size" in flags and "--no-compress" not in flags


def test_nvcc_flags_without_compression():
    flags = nvcc_flags((), A("sm_80"), (), 1, False, Version("2.13"), "prebuild")
    assert "--no-compress" in flags and not any(f.startswith("--compress-mode") for f in flags)


@pytest.mark.parametrize(
    "value, expected", [(None, True), ("1", True), ("0", False), ("off", False)]
)
def test_from_env_compress(value, expected):
    env = {} if value is None else {"PREBUILD_COMPRESS": value}
    assert BuildOptions.from_env(env).compress is expected


@pytest.mark.parametrize(
    "archs, expected",
    [
        ("sm_80,sm_90", "compute_90"),
        ("sm_80,sm_90a", "compute_90"),  # the newest, in its plain (portable) form
        ("sm_90,sm_90a", "compute_90"),
        ("sm_90a,sm_100f", "compute_100"),
        ("sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120", "compute_120"),
        ("sm_86", "compute_86"),
    ],
)
def test_ptx_archs_for_newest_plain(archs, expected):
    (ptx,) = ptx_archs_for(A(archs), True)
    assert ptx.compute == expected
    assert ptx.suffix == ""


def test_ptx_archs_for_disabled_or_empty():
    assert ptx_archs_for(A("sm_80,sm_90"), False) == ()
    assert ptx_archs_for((), True) == ()


# --- wheel local-version label -----------------------------------------------------------


@pytest.mark.parametrize(
    "cuda, sass, ptx, label",
    [
        (CU130, "sm_80", "", "cu130.sm80"),
        (CU130, "sm_80,sm_90", "", "cu130.sm80.sm90"),
        (CU130, "sm_80,sm_90", "compute_90", "cu130.sm80.sm90.ptx90"),
        (CU130, "sm_90a", "", "cu130.sm90a"),
        (Version("12.8"), "sm_120", "compute_120", "cu128.sm120.ptx120"),
        (None, "", "", "cpu"),
        (None, "sm_80", "", "cpu"),
        (CU130, "", "", "cpu"),  # no arch: CPU code only, even with an nvcc around
    ],
)
def test_local_version_label(cuda, sass, ptx, label):
    assert local_version_label(cuda, A(sass), A(ptx)) == label
    version = Version("0.1.0+" + label)
    assert version.local == label
    assert version.public == "0.1.0"


archs = st.builds(
    Arch, major=st.integers(1, 99), minor=st.integers(0, 9), suffix=st.sampled_from(["", "a", "f"])
)


@given(
    st.sampled_from([None, Version("12.8"), Version("13.0"), Version("13.2")]),
    st.lists(archs, max_size=6, unique=True).map(lambda xs: tuple(sorted(xs))),
    st.booleans(),
)
def test_local_version_label_is_always_a_valid_local_version(cuda, sass, ptx):
    label = local_version_label(cuda, sass, ptx_archs_for(sass, ptx))
    assert Version(f"0.1.0+{label}").local == label


# --- parallelism -------------------------------------------------------------------------

GiB = 1 << 30


@pytest.mark.parametrize(
    "cpus, memory, per_job, expected",
    [
        (8, 100 * GiB, 2 * GiB, 8),  # bounded by cores
        (8, 5 * GiB, 2 * GiB, 2),  # bounded by memory
        (2, 100 * GiB, 2 * GiB, 2),
        (8, 0, 2 * GiB, 1),  # never below one
        (8, GiB, 2 * GiB, 1),
        (0, 100 * GiB, 2 * GiB, 1),
        (4, 100, 0, 4),  # a zero per-job estimate does not divide by zero
    ],
)
def test_parallel_jobs(cpus, memory, per_job, expected):
    assert parallel_jobs(cpus, memory, per_job) == expected


@given(st.integers(0, 512), st.integers(0, 1 << 40), st.integers(0, 1 << 34))
def test_parallel_jobs_bounds(cpus, memory, per_job):
    jobs = parallel_jobs(cpus, memory, per_job)
    assert jobs >= 1
    assert jobs <= max(1, cpus)
    if per_job > 0 and jobs > 1:
        assert jobs * per_job <= memory


@pytest.mark.parametrize(
    "gencodes, cpus, expected", [(0, 4, 1), (1, 4, 1), (3, 16, 3), (7, 2, 2), (5, 0, 1)]
)
def test_nvcc_threads(gencodes, cpus, expected):
    assert nvcc_threads(gencodes, cpus) == expected


# --- BuildOptions and the environment ----------------------------------------------------


def test_from_env_defaults():
    options = BuildOptions.from_env({})
    assert options.archs == A(DEFAULT_ARCHS)
    assert options.ptx is DEFAULT_PTX is True
    assert options.ptx_archs == (Arch(12, 0),)
    assert options.cuda
    assert options.jobs is None
    assert options.build_dir is None


def test_from_env_defaults_come_from_the_project_when_declared():
    options = BuildOptions.from_env({}, default_archs=A("sm_80,sm_90"), default_ptx=False)
    assert options.archs == A("sm_80,sm_90") and options.ptx_archs == ()
    assert BuildOptions.from_env({"PREBUILD_ARCHS": "sm_86"}, default_archs=A("sm_80")).archs == A(
        "sm_86"
    )


def test_from_env_reads_os_environ(monkeypatch):
    for var in ("PREBUILD_ARCHS", "PREBUILD_PTX", "PREBUILD_JOBS", "PREBUILD_BUILD_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PREBUILD_ARCHS", "sm_86")
    assert BuildOptions.from_env().archs == (Arch(8, 6),)


@pytest.mark.parametrize("text", ["", " ", ","])
def test_from_env_empty_archs_means_cpu_only(text):
    options = BuildOptions.from_env({"PREBUILD_ARCHS": text})
    assert options.archs == ()
    assert not options.cuda
    assert options.ptx is False
    assert options.ptx_archs == ()


def test_from_env_explicit_list_has_no_ptx_unless_asked():
    options = BuildOptions.from_env({"PREBUILD_ARCHS": "90;sm_80 sm_80"})
    assert options.archs == (Arch(8, 0), Arch(9, 0))
    assert options.ptx is False
    assert options.ptx_archs == ()
    with_ptx = BuildOptions.from_env({"PREBUILD_ARCHS": "sm_80,sm_90", "PREBUILD_PTX": "1"})
    assert with_ptx.ptx_archs == (Arch(9, 0),)


@pytest.mark.parametrize("value", ["1", "true", "True", "YES", "on", " 1 "])
def test_from_env_ptx_true(value):
    assert BuildOptions.from_env({"PREBUILD_ARCHS": "sm_80", "PREBUILD_PTX": value}).ptx is True


@pytest.mark.parametrize("value", ["0", "false", "No", "off", "", " "])
def test_from_env_ptx_false(value):
    assert BuildOptions.from_env({"PREBUILD_PTX": value}).ptx is False


@pytest.mark.parametrize("value", ["2", "maybe", "y", "-1", "enable"])
def test_from_env_bad_ptx(value):
    with pytest.raises(ArchError, match="PREBUILD_PTX"):
        BuildOptions.from_env({"PREBUILD_PTX": value})


def test_from_env_bad_archs():
    with pytest.raises(ArchError, match="sm_8'"):
        BuildOptions.from_env({"PREBUILD_ARCHS": "sm_80,sm_8"})


def test_from_env_jobs_and_build_dir(tmp_path):
    options = BuildOptions.from_env({"PREBUILD_JOBS": "3", "PREBUILD_BUILD_DIR": str(tmp_path)})
    assert options.jobs == 3
    assert options.build_dir == tmp_path
    assert BuildOptions.from_env({"PREBUILD_JOBS": ""}).jobs is None
    assert BuildOptions.from_env({"PREBUILD_BUILD_DIR": ""}).build_dir is None


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5", " 2", "00"])
def test_from_env_bad_jobs(value):
    with pytest.raises(ValueError, match="PREBUILD_JOBS"):
        BuildOptions.from_env({"PREBUILD_JOBS": value})


@pytest.mark.parametrize(
    "options",
    [
        BuildOptions(archs=A("sm_80,sm_90a"), ptx=True, jobs=3, build_dir=Path("/tmp/objs")),
        BuildOptions(archs=A("sm_80"), ptx=False),
        BuildOptions(archs=(), ptx=False),
        BuildOptions(archs=A(DEFAULT_ARCHS), ptx=True),
        BuildOptions(archs=A("sm_100f,sm_120"), ptx=False, jobs=1),
        BuildOptions(archs=A("sm_80"), ptx=False, compress=False),
        BuildOptions(archs=A("sm_80"), ptx=False, compiled=Path("/tmp/staging/compiled.json")),
    ],
)
def test_to_env_from_env_round_trip(options):
    env = options.to_env()
    assert all(isinstance(v, str) for v in env.values())
    assert BuildOptions.from_env(env) == options


def test_to_env_layout():
    env = BuildOptions(archs=A("sm_90,sm_80"), ptx=True).to_env()
    # The compile cache is always said: prebuild wheel's launcher or none, and never one of the
    # setup.py's own from a PREBUILD_CACHE in the environment.
    assert env == {
        "PREBUILD_ARCHS": "sm_80,sm_90",
        "PREBUILD_PTX": "1",
        "PREBUILD_COMPILER_LAUNCHER": "",
        "PREBUILD_CACHE": "off",
        "PREBUILD_COMPILED": "",  # none compiled by prebuild wheel: a stray one is not packaged
    }


@given(
    st.lists(archs, max_size=5, unique=True).map(lambda xs: tuple(sorted(xs))),
    st.booleans(),
    st.none() | st.integers(1, 256),
)
def test_to_env_from_env_round_trip_property(arch_list, ptx, jobs):
    options = BuildOptions(archs=arch_list, ptx=ptx, jobs=jobs)
    assert BuildOptions.from_env(options.to_env()) == options


@pytest.mark.parametrize(
    "torch_version, label, pin",
    [
        ("2.14.1+cu130", "pt214.cu130.sm90", "torch>=2.14,<2.15"),
        ("2.13.0", "pt213.cu130.sm90", "torch>=2.13,<2.14"),
        ("3.0.0a0+git1234", "pt30.cu130.sm90", "torch>=3.0,<3.1"),
    ],
)
def test_classic_label_and_torch_pin(torch_version, label, pin):
    from packaging.requirements import Requirement

    assert classic_local_label(torch_version, CU130, A("sm_90"), ()) == label
    assert torch_pin(torch_version) == pin
    Version(f"1.0.0+{label}")  # a valid local version
    req = Requirement(pin)
    base = Version(torch_version).base_version
    assert req.specifier.contains(base, prereleases=True)
    major, minor = Version(torch_version).release[:2]
    assert not req.specifier.contains(f"{major}.{minor + 1}.0")


def test_a_host_wheels_label_names_its_torch_and_cuda_but_no_arch():
    from prebuild.tool.builder.flags import classic_host_label
    from prebuild.tool.index_keys import parse_index_key

    assert classic_host_label("2.14.1+cu130", CU130) == "pt214.cu130.host"
    assert classic_host_label("2.14.1+cu130", None) == "pt214.cpu"
    for label in ("pt214.cu130.host", "pt214.cpu"):
        Version(f"0.0.10+{label}")  # a valid local version
        key = parse_index_key(label)
        assert key is not None and key.host and key.torch_tag == "pt214"


def test_a_stable_abi_wheels_label_names_no_torch_and_its_pin_has_no_ceiling():
    """Its libraries use only the stable ABI: every torch from the target on, so the label is a
    native wheel's (its index key serves every torch) and the pin a floor."""
    from packaging.requirements import Requirement

    from prebuild.tool.builder.flags import classic_host_label
    from prebuild.tool.index_keys import parse_index_key

    label = classic_local_label(None, CU130, A("sm_90"), ())
    assert label == "cu130.sm90"
    key = parse_index_key(label)
    assert key is not None and key.torch_tag == "" and [a.sm for a in key.sass] == ["sm_90"]
    assert classic_host_label(None, CU130) == "cu130.host"
    # CPU code not tied to a torch: keyed as a host wheel, unlike prebuild's own ``+cpu``
    assert classic_host_label(None, None) == "cpu.host"
    cpu = parse_index_key("cpu.host")
    assert cpu is not None and cpu.host and cpu.cuda_version is None and cpu.torch_tag == ""
    assert parse_index_key("cpu") is None
    pin = Requirement(torch_pin("2.14.1+cu130", "2.10")).specifier
    assert [pin.contains(v) for v in ("2.9.1", "2.10.0", "2.14.1", "2.15.0", "3.1.0")] == [
        False, True, True, True, True,
    ]  # fmt: skip


def test_sanitizer_flags_compile_one_cpu_copy_at_o1():
    assert sanitizer_flags("") == []
    got = sanitizer_flags("address,undefined")
    assert "-fsanitize=address,undefined" in got and "-DPREBUILD_ONE_CPU_COPY" in got
    assert [f for f in got if f.startswith("-O")][-1] == "-O1"
    assert [f for f in got if f.startswith("-g")] == ["-g1"]  # line tables, not full -g


PLANTED = """#include <cstdlib>
int read_past(int i) {
  int* p = static_cast<int*>(std::malloc(4 * sizeof(int)));
  int v = p[i];  // line 4: past the end for i >= 4
  std::free(p);
  return v;
}
int main(int argc, char**) { return read_past(argc + 3); }
"""


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs c++")
def test_sanitizer_flags_report_an_overflow_with_its_file_and_line(tmp_path):
    """The flags scripts/sanitize.sh builds with find a planted heap overflow and say where
    it is, with line tables only (-g1)."""
    source = tmp_path / "planted.cpp"
    source.write_text(PLANTED)
    exe = tmp_path / "planted"
    flags = sanitizer_flags("address")  # with undefined, UBSan's object-size check is first
    build = subprocess.run(
        ["c++", *flags, str(source), "-o", str(exe)], capture_output=True, text=True
    )
    if build.returncode and "asan" in build.stderr.lower():
        pytest.skip(f"this compiler has no AddressSanitizer runtime: {build.stderr[-300:]}")
    assert build.returncode == 0, build.stderr
    run = subprocess.run(
        [str(exe)], capture_output=True, text=True, env={"ASAN_OPTIONS": "detect_leaks=0"}
    )
    assert run.returncode != 0
    assert "heap-buffer-overflow" in run.stderr, run.stderr
    assert f"in read_past(int) {source}:4" in run.stderr, run.stderr  # the stack names the line
