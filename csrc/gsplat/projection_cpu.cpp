// Fully fused projection on the CPU: the same per-(camera, Gaussian) code as the CUDA
// kernels (projection_kernels.h / projection_math.h) on PyTorch's thread pool. The forward
// runs over all C * N pairs; the backward runs over Gaussians, each summing its cameras in
// order (no atomics, deterministic).
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "projection.h"
#include "projection_kernels.h"

namespace prebuild {
namespace gsplat {
namespace projection {
namespace {

constexpr int64_t kGrain = 1024;  // pairs (forward) or Gaussians (backward) per task

struct CpuBackend : OnCpu {
  static constexpr const char* forward_name = "prebuild::fully_fused_projection_forward";
  static constexpr const char* backward_name = "prebuild::fully_fused_projection_backward";

  static void run_forward(const ForwardArgs& a, const Tensor&) {
    torch::stable::parallel_for(0, a.scene.C * a.scene.N, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t idx = begin; idx < end; ++idx) forward_element(a, idx);
    });
  }

  static void run_backward(const BackwardArgs& a, const Tensor&) {
    const int64_t C = a.scene.C, N = a.scene.N;
    torch::stable::parallel_for(0, N, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        for (int64_t c = 0; c < C; ++c) {
          const int64_t idx = c * N + n;
          if (is_culled(a, idx)) continue;
          accumulate(a, n, backward_element(a, idx),
                     [](float* address, float value) { *address += value; });
        }
      }
    });
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CPU, m) { register_ops<CpuBackend>(m); }

}  // namespace projection
}  // namespace gsplat
}  // namespace prebuild
