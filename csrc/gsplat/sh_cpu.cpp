// Spherical harmonics on the CPU: the same per-direction code as the CUDA kernels
// (sh_kernels.h / sh_math.h) on PyTorch's thread pool, one task per run of directions.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <prebuild/cpu_grid.h>

#include "sh.h"
#include "sh_kernels.h"

namespace prebuild {
namespace gsplat {
namespace sh {
namespace {

constexpr int64_t kGrain = 2048;  // directions per task

struct CpuBackend : OnCpu {
  static constexpr const char* forward_name = "prebuild::spherical_harmonics_forward";
  static constexpr const char* backward_name = "prebuild::spherical_harmonics_backward";

  static void run_forward(const ForwardArgs& a, const Tensor&) {
    cpu::for_each_element(a.in.N, kGrain, [&](int64_t i) { forward_element(a, i); });
  }

  static void run_backward(const BackwardArgs& a, const Tensor&) {
    cpu::for_each_element(a.in.N, kGrain, [&](int64_t i) { backward_element(a, i); });
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CPU, m) { register_ops<CpuBackend>(m); }

}  // namespace sh
}  // namespace gsplat
}  // namespace prebuild
