// quat_scale_to_covar_preci on the CPU: the same per-Gaussian code as the CUDA kernels
// (covariance_kernels.h / covariance_math.h) on PyTorch's thread pool. Each Gaussian writes
// only its own outputs and gradients, so the result does not depend on the split.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <prebuild/cpu_grid.h>

#include "covariance.h"
#include "covariance_kernels.h"

namespace prebuild {
namespace gsplat {
namespace covariance {
namespace {

constexpr int64_t kGrain = 4096;  // Gaussians per task (a few hundred flops each)

struct CpuBackend : OnCpu {
  static constexpr const char* forward_name = "prebuild::quat_scale_to_covar_preci_forward";
  static constexpr const char* backward_name = "prebuild::quat_scale_to_covar_preci_backward";

  static void run_forward(const ForwardArgs& a, const Tensor&) {
    cpu::for_each_element(a.n, kGrain, [&](int64_t i) { forward_element(a, i); });
  }

  static void run_backward(const BackwardArgs& a, const Tensor&) {
    cpu::for_each_element(a.n, kGrain, [&](int64_t i) { backward_element(a, i); });
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CPU, m) { register_ops<CpuBackend>(m); }

}  // namespace covariance
}  // namespace gsplat
}  // namespace prebuild
