// CUB's scan on PyTorch's current stream, and the read-back of its total: the steps that size
// a variable-length output (intersections, packed pairs) on CUDA.
#pragma once

#include <cuda_runtime.h>

#include <cub/device/device_scan.cuh>

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

// Inclusive prefix sum of cum[0, n) (int64) in place.
inline void inclusive_scan_cuda(const char* name, const torch::stable::Tensor& on,
                                torch::stable::Tensor& cum, int64_t n) {
  int64_t* data = cum.mutable_data_ptr<int64_t>();
  with_cub_temp(name, on, [&](void* temp, size_t& bytes, cudaStream_t s) {
    return cub::DeviceScan::InclusiveSum(temp, bytes, data, data, n, s);
  });
}

// cum[n - 1] on the host: it sizes the outputs, so copy it back on the current stream and
// wait for it (the op's one host sync).
inline int64_t read_total_cuda(const char* name, const torch::stable::Tensor& on,
                               const torch::stable::Tensor& cum, int64_t n) {
  int64_t total = 0;
  on_current_stream(name, on, [&](cudaStream_t s) {
    check_cuda(cudaMemcpyAsync(&total, cum.const_data_ptr<int64_t>() + (n - 1), sizeof(total),
                               cudaMemcpyDeviceToHost, s),
               name);
    check_cuda(cudaStreamSynchronize(s), name);
  });
  return total;
}

}  // namespace gsplat
}  // namespace prebuild
