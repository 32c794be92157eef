"""system_libraries: what a classic wheel's libraries link besides the wheel, torch, its CUDA
packages and the C and C++ runtimes (torch-sparse-solve 0.0.5 links SuiteSparse's libklu.so.2;
torchsparse links nothing else)."""

from __future__ import annotations

from prebuild.tool.builder.system_libraries import (
    found_at,
    system_libraries_note,
    system_links,
    torch_provided,
)

TORCHSPARSE = {  # torchsparse 385f5ce's backend, as built for torch 2.14.1+cu130
    "torchsparse/backend.cpython-311-x86_64-linux-gnu.so": (
        "libc10.so",
        "libtorch_cpu.so",
        "libtorch_python.so",
        "libcudart.so.13",
        "libstdc++.so.6",
        "libgcc_s.so.1",
        "libc.so.6",
        "ld-linux-x86-64.so.2",
    )
}
TORCH_LIBS = {"libc10.so", "libtorch_cpu.so", "libtorch_python.so", "libcudart.so.13"}


def test_what_torch_the_wheel_and_the_runtimes_provide_is_no_system_library():
    assert system_links(TORCHSPARSE, TORCH_LIBS) == []
    solve = {
        "torch_sparse_solve.so": ("libklu.so.2", "libc10.so", "libm.so.6", "libamd.so.3"),
        "pkg/_helpers.so": ("libklu.so.2", "libpthread.so.0", "libcuda.so.1"),
        "pkg/_C.so": ("_helpers.so", "libgomp.so.1", "libaio.so.1", "ld-linux-aarch64.so.1"),
    }
    # the wheel's own libraries and torch's (libgomp.so.1 ships in torch/lib) are provided
    assert system_links(solve, TORCH_LIBS | {"libgomp.so.1"}) == [
        "libklu.so.2",
        "libamd.so.3",
        "libaio.so.1",
    ]


def test_torch_provides_its_own_libraries_and_those_of_its_nvidia_packages(tmp_path):
    site = tmp_path / "site-packages"
    for lib in (
        "torch/lib/libc10.so",
        "nvidia/cu13/lib/libcublas.so.13",
        "nvidia/nccl/lib/libnccl.so.2",
    ):
        (site / lib).parent.mkdir(parents=True, exist_ok=True)
        (site / lib).write_text("")
    nvidia = [site / "nvidia" / "cu13" / "lib", site / "nvidia" / "nccl" / "lib"]
    assert torch_provided(site / "torch" / "lib", nvidia) == {
        "libc10.so",
        "libcublas.so.13",
        "libnccl.so.2",
    }


def test_where_the_machine_has_a_library_is_said_in_the_note(tmp_path):
    (tmp_path / "libmine.so.1").write_text("")
    environ = {"LD_LIBRARY_PATH": f"/nonexistent:{tmp_path}"}
    assert found_at("libmine.so.1", environ) == str(tmp_path / "libmine.so.1")
    assert found_at("libprebuild-nowhere.so.9", environ) is None
    note = system_libraries_note(
        {"libklu.so.2": "/usr/lib/x86_64-linux-gnu/libklu.so.2", "libx.so": None}
    )
    assert note.startswith(
        "its libraries link libklu.so.2 (/usr/lib/x86_64-linux-gnu/libklu.so.2), libx.so,"
    )
    assert "a machine installing the wheel needs them too" in note
