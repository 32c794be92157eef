"""Which of torch's ABIs a classic wheel's libraries use (builder/torch_abi.py), from the symbols
they need: the wheel's torch pin, label and manifest follow from it."""

from __future__ import annotations

import pytest
from c_libraries import shared_library
from hypothesis import given
from hypothesis import strategies as st

from prebuild.runtime.manifest import CXX_ABI, NO_TORCH_ABI, STABLE_ABI
from prebuild.tool.builder.torch_abi import (
    call_target,
    cxx11_abi,
    cxx_note,
    cxx_symbols,
    missing_torch_names,
    old_abi_calls,
    shim_versions,
    stable_note,
    stable_symbols,
    target_value,
    torch_abi,
    torch_free_note,
)
from prebuild.tool.inspection import undefined_symbols

# Real names: a torch/extension.h extension's (c10::Error's constructor, at::Tensor in a
# parameter, a const member, torch_python's wrapper) and a stable-ABI one's (the C shim).
CXX = [
    "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
    "_ZNK2at10TensorBase5numelEv",
    "_Z16THPVariable_WrapRKN2at10TensorBaseE",
    "_ZN5torch8autograd12VariableInfoC1Ev",
    "THPVariableClass",
]
STABLE = ["aoti_torch_get_numel", "torch_call_dispatcher", "aoti_torch_get_current_cuda_stream"]
NEUTRAL = [
    "_ZNSt12atomic_flag5clearEv",  # "2at" inside std's atomic_flag: not at::
    "_ZNKSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE4findEPKcmm",
    "__cudaRegisterFatBinary",
    "PyModule_Create2",
    "memcpy",
]
TARGET_210 = "-DTORCH_TARGET_VERSION=0x020a000000000000"


def test_torch_cxx_names_are_told_from_the_stable_shim_and_everything_else():
    assert cxx_symbols(CXX + STABLE + NEUTRAL) == sorted(CXX)
    assert stable_symbols(CXX + STABLE + NEUTRAL) == sorted(STABLE)


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("0x020a000000000000", "2.10"),
        ("0x020A000000000000ULL", "2.10"),
        (str(0x020D << 48), "2.13"),  # decimal
        ("0x0300000000000000", "3.0"),
        ("TORCH_VERSION_2_10_0", None),  # a macro: not read
        ("0", None),
    ],
)
def test_the_target_macro_reads_as_a_release(text, release):
    assert target_value(text) == release


def test_a_call_sets_a_target_in_each_way_a_compiler_takes_a_definition():
    assert call_target(["nvcc", "-c", "k.cu", TARGET_210]) == "2.10"
    assert call_target(["g++", "-D", "TORCH_TARGET_VERSION=0x020b000000000000", "-c"]) == "2.11"
    assert call_target(["nvcc", "--define-macro=TORCH_TARGET_VERSION=0x020c000000000000"]) == "2.12"
    assert call_target(["nvcc", "--define-macro", "TORCH_TARGET_VERSION=0x020c000000000000"]) == (
        "2.12"
    )
    # the last definition wins, as for the compiler
    assert call_target([TARGET_210, "-DTORCH_TARGET_VERSION=0x020d000000000000"]) == "2.13"
    assert call_target(["g++", "-c", "-DTORCH_API_INCLUDE_EXTENSION_H"]) is None


def test_a_wheel_calling_only_the_stable_shim_serves_every_torch_from_its_target():
    libraries = {"pkg/_C.abi3.so": STABLE + NEUTRAL, "pkg/libhelper.so": NEUTRAL}
    calls = [
        ["nvcc", "-c", "k.cu", "-o", "k.o", TARGET_210],
        ["c++", "-c", "b.cpp", "-o", "b.o", TARGET_210],
        ["c++", "-shared", "k.o", "b.o", "-o", "_C.abi3.so"],  # a link: no definition needed
    ]
    abi = torch_abi(libraries, calls, "2.14.1+cu130")
    assert (abi.stable, abi.target, abi.untargeted, abi.compiles) == (True, "2.10", 0, 2)
    note = stable_note(abi, "2.14.1+cu130", "13")
    assert "requires torch>=2.10 and serves every torch from 2.10 on (its CUDA 13 builds)" in note
    assert "compile calls set no" not in note
    # one compile call with no target compiles for the build's torch: the wheel needs that one
    abi = torch_abi(libraries, [*calls, ["nvcc", "-c", "x.cu", "-o", "x.o"]], "2.14.1+cu130")
    assert (abi.stable, abi.target, abi.untargeted, abi.compiles) == (True, "2.14", 1, 3)
    note = stable_note(abi, "2.14.1+cu130", None)
    assert "requires torch>=2.14" in note and "CUDA" not in note.split(";")[0]
    assert "1 of its 3 compile calls set no -DTORCH_TARGET_VERSION" in note
    # no target anywhere: the build's torch
    assert torch_abi(libraries, [["c++", "-c", "b.cpp"]], "2.13.0+cpu").target == "2.13"
    # the newest target asked wins
    newer = [*calls, ["c++", "-c", "c.cpp", "-DTORCH_TARGET_VERSION=0x020c000000000000"]]
    assert torch_abi(libraries, newer, "2.14.1").target == "2.12"


def test_one_cxx_symbol_ties_the_wheel_to_its_torch_and_says_where_it_asked_otherwise():
    mixed = {"pkg/_C.so": STABLE + NEUTRAL, "pkg/_ops.so": [CXX[1], *NEUTRAL]}
    abi = torch_abi(mixed, [["c++", "-c", "b.cpp", TARGET_210]], "2.14.1+cu130")
    assert (abi.stable, abi.target, abi.cxx) == (False, None, ("pkg/_ops.so", CXX[1]))
    note = cxx_note(abi, "2.14.1+cu130")
    assert note is not None
    assert "pkg/_ops.so calls torch's C++ ABI (_ZNK2at10TensorBase5numelEv)" in note
    assert "needs torch 2.14 exactly" in note
    # a classic build that never asked for the stable ABI is not told about it
    plain = torch_abi(mixed, [["c++", "-c", "b.cpp"]], "2.14.1+cu130")
    assert (plain.stable, plain.cxx, cxx_note(plain, "2.14.1+cu130")) == (False, None, None)


def test_a_wheel_calling_nothing_of_torch_s_serves_every_torch():
    """Libraries loaded by ctypes (bitsandbytes'), or on Python's and CUDA's C APIs alone: no
    symbol of torch's, so no torch ABI; a library whose symbols could not be read (none found)
    says nothing, and the wheel stays tied."""
    libraries = {"pkg/libkernels.so": NEUTRAL, "pkg/_C.so": ["PyModule_Create2", "memcpy"]}
    abi = torch_abi(libraries, [["nvcc", "-c", "k.cu"]], "2.14.1+cu130")
    assert (abi.kind, abi.target, abi.cxx, abi.compiles) == (NO_TORCH_ABI, None, None, 1)
    assert torch_abi({**libraries, "pkg/odd.so": []}, [], "2.14.1").kind == CXX_ABI
    assert torch_abi({}, [], "2.14.1").kind == CXX_ABI
    note = torch_free_note("2.14.1+cu130", "13")
    assert (
        "call nothing of torch's" in note
        and "serves every torch release (its CUDA 13 builds)" in note
    )
    assert "not 2.14 alone" in note and "CUDA" not in torch_free_note("2.14.1", None)


@given(st.lists(st.sampled_from(CXX + STABLE + NEUTRAL), max_size=12))
def test_the_verdict_is_stable_exactly_when_no_cxx_and_some_shim_symbol(symbols):
    symbols = [*symbols, "memcpy"]  # a library always needs something
    abi = torch_abi({"x.so": symbols}, [], "2.14.1")
    cxx, shim = bool(set(symbols) & set(CXX)), bool(set(symbols) & set(STABLE))
    assert abi.stable == (not cxx and shim)
    assert abi.kind == (CXX_ABI if cxx else STABLE_ABI if shim else NO_TORCH_ABI)


def test_undefined_symbols_are_read_from_a_real_library(tmp_path):
    """A library that calls a shim function and a c10 one (any C name will do for the linker)
    and defines one of its own: its needs, not its definitions."""
    library = shared_library(
        tmp_path / "libneeds.so",
        f"void aoti_torch_get_numel(void); void {CXX[0]}(void);\n"
        f"void mine(void) {{ aoti_torch_get_numel(); {CXX[0]}(); }}\n",
    )
    found = undefined_symbols(library.read_bytes())
    assert {"aoti_torch_get_numel", CXX[0]} <= found and "mine" not in found
    assert undefined_symbols(b"not an ELF file") == frozenset()
    assert not torch_abi({"libneeds.so": found}, [], "2.14.1").stable


def test_a_name_another_library_of_the_wheel_defines_is_not_torch_s(tmp_path):
    """A wheel whose extension calls a C function named torch_... that its own helper library
    defines (nothing of torch's): not read as the stable shim, so without the shim function it
    calls from torch the wheel needs no torch ABI at all; with it, the stable ABI."""
    import zipfile

    from prebuild.tool.builder.wheel_libraries import wheel_symbols

    helper = shared_library(
        tmp_path / "libhelper.so", "int torch_scatter_sum(int a) { return a + 1; }\n"
    )
    extension = shared_library(
        tmp_path / "_C.so",
        "int torch_scatter_sum(int); void aoti_torch_get_numel(void);\n"
        "int entry(int a) { aoti_torch_get_numel(); return torch_scatter_sum(a); }\n",
    )
    wheel = tmp_path / "pkg-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(helper, "pkg/libhelper.so")
        zf.write(extension, "pkg/_C.so")
    needs = {name: undefined for name, (_, undefined) in wheel_symbols(wheel).items()}
    assert "torch_scatter_sum" not in needs["pkg/_C.so"]
    assert "aoti_torch_get_numel" in needs["pkg/_C.so"]
    only_own = {"pkg/_C.so": needs["pkg/_C.so"] - {"aoti_torch_get_numel"}}
    assert torch_abi(only_own, [], "2.14.1").kind == NO_TORCH_ABI
    assert torch_abi(needs, [], "2.14.1").stable


HEADER = """
#include <stdint.h>
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_get_numel(AtenTensorHandle t, int64_t* out);
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_10_0
AOTI_TORCH_EXPORT AOTITorchError
torch_call_dispatcher(const char* name, StableIValue* stack, uint64_t version);
#ifdef __cplusplus
AOTI_TORCH_EXPORT int32_t torch_in_cplusplus();
#endif
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_11_0
AOTI_TORCH_EXPORT AOTITorchError torch_from_blob(void* data, AtenTensorHandle* ret);
#else
AOTI_TORCH_EXPORT AOTITorchError torch_older_way(void* data);
#endif // TORCH_FEATURE_VERSION >= TORCH_VERSION_2_11_0
#endif
AOTI_TORCH_EXPORT int32_t torch_late(); // unguarded again below
"""


def test_the_headers_guards_say_which_torch_brought_each_shim_function():
    """Nested guards: the newest feature version open counts; an #else branch drops its own
    guard (torches older than it: the outer guards still count); a function declared unguarded
    anywhere predates the versions."""
    later = "#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_12_0\nint32_t torch_late();\n#endif\n"
    assert shim_versions([HEADER, later]) == {
        "torch_call_dispatcher": "2.10",
        "torch_in_cplusplus": "2.10",
        "torch_from_blob": "2.11",
        "torch_older_way": "2.10",
    }


def test_the_installed_torch_s_headers_date_its_shim_functions():
    """The CPU torch 2.13 of this venv: what its stable-ABI headers guard, none after 2.13."""
    from pathlib import Path

    import torch

    from prebuild.runtime.versions import release
    from prebuild.tool.builder.classic import shim_headers

    found = shim_versions(shim_headers((Path(torch.__file__).parent / "include",)))
    assert found["torch_call_dispatcher"] == "2.10" and found["torch_from_blob"] == "2.11"
    assert "aoti_torch_get_numel" not in found  # older than the versions
    assert max(map(release, found.values())) == (2, 13)


def test_a_function_newer_than_the_target_asked_raises_it_and_is_named():
    """A library calling torch_from_blob (2.11) though every compile call targets 2.10 (a
    compile call the shims did not log, or a declaration of its own): it needs 2.11."""
    libraries = {"pkg/_C.abi3.so": ["torch_from_blob", *STABLE, *NEUTRAL]}
    calls = [["nvcc", "-c", "k.cu", TARGET_210]]
    introduced = {"torch_from_blob": "2.11", "torch_call_dispatcher": "2.10"}
    abi = torch_abi(libraries, calls, "2.14.1+cu130", introduced)
    assert (abi.stable, abi.target, abi.newest) == (True, "2.11", ("torch_from_blob", "2.11"))
    note = stable_note(abi, "2.14.1+cu130", "13")
    assert "requires torch>=2.11" in note
    assert "it calls torch_from_blob, which torch 2.11's stable ABI introduced" in note
    # functions no newer than the target change nothing
    older = torch_abi({"pkg/_C.abi3.so": STABLE + NEUTRAL}, calls, "2.14.1", introduced)
    assert (older.target, older.newest) == ("2.10", None)


def test_names_of_torch_s_own_that_torch_does_not_export_are_missing():
    """Only names in torch's namespaces (or its Python bindings) count: a function of the
    project's own taking torch's types, or libstdc++'s, is not torch's to export."""
    old_abi = "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs"  # std::string, pre-C++11 ABI
    new_abi = (
        "_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIc"
        "ESaIcEEE"
    )
    hidden = "_ZNK2at6native8internal5thingEv"  # a const member of torch's, not exported
    undefined = {
        "pkg/_C.so": [
            old_abi,
            new_abi,
            hidden,
            "_Z3fooRKN2at6TensorE",  # the project's own foo(at::Tensor const&)
            "_ZNSt6chrono3_V212system_clock3nowEv",  # libstdc++'s
            "THPVariable_Wrap",
            "_ZTVN3c1011StorageImplE",  # a vtable of torch's
        ],
        "pkg/_ok.so": [new_abi, "aoti_torch_get_numel"],
    }
    exported = {new_abi, "THPVariable_Wrap", "aoti_torch_get_numel"}
    assert missing_torch_names(undefined, exported) == {
        "pkg/_C.so": sorted([old_abi, hidden, "_ZTVN3c1011StorageImplE"])
    }
    assert missing_torch_names({"pkg/_ok.so": [new_abi]}, exported) == {}


def test_torch_s_abi_is_read_from_what_it_exports():
    assert cxx11_abi(["_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringB"]) == "1"
    assert cxx11_abi(["_ZN3c106detail14torchCheckFailEPKcS2_jRKSs", "aoti_torch_x"]) == "0"


def test_calls_asking_for_the_pre_cxx11_abi_are_counted_by_their_last_definition():
    calls = [
        ["g++", "-c", "a.cpp", "-D_GLIBCXX_USE_CXX11_ABI=1", "-D_GLIBCXX_USE_CXX11_ABI=0"],
        ["nvcc", "-c", "b.cu", "-Xcompiler", "-fPIC,-D_GLIBCXX_USE_CXX11_ABI=0"],
        ["g++", "-c", "c.cpp", "-D_GLIBCXX_USE_CXX11_ABI=0", "-D_GLIBCXX_USE_CXX11_ABI=1"],
        ["g++", "-c", "d.cpp"],
    ]
    assert old_abi_calls(calls) == 2
