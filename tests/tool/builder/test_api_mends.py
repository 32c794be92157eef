"""api_mends: a classic project's code mended where a failed build's log shows a removed API
with an exact replacement (the log lines are nvcc 13.0's and g++'s own, from ngp_pl's vren and
the old_api_ext fixture built against torch 2.14.1's headers)."""

from __future__ import annotations

from prebuild.tool.builder.api_mends import (
    SourceChange,
    add_include,
    add_statement_semicolons,
    defines_lerp,
    mend_dispatch_types,
    mend_renamed_checks,
    mend_sources,
    mended_note,
    mends_recorded,
    recorded_changes,
    recorded_text,
)

# nvcc's front end, on ngp_pl (kwea123/ngp_pl) models/csrc/intersection.cu line 80
NVCC_TYPE = (
    '/w/source/intersection.cu(80): error: no suitable conversion function from "const '
    'at::DeprecatedTypeProperties" to "c10::ScalarType" exists\n'
)
# g++ on old_api_ext's ops.cpp: the error is in torch's header, the call in the project's file
GXX_TYPE = (
    "torch/headeronly/core/Dispatch.h:36:63: error: cannot convert ‘const "
    "at::DeprecatedTypeProperties’ to ‘c10::ScalarType’\n"
)
GXX_AT_CHECK = "/w/source/ops.cpp:8:3: error: ‘AT_CHECK’ was not declared in this scope\n"
GXX_MEMORY = (
    "/w/source/csrc/a.cpp:3:8: error: ‘unique_ptr’ in namespace ‘std’ does not name a type\n"
    "/w/source/csrc/a.cpp:2:1: note: ‘std::unique_ptr’ is defined in header ‘<memory>’; did "
    "you forget to ‘#include <memory>’?\n"
)

CU = """void f(at::Tensor rays_o) {
    AT_DISPATCH_FLOATING_TYPES(rays_o.type(), "ray_aabb_intersect_cu",
    ([&] { g<scalar_t>(); }));
    auto t = rays_o.type();  // not a dispatch macro's: left alone
}
"""


def test_a_type_given_to_a_dispatch_macro_becomes_its_scalar_type():
    text, changes = mend_dispatch_types("a.cu", CU)
    assert "AT_DISPATCH_FLOATING_TYPES(rays_o.scalar_type(), " in text
    assert "auto t = rays_o.type();" in text
    assert changes == [SourceChange("a.cu", 2, "rays_o.type() -> rays_o.scalar_type()")]
    # its argument on a later line, after other arguments, and a project's own dispatch macro
    # (lietorch's takes the group first); `.type().scalarType()` still compiles: left alone
    text, changes = mend_dispatch_types(
        "b.cpp",
        'AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16,\n  in[0]->type(), "f", '
        '[&] {});\nDISPATCH_GROUP_AND_FLOATING_TYPES(id, X.type(), "exp", ([&] {}));\n'
        'AT_DISPATCH_ALL_TYPES(x.type().scalarType(), "g", [&] {});\n',
    )
    assert "\n  in[0]->scalar_type(), " in text and "(id, X.scalar_type(), " in text
    assert "(x.type().scalarType(), " in text
    assert [c.line for c in changes] == [2, 3]
    assert mend_dispatch_types("c.cu", text) == (text, [])  # nothing left: once only


def test_renamed_checks_are_their_new_names_unless_the_file_defines_its_own():
    text, changes = mend_renamed_checks("a.cpp", 'void f() {\n  AT_CHECK (x, "x");\n}\n')
    assert text == 'void f() {\n  TORCH_CHECK (x, "x");\n}\n'
    assert [str(c) for c in changes] == ["a.cpp:2: AT_CHECK -> TORCH_CHECK"]
    own = '#define AT_CHECK(c, m) assert(c)\nvoid f() { AT_CHECK(x, "x"); }\n'
    assert mend_renamed_checks("b.cpp", own) == (own, [])
    # PyTorchEMD's emd_kernel.cu (e5c0feb): c10's glog-style checks, TORCH_-prefixed since;
    # a CHECK_NE of the file's own and a file that uses glog's are left alone
    text, changes = mend_renamed_checks(
        "emd_kernel.cu",
        "#define CHECK_NE(a, b) assert(a != b)\nvoid f() {\n  CHECK_EQ(xyz2.size(0), b);\n"
        "  DCHECK_LT(n, 4) << n;\n  CHECK_NE(n, 0);\n  MY_CHECK_EQ(n, 1);\n}\n",
    )
    assert "  TORCH_CHECK_EQ(xyz2.size(0), b);\n  TORCH_DCHECK_LT(n, 4) << n;\n" in text
    assert "  CHECK_NE(n, 0);\n  MY_CHECK_EQ(n, 1);\n" in text
    assert [str(c) for c in changes] == [
        "emd_kernel.cu:3: CHECK_EQ -> TORCH_CHECK_EQ",
        "emd_kernel.cu:4: DCHECK_LT -> TORCH_DCHECK_LT",
    ]
    glog = "#include <glog/logging.h>\nvoid f() { CHECK_EQ(n, 1); }\n"
    assert mend_renamed_checks("g.cpp", glog) == (glog, [])
    log = '/w/source/cuda/emd_kernel.cu(179): error: identifier "CHECK_EQ" is undefined\n'
    texts, _ = mend_sources(log, "c++20", {"e.cu": "void f() { CHECK_GT(n, 1); }\n"})
    assert texts == {"e.cu": "void f() { TORCH_CHECK_GT(n, 1); }\n"}


def test_a_standard_header_is_added_once():
    text, changes = add_include("a.cpp", "std::unique_ptr<int> p;\n", "<memory>")
    assert text == "#include <memory>\nstd::unique_ptr<int> p;\n" and len(changes) == 1
    assert add_include("a.cpp", text, "<memory>") == (text, [])


def test_only_the_breaks_the_log_shows_are_mended_in_every_file_they_stand_in():
    sources = {
        "intersection.cu": CU,
        "ops.cpp": 'void g(at::Tensor x) { AT_CHECK(x.defined(), "x");\n'
        'AT_DISPATCH_FLOATING_TYPES(x.type(), "g", [&] {}); }\n',
        "csrc/a.cpp": "#include <vector>\nstd::unique_ptr<int> p;\n",
    }
    # the build stopped at intersection.cu: ops.cpp, which the log does not name, is mended
    # too, and so is its AT_CHECK, sure to break next (no torch has it); the missing include
    # the log does not show is not added
    texts, changes = mend_sources(NVCC_TYPE, "c++20", sources)
    assert set(texts) == {"intersection.cu", "ops.cpp"}
    assert [str(c) for c in changes] == [
        "intersection.cu:2: rays_o.type() -> rays_o.scalar_type()",
        "ops.cpp:1: AT_CHECK -> TORCH_CHECK",
        "ops.cpp:2: x.type() -> x.scalar_type()",
    ]
    # a break that is not sure to happen is mended where the log shows it only: x.type() given
    # to a macro of the project's own may be what it takes
    texts, changes = mend_sources(GXX_AT_CHECK, "c++20", sources)
    assert [str(c) for c in changes] == ["ops.cpp:1: AT_CHECK -> TORCH_CHECK"]
    texts, changes = mend_sources(GXX_TYPE + GXX_AT_CHECK + GXX_MEMORY, "c++20", sources)
    assert texts["csrc/a.cpp"].startswith("#include <memory>\n#include <vector>\n")
    assert "TORCH_CHECK(x.defined()" in texts["ops.cpp"]
    assert [str(c) for c in changes] == [
        "csrc/a.cpp:1: #include <memory> added",
        "intersection.cu:2: rays_o.type() -> rays_o.scalar_type()",
        "ops.cpp:1: AT_CHECK -> TORCH_CHECK",
        "ops.cpp:2: x.type() -> x.scalar_type()",
    ]
    # another failure (a THC header) has no exact replacement: nothing changed
    assert mend_sources("a.cu:1:10: fatal error: THC/THC.h: No such file", "c++20", sources) == (
        {},
        [],
    )


def test_the_note_counts_each_kind_of_change_and_names_the_files():
    changes = [
        SourceChange("a.cu", 2, "rays_o.type() -> rays_o.scalar_type()"),
        SourceChange("b.cu", 9, "ws->type() -> ws->scalar_type()"),
        SourceChange("b.cu", 12, "AT_CHECK -> TORCH_CHECK"),
        SourceChange("c.cpp", 1, "#include <memory> added"),
    ]
    note = mended_note(changes)
    assert "changed in prebuild's copy of the project (its source is untouched)" in note
    assert "`x.type()` passed to a dispatch macro is `x.scalar_type()` (1 place in a.cu)" in note
    assert "`x->type()` passed to a dispatch macro is `x->scalar_type()` (1 place in b.cu)" in note
    assert "AT_CHECK is TORCH_CHECK (1 place in b.cu)" in note
    assert "`#include <memory>` added (1 place in c.cpp)" in note
    assert note.endswith("prebuild.json lists each change; --no-mend builds it as it is.")


def test_th_includes_are_the_aten_headers_that_replaced_them_where_nothing_else_of_th_is_used():
    """point-transformer's pointops include THC/THC.h and use nothing of it: each TH/THC
    include is the ATen header that took its place, once per file; a project using a TH name
    (THCState) has no exact replacement, and is left to the error's advice."""
    log = "/w/source/src/a.cpp:2:10: fatal error: THC/THC.h: No such file or directory\n"
    sources = {
        "src/a.cpp": "#include <torch/extension.h>\n#include <THC/THC.h>\n"
        "#include <THC/THCGeneral.h>\nint x;\n",
        "src/b.cu": '#include "THC/THCAtomics.cuh"\n// THCState is gone\nvoid f() {}\n',
        "src/c.cu": "int y;\n",
    }
    texts, changes = mend_sources(log, "c++20", sources)
    assert texts == {
        "src/a.cpp": "#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n\nint x;\n",
        "src/b.cu": "#include <ATen/cuda/Atomic.cuh>\n// THCState is gone\nvoid f() {}\n",
    }
    assert [str(c) for c in changes] == [
        "src/a.cpp:2: #include <THC/THC.h> -> #include <ATen/cuda/CUDAContext.h>",
        "src/a.cpp:3: #include <THC/THCGeneral.h> -> (removed)",
        'src/b.cu:1: #include "THC/THCAtomics.cuh" -> #include <ATen/cuda/Atomic.cuh>',
    ]
    assert (
        "TH/THC, PyTorch's old backend, is the ATen and c10 that replaced it (its #include "
        "lines, and names each with a one-to-one successor) (3 places in src/a.cpp, src/b.cu)"
        in mended_note(changes)
    )
    # THCudaBlas_Sgemm has none that libtorch_cuda.so exports: nothing is changed, not even
    # the includes (the build would fail again on it, in a copy unlike the source)
    using = {**sources, "src/c.cu": "void g() { THCudaBlas_Sgemm(state, 'n', 'n'); }\n"}
    assert mend_sources(log, "c++20", using) == ({}, [])


# maskrcnn-benchmark's nms.cu and Pointnet2.PyTorch's sampling.cpp, cut down
NMS = """#include <THC/THC.h>
#include <THC/THCDeviceUtils.cuh>
at::Tensor nms_cuda(const at::Tensor boxes, float nms_overlap_thresh) {
  const int col_blocks = THCCeilDiv(boxes_num, threadsPerBlock);
  THCState *state = at::globalContext().lazyInitCUDA(); // TODO replace with getTHCState
  //THCudaCheck(THCudaMalloc(state, (void**) &mask_dev, n));
  mask_dev = (unsigned long long*) THCudaMalloc(state, boxes_num * col_blocks * 8);
  nms_kernel<<<blocks, threads, 0, THCState_getCurrentStream(state)>>>(boxes_num, mask_dev);
  THCudaCheck(cudaMemcpy(&mask_host[0], mask_dev, n, cudaMemcpyDeviceToHost));
  THCudaFree(state, mask_dev);
  THArgCheck(boxes.is_contiguous(), 1, "boxes must be "
             "contiguous");
}
"""
SAMPLING = """#include <THC/THC.h>
extern THCState *state;
int gather_points_wrapper_fast(int b, int c) {
    cudaStream_t stream = THCState_getCurrentStream( state );
}
"""


def test_thc_names_with_a_one_to_one_successor_are_it_where_all_the_project_uses_has_one():
    """THC's names are what THC itself called by torch 1.10: each call as it was, less the
    THCState* argument; the THCState* variables removed; the successors' headers on top; a
    comment left as it is; every change names its line in the mended file."""
    log = 'src/nms.cu(4): error: identifier "THCCeilDiv" is undefined\n'
    texts, changes = mend_sources(log, "c++20", {"src/nms.cu": NMS, "src/sampling.cpp": SAMPLING})
    nms = texts["src/nms.cu"]
    assert nms.startswith(
        "#include <ATen/ceil_div.h>\n#include <c10/cuda/CUDACachingAllocator.h>\n"
        "#include <c10/cuda/CUDAException.h>\n#include <c10/util/Exception.h>\n"
        "#include <ATen/cuda/CUDAContext.h>\n#include <ATen/cuda/DeviceUtils.cuh>\n"
    )
    for mended in (
        "const int col_blocks = at::ceil_div(boxes_num, threadsPerBlock);\n\n",
        "//THCudaCheck(THCudaMalloc(state, (void**) &mask_dev, n));\n",
        "(unsigned long long*) c10::cuda::CUDACachingAllocator::raw_alloc(boxes_num * col_blocks",
        "<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>",
        "C10_CUDA_CHECK(cudaMemcpy(&mask_host[0], mask_dev, n, cudaMemcpyDeviceToHost));",
        "c10::cuda::CUDACachingAllocator::raw_delete(mask_dev);",
        'TORCH_CHECK(boxes.is_contiguous(), "invalid argument ", 1, ": " "boxes must be "\n'
        '             "contiguous");',
    ):
        assert mended in nms
    assert texts["src/sampling.cpp"] == (
        "#include <ATen/cuda/CUDAContext.h>\n\nint gather_points_wrapper_fast(int b, int c) {\n"
        "    cudaStream_t stream = at::cuda::getCurrentCUDAStream();\n}\n"
    )
    lines = {name: text.splitlines() for name, text in texts.items()}
    for change in changes:
        old, _, new = change.what.partition(" -> ")
        if new and new != "(removed)":
            assert new.split()[-1] in lines[change.file][change.line - 1], change
    assert [str(c) for c in changes if c.file == "src/sampling.cpp"] == [
        "src/sampling.cpp:1: #include <THC/THC.h> -> #include <ATen/cuda/CUDAContext.h>",
        "src/sampling.cpp:2: extern THCState *state; -> (removed)",
        "src/sampling.cpp:4: THCState_getCurrentStream -> at::cuda::getCurrentCUDAStream",
    ]
    note = mended_note(changes)
    assert "TH/THC, PyTorch's old backend, is the ATen and c10 that replaced it" in note
    assert "(16 places in src/nms.cu, src/sampling.cpp)" in note


def test_thc_calls_of_another_shape_leave_the_project_as_it_is():
    """THArgCheck with a printf format (TORCH_CHECK would print the %d), and THCudaMalloc of
    torch 0.4 (three arguments, the pointer's address first): no one-to-one successor."""
    log = 'src/nms.cu(4): error: identifier "THCCeilDiv" is undefined\n'
    for call in (
        'THArgCheck(n > 0, 2, "n is %d", n);',
        "THCudaCheck(THCudaMalloc(state, (void**) &mask_dev, n));",
    ):
        sources = {"src/nms.cu": NMS, "src/other.cu": f"void f() {{ {call} }}\n"}
        assert mend_sources(log, "c++20", sources) == ({}, []), call


def test_cubs_removed_operators_are_libcu_plus_plus_functors_and_lines_name_the_mended_file():
    """AutoAWQ_kernels' topk_softmax_kernels.cu (c7b0e88): `cub::Sum sum;` (a type) and
    `cub::Max()` (an object); the includes go on top, and every change names its line in the
    mended file, a missing standard header's too."""
    log = (
        '/w/source/t.cu(4): error: namespace "cub" has no member "Sum"\n'
        "/w/source/t.cu:6:3: note: ‘std::unique_ptr’ is defined in header ‘<memory>’; did you "
        "forget to ‘#include <memory>’?\n"
    )
    text = (
        "#include <cub/cub.cuh>\n\n__global__ void k() {\n  cub::Sum sum;\n"
        '  float m = R(s).Reduce(x, cub::Max());\n  AT_DISPATCH_FLOATING_TYPES(x.type(), "k", f);\n'
        "  cub::KeyValuePair<int, float> kv;  cub::ArgMax arg_max;\n}\n"
    )
    texts, changes = mend_sources(log, "c++20", {"t.cu": text})
    mended = texts["t.cu"]
    assert mended.startswith(
        "#include <memory>\n#include <cuda/functional>\n#include <cuda/std/functional>\n"
    )
    assert "  cuda::std::plus<> sum;\n" in mended and "Reduce(x, cuda::maximum<>())" in mended
    assert "cub::KeyValuePair<int, float> kv;  cub::ArgMax arg_max;" in mended  # still in CUB
    assert "x.type()" in mended  # its break is not in the log
    lines = mended.splitlines()
    for change in changes:
        if "->" in change.what:
            assert change.what.split(" -> ")[1] in lines[change.line - 1], change
    assert [str(c) for c in changes] == [
        "t.cu:1: #include <memory> added",
        "t.cu:7: cub::Sum -> cuda::std::plus<>",
        "t.cu:8: cub::Max -> cuda::maximum<>",
    ]
    note = mended_note(changes)
    assert "`cub::Sum` is `cuda::std::plus<>` (1 place in t.cu)" in note
    assert "APIs that torch, CUDA or the C++ standard library removed" in note
    # nerfacc 0.3.5's scan by key: cub::Equality() is libcu++'s equal_to
    scan = "ExclusiveSumByKey(nullptr, bytes, keys, in, out, n, cub::Equality(), stream);\n"
    log = '/w/a.cu(25): error: namespace "cub" has no member "Equality"\n'
    texts, changes = mend_sources(log, "c++20", {"a.cu": scan})
    assert "n, cuda::std::equal_to<>(), stream);" in texts["a.cu"]
    assert [str(c) for c in changes] == ["a.cu:3: cub::Equality -> cuda::std::equal_to<>"]


def test_what_is_sure_to_break_next_is_mended_in_the_same_round():
    """maskrcnn-benchmark (facebookresearch 57eec25) met `x.type()`, then THC, then AT_CHECK,
    three builds; THC and AT_CHECK are sure to break whatever the log shows, so a build run
    again for `x.type()` mends them with it. A log with nothing to mend changes nothing."""
    sources = {"a.cu": CU, "nms.cu": NMS, "ops.cpp": 'void g() { AT_CHECK(ok, "ok"); }\n'}
    texts, changes = mend_sources(NVCC_TYPE, "c++20", sources)
    assert set(texts) == {"a.cu", "nms.cu", "ops.cpp"}
    assert "ops.cpp:1: AT_CHECK -> TORCH_CHECK" in map(str, changes)
    assert "nms.cu:14: THCudaFree -> c10::cuda::CUDACachingAllocator::raw_delete" in map(
        str, changes
    )
    assert mend_sources("a.cu(3): error: expected a ;\n", "c++20", sources) == ({}, [])


def test_a_project_that_defines_a_thc_name_itself_is_not_thcs():
    """A port's compatibility macro (`#define THCudaCheck C10_CUDA_CHECK`) is the project's
    own: its THC names are left as they are, and so are its includes."""
    log = 'src/nms.cu(4): error: identifier "THCCeilDiv" is undefined\n'
    compat = "#define THCudaCheck(x) C10_CUDA_CHECK(x)\n"
    assert mend_sources(log, "c++20", {"nms.cu": NMS, "compat.h": compat}) == ({}, [])


def test_cubs_removed_thread_utilities_are_what_they_called():
    """VMamba's selective_scan (MzeroMiko/VMamba 2ed52ea, reverse_scan.cuh, as mamba's): CUDA
    13's CUB has no cub::LaneId nor cub::CTA_SYNC; CUDA 12's were `%laneid` and __syncthreads().
    WARP_ANY took the predicate first, __any_sync takes the mask first."""
    log = 'reverse_scan.cuh(119): error: namespace "cub" has no member "LaneId"\n'
    text = (
        "__device__ void f() {\n  lane_id = cub::LaneId();\n  cub::CTA_SYNC();\n"
        "  static constexpr bool WARP_SYNCHRONOUS = true;\n"
        "  int any = cub::WARP_ANY(x > f(a, b), 0xffffffffu);\n  // cub::CTA_SYNC();\n}\n"
    )
    texts, changes = mend_sources(log, "c++20", {"reverse_scan.cuh": text})
    assert texts["reverse_scan.cuh"] == (
        "#include <cuda/ptx>\n__device__ void f() {\n  lane_id = cuda::ptx::get_sreg_laneid();\n"
        "  __syncthreads();\n  static constexpr bool WARP_SYNCHRONOUS = true;\n"
        "  int any = __any_sync(0xffffffffu, x > f(a, b));\n  // cub::CTA_SYNC();\n}\n"
    )
    assert [str(c) for c in changes][:4] == [
        "reverse_scan.cuh:1: #include <cuda/ptx> added",
        "reverse_scan.cuh:3: cub::LaneId -> cuda::ptx::get_sreg_laneid",
        "reverse_scan.cuh:4: cub::CTA_SYNC -> __syncthreads",
        "reverse_scan.cuh:6: cub::WARP_ANY -> __any_sync",
    ]
    note = mended_note(changes)
    assert "`cub::LaneId` is `cuda::ptx::get_sreg_laneid` (1 place in reverse_scan.cuh)" in note
    assert "`cub::CTA_SYNC` is `__syncthreads` (1 place in reverse_scan.cuh)" in note


def test_warp_functions_cuda_9_replaced_are_their_sync_forms_over_every_lane():
    """Code written before CUDA 9 (a warp reduction as in older point-cloud and correlation
    kernels): __shfl_down and the like no longer exist for sm_70 and later; each call becomes
    its _sync form with every lane's mask. A macro of the project's own defining the name, and
    comments, stay."""
    log = 'reduce.cuh(4): error: identifier "__shfl_down" is undefined\n'
    text = (
        "template <typename T> __device__ T warp_sum(T v) {\n"
        "  for (int d = 16; d > 0; d /= 2) v += __shfl_down(v, d);\n"
        "  // __shfl_xor(v, 1) in a comment\n"
        "  if (__any (v > 0) && __ballot(v < 0)) v = __shfl(v, 0, 32);\n"
        "  return __shfl_down_sync(0xffffffff, v, 1) + __all(v);\n}\n"
    )
    own = "#define __shfl_xor(v, m) __shfl_xor_sync(0xffffffff, v, m)\nint g(int v) { return __shfl_xor(v, 1); }\n"
    texts, changes = mend_sources(log, "c++20", {"reduce.cuh": text, "compat.cuh": own})
    assert texts == {
        "reduce.cuh": (
            "template <typename T> __device__ T warp_sum(T v) {\n"
            "  for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffff, v, d);\n"
            "  // __shfl_xor(v, 1) in a comment\n"
            "  if (__any_sync(0xffffffff, v > 0) && __ballot_sync(0xffffffff, v < 0)) "
            "v = __shfl_sync(0xffffffff, v, 0, 32);\n"
            "  return __shfl_down_sync(0xffffffff, v, 1) + __all_sync(0xffffffff, v);\n}\n"
        )
    }
    assert [str(c) for c in changes] == [
        "reduce.cuh:2: __shfl_down -> __shfl_down_sync",
        "reduce.cuh:4: __any -> __any_sync",
        "reduce.cuh:4: __ballot -> __ballot_sync",
        "reduce.cuh:4: __shfl -> __shfl_sync",
        "reduce.cuh:5: __all -> __all_sync",
    ]
    note = mended_note(changes)
    assert (
        "`__shfl_down(...)` is `__shfl_down_sync(0xffffffff, ...)` (every lane of the warp, "
        "which code written for it runs together) (1 place in reduce.cuh)" in note
    )
    # without the log's error, nothing is changed; ptxas's on __any's `vote` mends the same
    assert mend_sources("", "c++20", {"reduce.cuh": text}) == ({}, [])
    ptxas = (
        "ptxas /tmp/tmpxft_6d3b-6_any.ptx, line 38; error   : Instruction 'vote' without "
        "'.sync' is not supported on .target sm_70 and higher from PTX ISA version 6.4\n"
    )
    assert mend_sources(ptxas, "c++20", {"reduce.cuh": text}) == (texts, changes)


# torch-encoding 1.0.1's encoding/lib/cpu/nms_cpu.cpp, written against torch 1.0: g++ and nvcc
# (its front end quotes the expansion) on the macros torch made `do { ... } while (false)`
GXX_SEMICOLON = "/w/encoding/lib/cpu/nms_cpu.cpp:36:3: error: expected ‘;’ before ‘do’\n"
NVCC_SEMICOLON = (
    '/w/encoding/lib/gpu/nms_kernel.cu(75): error: expected a ";"\n'
    "    do { ::c10::detail::deprecated_AT_ASSERT(); } while (false);\n"
    "    ^\n"
)
NMS_CPU = """#define MY_CHECK(x) AT_ASSERT(x)
#define MY_CHECKS(x, y) \\
  AT_ASSERT(x) \\
  AT_ASSERT(y)
at::Tensor nms(at::Tensor input, at::Tensor scores) {
  AT_ASSERT(input.ndimension() == 3);
  AT_ASSERT(input.type().scalarType() == at::kFloat || input.type().scalarType() == at::kDouble)
  AT_ASSERT(scores.is_contiguous()) // contiguous
  AT_ASSERTM(input.size(0) == scores.size(0), "sizes (", input.size(0), ")")
    ;
  // AT_ERROR("in a comment") stays
  if (input.numel() == 0) AT_ERROR("empty") else { MY_CHECK(1); }
  AT_ERROR();
  return input;
}
"""


def test_a_statement_macro_without_its_semicolon_gets_one():
    text, changes = add_statement_semicolons("nms.cpp", NMS_CPU)
    lines = text.splitlines()
    assert lines[:6] == NMS_CPU.splitlines()[:6]  # the macros' own bodies, and what had its `;`
    assert lines[6].endswith("== at::kDouble);")
    assert lines[7] == "  AT_ASSERT(scores.is_contiguous()); // contiguous"
    assert lines[8:11] == NMS_CPU.splitlines()[8:11]  # its `;` on the next line, and a comment
    assert lines[11] == '  if (input.numel() == 0) AT_ERROR("empty"); else { MY_CHECK(1); }'
    assert [str(c) for c in changes] == [
        "nms.cpp:7: AT_ASSERT(...) -> AT_ASSERT(...);",
        "nms.cpp:8: AT_ASSERT(...) -> AT_ASSERT(...);",
        "nms.cpp:12: AT_ERROR(...) -> AT_ERROR(...);",
    ]
    assert add_statement_semicolons("nms.cpp", text) == (text, [])  # once
    # a file that defines the macro itself is left as it is
    own = "#define AT_ERROR(m) if (1) { throw m; }\nvoid f() { AT_ERROR(1) }\n"
    assert add_statement_semicolons("own.cpp", own) == (own, [])


def test_a_missing_semicolon_after_a_statement_macro_is_mended_from_either_compilers_log():
    sources = {"lib/cpu/nms_cpu.cpp": NMS_CPU, "lib/gpu/ok.cu": "void f() { AT_ASSERT(1); }\n"}
    for log in (GXX_SEMICOLON, NVCC_SEMICOLON):
        texts, changes = mend_sources(log, "c++20", sources)
        assert set(texts) == {"lib/cpu/nms_cpu.cpp"} and len(changes) == 3
    note = mended_note(changes)
    assert (
        "`AT_ASSERT(...)` with no `;` after it (torch's macro is a statement now) is "
        "`AT_ASSERT(...);` (2 places in lib/cpu/nms_cpu.cpp)" in note
    )
    # sure to break whatever the log shows: mended with another break's mend
    texts, changes = mend_sources(GXX_AT_CHECK, "c++20", {**sources, "ops.cpp": "AT_CHECK(x);"})
    assert set(texts) == {"lib/cpu/nms_cpu.cpp", "ops.cpp"}
    # a missing `;` anywhere else is the project's own: nothing to mend
    assert mend_sources(GXX_SEMICOLON, "c++20", {"ok.cu": "void f() { AT_ASSERT(1); }\n"}) == (
        {},
        [],
    )


# nerfacc 0.3.5's include/helpers_math.h (CUDA samples' helper_math.h) and a kernel using it;
# g++ in C++20, which torch 2.14's headers need
HELPERS_MATH = """// lerp
// - linear interpolation between a and b, based on value t in [0, 1] range
inline __device__ __host__ float lerp(float a, float b, float t)
{
    return a + t*(b-a);
}
inline __device__ __host__ float3 lerp(float3 a, float3 b, float t)
{
    return a + t*(b-a);
}
"""
KERNEL = """#include "helpers_math.h"
__device__ float3 mid(float3 a, float3 b) { return lerp(a, b, 0.5f); }
__device__ float g(float a, float b) { return ::lerp(a, b, 0.5f) + std::lerp(a, b, 0.5f); }
void h(at::Tensor x, Spline* s) { x.lerp_(x, 0.5); s->lerp(1.0f); glm::lerp(1, 2, 3); }
"""
GXX_LERP = (
    "nerfacc/cuda/csrc/include/helpers_math.h:3:44: error: ‘float lerp(float, float, float)’ "
    "conflicts with a previous declaration\n"
)


def test_the_project_s_own_lerp_is_renamed_where_cxx20_s_std_lerp_meets_it():
    sources = {"include/helpers_math.h": HELPERS_MATH, "kernel.cu": KERNEL}
    assert defines_lerp(HELPERS_MATH) and not defines_lerp(KERNEL)
    assert not defines_lerp("float f() {\n    return lerp(a, b, t);\n}\n")  # a call
    texts, changes = mend_sources(GXX_LERP, "c++20", sources)
    assert (
        "inline __device__ __host__ float project_lerp(float a" in texts["include/helpers_math.h"]
    )
    assert texts["include/helpers_math.h"].startswith("// lerp\n")  # comments as they were
    kernel = texts["kernel.cu"].splitlines()
    assert kernel[1].endswith("return project_lerp(a, b, 0.5f); }")
    # the global one is the project's; std's, a member's and another namespace's are not
    assert "::project_lerp(a, b, 0.5f) + std::lerp(a, b, 0.5f)" in kernel[2]
    assert kernel[3] == KERNEL.splitlines()[3]
    assert [str(c) for c in changes] == [
        "include/helpers_math.h:3: lerp -> project_lerp",
        "include/helpers_math.h:7: lerp -> project_lerp",
        "kernel.cu:2: lerp -> project_lerp",
        "kernel.cu:3: lerp -> project_lerp",
    ]
    assert "the project's own `lerp`, which C++20's `std::lerp` meets, is `project_lerp` (4 " in (
        mended_note(changes)
    )
    # a project that defines no lerp of its own (C++20 code calling std's): nothing renamed
    assert mend_sources(GXX_LERP, "c++20", {"kernel.cu": KERNEL}) == ({}, [])
    # built in C++17 the log's line is another break: not this one
    assert mend_sources(GXX_LERP, "c++17", sources) == ({}, [])


def test_the_record_of_mends_adds_up_rounds_and_gives_a_mend_back_only_to_its_own_text():
    """A build going on from an earlier run's objects (the project's copy, or a wheel's
    first-use compiles) makes the recorded mends again where the file is still the text they
    were made from; a file mended in two rounds keeps the sha of its text before any."""
    first = mends_recorded(
        {}, {"a.cu": "v1"}, {"a.cu": "v2"}, [SourceChange("a.cu", 1, "x.type() -> x.scalar_type()")]
    )
    both = mends_recorded(
        first, {"a.cu": "v2"}, {"a.cu": "v3"}, [SourceChange("a.cu", 4, "AT_CHECK -> TORCH_CHECK")]
    )
    entry = both["a.cu"]
    assert entry["text"] == "v3" and entry["source"] == first["a.cu"]["source"]
    assert recorded_text(entry, "v1") == "v3"
    assert recorded_text(entry, "v1 changed since") is None  # the project's own again
    assert recorded_text({"text": "v3"}, "v1") is None  # a record of another shape
    assert [str(c) for c in recorded_changes("a.cu", entry)] == [
        "a.cu:1: x.type() -> x.scalar_type()",
        "a.cu:4: AT_CHECK -> TORCH_CHECK",
    ]
