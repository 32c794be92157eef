"""api_breaks: the known torch and CUDA breaks, recognised in error lines as nvcc 13.0 and g++
print them (each line below is a compiler's own, from a small source compiled against torch
2.14.1's headers, or from a real project's failed build where one is named)."""

from __future__ import annotations

import pytest

from prebuild.tool.builder.api_breaks import API_BREAKS, api_breaks, api_breaks_advice

CASES = {
    "THC": [
        # DCNv2 0.4
        "src/cuda/dcn_v2_cuda.cu:7:10: fatal error: THC/THC.h: No such file or directory",
        'thcstate.cu(2): error: identifier "THCState" is undefined',
        "thcstate.cpp:2:8: error: ‘THCState’ does not name a type",
        "x.cpp:3:5: error: 'THCudaCheck' was not declared in this scope",
    ],
    "tensor.type()": [
        # Deformable-DETR's ops, GroundingDINO
        'src/cuda/ms_deform_attn_cuda.cu(64): error: no suitable conversion function from "const '
        'at::DeprecatedTypeProperties" to "c10::ScalarType" exists',
        "torch/headeronly/core/Dispatch.h:36:63: error: cannot convert ‘const "
        "at::DeprecatedTypeProperties’ to ‘c10::ScalarType’",
    ],
    "AT_CHECK": [
        'atcheck.cu(2): error: identifier "AT_CHECK" is undefined',
        "atcheck.cpp:2:23: error: ‘AT_CHECK’ was not declared in this scope; did you mean ‘CHECK’?",
    ],
    "lerp()": [
        # nerfacc 0.5.3
        "nerfacc/cuda/csrc/include/utils_math.cuh:1145:44: error: ‘float lerp(float, float, "
        "float)’ conflicts with a previous declaration",
        "lerp.cpp:5:30: error: call of overloaded ‘lerp(float&, float&, float)’ is ambiguous",
        'lerp.cu(5): error: more than one instance of overloaded function "lerp" matches the '
        "argument list:",
    ],
    "cub::Sum": ['cubsum.cu(2): error: namespace "cub" has no member "Sum"'],
    "thrust::unary_function": [
        'misc.cu(3): error: namespace "thrust" has no member class "unary_function"'
    ],
    "cudaDeviceProp": [
        'prop.cu(2): error: class "cudaDeviceProp" has no member "clockRate"',
        "p.cpp:2:60: error: ‘struct cudaDeviceProp’ has no member named ‘clockRate’",
    ],
    "cudaMemLocation": [
        'misc.cu(5): error: no suitable constructor exists to convert from "int" to '
        '"cudaMemLocation"'
    ],
    "texture references": [
        "tex.cu(2): error: texture is not a template",
        'tex.cu(4): error: identifier "cudaBindTexture" is undefined',
    ],
    "warp functions without _sync": ['shfl.cu(1): error: identifier "__shfl_down" is undefined'],
}


def break_named(name: str):
    (known,) = [b for b in API_BREAKS if name in b.what]
    return known


@pytest.mark.parametrize(
    "name, line", [(name, line) for name, lines in CASES.items() for line in lines]
)
def test_each_break_is_recognised_in_nvcc_and_gxx_wording(name, line):
    log = f"[1/3] c++ -c a.cpp\nFAILED: a.o\n{line}\nninja: build stopped: subcommand failed."
    assert api_breaks(log, "c++20") == [break_named(name)]


def test_every_break_in_the_table_has_a_case():
    assert {b.what for b in API_BREAKS} == {break_named(name).what for name in CASES}


def test_only_error_lines_count():
    # torch's own deprecation warning names the type; only an error means the build met it.
    log = "warning: 'at::DeprecatedTypeProperties' is deprecated\nerror: something else"
    assert api_breaks(log, "c++20") == []


def test_a_cxx20_break_counts_only_where_the_build_compiled_in_cxx20():
    line = (
        "x.cuh:1:4: error: ‘float lerp(float, float, float)’ conflicts with a previous declaration"
    )
    assert api_breaks(line, "c++17") == []
    assert api_breaks(line, "gnu++20") == [break_named("lerp()")]


def test_the_advice_names_each_break_once_in_the_tables_order_with_its_fix():
    log = "\n".join(
        [*CASES["tensor.type()"], *CASES["THC"], "a.cu(3): error: expected a ;", *CASES["THC"]]
    )
    advice = api_breaks_advice(log, "c++20", "2.14.1+cu130")
    lines = advice.splitlines()
    assert lines[0].startswith("This is the project's own code meeting a change of torch or CUDA")
    assert len(lines) == 3
    assert "THC" in lines[1] and "removed in torch 1.11" in lines[1]
    assert "`x.type()` in each AT_DISPATCH_* call becomes `x.scalar_type()`" in lines[2]


def test_the_cxx20_advice_names_the_torch_that_needs_it():
    advice = api_breaks_advice(CASES["lerp()"][0], "c++20", "2.14.1+cu130")
    assert "(torch 2.14.1+cu130's headers need c++20)" in advice
    assert "torch 2.13 or older" in advice


def test_no_advice_for_an_error_nobody_knows():
    log = (
        'a.cu(3): error: identifier "my_helper" is undefined\nerror: command failed\n'
        "b.cpp:4:2: error: call of overloaded ‘mylerp(float&, float&)’ is ambiguous"
    )
    assert api_breaks_advice(log, "c++20", "2.14.1") == ""
