"""system_libraries: what a classic wheel's libraries link besides the wheel, torch, its CUDA
packages and the C and C++ runtimes (torch-sparse-solve 0.0.5 links SuiteSparse's libklu.so.2;
torchsparse links nothing else)."""

from __future__ import annotations

from prebuild.tool.builder.system_libraries import (
    BASE,
    MACHINE_BOUND,
    bundle_exclusions,
    bundled_note,
    copied_soname,
    found_at,
    kept_reason,
    matches,
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


def test_the_runtimes_every_machine_has_are_named_by_globs_auditwheel_takes_too():
    for name in ("libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
                 "libstdc++.so.6", "libgcc_s.so.1", "libcuda.so.1", "libpthread.so.0"):  # fmt: skip
        assert matches(name, BASE), name
    for name in ("libklu.so.2", "libcrypto.so.3", "libcudart.so.13", "libmagic.so.1"):
        assert not matches(name, BASE), name


def test_the_machine_s_own_libraries_are_never_copied():
    for name in ("libmpi.so.40", "libmpi_cxx.so.40", "libibverbs.so.1", "libEGL.so.1",
                 "libGLX.so.0", "libnvidia-egl-gbm.so.1", "libX11.so.6"):  # fmt: skip
        assert matches(name, MACHINE_BOUND), name
    for name in ("libklu.so.2", "libaio.so.1", "libgomp.so.1", "libsparsehash.so"):
        assert not matches(name, MACHINE_BOUND), name


def test_what_auditwheel_leaves_out_torch_s_the_wheel_s_the_runtimes_and_the_machine_s():
    excluded = bundle_exclusions({"libc10.so", "libcudart.so.13"}, {"_C.so"})
    assert excluded[:3] == ["_C.so", "libc10.so", "libcudart.so.13"]
    assert [*BASE, *MACHINE_BOUND] == excluded[3:]


def test_a_copied_library_is_named_as_the_build_machine_named_it():
    assert copied_soname("libklu-8e4bd090.so.2") == "libklu.so.2"
    assert copied_soname("libopen-rte-0123abcd.so.40.30.2") == "libopen-rte.so.40.30.2"
    assert copied_soname("libsparse-8e4bd090.so") == "libsparse.so"
    assert copied_soname("libfoo-notahash.so.1") == "libfoo-notahash.so.1"
    assert copied_soname("libklu.so.2") == "libklu.so.2"


def test_the_notes_say_what_was_copied_and_why_what_is_left_was_not():
    note = bundled_note(
        {"libklu.so.2": "/usr/lib/x86_64-linux-gnu/libklu.so.2", "libamd.so.3": None},
        "torch_sparse_solve.libs",
        1_234_567,
    )
    assert note.startswith(
        "copied the system libraries its libraries link into the wheel "
        "(torch_sparse_solve.libs/, 1206 KiB): libklu.so.2 (/usr/lib/x86_64-linux-gnu/libklu.so.2), "
        "libamd.so.3."
    ), note
    assert "--no-bundle leaves them out" in note
    kept = system_libraries_note({"libmpi.so.40": None}, "the machine's own")
    assert kept.endswith("; not copied into the wheel: the machine's own")
    assert "not copied" not in system_libraries_note({"libmpi.so.40": None})


def test_why_a_system_library_stays_the_machine_s_is_said():
    assert kept_reason(["libklu.so.1"], bundle=False) == "--no-bundle"
    failure = 'Cannot repair wheel, because required library "libx.so" could not be located'
    assert kept_reason(["libx.so"], bundle=True, failure=failure) == failure
    assert kept_reason(["libmpi.so.40", "libEGL.so.1"], bundle=True).startswith(
        "the machine's own (MPI, RDMA"
    )
    assert "manylinux's policy" in kept_reason(["libglib-2.0.so.0", "libmpi.so.40"], bundle=True)
