// Zero-filled tensors for an op's outputs (gradients accumulated with atomics, offsets). On a
// CUDA tensor torch::stable::new_zeros is two dispatcher round trips, the allocation and a fill
// kernel's launch: about 20 us of host time each on an H200 machine (docs/gpu-checks), and a
// backward step makes a dozen. Here the fill is one cudaMemsetAsync on PyTorch's current
// stream. Host code shared by the backends includes this header: in a translation unit nvcc
// compiles (the CUDA library) a CUDA tensor takes the memset, elsewhere new_zeros.
#pragma once

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <optional>

#if defined(__CUDACC__)
#include "cuda_launch.cuh"
#endif

namespace prebuild {

inline torch::stable::Tensor new_zeros(
    const torch::stable::Tensor& like, torch::headeronly::IntHeaderOnlyArrayRef size,
    std::optional<torch::headeronly::ScalarType> dtype = std::nullopt) {
#if defined(__CUDACC__)
  if (like.is_cuda()) {
    torch::stable::Tensor t = torch::stable::new_empty(like, size, dtype);
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    if (bytes > 0) {
      on_current_stream("zero-filling an output", t, [&](cudaStream_t stream) {
        check_cuda_launch(cudaMemsetAsync(t.mutable_data_ptr(), 0, bytes, stream),
                          "cudaMemsetAsync");
      });
    }
    return t;
  }
#endif
  return torch::stable::new_zeros(like, size, dtype);
}

}  // namespace prebuild
