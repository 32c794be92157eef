// compute_relocation on the CPU: the same per-Gaussian code as the CUDA kernel
// (relocation_kernels.h / relocation_math.h) on PyTorch's thread pool. Each Gaussian writes
// only its own outputs, so the result does not depend on the split.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <prebuild/cpu_grid.h>

#include "relocation.h"
#include "relocation_kernels.h"

namespace prebuild {
namespace gsplat {
namespace relocation {
namespace {

// Gaussians per task: up to n_max^2 / 2 terms each (1300 for gsplat's n_max = 51), though
// most ratios are small.
constexpr int64_t kGrain = 1024;

struct CpuBackend : OnCpu {
  static constexpr const char* name = "prebuild::compute_relocation";

  static void run(const Args& a, const Tensor&) {
    cpu::for_each_element(a.n, kGrain, [&](int64_t i) { relocation_element(a, i); });
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CPU, m) { register_ops<CpuBackend>(m); }

}  // namespace relocation
}  // namespace gsplat
}  // namespace prebuild
