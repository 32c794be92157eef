"""prebuild.tool.builder.cuda_shim: the shim toolkit a classic build sees as CUDA_HOME, laid out
from where nvcc itself says its toolkit is (here: a fake toolkit reached through a wrapper
script on PATH, as /usr/local/bin/nvcc is on our machines), and the preflight probe that
compiles CUDA and torch headers through it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from prebuild.tool.builder.cuda_shim import (
    add_driver_stub,
    driver_api_names,
    driver_stub_source,
    libnvvm_for_nvlink,
    make_cuda_shim,
    probe_inputs,
    probe_key,
    probe_toolkit,
    search_paths,
    unversioned_names,
    write_cxx_script,
    write_nvcc_script,
)
from prebuild.tool.builder.toolchain import (
    HostCompiler,
    Nvcc,
    ToolchainError,
    Torch,
    find_cxx,
    find_nvcc,
)
from prebuild.tool.inspection import needed_libraries

# What `nvcc --dryrun` prints about its toolkit (CUDA 13's layout), paths relative to bin/.
DRYRUN = """#$ _HERE_={bin}
#$ _THERE_={bin}
#$ TOP={bin}/..
#$ INCLUDES="-I{bin}/../targets/x86_64-linux/include"
#$ SYSTEM_INCLUDES="-isystem" "{bin}/../targets/x86_64-linux/include/cccl"
#$ LIBRARIES=  "-L{bin}/../targets/x86_64-linux/lib/stubs" "-L{bin}/../targets/x86_64-linux/lib"
#$ gcc -E -x c++ /dev/null
"""


def fake_toolkit(root: Path, crt: bool = True) -> Path:
    """A CUDA 13-shaped toolkit (headers and libraries under targets/); returns its bin/nvcc,
    which answers --dryrun as nvcc does and otherwise prints its arguments."""
    target = root / "targets" / "x86_64-linux"
    for d in (
        "bin",
        "nvvm/bin",
        "include",
        target / "include" / "cccl" / "cub",
        target / "lib" / "stubs",
    ):
        (root / d).mkdir(parents=True, exist_ok=True)
    (target / "include" / "cuda_runtime.h").write_text(
        '#pragma once\n#include "crt/host_config.h"\n'
    )
    if crt:
        (target / "include" / "crt").mkdir()
        (target / "include" / "crt" / "host_config.h").write_text("#pragma once\n")
    (target / "lib" / "libcudart_static.a").write_text("")
    (target / "lib" / "stubs" / "libcuda.so").write_text("stub")
    dryrun = DRYRUN.format(bin=root / "bin")
    (root / "bin" / "nvcc").write_text(
        "#!/bin/sh\nif [ \"$1\" = --dryrun ]; then cat >&2 <<'EOF'\n"
        + dryrun
        + "EOF\nexit 0; fi\nprintf '%s\\n' \"$@\"\n"
    )
    (root / "bin" / "ptxas").write_text("#!/bin/sh\n")
    for tool in ("nvcc", "ptxas"):
        (root / "bin" / tool).chmod(0o755)
    return root / "bin" / "nvcc"


def wrapper(directory: Path, real: Path) -> Path:
    """A two-line script that execs the real nvcc (what /usr/local/bin/nvcc is here)."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "nvcc"
    script.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    script.chmod(0o755)
    return script


@pytest.fixture
def nvidia(tmp_path, monkeypatch) -> Path:
    """torch's CUDA packages: cublas headers and the versioned libcudart a minimal toolkit lacks."""
    root = tmp_path / "site" / "nvidia" / "cu13"
    (root / "include").mkdir(parents=True)
    (root / "include" / "cublas_v2.h").write_text("")
    (root / "include" / "cuda_runtime.h").write_text(
        "// the package's copy, without crt/: the toolkit's wins"
    )
    (root / "lib").mkdir()
    (root / "lib" / "libcudart.so.13").write_text("")
    (root / "lib" / "libcublas.so.13").write_text("")
    monkeypatch.setattr("prebuild.tool.builder.cuda_shim.nvidia_dirs", lambda kind: [root / kind])
    return root


def test_the_toolkit_is_what_nvcc_reports_not_the_wrappers_parent(tmp_path, nvidia):
    real = fake_toolkit(tmp_path / "cuda-13.0")
    nvcc = Nvcc(wrapper(tmp_path / "usr-local" / "bin", real))
    toolkit = nvcc.toolkit
    assert (
        toolkit.root == tmp_path / "cuda-13.0" and toolkit.bin_dir == tmp_path / "cuda-13.0" / "bin"
    )
    target = tmp_path / "cuda-13.0" / "targets" / "x86_64-linux"
    assert toolkit.include_dirs == (target / "include", target / "include" / "cccl")
    assert toolkit.library_dirs == (target / "lib",)  # the driver stubs are not linked against

    home = make_cuda_shim(toolkit, tmp_path / "shim")
    assert (home / "include" / "cuda_runtime.h").resolve() == target / "include" / "cuda_runtime.h"
    assert (home / "include" / "crt" / "host_config.h").exists()  # the header gsplat's build missed
    assert (home / "include" / "cccl" / "cub").is_dir() and (home / "include" / "cub").is_dir()
    assert (home / "include" / "cublas_v2.h").exists()  # from torch's CUDA packages
    assert (home / "lib64" / "libcudart.so").resolve() == nvidia / "lib" / "libcudart.so.13"
    assert (home / "lib64" / "libcublas.so").resolve() == nvidia / "lib" / "libcublas.so.13"
    assert (home / "lib64" / "libcudart_static.a").exists() and not (
        home / "lib64" / "libcuda.so"
    ).exists()
    assert (home / "bin" / "ptxas").resolve() == tmp_path / "cuda-13.0" / "bin" / "ptxas"
    assert (home / "nvvm" / "bin").is_dir() and not (home / "bin" / "nvcc").exists()


def test_a_build_that_asks_nvcc_for_its_toolkit_still_finds_the_shims_headers(tmp_path, nvidia):
    """CMake's CUDA support takes the real toolkit's include folder from nvcc, as bitsandbytes'
    build did, and missed cublasLt.h: CPATH names the shim's folders after the user's, so the
    compiler finds cuBLAS's headers there while the toolkit's own come first."""
    toolkit = Nvcc(fake_toolkit(tmp_path / "cuda")).toolkit
    home = make_cuda_shim(toolkit, tmp_path / "shim")
    assert search_paths(home, {}) == {
        "CPATH": str(home / "include"),
        "LIBRARY_PATH": str(home / "lib64"),
    }
    env = search_paths(home, {"CPATH": "/mine", "LIBRARY_PATH": "/my/lib"})
    assert env == {
        "CPATH": f"/mine:{home / 'include'}",
        "LIBRARY_PATH": f"/my/lib:{home / 'lib64'}",
    }
    source = tmp_path / "uses_cublas.cpp"
    source.write_text("#include <cuda_runtime.h>\n#include <cublas_v2.h>\nint main() {}\n")
    compile_ = [*find_cxx().command, "-H", "-fsyntax-only", f"-I{toolkit.include_dirs[0]}"]
    without = subprocess.run([*compile_, str(source)], capture_output=True, text=True)
    assert without.returncode != 0 and "cublas_v2.h" in without.stderr
    done = subprocess.run(
        [*compile_, str(source)],
        capture_output=True,
        text=True,
        env={**os.environ, **search_paths(home, {})},
    )
    assert done.returncode == 0, done.stderr
    opened = [line.split(" ", 1)[1] for line in done.stderr.splitlines() if line.startswith(". ")]
    assert opened == [
        str(toolkit.include_dirs[0] / "cuda_runtime.h"),  # the toolkit's, not the package's copy
        str(home / "include" / "cublas_v2.h"),
    ]


def test_the_nvcc_script_runs_the_shim_on_the_users_nvcc_and_logs_every_call(tmp_path, nvidia):
    real = fake_toolkit(tmp_path / "cuda")
    nvcc = wrapper(tmp_path / "bin", real)
    home = make_cuda_shim(Nvcc(nvcc).toolkit, tmp_path / "shim")
    log = tmp_path / "calls.jsonl"
    script = write_nvcc_script(home, nvcc, ["-gencode=arch=compute_90,code=sm_90"], log, "c++20")
    assert script == home / "bin" / "nvcc"
    env = {
        k: v for k, v in os.environ.items() if k != "PYTHONPATH"
    }  # the script finds the shim by itself
    calls = [
        ["-c", "k.cu", "-arch=sm_75", "--use_fast_math", "-I/v/torch/include", "-std=c++17"],
        ["-c", "j.cu", "-std=c++20", "-gencode=arch=compute_90,code=sm_90"],
    ]
    outputs = [
        subprocess.run([str(script), *args], capture_output=True, text=True, env=env)
        for args in calls
    ]
    assert [o.returncode for o in outputs] == [0, 0], [o.stderr for o in outputs]
    assert outputs[0].stdout.split() == [
        "-c",
        "k.cu",
        "--use_fast_math",
        "-I/v/torch/include",
        "-std=c++20",
        "-gencode=arch=compute_90,code=sm_90",
    ]
    # The second call is unchanged by the shim, and logged all the same.
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [entry["given"] for entry in logged] == calls
    assert logged[1]["run"] == calls[1]


def recording_program(path: Path) -> Path:
    """A program that writes its name and arguments, a line each, to ``path.calls``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nprintf \'%s\\n\' "$0" "$@" > {path}.calls\n')
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("cache", [False, True])
def test_the_cxx_script_keeps_the_users_launcher_unless_the_build_has_a_cache(tmp_path, cache):
    """$CXX="ccache g++ -m64" (a launcher in front, a flag behind): the host compiler's calls run
    through the user's ccache with that flag, the standard raised; with --cache, through
    prebuild's launcher instead (a cache behind a cache only misses)."""
    bin_dir = tmp_path / "bin"
    ccache, gxx = recording_program(bin_dir / "ccache"), recording_program(bin_dir / "g++")
    launcher = recording_program(tmp_path / "cache" / "launcher") if cache else None
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)  # the script finds the shim by itself
    cxx = HostCompiler(("g++", "-m64"), ("ccache",))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", env["PATH"])  # the build's PATH, where the programs are resolved
        (tmp_path / "shim").mkdir()
        script = write_cxx_script(tmp_path / "shim", cxx, tmp_path / "cxx.jsonl", "c++20", launcher)
    proc = subprocess.run([str(script), "-c", "m.cpp", "-I/v/torch/include", "-std=c++17"], env=env)
    assert proc.returncode == 0
    first = launcher if cache else ccache
    assert Path(f"{first}.calls").read_text().split() == [
        str(first), str(gxx), "-m64", "-c", "m.cpp", "-I/v/torch/include", "-std=c++20"
    ]  # fmt: skip
    assert not Path(f"{ccache if cache else gxx}.calls").exists()  # nothing else ran


def fake_torch(root: Path, needs_cxx20: bool) -> Torch:
    """torch's headers, reduced to what the probe includes; torch 2.14's need C++20."""
    guard = root / "include" / "c10" / "cuda" / "CUDAGuard.h"
    guard.parent.mkdir(parents=True)
    body = (
        "#include <compare>\ninline std::strong_ordering order(int a, int b) { return a <=> b; }\n"
    )
    guard.write_text(
        "#pragma once\n#include <cuda_runtime.h>\n"
        + (body if needs_cxx20 else "inline int order() { return 0; }\n")
    )
    return Torch(Version("2.14.1"), "2.14.1+cu130", "13.0", (root / "include",), root / "lib")


@pytest.mark.parametrize("needs_cxx20, expected", [(True, "c++20"), (False, "c++17")])
def test_the_probe_finds_the_standard_torchs_headers_need(tmp_path, nvidia, needs_cxx20, expected):
    toolkit = Nvcc(fake_toolkit(tmp_path / "cuda")).toolkit
    home = make_cuda_shim(toolkit, tmp_path / "shim")
    assert (
        probe_toolkit(home, fake_torch(tmp_path / "torch", needs_cxx20), find_cxx(), toolkit)
        == expected
    )


def test_the_probe_refuses_a_toolkit_without_crt_naming_the_header(tmp_path, nvidia):
    """The failure gsplat met before its project was even compiled, now found by the preflight."""
    toolkit = Nvcc(fake_toolkit(tmp_path / "cuda", crt=False)).toolkit
    home = make_cuda_shim(toolkit, tmp_path / "shim")
    with pytest.raises(ToolchainError) as info:
        probe_toolkit(home, fake_torch(tmp_path / "torch", True), find_cxx(), toolkit)
    message = str(info.value)
    assert "crt/host_config.h" in message and "c10/cuda/CUDAGuard.h" in message
    assert str(tmp_path / "cuda") in message and "CUDA_HOME" in message


def counting_cxx(tmp_path: Path) -> tuple[HostCompiler, Path]:
    """The host compiler behind a script that counts its calls (a line each in the log)."""
    log = tmp_path / "cxx-calls"
    script = tmp_path / "bin" / "counting-c++"
    script.parent.mkdir(parents=True)
    script.write_text(f'#!/bin/sh\necho call >> {log}\nexec {" ".join(find_cxx().command)} "$@"\n')
    script.chmod(0o755)
    return HostCompiler((str(script),)), log


def calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_the_probes_answer_is_kept_per_toolchain_and_asked_again_when_one_changes(tmp_path, nvidia):
    """A second build of the same toolchain compiles no probe (seconds of CPU each); another
    torch, or a kept answer that does not read, is probed again."""
    toolkit = Nvcc(fake_toolkit(tmp_path / "cuda")).toolkit
    home = make_cuda_shim(toolkit, tmp_path / "shim")
    cxx, log = counting_cxx(tmp_path)
    cache = tmp_path / "cache" / "probes"
    torch = fake_torch(tmp_path / "torch", True)

    assert probe_toolkit(home, torch, cxx, toolkit, cache) == "c++20"
    probed = calls(log)
    assert probed == 2 and len(list(cache.glob("*.json"))) == 1  # c++17 and c++20, kept
    again = make_cuda_shim(toolkit, tmp_path / "another-build" / "shim")  # another build's shim
    assert probe_toolkit(again, torch, cxx, toolkit, cache) == "c++20"
    assert calls(log) == probed  # nothing compiled

    newer = Torch(Version("2.15.0"), "2.15.0+cu130", "13.0", torch.include_dirs, torch.library_dir)
    assert probe_toolkit(home, newer, cxx, toolkit, cache) == "c++20"
    assert calls(log) == 2 * probed and len(list(cache.glob("*.json"))) == 2

    for kept in cache.glob("*.json"):
        kept.write_text('{"standard": "c++98"}')  # not an answer a probe gives
    assert probe_toolkit(home, torch, cxx, toolkit, cache) == "c++20"
    assert calls(log) == 3 * probed


def test_the_probes_answer_follows_the_headers_and_the_compilers_search_paths(
    tmp_path, nvidia, monkeypatch
):
    toolkit = Nvcc(fake_toolkit(tmp_path / "cuda")).toolkit
    home = make_cuda_shim(toolkit, tmp_path / "shim")
    torch = fake_torch(tmp_path / "torch", True)
    cxx = find_cxx()
    key = probe_key(probe_inputs(home, torch, cxx, os.environ))
    assert key == probe_key(probe_inputs(home, torch, cxx, dict(os.environ)))
    assert key != probe_key(probe_inputs(home, torch, cxx, {**os.environ, "CPATH": "/x"}))
    assert key != probe_key(probe_inputs(home, torch, HostCompiler(("c++", "-m32")), os.environ))
    guard = torch.include_dirs[0] / "c10" / "cuda" / "CUDAGuard.h"
    guard.write_text(guard.read_text() + "// edited in place\n")
    assert key != probe_key(probe_inputs(home, torch, cxx, os.environ))


def test_a_failed_probe_is_not_kept_and_a_cache_that_cannot_be_written_changes_nothing(
    tmp_path, nvidia
):
    broken = Nvcc(fake_toolkit(tmp_path / "broken", crt=False)).toolkit
    cache = tmp_path / "cache"
    torch = fake_torch(tmp_path / "torch", True)
    with pytest.raises(ToolchainError):
        probe_toolkit(make_cuda_shim(broken, tmp_path / "s1"), torch, find_cxx(), broken, cache)
    assert not cache.exists()

    toolkit = Nvcc(fake_toolkit(tmp_path / "cuda")).toolkit
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the cache's folder cannot be made under a file
    home = make_cuda_shim(toolkit, tmp_path / "s2")
    assert probe_toolkit(home, torch, find_cxx(), toolkit, blocked / "probes") == "c++20"


def test_each_versioned_library_gets_its_unversioned_name_for_the_linker():
    names = [
        "libcudart.so.13", "libcublas.so.12", "libcublas.so.13", "libcufft.so.12",
        "libnvrtc-builtins.so.13.0", "libcupti.so", "libcupti.so.13", "libcudadevrt.a",
        "libnvshmem_device.bc", "nvshmem_bootstrap_mpi.so.3", "libx.so.13.alt",
    ]  # fmt: skip
    assert unversioned_names(names) == {
        "libcublas.so": "libcublas.so.13",  # the newest
        "libcudart.so": "libcudart.so.13",
        "libcufft.so": "libcufft.so.12",
        "libnvrtc-builtins.so": "libnvrtc-builtins.so.13.0",
    }  # libcupti.so is there already; not a lib*.so.N: left alone


def test_the_driver_api_names_are_the_functions_cuda_h_declares_after_its_macros():
    preprocessed = (
        "typedef enum cudaError_enum { CUDA_SUCCESS = 0 } CUresult;\n"
        "typedef void (*CUhostFn)(void *userData);\n"
        'extern "C" {\n'
        "CUresult cuInit(unsigned int Flags);\n"
        "CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);\n"
        "CUresult  cuTensorMapEncodeTiled (CUtensorMap *tensorMap);\n"
        "CUresult cuInit(unsigned int Flags);\n"
        "}\n"
    )
    names = driver_api_names(preprocessed)
    assert names == ["cuInit", "cuMemAlloc_v2", "cuTensorMapEncodeTiled"]
    source = driver_stub_source(names)
    assert source.startswith('extern "C" {') and "void cuTensorMapEncodeTiled() {}" in source


def test_the_toolkits_own_driver_stub_is_linked_where_it_has_one(tmp_path, nvidia):
    toolkit = Nvcc(fake_toolkit(tmp_path / "cuda")).toolkit
    home = make_cuda_shim(toolkit, tmp_path / "shim")
    stub = tmp_path / "cuda" / "targets" / "x86_64-linux" / "lib" / "stubs" / "libcuda.so"
    assert (home / "lib64" / "stubs" / "libcuda.so").resolve() == stub
    no_compiler = HostCompiler(("false",))  # nothing is compiled
    assert add_driver_stub(home, no_compiler) == home / "lib64" / "libcuda.so"
    assert (home / "lib64" / "libcuda.so").resolve() == stub


def test_without_a_driver_or_a_stub_in_the_toolkit_minus_lcuda_links_against_one_made_here(
    tmp_path,
):
    """This machine's toolkit has no stub and there is no driver: a project linking -lcuda
    (FlashAttention 3's Hopper kernels call cuTensorMapEncodeTiled) could not link. Through the
    shim it links against a stub made from the toolkit's cuda.h, and needs libcuda.so.1 (the
    driver's soname) at run time, as it would built on a GPU machine."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    toolkit = Nvcc(Path(find_nvcc())).toolkit
    home = make_cuda_shim(toolkit, tmp_path / "shim")
    if (home / "lib64" / "stubs" / "libcuda.so").exists():
        pytest.skip("this toolkit has its own stub (tested above with a fake one)")
    cxx = find_cxx()
    stub = add_driver_stub(home, cxx)
    assert stub == home / "lib64" / "libcuda.so"

    def dynamic(path: Path) -> tuple[list[str], list[str], set[str]]:
        with path.open("rb") as f:
            elf = ELFFile(f)
            (section,) = [s for s in elf.iter_sections() if isinstance(s, DynamicSection)]
            tags = list(section.iter_tags())
            symbols = {
                sym.name
                for sym in elf.get_section_by_name(".dynsym").iter_symbols()
                if sym["st_shndx"] != "SHN_UNDEF"
            }
        soname = [t.soname for t in tags if t.entry.d_tag == "DT_SONAME"]
        return soname, list(needed_libraries(path.read_bytes())), symbols

    soname, _, exported = dynamic(stub.resolve())
    assert soname == ["libcuda.so.1"]
    assert {"cuInit", "cuDriverGetVersion", "cuMemAlloc_v2", "cuTensorMapEncodeTiled"} <= exported
    assert "cuStreamSynchronize_ptsz" in exported  # per-thread default stream builds too

    user = tmp_path / "ext.cpp"
    user.write_text(
        "#include <cuda.h>\n"
        'extern "C" int driver_version() { int v = 0; cuDriverGetVersion(&v); return v; }\n'
    )
    ext = tmp_path / "ext.so"
    linked = subprocess.run(
        [*cxx.command, "-shared", "-fPIC", f"-I{home / 'include'}", str(user), "-o", str(ext),
         f"-L{home / 'lib64'}", "-lcuda"],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert linked.returncode == 0, linked.stderr
    assert "libcuda.so.1" in needed_libraries(ext.read_bytes())  # the reader builds use
    assert "libcuda.so.1" in dynamic(ext)[1]


def test_device_links_run_where_nvlink_finds_libnvvm(tmp_path, nvidia):
    """nvlink's -dlto (torch adds it to every dlink=True extension's device link) loads
    <its folder>/../nvvm/lib64/libnvvm.so only; PyPI's CUDA 13 packages keep libnvvm in lib/.
    The shim toolkit then holds a toolkit of links with libnvvm where nvlink looks, and device
    links run its nvcc; every other call runs the user's."""
    real = fake_toolkit(tmp_path / "cuda")
    target_lib = tmp_path / "cuda" / "targets" / "x86_64-linux" / "lib"
    (target_lib / "libnvvm.so.4").write_text("libnvvm")
    user = tmp_path / "bin" / "nvcc"  # the user's wrapper, which says it ran
    user.parent.mkdir()
    user.write_text(f'#!/bin/sh\necho "wrapper"\nexec {real} "$@"\n')
    user.chmod(0o755)
    toolkit = Nvcc(user).toolkit
    assert libnvvm_for_nvlink(toolkit, [target_lib]) == target_lib / "libnvvm.so.4"
    home = make_cuda_shim(toolkit, tmp_path / "shim")
    linking = home / "device-link-toolkit"
    assert (linking / "bin" / "nvcc").resolve() == real
    assert (linking / "nvvm" / "lib64" / "libnvvm.so").read_text() == "libnvvm"
    assert (linking / "include").resolve() == tmp_path / "cuda" / "include"
    script = write_nvcc_script(
        home, user, ["-gencode=arch=compute_90,code=sm_90"], tmp_path / "log", None
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    compiled, linked = (
        subprocess.run([str(script), *args], capture_output=True, text=True, env=env).stdout.split()
        for args in (["-rdc=true", "-c", "a.cu"], ["-dlink", "a.o", "-o", "d.o", "-dlto"])
    )
    assert compiled[0] == "wrapper" and linked[0] == "-dlink", (compiled, linked)
    assert linked[-1] == "-gencode=arch=compute_90,code=sm_90"
    # Where nvlink finds libnvvm itself, nothing is laid out and every call is the user's.
    (tmp_path / "cuda" / "nvvm" / "lib64").mkdir(parents=True)
    (tmp_path / "cuda" / "nvvm" / "lib64" / "libnvvm.so").write_text("")
    assert libnvvm_for_nvlink(toolkit, [target_lib]) is None
    assert not (make_cuda_shim(toolkit, tmp_path / "shim2") / "device-link-toolkit").exists()


def test_relocatable_device_code_links_with_dlto_through_the_shim(tmp_path):
    """The real nvcc: two files of relocatable device code, one calling the other's function,
    compiled and device-linked with -dlto as torch's BuildExtension does for dlink=True (on this
    machine's toolkit, made of PyPI's packages, nvlink failed: "elfLink linker library load
    error")."""
    nvcc = Path(find_nvcc())
    home = make_cuda_shim(Nvcc(nvcc).toolkit, tmp_path / "shim")
    script = write_nvcc_script(
        home, nvcc, ["-gencode=arch=compute_80,code=sm_80"], tmp_path / "log", None
    )
    (tmp_path / "a.cu").write_text(
        "__device__ float twice(float x);\n"
        "__global__ void k(float* x) { x[threadIdx.x] = twice(x[threadIdx.x]); }\n"
    )
    (tmp_path / "b.cu").write_text("__device__ float twice(float x) { return 2.0f * x; }\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for name in ("a", "b"):
        done = subprocess.run(
            [str(script), "-rdc=true", "-c", f"{name}.cu", "-o", f"{name}.o"],
            cwd=tmp_path, capture_output=True, text=True, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [str(script), "a.o", "b.o", "-o", "dlink.o", "-dlink", "-dlto"],
        cwd=tmp_path, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "dlink.o").stat().st_size > 0
