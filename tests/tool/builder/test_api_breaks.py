"""api_breaks: the known torch and CUDA breaks, recognised in error lines as nvcc 13.0 and g++
print them (each line below is a compiler's own, from a small source compiled against torch
2.14.1's headers, or from a real project's failed build where one is named)."""

from __future__ import annotations

import pytest

from prebuild.tool.builder.api_breaks import API_BREAKS, api_breaks, api_breaks_advice, error_lines

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
        # PyTorchEMD (e5c0feb): c10's glog-style check, TORCH_CHECK_EQ since torch 2.1
        'cuda/emd_kernel.cu(179): error: identifier "CHECK_EQ" is undefined',
    ],
    # torch-encoding 1.0.1: AT_ASSERT(...) with no `;`, before the next AT_ASSERT
    "AT_ASSERTM": [
        "nms_cpu.cpp:36:3: error: expected ‘;’ before ‘do’",
        'nms_kernel.cu(75): error: expected a ";"\n'
        "    do { ::c10::detail::deprecated_AT_ASSERT(); } while (false);",
    ],
    "lerp()": [
        # nerfacc 0.5.3
        "nerfacc/cuda/csrc/include/utils_math.cuh:1145:44: error: ‘float lerp(float, float, "
        "float)’ conflicts with a previous declaration",
        "lerp.cpp:5:30: error: call of overloaded ‘lerp(float&, float&, float)’ is ambiguous",
        'lerp.cu(5): error: more than one instance of overloaded function "lerp" matches the '
        "argument list:",
    ],
    "copy of fmt": [
        # tiny-cuda-nn's torch bindings (NVlabs/tiny-cuda-nn 6ee3546, its fmt 9.0), nvcc 13.0:
        # the front end, then g++ as nvcc runs it
        "include/tiny-cuda-nn/gpu_memory.h(455): error: call to consteval function "
        '"fmt::v9::basic_format_string<Char, Args...>::basic_format_string(const S &) [with '
        'Char=char, Args=<const char *>, S=char [95], <unnamed>=0]" did not produce a valid '
        "constant expression",
        "dependencies/fmt/include/fmt/core.h:344:14: error: call to non-‘constexpr’ function "
        "‘void fmt::v9::detail::ignore_unused(const T& ...) [with T = {bool}]’",
    ],
    "cub::Sum": ['cubsum.cu(2): error: namespace "cub" has no member "Sum"'],
    "cub::LaneId": [
        # VMamba's kernels/selective_scan (MzeroMiko/VMamba 2ed52ea)
        'csrc/selective_scan/reverse_scan.cuh(52): error: namespace "cub" has no member "LaneId"',
        'reverse_scan.cuh(158): error: namespace "cub" has no member "CTA_SYNC"',
        "w.cpp:3:12: error: ‘WARP_SYNC’ is not a member of ‘cub’",
    ],
    "NumPy's old C API": [
        # openpoints' cpp/subsampling (guochengqian/openpoints 8c115a9), NumPy 2.4.6
        "wrapper.cpp:100:74: error: ‘NPY_IN_ARRAY’ was not declared in this scope",
        "wrapper.cpp:135:31: error: cannot convert ‘PyObject*’ {aka ‘_object*’} to ‘const "
        "PyArrayObject*’ {aka ‘const tagPyArrayObject_fields*’}",
    ],
    "debug_synchronous": [
        # megablocks 0.10.0, whose CUB is in a namespace of its own (CUB_NAMESPACE_BEGIN)
        "megablocks-0.10.0/csrc/cumsum.h(34): error: no instance of overloaded function "
        '"megablocks::cub::DeviceScan::ExclusiveSum" matches the argument list',
        'scan.cu(6): error: no instance of overloaded function "cub::DeviceRadixSort::SortPairs" '
        "matches the argument list",
    ],
    "thrust::unary_function": [
        'misc.cu(3): error: namespace "thrust" has no member class "unary_function"'
    ],
    "cudaDeviceProp": [
        'prop.cu(2): error: class "cudaDeviceProp" has no member "clockRate"',
        "p.cpp:2:60: error: ‘struct cudaDeviceProp’ has no member named ‘clockRate’",
    ],
    "cuCtxCreate": [
        # ThunderKittens 97214f6's include/types/device/ipc.cuh: nvcc names the call in its
        # quote of the source, under the error line
        "ipc.cuh(159): error: too few arguments in function call\n          do { CUresult err = "
        "cuCtxCreate_v4(&contexts[i], 0, devices[i]); if (err != CUDA_SUCCESS) {\n"
        "                                                                        ^",
        "ctx.cpp:4:14: error: too few arguments to function ‘CUresult "
        "cuCtxCreate_v4(CUctx_st**, CUctxCreateParams*, unsigned int, CUdevice)’",
    ],
    "cudaMemLocation": [
        'misc.cu(5): error: no suitable constructor exists to convert from "int" to '
        '"cudaMemLocation"'
    ],
    "texture references": [
        "tex.cu(2): error: texture is not a template",
        'tex.cu(4): error: identifier "cudaBindTexture" is undefined',
    ],
    "warp functions without _sync": [
        'shfl.cu(1): error: identifier "__shfl_down" is undefined',
        "ptxas /tmp/tmpxft_6d3b-6_any.ptx, line 38; error   : Instruction 'vote' without "
        "'.sync' is not supported on .target sm_70 and higher from PTX ISA version 6.4",
    ],
    "Eigen 3.4's aliases": [
        # DROID-SLAM 2dfd39f, Eigen 3.3.7 in thirdparty/lietorch/eigen
        'droid_kernels.cu(1130): error: namespace "Eigen" has no member "VectorX"',
        "ba.cpp:3:10: error: ‘VectorX’ is not a member of ‘Eigen’",
    ],
    "named-tensor overload": [
        # kaolin (NVIDIAGameWorks/kaolin d52da9f), kaolin/csrc/ops/conversions/mise/mise.cpp
        "mise.cpp:107:32: error: no matching function for call to ‘zeros(<brace-enclosed "
        "initializer list>, const std::nullopt_t&, const c10::ScalarType&, const std::nullopt_t&, "
        "const c10::DeviceType&, const std::nullopt_t&)’",
        'z.cu(2): error: no instance of overloaded function "at::zeros" matches the argument list'
        "\n            argument types are: ({...}, const std::nullopt_t, const c10::ScalarType, "
        "const std::nullopt_t, const c10::DeviceType, const std::nullopt_t)",
    ],
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


def test_an_eigen_name_older_eigens_have_too_is_no_eigen_3_4_break():
    log = "ba.cpp:3:10: error: ‘MatrixXf’ is not a member of ‘Eigen’\n"
    assert api_breaks(log, "c++20") == []


def test_a_factory_call_that_is_no_named_tensor_overload_is_no_break():
    """at::zeros(size, dtype, layout, device, pin_memory) failing for another reason (five
    arguments: the dtype, not the names, is the std::nullopt)."""
    line = (
        'z.cu(2): error: no instance of overloaded function "at::zeros" matches the argument list'
        "\n   argument types are: ({...}, const std::nullopt_t, const int, const c10::Device, "
        "const bool)"
    )
    assert api_breaks(line, "c++20") == []


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
    assert lines[0].startswith(
        "This is the project's own code meeting a change of torch, CUDA or the C++ standard"
    )
    assert len(lines) == 3
    assert "THC" in lines[1] and "removed in torch 1.11" in lines[1]
    assert (
        "`x.type()` in each AT_DISPATCH_* call (and in each call of a dispatch macro of its own"
        in lines[2]
    )
    assert "becomes `x.scalar_type()`" in lines[2]


def test_an_old_fmt_under_nvcc_is_told_the_define_fmt_10_1_sets():
    advice = api_breaks_advice(CASES["copy of fmt"][1], "c++20", "2.14.1+cu130")
    assert "`NVCC_APPEND_FLAGS=-DFMT_USE_CONSTEXPR=1` before the prebuild wheel command" in advice
    assert api_breaks(CASES["copy of fmt"][0], "c++17") == []


def test_the_cxx20_advice_names_the_torch_that_needs_it():
    advice = api_breaks_advice(CASES["lerp()"][0], "c++20", "2.14.1+cu130")
    assert "(torch 2.14.1+cu130's headers need c++20)" in advice
    assert "torch 2.13 or older" in advice


def test_no_advice_for_an_error_nobody_knows():
    log = (
        'a.cu(3): error: identifier "my_helper" is undefined\nerror: command failed\n'
        'a.cu(4): error: no instance of overloaded function "mine::Device::Scan" matches\n'
        "b.cpp:4:2: error: call of overloaded ‘mylerp(float&, float&)’ is ambiguous"
    )
    assert api_breaks_advice(log, "c++20", "2.14.1") == ""


# g++ 12's words on torch-points-kernels 0.7.0 (cut): its neighbors.cpp uses std::unique_ptr and
# includes <memory> nowhere, which older libstdc++ headers had included for it.
def forgot(place: str, name: str, header: str, q: str = "‘’") -> str:
    """g++'s note, with its quotes (‘’ in a UTF-8 locale, '' in the C locale)."""
    o, c = q
    return (
        f"{place}: note: {o}{name}{c} is defined in header {o}<{header}>{c}; did you forget to "
        f"{o}#include <{header}>{c}?\n"
    )


FORGOT_MEMORY = (
    "cpu/src/neighbors.cpp:47:10: error: ‘unique_ptr’ is not a member of ‘std’\n"
    "   47 |     std::unique_ptr<my_kd_tree_t> index(new my_kd_tree_t(3, pcd, tree_params));\n"
    + forgot("cpu/src/neighbors.cpp:7:1", "std::unique_ptr", "memory")
    + "    6 | #include <random>\n  +++ |+#include <memory>\n"
    + forgot("cpu/src/neighbors.cpp:182:10", "std::unique_ptr", "memory")
    + forgot("b.cpp:3:1", "std::uint8_t", "cstdint", "''")
    + forgot("c.cpp:9:1", "std::make_unique", "memory", "''")
)


def test_a_standard_header_the_project_never_included_is_named_with_its_files():
    from prebuild.tool.builder.api_breaks import missing_includes

    assert missing_includes(FORGOT_MEMORY) == {
        "<memory>": (["std::unique_ptr", "std::make_unique"], ["cpu/src/neighbors.cpp", "c.cpp"]),
        "<cstdint>": (["std::uint8_t"], ["b.cpp"]),
    }
    advice = api_breaks_advice(FORGOT_MEMORY, "c++17", "2.14.1").splitlines()
    assert len(advice) == 3
    assert advice[1].startswith(
        "- it uses std::unique_ptr, std::make_unique without #include <memory> "
        "(cpu/src/neighbors.cpp, c.cpp)"
    )
    assert "add #include <cstdint> to those files" in advice[2]
    assert missing_includes("a.cpp:1:1: error: ‘unique_ptr’ is not a member of ‘std’") == {}


def test_a_failed_ninja_step_is_shown_from_its_first_error_after_its_command():
    """megablocks 0.10.0: nvcc warns about torch's own headers (#3189-D, dozens of lines a
    file) before the project's error, and those warnings filled all that was shown."""
    from prebuild.tool.builder.build_log import compiler_errors

    warning = (
        'torch/include/torch/python.h(93): warning #3189-D: "module" is parsed as an '
        "identifier rather than a keyword\n    module.attr(name) = wrapper_class;\n    ^\n\n"
    )
    error = CASES["debug_synchronous"][0]
    log = (
        "[1/3] c++ -c a.cpp\nFAILED: [code=1] build/csrc/ops.o \n/shim/bin/nvcc -c csrc/ops.cu\n"
        + warning * 60
        + f"{error}\n            argument types are: (void *, size_t, short *, bool)\n"
        + '1 error detected in the compilation of "csrc/ops.cu".\n'
        + "ninja: build stopped: subcommand failed.\nTraceback (most recent call last):\n"
    )
    shown = compiler_errors(log, limit=2000)
    assert shown.splitlines()[:3] == [
        "FAILED: [code=1] build/csrc/ops.o ",
        "/shim/bin/nvcc -c csrc/ops.cu",
        error,
    ]
    assert "argument types are" in shown and "warning #3189-D" not in shown
    assert "ninja: build stopped" not in shown and "Traceback" not in shown
    # a step whose output holds no compiler error is shown as it is
    bare = "FAILED: x.o \nnvcc -c x.cu\nKilled\nninja: build stopped: subcommand failed.\n"
    assert compiler_errors(bare) == "FAILED: x.o \nnvcc -c x.cu\nKilled"
    # VMamba: the steps ninja ran on while it failed (ptxas -v's reports) are not its own
    parallel = (
        "FAILED: [code=255] build/bwd.o \n/shim/bin/nvcc -c bwd.cu --ptxas-options=-v\n"
        'bwd.cu(12): error: namespace "cub" has no member "LaneId"\n'
        '1 error detected in the compilation of "bwd.cu".\n'
        "[2/3] /shim/bin/nvcc -c fwd.cu --ptxas-options=-v\n"
        + "ptxas info    : Compiling entry function 'fwd' for 'sm_90'\n" * 50
        + "ninja: build stopped: subcommand failed.\n"
    )
    shown = compiler_errors(parallel)
    assert shown.endswith('1 error detected in the compilation of "bwd.cu".'), shown
    assert "ptxas info" not in shown and "[2/3]" not in shown
    # tiny-cuda-nn's cpp_api.cu: nvcc's front end failing its own assertion, after warnings
    crash = (
        "FAILED: [code=134] /b/cpp_api.o \n/shim/bin/nvcc -c cpp_api.cu\n"
        'fmt/core.h(286): warning #1675-D: unrecognized GCC pragma\n  #pragma GCC optimize("Og")\n'
        "object.h(666): internal error: assertion failed: gen_expr: bad expr node kind\n"
        '1 catastrophic error detected in the compilation of "cpp_api.cu".\n'
    )
    assert compiler_errors(crash).splitlines()[2].startswith("object.h(666): internal error")
    killed = bare.replace("Killed\n", "Killed\n[2/2] c++ -c y.cpp\nwarning: y\n")
    assert compiler_errors(killed) == "FAILED: x.o \nnvcc -c x.cu\nKilled"


def test_each_further_failed_step_is_named_with_its_first_error():
    """neural_renderer b2a1e6c: its .cu fails on ``.type()`` in AT_DISPATCH, its .cpp on
    AT_CHECK; only the first step was shown, the second cause left to the full log."""
    from prebuild.tool.builder.build_log import compiler_errors

    cu_error = CASES["tensor.type()"][0]
    cpp_error = "/s/nr/rasterize.cpp:12:5: error: ‘AT_CHECK’ was not declared in this scope"
    log = (
        "[1/4] c++ -c a.cpp\nFAILED: [code=1] /b/rasterize_cuda.o \n/shim/bin/nvcc -c r.cu\n"
        f"{cu_error}\n1 error detected\n"
        "FAILED: [code=1] /b/rasterize.o \n/shim/bin/c++ -c rasterize.cpp\n"
        "/s/nr/rasterize.cpp: In function ‘at::Tensor f()’:\n"
        f"{cpp_error}\n   12 |     AT_CHECK(x);\n"
        "FAILED: /b/load.o \n/shim/bin/c++ -c load.cpp\nKilled\n"
        "ninja: build stopped: subcommand failed.\n"
    )
    shown = compiler_errors(log).split("\n\n")
    assert shown[0] == (
        f"FAILED: [code=1] /b/rasterize_cuda.o \n/shim/bin/nvcc -c r.cu\n{cu_error}\n1 error detected"
    )
    assert shown[1].splitlines() == [
        "Also failed (the full log has each):",
        f"  [code=1] /b/rasterize.o: {cpp_error}",
        "  /b/load.o",
    ]
    many = log.replace("ninja: build", "FAILED: /b/x.o \nc++\n" * 7 + "ninja: build")
    also = compiler_errors(many).split("\n\n")[1].splitlines()
    assert len(also) == 7 and also[-1] == "  ... and 4 more"
    # within the limit, the further failures kept whole
    short = compiler_errors(log, limit=300)
    assert len(short) <= 300 and short.endswith("  /b/load.o")


def test_the_log_shown_starts_at_the_first_compiler_error_in_a_build_without_ninja():
    """torch-points-kernels 0.7.0 builds without ninja: its log's end is a cascade of errors
    from the same missing header, its first error (with g++'s note) is the cause."""
    from prebuild.tool.builder.build_log import compiler_errors

    log = (
        "running build_ext\ng++ -c cpu/src/knn.cpp -o knn.o\nIn file included from cpu/src/knn.cpp:2:\n"
        "cpu/src/neighbors.cpp: In function ‘int nanoflann_neighbors()’:\n"
        + FORGOT_MEMORY
        + "x" * 9000
        + "\nerror: command '/usr/bin/g++' failed with exit code 1\n"
    )
    shown = compiler_errors(log, limit=2000)
    assert shown.startswith(
        "In file included from cpu/src/knn.cpp:2:\ncpu/src/neighbors.cpp: In function"
    )
    assert "did you forget to ‘#include <memory>’" in shown and len(shown) == 2000
    # nvcc's wording is a compiler error too; a log with none shows its end
    assert compiler_errors("a\nk.cu(3): error: identifier x\nb").startswith("k.cu(3): error")
    assert (
        compiler_errors("a\nCMake Error at x.cmake:1\nend", limit=12)
        == "Error at x.cmake:1\nend"[-12:]
    )


# point-transformer's pointops (10d43ab): six .cpp files include THC/THC.h and use nothing of it.
THC_INCLUDED = "#include <torch/serialize/tensor.h>\n#include <THC/THC.h>\n#include <vector>\n"
THC_USED = (
    '#include "THC/THCAtomics.cuh"\n// THCState is gone\nextern THCState *state;\n'
    "void f() { THCudaCheck(cudaGetLastError()); }\n"
)


def test_th_uses_tells_the_files_that_include_from_those_that_use():
    from prebuild.tool.builder.api_breaks import th_uses

    sources = {
        "src/b/b_cuda.cpp": THC_INCLUDED,
        "src/a/a_cuda.cpp": THC_INCLUDED,
        "src/dcn.cu": THC_USED,
        # a macro that starts with TH, and the names in comments only: no use
        "src/k.cu": "#define THREADS 256\n/* THCState once */ // THCudaCheck\n",
    }
    assert th_uses(sources) == (
        ["src/a/a_cuda.cpp", "src/b/b_cuda.cpp", "src/dcn.cu"],
        ["src/dcn.cu"],
    )


def test_a_project_that_only_includes_thc_is_told_to_delete_the_includes():
    log = CASES["THC"][0]
    sources = {f"src/op{i}/op{i}_cuda.cpp": THC_INCLUDED for i in range(8)}
    advice = api_breaks_advice(log, "c++20", "2.14.1", sources)
    assert "uses nothing of TH/THC but these #include lines: delete them" in advice
    assert "src/op0/op0_cuda.cpp, src/op1/op1_cuda.cpp" in advice
    assert "src/op5/op5_cuda.cpp and 2 more" in advice
    assert "must move to ATen" not in advice


def test_a_project_that_uses_thc_is_told_the_port_and_the_files():
    log = CASES["THC"][0]
    advice = api_breaks_advice(log, "c++20", "2.14.1", {"a.cpp": THC_INCLUDED, "dcn.cu": THC_USED})
    assert "must move to ATen and c10" in advice
    assert "The files that use TH/THC names: dcn.cu." in advice
    # the names no mend replaces are named (DCNv2's cuBLAS and CPU BLAS calls)
    dcn = {"dcn.cu": THC_USED + "void g() { THCudaBlas_SgemmBatched(state); THFloatBlas_gemm(); }"}
    advice = api_breaks_advice(log, "c++20", "2.14.1", dcn)
    assert (
        "those with no one-to-one successor: THCudaBlas_SgemmBatched, THFloatBlas_gemm." in advice
    )
    # without the sources, the port as the table says it
    assert "The files that use" not in api_breaks_advice(log, "c++20", "2.14.1")


def test_an_nvcc_error_line_carries_the_source_line_it_quotes_and_no_more():
    log = (
        "a.cu(3): error: too few arguments in function call\n"
        "      f(x)\n"
        "       ^\n"
        "   a warning line of another step\n"
        "b.cpp:2:1: error: g++ quotes its own way\n"
        "    2 | int y\n"
    )
    assert error_lines(log) == [
        "a.cu(3): error: too few arguments in function call f(x)",
        "b.cpp:2:1: error: g++ quotes its own way",
    ]
    assert api_breaks(log, "c++20") == []  # a call of another function: no known break
