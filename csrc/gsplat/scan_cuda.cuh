// CUB's scan on PyTorch's current stream, and the read-back of its total: the steps that size
// a variable-length output (intersections, packed pairs) on CUDA. Declared here and defined in
// intersect_cuda.cu, the one translation unit that includes CUB: CUB's headers cost about 2 s
// of nvcc per translation unit and arch, and the pack family's would pay them only for these.
#pragma once

#include <cuda_runtime.h>

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <prebuild/cuda_launch.cuh>

namespace prebuild {
namespace gsplat {

inline void check_cuda(cudaError_t err, const char* what) {
  STD_TORCH_CHECK(err == cudaSuccess, "prebuild: ", what, " failed: ", cudaGetErrorString(err));
}

// CUB's two-phase calls: `call(temp, bytes, stream)` first sizes the temporary storage, which
// is then allocated as a tensor on `on`'s device (PyTorch's caching allocator, stream-ordered).
template <typename Call>
void with_cub_temp(const char* name, const torch::stable::Tensor& on, const Call& call) {
  on_current_stream(name, on, [&](cudaStream_t stream) {
    size_t bytes = 0;
    check_cuda(call(nullptr, bytes, stream), name);
    torch::stable::Tensor temp = torch::stable::new_empty(
        on, {static_cast<int64_t>(bytes)}, torch::headeronly::ScalarType::Byte);
    check_cuda(call(temp.mutable_data_ptr(), bytes, stream), name);
  });
}

// Inclusive prefix sum of cum[0, n) (int64) in place, on the current stream.
void inclusive_scan_cuda(const char* name, const torch::stable::Tensor& on,
                         torch::stable::Tensor& cum, int64_t n);

// cum[n - 1] on the host: it sizes the outputs, so copy it back on the current stream and
// wait for it (the op's one host sync).
int64_t read_total_cuda(const char* name, const torch::stable::Tensor& on,
                        const torch::stable::Tensor& cum, int64_t n);

}  // namespace gsplat
}  // namespace prebuild
