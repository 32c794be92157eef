// The pack op family on the CPU: the CUDA kernels' per-element code (pack_kernels.h) on
// PyTorch's thread pool, and the host scan. Each element writes only its own outputs, so the
// result does not depend on the split.
#include <torch/csrc/stable/library.h>

#include <prebuild/cpu_grid.h>

#include "pack.h"
#include "pack_kernels.h"

namespace prebuild {
namespace gsplat {
namespace pack {
namespace {

constexpr int64_t kGrain = 16384;  // elements per task: a few loads and stores each

struct CpuBackend : HostScan {
  static constexpr const char* name = "prebuild::pack_visible";

  static void flag(const FlagArgs& a, const Tensor&) {
    cpu::for_each_element(a.n, kGrain, [&](int64_t i) { flag_element(a, i); });
  }
  static void pack(const PackArgs& a, const Tensor&) {
    cpu::for_each_element(a.n, kGrain, [&](int64_t i) { pack_element(a, i); });
  }
  static void unpack(const UnpackArgs& a, const Tensor&) {
    cpu::for_each_element(a.nnz, kGrain, [&](int64_t j) { unpack_element(a, j); });
    // A Gaussian's rows (one per camera that sees it) add to one place: in row order, on
    // one thread (no atomics on the CPU; the GPU's adds may come in any order).
    if (a.v_opacities || a.v_colors) {
      for (int64_t j = 0; j < a.nnz; ++j) {
        unpack_gaussian_element(a, j, [](float* address, float value) { *address += value; });
      }
    }
  }
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(prebuild, CPU, m) { register_ops<CpuBackend>(m); }

}  // namespace pack
}  // namespace gsplat
}  // namespace prebuild
